"""The query-block ReLU path (attention/query_block_relu.py, backend ``query_block``):
against the computation written plainly (ReLA and ReLUFormer weights, padding, causal,
null rows, fully padded sentences, every block size), bit for bit against the materialized
path where the arithmetic is the same, the backend's choice in auto, its errors, and whole
ReLA-g / ReLA-i / ReLUFormer models (teacher forcing and incremental decoding) against
the same models on the materialized backend."""

import math

import pytest
import torch

from fairseq_sparse_attn.attention import build_activation
from fairseq_sparse_attn.attention.core import AttendSpec, AttentionInputs, attend
from fairseq_sparse_attn.attention.heads import HeadPlan
from fairseq_sparse_attn.attention.query_block_relu import query_block_relu_attention, query_block_rows

from helpers import plain_relu_attention

B, H, T, D = 3, 2, 7, 4  # T > D: padding through zero values; one query: masked scores


def inputs(src, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g) / math.sqrt(D)
    k = torch.randn(B, H, src, D, generator=g)
    v = torch.randn(B, H, src, D, generator=g)
    q[1, 1, 2] = 0  # a null row: every score is 0
    return q, k, v


def padding(src):
    pad = torch.zeros(B, 1, 1, src, dtype=torch.bool)
    pad[1, ..., src - 2 :] = True  # two padding keys
    pad[2] = True  # every key is padding
    return pad


def row_scale(gamma):
    return lambda n: 1.0 / (gamma * torch.sqrt(n.clamp(min=1) / 2))


@pytest.fixture(params=["batched", "per_head"])
def layout(request, monkeypatch):
    """Both block layouts: every (sentence, head) at once, or one (sentence, head) at a
    time (what calls with >= PER_HEAD_MIN_QUERIES queries take)."""
    import fairseq_sparse_attn.attention.query_block_relu as qb

    monkeypatch.setattr(qb, "PER_HEAD_MIN_QUERIES", 10**9 if request.param == "batched" else 1)
    return request.param


@pytest.mark.parametrize("gamma", [None, 1.5], ids=["rela", "reluformer"])
@pytest.mark.parametrize("block", [None, 1, 2, 3, 7, 50])
def test_against_the_formula(gamma, block, layout):
    q, k, v = inputs(9)
    scale = None if gamma is None else row_scale(gamma)
    with torch.no_grad():
        for hidden in (None, padding(9), padding(9) | torch.ones(T, 9, dtype=torch.bool).triu(3).view(1, 1, T, 9)):
            out = query_block_relu_attention(q, k, v, hidden, scale, block=block)
            torch.testing.assert_close(out.double(), plain_relu_attention(q, k, v, hidden, gamma), atol=1e-5, rtol=1e-5)
            if hidden is not None:
                assert torch.all(out[2] == 0)  # fully padded sentence: exactly 0
            assert torch.all(out[1, 1, 2] == 0)  # null row: exactly 0
            # one query (a decoding step): the mask goes onto the scores
            one = hidden[:, :, 4:5] if hidden is not None and hidden.size(2) > 1 else hidden
            out = query_block_relu_attention(q[:, :, 4:5], k, v, one, scale, block=block)
            torch.testing.assert_close(
                out.double(), plain_relu_attention(q[:, :, 4:5], k, v, one, gamma), atol=1e-5, rtol=1e-5
            )


def test_padding_is_bit_identical_to_the_materialized_path():
    """Hidden keys: value 0 instead of weight 0, the same products and sums: one block of
    all queries gives the materialized output bit for bit; smaller blocks change only the
    matrix-multiply kernel's summation order (a block of one query is a matrix-vector
    product)."""
    from fairseq_sparse_attn.attention.backends.materialized import materialized
    from fairseq_sparse_attn.attention.core import describe_call

    q, k, v = inputs(9, seed=1)
    spec = AttendSpec(activation=build_activation("relu", H), dropout=torch.nn.Dropout(0.0), heads=HeadPlan(H))
    inp = AttentionInputs(hidden=padding(9))
    with torch.no_grad():
        want, _ = materialized(q, k, v, inp, spec, describe_call(q, v, inp, spec))
        assert torch.equal(query_block_relu_attention(q, k, v, padding(9), block=T), want)
        for block in (1, 3):
            torch.testing.assert_close(
                query_block_relu_attention(q, k, v, padding(9), block=block), want, atol=1e-6, rtol=1e-6
            )


