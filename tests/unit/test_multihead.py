"""The attention module: masking, the pipeline against a plain computation, incremental
decoding == teacher forcing for every activation, beam reordering, fast-path rules."""

import math

import pytest
import torch
from fairseq import utils

from fairseq_sparse_attn.attention import SparseMultiheadAttention
from fairseq_sparse_attn.attention.intermediates import collect

from helpers import attention_config, build_model, random_batch

ACTIVATIONS = ["softmax", "relu", "gelu", "leaky_relu", "sparsemax", "entmax15", "entmax_bisect", "relu_scaled"]
NORM_FOR = {"relu": "gated_rmsnorm", "gelu": "gated_rmsnorm", "leaky_relu": "rmsnorm_i"}
E, H = 16, 4


def make(act, norm="none", **kw):
    torch.manual_seed(0)
    m = SparseMultiheadAttention(E, H, config=attention_config(act, norm), **kw).eval()
    m.backend = "materialized"
    return m


def test_relu_pipeline_against_plain_formula():
    m = make("relu", "gated_rmsnorm", self_attention=True)
    x = torch.randn(5, 2, E)
    pad = torch.zeros(2, 5, dtype=torch.bool)
    pad[1, 3:] = True
    out, w = m(x, x, x, key_padding_mask=pad, need_head_weights=True)
    d = E // H
    for b in range(2):
        n = 5 - int(pad[b].sum())
        xb = x[:, b]
        q = (xb @ m.q_proj.weight.T + m.q_proj.bias) / math.sqrt(d)
        k = xb @ m.k_proj.weight.T + m.k_proj.bias
        v = xb @ m.v_proj.weight.T + m.v_proj.bias
        heads = []
        for h in range(H):
            sl = slice(h * d, (h + 1) * d)
            s = q[:, sl] @ k[:n, sl].T
            a = torch.clamp(s, min=0)
            torch.testing.assert_close(w[h, b, :, :n], a, atol=1e-5, rtol=1e-5)
            assert torch.all(w[h, b, :, n:] == 0)
            heads.append(a @ v[:n, sl])
        z = torch.cat(heads, dim=-1)
        normed = z / torch.sqrt((z**2).mean(-1, keepdim=True) + 1e-8) * m.output_norm.weight
        normed = normed * torch.sigmoid(z * m.output_norm.gate_weight)
        expected = normed @ m.out_proj.weight.T + m.out_proj.bias
        torch.testing.assert_close(out[:, b], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("act", ["relu", "gelu", "leaky_relu"])
def test_causal_mask_gives_exact_zeros_for_rectified(act):
    m = make(act, self_attention=True)
    x = torch.randn(6, 2, E)
    future = utils.fill_with_neg_inf(torch.zeros(6, 6)).triu(1)  # fairseq's decoder mask
    _, w = m(x, x, x, attn_mask=future, need_head_weights=True)
    upper = torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)
    assert torch.isfinite(w).all()
    assert torch.all(w[..., upper] == 0)


def test_additive_float_mask_bias_is_kept_for_rectified():
    """finite attn_mask entries are biases (added), <= -1e4 entries hide the key."""
    m = make("relu", self_attention=True)
    x = torch.randn(4, 1, E)
    bias = torch.zeros(4, 4)
    bias[:, 1] = 0.5
    bias[:, 2] = -1e8
    _, w = m(x, x, x, attn_mask=bias, need_head_weights=True)
    _, w0 = m(x, x, x, need_head_weights=True, before_softmax=False)
    assert torch.all(w[..., 2] == 0)
    scores, _ = m(x, x, x, before_softmax=True)
    expected = torch.relu(scores.view(1, H, 4, 4) + 0.5)[..., 1]
    torch.testing.assert_close(w[:, 0, :, 1], expected[0], atol=1e-5, rtol=1e-5)


