"""Kobayashi et al.'s decomposition y_i = Σ_j Σ_h α^h_ij f^h(x_j) + b^O for the encoder
self-attention variants of the RHE paper, checked against plain computations written here
(projections by hand, the Rel_Pos value term as Shaw et al. Eq. 3, the RHE rule as Eq. 9-10):

* Rel_Pos keys only: exact; the recorded layer norms are ‖Σ_h α f‖ of the plain vectors;
* Rel_Pos values: the output has Σ_j α_ij a^V_(j-i) W^O on top (shown by the plain
  formula), so the norm analysis refuses it with a message naming the flag;
* RHE pruning: the layer norm leaves out each sentence's pruned heads (the plain rule
  decides which), and its sum over keys is the module's output again.
"""

import math

import pytest
import torch

from fairseq_sparse_attn.analysis.norms import NormRecorder, check_decomposable, model_decomposition
from fairseq_sparse_attn.analysis.recording import Batch, collecting
from fairseq_sparse_attn.attention import SparseMultiheadAttention
from fairseq_sparse_attn.attention.config import BiasProviderConfig, RelativePositionConfig, RHEConfig
from fairseq_sparse_attn.attention.core import AttentionInputs
from fairseq_sparse_attn.attention.intermediates import Intermediates

from helpers import attention_config

E, H = 16, 4
D = E // H
LENGTHS = (6, 4)


def make(seed=0, rel_k=0, rel_values=False, biases=(), rhe=False, rhe_gate="dynamic", prune_redundant_heads=False):
    providers = tuple(
        (name, RelativePositionConfig(rel_k, rel_values) if name == "rel_pos" else BiasProviderConfig())
        for name in biases
    )
    rhe_config = RHEConfig(rhe_gate, prune_redundant_heads) if rhe else None
    torch.manual_seed(seed)
    config = attention_config(kind="encoder_self", biases=providers, rhe=rhe_config)
    m = SparseMultiheadAttention(E, H, self_attention=True, config=config).eval()
    m.backend = "materialized"
    return m


class Wrapper(torch.nn.Module):
    """A one-module "model" for collecting / model_decomposition."""

    def __init__(self, m):
        super().__init__()
        self.layers = torch.nn.ModuleList([m])

    def attention_modules(self):
        return [self.layers[0]]


def batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    xs = [2.0 * torch.randn(n, E, generator=g) for n in LENGTHS]
    T = max(LENGTHS)
    x = torch.zeros(T, len(xs), E)
    pad = torch.ones(len(xs), T, dtype=torch.bool)
    for b, xb in enumerate(xs):  # left padding, as fairseq's sources
        x[T - len(xb) :, b] = xb
        pad[b, T - len(xb) :] = False
    return xs, x, pad


def dependencies(pad, seed=2):
    """Random symmetric src_dep (True on the diagonal of real tokens), left-padded."""
    g = torch.Generator().manual_seed(seed)
    bsz, T = pad.shape
    dep = torch.rand(bsz, T, T, generator=g) < 0.4
    dep = dep | dep.transpose(1, 2) | torch.eye(T, dtype=torch.bool)
    return dep & ~pad.unsqueeze(1) & ~pad.unsqueeze(2)


def recorded(m, x, pad, source=None):
    """(module output (T, B, E), NormRecorder records of the one module)."""
    model = Wrapper(m)
    norms = NormRecorder(model, kinds=("encoder_self",))
    inputs = AttentionInputs(**(source or {}))
    with torch.no_grad(), collecting(model, norms):
        norms.set_batch(Batch(pad, None))
        out, _ = m(x, x, x, key_padding_mask=pad, attn_inputs=inputs)
    return out, norms.records[("encoder_self", 0)]


def plain_f(m, x):
    """f^h(x_j) = (x_j W^V + b^V) W^{O,h}, (heads, n, E), from the parameters by hand."""
    v = x @ m.v_proj.weight.T + m.v_proj.bias
    return torch.stack([v[:, h * D : (h + 1) * D] @ m.out_proj.weight[:, h * D : (h + 1) * D].T for h in range(H)])


def test_rel_pos_keys_only_decomposes_exactly():
    m = make(biases=("rel_pos",), rel_k=2)
    check_decomposable(m)
    assert model_decomposition(Wrapper(m)) is True
    xs, x, pad = batch()
    out, recs = recorded(m, x, pad)
    T = x.shape[0]
    with torch.no_grad():
        for b, xb in enumerate(xs):
            n = len(xb)
            f = plain_f(m, xb)  # (H, n, E)
            alpha = recs[b].weights.double()  # (H, n, n), cropped to real tokens
            summands = torch.einsum("hij,hje->ije", alpha, f.double())  # Σ_h α^h_ij f^h(x_j)
            expected = out[T - n :, b].double() - m.out_proj.bias.double()
            assert torch.allclose(summands.sum(1), expected, atol=1e-5)
            assert torch.allclose(recs[b].layer.double(), summands.norm(dim=-1), atol=1e-5)


