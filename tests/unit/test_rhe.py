"""Syntax-enhanced attention (DEA, LPEA), redundant head enlivening (RHE) and the Rel_Pos /
Localness baselines in the attention core ("Enlivening Redundant Heads in Multi-head
Self-attention for Machine Translation").

Every expectation is either a hand-derived matrix (the paper's example "Bush held a talk
with Sharon") or the paper's formula written plainly, per sentence, with Python loops.
``src_dep`` / ``src_rp`` are built by hand here, as the parse_annotated_translation
collater provides them: (bsz, T, T), left-padded like src_tokens, NO_PHRASE off-phrase.
"""

import math

import pytest
import torch
from fairseq.logging import metrics

from fairseq_sparse_attn.attention import SparseMultiheadAttention
from fairseq_sparse_attn.attention.biases import (
    NO_PHRASE,
    BiasContext,
    DependencyMask,
    check_source_annotations,
)
from fairseq_sparse_attn.attention.config import (
    BiasProviderConfig,
    LocalPhraseConfig,
    RelativePositionConfig,
    RHEConfig,
)
from fairseq_sparse_attn.attention.core import AttentionInputs
from fairseq_sparse_attn.attention.intermediates import Intermediates, collect
from fairseq_sparse_attn.attention.rhe import (
    head_confidence,
    log_redundant_fractions,
    parse_gate,
    redundant_heads,
    syntactic_attention,
)
from fairseq_sparse_attn.options.cli import parse_layer_list
from fairseq_sparse_attn.options.resolve import resolve

from helpers import attention_config, build_model, model_args, random_batch

E, H = 16, 4
D = E // H
X = NO_PHRASE

# ----------------------------------------------------------------- the paper's example
# "Bush held a talk with Sharon" + EOS (positions 0..6).
#
# Dependencies (spaCy-style; the choice for "with" is ours: it attaches to the verb):
#   held = root;  Bush -> held (nsubj), talk -> held (dobj), a -> talk (det),
#   with -> held (prep), Sharon -> with (pobj).   EOS is related only to itself.
# D_ij = 0 (visible) for related pairs in either direction and i = j, -inf otherwise:
DEA_VISIBLE = [
    # Bush held a  talk with Sharon </s>
    [1, 1, 0, 0, 0, 0, 0],  # Bush
    [1, 1, 0, 1, 1, 0, 0],  # held
    [0, 0, 1, 1, 0, 0, 0],  # a
    [0, 1, 1, 1, 0, 0, 0],  # talk
    [0, 1, 0, 0, 1, 1, 0],  # with
    [0, 0, 0, 0, 1, 1, 0],  # Sharon
    [0, 0, 0, 0, 0, 0, 1],  # </s>
]

# Constituency tree (S (NP (NNP Bush)) (VP (VBD held) (NP (DT a) (NN talk))
#                                        (PP (IN with) (NP (NNP Sharon)))))
# layer(word) = depth of the word (S = 0): Bush 3, held 3, a 4, talk 4, with 4, Sharon 5.
# Rule 1 (local phrase = words under the lowest ancestor with more than one child):
#   Bush: NNP, NP have one child -> S -> all words;   held: VBD -> VP -> held a talk with Sharon
#   a, talk: NP(DT NN) -> a talk;                      with, Sharon: PP(IN NP) -> with Sharon
# Rule 2 (x_i in local_phrase(x_j), j < i  =>  x_j in local_phrase(x_i)):
#   held gets Bush; a, talk, with, Sharon get Bush and held; Sharon also gets with.
# RP_ij = layer(x_j) - layer(x_i) inside the local phrase of x_i, NO_PHRASE outside
# (paper: "held"/"talk" 3 - 4 -> RP_{2,4} = 1, 1-based;  "a"/"Sharon" masked).
# EOS: only itself (RP = 0).
PAPER_RP = [
    # Bush held  a   talk with Sharon </s>
    [0, 0, 1, 1, 1, 2, X],  # Bush
    [0, 0, 1, 1, 1, 2, X],  # held
    [-1, -1, 0, 0, X, X, X],  # a
    [-1, -1, 0, 0, X, X, X],  # talk
    [-1, -1, X, X, 0, 1, X],  # with
    [-2, -2, X, X, -1, 0, X],  # Sharon
    [X, X, X, X, X, X, 0],  # </s>
]

# A second, shorter sentence: "Sharon held talks" + EOS,
# (S (NP (NNP Sharon)) (VP (VBD held) (NP (NNS talks)))); layers 3, 3, 4.
# Sharon -> held, talks -> held.
SHORT_VISIBLE = [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 1]]
SHORT_RP = [[0, 0, 1, X], [0, 0, 1, X], [-1, -1, 0, X], [X, X, X, 0]]


def left_pad(mats, fill, dtype):
    """(bsz, T, T) from square per-sentence matrices, left-padded like src_tokens."""
    T = max(len(m) for m in mats)
    out = torch.full((len(mats), T, T), fill, dtype=dtype)
    for b, m in enumerate(mats):
        n = len(m)
        out[b, T - n :, T - n :] = torch.tensor(m, dtype=dtype)
    return out


def example_annotations():
    dep = left_pad([DEA_VISIBLE, SHORT_VISIBLE], False, torch.bool)
    rp = left_pad([PAPER_RP, SHORT_RP], NO_PHRASE, torch.int16)
    return {"src_dep": dep, "src_rp": rp}


def make(
    biases=(),
    activation="softmax",
    seed=0,
    k=6,
    rel_k=0,
    rel_values=False,
    rhe=False,
    rhe_gate="dynamic",
    prune_redundant_heads=False,
    prune_skip_in_training=False,
    layer_index=None,
    dropout=0.0,
):
    options = {"lpea": lambda: LocalPhraseConfig(k), "rel_pos": lambda: RelativePositionConfig(rel_k, rel_values)}
    providers = tuple((name, options[name]() if name in options else BiasProviderConfig()) for name in biases)
    rhe_config = RHEConfig(rhe_gate, prune_redundant_heads, prune_skip_in_training) if rhe else None
    torch.manual_seed(seed)
    config = attention_config(activation, biases=providers, rhe=rhe_config, layer_index=layer_index)
    m = SparseMultiheadAttention(E, H, self_attention=True, dropout=dropout, config=config).eval()
    m.backend = "materialized"
    return m