def test_null_attention_row_is_zero_with_finite_output_and_gradients():
    m = make("relu", "gated_rmsnorm", self_attention=True)
    m.train()
    with torch.no_grad():  # keys make every score <= 0 for every query
        m.q_proj.weight.zero_()
        m.q_proj.bias.fill_(1.0)
        m.k_proj.weight.zero_()
        m.k_proj.bias.fill_(-1.0)
    x = torch.randn(3, 2, E, requires_grad=True)
    out, w = m(x, x, x, need_head_weights=True)
    assert torch.all(w == 0)
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_incremental_self_and_cross_attention_equal_full(act):
    norm = NORM_FOR.get(act, "none")
    self_attn = make(act, norm, self_attention=True)
    cross = make(act, norm, encoder_decoder_attention=True)
    T, S, B = 5, 7, 3
    x = torch.randn(T, B, E)
    enc = torch.randn(S, B, E)
    enc_pad = torch.zeros(B, S, dtype=torch.bool)
    enc_pad[1, :2] = True  # left padding
    enc_pad[2, :4] = True
    future = utils.fill_with_neg_inf(torch.zeros(T, T)).triu(1)

    full_self, _ = self_attn(x, x, x, attn_mask=future)
    full_cross, _ = cross(x, enc, enc, key_padding_mask=enc_pad, static_kv=True)

    state = {}
    for t in range(T):
        step = x[t : t + 1]
        o_self, _ = self_attn(step, step, step, incremental_state=state)
        o_cross, _ = cross(step, enc, enc, key_padding_mask=enc_pad, incremental_state=state, static_kv=True)
        torch.testing.assert_close(o_self[0], full_self[t], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(o_cross[0], full_cross[t], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_model_incremental_decoding_equals_teacher_forcing(act):
    model, d = build_model(attn_activation=act, attn_output_norm=NORM_FOR.get(act, "none"))
    src, lengths, prev = random_batch(d)
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=lengths)
        full, _ = model.decoder(prev, encoder_out=enc)
        state = {}
        for t in range(prev.size(1)):
            step, _ = model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)
            real = prev[:, t].ne(d.pad())  # positions after a target's end are padding
            torch.testing.assert_close(step[real, 0], full[real, t], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("act", ["softmax", "relu", "entmax15"])
def test_beam_reordering(act):
    """Beam search as fairseq runs it: 2 sentences x beam 2, cross-attention keys kept once
    per sentence (set_beam_size), hypotheses reordered within their sentence.  After
    reorder_incremental_state decoding continues as if the reordered prefixes had been
    decoded from the start."""
    model, d = build_model(attn_activation=act, attn_output_norm=NORM_FOR.get(act, "none"))
    for m in model.attention_modules():
        m.backend = "materialized"
    src, lengths, prev = random_batch(d, bsz=2, tgt_len=5)
    beams = torch.tensor([0, 0, 1, 1])
    prev = prev[beams].clone()
    prev[1, 1:3] = prev[1, 1:3].flip(0) + 1  # the hypotheses of one sentence differ
    prev[3, 1] = d.nspecial
    new_order = torch.tensor([1, 1, 3, 2])
    model.decoder.set_beam_size(2)
    with torch.no_grad():
        enc = model.encoder.reorder_encoder_out(model.encoder(src, src_lengths=lengths), beams)
        state = {}
        for t in range(3):
            model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)
        model.decoder.reorder_incremental_state_scripting(state, new_order)
        enc = model.encoder.reorder_encoder_out(enc, new_order)
        prev_r = prev[new_order]
        step, _ = model.decoder(prev_r[:, :4], encoder_out=enc, incremental_state=state)
        full, _ = model.decoder(prev_r[:, :4], encoder_out=enc)
        torch.testing.assert_close(step[:, 0], full[:, 3], atol=1e-5, rtol=1e-5)


