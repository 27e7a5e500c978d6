"""Activation traits (attention/activations.py): a new ReLU-family activation is one class
in one file.  Two toy rectified activations with exact zeros are registered here and run
through every backend that serves them (materialized, query_block, the inference call of
the fairseq module), each checked against its plain formula computed here; the backends
that need another trait refuse them."""

import pytest
import torch
import torch.nn.functional as F

from fairseq_sparse_attn.attention import SparseMultiheadAttention
from fairseq_sparse_attn.attention.activations import ACTIVATION_REGISTRY, TRAITS, Rectified, build_activation
from fairseq_sparse_attn.attention.call_plan import CallPlan
from fairseq_sparse_attn.attention.core import AttendSpec, AttentionInputs, attend
from fairseq_sparse_attn.attention.heads import HeadPlan

from helpers import attention_config

B, H, T, S, D = 2, 3, 4, 7, 8


class SquaredReLU(Rectified):
    """Toy: f(s) = max(0, s)^2 (So et al. 2021 use it in the feed-forward block)."""

    exact_zeros = True

    def fn(self, scores):
        return F.relu(scores).square()

    def fn_(self, scores):
        return scores.relu_().square_()


class ReLU6PerKey(Rectified):
    """Toy with a row factor: f(s) = min(max(0, s), 6), weights divided by the number of
    visible keys (``fn_`` not defined: the default in-place copy is used)."""

    exact_zeros = True
    row_scaled = True

    def fn(self, scores):
        return F.relu6(scores)

    def row_scale(self, n):
        return 1.0 / n.clamp(min=1)


def plain_squared_relu(scores, hidden):
    w = torch.clamp(scores, min=0) ** 2
    return w if hidden is None else torch.where(hidden, torch.zeros_like(w), w)


def plain_relu6_per_key(scores, hidden):
    w = torch.clamp(scores, min=0, max=6)
    if hidden is None:
        return w / scores.size(-1)
    w = torch.where(hidden, torch.zeros_like(w), w)
    n = (~hidden).sum(-1, keepdim=True).clamp(min=1).to(w.dtype)
    return w / n


TOYS = {"toy_squared_relu": (SquaredReLU, plain_squared_relu), "toy_relu6_per_key": (ReLU6PerKey, plain_relu6_per_key)}


@pytest.fixture(params=sorted(TOYS))
def toy(request):
    """The toy activation registered under its name for the test, removed afterwards."""
    name = request.param
    cls, formula = TOYS[name]
    ACTIVATION_REGISTRY.register(name)(cls)
    yield name, formula
    del ACTIVATION_REGISTRY[name]


def qkv(seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, H, T, D, generator=g),
        torch.randn(B, H, S, D, generator=g),
        torch.randn(B, H, S, D, generator=g),
    )


def masks():
    pad = torch.zeros(B, 1, 1, S, dtype=torch.bool)
    pad[1, ..., 5:] = True
    causal = torch.ones(T, S, dtype=torch.bool).triu(S - T + 1).view(1, 1, T, S)
    return {"none": None, "padding": pad, "causal+padding": causal | pad}


def reference(formula, q, k, v, hidden):
    scores = q.double() @ k.double().transpose(-1, -2)
    return formula(scores, hidden) @ v.double()


def spec(name, backend, min_keys=0):
    return AttendSpec(
        activation=build_activation(name, H),
        dropout=torch.nn.Dropout(0.0),
        heads=HeadPlan(H),
        backend=backend,
        flex_min_keys=min_keys,
    )


def test_traits_are_collected_per_class():
    assert set(TRAITS) >= {"normalizing", "rectified", "exact_zeros", "row_scaled"}
    assert SquaredReLU.traits == {"rectified", "exact_zeros"}
    assert ReLU6PerKey.traits == {"rectified", "exact_zeros", "row_scaled"}
    relu, scaled, gelu = (type(build_activation(n, 1)) for n in ("relu", "relu_scaled", "gelu"))
    assert relu.traits == {"rectified", "exact_zeros", "supports_chunking"}
    assert scaled.traits == relu.traits | {"row_scaled"}
    assert gelu.traits == {"rectified"}  # gelu(s) != 0 for s < 0: never streamed
    assert type(build_activation("softmax", 1)).traits == {"normalizing", "softmax"}
    assert type(build_activation("sparsemax", 1)).traits == {"normalizing", "exact_zeros"}


