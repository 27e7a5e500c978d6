"""attend() against the formulas written plainly here, per backend, on the same inputs;
backend choice (auto, forced, registration) and the fused paths."""

import dataclasses
import math

import pytest
import torch
import torch.nn as nn

from fairseq_sparse_attn.attention import SparseMultiheadAttention, build_activation, core
from fairseq_sparse_attn.attention.backends import sdpa as sdpa_backend
from fairseq_sparse_attn.attention.backends.materialized import materialized
from fairseq_sparse_attn.attention.core import (
    AttendSpec,
    AttentionInputs,
    Backend,
    Capabilities,
    attend,
    register_backend,
)
from fairseq_sparse_attn.attention.fixed_patterns import pattern_matrix
from fairseq_sparse_attn.attention.heads import FixedPatternHeads, HeadPlan, MaskedHeads
from fairseq_sparse_attn.attention.intermediates import collect

from helpers import attention_config

B, H, T, S, D = 2, 3, 4, 5, 8


def inputs_qkv(seed=0, tgt=T, src=S, heads=H):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, heads, tgt, D, generator=g) / math.sqrt(D)
    k = torch.randn(B, heads, src, D, generator=g)
    v = torch.randn(B, heads, src, D, generator=g)
    return q, k, v


def padding_and_causal(tgt=T, src=S):
    pad = torch.zeros(B, src, dtype=torch.bool)
    pad[1, -2:] = True
    causal = torch.ones(tgt, src, dtype=torch.bool).triu(1 + src - tgt)
    hidden = pad.view(B, 1, 1, src) | causal.view(1, 1, tgt, src)
    return pad, hidden


def spec(activation, backend="auto", heads=None, key_block_size=0, num_heads=H):
    return AttendSpec(
        activation=build_activation(activation, num_heads),
        dropout=nn.Dropout(0.0),
        heads=heads or HeadPlan(num_heads),
        backend=backend,
        key_block_size=key_block_size,
    )


def plain(q, k, v, hidden, fn, bias=None):
    """Per sentence and head: w = fn(q kᵀ (+ bias) over the visible keys), out = w v."""
    out = torch.zeros(q.shape[:3] + (v.size(-1),))
    weights = torch.zeros(q.shape[:3] + (k.size(2),))
    for b in range(q.size(0)):
        for h in range(q.size(1)):
            for i in range(q.size(2)):
                visible = ~hidden[b if hidden.size(0) > 1 else 0, 0, i]
                s = q[b, h, i] @ k[b, h].T
                if bias is not None:
                    s = s + bias[i]
                w = torch.zeros(k.size(2))
                w[visible] = fn(s[visible])
                weights[b, h, i] = w
                out[b, h, i] = w @ v[b, h]
    return out, weights


def softmax(s):
    e = torch.exp(s - s.max())
    return e / e.sum()


def relu(s):
    return torch.clamp(s, min=0)


def relu_scaled(s):
    return relu(s) / math.sqrt(len(s) / 2)


def sparsemax(s):
    """Martins & Astudillo (2016), Alg. 1."""
    z, _ = torch.sort(s, descending=True)
    k = torch.arange(1, len(s) + 1, dtype=s.dtype)
    support = 1 + k * z > torch.cumsum(z, 0)
    kz = int(support.nonzero().max()) + 1
    tau = (z[:kz].sum() - 1) / kz
    return torch.clamp(s - tau, min=0)


FORMULAS = {"softmax": softmax, "relu": relu, "relu_scaled": relu_scaled, "sparsemax": sparsemax}
# backend -> activations it is tested with
CASES = (
    [("materialized", a) for a in FORMULAS]
    + [("sdpa", "softmax")]
    + [("key_block", a) for a in ("relu", "relu_scaled")]
    + [("query_block", a) for a in ("relu", "relu_scaled")]
)


@pytest.mark.parametrize("backend,activation", CASES)
def test_backend_against_formula(backend, activation):
    q, k, v = inputs_qkv()
    pad, hidden = padding_and_causal()
    inp = AttentionInputs(hidden=hidden, key_padding=pad)
    out, inter = attend(q, k, v, inp, spec(activation, backend, key_block_size=2))
    assert inter.backend == backend
    expected, weights = plain(q, k, v, hidden, FORMULAS[activation])
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    if backend == "materialized":
        with_weights = AttentionInputs(hidden=hidden, key_padding=pad, collect=frozenset({"weights"}))
        _, inter = attend(q, k, v, with_weights, spec(activation, backend))
        torch.testing.assert_close(inter.weights, weights, atol=1e-6, rtol=1e-5)
        assert torch.all(inter.weights[hidden.expand_as(inter.weights)] == 0)


