"""Sparsity and null rate against a hand-computed example; recording is free when off."""

import pytest
import torch

from fairseq_sparse_attn.analysis.attention_stats import SparsityStats, collect_sparsity
from fairseq_sparse_attn.analysis.recording import AttentionSite, Batch, attention_sites
from fairseq_sparse_attn.attention.intermediates import Intermediates, active_collectors

from helpers import build_model, random_batch


def test_hand_computed_sparsity_and_null_rate():
    site = AttentionSite("decoder_self", 0, "x", 2)
    stats = SparsityStats()
    # one sentence, 3 queries (the last is padding), 3 keys, causal mask, 2 heads
    w = torch.tensor(
        [[[[0.5, 0.0, 0.0], [0.0, 0.0, 0.0], [9.0, 9.0, 9.0]], [[0.0, 0.0, 0.0], [0.2, 0.3, 0.0], [0.0, 0.0, 0.0]]]]
    )
    causal = torch.triu(torch.ones(3, 3, dtype=torch.bool), 1).view(1, 1, 3, 3)
    stats.set_batch(Batch(None, torch.tensor([[False, False, True]])))
    stats.collect(site, Intermediates(weights=w, mask=causal))
    # valid positions: q0 -> k0, q1 -> k0,k1  = 3 per head
    # head 0: zeros among valid = q1k0, q1k1 = 2 -> 2/3; null rows: q1 -> 1/2
    # head 1: zeros = q0k0 = 1 -> 1/3; null rows: q0 -> 1/2
    got = stats.per_head()[("decoder_self", 0)]
    assert got["sparsity"] == [2 / 3, 1 / 3]
    assert got["null_rate"] == [0.5, 0.5]
    assert stats.per_layer()[("decoder_self", 0)] == {"sparsity": 0.5, "null_rate": 0.5}
    # a second layer whose heads differ in null rate: the layer's figure is their mean (not
    # the max or one head), and a kind's is the mean over its layers
    site1 = AttentionSite("decoder_self", 1, "x", 2)
    w1 = torch.tensor([[[[0.5, 0.0, 0.0], [0.0, 0.0, 0.0], [9.0] * 3], [[0.4, 0.0, 0.0], [0.2, 0.3, 0.0], [0.0] * 3]]])
    stats.collect(site1, Intermediates(weights=w1, mask=causal))
    # head 0 as above (2/3, 1/2); head 1: zeros none of 3 -> 0, null rows none -> 0
    assert stats.per_head()[("decoder_self", 1)] == {"sparsity": [2 / 3, 0.0], "null_rate": [0.5, 0.0]}
    assert stats.per_layer()[("decoder_self", 1)] == {"sparsity": pytest.approx(1 / 3), "null_rate": 0.25}
    assert stats.per_kind()["decoder_self"] == {
        "sparsity": pytest.approx((0.5 + 1 / 3) / 2),
        "null_rate": pytest.approx((0.5 + 0.25) / 2),
    }


def test_softmax_model_has_zero_sparsity_and_recording_does_not_change_outputs():
    model, d = build_model()
    src, lengths, prev = random_batch(d)
    with torch.no_grad():
        before, _ = model(src, lengths, prev)
        sample = {"net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev}}
        stats = collect_sparsity(model, [sample], d.pad())
        after, _ = model(src, lengths, prev)
    torch.testing.assert_close(before, after, atol=1e-6, rtol=0)
    kinds = stats.per_kind()
    assert set(kinds) == {"encoder_self", "decoder_self", "cross"}
    assert all(v["sparsity"] == 0 and v["null_rate"] == 0 for v in kinds.values())
    assert not active_collectors()  # nothing stays attached after the with block


def test_sites_name_kind_and_layer():
    model, _ = build_model()
    sites = attention_sites(model)
    assert [(s.kind, s.layer) for s in sites] == [
        ("encoder_self", 0),
        ("encoder_self", 1),
        ("decoder_self", 0),
        ("cross", 0),
        ("decoder_self", 1),
        ("cross", 1),
    ]
