"""Where the README's commands write (issue 34): every output file or folder they name
(``--out``, ``--output-dir``) of the first screen's commands lands in a path git ignores
(``demo_out/``), so following the README leaves no untracked file in the checkout; and
``fsa-analyze explore``'s default, ``explore.html``, is ignored in the repository root."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def first_screen_outputs():
    """(flag, path) of every --out / --output-dir in the README's code blocks before its
    first section (the commands a new user runs first)."""
    text = (REPO / "README.md").read_text(encoding="utf-8").split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return re.findall(r"(--out|--output-dir)[ =](\S+)", "\n".join(blocks))


def ignored(path):
    return subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO).returncode == 0


def test_the_readme_explore_command_writes_into_demo_out():
    outputs = first_screen_outputs()
    assert ("--out", "demo_out/explore.html") in outputs


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="not a git checkout")
def test_readme_outputs_and_the_explore_default_are_ignored_by_git():
    for _, path in first_screen_outputs():
        assert ignored(path), f"{path} (README) would be an untracked file in the checkout"
    assert ignored("explore.html")  # fsa-analyze explore's default --out, run in the checkout
    assert not ignored("docs/explore.html")  # only the root's default, not every file of that name
