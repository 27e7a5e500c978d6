"""The compat shims, checked directly (the end-to-end tests check them through the CLIs)."""

import numpy as np
import pytest

import fairseq_sparse_attn  # noqa: F401  (installs the shims)
from fairseq.data import data_utils


@pytest.mark.parametrize("n", [447, 1000, 13, 9, 1])
@pytest.mark.parametrize("max_tokens", [None, 2000])
def test_batch_by_size_keeps_every_index(n, max_tokens):
    """Stock fairseq drops the last n % 8 examples with --required-batch-size-multiple 8."""
    sizes = np.random.RandomState(0).randint(5, 300, n)
    batches = data_utils.batch_by_size(np.arange(n), num_tokens_fn=lambda i: sizes[i],
                                       max_tokens=max_tokens, max_sentences=32,
                                       required_batch_size_multiple=8, num_tokens_vec=sizes)
    flat = sorted(int(i) for b in batches for i in b)
    assert flat == list(range(n))
    assert all(len(b) <= 32 for b in batches)
    if max_tokens:
        assert all(len(b) * sizes[b].max() <= max_tokens for b in batches)


def test_checkpoint_loader_trusts_fairseq_checkpoints_only(tmp_path):
    """A checkpoint holding an argparse Namespace (as fairseq's do) loads through fairseq's
    loader, while torch.load elsewhere in the process keeps the weights_only default."""
    import argparse

    import torch
    from fairseq import checkpoint_utils

    path = tmp_path / "ckpt.pt"
    torch.save({"args": argparse.Namespace(arch="sparse_transformer"), "model": {}}, path)
    state = checkpoint_utils.torch.load(path)  # the call load_checkpoint_to_cpu makes
    assert state["args"].arch == "sparse_transformer"
    assert torch.load is torch.serialization.load
    with pytest.raises(Exception, match="[Ww]eights only"):
        torch.load(path)