def test_softmax_pipeline_matches_stock_module():
    from fairseq.modules import MultiheadAttention

    torch.manual_seed(0)
    stock = MultiheadAttention(E, H, self_attention=True).eval()
    ours = make("softmax", self_attention=True)
    ours.load_state_dict(stock.state_dict())
    x = torch.randn(5, 2, E)
    pad = torch.zeros(2, 5, dtype=torch.bool)
    pad[0, 0] = True
    a, wa = stock(x, x, x, key_padding_mask=pad)  # fused path, head-averaged weights
    b, wb = ours(x, x, x, key_padding_mask=pad)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(wa, wb, atol=1e-6, rtol=1e-6)
    ours.backend = "auto"
    c, wc = ours(x, x, x, key_padding_mask=pad, need_head_weights=True)
    torch.testing.assert_close(c, a, atol=1e-6, rtol=1e-6)
    assert wc.shape == (H, 2, 5, 5)  # per-head weights even for the stock configuration
    torch.testing.assert_close(wc.mean(0), wa, atol=1e-6, rtol=1e-6)


def test_per_head_weights_asked_without_need_weights_as_stock_fairseq():
    """need_head_weights implies need_weights in stock fairseq: a training call (gradients,
    the plan's general path) asking for per-head weights only gets them too (stock's fused
    path averages them over the heads, as test_softmax_pipeline_matches_stock_module notes)."""
    from fairseq.modules import MultiheadAttention

    torch.manual_seed(0)
    stock = MultiheadAttention(E, H, self_attention=True).train()
    ours = make("softmax", self_attention=True).train()
    ours.load_state_dict(stock.state_dict())
    ours.backend = "materialized"  # not stock fairseq's own path
    x = torch.randn(5, 2, E, requires_grad=True)
    pad = torch.zeros(2, 5, dtype=torch.bool)
    pad[0, 0] = True
    a, wa = stock(x, x, x, key_padding_mask=pad, need_weights=False, need_head_weights=True)
    b, wb = ours(x, x, x, key_padding_mask=pad, need_weights=False, need_head_weights=True)
    assert wa.shape == (2, 5, 5) and wb is not None and wb.shape == (H, 2, 5, 5)
    torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(wb.mean(0), wa, atol=1e-6, rtol=1e-6)


