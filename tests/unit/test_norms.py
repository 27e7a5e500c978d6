"""Norm-based analysis (Kobayashi et al. 2020) against plain recomputations from the
parameters, hand-computed numbers and scipy's Spearman."""

import math

import pytest
import torch

from fairseq_sparse_attn.analysis.norms import (
    CategoryCorrelation,
    NormRecorder,
    SentenceNorms,
    average_ranks,
    category_spearman,
    category_values,
    check_decomposable,
    collect_norms,
    dictionary_categorizer,
    norm_statistics,
    spearman,
    token_category,
    value_transforms,
)
from fairseq_sparse_attn.analysis.recording import Batch, attention_sites, collecting, record_attention
from fairseq_sparse_attn.attention import SparseMultiheadAttention
from fairseq_sparse_attn.attention.intermediates import active_collectors

from helpers import build_model, random_batch

# ----------------------------------------------------------------- plain references


def capture_inputs_and_outputs(model):
    """Forward (pre-)hooks on every attention module: its key input x (the vectors the
    values are made of) and its output; returns (store, handles)."""
    store, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, SparseMultiheadAttention):

            def pre(mod, args, kwargs, name=name):
                store.setdefault(name, {})["x"] = kwargs["key"].detach().clone()  # (src, bsz, embed)

            def post(mod, args, kwargs, output, name=name):
                store[name]["out"] = output[0].detach().clone()  # (tgt, bsz, embed)

            handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(module.register_forward_hook(post, with_kwargs=True))
    return store, handles


def plain_f(module, x):
    """f_h(x_j) = (x_j W_V,h^T + b_V,h) W_O[:, h-block]^T, one head at a time.
    x: (src, bsz, embed) -> list over heads of (bsz, src, embed)."""
    d = module.head_dim
    xb = x.transpose(0, 1)  # (bsz, src, embed)
    out = []
    for h in range(module.num_heads):
        rows = slice(h * d, (h + 1) * d)
        v_h = xb @ module.v_proj.weight[rows].T + module.v_proj.bias[rows]
        out.append(v_h @ module.out_proj.weight[:, rows].T)
    return out


def plain_softmax_weights(module, query, key, key_padding, causal):
    """α^h = softmax(q k^T / sqrt(d)) with padding (and future) keys hidden, per head."""
    d = module.head_dim
    qb, kb = query.transpose(0, 1), key.transpose(0, 1)
    out = []
    for h in range(module.num_heads):
        rows = slice(h * d, (h + 1) * d)
        q = qb @ module.q_proj.weight[rows].T + module.q_proj.bias[rows]
        k = kb @ module.k_proj.weight[rows].T + module.k_proj.bias[rows]
        scores = q @ k.transpose(1, 2) / math.sqrt(d)
        hidden = key_padding[:, None, :].expand_as(scores).clone()
        if causal:
            hidden |= torch.ones(scores.shape[1:], dtype=torch.bool).triu(1)
        out.append(torch.softmax(scores.masked_fill(hidden, -math.inf), dim=-1))
    return out


def run_with_recorder(model, d, src, lengths, prev, **kwargs):
    norms = NormRecorder(model, **kwargs)
    with torch.no_grad(), collecting(model, norms):
        norms.set_batch(Batch(src.eq(d.pad()), prev.eq(d.pad()), src, prev))
        model(src, lengths, prev)
    return norms


# ------------------------------------------------------------- the model: norms


