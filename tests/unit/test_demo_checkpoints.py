"""The demo keeps one copy of checkpoint_best.pt / checkpoint_last.pt when they are equal."""

import importlib.util
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _demo():
    spec = importlib.util.spec_from_file_location("demo_script", REPO / "scripts" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_identical_checkpoints_become_one_file(tmp_path):
    demo = _demo()
    (tmp_path / "checkpoint_last.pt").write_bytes(b"model state" * 100)
    (tmp_path / "checkpoint_best.pt").write_bytes(b"model state" * 100)
    demo.share_identical_checkpoints(tmp_path)
    assert os.path.samefile(tmp_path / "checkpoint_best.pt", tmp_path / "checkpoint_last.pt")
    assert (tmp_path / "checkpoint_best.pt").read_bytes() == b"model state" * 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_best.pt", "checkpoint_last.pt"]


def test_different_checkpoints_stay_two_files(tmp_path):
    demo = _demo()
    (tmp_path / "checkpoint_last.pt").write_bytes(b"later state")
    (tmp_path / "checkpoint_best.pt").write_bytes(b"best state!")
    demo.share_identical_checkpoints(tmp_path)
    assert not os.path.samefile(tmp_path / "checkpoint_best.pt", tmp_path / "checkpoint_last.pt")
    assert (tmp_path / "checkpoint_best.pt").read_bytes() == b"best state!"
