"""``make install OFFLINE=wheelhouse/`` (scripts/install.sh, issue 22.5) without the
network: the dry run prints the pip commands, which must install only from the
wheelhouse (--no-index), never torch, and fairseq-fixed / entmax without their
dependencies (they require torch and torchaudio); bad input is one clear error line."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"


def install(offline, dry_run=True):
    env = {**os.environ, "OFFLINE": str(offline), "PYTHON": sys.executable}
    if dry_run:
        env["FSA_INSTALL_DRY_RUN"] = "1"
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "install.sh")], capture_output=True, text=True, env=env, timeout=120
    )


def wheelhouse(tmp_path, tag=TAG):
    d = tmp_path / "wheelhouse"
    d.mkdir()
    (d / f"fairseq_fixed-0.12.3.1-{tag}-{tag}-manylinux_2_28_x86_64.whl").touch()
    (d / "fairseq_sparse_attn-0.1.0-py3-none-any.whl").touch()
    return d


def test_offline_dry_run_installs_only_from_the_wheelhouse_and_keeps_torch(tmp_path):
    d = wheelhouse(tmp_path)
    p = install(d)
    assert p.returncode == 0, p.stderr
    commands = [line for line in p.stdout.splitlines() if line.startswith("[dry-run]")]
    assert len(commands) == 3
    for c in commands:
        assert "-m pip install" in c and "--no-index" in c and f"--find-links {d}" in c
        assert " torch" not in c and "torchaudio" not in c
    assert "hydra-core==1.3.2" in commands[0] and "omegaconf==2.3.0" in commands[0]
    assert "--no-deps fairseq-fixed==0.12.3.1 entmax>=1.1" in commands[1]
    assert commands[2].endswith("--no-deps fairseq_sparse_attn")
    assert "keeping torch" in p.stdout


def test_offline_errors_are_one_line(tmp_path):
    p = install(tmp_path / "missing")
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"make install: error: OFFLINE={tmp_path / 'missing'} is not a directory "
        f"(make wheelhouse PYTHON_VERSION={sys.version_info[0]}.{sys.version_info[1]} writes one)"
    ]
    p = install(wheelhouse(tmp_path, tag="cp39"))
    assert p.returncode == 2
    assert "no fairseq-fixed wheel for python" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_wheelhouse_needs_a_python_version():
    p = subprocess.run(
        ["bash", str(REPO / "scripts" / "wheelhouse.sh")],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHON_VERSION"},
        timeout=60,
    )
    assert p.returncode != 0 and "PYTHON_VERSION" in p.stderr
    p = subprocess.run(
        ["bash", str(REPO / "scripts" / "wheelhouse.sh")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON_VERSION": "3.x"},
        timeout=60,
    )
    assert p.returncode == 2 and "PYTHON_VERSION must look like 3.12" in p.stderr


def test_an_old_python_is_one_line_before_any_work(tmp_path):
    """Python 3.9 (torch 2.13 needs 3.10): one line naming the interpreter, exit 2, no pip."""
    fake = tmp_path / "python3.9"
    fake.write_text(
        "#!/usr/bin/env bash\n"  # a Python 3.9 as far as install.sh can tell
        'if [[ "$*" == *"sys.exit"* ]]; then exit 1; fi\n'
        "echo 3.9\n"
    )
    fake.chmod(0o755)
    env = {**os.environ, "PYTHON": str(fake), "FSA_INSTALL_DRY_RUN": "1"}
    p = subprocess.run(["bash", str(REPO / "scripts" / "install.sh")], capture_output=True, text=True, env=env)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"make install: error: {fake} is Python 3.9, the plugin needs Python 3.10 or later "
        "(PYTHON=... picks another interpreter)"
    ]
    assert "[install]" not in p.stdout


def test_the_plugin_s_wheel_keeps_auto_s_measured_choices(tmp_path):
    """The offline install puts the plugin's wheel on the node: no checkout, so no
    docs/results.  The triton backend's auto reads the package's table
    (MEASURED_FASTER), so it takes the kernels where the recorded results show them faster
    there too; read from docs/results it took them nowhere (2026-11-27).  The wheel is built
    from a copy of the sources (nothing written in the checkout) and imported in a process
    without the checkout on its path."""
    from fairseq_sparse_attn.attention.backends import triton as tb

    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("fairseq_sparse_attn", "fairseq_sparse_attn_plugin"):
        shutil.copytree(REPO / package, src / package, ignore=ignore)
    shutil.copy(REPO / "setup.py", src / "setup.py")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    build = ["wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(src)]
    subprocess.run(pip + build, check=True, capture_output=True, cwd=tmp_path, timeout=300)
    (wheel,) = wheels.glob("fairseq_sparse_attn-*.whl")
    subprocess.run(pip + ["install", "--no-deps", "--target", str(site), str(wheel)], check=True, capture_output=True)
    probe = (
        "import json, fairseq_sparse_attn.attention.backends.triton as tb; "
        "print(json.dumps([tb.__file__, tb.RESULTS.exists(), sorted(tb.MEASURED_FASTER)]))"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    # from tmp_path, which holds no package (python -P is 3.11+; the plugin runs on 3.10)
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    where, has_docs, faster = json.loads(out.stdout.strip().splitlines()[-1])
    assert where.startswith(str(site)) and not has_docs
    assert [tuple(x) for x in faster] == sorted(tb.measured_faster()) != []


def test_make_install_reinstalls_the_plugin_when_its_commands_changed(tmp_path):
    """An installed plugin was kept by ``make install`` whatever setup.py said, so a command
    pointed at another function (fsa-length-bleu at ``main``, whose ``cli_main`` exited 1
    after every run) kept calling the old one.  The check reads the installed metadata, not
    a stale egg-info in the checkout."""
    script = REPO / "scripts" / "installed_commands_current.py"
    assert (
        'commands_current() { "$PY" scripts/installed_commands_current.py; }'
        in (REPO / "scripts" / "install.sh").read_text()
    )
    run = lambda setup: subprocess.run([sys.executable, str(script), str(setup)], cwd=REPO).returncode  # noqa: E731
    assert run(REPO / "setup.py") == 0  # this checkout, installed (make install)
    changed = tmp_path / "setup.py"
    text = (REPO / "setup.py").read_text()
    changed.write_text(text.replace("length_bleu:main", "length_bleu:cli_main"))
    assert run(changed) == 1
    changed.write_text(text.replace('"fsa-analyze =', '"fsa-new = fairseq_sparse_attn.cli:train",\n"fsa-analyze ='))
    assert run(changed) == 1