def test_rel_pos_value_term_is_refused_and_is_what_breaks_the_sum():
    m = make(biases=("rel_pos",), rel_k=2, rel_values=True)
    with pytest.raises(ValueError, match=r"rel_pos.*--encoder-rel-pos-values.*depends on the query"):
        check_decomposable(m)
    with pytest.raises(ValueError, match="--encoder-rel-pos-values"):
        check_decomposable(m, allow_output_norm=True)  # not an output norm: no way around it
    with pytest.raises(ValueError, match="--encoder-rel-pos-values"):
        model_decomposition(Wrapper(m), allow_output_norm=True)
    xs, x, pad = batch()
    with pytest.raises(ValueError, match="--encoder-rel-pos-values"):
        recorded(m, x, pad)
    # why: the plain per-key sum misses Σ_j α_ij a^V_clip(j-i) W^O (Shaw et al. Eq. 3)
    m.backend = "materialized"
    with torch.no_grad():
        out, w = m(x, x, x, key_padding_mask=pad, need_head_weights=True)  # w: (H, B, T, T)
        T, k = x.shape[0], 2
        provider = m.biases["rel_pos"]
        for b, xb in enumerate(xs):
            n = len(xb)
            alpha = w[:, b, T - n :, T - n :].double()
            f = plain_f(m, xb).double()
            per_key = torch.einsum("hij,hje->ie", alpha, f)
            a_v = torch.stack(
                [torch.stack([provider.value_embed[max(-k, min(k, j - i)) + k] for j in range(n)]) for i in range(n)]
            ).double()  # (n, n, D)
            extra = torch.stack(
                [
                    torch.einsum("ij,ijd->id", alpha[h], a_v) @ m.out_proj.weight[:, h * D : (h + 1) * D].T.double()
                    for h in range(H)
                ]
            ).sum(0)
            expected = out[T - n :, b].double() - m.out_proj.bias.double()
            assert torch.allclose(per_key + extra, expected, atol=1e-5)
            assert (per_key - expected).norm() / expected.norm() > 0.01


def plain_redundant(m, xb, dep_b, gate):
    """The RHE rule by hand (Eq. 9-10, fixed gate): head h is redundant in the sentence when
    the mean over queries of the softmax mass on dependency-related keys is <= gate."""
    q = (xb @ m.q_proj.weight.T + m.q_proj.bias) / math.sqrt(D)
    k_ = xb @ m.k_proj.weight.T + m.k_proj.bias
    out = []
    for h in range(H):
        s = slice(h * D, (h + 1) * D)
        A = torch.softmax(q[:, s] @ k_[:, s].T, dim=-1)
        syn = float((A * dep_b.double()).sum(-1).mean().detach())
        out.append(not syn > gate)
    return out


def test_rhe_pruned_heads_are_left_out_of_the_layer_norm_per_sentence():
    xs, x, pad = batch(seed=5)
    dep = dependencies(pad)
    T = x.shape[0]
    found = None
    for seed in range(20):  # a model whose pruning differs between the two sentences
        m = make(seed=seed, rhe=True, rhe_gate=0.45, prune_redundant_heads=True)
        plain = [plain_redundant(m, xb, dep[b, T - len(xb) :, T - len(xb) :], 0.45) for b, xb in enumerate(xs)]
        if any(any(r) and not all(r) for r in plain) and plain[0] != plain[1]:
            found = m, plain
            break
    assert found is not None, "no seed gives sentence-dependent pruning"
    m, plain = found
    assert model_decomposition(Wrapper(m)) is True
    out, recs = recorded(m, x, pad, {"src_dep": dep})
    with torch.no_grad():
        for b, xb in enumerate(xs):
            n = len(xb)
            assert recs[b].pruned.tolist() == plain[b]
            keep = torch.tensor([0.0 if r else 1.0 for r in plain[b]], dtype=torch.float64)
            f = plain_f(m, xb).double()
            alpha = recs[b].weights.double()
            kept = torch.einsum("h,hij,hje->ije", keep, alpha, f)
            expected = out[T - n :, b].double() - m.out_proj.bias.double()
            assert torch.allclose(kept.sum(1), expected, atol=1e-5)  # the module's output
            assert torch.allclose(recs[b].layer.double(), kept.norm(dim=-1), atol=1e-5)
            # per-head norms are still given for pruned heads (what they would contribute)
            assert torch.allclose(recs[b].head.double(), alpha.abs() * f.norm(dim=-1).unsqueeze(1), atol=1e-5)
    # without the decision of this forward the recorder refuses rather than count them
    model = Wrapper(m)
    norms = NormRecorder(model, kinds=("encoder_self",))
    norms.set_batch(Batch(pad, None))
    w = torch.rand(len(xs), H, T, T)
    with pytest.raises(ValueError, match="prunes redundant heads per sentence"):
        from fairseq_sparse_attn.analysis.recording import attention_sites

        site = attention_sites(model)[0]
        norms.collect(site, Intermediates(weights=w, values=torch.zeros(len(xs) * H, T, D)))


def test_command_line_check_names_the_checkpoint_and_the_way_out():
    from fairseq_sparse_attn.analysis.commands.base import UsageError
    from fairseq_sparse_attn.analysis.commands.norms import require_decomposable

    model = Wrapper(make(biases=("rel_pos",), rel_k=2, rel_values=True))
    with pytest.raises(UsageError, match=r"^ckpt\.pt: .*--encoder-rel-pos-values.*--kinds cross decoder_self"):
        require_decomposable(model, ("encoder_self", "cross"), False, "ckpt.pt")
    assert require_decomposable(model, ("cross",), False, "ckpt.pt") is True  # no cross module here
