"""scripts/ci/test_fairseq.py (make test-fairseq): junit parsing, the intended-differences
table and the comparison, on hand-built examples."""

import os
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


def test_a_test_skipped_only_with_the_plugin_is_a_regression(tmp_path):
    stock = junit(tmp_path, "stock.xml")
    plugin = dict(stock, **{"test_utils.py::test_module_level": "skipped"})
    assert runner["compare"](stock, plugin, {}) == ([("test_utils.py::test_module_level", "skipped")], [])


def test_table_with_aligned_columns_and_parametrized_plugin_tests(tmp_path):
    md = """<!-- intended-differences -->
| fairseq test | reason | plugin test |
|:---|:---:|---:|
| `test_a.py::T::test_b` | why | `tests/test_p.py::test_q[fp16]` |
<!-- /intended-differences -->"""
    intended = runner["intended_differences"](md)
    assert intended == {"test_a.py::T::test_b": ("why", "tests/test_p.py::test_q[fp16]")}
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_p.py").write_text("def test_q(dtype):\n    pass\n")
    assert runner["check_plugin_tests"](intended, repo=tmp_path) == []
    missing = {"t": ("r", "tests/test_none.py::test_q")}
    assert runner["check_plugin_tests"](missing, repo=tmp_path) == [
        "t: plugin test tests/test_none.py::test_q not found"
    ]


@pytest.fixture
def fairseq_dir(tmp_path):
    tests = tmp_path / "fairseq" / "tests"
    tests.mkdir(parents=True)
    (tests / "test_train.py").write_text("def test_x():\n    pass\n")
    return tmp_path / "fairseq"


def fake_runs(monkeypatch, stock_xml, plugin_xml):
    """main() with run_passes replaced by one that writes the two junit files."""

    def run_passes(fairseq_dir, out, timeout):
        (out / "stock.xml").write_text(stock_xml)
        (out / "plugin.xml").write_text(plugin_xml)
        return 1.0

    monkeypatch.setitem(runner["main"].__globals__, "run_passes", run_passes)


def test_main_fails_on_a_regression_and_passes_without(tmp_path, fairseq_dir, monkeypatch, capsys):
    stock = JUNIT.format(finetune="", max_positions="")
    regressed = JUNIT.format(finetune='<error message="TypeError">t</error>', max_positions="")
    argv = ["--fairseq", str(fairseq_dir), "--out", str(tmp_path / "out")]
    fake_runs(monkeypatch, stock, regressed)
    assert runner["main"](argv) == 1
    out = capsys.readouterr().out
    assert "REGRESSION: test_train.py::TestLoadCheckpoint::test_finetune_from_model passes stock, error" in out
    assert "test-fairseq: 1 regressions" in out
    fake_runs(monkeypatch, stock, stock)
    assert runner["main"](argv) == 0
    assert "test-fairseq: 6 tests in 1 s; stock: 4 passed, 1 failed, 1 skipped" in capsys.readouterr().out


def test_main_refuses_a_stock_run_where_nothing_passed(tmp_path, fairseq_dir, monkeypatch):
    failed = JUNIT.replace('time="0.1"/>', 'time="0.1"><failure message="x">y</failure></testcase>')
    failed = failed.replace('time="3">{max_positions}', 'time="3"><failure message="x">y</failure>')
    failed = failed.format(finetune='<error message="E">e</error>')
    fake_runs(monkeypatch, failed, failed)
    with pytest.raises(SystemExit, match="no test passed stock"):
        runner["main"](["--fairseq", str(fairseq_dir), "--out", str(tmp_path / "out")])


def test_main_refuses_a_table_naming_a_missing_plugin_test(tmp_path, fairseq_dir, monkeypatch):
    md = tmp_path / "install.md"
    md.write_text(
        "<!-- intended-differences -->\n| fairseq test | reason | plugin test |\n|---|---|---|\n"
        "| `test_a.py::test_b` | why | `tests/unit/test_compat.py::test_no_such_test` |\n"
        "<!-- /intended-differences -->\n"
    )
    monkeypatch.setitem(runner["main"].__globals__, "INSTALL_MD", md)
    fake_runs(monkeypatch, JUNIT.format(finetune="", max_positions=""), JUNIT.format(finetune="", max_positions=""))
    with pytest.raises(SystemExit, match="plugin test tests/unit/test_compat.py::test_no_such_test not found"):
        runner["main"](["--fairseq", str(fairseq_dir), "--out", str(tmp_path / "out")])


def test_the_two_runs_differ_only_by_the_registered_plugin(tmp_path, fairseq_dir, monkeypatch):
    """run_passes with the processes stood in for: both run the same tests (fairseq's files
    and the chosen test_binaries cases) in a copy of fairseq's tests, with
    TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 and no FSA_ variable; only the plugin run has the
    hook on its path and ``-p fsa_register_plugin``, and the hook registers the plugin's
    --user-dir; the copy is removed afterwards and fairseq's folder is not written."""
    seen = {}

    class Proc:
        def __init__(self, cmd, cwd, env, stdout, stderr):
            name = "plugin" if "fsa_register_plugin" in cmd else "stock"
            hook = Path(cwd) / "hook" / "fsa_register_plugin.py"
            seen[name] = dict(cmd=cmd, cwd=Path(cwd), env=env, hook=hook.read_text() if hook.exists() else None)
            assert (Path(cwd) / "tests" / "test_train.py").is_file()

        def wait(self, timeout=None):
            return 0

    monkeypatch.setenv("FSA_REQUIRE_SHARED_DATA", "1")
    monkeypatch.setattr(runner["run_passes"].__globals__["subprocess"], "Popen", Proc)
    before = sorted(p.name for p in fairseq_dir.rglob("*"))
    out = tmp_path / "out"
    out.mkdir()
    runner["run_passes"](fairseq_dir, out, 60)
    stock, plugin = seen["stock"], seen["plugin"]
    targets = [a for a in stock["cmd"] if a.startswith("tests/")]
    assert targets == [a for a in plugin["cmd"] if a.startswith("tests/")]
    assert "tests/test_multihead_attention.py" in targets
    assert "tests/test_binaries.py::TestTranslation::test_max_positions" in targets
    assert stock["cmd"].count("-p") == 1 and plugin["cmd"].count("-p") == 2
    hook_dir = str(plugin["cwd"] / "hook")
    assert plugin["env"]["PYTHONPATH"].split(os.pathsep)[0] == hook_dir
    assert hook_dir not in stock["env"].get("PYTHONPATH", "")
    assert "fairseq_sparse_attn_plugin" in plugin["hook"] and "import_user_module" in plugin["hook"]
    for run in (stock, plugin):
        assert run["env"]["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] == "1"
        assert not [k for k in run["env"] if k.startswith("FSA_")]
    assert not stock["cwd"].exists()  # the copy removed
    assert sorted(p.name for p in fairseq_dir.rglob("*")) == before