@pytest.mark.parametrize("left_pad_source", [True, False])
def test_recorded_norms_match_a_plain_computation_and_padding_is_cropped(left_pad_source):
    model, d = build_model("softmax_transformer_wmt_en_de")
    src, lengths, prev = random_batch(d, left_pad_source=left_pad_source)
    store, handles = capture_inputs_and_outputs(model)
    try:
        norms = run_with_recorder(model, d, src, lengths, prev)
    finally:
        for h in handles:
            h.remove()
    modules = dict(model.named_modules())
    src_len = lengths.tolist()
    tgt_len = prev.ne(d.pad()).sum(1).tolist()
    checked = 0
    for site in attention_sites(model):
        module = modules[site.name]
        x = store[site.name]["x"]
        with torch.no_grad():
            f = plain_f(module, x)
        recs = norms.records[(site.kind, site.layer)]
        assert len(recs) == src.size(0)
        for b, rec in enumerate(recs):
            n_src, n_tgt = src_len[b], tgt_len[b]
            # padding columns/rows cropped, by hand: source left- or right-padded,
            # target right-padded
            src_pos = list(range(src.size(1) - n_src, src.size(1))) if left_pad_source else list(range(n_src))
            tgt_pos = list(range(n_tgt))
            qpos, kpos = {
                "encoder_self": (src_pos, src_pos),
                "decoder_self": (tgt_pos, tgt_pos),
                "cross": (tgt_pos, src_pos),
            }[site.kind]
            assert rec.weights.shape == (module.num_heads, len(qpos), len(kpos))
            assert rec.layer.shape == (len(qpos), len(kpos))
            tokens = {"encoder_self": src, "decoder_self": prev, "cross": src}[site.kind]
            assert rec.key_tokens.tolist() == tokens[b, kpos].tolist()
            assert d.pad() not in rec.key_tokens.tolist()
            # ‖f_h(x_j)‖
            for h in range(module.num_heads):
                want = torch.linalg.norm(f[h][b, kpos], dim=-1)
                torch.testing.assert_close(rec.transformed[h], want, atol=1e-5, rtol=1e-5)
                # ‖α f‖ = α ‖f‖ per head
                torch.testing.assert_close(rec.head[h], rec.weights[h] * want[None, :], atol=1e-5, rtol=1e-5)
            # ‖Σ_h α_h f_h(x_j)‖, summed plainly over heads
            total = sum(
                rec.weights[h][:, :, None] * f[h][b, kpos][None, :, :] for h in range(module.num_heads)
            )  # (tgt, src, embed)
            torch.testing.assert_close(rec.layer, torch.linalg.norm(total, dim=-1), atol=1e-5, rtol=1e-5)
            checked += 1
    assert checked == len(attention_sites(model)) * src.size(0)


def test_recorded_softmax_weights_are_the_plain_softmax():
    """α itself, for the self-attentions (query input = key input), recomputed from q/k."""
    model, d = build_model("softmax_transformer_wmt_en_de")
    src, lengths, prev = random_batch(d)
    store, handles = capture_inputs_and_outputs(model)
    try:
        norms = run_with_recorder(model, d, src, lengths, prev)
    finally:
        for h in handles:
            h.remove()
    modules = dict(model.named_modules())
    for site in attention_sites(model):
        if site.kind == "cross":
            continue
        module, x = modules[site.name], store[site.name]["x"]
        pad = (src if site.kind == "encoder_self" else prev).eq(d.pad())
        with torch.no_grad():
            alpha = plain_softmax_weights(module, x, x, pad, causal=site.kind == "decoder_self")
        for b, rec in enumerate(norms.records[(site.kind, site.layer)]):
            keep = (~pad[b]).nonzero().squeeze(1)
            for h in range(module.num_heads):
                torch.testing.assert_close(rec.weights[h], alpha[h][b][keep][:, keep], atol=1e-5, rtol=1e-5)
            if site.kind == "decoder_self":
                n = len(keep)
                assert rec.visible.tolist() == torch.ones(n, n, dtype=torch.bool).tril().tolist()
            else:
                assert bool(rec.visible.all())


@pytest.mark.parametrize("arch", ["softmax_transformer_wmt_en_de", "reluformer_wmt_en_de"])
def test_sum_over_heads_and_keys_plus_out_bias_is_the_module_output(arch):
    """Kobayashi App. A Eq. 10: y_i = Σ_j Σ_h α^h_ij f^h(x_j) + b^O, exactly."""
    model, d = build_model(arch)
    src, lengths, prev = random_batch(d)
    store, handles = capture_inputs_and_outputs(model)
    modules = dict(model.named_modules())
    rebuilt = {}

    def callback(site, weights, values, mask=None, **_):
        module = modules[site.name]
        f = value_transforms(module, values)  # (bsz, heads, src, embed)
        y = torch.einsum("bhts,bhse->bte", weights, f) + module.out_proj.bias
        rebuilt[site.name] = y

    try:
        with torch.no_grad(), record_attention(model, callback):
            model(src, lengths, prev)
    finally:
        for h in handles:
            h.remove()
    assert len(rebuilt) == len(attention_sites(model)) == 6
    for name, y in rebuilt.items():
        out = store[name]["out"].transpose(0, 1)  # (bsz, tgt, embed)
        torch.testing.assert_close(y, out, atol=1e-5, rtol=0)


