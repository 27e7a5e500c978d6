"""fairseq 0.12.3's own tests, stock and with the plugin registered, compared test by test.

    python scripts/ci/test_fairseq.py [--fairseq DIR] [--out DIR]      (make test-fairseq)

The tests are copied from ``DIR/tests`` (default ``../shared/peer/fairseq-v0.12.3`` beside
the repository) into a temporary folder and run from there; ``DIR`` is never written.
Two pytest runs, in parallel, each writing a junit xml:

- stock: nothing of the plugin imported;
- plugin: a pytest plugin (``-p fsa_register_plugin``) registers the plugin before any test
  exactly as ``--user-dir "$(fsa-user-dir)"`` does: fairseq's own
  ``utils.import_user_module`` on that folder.

Both runs set ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` (stock fairseq cannot read its
checkpoints on torch >= 2.6 otherwise; the comparison is about the plugin's patches).
A test that passes stock and fails (or errors, or is missing) with the plugin is a
regression, unless docs/install.md lists it in its table of intended differences
(between ``<!-- intended-differences -->`` and ``<!-- /intended-differences -->``) with a
reason and the plugin's own test of the intended behaviour.  Exit status 1 on a
regression, naming each.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_FAIRSEQ = REPO.parent / "shared" / "peer" / "fairseq-v0.12.3"
INSTALL_MD = REPO / "docs" / "install.md"
TABLE_START, TABLE_END = "<!-- intended-differences -->", "<!-- /intended-differences -->"

FILES = [
    "test_checkpoint_utils.py",
    "test_train.py",
    "test_sequence_generator.py",
    "test_multihead_attention.py",
    "test_iterators.py",
    "test_dictionary.py",
    "test_data_utils.py",
    "test_utils.py",
    "test_token_block_dataset.py",
]
# the CPU translation tests of test_binaries that fit the time (train + generate of tiny
# models; the batching, size filtering, checkpoint and generate paths the patches touch)
BINARIES = [
    "TestTranslation::test_max_positions",
    "TestTranslation::test_generation",
    "TestTranslation::test_transformer",
    "TestTranslation::test_update_freq",
    "TestTranslation::test_raw",
]

REGISTER = '''"""pytest plugin: register fairseq_sparse_attn as fairseq's --user-dir does."""
import argparse

from fairseq import utils

