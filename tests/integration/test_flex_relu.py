"""The fused FlexAttention ReLU kernel (attention/flex_relu.py), compiled on CPU (forward
only), against the materialized computation written plainly: ReLA (relu) and ReLUFormer
(relu_scaled) weights, padding, causal, null rows, fully padded rows, incremental decoding.

Compilation dominates the cost (tens of seconds per graph on a loaded 2-core machine; the
inductor cache makes reruns fast): the tests share tiny shapes and a few mask layouts."""

import math

import pytest
import torch

from fairseq_sparse_attn.attention.flex_relu import flex_relu_attention, flex_relu_unavailable

from helpers import plain_relu_attention

REASON = flex_relu_unavailable("cpu", grad=False)
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"fused kernel unavailable: {REASON}")

B, H, T, D = 3, 2, 6, 8


def scaled_row_scale(gamma):
    return lambda n: 1.0 / (gamma * torch.sqrt(n.clamp(min=1) / 2))


def inputs(src, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g) / math.sqrt(D)
    k = torch.randn(B, H, src, D, generator=g)
    v = torch.randn(B, H, src, D, generator=g)
    q[0, 0, 1] = -k[0, 0].sum(0) * 10  # most scores of this row negative
    q[1, 1, 2] = 0  # a null row: every score is 0
    return q, k, v


def padding(src):
    pad = torch.zeros(B, 1, 1, src, dtype=torch.bool)
    pad[1, ..., src - 2 :] = True  # sentence 1: two padding keys
    pad[2] = True  # sentence 2: every key is padding
    return pad


@pytest.mark.parametrize("gamma", [None, 1.5], ids=["rela", "reluformer"])
def test_encoder_and_cross_attention_with_padding(gamma):
    src = 7  # cross-attention: src != tgt
    q, k, v = inputs(src)
    hidden = padding(src)
    out = flex_relu_attention(q, k, v, hidden, None if gamma is None else scaled_row_scale(gamma))
    expected = plain_relu_attention(q, k, v, hidden, gamma)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), expected, atol=2e-5, rtol=2e-5)
    assert torch.all(out[2] == 0), "a sentence whose keys are all padding gives exactly 0"
    assert torch.all(out[1, 1, 2] == 0), "a null row gives exactly 0"


@pytest.mark.parametrize("gamma", [None, 1.0], ids=["rela", "reluformer"])
def test_incremental_decoding_equals_causal_attention(gamma):
    """Decoding step t sees the cache of keys 0..t (padding only): row t of causal
    attention.  Causal teacher forcing itself (a mask that differs between queries) is
    refused on CPU with the reason (the compiled CPU kernel does not build for it)."""
    q, k, v = inputs(T, seed=1)
    causal = torch.ones(T, T, dtype=torch.bool).triu(1).view(1, 1, T, T)
    hidden = causal | padding(T)
    scale = None if gamma is None else scaled_row_scale(gamma)
    full = plain_relu_attention(q, k, v, hidden, gamma)
    for t in range(T):
        step = flex_relu_attention(
            q[:, :, t : t + 1], k[:, :, : t + 1], v[:, :, : t + 1], padding(T)[..., : t + 1], scale
        )
        assert torch.isfinite(step).all()
        torch.testing.assert_close(step.double(), full[:, :, t : t + 1], atol=2e-5, rtol=2e-5)
        assert torch.all(step[2] == 0)
    with pytest.raises(ValueError, match="differs between queries"):
        flex_relu_attention(q, k, v, hidden, scale)


def test_no_mask_and_bad_input_errors():
    q, k, v = inputs(5, seed=2)
    out = flex_relu_attention(q, k, v, None)
    torch.testing.assert_close(out.double(), plain_relu_attention(q, k, v, None), atol=2e-5, rtol=2e-5)
    with pytest.raises(ValueError, match="bool mask"):
        flex_relu_attention(q, k, v, torch.zeros(B, 1, 1, 5))
    with pytest.raises(ValueError, match="q \\(B, H, T, d\\)"):
        flex_relu_attention(q[0], k, v)


def test_availability_reasons():
    assert "forward-only" in flex_relu_unavailable("cpu", grad=True)
    assert "float64" in flex_relu_unavailable("cpu", grad=False, dtype=torch.float64)
    assert flex_relu_unavailable("mps", grad=False) is not None


# ---------------------------------------------------------------- as a backend of attend()
MODELS = {
    "rela_g": dict(attn_activation="relu", attn_output_norm="gated_rmsnorm"),
    "rela_i": dict(attn_activation="relu", attn_output_norm="rmsnorm_i"),
    "reluformer": dict(attn_activation="relu_scaled", attn_output_norm="none"),
}


def _backend_model(name, backend):
    from helpers import build_model

    model, d = build_model(**MODELS[name])
    for m in model.attention_modules():
        m.backend = backend
    return model, d