def test_value_transforms_use_the_out_proj_column_block_of_each_head():
    # 2 heads, head_dim 1, embed 2: out_proj.weight = [[1, 2], [3, 4]]; head 0 owns input
    # column 0 -> W_O,0 = [1, 3], head 1 column 1 -> W_O,1 = [2, 4]
    module = SparseMultiheadAttention(2, 2, self_attention=True)
    with torch.no_grad():
        module.out_proj.weight.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    values = torch.tensor([[[5.0]], [[-1.0]]])  # (bsz*heads = 2, src = 1, head_dim = 1)
    f = value_transforms(module, values)
    assert f.tolist() == [[[[5.0, 15.0]], [[-2.0, -4.0]]]]
    with pytest.raises(ValueError, match=r"\(bsz\*heads, src, head_dim\) with heads=2, head_dim=1"):
        value_transforms(module, torch.zeros(3, 1, 1))


def test_recording_norms_does_not_change_the_model_output():
    model, d = build_model("softmax_transformer_wmt_en_de")
    src, lengths, prev = random_batch(d)
    with torch.no_grad():
        before = model(src, lengths, prev)[0]
        norms = NormRecorder(model)
        with collecting(model, norms):
            norms.set_batch(Batch(src.eq(d.pad()), prev.eq(d.pad())))
            during = model(src, lengths, prev)[0]
        after = model(src, lengths, prev)[0]
    torch.testing.assert_close(during, before, atol=1e-5, rtol=1e-5)
    assert torch.equal(after, before)
    assert not active_collectors()  # nothing stays attached after the with block


def test_cross_only_keeps_only_cross_attention():
    model, d = build_model("softmax_transformer_wmt_en_de")
    src, lengths, prev = random_batch(d)
    norms = run_with_recorder(model, d, src, lengths, prev, kinds=("cross",))
    assert sorted(norms.records) == [("cross", 0), ("cross", 1)]
    assert [len(list(norms.sentences(layer=l))) for l in (0, 1)] == [3, 3]
    with pytest.raises(ValueError, match="kinds must be a non-empty subset"):
        NormRecorder(model, kinds=("crosss",))


