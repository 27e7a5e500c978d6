"""``benchmarks/train_ab.py`` trains what ``fairseq-train`` trains (real runs on the CPU, a
small synthetic corpus), and its whole run writes the paired rounds auto's rule reads.
Nothing here is timed: the timing is for a GPU (docs/performance.md, "Paired training
blocks in one process")."""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_gpu  # noqa: E402
import train_ab  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
SETTINGS = argparse.Namespace(max_tokens=256, max_update=10**9, log_interval=10**9, cpu=True)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return bench_gpu.synthetic_corpus(tmp_path_factory.mktemp("train_ab"), pairs=120)


def python(code, *args):
    p = subprocess.run([sys.executable, "-c", code, *args], env=ENV, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    return p


HARNESS = """
import sys, torch
sys.path.insert(0, sys.argv[1])
import train_ab
run = train_ab.Run(sys.argv[2], sys.argv[5:])
run.train(int(sys.argv[3]))
torch.save({k: v.detach().clone() for k, v in run.trainer.model.state_dict().items()}, sys.argv[4])
print("updates", run.trainer.get_num_updates())
"""


EPOCH_SHAPES = """
import sys
sys.path.insert(0, sys.argv[1])
import train_ab
run = train_ab.Run("softmax", sys.argv[2:])
n = run.epoch_batches()
shape = lambda b: (tuple(b["net_input"]["src_tokens"].shape), tuple(b["target"].shape))
first = [shape(run.next_batch()) for _ in range(n)]
epoch = run.epoch_itr.epoch
second = [shape(run.next_batch()) for _ in range(n)]
print(n, len(set(first)), epoch, run.epoch_itr.epoch, sorted(first) == sorted(second))
"""


def test_the_epoch_warm_up_meets_every_batch_shape_the_blocks_meet(corpus):
    """``--warmup-updates epoch`` (the default): the warm-up's updates are one epoch's
    batches, so the first timed block starts the next epoch, whose batches have the shapes
    the warm-up met (fairseq's batches are fixed and only their order shuffled)."""
    argv = train_ab.fairseq_args(corpus, "softmax", "fp32", SETTINGS)
    out = python(EPOCH_SHAPES, str(REPO / "benchmarks"), *argv)
    n, shapes, epoch, then, same = out.stdout.split()[-5:]
    assert int(n) > 3 and int(shapes) > 3  # several batches of several shapes
    assert (epoch, then, same) == ("1", "2", "True")


@pytest.mark.parametrize("preset", ["rela_g"])
def test_a_block_trains_what_fairseq_train_trains(corpus, tmp_path, preset):
    """Three updates of the harness give the very weights ``fairseq-train`` saves after
    three updates of the same arguments: the same set-up, batches, optimizer and dropout."""
    argv = train_ab.fairseq_args(corpus, preset, "fp32", SETTINGS)
    out = python(HARNESS, str(REPO / "benchmarks"), preset, "3", str(tmp_path / "ours.pt"), *argv)
    assert "updates 3" in out.stdout
    ours = torch.load(tmp_path / "ours.pt")
    stock_argv = [a for a in argv if a != "--no-save"]
    i = stock_argv.index("--save-dir")
    stock_argv[i + 1] = str(tmp_path / "save")
    stock_argv[stock_argv.index("--max-update") + 1] = "3"
    p = subprocess.run(
        [sys.executable, "-m", "fairseq_cli.train", *stock_argv], env=ENV, capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 0, p.stderr[-3000:]
    theirs = torch.load(tmp_path / "save" / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    assert set(ours) == set(theirs)
    changed = 0
    for name, value in ours.items():
        assert torch.equal(value, theirs[name]), name
        changed += 1
    assert changed > 100


def test_a_run_writes_paired_rounds_that_auto_s_rule_reads(corpus, tmp_path):
    """The whole script on the CPU: one round of blocks per line as it goes, the result in
    make bench-gpu's layout, every round's blocks from the same batches."""
    out = tmp_path / "out"
    p = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "train_ab.py"),
            "--cpu",
            "--dtype",
            "fp32",
            "--presets",
            "rela_g",
            "--blocks",
            "3",
            "--block-updates",
            "2",
            "--warmup-updates",
            "1",
            "--max-tokens",
            "256",
            "--data",
            str(corpus),
            "--out",
            str(out),
        ],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [json.loads(x) for x in (out / "train_ab_blocks.jsonl").read_text().splitlines()]
    assert [x["round"] for x in lines] == [1, 2, 3]
    assert all(set(x["ups"]) == {"softmax", "rela_g"} for x in lines)  # the baseline is added
    result = json.loads((out / "train_ab.json").read_text())
    part = result["parts"]["train_ab"]["fp32"]
    assert part["blocks"] == lines and part["settings"]["presets"] == ["softmax", "rela_g"]
    assert part["summary"]["rela_g"]["ratio_to_softmax"]["rounds"] == 3
    assert part["overflows"] == {"softmax": 0, "rela_g": 0}
    assert result["provenance"]["git_commit"]
    assert "| rela_g |" in p.stdout
