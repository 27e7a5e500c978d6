"""Masks derived once per mask tensor and shared by all modules (attention/mask_cache.py)."""

import torch

from fairseq_sparse_attn.attention import mask_cache


def test_computed_once_per_unmodified_tensor_and_recomputed_after_a_change():
    mask_cache.clear()
    calls = []

    def compute(t):
        calls.append(1)
        return t.any().item()

    t = torch.zeros(3, 4, dtype=torch.bool)
    assert mask_cache.cached("s", (t,), None, compute) is False
    assert mask_cache.cached("s", (t[:],), None, compute) is False  # a view of the same storage
    assert len(calls) == 1
    t[1, 2] = True  # in place: the version counter changes
    assert mask_cache.cached("s", (t,), None, compute) is True
    assert len(calls) == 2
    assert mask_cache.cached("s", (t,), 5, compute) is True  # another extra: another entry
    assert len(calls) == 3


def test_keeps_at_most_max_entries_and_references_its_inputs():
    mask_cache.clear()
    tensors = [torch.zeros(2, dtype=torch.bool) for _ in range(mask_cache.MAX_ENTRIES + 3)]
    for t in tensors:
        mask_cache.cached("s", (t,), None, lambda x: x.clone())
    assert len(mask_cache._ENTRIES) == mask_cache.MAX_ENTRIES
    # an entry holds its input: an equal key can never be a new tensor at a reused address
    assert all(any(e[0][0] is t for e in mask_cache._ENTRIES.values()) for t in tensors[-3:])


def test_every_layer_shares_the_padding_mask_views():
    """One model forward: the padding view of the encoder mask is built once, not per module."""
    from helpers import build_model, random_batch

    mask_cache.clear()
    model, d = build_model(attn_activation="relu", attn_output_norm="gated_rmsnorm")
    src, lengths, prev = random_batch(d)
    with torch.no_grad():
        model(src, lengths, prev)
    slots = [key[0] for key in mask_cache._ENTRIES]
    # encoder padding (encoder self + cross), decoder padding, causal | padding: once each
    assert slots.count("key_padding") == 2 and slots.count("hidden") == 1