@pytest.mark.parametrize("mask", sorted(masks()))
def test_materialized_and_query_block_follow_the_formula(toy, mask):
    name, formula = toy
    q, k, v = qkv()
    hidden = masks()[mask]
    ref = reference(formula, q, k, v, hidden)
    inputs = AttentionInputs(hidden=hidden, collect=frozenset({"weights"}))
    out, inter = attend(q, k, v, inputs, spec(name, "materialized"))
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        inter.weights.double(), formula(q.double() @ k.double().transpose(-1, -2), hidden), atol=1e-5, rtol=1e-5
    )
    with torch.no_grad():  # auto takes query_block for calls over >= flex_min_keys keys
        out, inter = attend(q, k, v, AttentionInputs(hidden=hidden), spec(name, "auto", min_keys=S))
    assert inter.backend == "query_block"
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)


def test_query_block_with_beam_groups(toy):
    """Beam search: one key copy per sentence, the beams' queries stacked."""
    name, formula = toy
    q, k, v = qkv(1)
    k, v = k[:1], v[:1]
    pad = torch.zeros(1, 1, 1, S, dtype=torch.bool)
    pad[..., 6:] = True
    with torch.no_grad():
        out, inter = attend(q, k, v, AttentionInputs(hidden=pad, kv_groups=B), spec(name, "query_block"))
    assert inter.backend == "query_block"
    ref = reference(formula, q, k.expand(B, -1, -1, -1), v.expand(B, -1, -1, -1), pad)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)


def test_backends_needing_other_traits_refuse_it(toy):
    name, _ = toy
    q, k, v = qkv()
    with pytest.raises(ValueError, match="'sdpa'.*cannot serve.*activation " + name):
        attend(q, k, v, AttentionInputs(), spec(name, "sdpa"))
    with pytest.raises(ValueError, match="'key_block'.*cannot serve.*supports_chunking"):
        attend(q, k, v, AttentionInputs(), spec(name, "key_block"))


def test_inference_call_follows_the_formula(toy, monkeypatch):
    """Incremental self-attention and cross-attention of the fairseq module take the
    inference call (the in-place f for the toy without a row factor) and give the plain
    formula over the module's own projections."""
    name, formula = toy
    taken = []
    real = CallPlan.inline_call
    monkeypatch.setattr(
        CallPlan, "inline_call", lambda plan, *a, **kw: taken.append(plan.state_key) or real(plan, *a, **kw)
    )
    E = H * D
    torch.manual_seed(0)
    self_attn = SparseMultiheadAttention(E, H, self_attention=True, config=attention_config(name)).eval()
    cross = SparseMultiheadAttention(E, H, encoder_decoder_attention=True, config=attention_config(name)).eval()
    assert self_attn._spec_and_stock()[2].inline  # the module's calls may go inline

    def plain(m, x, mem, hidden):
        """(tgt, bsz, E) query x over memory mem (src, bsz, E), in float64."""
        w = {n: getattr(m, n).weight.double() for n in ("q_proj", "k_proj", "v_proj", "out_proj")}
        b = {n: getattr(m, n).bias.double() for n in ("q_proj", "k_proj", "v_proj", "out_proj")}

        def heads(t):  # (len, bsz, E) -> (bsz, H, len, D)
            return t.view(t.size(0), t.size(1), H, D).permute(1, 2, 0, 3)

        q = heads(x.double() @ w["q_proj"].T + b["q_proj"]) * m.scaling
        k = heads(mem.double() @ w["k_proj"].T + b["k_proj"])
        v = heads(mem.double() @ w["v_proj"].T + b["v_proj"])
        o = formula(q @ k.transpose(-1, -2), hidden) @ v  # (bsz, H, tgt, D)
        return o.permute(2, 0, 1, 3).reshape(x.size(0), x.size(1), E) @ w["out_proj"].T + b["out_proj"]

    xs, enc = torch.randn(5, B, E), torch.randn(S, B, E)
    pad = torch.zeros(B, S, dtype=torch.bool)
    pad[1, 5:] = True
    state = {}
    with torch.no_grad():
        for t in range(xs.size(0)):
            out, _ = self_attn(xs[t : t + 1], xs[t : t + 1], xs[t : t + 1], incremental_state=state)
            torch.testing.assert_close(
                out.double(), plain(self_attn, xs[t : t + 1], xs[: t + 1], None), atol=1e-5, rtol=1e-5
            )
        out, _ = cross(xs, enc, enc, key_padding_mask=pad)
        torch.testing.assert_close(out.double(), plain(cross, xs, enc, pad.view(B, 1, 1, S)), atol=1e-5, rtol=1e-5)
    key = "attn_state"
    assert taken.count(self_attn._get_full_incremental_state_key(key)) == xs.size(0)
    assert taken.count(cross._get_full_incremental_state_key(key)) == 1