def test_collect_norms_over_fairseq_samples():
    model, d = build_model("softmax_transformer_wmt_en_de")
    src, lengths, prev = random_batch(d)
    sample = {"net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev}}
    norms = collect_norms(model, [sample, sample], d.pad(), kinds=("cross",), max_sentences=3)
    assert len(norms.records[("cross", 1)]) == 3  # stopped after the first batch
    rec = norms.records[("cross", 1)][2]
    assert rec.query_tokens.tolist() == [2, 20, 18, 16] and rec.key_tokens.tolist() == src[2, 3:].tolist()


def test_errors_for_output_norms_missing_or_wrong_padding():
    model, d = build_model("rela_transformer_wmt_en_de")
    src, lengths, prev = random_batch(d)
    module = model.decoder.layers[0].encoder_attn
    with pytest.raises(ValueError, match="output norm 'gated_rmsnorm'.*allow_output_norm=True"):
        check_decomposable(module)
    with pytest.raises(ValueError, match="output norm 'gated_rmsnorm'"):
        run_with_recorder(model, d, src, lengths, prev)
    norms = run_with_recorder(model, d, src, lengths, prev, allow_output_norm=True)
    rec = norms.records[("cross", 0)][1]
    assert rec.layer.shape == (5, 5) and bool((rec.head >= 0).all())

    model, d = build_model("softmax_transformer_wmt_en_de")
    with pytest.raises(ValueError, match="call set_batch"):
        with torch.no_grad(), collecting(model, NormRecorder(model)):
            model(src, lengths, prev)
    norms = NormRecorder(model)
    with pytest.raises(ValueError, match=r"source padding of shape \(3, 6\).*set_batch"):
        with torch.no_grad(), collecting(model, norms):
            norms.set_batch(Batch(src[:, 1:].eq(d.pad()), prev.eq(d.pad())))
            model(src, lengths, prev)
    wrong = src.eq(d.pad()).flip(1)  # padding on the wrong side: sentence 1 is keys 2..6
    with pytest.raises(ValueError, match="key 5 of sentence 1 is padding.*lets queries see it"):
        with torch.no_grad(), collecting(model, norms):
            norms.set_batch(Batch(wrong, prev.eq(d.pad())))
            model(src, lengths, prev)


def test_error_in_training_mode_with_attention_dropout():
    model, d = build_model("softmax_transformer_wmt_en_de", attention_dropout=0.1)
    src, lengths, prev = random_batch(d)
    model.train()
    norms = NormRecorder(model)
    with pytest.raises(ValueError, match="training mode with attention dropout 0.1.*model.eval"):
        with torch.no_grad(), collecting(model, norms):
            norms.set_batch(Batch(src.eq(d.pad()), prev.eq(d.pad())))
            model(src, lengths, prev)


# ------------------------------------------------------------------ hand numbers


def test_norm_statistics_by_hand():
    # 1 sentence, 2 heads, 1 query, 2 keys, embed 2
    f = torch.tensor(
        [
            [
                [[3.0, 4.0], [0.0, 1.0]],  # head 0: f(x0) = (3, 4), f(x1) = (0, 1)
                [[-3.0, 0.0], [0.0, 2.0]],
            ]
        ]
    )  # head 1: f(x0) = (-3, 0), f(x1) = (0, 2)
    alpha = torch.tensor([[[[0.5, 0.5]], [[1.0, 0.0]]]])
    stats = norm_statistics(alpha, f)
    assert stats.transformed.tolist() == [[[5.0, 1.0], [3.0, 2.0]]]
    assert stats.head.tolist() == [[[[2.5, 0.5]], [[3.0, 0.0]]]]
    # key 0: 0.5 (3, 4) + 1.0 (-3, 0) = (-1.5, 2) -> 2.5 ; key 1: 0.5 (0, 1) + 0 = 0.5
    assert stats.layer.flatten().tolist() == pytest.approx([2.5, 0.5], abs=1e-12)
    # head 1 masked: the layer sum is head 0 alone; the per-head norms stay
    masked = norm_statistics(alpha, f, masked_heads=[1])
    assert masked.layer.flatten().tolist() == pytest.approx([2.5, 0.5], abs=1e-12)
    masked0 = norm_statistics(alpha, f, masked_heads=[0])
    assert masked0.layer.flatten().tolist() == pytest.approx([3.0, 0.0], abs=1e-12)
    assert masked0.head.tolist() == stats.head.tolist()
    # one key copy per beam group: f of batch 1 serves weights of batch 2
    two = norm_statistics(alpha.expand(2, -1, -1, -1), f)
    assert two.layer.flatten().tolist() == pytest.approx([2.5, 0.5] * 2, abs=1e-12)
    with pytest.raises(ValueError, match="does not match weights"):
        norm_statistics(alpha, f[:, :1])
    with pytest.raises(ValueError, match="masked head 2 out of range"):
        norm_statistics(alpha, f, masked_heads=[2])


def test_average_ranks_and_spearman_by_hand():
    assert average_ranks(torch.tensor([10.0, 20.0, 20.0, 5.0])).tolist() == [2.0, 3.5, 3.5, 1.0]
    # x ranks (1, 2, 3, 4), y = (1, 3, 2, 4) ranks: d = (0, -1, 1, 0), Σd² = 2,
    # ρ = 1 - 6·2 / (4·15) = 0.8 (no ties)
    assert spearman(torch.tensor([1.0, 2, 3, 4]), torch.tensor([10.0, 30, 20, 40])) == pytest.approx(0.8)
    # ties: x ranks (1.5, 1.5, 3), y ranks (1, 2, 3), both of mean 2: dx = (-.5, -.5, 1),
    # dy = (-1, 0, 1); Σdxdy = 1.5, Σdx² = 1.5, Σdy² = 2 -> 1.5 / sqrt(3) = sqrt(3) / 2
    tied = spearman(torch.tensor([0.0, 0.0, 1.0]), torch.tensor([1.0, 2.0, 3.0]))
    assert tied == pytest.approx(math.sqrt(3) / 2)
    assert spearman(torch.tensor([4.0, 3, 2]), torch.tensor([1.0, 2, 3])) == pytest.approx(-1.0)
    assert math.isnan(spearman(torch.tensor([1.0, 1.0]), torch.tensor([1.0, 2.0])))
    assert math.isnan(spearman(torch.tensor([1.0]), torch.tensor([1.0])))
    with pytest.raises(ValueError, match="paired values, got 2 and 3"):
        spearman(torch.zeros(2), torch.zeros(3))


def test_spearman_agrees_with_scipy_on_tied_data():
    stats = pytest.importorskip("scipy.stats")
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 5, (200,), generator=g).double()  # many ties
    y = x * 0.3 + torch.randint(0, 7, (200,), generator=g).double()
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x.numpy(), y.numpy()).statistic, abs=1e-12)