@pytest.mark.parametrize("backend", ["materialized", "sdpa"])
def test_additive_score_bias(backend):
    q, k, v = inputs_qkv(1)
    pad, hidden = padding_and_causal()
    bias = torch.randn(T, S)
    out, _ = attend(q, k, v, AttentionInputs(hidden=hidden, score_bias=bias.view(1, 1, T, S)), spec("softmax", backend))
    expected, _ = plain(q, k, v, hidden, softmax, bias)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "backend,activation",
    [("materialized", "relu"), ("sdpa", "softmax"), ("key_block", "relu_scaled"), ("query_block", "relu_scaled")],
)
def test_beam_groups_share_one_key_copy(backend, activation):
    """kv_groups = 2: queries of 2*B sentences, keys of B (beam search cross-attention)."""
    q, _, _ = inputs_qkv(2)
    q2 = torch.cat([q, q.flip(0)], dim=0).view(2, B, H, T, D).transpose(0, 1).reshape(2 * B, H, T, D)
    _, k, v = inputs_qkv(3)
    out, _ = attend(q2, k, v, AttentionInputs(kv_groups=2), spec(activation, backend, key_block_size=3))
    k2, v2 = k.repeat_interleave(2, dim=0), v.repeat_interleave(2, dim=0)
    expected, _ = plain(q2, k2, v2, torch.zeros(1, 1, T, S, dtype=torch.bool), FORMULAS[activation])
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_row_sums_against_formula_materialized_and_key_block():
    q, k, v = inputs_qkv(4)
    pad, hidden = padding_and_causal()
    inp = AttentionInputs(hidden=hidden, collect=frozenset({"row_sums"}))
    _, weights = plain(q, k, v, hidden, relu_scaled)
    n = (~hidden).sum(-1).expand(B, 1, T).float()
    wsum = weights.sum(-1)
    wlogw = torch.where(weights > 0, weights * torch.log(weights.clamp(min=1e-30)), torch.zeros(())).sum(-1)
    for backend in ("materialized", "key_block"):
        _, inter = attend(q, k, v, inp, spec("relu_scaled", backend, key_block_size=2))
        got_wsum, got_wlogw, got_n = inter.row_sums
        torch.testing.assert_close(got_wsum, wsum, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got_wlogw, wlogw, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got_n.expand(B, 1, T, 1).squeeze(-1), n)
    # nothing asked: nothing computed (the fused kernels' row sums: test_triton_row_sums.py)
    _, inter = attend(q, k, v, AttentionInputs(hidden=hidden), spec("relu_scaled"))
    assert inter.row_sums is None and inter.weights is None
    # a backend that cannot return them: the regularized criterion's need is named as such
    from fairseq_sparse_attn.errors import UsageError

    with pytest.raises(UsageError, match=r"ReLUFormer row sums \(the relu_regularized_\* criterion's regularizer\)"):
        attend(q, k, v, inp, spec("relu_scaled", "query_block"))


def test_fixed_and_masked_heads():
    """Heads 0..1 take the fixed 'previous' and 'next' patterns (given per batch), head 1
    is masked: out = W_fixed v for head 0, 0 for head 1, the formula for head 2."""
    q, k, v = inputs_qkv(5, tgt=S)
    fixed = FixedPatternHeads(("previous", "next"))
    heads = HeadPlan(H, fixed=fixed, masked=MaskedHeads((1,), H))
    weights = torch.stack([pattern_matrix("previous", S), pattern_matrix("next", S)]).expand(B, 2, S, S)
    inp = AttentionInputs(pattern_weights={fixed.key: weights})
    out, _ = attend(q[:, 2:], k[:, 2:], v, inp, spec("relu", heads=heads, num_heads=1))
    torch.testing.assert_close(out[:, 0], weights[:, 0] @ v[:, 0], atol=1e-6, rtol=1e-6)
    assert torch.all(out[:, 1] == 0)
    expected, _ = plain(q[:, 2:], k[:, 2:], v[:, 2:], torch.zeros(1, 1, S, S, dtype=torch.bool), relu)
    torch.testing.assert_close(out[:, 2:], expected, atol=1e-5, rtol=1e-5)
    # without given weights the head policy computes the token patterns from the padding
    out2, _ = attend(q[:, 2:], k[:, 2:], v, AttentionInputs(), spec("relu", heads=heads, num_heads=1))
    torch.testing.assert_close(out2, out, atol=0, rtol=0)


