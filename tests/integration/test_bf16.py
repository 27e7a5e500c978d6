"""``fairseq-train --bf16`` without torch_xla (compat/bf16_not_tpu.py): a real tiny training,
stock ``fairseq-train`` with the plugin as ``--user-dir``, on the CPU (``--cpu``; on a GPU
the same path runs on CUDA).  Every run goes through tests/fsa_train_probe.py, which records
the loss of each update and the model's parameters at the end."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import TINY_TRAIN_ARGS

REPO = Path(__file__).resolve().parents[2]
PLUGIN_DIR = str(REPO / "fairseq_sparse_attn_plugin")
PROBE = str(REPO / "tests" / "fsa_train_probe.py")
XLA_ERROR = "AttributeError: 'NoneType' object has no attribute 'xla_device'"
NOTICE = "--bf16 without torch_xla and without --tpu: bfloat16 on the CPU, not a TPU"


def fairseq_train(data, out, *flags, compat_off=""):
    """fairseq-train with the plugin as --user-dir: (process, losses by update, params)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSA_")}
    env.update(
        PYTHONPATH=str(REPO),
        OMP_NUM_THREADS="1",
        FSA_PROBE_DIR=str(out / "probe"),
        FSA_PROBE_COMMAND="fairseq-train",
        FSA_COMPAT_OFF=compat_off,
    )
    args = [data / "data-bin", "--user-dir", PLUGIN_DIR, "--arch", "rela_transformer_wmt_en_de", *TINY_TRAIN_ARGS]
    args += ["--save-dir", out / "ckpt", "--seed", "1", "--cpu", *flags]
    proc = subprocess.run(
        [sys.executable, PROBE, *map(str, args)], env=env, capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0:
        return proc, None, None
    lines = (out / "probe" / "updates.rank0.jsonl").read_text().splitlines()
    losses = {r["update"]: r["loss"] for r in map(json.loads, lines)}
    return proc, losses, torch.load(out / "probe" / "params.rank0.pt")


@pytest.fixture(scope="module")
def fp32_run(small_data, tmp_path_factory):
    proc, losses, params = fairseq_train(small_data, tmp_path_factory.mktemp("fp32"))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return losses, params


def test_bf16_trains_in_bfloat16_on_the_cpu(small_data, fp32_run, tmp_path):
    """Stock fairseq-train takes --bf16 for --tpu and fails in Trainer.__init__ (no
    torch_xla); with the patch the model trains in bfloat16: parameters bfloat16, losses
    within bf16 rounding of the float32 run's (same seed and batches) but not equal to
    them, checkpoints written, one line saying what was done."""
    stock, _, _ = fairseq_train(small_data, tmp_path / "stock", "--bf16", compat_off="bf16_not_tpu")
    assert stock.returncode != 0 and XLA_ERROR in stock.stderr, (stock.stdout + stock.stderr)[-3000:]

    proc, losses, params = fairseq_train(small_data, tmp_path / "bf16", "--bf16")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    log = proc.stdout + proc.stderr
    assert log.count(NOTICE) == 1, log[-3000:]
    assert "done training" in log
    assert {p.dtype for p in params.values() if p.is_floating_point()} == {torch.bfloat16}
    fp32_losses, fp32_params = fp32_run
    assert {p.dtype for p in fp32_params.values() if p.is_floating_point()} == {torch.float32}
    assert sorted(losses) == sorted(fp32_losses) == [1, 2]
    for update, loss in losses.items():
        assert loss != fp32_losses[update]
        assert loss == pytest.approx(fp32_losses[update], rel=5e-3), (losses, fp32_losses)
    state = torch.load(tmp_path / "bf16" / "ckpt" / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert (state["cfg"]["common"]["bf16"], state["cfg"]["common"]["tpu"]) == (True, False)


def test_bf16_with_tpu_asked_for_stays_fairseq_s(small_data, tmp_path):
    """--tpu given explicitly: fairseq's TPU path, unchanged (here: no torch_xla, so its
    error), and no line from the patch."""
    proc, _, _ = fairseq_train(small_data, tmp_path, "--bf16", "--tpu")
    assert proc.returncode != 0 and XLA_ERROR in proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    assert NOTICE not in proc.stdout + proc.stderr
