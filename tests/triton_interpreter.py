"""Running Triton kernels on CPU tensors in tests, without leaking the interpreter.

Triton decides once per process, when it is imported, whether ``@triton.jit`` (and
triton.language's own functions, ``tl.sum`` ...) build interpreter or compiled kernels:
``TRITON_INTERPRET=1`` must be in the environment before the first ``import triton``, and
after that the process cannot switch.  torch's inductor also reads the variable while it
runs.  So the interpreter tests of a file run in a child pytest started with
``TRITON_INTERPRET=1`` (:func:`run_file_in_interpreter`), and the test process itself
keeps compiled-mode Triton (the ahead-of-time compile checks need it)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

#: the name of the driver test of a file (it starts the child; deselected there)
DRIVER = "test_in_triton_interpreter"


def triton_interpreted() -> bool:
    """Whether this process's Triton runs kernels in the interpreter."""
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    return not isinstance(tl.sum, JITFunction)


def run_file_in_interpreter(test_file: str, timeout: int = 600) -> None:
    """Runs ``test_file``'s tests in a child pytest with ``TRITON_INTERPRET=1``; fails
    with the tail of its output unless every test there passed."""
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    repo = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", test_file]
    cmd += ["-k", f"not {DRIVER}"]
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"interpreter tests of {test_file} failed:\n{out[-6000:]}"
    summary = out.strip().splitlines()[-1]
    assert " passed" in summary and "skipped" not in summary, out[-2000:]


def interpreter_only():
    """Marks a test that needs the interpreter: run by the file's driver test in a child
    process (:func:`run_file_in_interpreter`), skipped in a compiled-mode process."""
    return pytest.mark.skipif(not triton_interpreted(), reason=f"runs in the TRITON_INTERPRET=1 child of {DRIVER}")