def test_forced_backend_that_cannot_serve_is_a_clear_error():
    q, k, v = inputs_qkv()
    with pytest.raises(ValueError, match="'sdpa'.*cannot serve.*activation relu"):
        attend(q, k, v, AttentionInputs(), spec("relu", "sdpa"))
    with pytest.raises(ValueError, match="'key_block'.*cannot serve.*returning attention weights"):
        attend(q, k, v, AttentionInputs(collect=frozenset({"weights"})), spec("relu", "key_block"))
    with pytest.raises(ValueError, match="unknown attention backend 'flash'"):
        attend(q, k, v, AttentionInputs(), spec("relu", "flash"))
    # auto: a configuration a backend cannot serve gets the next one
    _, inter = attend(q, k, v, AttentionInputs(collect=frozenset({"weights"})), spec("softmax"))
    assert inter.backend == "materialized"
    _, inter = attend(q, k, v, AttentionInputs(), spec("softmax"))
    assert inter.backend == "sdpa"


def test_a_refusal_lists_every_backend_with_all_its_reasons(monkeypatch):
    """Issue 33.7: a named backend that cannot serve a call names all its reasons, and the
    message lists every registered backend with all of its own (xformers' dispatcher)."""
    q, k, v = inputs_qkv()
    weights = AttentionInputs(collect=frozenset({"weights"}), score_bias=torch.zeros(1, 1, T, S))
    with pytest.raises(ValueError) as err:
        attend(q, k, v, weights, spec("relu", "sdpa"))
    message = str(err.value)
    assert "\n" not in message  # one line
    head, _, listing = message.partition("(every backend: ")
    # sdpa's own reasons, all of them: the activation and the returned weights
    assert "activation relu" in head and "returning attention weights" in head
    # a call without gradients (a trained checkpoint, which keeps its backend): the override first
    assert head.endswith("; use --model-overrides \"{'attn_backend': 'auto'}\" (in training: --attn-backend auto) ")
    with pytest.raises(ValueError) as err:  # in training: the flag first
        attend(q.requires_grad_(), k, v, weights, spec("relu", "sdpa"))
    assert "; use --attn-backend auto (for a trained checkpoint: --model-overrides" in str(err.value)
    assert listing.endswith(")")
    entries = dict(e.split(": ", 1) for e in listing[:-1].split(" | "))
    assert sorted(entries) == sorted(core.BACKENDS)
    assert entries["materialized"] == "serves it"
    sdpa_reasons = entries["sdpa"].split(", ")
    assert any(r.startswith("activation relu") for r in sdpa_reasons)
    assert "returning attention weights (analysis)" in sdpa_reasons and len(sdpa_reasons) == 2
    kb = entries["key_block"].split(", ")
    assert "returning attention weights (analysis)" in kb and "an additive attention-mask bias" in kb
    qb = entries["query_block"].split(", ")
    assert {"returning attention weights (analysis)", "an additive attention-mask bias"} <= set(qb)

    # auto with no backend left: every backend, with every reason, auto's included
    monkeypatch.setattr(core, "BACKENDS", {n: b for n, b in core.BACKENDS.items() if n != "materialized"})
    with pytest.raises(ValueError, match="no attention backend serves") as err:
        attend(q, k, v, AttentionInputs(collect=frozenset({"weights"})), spec("relu"))
    entries = dict(e.split(": ", 1) for e in str(err.value).partition("every backend: ")[2].split(" | "))
    assert sorted(entries) == sorted(core.BACKENDS)
    assert "returning attention weights (analysis)" in entries["key_block"]
    assert "auto takes it with --attn-key-block-size > 0" in entries["key_block"]
    assert "auto takes it for calls with at least --attn-flex-min-keys keys" in entries["query_block"]


def test_removed_flex_backend_is_one_usage_error_saying_what_to_use():
    """Issue 31.6: the FlexAttention backend is gone; naming it (a module, a spec) is one
    line that says to use triton or auto."""
    from fairseq_sparse_attn.errors import UsageError

    assert "flex" not in core.BACKENDS and "flex" not in core.backend_names()
    q, k, v = inputs_qkv()
    with pytest.raises(UsageError, match=r"^--attn-backend flex: .*use --attn-backend triton or auto$") as err:
        attend(q, k, v, AttentionInputs(), spec("relu", "flex"))
    assert "\n" not in str(err.value)
    from fairseq_sparse_attn.attention.config import BackendConfig

    config = dataclasses.replace(attention_config("relu"), backend=BackendConfig(name="flex"))
    with pytest.raises(UsageError, match="use --attn-backend triton or auto"):
        SparseMultiheadAttention(16, 4, self_attention=True, config=config)


def test_explain_says_why_a_call_runs_where_it_runs():
    q, k, v = inputs_qkv()
    text = core.explain(q, v, AttentionInputs(collect=frozenset({"weights"})), spec("softmax"))
    assert text.startswith("runs on materialized; backends: ")
    assert "sdpa: returning attention weights (analysis)" in text
    text = core.explain(q, v, AttentionInputs(), spec("softmax"))
    assert text.startswith("runs on sdpa; backends: sdpa: serves it")
    assert "cannot run: attention backend 'sdpa'" in core.explain(q, v, AttentionInputs(), spec("relu", "sdpa"))