def test_per_head_layout_with_per_head_masks_and_low_precision(layout):
    """A mask with a sentence and a head dimension, bf16 inputs (the value product in the
    values' dtype), and a block that leaves a shorter last block."""
    q, k, v = inputs(9, seed=2)
    hidden = torch.rand(B, H, T, 9, generator=torch.Generator().manual_seed(3)) < 0.3
    with torch.no_grad():
        out = query_block_relu_attention(q, k, v, hidden, block=3)
        torch.testing.assert_close(out.double(), plain_relu_attention_per_head(q, k, v, hidden), atol=1e-5, rtol=1e-5)
        low = query_block_relu_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), hidden, block=3)
        assert low.dtype == torch.bfloat16
        torch.testing.assert_close(low.double(), out.double(), atol=0.05, rtol=0.05)


def plain_relu_attention_per_head(q, k, v, hidden):
    """relu(q kᵀ) v with a (B, H, T, S) mask, in float64."""
    s = (q.double() @ k.double().transpose(-1, -2)).clamp(min=0).masked_fill(hidden, 0.0)
    return s @ v.double()


def test_block_rows_follow_the_byte_budget():
    assert query_block_rows(2, 8, 2048, 2048, 4, budget=32 * 2**20) == 256
    assert query_block_rows(2, 8, 100, 2048, 4, budget=32 * 2**20) == 100  # all queries
    assert query_block_rows(64, 8, 2048, 100000, 4, budget=2**20) == 1  # at least one


def test_errors():
    q, k, v = inputs(5)
    with pytest.raises(ValueError, match="no gradients"):
        query_block_relu_attention(q.requires_grad_(True), k, v)
    q, k, v = inputs(5)
    with torch.no_grad():
        with pytest.raises(ValueError, match="bool mask"):
            query_block_relu_attention(q, k, v, torch.zeros(B, 1, 1, 5))
        with pytest.raises(ValueError, match="q \\(B, H, T, d\\)"):
            query_block_relu_attention(q[0], k, v)
        with pytest.raises(ValueError, match="positive"):
            query_block_relu_attention(q, k, v, block=0)


def _spec(backend="auto", min_keys=0, activation="relu"):
    return AttendSpec(
        activation=build_activation(activation, H),
        dropout=torch.nn.Dropout(0.0),
        heads=HeadPlan(H),
        backend=backend,
        flex_min_keys=min_keys,
    )


def test_backend_choice():
    """auto: query_block for calls without gradients over >= --attn-flex-min-keys keys on
    CPU, materialized otherwise; forced with
    gradients or analysis weights: an error naming the reason."""
    q, k, v = inputs(5, seed=3)
    causal = AttentionInputs(hidden=torch.ones(T, 5, dtype=torch.bool).triu(1).view(1, 1, T, 5))
    with torch.no_grad():
        assert attend(q, k, v, AttentionInputs(), _spec(min_keys=6))[1].backend == "materialized"
        assert attend(q, k, v, AttentionInputs(), _spec(min_keys=0))[1].backend == "materialized"
        out, inter = attend(q, k, v, causal, _spec(min_keys=5))
        assert inter.backend == "query_block"
        torch.testing.assert_close(out.double(), plain_relu_attention(q, k, v, causal.hidden), atol=1e-5, rtol=1e-5)
        weights = AttentionInputs(collect=frozenset({"weights"}))
        assert attend(q, k, v, weights, _spec(min_keys=5))[1].backend == "materialized"
        assert attend(q, k, v, AttentionInputs(), _spec(min_keys=5, activation="softmax"))[1].backend == "sdpa"
        with pytest.raises(ValueError, match="'query_block'.*returning attention weights"):
            attend(q, k, v, weights, _spec("query_block"))
    qg = q.clone().requires_grad_(True)
    assert attend(qg, k, v, AttentionInputs(), _spec(min_keys=5))[1].backend == "materialized"
    with pytest.raises(ValueError, match="'query_block'.*gradients"):
        attend(qg, k, v, AttentionInputs(), _spec("query_block"))


MODELS = {
    "rela_g": dict(attn_activation="relu", attn_output_norm="gated_rmsnorm"),
    "rela_i": dict(attn_activation="relu", attn_output_norm="rmsnorm_i"),
    "reluformer": dict(attn_activation="relu_scaled", attn_output_norm="none"),
}