@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_on_the_flex_backend_equal_materialized(name, monkeypatch):
    """A model whose attention runs on flex wherever it can (--attn-flex-min-keys 1: encoder
    self-attention and cross-attention with left-padded sources, incremental decoder
    self-attention; causal teacher forcing stays materialized on CPU) gives the materialized
    model's outputs, in teacher forcing and in incremental decoding."""
    from fairseq_sparse_attn.attention import flex_relu as fr
    from fairseq_sparse_attn.attention.backends import flex as flex_backend

    from helpers import random_batch

    calls = []
    kernel = fr.flex_relu_attention
    monkeypatch.setattr(fr, "flex_relu_attention", lambda *a, **kw: calls.append(1) or kernel(*a, **kw))
    # auto tries flex on CUDA only (query_block serves CPU inference): allow it on CPU here
    monkeypatch.setattr(flex_backend, "FLEX_AUTO_DEVICES", frozenset({"cpu", "cuda"}))
    flex_model, d = _backend_model(name, "auto")
    for m in flex_model.attention_modules():
        m.flex_min_keys = 1
    ref_model, _ = _backend_model(name, "materialized")
    for model in (flex_model, ref_model):  # as fairseq-generate: no weights asked but the
        model.make_generation_fast_()  # alignment layer's (that one runs materialized)
    src, lengths, prev = random_batch(d)
    with torch.no_grad():
        enc = flex_model.encoder(src, src_lengths=lengths)
        enc_ref = ref_model.encoder(src, src_lengths=lengths)
        torch.testing.assert_close(enc["encoder_out"][0], enc_ref["encoder_out"][0], atol=2e-5, rtol=2e-5)
        encoder_calls = len(calls)
        assert encoder_calls == 2  # both encoder layers
        full, _ = flex_model.decoder(prev, encoder_out=enc)
        full_ref, _ = ref_model.decoder(prev, encoder_out=enc_ref)
        torch.testing.assert_close(full, full_ref, atol=2e-5, rtol=2e-5)
        assert len(calls) > encoder_calls  # cross-attention (the alignment layer's: materialized)
        state = {}
        before = len(calls)
        for t in range(prev.size(1)):
            step, _ = flex_model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)
            real = prev[:, t].ne(d.pad())
            torch.testing.assert_close(step[real, 0], full_ref[real, t], atol=2e-5, rtol=2e-5)
        assert len(calls) - before >= 2 * prev.size(1)  # decoder self-attention of each step


def test_flex_backend_choice_and_errors(monkeypatch):
    """auto picks flex only from --attn-flex-min-keys keys on, only on the devices of
    FLEX_AUTO_DEVICES (CUDA; CPU inference goes to query_block) and only where it can run;
    forced where it cannot (CPU with gradients) is an error naming the reason."""
    from fairseq_sparse_attn.attention.activations import build_activation
    from fairseq_sparse_attn.attention.backends import flex as flex_backend
    from fairseq_sparse_attn.attention.core import AttendSpec, AttentionInputs, attend
    from fairseq_sparse_attn.attention.heads import HeadPlan

    q, k, v = inputs(5, seed=3)

    def spec(backend="auto", min_keys=0):
        return AttendSpec(
            activation=build_activation("relu", H),
            dropout=torch.nn.Dropout(0.0),
            heads=HeadPlan(H),
            backend=backend,
            flex_min_keys=min_keys,
        )

    with torch.no_grad():
        assert attend(q, k, v, AttentionInputs(), spec(min_keys=6))[1].backend == "materialized"
        assert attend(q, k, v, AttentionInputs(), spec(min_keys=5))[1].backend == "query_block"
        forced, _ = attend(q, k, v, AttentionInputs(), spec("flex"))
        torch.testing.assert_close(forced.double(), plain_relu_attention(q, k, v, None), atol=2e-5, rtol=2e-5)
    monkeypatch.setattr(flex_backend, "FLEX_AUTO_DEVICES", frozenset({"cpu", "cuda"}))
    with torch.no_grad():
        out, inter = attend(q, k, v, AttentionInputs(), spec(min_keys=5))
        assert inter.backend == "flex"
        torch.testing.assert_close(out.double(), plain_relu_attention(q, k, v, None), atol=2e-5, rtol=2e-5)
    qg = q.clone().requires_grad_(True)
    assert attend(qg, k, v, AttentionInputs(), spec(min_keys=5))[1].backend == "materialized"
    with pytest.raises(ValueError, match="'flex'.*forward-only"):
        attend(qg, k, v, AttentionInputs(), spec("flex"))
    causal = AttentionInputs(hidden=torch.ones(T, 5, dtype=torch.bool).triu(1).view(1, 1, T, 5))
    with torch.no_grad():
        assert attend(q, k, v, causal, spec(min_keys=1))[1].backend == "query_block"  # not flex
        with pytest.raises(ValueError, match="'flex'.*differs between queries"):
            attend(q, k, v, causal, spec("flex"))