def sentences(lengths=(7, 4), seed=1, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(n, E, generator=g) for n in lengths]


def run(m, xs, source=None):
    """The module on a left-padded batch of the sentences xs; per-head weights (H, B, T, T)."""
    T = max(x.size(0) for x in xs)
    x = torch.zeros(T, len(xs), E)
    pad = torch.ones(len(xs), T, dtype=torch.bool)
    for b, xb in enumerate(xs):
        x[T - len(xb) :, b] = xb
        pad[b, T - len(xb) :] = False
    inputs = AttentionInputs(**source) if source is not None else None
    with collect("redundant") as records:
        out, w = m(x, x, x, key_padding_mask=pad, need_head_weights=True, attn_inputs=inputs)
    LAST_REDUNDANT[m] = records[-1][1].redundant if records else None
    return out, w


# module -> the (bsz, heads) RHE decisions of its last run() (returned as intermediates)
LAST_REDUNDANT = {}


def projections(m, x):
    """Plain per-head q (unscaled), k, v of one unpadded sentence x (n, E)."""
    q = x @ m.q_proj.weight.T + m.q_proj.bias
    k = x @ m.k_proj.weight.T + m.k_proj.bias
    v = x @ m.v_proj.weight.T + m.v_proj.bias
    sl = [slice(h * D, (h + 1) * D) for h in range(H)]
    return [q[:, s] for s in sl], [k[:, s] for s in sl], [v[:, s] for s in sl]


def softmax_rows(scores, visible=None):
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    return torch.softmax(scores, dim=-1)


def plain_output(m, heads_out):
    """concat(head outputs) -> out_proj."""
    return torch.cat(heads_out, -1) @ m.out_proj.weight.T + m.out_proj.bias


def plain_lpea_bias(m, rp, k):
    """P_ij = -|tanh(W_P w_clip(RP_ij,k) + b_P) . U_P| written per pair (Eq. 7-8)."""
    lp = m.biases["lpea"]
    n = len(rp)
    P = torch.zeros(n, n)
    for i in range(n):
        for j in range(n):
            if rp[i][j] == X:
                continue
            w = lp.rel_embed[max(-k, min(k, rp[i][j])) + k]
            P[i, j] = -torch.abs(torch.tanh(lp.proj.weight @ w + lp.proj.bias) @ lp.out)
    return P


# ----------------------------------------------------------------------------- DEA


def test_dea_mask_is_the_hand_derived_matrix():
    src = example_annotations()
    valid = src["src_dep"].diagonal(dim1=1, dim2=2)  # real tokens, here = the diagonal
    ctx = BiasContext(valid, src["src_dep"], src["src_rp"])
    bias, hide = DependencyMask(H, D)(torch.zeros(2, H, 7, D), ctx)
    assert bias is None and hide.shape == (2, 1, 7, 7)
    assert hide[0, 0].tolist() == [[not v for v in row] for row in DEA_VISIBLE]
    short = [[not v for v in row] for row in SHORT_VISIBLE]
    assert hide[1, 0, 3:, 3:].tolist() == short
    # padding query rows hide nothing (they keep seeing the sentence, never all -inf)
    assert not hide[1, 0, :3].any()


