"""fairseq-train --checkpoint-activations end to end on presets that refused it before the
v2 attention core: word-level fixed patterns (per-batch word ids) and the ReLUFormer
regularized criterion (a loss built from returned intermediates).  Each run is compared
with the same run without the flag, update by update: the same losses over the first
updates (dropout included: the recomputation replays the forward's random state; later
updates drift apart by float summation order only, which training amplifies, so only the
first few are compared; one step's loss and gradients are compared at 1e-6 in
tests/unit/test_checkpointing.py)."""

import math
import re

import pytest

from test_end_to_end import train

UPDATES = 8
COMPARED = 4  # first updates compared
RUNS = {
    "word_patterns": ["--arch", "fixed_pattern_word_transformer_wmt_en_de", "--encoder-attention-heads", "8"],
    "reluformer": [
        "--arch",
        "reluformer_wmt_en_de",
        "--criterion",
        "relu_regularized_label_smoothed_cross_entropy",
        "--relu-reg-lambda",
        "0.5",
    ],
}


def train_losses(log):
    """(loss, reg or None) of every 'train_inner'/'train' line, in order."""
    lines = re.findall(r"\| (?:train_inner|train) \|(.*)$", log, re.M)  # "loss=" or "| loss "
    assert lines, log[-3000:]
    out = []
    for line in lines:
        loss = float(re.search(r"[ |]loss[= ]([\d.]+)", line).group(1))
        reg = re.search(r"[ |,]reg[= ]([\d.]+)", line)
        out.append((loss, float(reg.group(1)) if reg else None))
    return out


@pytest.mark.parametrize("name", list(RUNS))
def test_checkpoint_activations_trains_like_without(data, name, tmp_path):
    logs = {}
    for ckpt in (False, True):
        extra = (
            RUNS[name]
            + ["--log-interval", "1", "--disable-validation", "--no-save"]
            + (["--checkpoint-activations"] if ckpt else [])
        )
        proc = train(data, name, tmp_path / f"ckpt{ckpt}", extra=extra, updates=UPDATES)
        assert proc.returncode == 0, proc.stderr[-3000:]
        logs[ckpt] = train_losses(proc.stdout + proc.stderr)
    assert len(logs[True]) == len(logs[False]) >= UPDATES
    assert all(math.isfinite(loss) for loss, _ in logs[True])
    for (a, ra), (b, rb) in list(zip(logs[False], logs[True]))[:COMPARED]:
        assert abs(a - b) <= 0.002, (logs[False], logs[True])
        if name == "reluformer":  # the regularizer is logged and trained the same way
            assert ra is not None and rb is not None and abs(ra - rb) <= 0.0005
