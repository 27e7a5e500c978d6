"""``make install`` installs the Triton version the installed torch pins, on CPU machines too
(issue 31.4; scripts/install_triton.sh, scripts/triton_pin.py): from torch's metadata where
it declares one (CUDA wheels), else from torch's minor version (CPU wheels declare none);
idempotent; an unknown torch is one clear line.  Dry runs (FSA_INSTALL_DRY_RUN) print the
pip command instead of running it, as in test_install_offline.py."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "install_triton.sh"


def _pin_module():
    spec = importlib.util.spec_from_file_location("triton_pin", REPO / "scripts" / "triton_pin.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pin_from_torch_metadata_else_from_the_minor_version():
    pinned = _pin_module().pinned_triton
    # a CUDA wheel declares it, with a marker that holds on Linux x86-64 (these machines)
    linux = 'triton==3.6.0; platform_system == "Linux" and platform_machine == "x86_64"'
    assert pinned("2.11.0+cu128", ["filelock", linux]) == "3.6.0"
    # a marker that does not hold here is not used: the minor version decides
    assert pinned("2.13.0", ['triton==9.9.9; platform_system == "Windows"']) == "3.7.1"
    # CPU wheels declare none
    assert pinned("2.13.0+cpu", ["filelock", "sympy>=1.13.3"]) == "3.7.1"
    assert pinned("2.11.0+cpu", []) == "3.6.0"
    assert pinned("1.13.1", []) is None


def run(*args, **env):
    return subprocess.run(
        [*args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHON": sys.executable, **env},
    )


def test_unknown_torch_is_one_clear_line():
    p = run(sys.executable, "scripts/triton_pin.py", "1.13.1", "filelock")
    assert p.returncode == 3 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        "make install: no Triton version known for torch 1.13.1 (its metadata pins none; "
        "known: 2.10 -> 3.6.0, 2.11 -> 3.6.0, 2.12 -> 3.7.0, 2.13 -> 3.7.1); set TRITON_VERSION=X.Y.Z"
    ]


def test_install_step_installs_the_pin_once():
    """A version other than the installed one is installed (dry run: printed); the
    installed pin is kept (nothing run)."""
    p = run("bash", str(SCRIPT), FSA_INSTALL_DRY_RUN="1", TRITON_VERSION="0.0.1")
    assert p.returncode == 0, p.stderr
    assert (
        p.stdout.splitlines()[-1]
        == f"[dry-run] {sys.executable} -m pip install --disable-pip-version-check triton==0.0.1"
    )
    try:
        import importlib.metadata as md

        installed = md.version("triton")
    except Exception:  # triton not installed: nothing more to check here
        return
    p = run("bash", str(SCRIPT), FSA_INSTALL_DRY_RUN="1", TRITON_VERSION=installed)
    assert p.returncode == 0, p.stderr
    # (after the note of a version the kernels do not run with, where that is installed)
    assert (
        p.stdout.strip().splitlines()[-1] == f"[install] keeping installed triton=={installed} (the version torch pins)"
    )
    assert "[dry-run]" not in p.stdout


def test_make_install_runs_the_triton_step():
    assert 'PYTHON="$PY" bash scripts/install_triton.sh' in (REPO / "scripts" / "install.sh").read_text()


def test_a_triton_the_kernels_do_not_run_with_is_said_at_install():
    """A cluster's own torch 2.8 pins Triton 3.4.0, which make install installs (it keeps
    the installed torch): one line says that the triton backend is refused under it."""
    p = run("bash", str(SCRIPT), FSA_INSTALL_DRY_RUN="1", TRITON_VERSION="3.4.0")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == (
        "[install] note: Triton 3.4.0 is installed; the kernels run with Triton 3.6 or 3.7 (the versions torch "
        "2.10 to 2.13 pin): --attn-backend triton is refused under it, and auto runs the other backends"
    )
    p = run("bash", str(SCRIPT), FSA_INSTALL_DRY_RUN="1", TRITON_VERSION="3.6.0")
    assert "note:" not in p.stdout


def test_check_kernels_compiles_under_the_newest_patch_of_each_other_minor_version():
    """make check-kernels compiles again under each other Triton minor version that users'
    torch pins (3.6.0 for torch 2.10/2.11 beside an installed 3.7.1), not under another patch
    of the installed one (torch 2.12's 3.7.0: ~10 minutes of CI's compiling)."""
    versions = _pin_module().kernel_check_versions
    assert versions("3.7.1") == ["3.6.0"]
    assert versions("3.6.0") == ["3.7.1"]
    assert versions("3.4.0") == ["3.6.0", "3.7.1"]
    assert "triton_pin.kernel_check_versions(sys.argv[1])" in (REPO / "scripts" / "check_kernels.sh").read_text()