def test_beam_groups_keep_one_key_copy():
    """kv_groups = 2 (beam search cross-attention): the beams' queries become queries of the
    sentence's one key copy; the same as every beam with its own copy, padding included."""
    from fairseq_sparse_attn.attention.backends.query_block import query_block
    from fairseq_sparse_attn.attention.core import describe_call

    q, k, v = inputs(9, seed=5)
    q2 = torch.cat([q, q.flip(2)], dim=0).view(2, B, H, T, D).transpose(0, 1).reshape(2 * B, H, T, D)
    pad = padding(9).repeat_interleave(2, dim=0)  # as the attention module expands it
    sp = _spec(activation="relu_scaled")
    with torch.no_grad():
        for hidden in (None, pad):
            inp = AttentionInputs(hidden=hidden, kv_groups=2)
            out, _ = query_block(q2, k, v, inp, sp, describe_call(q2, v, inp, sp))
            want = plain_relu_attention(
                q2, k.repeat_interleave(2, dim=0), v.repeat_interleave(2, dim=0), hidden, gamma=1.0
            )
            torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_on_query_blocks_equal_materialized(name, monkeypatch):
    """Every attention call of a ReLA-g / ReLA-i / ReLUFormer model on query_block (auto with
    --attn-flex-min-keys 1; the alignment layer's cross-attention returns weights and stays
    materialized) gives the materialized model's outputs: encoder with left-padded sources,
    causal teacher forcing and incremental decoding."""
    from fairseq_sparse_attn.attention import query_block_relu as qb

    from helpers import build_model, random_batch

    calls = []
    kernel = qb.query_block_relu_attention
    monkeypatch.setattr(qb, "query_block_relu_attention", lambda *a, **kw: calls.append(1) or kernel(*a, **kw))
    model, d = build_model(**MODELS[name])
    ref, _ = build_model(**MODELS[name])
    ref.load_state_dict(model.state_dict())
    for m in model.attention_modules():
        m.flex_min_keys = 1
    for m in ref.attention_modules():
        m.backend = "materialized"
    for mdl in (model, ref):
        mdl.eval()
        mdl.make_generation_fast_()
    src, lengths, prev = random_batch(d)
    with torch.no_grad():
        enc, enc_ref = model.encoder(src, src_lengths=lengths), ref.encoder(src, src_lengths=lengths)
        torch.testing.assert_close(enc["encoder_out"][0], enc_ref["encoder_out"][0], atol=1e-5, rtol=1e-5)
        assert len(calls) == 2  # both encoder layers
        full, _ = model.decoder(prev, encoder_out=enc)
        full_ref, _ = ref.decoder(prev, encoder_out=enc_ref)
        torch.testing.assert_close(full, full_ref, atol=1e-5, rtol=1e-5)
        before, state = len(calls), {}
        for t in range(prev.size(1)):
            step, _ = model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)
            real = prev[:, t].ne(d.pad())
            torch.testing.assert_close(step[real, 0], full_ref[real, t], atol=2e-5, rtol=2e-5)
        assert len(calls) - before >= 2 * prev.size(1)  # self- and cross-attention of each step


@pytest.mark.parametrize(
    "arch, backend, extra",
    [
        ("rela_transformer_iwslt_de_en", "key_block", {"attn_key_block_size": 3}),
        ("reluformer_iwslt_de_en", "query_block", {}),
        ("softmax_transformer_iwslt_de_en", "sdpa", {}),
    ],
)
def test_a_named_backend_without_weights_runs_whole_models(arch, backend, extra):
    """fairseq's decoder asks its alignment layer's cross-attention for per-head weights at
    every forward (need_head_weights), which key_block, query_block and sdpa do not compute:
    a model on one of them by name (--attn-backend, or --model-overrides at generate time)
    stopped at its first step with "cannot serve this configuration: returning attention
    weights (analysis)".  Those requests now get None, as on the triton backend: training,
    teacher forcing and beam search give auto's results, and --print-alignment, which needs
    the weights, is one error naming the backend."""
    from fairseq.sequence_generator import SequenceGenerator, SequenceGeneratorWithAlignment

    from fairseq_sparse_attn.errors import UsageError

    from helpers import build_model, random_batch

    named, d = build_model(arch, attn_backend=backend, attention_dropout=0.0, **extra)
    auto, _ = build_model(arch, attention_dropout=0.0, **extra)
    src, lengths, prev = random_batch(d)
    with torch.no_grad():
        got, extra_out = named(src, lengths, prev)
        want, _ = auto(src, lengths, prev)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert extra_out["attn"] == [None]
    if backend != "query_block":  # (query_block serves calls without gradients only)
        named.train()
        named(src, lengths, prev)[0].sum().backward()
        named.eval()
    sample = {"net_input": {"src_tokens": src, "src_lengths": lengths}}
    hyps = [SequenceGenerator([m], d, beam_size=3, max_len_b=5).forward(sample) for m in (named, auto)]
    for a, b in zip(*hyps):
        assert [h["tokens"].tolist() for h in a] == [h["tokens"].tolist() for h in b]
        torch.testing.assert_close(torch.stack([h["score"] for h in a]), torch.stack([h["score"] for h in b]))
    with pytest.raises(UsageError, match=f"1 more run on --attn-backend {backend}, which computes none"):
        SequenceGeneratorWithAlignment([named], d, beam_size=2, max_len_b=4)