def sentence(weights, transformed, key_tokens, visible=None):
    heads, tgt, src = weights.shape
    return SentenceNorms(
        sentence=0,
        batch=1,
        weights=weights,
        transformed=transformed,
        head=weights * transformed[:, None, :],
        layer=torch.zeros(tgt, src),
        visible=torch.ones(tgt, src, dtype=torch.bool) if visible is None else visible,
        key_tokens=torch.tensor(key_tokens),
    )


def test_category_spearman_pairs_and_key_means_by_hand():
    # 1 head, 3 queries, 3 keys (causal: query i sees keys 0..i); tokens 7, 8, 7
    w = torch.tensor([[[1.0, 0.0, 0.0], [0.4, 0.6, 0.0], [0.2, 0.3, 0.5]]], dtype=torch.float64)
    fn = torch.tensor([[2.0, 5.0, 1.0]], dtype=torch.float64)
    causal = torch.ones(3, 3, dtype=torch.bool).tril()
    rec = sentence(w, fn, [7, 8, 7], causal)
    categorize = {7: "A", 8: "B"}.get
    values = category_values([rec], categorize, "pair")
    # A = keys 0 and 2: visible pairs (q0,k0) (q1,k0) (q2,k0) (q2,k2)
    assert values["A"][0].tolist() == [1.0, 0.4, 0.2, 0.5]
    assert values["A"][1].tolist() == [2.0, 2.0, 2.0, 1.0]
    # B = key 1: (q1,k1) (q2,k1)
    assert values["B"][0].tolist() == [0.6, 0.3] and values["B"][1].tolist() == [5.0, 5.0]
    got = category_spearman([rec], categorize)
    # A: α ranks (4, 2, 1, 3), ‖f‖ ranks (3, 3, 3, 1): dx = (1.5, -.5, -1.5, .5),
    # dy = (.5, .5, .5, -1.5): Σdxdy = .75 - .25 - .75 - .75 = -1, Σdx² = 5, Σdy² = 3
    assert got["A"] == CategoryCorrelation(pytest.approx(-1 / math.sqrt(15)), 4)
    assert math.isnan(got["B"].rho) and got["B"].count == 2  # ‖f‖ constant
    # unit="key": mean α over the queries that see the key: k0 (1+.4+.2)/3, k2 .5/1
    keys = category_values([rec], categorize, "key")
    assert keys["A"][0].tolist() == pytest.approx([1.6 / 3, 0.5])
    assert keys["A"][1].tolist() == [2.0, 1.0]
    assert category_spearman([rec], categorize, "key")["A"] == CategoryCorrelation(pytest.approx(1.0), 2)
    with pytest.raises(ValueError, match=r"unit must be one of \('pair', 'key'\)"):
        category_spearman([rec], categorize, "token")
    rec.key_tokens = None
    with pytest.raises(ValueError, match="no key tokens.*set_batch"):
        category_spearman([rec], categorize)


def test_token_categories():
    assert token_category("</s>") == "eos"
    assert [token_category(t) for t in [",", ".", '"', "?!", "@-@", "„", "▁.", ".@@"]] == ["punctuation"] * 8
    assert [token_category(t) for t in ["the", "a@@", "▁Haus", "3.5", "<unk>", "@@"]] == ["other"] * 6


