"""scripts/ci/test_fairseq.py (make test-fairseq): junit parsing, the intended-differences
table and the comparison, on hand-built examples."""

import runpy
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
runner = runpy.run_path(str(REPO / "scripts" / "ci" / "test_fairseq.py"))

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.test_train.TestLoadCheckpoint" name="test_load_partial_checkpoint" time="0.1"/>
<testcase classname="tests.test_train.TestLoadCheckpoint" name="test_finetune_from_model" time="0.1">{finetune}</testcase>
<testcase classname="tests.test_utils" name="test_module_level" time="0.1"/>
<testcase classname="tests.test_binaries.TestTranslation" name="test_max_positions" time="3">{max_positions}</testcase>
<testcase classname="tests.test_multihead_attention" name="test_mask[0]" time="0.1"><failure message="x">uint8</failure></testcase>
<testcase classname="tests.test_dictionary.TestDictionary" name="test_skipped" time="0"><skipped message="no"/></testcase>
</testsuite></testsuites>
"""


def junit(tmp_path, name, finetune="", max_positions=""):
    path = tmp_path / name
    path.write_text(JUNIT.format(finetune=finetune, max_positions=max_positions))
    return runner["outcomes"](path)


def test_outcomes_by_test_id(tmp_path):
    got = junit(tmp_path, "a.xml", finetune='<error message="TypeError">t</error>')
    assert got == {
        "test_train.py::TestLoadCheckpoint::test_load_partial_checkpoint": "passed",
        "test_train.py::TestLoadCheckpoint::test_finetune_from_model": "error",
        "test_utils.py::test_module_level": "passed",
        "test_binaries.py::TestTranslation::test_max_positions": "passed",
        "test_multihead_attention.py::test_mask[0]": "failed",
        "test_dictionary.py::TestDictionary::test_skipped": "skipped",
    }


def test_a_test_passing_stock_and_failing_with_the_plugin_is_a_regression(tmp_path):
    stock = junit(tmp_path, "stock.xml")
    plugin = junit(
        tmp_path,
        "plugin.xml",
        finetune='<error message="TypeError">t</error>',
        max_positions='<failure message="IndexError">i</failure>',
    )
    del plugin["test_utils.py::test_module_level"]  # a test the plugin run lost counts too
    intended = {"test_binaries.py::TestTranslation::test_max_positions": ("why", "tests/unit/x.py::test_y")}
    regressions, excused = runner["compare"](stock, plugin, intended)
    assert regressions == [
        ("test_train.py::TestLoadCheckpoint::test_finetune_from_model", "error"),
        ("test_utils.py::test_module_level", "missing"),
    ]
    assert excused == [("test_binaries.py::TestTranslation::test_max_positions", "failed")]
    # failing stock (multihead's uint8 masks on torch 2.13) or skipped: never a regression
    assert runner["compare"](stock, stock, {}) == ([], [])


def test_intended_differences_table():
    md = """text
<!-- intended-differences -->
| fairseq test | reason | plugin test |
|---|---|---|
| `test_a.py::T::test_b` | the reason | `tests/unit/test_c.py::test_d` |
<!-- /intended-differences -->
"""
    assert runner["intended_differences"](md) == {
        "test_a.py::T::test_b": ("the reason", "tests/unit/test_c.py::test_d")
    }
    with pytest.raises(ValueError, match="without reason or plugin test"):
        runner["intended_differences"](md.replace("the reason", ""))
    with pytest.raises(ValueError, match="no table"):
        runner["intended_differences"]("no table here")


def test_the_projects_table_names_existing_plugin_tests():
    intended = runner["intended_differences"]((REPO / "docs" / "install.md").read_text(encoding="utf-8"))
    assert intended
    assert runner["check_plugin_tests"](intended) == []
    assert runner["check_plugin_tests"]({"t": ("r", "tests/unit/test_compat.py::test_no_such_test")}) == [
        "t: plugin test tests/unit/test_compat.py::test_no_such_test not found"
    ]
