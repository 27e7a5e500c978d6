"""record_attention(model) as taps: one tap per attention call, built on the
intermediates attend() returns; nothing is computed or kept outside the block."""

import torch

from fairseq_sparse_attn.analysis.recording import attention_sites, record_attention
from fairseq_sparse_attn.attention.intermediates import active_collectors

from helpers import build_model, random_batch
from test_rhe import batch_annotations


def test_taps_per_call_with_weights_values_and_rhe_decisions():
    model, d = build_model("rhe_transformer_wmt_en_de", encoder_syntax_attention="dea")
    src, lengths, prev = random_batch(d, bsz=3, src_len=7, tgt_len=5)
    dep, rp = batch_annotations(src, d.pad())
    with torch.no_grad():
        before = model(src, lengths, prev, src_dep=dep, src_rp=rp)[0]
        with record_attention(model) as taps:
            during = model(src, lengths, prev, src_dep=dep, src_rp=rp)[0]
    assert not active_collectors()
    torch.testing.assert_close(during, before, atol=1e-5, rtol=1e-5)  # stock modules ran materialized
    sites = attention_sites(model)
    assert [t.site for t in taps] == [s for s in sites if s.kind == "encoder_self"] + [
        s for s in sites if s.kind != "encoder_self"
    ]  # encoder first, then decoder layer by layer
    for tap in taps:
        tgt = 7 if tap.site.kind == "encoder_self" else 5
        src_len = 5 if tap.site.kind == "decoder_self" else 7
        assert tap.weights.shape == (3, 4, tgt, src_len)
        assert tap.values.shape == (3 * 4, src_len, 4)
        # softmax rows over the visible keys sum to 1 (padding rows of the decoder too)
        torch.testing.assert_close(tap.weights.sum(-1), torch.ones(3, 4, tgt), atol=1e-5, rtol=0)
        assert not tap.weights.requires_grad
    rhe_taps = [t for t in taps if t.redundant is not None]
    assert [t.site.layer for t in rhe_taps] == [0] and rhe_taps[0].redundant.shape == (3, 4)


def test_callback_form_unchanged():
    model, d = build_model("rela_transformer_wmt_en_de")
    src, lengths, prev = random_batch(d)
    seen = []
    with torch.no_grad(), record_attention(model, lambda site, **kw: seen.append((site, sorted(kw)))) as taps:
        model(src, lengths, prev)
    assert taps == [] and len(seen) == len(attention_sites(model))
    assert all(keys == ["mask", "values", "weights"] for _, keys in seen)
