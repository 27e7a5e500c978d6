"""scripts/fixed_patterns/head_ablation.py before any fairseq-generate run: the heads of a
checkpoint and the patterns they carry, and a bad --heads refused in one line without
creating the output folder."""

import runpy
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
ablation = runpy.run_path(str(REPO / "scripts" / "fixed_patterns" / "head_ablation.py"))


@pytest.fixture
def checkpoint(tmp_path):
    """A checkpoint's configuration as fairseq saves it (cfg.model), without weights: 4
    encoder heads, the first two fixed patterns at the word level."""
    path = tmp_path / "checkpoint.pt"
    model = {
        "encoder_attention_heads": 4,
        "encoder_fixed_patterns": "previous,next",
        "encoder_fixed_pattern_unit": "word",
    }
    torch.save({"cfg": {"model": model}}, path)
    return path


def test_heads_and_their_patterns(checkpoint):
    assert ablation["encoder_heads"](checkpoint) == [
        (0, "previous (word)"),
        (1, "next (word)"),
        (2, "learned"),
        (3, "learned"),
    ]


@pytest.mark.parametrize(
    "heads, message",
    [
        ("1,x", "--heads '1,x': expected comma-separated head indices (e.g. 1,7)"),
        ("none", "--heads 'none': expected comma-separated head indices"),
        ("-1", "--heads [-1]: the encoder has heads 0..3"),
        ("2,4,5", "--heads [4, 5]: the encoder has heads 0..3"),
    ],
)
def test_bad_heads_are_one_line_before_any_run(checkpoint, tmp_path, heads, message):
    out = tmp_path / "ablation"
    with pytest.raises(SystemExit) as e:
        ablation["main"]([str(tmp_path), "--path", str(checkpoint), "--out", str(out), "--heads", heads])
    assert str(e.value).startswith(message)
    assert not out.exists()