@pytest.mark.parametrize("activation", ["softmax", "relu"])
def test_dea_attention_against_plain_formula(activation):
    m = make(("dea",), activation)
    xs = sentences()
    out, w = run(m, xs, example_annotations())
    for b, (x, vis) in enumerate(zip(xs, (DEA_VISIBLE, SHORT_VISIBLE))):
        s = 7 - len(x)
        visible = torch.tensor(vis, dtype=torch.bool)
        qs, ks, vs = projections(m, x)
        heads = []
        for h in range(H):
            scores = qs[h] @ ks[h].T / math.sqrt(D)
            if activation == "softmax":  # softmax(QK^T/sqrt(d) + D), D in {0, -inf}
                A = softmax_rows(scores, visible)
            else:  # ReLU family: hidden keys are exact zeros, never relu(-inf)
                A = torch.relu(scores) * visible
            torch.testing.assert_close(w[h, b, s:, s:], A, atol=1e-6, rtol=1e-5)
            assert torch.all(w[h, b, s:, s:][~visible] == 0)
            heads.append(A @ vs[h])
        torch.testing.assert_close(out[s:, b], plain_output(m, heads), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------- LPEA


@pytest.mark.parametrize("k", [1, 6])
def test_lpea_bias_is_the_formula_on_the_hand_derived_rp(k):
    m = make(("lpea",), k=k)
    src = example_annotations()
    valid = src["src_dep"].diagonal(dim1=1, dim2=2)
    ctx = BiasContext(valid, src["src_dep"], src["src_rp"])
    bias, hide = m.biases["lpea"](torch.zeros(2, H, 7, D), ctx)
    expected = plain_lpea_bias(m, PAPER_RP, k)
    off_phrase = torch.tensor([[v == X for v in row] for row in PAPER_RP])
    assert hide[0, 0].tolist() == off_phrase.tolist()
    torch.testing.assert_close(bias[0, 0].masked_fill(off_phrase, 0), expected, atol=1e-6, rtol=1e-6)
    assert torch.all(bias[0, 0][~off_phrase] <= 0)  # P = -|...|
    if k == 1:  # clipping: Bush->Sharon (RP 2) and Sharon->Bush (RP -2) read w_1 / w_-1
        assert bias[0, 0, 0, 5] == bias[0, 0, 0, 2] and bias[0, 0, 5, 0] == bias[0, 0, 2, 0]
    else:
        assert bias[0, 0, 0, 5] != bias[0, 0, 0, 2]
    short = plain_lpea_bias(m, SHORT_RP, k)
    short_off = torch.tensor([[v == X for v in row] for row in SHORT_RP])
    torch.testing.assert_close(bias[1, 0, 3:, 3:].masked_fill(short_off, 0), short)


def test_lpea_attention_against_plain_formula_and_gradients():
    m = make(("lpea",), k=1)
    xs = sentences()
    out, w = run(m, xs, example_annotations())
    for b, (x, rp) in enumerate(zip(xs, (PAPER_RP, SHORT_RP))):
        s = 7 - len(x)
        visible = torch.tensor([[v != X for v in row] for row in rp])
        P = plain_lpea_bias(m, rp, 1)
        qs, ks, vs = projections(m, x)
        heads = []
        for h in range(H):
            A = softmax_rows(qs[h] @ ks[h].T / math.sqrt(D) + P, visible)
            torch.testing.assert_close(w[h, b, s:, s:], A, atol=1e-6, rtol=1e-5)
            heads.append(A @ vs[h])
        torch.testing.assert_close(out[s:, b], plain_output(m, heads), atol=1e-5, rtol=1e-5)
    # gradient reaches w_{-k..k}, W_P, b_P and U_P
    m.train()
    out, _ = run(m, xs, example_annotations())
    out.pow(2).sum().backward()
    lp = m.biases["lpea"]
    for name, p in (("w", lp.rel_embed), ("W_P", lp.proj.weight), ("b_P", lp.proj.bias), ("U_P", lp.out)):
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name
    assert torch.all(lp.rel_embed.grad.abs().sum(-1) > 0)  # labels -1, 0, 1 all occur


# -------------------------------------------------------------- bias 0 = standard


def test_zero_bias_reduces_to_standard_attention_exactly():
    from fairseq.modules import MultiheadAttention

    xs = sentences()
    plain = make()
    ref, ref_w = run(plain, xs)
    torch.manual_seed(0)
    stock = MultiheadAttention(E, H, self_attention=True).eval()
    stock.load_state_dict(plain.state_dict())
    T = 7
    x = torch.zeros(T, 2, E)
    pad = torch.ones(2, T, dtype=torch.bool)
    for b, xb in enumerate(xs):
        x[T - len(xb) :, b] = xb
        pad[b, T - len(xb) :] = False
    stock_out, _ = stock(x, x, x, key_padding_mask=pad)
    torch.testing.assert_close(ref, stock_out, atol=1e-6, rtol=1e-6)

    everything = {"src_dep": torch.ones(2, T, T, dtype=torch.bool), "src_rp": torch.zeros(2, T, T, dtype=torch.int16)}
    lpea = make(("lpea",))
    lpea.load_state_dict(plain.state_dict(), strict=False)
    with torch.no_grad():
        lpea.biases["lpea"].out.zero_()  # U_P = 0  =>  P = 0
    rel = make(("rel_pos",), rel_k=2, rel_values=True)
    rel.load_state_dict(plain.state_dict(), strict=False)
    with torch.no_grad():
        rel.biases["rel_pos"].key_embed.zero_()
        rel.biases["rel_pos"].value_embed.zero_()
    dea = make(("dea",))
    dea.load_state_dict(plain.state_dict())
    for m in (dea, lpea, rel):
        out, w = run(m, xs, everything)
        assert torch.equal(out, ref) and torch.equal(w, ref_w), m.biases


# ----------------------------------------------------------------------------- RHE


def test_rhe_rule_on_a_hand_made_attention_matrix():
    # two sentences, two heads; sentence 1 is left-padded (its first position is padding)
    dep = torch.tensor([[[1, 1, 0], [1, 1, 1], [0, 1, 1]], [[0, 0, 0], [0, 1, 1], [0, 1, 1]]], dtype=torch.bool)
    valid = torch.tensor([[1, 1, 1], [0, 1, 1]], dtype=torch.bool)
    third = 1 / 3
    A = torch.tensor(
        [
            [  # sentence 0
                [[1, 0, 0], [0, 1, 0], [0, 0, 1]],  # head 0: on itself
                [[0, 0, 1], [third, third, third], [1, 0, 0]],  # head 1: on unrelated words
            ],
            [  # sentence 1 (row/column 0 = padding; the padding row is ignored)
                [[0, 0.5, 0.5], [0, 0.2, 0.8], [0, 0.9, 0.1]],
                [[0, 0.5, 0.5], [0, 0.9, 0.1], [0, 0.05, 0.95]],
            ],
        ]
    )
    # by hand:  Syn_attn                 h_conf                      sigmoid(h_conf)
    #  s0 h0:  (1 + 1 + 1)/3 = 1        (1 + 1 + 1)/3 = 1            0.7311  -> important
    #  s0 h1:  (0 + 1 + 0)/3 = 1/3      (1 + 1/3 + 1)/3 = 7/9        0.6852  -> redundant
    #  s1 h0:  (1 + 1)/2 = 1            (.8 + .9)/2 = .85            0.7006  -> important
    #  s1 h1:  (1 + 1)/2 = 1            (.9 + .95)/2 = .925          0.7161  -> important
    syn = syntactic_attention(A, dep, valid)
    conf = head_confidence(A, valid)
    torch.testing.assert_close(syn, torch.tensor([[1.0, third], [1.0, 1.0]]))
    torch.testing.assert_close(conf, torch.tensor([[1.0, 7 / 9], [0.85, 0.925]]))
    assert redundant_heads(A, dep, valid).tolist() == [[False, True], [False, False]]
    # a fixed gate of 0.3 keeps head 1 of sentence 0 (1/3 > 0.3); 1.0 flags every head
    # (Eq. 10: important only when Syn_attn > Syn_gate)
    assert redundant_heads(A, dep, valid, 0.3).tolist() == [[False, False], [False, False]]
    assert redundant_heads(A, dep, valid, 1.0).tolist() == [[True, True], [True, True]]
    # words 1 and 2 of sentence 1 no longer related: only the mass on the token itself counts
    #  s1 h0:  (.2 + .1)/2 = .15   <= 0.7006  -> redundant
    #  s1 h1:  (.9 + .95)/2 = .925  > 0.7161  -> important
    dep[1, 1, 2] = dep[1, 2, 1] = False
    torch.testing.assert_close(syntactic_attention(A, dep, valid)[1], torch.tensor([0.15, 0.925]))
    assert redundant_heads(A, dep, valid).tolist() == [[False, True], [True, False]]


def test_gate_parsing():
    assert parse_gate("dynamic") == "dynamic" and parse_gate(None) == "dynamic"
    assert parse_gate("0.3") == 0.3
    for bad in ("0", "1.5", "-0.1", "sigmoid"):
        with pytest.raises(ValueError, match="rhe-gate"):
            parse_gate(bad)


def designed_heads(m, c=1.5):
    """Query/key projections that make the heads differ: head 0 attends to the token itself
    (important), head 1 away from it, head 2 to itself through input dims 8..11 (which
    :func:`designed_sentences` zeroes in sentence 1: uniform there, hence redundant),
    head 3 stays random."""
    with torch.no_grad():
        for h, sign in ((0, 1.0), (1, -1.0), (2, 1.0)):
            sl = slice(h * D, (h + 1) * D)
            for proj, s in ((m.q_proj, 1.0), (m.k_proj, sign)):
                proj.weight[sl] = 0
                proj.weight[sl, sl] = s * c * torch.eye(D)
                proj.bias[sl] = 0
    return m


def designed_sentences():
    xs = sentences(scale=2.0, seed=3)
    xs[1][:, 2 * D : 3 * D] = 0
    return xs


def plain_rhe(m, xs, gate, enliven, visible_of, prune=False):
    """Per sentence and head: standard softmax attention A; Syn_attn, h_conf, gate; the
    redundant heads use the weights (and extra head output) of ``enliven(h, x, qs, ks, vs)``
    (or are zeroed when pruning)."""
    with torch.no_grad():
        return _plain_rhe(m, xs, gate, enliven, visible_of, prune)


def _plain_rhe(m, xs, gate, enliven, visible_of, prune):
    outs, weights, redundant = [], [], []
    for b, x in enumerate(xs):
        n = len(x)
        visible = visible_of[b]
        qs, ks, vs = projections(m, x)
        heads, ws, red = [], [], []
        for h in range(H):
            A = softmax_rows(qs[h] @ ks[h].T / math.sqrt(D))
            syn = sum(float(A[i][visible[i]].sum()) for i in range(n)) / n
            conf = sum(float(A[i].max()) for i in range(n)) / n
            g = 1 / (1 + math.exp(-conf)) if gate == "dynamic" else gate
            is_redundant = not syn > g
            red.append(is_redundant)
            if is_redundant and enliven is not None:
                A, extra = enliven(h, x, qs, ks, vs)
            else:
                extra = 0
            ws.append(A)
            heads.append(torch.zeros(n, D) if (prune and is_redundant) else A @ vs[h] + extra)
        outs.append(plain_output(m, heads))
        weights.append(ws)
        redundant.append(red)
    return outs, weights, redundant


def check_against(m, xs, source, expected):
    outs, weights, redundant = expected
    out, w = run(m, xs, source)
    for b, x in enumerate(xs):
        s = 7 - len(x)
        torch.testing.assert_close(out[s:, b], outs[b], atol=1e-5, rtol=1e-5)
        for h in range(H):
            torch.testing.assert_close(w[h, b, s:, s:], weights[b][h], atol=1e-6, rtol=1e-5)
    assert LAST_REDUNDANT[m].tolist() == redundant


def dea_enliven(visible):
    def enliven(h, x, qs, ks, vs):
        return softmax_rows(qs[h] @ ks[h].T / math.sqrt(D), visible[len(x)]), 0

    return enliven


def test_rhe_enlivens_only_redundant_heads_per_sentence():
    source = example_annotations()
    vis = {7: torch.tensor(DEA_VISIBLE, dtype=torch.bool), 4: torch.tensor(SHORT_VISIBLE, dtype=torch.bool)}
    visible_of = [vis[7], vis[4]]
    xs = designed_sentences()
    m = designed_heads(make(("dea",), rhe=True))
    expected = plain_rhe(m, xs, "dynamic", dea_enliven(vis), visible_of)
    check_against(m, xs, source, expected)
    red = expected[2]
    assert any(any(r) for r in red) and not all(all(r) for r in red)
    assert red[0] != red[1], "the test needs sentences with different redundant heads"
    # fixed gate (Figure 4)
    m = designed_heads(make(("dea",), rhe=True, rhe_gate=0.3))
    check_against(m, xs, source, plain_rhe(m, xs, 0.3, dea_enliven(vis), visible_of))


def test_rhe_with_lpea_and_pruning():
    source = example_annotations()
    xs = designed_sentences()
    visible_of = [torch.tensor(DEA_VISIBLE, dtype=torch.bool), torch.tensor(SHORT_VISIBLE, dtype=torch.bool)]
    m = designed_heads(make(("lpea",), rhe=True, k=2))
    rps = {7: PAPER_RP, 4: SHORT_RP}

    def lpea_enliven(h, x, qs, ks, vs):
        rp = rps[len(x)]
        visible = torch.tensor([[v != X for v in row] for row in rp])
        return softmax_rows(qs[h] @ ks[h].T / math.sqrt(D) + plain_lpea_bias(m, rp, 2), visible), 0

    with torch.no_grad():
        check_against(m, xs, source, plain_rhe(m, xs, "dynamic", lpea_enliven, visible_of))
    # pruning: the redundant heads' output is zeroed (their weights are still reported)
    pruned = make(("lpea",), rhe=True, k=2, prune_redundant_heads=True)
    pruned.load_state_dict(m.state_dict())
    with torch.no_grad():
        expected = plain_rhe(pruned, xs, "dynamic", lpea_enliven, visible_of, prune=True)
        check_against(pruned, xs, source, expected)
    assert any(any(r) for r in expected[2]) and not all(all(r) for r in expected[2])
    # identification only (no bias): redundant heads keep standard attention, or are pruned
    only = make(rhe=True, prune_redundant_heads=True)
    only.load_state_dict(m.state_dict(), strict=False)
    check_against(only, xs, source, plain_rhe(only, xs, "dynamic", None, visible_of, prune=True))


def test_redundant_fraction_is_logged_per_layer():
    m = designed_heads(make(("dea",), rhe=True, layer_index=0))
    xs = designed_sentences()
    source = example_annotations()
    with metrics.aggregate() as agg:
        run(m, xs, source)  # the module itself logs nothing: the model logs the records
        assert "rhe_redundant_l0" not in agg
        first = LAST_REDUNDANT[m].float()
        run(m, xs[:1], {k: v[:1] for k, v in source.items()})
        second = LAST_REDUNDANT[m].float()
        log_redundant_fractions(
            [(m, Intermediates(redundant=first.bool())), (m, Intermediates(redundant=second.bool()))]
        )
    meter = agg["rhe_redundant_l0"]
    assert meter.count == 3 * H  # (sentence, head) pairs of both batches
    assert math.isclose(float(meter.avg), float((first.sum() + second.sum()) / (3 * H)), rel_tol=1e-6)
    assert 0 < float(meter.avg) < 1


# ------------------------------------------------------------------------ baselines


def test_rel_pos_against_shaw_formula():
    k = 2
    m = make(("rel_pos",), rel_k=k, rel_values=True)
    xs = sentences((7, 4))
    out, w = run(m, xs)
    aK, aV = m.biases["rel_pos"].key_embed, m.biases["rel_pos"].value_embed
    for b, x in enumerate(xs):
        n, s = len(x), 7 - len(x)
        qs, ks, vs = projections(m, x)
        heads = []
        for h in range(H):
            e = torch.zeros(n, n)
            for i in range(n):
                for j in range(n):  # Eq. 4: e_ij = x_i W^Q (x_j W^K + a^K_ij)^T / sqrt(d_z)
                    e[i, j] = qs[h][i] @ (ks[h][j] + aK[max(-k, min(k, j - i)) + k]) / math.sqrt(D)
            alpha = torch.softmax(e, dim=-1)
            z = torch.zeros(n, D)
            for i in range(n):
                for j in range(n):  # Eq. 3: z_i = sum_j alpha_ij (x_j W^V + a^V_ij)
                    z[i] += alpha[i, j] * (vs[h][j] + aV[max(-k, min(k, j - i)) + k])
            torch.testing.assert_close(w[h, b, s:, s:], alpha, atol=1e-6, rtol=1e-5)
            heads.append(z)
        torch.testing.assert_close(out[s:, b], plain_output(m, heads), atol=1e-5, rtol=1e-5)


def test_localness_against_gaussian_formula():
    m = make(("localness",))
    loc = m.biases["localness"]
    with torch.no_grad():  # spread centers and windows over the sentence
        loc.center.mul_(4)
        loc.window.mul_(4)
    xs = sentences((7, 4), scale=2.0)
    out, w = run(m, xs)
    for b, x in enumerate(xs):
        n, s = len(x), 7 - len(x)
        qs, ks, vs = projections(m, x)
        heads = []
        for h in range(H):
            G = torch.zeros(n, n)
            for i in range(n):
                hidden = torch.tanh(loc.proj.weight @ qs[h][i])
                P = n * torch.sigmoid(loc.center @ hidden)  # predicted center, in [0, I]
                sigma = n * torch.sigmoid(loc.window @ hidden) / 2  # sigma = D / 2
                for j in range(n):
                    G[i, j] = -((j - P) ** 2) / (2 * sigma**2)
            A = torch.softmax(qs[h] @ ks[h].T / math.sqrt(D) + G, dim=-1)
            torch.testing.assert_close(w[h, b, s:, s:], A, atol=1e-5, rtol=1e-4)
            heads.append(A @ vs[h])
        torch.testing.assert_close(out[s:, b], plain_output(m, heads), atol=1e-5, rtol=1e-4)


def test_rhe_on_top_of_rel_pos():
    """Table 2's Rel_Pos + RHE: only the redundant heads get relative positions (keys and
    values); important heads keep standard attention."""
    k = 2
    m = designed_heads(make(("rel_pos",), rhe=True, rel_k=k, rel_values=True))
    aK, aV = m.biases["rel_pos"].key_embed, m.biases["rel_pos"].value_embed
    xs = designed_sentences()

    def shaw(h, x, qs, ks, vs):
        n = len(x)
        idx = [[max(-k, min(k, j - i)) + k for j in range(n)] for i in range(n)]
        e = torch.stack(
            [torch.stack([qs[h][i] @ (ks[h][j] + aK[idx[i][j]]) for j in range(n)]) for i in range(n)]
        ) / math.sqrt(D)
        alpha = torch.softmax(e, dim=-1)
        extra = torch.stack([sum(alpha[i, j] * aV[idx[i][j]] for j in range(n)) for i in range(n)])
        return alpha, extra

    visible_of = [torch.tensor(DEA_VISIBLE, dtype=torch.bool), torch.tensor(SHORT_VISIBLE, dtype=torch.bool)]
    with torch.no_grad():
        expected = plain_rhe(m, xs, "dynamic", shaw, visible_of)
        check_against(m, xs, example_annotations(), expected)
    assert any(any(r) for r in expected[2]) and not all(all(r) for r in expected[2])


# ------------------------------------------------------------------------ errors


def test_bad_inputs_and_configurations():
    m = make(("dea",))
    xs = sentences()
    with pytest.raises(ValueError, match="needs src_dep"):
        run(m, xs, None)
    with pytest.raises(ValueError, match="needs src_rp"):
        run(make(("lpea",)), xs, {"src_dep": example_annotations()["src_dep"]})
    with pytest.raises(ValueError, match="shape"):
        run(m, xs, {"src_dep": torch.ones(2, 6, 6, dtype=torch.bool)})
    x = torch.randn(3, 1, E)
    with pytest.raises(ValueError, match="incremental"):
        m(x, x, x, incremental_state={})
    with pytest.raises(ValueError, match="self-attention"):
        SparseMultiheadAttention(E, H, encoder_decoder_attention=True, config=attention_config(biases=("dea",)))
    with pytest.raises(ValueError, match="fixed-pattern"):
        SparseMultiheadAttention(
            E, H, self_attention=True, config=attention_config(biases=("dea",), fixed_patterns=("current",))
        )
    with pytest.raises(ValueError, match="unknown attention bias"):
        make(("syntax",))
    with pytest.raises(ValueError, match="encoder-rel-pos-k"):
        make(("rel_pos",))
    valid = torch.ones(1, 3, dtype=torch.bool)
    no_self = torch.ones(1, 3, 3, dtype=torch.bool)
    no_self[0, 1, 1] = False
    with pytest.raises(ValueError, match="itself"):
        check_source_annotations(valid, no_self)
    with pytest.raises(ValueError, match="bool"):
        check_source_annotations(valid, torch.ones(1, 3, 3, dtype=torch.int64))
    rp = torch.zeros(1, 3, 3, dtype=torch.int16)
    rp[0, 2, 2] = NO_PHRASE
    with pytest.raises(ValueError, match="local"):
        check_source_annotations(valid, None, rp)
    valid[0, 1:] = False  # padding positions may hold anything
    check_source_annotations(valid, no_self, rp)


# ------------------------------------------------------------- flags, presets, model


def test_layer_selection_and_flag_errors():
    def opts(layer, **kw):
        return resolve(model_args(**kw), "encoder_self", layer).biases

    assert opts(0, encoder_syntax_attention="dea").names == ("dea",)
    assert opts(1, encoder_syntax_attention="dea").names == ()  # default: layer 0 only
    assert opts(1, encoder_syntax_attention="dea", encoder_bias_layers="all").names == ("dea",)
    o = opts(0, encoder_rel_pos_k=4, encoder_localness=True, encoder_bias_layers="0,1")
    assert o.names == ("rel_pos", "localness") and o.rhe is None
    assert o.providers[0][1] == RelativePositionConfig(4, False)
    o = opts(0, encoder_syntax_attention="lpea", rhe=True, rhe_gate="0.2", lpea_max_distance=3)
    assert o.rhe == RHEConfig(0.2, False, False) and o.providers == (("lpea", LocalPhraseConfig(3)),)
    assert resolve(model_args(encoder_syntax_attention="lpea"), "encoder_self", 0).layer_index == 0
    assert opts(1, encoder_syntax_attention="lpea", rhe=True).rhe is None
    # RHE in layer 1 without a bias there: identification (and pruning) only
    o = opts(1, encoder_syntax_attention="lpea", rhe=True, rhe_layers="0,1", prune_redundant_heads=True)
    assert o.rhe is not None and o.names == () and o.rhe.prune
    assert parse_layer_list("all", 3, "--x") == {0, 1, 2} and parse_layer_list("none", 3, "--x") == set()
    for kw, msg in (
        (dict(rhe_layers="0"), "needs --rhe"),
        (dict(prune_redundant_heads=True), "needs --rhe"),
        (dict(rhe=True, prune_skip_in_training=True), "--prune-skip-in-training needs --prune-redundant-heads"),
        (dict(encoder_bias_layers="2"), "out of range"),
        (dict(encoder_bias_layers="first"), "layer indices"),
        (dict(encoder_rel_pos_values=True), "encoder-rel-pos-k"),
        (dict(rhe=True, rhe_gate="2"), "rhe-gate"),
        (dict(encoder_syntax_attention="srl"), "encoder-syntax-attention"),
    ):
        with pytest.raises(ValueError, match=msg):
            opts(0, **kw)


def test_command_line_flags_and_presets():
    from fairseq import options

    def parse(*argv):
        parser = options.get_training_parser()
        return options.parse_args_and_arch(parser, ["data-bin", "--task", "translation", *argv])

    a = parse("--arch", "rhe_transformer_wmt_en_de")
    assert (a.encoder_syntax_attention, a.rhe, a.rhe_gate, a.lpea_max_distance) == ("lpea", True, "dynamic", 6)
    assert a.encoder_bias_layers == "0" and not a.prune_redundant_heads
    assert a.encoder_attention_heads == 8 and a.encoder_embed_dim == 512
    a = parse(
        "--arch",
        "rhe_transformer_iwslt_de_en",
        "--encoder-syntax-attention",
        "dea",
        "--rhe-gate",
        "0.3",
        "--rhe-layers",
        "0,1",
    )
    assert (a.encoder_syntax_attention, a.rhe_gate, a.rhe_layers, a.encoder_attention_heads) == ("dea", "0.3", "0,1", 4)
    a = parse("--arch", "sparse_transformer", "--encoder-syntax-attention", "dea", "--rhe")
    assert a.rhe is True
    a = parse(
        "--arch",
        "sparse_transformer",
        "--encoder-rel-pos-k",
        "16",
        "--encoder-rel-pos-values",
        "--encoder-localness",
        "--encoder-bias-layers",
        "all",
    )
    assert (a.rhe, a.encoder_rel_pos_k, a.encoder_rel_pos_values, a.encoder_localness) == (False, 16, True, True)
    with pytest.raises(SystemExit):
        parse("--arch", "sparse_transformer", "--encoder-syntax-attention", "srl")
    build_model(encoder_syntax_attention="dea", checkpoint_activations=True)  # refused before v2


def test_parameter_counts():
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    base = n(build_model()[0])
    d_h = D
    assert n(build_model(encoder_syntax_attention="dea", rhe=True)[0]) == base
    k = 3
    lpea = (2 * k + 1) * d_h + d_h * d_h + d_h + d_h  # w, W_P, b_P, U_P
    assert n(build_model(encoder_syntax_attention="lpea", lpea_max_distance=k)[0]) == base + lpea
    assert n(build_model(encoder_rel_pos_k=k, encoder_bias_layers="all")[0]) == base + 2 * (2 * k + 1) * d_h
    assert n(build_model(encoder_rel_pos_k=k, encoder_rel_pos_values=True)[0]) == base + 2 * (2 * k + 1) * d_h
    assert n(build_model(encoder_localness=True)[0]) == base + d_h * d_h + 2 * d_h


def batch_annotations(src, pad, seed=0, full=False):
    """Random symmetric src_dep / src_rp for a left-padded batch (True / 0 on the diagonal
    of real tokens, False / NO_PHRASE at padding)."""
    g = torch.Generator().manual_seed(seed)
    bsz, T = src.shape
    valid = src.ne(pad)
    both = valid.unsqueeze(2) & valid.unsqueeze(1)
    if full:
        dep = both.clone()
    else:
        r = torch.rand(bsz, T, T, generator=g) < 0.3
        dep = (r | r.transpose(1, 2) | torch.eye(T, dtype=torch.bool)) & both
    rp = torch.randint(-3, 4, (bsz, T, T), generator=g, dtype=torch.int16)
    rp[torch.rand(bsz, T, T, generator=g) < 0.3] = NO_PHRASE
    rp[:, torch.arange(T), torch.arange(T)] = 0
    rp[~both] = NO_PHRASE
    return dep, rp


@pytest.mark.parametrize("syntax", ["dea", "lpea"])
def test_model_training_forward_and_generation(syntax):
    """model(**net_input) (training) and SequenceGenerator (forward_encoder(net_input)) both
    hand src_dep / src_rp to the encoder: beam search scores equal teacher-forced scores, and
    with every pair related (bias 0 / no mask) generation is that of the plain model."""
    from fairseq.sequence_generator import SequenceGenerator

    model, d = build_model(encoder_syntax_attention=syntax, rhe=True, lpea_max_distance=2)
    src, lengths, prev = random_batch(d, bsz=3, src_len=7)
    dep, rp = batch_annotations(src, d.pad())
    net_input = {"src_tokens": src, "src_lengths": lengths, "src_dep": dep, "src_rp": rp}
    out, _ = model(prev_output_tokens=prev, **net_input)
    assert out.shape[:2] == prev.shape and torch.isfinite(out).all()
    with pytest.raises(ValueError, match="src_dep"):
        model(src, lengths, prev)

    gen = SequenceGenerator([model], d, beam_size=2, max_len_b=6)
    hyps = gen.forward({"net_input": net_input})
    for b in range(src.size(0)):
        hyp = hyps[b][0]
        tokens = hyp["tokens"]
        prev_b = torch.cat([tokens.new_tensor([d.eos()]), tokens[:-1]]).unsqueeze(0)
        one = {k: v[b : b + 1] for k, v in net_input.items()}
        logits, _ = model(prev_output_tokens=prev_b, **one)
        lprobs = model.get_normalized_probs((logits, None), log_probs=True)[0]
        teacher = lprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        torch.testing.assert_close(hyp["positional_scores"], teacher, atol=1e-4, rtol=1e-4)

    # the annotations matter ...
    full_dep, _ = batch_annotations(src, d.pad(), full=True)
    enc = lambda m, **kw: m.encoder(src, lengths, **kw)["encoder_out"][0]  # noqa: E731
    assert not torch.allclose(enc(model, src_dep=dep, src_rp=rp), enc(model, src_dep=full_dep, src_rp=rp))
    # ... and with DEA relating every pair the model is the plain one (DEA has no parameters)
    if syntax == "dea":
        plain, _ = build_model()
        plain.load_state_dict(model.state_dict())
        full_input = dict(net_input, src_dep=full_dep)
        plain_hyps = SequenceGenerator([plain], d, beam_size=2, max_len_b=6).forward(
            {"net_input": {"src_tokens": src, "src_lengths": lengths}}
        )
        dea_hyps = gen.forward({"net_input": full_input})
        for a, b in zip(plain_hyps, dea_hyps):
            assert a[0]["tokens"].tolist() == b[0]["tokens"].tolist()
            torch.testing.assert_close(a[0]["score"], b[0]["score"])


def test_redundant_fraction_logged_by_the_model():
    model, d = build_model(encoder_syntax_attention="dea", rhe=True, rhe_layers="0,1")
    src, lengths, prev = random_batch(d, bsz=3, src_len=7)
    dep, rp = batch_annotations(src, d.pad())
    with metrics.aggregate() as agg, collect("redundant") as records:
        model(src, lengths, prev, src_dep=dep, src_rp=rp)
    decisions = {m: inter.redundant for m, inter in records if inter.redundant is not None}
    for layer in (0, 1):
        att = model.encoder.layers[layer].self_attn
        meter = agg[f"rhe_redundant_l{layer}"]
        assert meter.count == 3 * H
        assert math.isclose(float(meter.avg), float(decisions[att].float().mean()), rel_tol=1e-6)


# ----------------------------------------------------------------- Rule 2 readings (issue 16)
PAPER_TREE = "(S (NP (NNP Bush)) (VP (VBD held) (NP (DT a) (NN talk)) (PP (IN with) (NP (NNP Sharon)))))"
# "the cat sat": Rule 1 gives the: NP -> {the, cat}; cat: {the, cat}; sat: VBD is unary
# -> S -> {the, cat, sat}.  "the" is in LP(sat) with sat later than "the": the symmetric
# closure adds sat to LP(the) and LP(cat); the literal Rule 2 ("x_i in LP(x_j), j < i =>
# x_j in LP(x_i)") adds only earlier words, so it does not.  Layers: the 3, cat 3, sat 2.
CAT_TREE = "(S (NP (DT the) (NN cat)) (VBD sat))"
CAT_RP_SYMMETRIC = [
    # the cat sat </s>
    [0, 0, -1, X],
    [0, 0, -1, X],
    [1, 1, 0, X],
    [X, X, X, 0],
]
CAT_RP_LITERAL = [
    [0, 0, X, X],
    [0, 0, X, X],
    [1, 1, 0, X],
    [X, X, X, 0],
]


def test_rule2_readings_hand_derived():
    from fairseq_sparse_attn.syntax.structure import phrase_rp_matrix

    rp = lambda tree, rule2: phrase_rp_matrix(tree, rule2=rule2).tolist()  # noqa: E731
    assert rp(CAT_TREE, "symmetric") == CAT_RP_SYMMETRIC
    assert rp(CAT_TREE, "literal") == CAT_RP_LITERAL
    assert rp(CAT_TREE, "literal") != rp(CAT_TREE, "symmetric")
    # the paper's example: every Rule-1 phrase of a later word that holds an earlier word
    # is held by that earlier word's phrase too, so both readings give Figure 3
    assert rp(PAPER_TREE, "symmetric") == PAPER_RP == rp(PAPER_TREE, "literal")
    assert phrase_rp_matrix(CAT_TREE).tolist() == CAT_RP_SYMMETRIC  # default unchanged
    with pytest.raises(ValueError, match="--local-phrase-rule2"):
        phrase_rp_matrix(CAT_TREE, rule2="transitive")


@pytest.mark.parametrize("rule2, expected", [("symmetric", CAT_RP_SYMMETRIC), ("literal", CAT_RP_LITERAL)])
def test_rule2_reaches_the_dataset_src_rp(rule2, expected):
    """The task's dataset builds src_rp of "the c@@ at sat </s>" with the chosen reading
    (pieces of "cat" share the word's row and column)."""
    from fairseq.data import Dictionary

    from fairseq_sparse_attn.data.parse_annotated_dataset import ParseAnnotatedDataset, SentenceParse
    from fairseq_sparse_attn.syntax.structure import local_phrases

    d = Dictionary()
    for piece in ("the", "c@@", "at", "sat"):
        d.add_symbol(piece)
    parse = SentenceParse(["the", "cat", "sat"], None, local_phrases(CAT_TREE), "cat.tree line 1")
    dataset = ParseAnnotatedDataset([None], [parse], d, features=("rp",), rule2=rule2)
    source = torch.tensor([d.index(p) for p in ("the", "c@@", "at", "sat")] + [d.eos()])
    _, rp = dataset.structure(0, source)
    words = [0, 1, 1, 2, 3]  # token -> row/column of the word-level matrix (EOS = 3)
    assert rp.tolist() == [[expected[a][b] for b in words] for a in words]


def test_truncate_source_accepts_a_shorter_source_only_where_it_cut():
    """With --truncate-source (--max-source-positions 4 here) a source cut to the limit may
    stop inside its parse, and a shorter source, which nothing cut, must still spell its
    whole parse: "the c@@ at sat" against "the cat sat down" is a side file of another
    sentence, refused naming its line (it was accepted as a truncation)."""
    from fairseq.data import Dictionary

    from fairseq_sparse_attn.data.parse_annotated_dataset import (
        ParseAnnotatedDataset,
        ParseFormatError,
        SentenceParse,
    )

    d = Dictionary()
    for piece in ("the", "c@@", "at", "sat", "down"):
        d.add_symbol(piece)
    parse = SentenceParse(["the", "cat", "sat", "down"], [2, 3, 0, 3], None, "x.dep line 2")
    dataset = ParseAnnotatedDataset([None], [parse], d, features=("dep",), truncated_length=4)
    encode = lambda *pieces: torch.tensor([d.index(p) for p in pieces] + [d.eos()])  # noqa: E731
    _, word_ids, _ = dataset.aligned_parse(0, encode("the", "c@@", "at"))  # 4 tokens: cut here
    assert word_ids == [0, 1, 1]
    short = ParseAnnotatedDataset([None], [parse], d, features=("dep",), truncated_length=6)
    with pytest.raises(
        ParseFormatError,
        match=r"x\.dep line 2: the parse does not match .*end after word 3 of 4 \(next parse word 'down'\)",
    ):
        short.aligned_parse(0, encode("the", "c@@", "at", "sat"))  # 5 tokens < 6: not cut
    uncut = ParseAnnotatedDataset([None], [parse], d, features=("dep",))
    with pytest.raises(ParseFormatError, match="fewer words than its parse"):
        uncut.aligned_parse(0, encode("the", "c@@", "at"))


def test_rule2_task_flag():
    import argparse

    from fairseq.dataclass.utils import gen_parser_from_dataclass

    from fairseq_sparse_attn.tasks.parse_annotated_translation import (
        ParseAnnotatedTranslationConfig,
        ParseAnnotatedTranslationTask,
    )

    parser = argparse.ArgumentParser()
    gen_parser_from_dataclass(parser, ParseAnnotatedTranslationConfig())
    assert parser.parse_args(["data"]).local_phrase_rule2 == "symmetric"
    cfg = parser.parse_args(["data", "--local-phrase-rule2", "transitive"])
    with pytest.raises(ValueError, match="--local-phrase-rule2"):
        ParseAnnotatedTranslationTask.setup_task(cfg)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "bias",
    [
        dict(encoder_syntax_attention="dea", rhe=True),
        dict(encoder_syntax_attention="lpea", rhe=True, lpea_max_distance=2),
        dict(encoder_localness=True),
        dict(encoder_rel_pos_k=2, encoder_rel_pos_values=True),
    ],
    ids=["dea+rhe", "lpea+rhe", "localness", "rel_pos"],
)
def test_half_precision_models_train_with_every_encoder_bias(bias, dtype):
    """A model cast to fp16/bf16 (what ``--fp16`` / ``--bf16`` and ``fsa-generate --fp16`` do)
    runs every encoder bias: LPEA's and Localness's projections once fed float32 inputs to
    half-precision weights and crashed ("mat1 and mat2 must have the same dtype").  The
    half model's output is the float32 model's within the dtype's rounding, and a backward
    gives every bias parameter a finite gradient in the parameters' dtype."""
    model, d = build_model(**bias)
    src, lengths, prev = random_batch(d, bsz=3, src_len=7)
    dep, rp = batch_annotations(src, d.pad())
    net_input = {"src_tokens": src, "src_lengths": lengths, "src_dep": dep, "src_rp": rp}
    want = model.get_normalized_probs(model(prev_output_tokens=prev, **net_input), log_probs=False)
    half = model.to(dtype)
    out = half(prev_output_tokens=prev, **net_input)
    got = half.get_normalized_probs(out, log_probs=False)
    assert out[0].dtype == dtype
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=0)
    out[0].float().logsumexp(-1).sum().backward()
    biases = [(n, p) for n, p in half.named_parameters() if ".biases." in n]
    assert bool(biases) == (bias.get("encoder_syntax_attention") != "dea")  # DEA: a mask, no parameter
    for name, p in biases:
        assert p.grad is not None and p.grad.dtype == dtype and torch.isfinite(p.grad).all(), name
