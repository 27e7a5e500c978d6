"""The kernels' tests under a Triton that does not run them (a cluster's own torch 2.7-2.9
brings Triton 3.3-3.5; tests/conftest.py ``require_kernels`` and the ``kernels`` marker):
they skip with the reason, a module that imports the kernels and a marked test alike, and
under ``FSA_REQUIRE_KERNELS=1`` (CI) they fail with it.  Before, such a ``make test`` had 61
failures and 9 modules that did not import, and a CI machine without Triton skipped the
kernels' modules without a word (``pytest.importorskip``)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: a module that imports the kernels at its top, and a marked test in a module that does not
TESTS = (
    "tests/unit/test_kernels_aot.py",
    "tests/unit/test_model_config.py::test_a_named_backend_that_can_serve_no_call_is_refused_when_the_model_is_built",
)


def run_pytest(tmp_path, require):
    old = tmp_path / "old_triton"  # the installed Triton, saying it is 3.4.0 (sitecustomize runs first)
    old.mkdir(exist_ok=True)
    (old / "sitecustomize.py").write_text(
        'try:\n    import triton\nexcept ImportError:\n    pass\nelse:\n    triton.__version__ = "3.4.0"\n'
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(old), os.environ.get("PYTHONPATH", "")]))
    env.pop("FSA_REQUIRE_KERNELS", None)
    if require:
        env["FSA_REQUIRE_KERNELS"] = "1"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rsfE",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "--continue-on-collection-errors",
            *TESTS,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("require", [False, True], ids=["skip", "ci-fails"])
def test_under_a_triton_the_kernels_do_not_run_with_their_tests_skip_or_in_ci_fail(tmp_path, require):
    from fairseq_sparse_attn.kernels import served

    # where no Triton is installed (make install installs one) that is the reason instead
    version = "3.4.0" if served.installed_triton() else None
    reason = f"the Triton kernels do not run here: {served.triton_unserved(version)}"
    rc, out = run_pytest(tmp_path, require)
    if require:
        assert rc == 1, out[-3000:]
        assert f"{reason}; FSA_REQUIRE_KERNELS=1 requires them" in out, out[-3000:]
        # the module at its collection, the marked test at its setup: each names the reason
        assert "2 errors" in out and out.count(f"{reason}; FSA_REQUIRE_KERNELS=1 requires them") >= 2, out[-3000:]
        assert "ERROR collecting tests/unit/test_kernels_aot.py" in out, out[-3000:]
        assert "ERROR at setup of test_a_named_backend_that_can_serve_no_call_is_refused_when_the_model_is_built" in out
    else:
        assert rc == 0, out[-3000:]
        assert "2 skipped" in out and "SKIPPED [2] tests/conftest.py:" in out and reason in out, out[-3000:]
        assert "passed" not in out and "failed" not in out and "error" not in out, out[-3000:]