def test_category_spearman_on_recorded_cross_attention():
    model, d = build_model("softmax_transformer_wmt_en_de")
    src, lengths, prev = random_batch(d)
    norms = run_with_recorder(model, d, src, lengths, prev, kinds=("cross",))
    categorize = lambda t: "eos" if t == d.eos() else "other"  # noqa: E731
    got = category_spearman(norms.sentences(kind="cross"), categorize)
    heads, layers = 4, 2
    tgt = prev.ne(d.pad()).sum(1)
    # one eos per source sentence: every (query, head, layer) pair counts once
    assert got["eos"].count == int(tgt.sum()) * heads * layers
    assert got["other"].count == int((tgt * (lengths - 1)).sum()) * heads * layers
    assert -1 <= got["other"].rho <= 1
    # the same as scipy on the pooled values
    stats = pytest.importorskip("scipy.stats")
    a, f = category_values(norms.sentences(kind="cross"), categorize)["other"]
    assert got["other"].rho == pytest.approx(stats.spearmanr(a.numpy(), f.numpy()).statistic, abs=1e-12)
    assert dictionary_categorizer(d)(d.eos()) == "eos"


def test_cross_records_plug_into_norm_based_alignment():
    """A cropped cross record is the (n + 1, m + 1) teacher-forced matrix alignment.py
    takes: AWI links from ‖Σ_h α f‖ are row r + 1's argmax column, none on the source </s>."""
    from fairseq_sparse_attn.analysis.alignment import sentence_alignment

    model, d = build_model("softmax_transformer_wmt_en_de")
    src, lengths, prev = random_batch(d)
    norms = run_with_recorder(model, d, src, lengths, prev, kinds=("cross",))
    for rec in norms.sentences("cross", 1):
        source = [d[t] for t in rec.key_tokens[:-1]]  # the last key is the source </s>
        target = [d[t] for t in rec.query_tokens[1:]]  # the first query is the decoder's </s>
        assert rec.key_tokens[-1] == d.eos() and rec.query_tokens[0] == d.eos()
        links = sentence_alignment(rec.layer, source, target, setting="awi", scheme="word")
        want = set()
        for k in range(len(target)):
            j = int(rec.layer[k + 1].argmax())
            if j != len(source):
                want.add((j, k))
        assert links == want


def test_corpus_means_of_the_norms_summary_by_hand():
    """``fsa-analyze norms``' per-layer means on one hand-made decoder self-attention record
    (2 heads, 2 x 2 causal: 3 visible pairs, 2 keys): ‖f(x)‖ averaged over the keys; α,
    ‖αf(x)‖ and ‖Σ_h α_h f_h(x)‖ averaged over the visible (query, key) pairs only."""
    from fairseq_sparse_attn.analysis.norms import NormSummary

    model, _ = build_model()
    summary = NormSummary(model, lambda token: "other", kinds=("decoder_self",))
    weights = torch.tensor([[[1.0, 0.0], [0.25, 0.75]], [[1.0, 0.0], [0.5, 0.5]]])
    f = torch.tensor([[2.0, 4.0], [1.0, 3.0]])  # ‖f^h(x_j)‖ per head and key
    visible = torch.tensor([[True, False], [True, True]])
    layer = torch.tensor([[2.5, 7.0], [1.0, 4.0]])  # the hidden pair's 7 must not count
    record = SentenceNorms(0, 1, weights, f, weights * f[:, None, :], layer, visible, None, torch.tensor([5, 6]))
    summary.records = {("decoder_self", 0): [record]}
    summary.end_batch()
    entry = summary.results()["layers"]["decoder_self"][0]
    assert entry["heads"] == 2
    assert entry["f_norm"] == pytest.approx([(2 + 4) / 2, (1 + 3) / 2])
    assert entry["alpha"] == pytest.approx([(1 + 0.25 + 0.75) / 3, (1 + 0.5 + 0.5) / 3])
    assert entry["alpha_f_norm"] == pytest.approx([(2 + 0.25 * 2 + 0.75 * 4) / 3, (1 + 0.5 * 1 + 0.5 * 3) / 3])
    assert entry["layer_norm"] == pytest.approx((2.5 + 1.0 + 4.0) / 3)