utils.import_user_module(argparse.Namespace(user_dir={user_dir!r}))
'''


def outcomes(junit_xml):
    """{test id: "passed" | "failed" | "error" | "skipped"} of a pytest junit xml; the id is
    ``file.py::Class::name`` (``file.py::name`` for a module-level test)."""
    result = {}
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        name = case.get("name", "")
        # classname "tests.test_train.TestLoadCheckpoint" or "tests.test_utils"
        module = next((i for i, p in enumerate(parts) if p.startswith("test_")), len(parts) - 1)
        test_id = "::".join([parts[module] + ".py", *parts[module + 1 :], name])
        tags = {child.tag for child in case}
        if "error" in tags:
            result[test_id] = "error"
        elif "failure" in tags:
            result[test_id] = "failed"
        elif "skipped" in tags:
            result[test_id] = "skipped"
        else:
            result[test_id] = "passed"
    return result


def intended_differences(markdown):
    """{test id: (reason, plugin test)} from the marked table of docs/install.md; a row
    without a reason or a plugin test is a ValueError naming it."""
    if TABLE_START not in markdown or TABLE_END not in markdown:
        raise ValueError(f"docs/install.md: no table between {TABLE_START} and {TABLE_END}")
    block = markdown.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0]
    rows = {}
    for line in block.splitlines():
        line = line.strip()
        if not line.startswith("|") or re.fullmatch(r"\|[\s:|-]+\|", line):
            continue
        cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
        if cells[0].lower().startswith("fairseq test"):
            continue  # the header
        if len(cells) != 3 or not all(cells):
            raise ValueError(f"docs/install.md: intended difference without reason or plugin test: {line}")
        rows[cells[0]] = (cells[1], cells[2])
    return rows


def compare(stock, plugin, intended):
    """(regressions, intended ones seen): tests passing stock and not with the plugin."""
    regressions, excused = [], []
    for test_id, outcome in sorted(stock.items()):
        if outcome != "passed" or plugin.get(test_id) == "passed":
            continue
        got = plugin.get(test_id, "missing")
        (excused if test_id in intended else regressions).append((test_id, got))
    return regressions, excused


def check_plugin_tests(intended, repo=REPO):
    """The plugin test named by each row exists (file, and the test function in it)."""
    problems = []
    for test_id, (_, plugin_test) in intended.items():
        path, _, name = plugin_test.partition("::")
        file = repo / path
        if not file.is_file() or (name and f"def {name.split('[')[0]}(" not in file.read_text()):
            problems.append(f"{test_id}: plugin test {plugin_test} not found")
    return problems


def pytest_command(targets, junit, extra=()):
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, f"--junitxml={junit}", *targets]


def run_passes(fairseq_dir, out, timeout):
    work = Path(tempfile.mkdtemp(prefix="fsa-fairseq-tests-"))
    try:
        shutil.copytree(Path(fairseq_dir) / "tests", work / "tests")
        hook = work / "hook"
        hook.mkdir()
        user_dir = str(REPO / "fairseq_sparse_attn_plugin")
        (hook / "fsa_register_plugin.py").write_text(REGISTER.format(user_dir=user_dir))
        targets = [f"tests/{f}" for f in FILES] + [f"tests/test_binaries.py::{t}" for t in BINARIES]
        base = {k: v for k, v in os.environ.items() if not k.startswith("FSA_")}
        base.update(TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1", OMP_NUM_THREADS="1")
        repo_path = base.get("PYTHONPATH", "")
        stock_env = dict(base)
        # stock: no plugin on the path beyond what is installed; nothing imports it
        plugin_env = dict(base, PYTHONPATH=os.pathsep.join(p for p in (str(hook), str(REPO), repo_path) if p))
        runs = {}
        start = time.time()
        for name, env, extra in (("stock", stock_env, ()), ("plugin", plugin_env, ("-p", "fsa_register_plugin"))):
            log = open(out / f"{name}.log", "w")
            cmd = pytest_command(targets, out / f"{name}.xml", extra)
            runs[name] = (subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT), log)
        for name, (proc, log) in runs.items():
            try:
                proc.wait(timeout=max(1, timeout - (time.time() - start)))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise SystemExit(
                    f"test-fairseq: the {name} run took more than {timeout} s ({out / (name + '.log')})"
                ) from None
            finally:
                log.close()
        return time.time() - start
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="test_fairseq.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--fairseq", default=str(DEFAULT_FAIRSEQ), help="fairseq's tests: DIR/tests (not written)")
    parser.add_argument("--out", default="test-fairseq-out", help="junit xml and logs of both runs")
    parser.add_argument("--timeout", type=int, default=900, help="seconds for both runs together")
    args = parser.parse_args(argv)
    if not (Path(args.fairseq) / "tests" / "test_train.py").is_file():
        sys.exit(f"test-fairseq: {args.fairseq}/tests/test_train.py not found: pass --fairseq DIR (fairseq v0.12.3)")
    try:
        intended = intended_differences(INSTALL_MD.read_text(encoding="utf-8"))
    except ValueError as e:
        sys.exit(f"test-fairseq: {e}")
    problems = check_plugin_tests(intended)
    if problems:
        sys.exit("test-fairseq: docs/install.md: " + "; ".join(problems))
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    seconds = run_passes(args.fairseq, out, args.timeout)
    stock, plugin = outcomes(out / "stock.xml"), outcomes(out / "plugin.xml")
    if not any(o == "passed" for o in stock.values()):
        sys.exit(f"test-fairseq: no test passed stock ({out / 'stock.log'})")
    regressions, excused = compare(stock, plugin, intended)
    count = {o: sum(1 for v in stock.values() if v == o) for o in ("passed", "failed", "error", "skipped")}
    print(
        f"test-fairseq: {len(stock)} tests in {seconds:.0f} s; stock: {count['passed']} passed, "
        f"{count['failed'] + count['error']} failed, {count['skipped']} skipped"
    )
    for test_id, got in excused:
        print(f"  intended difference: {test_id} ({got} with the plugin): {intended[test_id][0]}")
    for test_id, got in regressions:
        print(f"  REGRESSION: {test_id} passes stock, {got} with the plugin")
    if regressions:
        print(f"test-fairseq: {len(regressions)} regressions (logs: {out})")
        return 1
    print("test-fairseq: no regression with the plugin")
    return 0


if __name__ == "__main__":
    sys.exit(main())
