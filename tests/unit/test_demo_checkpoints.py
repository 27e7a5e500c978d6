"""The demo keeps one copy of checkpoint_best.pt / checkpoint_last.pt when they are equal,
and a best checkpoint of an earlier update without its optimizer state."""

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
    assert demo.share_identical_checkpoints(tmp_path) == "linked"
    assert os.path.samefile(tmp_path / "checkpoint_best.pt", tmp_path / "checkpoint_last.pt")
    assert (tmp_path / "checkpoint_best.pt").read_bytes() == b"model state" * 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_best.pt", "checkpoint_last.pt"]


def test_different_checkpoints_stay_two_files(tmp_path):
    """A best checkpoint of an earlier update (ReLA-g's case: its loss at the end-of-epoch
    validation, update 247, was below that at update 250) is another model: kept, without
    its optimizer state, and it still loads for translation."""
    import torch

    demo = _demo()
    model = {"w": torch.arange(6.0)}
    optimizer = {"state": {0: {"exp_avg": torch.ones(1000), "exp_avg_sq": torch.ones(1000)}}}
    torch.save(
        {"model": model, "last_optimizer_state": optimizer, "extra_state": {"u": 250}}, tmp_path / "checkpoint_last.pt"
    )
    torch.save(
        {"model": model, "last_optimizer_state": optimizer, "extra_state": {"u": 247}}, tmp_path / "checkpoint_best.pt"
    )
    before = (tmp_path / "checkpoint_best.pt").stat().st_size
    assert demo.share_identical_checkpoints(tmp_path) == "slimmed"
    assert not os.path.samefile(tmp_path / "checkpoint_best.pt", tmp_path / "checkpoint_last.pt")
    best = torch.load(tmp_path / "checkpoint_best.pt", weights_only=False)
    assert best["last_optimizer_state"] is None and best["extra_state"] == {"u": 247}
    assert torch.equal(best["model"]["w"], model["w"])
    assert (tmp_path / "checkpoint_best.pt").stat().st_size < before / 3
    kept = torch.load(tmp_path / "checkpoint_last.pt", weights_only=False)["last_optimizer_state"]
    assert torch.equal(kept["state"][0]["exp_avg"], optimizer["state"][0]["exp_avg"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_best.pt", "checkpoint_last.pt"]
    assert demo.share_identical_checkpoints(tmp_path) is None  # once is enough
