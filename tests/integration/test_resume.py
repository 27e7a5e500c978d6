"""Exact resume at any point and crash-safe checkpoints (issue 14), real runs.

Every run is ``fsa-train`` through tests/fsa_train_probe.py (per-update losses and example
ids, final parameters; interruptions at a chosen update).  The reference is the same
training uninterrupted.  300 pairs, 12 updates an epoch, 30 updates, a checkpoint every 5
updates, dropout and attention dropout 0.1: interruptions fall in epoch 2 and 3, where
stock fairseq rebuilds the epoch's batches differently on restart.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fairseq_sparse_attn.compat.crash_safe_checkpoints import checkpoint_problem
from fairseq_sparse_attn.writers import writer_of

from helpers import model_size_flags

REPO = Path(__file__).resolve().parents[2]
PROBE = str(REPO / "tests" / "fsa_train_probe.py")
TINY = [
    "--arch",
    "softmax_transformer_wmt_en_de",
    *model_size_flags(layers=1, dim=32, ffn=64, heads=2),
    "--share-all-embeddings",
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--max-tokens",
    "1000",
    "--num-workers",
    "0",
    "--log-format",
    "simple",
    "--log-interval",
    "1",
    "--no-epoch-checkpoints",
    "--dropout",
    "0.1",
    "--attention-dropout",
    "0.1",
    "--seed",
    "3",
    "--max-update",
    "30",
    "--save-interval-updates",
    "5",
    "--max-valid-steps",
    "2",
]


def train(data, run_dir, save_dir, **env):
    full_env = {
        k: v for k, v in os.environ.items() if not k.startswith(("FSA_PROBE", "FSA_COMPAT_OFF", "RANK", "WORLD_SIZE"))
    }
    # the step numbers of these tests (8 updates an epoch) are laid out for epochs that
    # batch every sentence; fairseq's own training batches (the default, issue 30) drop one
    # batch an epoch here.  Resume with fairseq's batches: tests/integration/test_cluster.py,
    # test_distributed.py
    full_env.update(
        PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", FSA_PROBE_DIR=str(run_dir), FSA_COMPLETE_TRAIN_BATCHES="1", **env
    )
    return subprocess.run(
        [sys.executable, PROBE, str(data / "data-bin"), *TINY, "--save-dir", str(save_dir)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def ok(proc):
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc.stdout + proc.stderr


def records(run_dir):
    return [json.loads(line) for line in open(Path(run_dir) / "updates.rank0.jsonl")]


def params(run_dir):
    return torch.load(Path(run_dir) / "params.rank0.pt")


def assert_continues_reference(resumed, reference, first_update):
    """The resumed run trains updates first_update..30 on the same examples with the same
    losses (bit for bit) and ends with the same parameters as the uninterrupted run."""
    got, ref = records(resumed), records(reference)
    assert [r["update"] for r in got] == list(range(first_update, 31))
    assert [r["ids"] for r in got] == [r["ids"] for r in ref[first_update - 1 :]]
    assert [r["loss"] for r in got] == [r["loss"] for r in ref[first_update - 1 :]]
    p, q = params(resumed), params(reference)
    assert p.keys() == q.keys() and all(torch.equal(p[k], q[k]) for k in p)


def no_temporary_files(save_dir):
    return not [p.name for p in Path(save_dir).iterdir() if p.name.endswith(".tmp")]


@pytest.fixture(scope="module")
def uninterrupted(small_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted")
    ok(train(small_data, out / "run", out / "ckpt"))
    assert max(records(out / "run")[-1]["ids"]) < 300
    return out / "run"


@pytest.fixture(scope="module")
def interrupted_in_epoch_2(small_data, tmp_path_factory):
    """SIGINT after update 17 (epoch 2; checkpoint_last.pt holds update 15)."""
    out = tmp_path_factory.mktemp("sigint")
    proc = train(small_data, out / "run1", out / "ckpt", FSA_PROBE_SIGNAL="INT@17")
    assert proc.returncode != 0 and "KeyboardInterrupt" in proc.stderr
    assert [r["update"] for r in records(out / "run1")][-1] == 17
    return out


def test_resume_after_sigint_inside_epoch_2_is_exact(small_data, uninterrupted, interrupted_in_epoch_2, tmp_path):
    save_dir = tmp_path / "ckpt"
    shutil.copytree(interrupted_in_epoch_2 / "ckpt", save_dir)
    log = ok(train(small_data, tmp_path / "run2", save_dir))
    assert "Loaded checkpoint" in log and "(epoch 2 @ 15 updates)" in log
    assert_continues_reference(tmp_path / "run2", uninterrupted, 16)


def test_stock_fairseq_resume_inside_epoch_2_is_not_exact(small_data, uninterrupted, interrupted_in_epoch_2, tmp_path):
    """The bug the exact_resume patch fixes: with it left out, the restarted run trains
    other batches in epoch 2 (fairseq builds them with numpy_seed(seed + 2))."""
    save_dir = tmp_path / "ckpt"
    shutil.copytree(interrupted_in_epoch_2 / "ckpt", save_dir)
    ok(train(small_data, tmp_path / "run2", save_dir, FSA_COMPAT_OFF="exact_resume"))
    got, ref = records(tmp_path / "run2"), records(uninterrupted)
    assert [r["update"] for r in got] == list(range(16, 31))
    assert [r["ids"] for r in got] != [r["ids"] for r in ref[15:]]
    # the same examples in the epoch, grouped into other batches
    assert sorted(i for r in got[:9] for i in r["ids"]) != sorted(i for r in ref[15:24] for i in r["ids"])


def test_sigkill_while_saving_leaves_an_intact_checkpoint_and_resume_is_exact(small_data, uninterrupted, tmp_path):
    """SIGKILL halfway through writing checkpoint_last.pt at update 25 (epoch 3): the
    plugin writes a temporary file (named with the killed process's pid), so
    checkpoint_last.pt still holds the end of epoch 2 (update 24); the restart removes the
    half-written temporary file, whose writer is gone, and continues exactly."""
    save_dir = tmp_path / "ckpt"
    proc = train(small_data, tmp_path / "run1", save_dir, FSA_PROBE_KILL_IN_COPY="25")
    assert proc.returncode == -9
    assert [writer_of(p)[0] for p in save_dir.glob("*.tmp")] == [str(save_dir / "checkpoint_last.pt")]
    assert checkpoint_problem(save_dir / "checkpoint_last.pt") is None
    log = ok(train(small_data, tmp_path / "run2", save_dir))
    assert "a checkpoint save that was interrupted" in log
    assert "checkpoint_last.pt (epoch 3 @ 24 updates)" in log
    assert no_temporary_files(save_dir)
    assert_continues_reference(tmp_path / "run2", uninterrupted, 25)


def test_stock_copy_truncates_and_restart_uses_the_newest_intact_checkpoint(small_data, uninterrupted, tmp_path):
    """Stock fairseq copies checkpoint_3_25.pt over checkpoint_last.pt in place: SIGKILL
    during that copy leaves it truncated (the crash_safe_checkpoints patch left out).
    The restart (patch on) says so in one line and resumes from the newest checkpoint that
    loads: checkpoint_3_25.pt or its copy checkpoint_best.pt (written just before)."""
    save_dir = tmp_path / "ckpt"
    proc = train(
        small_data, tmp_path / "run1", save_dir, FSA_PROBE_KILL_IN_COPY="25", FSA_COMPAT_OFF="crash_safe_checkpoints"
    )
    assert proc.returncode == -9
    last = save_dir / "checkpoint_last.pt"
    assert 0 < last.stat().st_size < (save_dir / "checkpoint_3_25.pt").stat().st_size
    with pytest.raises(Exception):
        torch.load(last, weights_only=False)
    log = ok(train(small_data, tmp_path / "run2", save_dir))
    warnings = [line for line in log.splitlines() if "resuming from" in line]
    assert len(warnings) == 1
    assert f"{last} is truncated or not a torch checkpoint" in warnings[0]
    used = warnings[0].split("resuming from ")[1].split(",")[0]
    assert used in (str(save_dir / "checkpoint_3_25.pt"), str(save_dir / "checkpoint_best.pt"))
    assert f"Loaded checkpoint {used} (epoch 3 @ 25 updates)" in log
    assert_continues_reference(tmp_path / "run2", uninterrupted, 26)
    assert checkpoint_problem(last) is None  # rewritten by the resumed run


def test_sigkill_between_saves_resumes_exactly(small_data, uninterrupted, tmp_path):
    """SIGKILL after update 23 (epoch 2, last checkpoint at 20)."""
    save_dir = tmp_path / "ckpt"
    proc = train(small_data, tmp_path / "run1", save_dir, FSA_PROBE_SIGNAL="KILL@23")
    assert proc.returncode == -9
    ok(train(small_data, tmp_path / "run2", save_dir))
    assert_continues_reference(tmp_path / "run2", uninterrupted, 21)