def test_a_registered_backend_is_chosen_by_what_it_serves():
    calls = []

    def run(q, k, v, inputs, spec, call):
        calls.append(call)
        return materialized(q, k, v, inputs, spec, call)[0], core.Intermediates(backend="test")

    register_backend(
        Backend("test_relu", run, Capabilities(activation_traits=frozenset({"rectified", "exact_zeros"})), priority=1)
    )
    try:
        q, k, v = inputs_qkv()
        _, inter = attend(q, k, v, AttentionInputs(), spec("relu"))
        assert inter.backend == "test" and calls[-1].activation == "relu"
        _, inter = attend(q, k, v, AttentionInputs(collect=frozenset({"weights"})), spec("relu"))
        assert inter.backend == "materialized"  # the test backend returns no weights
        _, inter = attend(q, k, v, AttentionInputs(), spec("softmax"))
        assert inter.backend == "sdpa"
        with pytest.raises(ValueError, match="registered twice"):
            register_backend(Backend("test_relu", run, Capabilities()))
    finally:
        del core.BACKENDS["test_relu"]


def test_module_softmax_with_norm_takes_sdpa_and_stock_takes_fairseq(monkeypatch):
    import torch.nn.functional as F

    sdpa_calls, mha_calls = [], []
    real_sdpa, real_mha = F.scaled_dot_product_attention, F.multi_head_attention_forward
    monkeypatch.setattr(
        sdpa_backend.F, "scaled_dot_product_attention", lambda *a, **kw: sdpa_calls.append(1) or real_sdpa(*a, **kw)
    )
    monkeypatch.setattr(F, "multi_head_attention_forward", lambda *a, **kw: mha_calls.append(1) or real_mha(*a, **kw))
    x = torch.randn(4, 2, 16)
    torch.manual_seed(0)
    normed = SparseMultiheadAttention(16, 4, self_attention=True, config=attention_config(output_norm="rmsnorm")).eval()
    out, _ = normed(x, x, x, need_weights=False)
    assert sdpa_calls and not mha_calls
    normed.backend = "materialized"  # the materialized backend gives the same
    ref, _ = normed(x, x, x, need_weights=False)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)
    sdpa_calls.clear()
    stock = SparseMultiheadAttention(16, 4, self_attention=True).eval()
    stock(x, x, x)
    assert mha_calls and not sdpa_calls  # stock fairseq's fused path, attend() not reached
    with collect("weights") as records:  # analysis asks for weights: materialized
        normed.backend = "auto"
        normed(x, x, x, need_weights=False)
    assert records[0][1].backend == "materialized" and records[0][1].weights is not None


def test_dropout_retained_in_inference_is_applied():
    """fairseq's --retain-dropout (FairseqDropout.apply_during_inference) in eval mode: the
    call counts as one with dropout, so only backends that apply it serve it (no query
    blocks), and the weights are dropped."""
    from fairseq.modules import FairseqDropout

    q, k, v = inputs_qkv(6)
    for activation, backend in (("relu", "materialized"), ("softmax", "sdpa")):
        drop = FairseqDropout(0.5)
        drop.eval()
        sp = AttendSpec(activation=build_activation(activation, H), dropout=drop, heads=HeadPlan(H), flex_min_keys=1)
        with torch.no_grad():
            plain_out, inter = attend(q, k, v, AttentionInputs(), sp)
            assert inter.backend == ("query_block" if activation == "relu" else "sdpa")
            drop.apply_during_inference = True
            torch.manual_seed(0)
            dropped, inter = attend(q, k, v, AttentionInputs(), sp)
        assert inter.backend == backend
        assert not torch.allclose(dropped, plain_out)


def test_sdpa_drops_nothing_in_eval_mode():
    """A dropout module with p > 0 in eval mode (validation, generation): the sdpa backend
    gives the plain softmax formula, the same on every call."""
    q, k, v = inputs_qkv()
    eval_spec = dataclasses.replace(spec("softmax", "sdpa"), dropout=nn.Dropout(0.5).eval())
    expected = torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v
    for _ in range(3):
        out, inter = attend(q, k, v, AttentionInputs(), eval_spec)
        assert inter.backend == "sdpa"
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_key_blocks_refuse_training_dropout_they_cannot_apply():
    """The key-block path has no attention dropout: a training call with p > 0 is refused
    (the flags refuse the combination first; this is the call through the API), never
    trained without it."""
    q, k, v = inputs_qkv(1)
    training = dataclasses.replace(spec("relu", key_block_size=2), dropout=nn.Dropout(0.5).train())
    with pytest.raises(ValueError, match="attention-dropout 0"):
        attend(q, k, v, AttentionInputs(), training)