def test_stock_configuration_delegates_and_others_never_take_fused_path(monkeypatch):
    import torch.nn.functional as F

    calls = []
    real = F.multi_head_attention_forward
    monkeypatch.setattr(F, "multi_head_attention_forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = torch.randn(4, 2, E)
    stock = SparseMultiheadAttention(E, H, self_attention=True)
    stock(x, x, x)
    assert calls, "softmax + no norm should be stock fairseq (fused path)"
    calls.clear()
    for act in ACTIVATIONS[1:]:
        SparseMultiheadAttention(E, H, self_attention=True, config=attention_config(act))(x, x, x)
    assert not calls


@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_low_precision_weights_computed_in_float32(dtype):
    m = make("relu", "gated_rmsnorm", self_attention=True).to(dtype)
    x = torch.randn(4, 2, E).to(dtype)
    out, w = m(x, x, x, need_head_weights=True)
    assert out.dtype == dtype and w.dtype == torch.float32
    assert torch.isfinite(out).all()


def test_recorder_sees_weights_without_changing_outputs():
    m = make("relu", "gated_rmsnorm", self_attention=True)
    x = torch.randn(4, 2, E)
    before, _ = m(x, x, x)
    with collect("weights") as records:
        after, _ = m(x, x, x)
    assert torch.equal(before, after)
    ((module, inter),) = records
    assert module is m
    seen = vars(inter)
    assert seen["weights"].shape == (2, H, 4, 4) and seen["values"].shape == (2 * H, 4, E // H)
    assert seen["mask"] is None


# ------------------------------------------------------------------ --attn-init (issue 16)


def _uniform_bound_checks(weight, bound):
    """A U(-bound, bound) draw: nothing beyond the bound, the extremes reached, std bound/√3."""
    w = weight.detach().double()
    assert w.abs().max().item() <= bound + 1e-7
    assert w.abs().max().item() > 0.99 * bound
    assert abs(w.std().item() / (bound / math.sqrt(3)) - 1) < 0.02


def test_attn_init_statistics_against_the_xavier_formula():
    import fairseq_sparse_attn.attention.multihead as mh

    d = 512
    official = attention_config(init="rela_official")
    xavier_dd = math.sqrt(6 / (d + d))  # xavier_uniform bound of a (d, d) matrix, gain 1
    torch.manual_seed(0)
    cross_fairseq = mh.SparseMultiheadAttention(d, 8, kdim=d, vdim=d, encoder_decoder_attention=True)
    cross_official = mh.SparseMultiheadAttention(d, 8, kdim=d, vdim=d, encoder_decoder_attention=True, config=official)
    self_official = mh.SparseMultiheadAttention(d, 8, self_attention=True, config=official)
    for name in ("q_proj", "k_proj", "v_proj"):
        # fairseq: gain 1/sqrt(2) whenever key/value dims equal the model's, cross included
        _uniform_bound_checks(getattr(cross_fairseq, name).weight, xavier_dd / math.sqrt(2))
        assert getattr(cross_fairseq, name).bias.abs().max() > 0  # nn.Linear's default bias
        # official ReLA code: separate q_map / k_map / v_map (d, d), TF variance scaling
        # fan_avg uniform scale 1: sqrt(3 / ((d + d) / 2))
        _uniform_bound_checks(getattr(cross_official, name).weight, math.sqrt(3 / ((d + d) / 2)))
        # official self-attention: one (d, 3d) qkv_map: sqrt(3 / ((d + 3d) / 2))
        _uniform_bound_checks(getattr(self_official, name).weight, math.sqrt(3 / ((d + 3 * d) / 2)))
        for m in (cross_official, self_official):
            assert torch.count_nonzero(getattr(m, name).bias) == 0
    for m in (cross_fairseq, cross_official, self_official):
        _uniform_bound_checks(m.out_proj.weight, xavier_dd)
        assert torch.count_nonzero(m.out_proj.bias) == 0
    with pytest.raises(ValueError, match="--attn-init"):
        mh.SparseMultiheadAttention(d, 8, self_attention=True, config=attention_config(init="he"))


def test_attn_init_flag_and_presets():
    import argparse

    from fairseq_sparse_attn.options import add_plugin_args

    from helpers import build_model, model_args

    parser = argparse.ArgumentParser()
    add_plugin_args(parser)
    assert parser.parse_args(["--attn-init", "rela_official"]).attn_init == "rela_official"
    assert model_args("rela_transformer_wmt_en_de").attn_init == "fairseq"  # presets: fairseq
    model, _ = build_model("rela_transformer_wmt_en_de", attn_init="rela_official")
    cross = [m for m in model.decoder.modules() if getattr(m, "kind", None) == "cross"]
    assert cross and all(torch.count_nonzero(m.q_proj.bias) == 0 for m in cross)


def test_cached_spec_follows_attribute_changes():
    """spec() and is_stock are cached per module; setting an attribute they read rebuilds
    them (a later call must see a new backend, masked heads or activation)."""
    from fairseq_sparse_attn.attention.activations import build_activation

    m = SparseMultiheadAttention(E, H, self_attention=True, config=attention_config("softmax", "none"))
    assert m.is_stock and m.spec() is m.spec()
    m.backend = "materialized"
    assert m.spec().backend == "materialized"
    m.masked_heads = (1,)
    assert m.spec().heads.masked.heads == (1,) and not m.is_stock
    m.masked_heads = ()
    assert m.is_stock
    m.activation, m.activation_name = build_activation("relu", H), "relu"
    assert m.spec().activation is m.activation and not m.is_stock
    x = torch.randn(3, 2, E)
    out, _ = m(x, x, x, need_weights=False)
    q = (x @ m.q_proj.weight.T + m.q_proj.bias) * m.scaling
    k = x @ m.k_proj.weight.T + m.k_proj.bias
    v = x @ m.v_proj.weight.T + m.v_proj.bias
    d = E // H
    qh, kh, vh = (t.view(3, 2, H, d).permute(1, 2, 0, 3) for t in (q, k, v))
    z = (qh @ kh.transpose(-1, -2)).clamp(min=0) @ vh  # ReLU attention, no norm
    expected = z.permute(2, 0, 1, 3).reshape(3, 2, E) @ m.out_proj.weight.T + m.out_proj.bias
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_all_false_padding_mask_is_no_mask():
    """A padding mask without padding (fairseq's encoder output for an unpadded batch)
    hides nothing: the activation gets no mask, the outputs equal those with the mask
    applied by hand, and a mask with padding still hides its keys."""
    m = make("relu", "gated_rmsnorm", encoder_decoder_attention=True)
    seen = []
    m.activation.register_forward_hook(lambda mod, args, out: seen.append(args[1]))
    x, enc = torch.randn(2, 3, E), torch.randn(5, 3, E)
    none_pad = torch.zeros(3, 5, dtype=torch.bool)
    out, w = m(x, enc, enc, key_padding_mask=none_pad, need_head_weights=True)
    assert seen[-1] is None
    ref, _ = m(x, enc, enc, key_padding_mask=None, need_head_weights=True)
    torch.testing.assert_close(out, ref)
    pad = none_pad.clone()
    pad[1, 3:] = True
    _, w = m(x, enc, enc, key_padding_mask=pad, need_head_weights=True)
    assert seen[-1] is not None and bool((w[:, 1, :, 3:] == 0).all())


@pytest.mark.parametrize("fill", [-1e8, -1e4])
def test_fairseq_s_float_masks_hide_keys_even_from_the_row_factor(fill):
    """fairseq's encoder layer turns a boolean attn_mask into -1e8 (fp32) or -1e4 (fp16)
    floats: those keys are hidden, not a bias: ReLUFormer's relu_scaled weights are
    relu(q k / sqrt(d)) / sqrt(n / 2) with n = the 3 visible keys, not the 5 keys."""
    torch.manual_seed(0)
    E, H, T = 16, 4, 5
    m = SparseMultiheadAttention(E, H, self_attention=True, config=attention_config("relu_scaled")).eval()
    x = torch.randn(T, 1, E)
    hide = torch.zeros(T, T, dtype=torch.bool)
    hide[:, 3:] = True
    with torch.no_grad():
        _, w = m(x, x, x, attn_mask=torch.zeros(T, T).masked_fill(hide, fill), need_head_weights=True)
        d = E // H
        q = (m.q_proj(x)[:, 0] * d**-0.5).view(T, H, d).transpose(0, 1)
        k = m.k_proj(x)[:, 0].view(T, H, d).transpose(0, 1)
        expected = torch.relu(q @ k.transpose(1, 2)).masked_fill(hide, 0) / math.sqrt(3 / 2)
    torch.testing.assert_close(w[:, 0], expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("mask", ["padding", "causal"])
def test_scores_before_the_activation_carry_minus_infinity_at_hidden_keys(mask):
    """``before_softmax=True`` (fairseq's contract): q k / sqrt(d) with -inf where a key is
    hidden, by key padding or by a causal mask."""
    torch.manual_seed(0)
    E, H, T, B = 16, 4, 4, 2
    m = SparseMultiheadAttention(E, H, self_attention=True, config=attention_config("relu")).eval()
    x = torch.randn(T, B, E)
    pad = torch.tensor([[False, False, True, True], [False] * 4])
    hidden = pad.view(B, 1, 1, T) if mask == "padding" else torch.ones(T, T, dtype=torch.bool).triu(1)
    kwargs = (
        {"key_padding_mask": pad}
        if mask == "padding"
        else {"attn_mask": utils.fill_with_neg_inf(torch.zeros(T, T)).triu(1)}
    )
    with torch.no_grad():
        scores, _ = m(x, x, x, before_softmax=True, **kwargs)
        d = E // H
        q = (m.q_proj(x) * d**-0.5).view(T, B * H, d).transpose(0, 1)
        k = m.k_proj(x).view(T, B * H, d).transpose(0, 1)
        expected = (q @ k.transpose(1, 2)).view(B, H, T, T).masked_fill(hidden, float("-inf")).view(B * H, T, T)
    assert torch.equal(torch.isinf(scores), torch.isinf(expected)) and torch.isinf(expected).any()
    finite = torch.isfinite(expected)
    torch.testing.assert_close(scores[finite], expected[finite], atol=1e-6, rtol=1e-5)
