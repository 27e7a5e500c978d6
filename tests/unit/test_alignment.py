"""Alignment extraction, subword merging, talp I/O and AER against hand-computed examples."""

import math

import pytest
import torch

from fairseq_sparse_attn.analysis.alignment import (
    AlignmentCounts,
    SentenceAlignment,
    aligned_rows,
    alignment_counts,
    argmax_alignment,
    combine_heads,
    format_alignment,
    layer_head_report,
    merge_subwords,
    read_alignments,
    sentence_alignment,
    word_index,
    write_alignments,
)

# ---------------------------------------------------------------- rows: AWO / AWI

# teacher forcing of 3 target pieces: decoder input  [</s>, y0, y1, y2]
#                                     predicted      [y0,   y1, y2, </s>]
ROWS = torch.tensor(
    [
        [0.10, 0.20, 0.70],  # r0: input </s>, predicts y0
        [0.60, 0.30, 0.10],  # r1: input y0,   predicts y1
        [0.20, 0.50, 0.30],  # r2: input y1,   predicts y2
        [0.05, 0.15, 0.80],
    ],  # r3: input y2,   predicts </s>
    dtype=torch.float64,
)


def test_awo_uses_the_row_predicting_each_piece_and_drops_the_eos_row():
    got = aligned_rows(ROWS, 3, "awo")
    assert got.tolist() == [[0.10, 0.20, 0.70], [0.60, 0.30, 0.10], [0.20, 0.50, 0.30]]


def test_awi_uses_the_row_whose_input_is_each_piece_and_equals_relas_shift():
    got = aligned_rows(ROWS, 3, "awi")
    # y0 is the input of r1, y1 of r2, y2 of r3
    assert got.tolist() == [[0.60, 0.30, 0.10], [0.20, 0.50, 0.30], [0.05, 0.15, 0.80]]
    assert torch.equal(got, ROWS[1:])  # ReLA's shifted attention alpha[1:]
    # per target piece the argmax differs between the settings: (source, target) links
    assert argmax_alignment(aligned_rows(ROWS, 3, "awo")) == {(2, 0), (0, 1), (1, 2)}
    assert argmax_alignment(got) == {(0, 0), (1, 1), (2, 2)}


def test_row_selection_works_per_head_and_checks_the_row_count():
    heads = torch.stack([ROWS, 2 * ROWS])
    assert torch.equal(aligned_rows(heads, 3, "awi"), heads[:, 1:])
    with pytest.raises(ValueError, match="4 target pieces \\+ 1 .* = 5 rows; got 4 rows"):
        aligned_rows(ROWS, 4, "awo")
    with pytest.raises(ValueError, match="setting"):
        aligned_rows(ROWS, 3, "shifted")


# ---------------------------------------------------------------- subword merging


def test_word_index_for_both_subword_schemes():
    assert word_index(["Ha@@", "us", "ist", "gro@@", "ß@@", "artig"], "subword-nmt") == [0, 0, 1, 2, 2, 2]
    # SentencePiece: "▁" starts a word; a lone "▁" piece starts one too; the first piece
    # starts word 0 even without the marker
    assert word_index(["Ha", "us", "\u2581ist", "\u2581", "(", "\u2581x"], "sentencepiece") == [0, 0, 1, 2, 2, 3]
    assert word_index(["a", "b@@", "c"], "word") == [0, 1, 2]
    with pytest.raises(ValueError, match="continuation piece 'gro@@' \\(trailing '@@'\\)"):
        word_index(["das", "gro@@"], "subword-nmt")


def test_merge_sums_over_source_pieces_and_averages_over_target_pieces():
    # target pieces: the | hou@@ se      source pieces: das | Ha@@ us | </s>
    a = torch.tensor([[0.6, 0.1, 0.1, 0.2], [0.1, 0.3, 0.4, 0.2], [0.0, 0.5, 0.1, 0.4]], dtype=torch.float64)
    got = merge_subwords(a, ["das", "Ha@@", "us"], ["the", "hou@@", "se"], "subword-nmt")
    # the:   das 0.6, Haus 0.1+0.1 = 0.2, </s> 0.2
    # house: mean of (0.1, 0.3+0.4, 0.2) and (0.0, 0.5+0.1, 0.4) = (0.05, 0.65, 0.3)
    expected = torch.tensor([[0.6, 0.2, 0.2], [0.05, 0.65, 0.3]], dtype=torch.float64)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    sp = merge_subwords(a, ["\u2581das", "\u2581Ha", "us"], ["\u2581the", "\u2581hou", "se"], "sentencepiece")
    torch.testing.assert_close(sp, expected, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="expected \\(3 target pieces, 2 source pieces \\+ 1 source </s> = 3\\)"):
        merge_subwords(a, ["das", "Haus"], ["the", "hou@@", "se"], "subword-nmt")


# ---------------------------------------------------------------- argmax


def test_argmax_drops_eos_and_null_rows_and_breaks_ties_low():
    a = torch.tensor(
        [
            [0.2, 0.7, 0.1],  # -> source 1
            [0.1, 0.1, 0.8],  # argmax is the </s> column: no link
            [0.0, 0.0, 0.0],  # null attention: no link
            [0.4, 0.4, 0.2],
        ]
    )  # tie -> source 0
    assert argmax_alignment(a, null_column=2) == {(1, 0), (0, 3)}
    assert argmax_alignment(a) == {(1, 0), (2, 1), (0, 3)}
    with pytest.raises(ValueError, match="non-negative"):
        argmax_alignment(torch.tensor([[-1.0, 0.5]]))


def test_combine_heads_sums_heads():
    h = torch.tensor([[[0.9, 0.1], [0.2, 0.8]], [[0.0, 1.0], [0.6, 0.4]]])
    torch.testing.assert_close(combine_heads(h), torch.tensor([[0.9, 1.1], [0.8, 1.2]]))
    assert argmax_alignment(combine_heads(h)) == {(1, 0), (1, 1)}


def test_sentence_alignment_awo_vs_awi_with_subwords_and_eos():
    # source: ein | Schü@@ ler | </s>     target: a | stu@@ dent   (+ </s> predicted last)
    a = torch.tensor(
        [
            [0.7, 0.1, 0.1, 0.1],  # input </s>,   predicts a
            [0.8, 0.1, 0.0, 0.1],  # input a,      predicts stu@@
            [0.1, 0.2, 0.2, 0.5],  # input stu@@,  predicts dent
            [0.0, 0.1, 0.1, 0.8],
        ]
    )  # input dent,   predicts </s>
    src, tgt = ["ein", "Schü@@", "ler"], ["a", "stu@@", "dent"]
    # AWO: a <- r0 = (0.7, 0.2, 0.1) -> ein
    #      student <- mean(r1 (0.8, 0.1, 0.1), r2 (0.1, 0.4, 0.5)) = (0.45, 0.25, 0.3) -> ein
    assert sentence_alignment(a, src, tgt, "awo") == {(0, 0), (0, 1)}
    # AWI: a <- r1 = (0.8, 0.1, 0.1) -> ein
    #      student <- mean(r2 (0.1, 0.4, 0.5), r3 (0.0, 0.2, 0.8)) = (0.05, 0.3, 0.65) -> </s>: none
    assert sentence_alignment(a, src, tgt, "awi") == {(0, 0)}


# ---------------------------------------------------------------- talp I/O


def test_read_talp_gold_one_indexed_sure_and_possible(tmp_path):
    f = tmp_path / "gold.talp"
    f.write_text("1-1 2p3\n\n3-2 1-1 1p1\n")
    gold = read_alignments(f, lengths=[(2, 3), (1, 1), (3, 2)])
    assert gold[0] == SentenceAlignment(frozenset({(0, 0)}), frozenset({(0, 0), (1, 2)}))
    assert gold[1] == SentenceAlignment()
    assert gold[2].sure == {(2, 1), (0, 0)} and gold[2].possible == {(2, 1), (0, 0)}


def test_read_zero_indexed_and_reversed(tmp_path):
    f = tmp_path / "pred.txt"
    f.write_text("0-1 2-0\n")
    assert read_alignments(f, one_indexed=False)[0].sure == {(0, 1), (2, 0)}
    # target-source order: "0-1" is target 0, source 1
    assert read_alignments(f, one_indexed=False, reverse=True)[0].sure == {(1, 0), (0, 2)}


def test_write_then_read_gives_the_same_alignments(tmp_path):
    alignments = [SentenceAlignment({(0, 0), (2, 1)}, {(1, 1)}), {(3, 0)}, set()]
    assert format_alignment(alignments[0]) == "1-1 2p2 3-2"
    assert format_alignment(alignments[0], one_indexed=False, reverse=True) == "0-0 1p1 1-2"
    f = tmp_path / "out.talp"
    write_alignments(f, alignments, one_indexed=False, reverse=True)
    assert f.read_text() == "0-0 1p1 1-2\n0-3\n\n"
    back = read_alignments(f, one_indexed=False, reverse=True)
    assert back == [alignments[0], SentenceAlignment({(3, 0)}), SentenceAlignment()]


def test_read_errors_name_file_line_and_token(tmp_path):
    f = tmp_path / "bad.talp"
    f.write_text("1-1\n1x2 2-2\n")
    with pytest.raises(ValueError, match=r"bad\.talp:2: bad alignment link '1x2'; expected 'i-j'"):
        read_alignments(f)
    f.write_text("1-1\n0-2\n")
    with pytest.raises(ValueError, match=r"bad\.talp:2: source index 0 .* below 1"):
        read_alignments(f)
    f.write_text("1-1\n3-1\n")
    with pytest.raises(
        ValueError,
        match=r"bad\.talp:2: source index 3 in link '3-1' is out of "
        r"range for a source sentence of 2 words",
    ):
        read_alignments(f, lengths=[(1, 1), (2, 4)])
    with pytest.raises(
        ValueError,
        match=r"bad\.talp:2: target index 3 in link '3-1' .* target "
        r"sentence of 2 words",
    ):
        read_alignments(f, reverse=True, lengths=[(1, 1), (1, 2)])
    with pytest.raises(ValueError, match=r"bad\.talp: 2 lines, expected 3"):
        read_alignments(f, lengths=[(1, 1), (3, 1), (1, 1)])


# ---------------------------------------------------------------- AER


def test_corpus_precision_recall_aer_by_hand():
    gold = [
        SentenceAlignment({(0, 0), (1, 1)}, {(2, 1)}),  # S = 2 links, P = S + (2, 1)
        SentenceAlignment({(0, 0)}, {(1, 0)}),
        SentenceAlignment(set(), {(0, 1)}),  # no sure link
    ]
    predicted = [
        {(0, 0), (2, 1), (2, 2)},  # |A|=3, |A∩S|=1 (0,0), |A∩P|=2 (0,0),(2,1)
        set(),  # empty A: |S| = 1 still counts
        {(0, 1)},
    ]  # |A|=1, |A∩S|=0, |A∩P|=1
    c = alignment_counts(predicted, gold)
    assert c == AlignmentCounts(predicted=4, sure=3, predicted_sure=1, predicted_possible=3)
    assert c.precision == 3 / 4
    assert c.recall == 1 / 3
    assert c.aer == pytest.approx(1 - (1 + 3) / (4 + 3))  # 3/7


def test_empty_alignments():
    g = [SentenceAlignment({(0, 0)})]
    empty_a = alignment_counts([set()], g)  # recall 0, AER 1 - 0/1, precision 0/0
    assert math.isnan(empty_a.precision) and empty_a.recall == 0 and empty_a.aer == 1
    only_possible = [SentenceAlignment(set(), {(0, 0)})]
    empty_s = alignment_counts([{(0, 0)}], only_possible)  # A inside P: AER 1 - 1/1 = 0
    assert empty_s.precision == 1 and math.isnan(empty_s.recall) and empty_s.aer == 0
    both = alignment_counts([set()], [SentenceAlignment()])
    assert math.isnan(both.aer)
    assert alignment_counts([{(0, 0)}], g).aer == 0
    with pytest.raises(ValueError, match="2 predicted sentences but 1 gold"):
        alignment_counts([set(), set()], g)


def test_predicted_file_with_possible_links_counts_all_links(tmp_path):
    f = tmp_path / "pred.talp"
    f.write_text("1-1 2p2\n")
    pred = read_alignments(f)
    c = alignment_counts(pred, [SentenceAlignment({(0, 0)})])
    assert c == AlignmentCounts(predicted=2, sure=1, predicted_sure=1, predicted_possible=1)


def test_layer_head_report_best_and_averages():
    gold = [SentenceAlignment({(0, 0), (1, 1)})]
    predictions = {
        (0, None): [{(0, 0)}],  # 1 - 2/3 = 1/3
        (0, 0): [{(0, 0), (1, 1)}],  # 0
        (0, 1): [set()],  # 1
        (1, None): [{(0, 0), (1, 1)}],  # 0
        (1, 0): [{(1, 0)}],  # 1 - 0/3 = 1
        (1, 1): [{(1, 1), (0, 1)}],  # 1 - 2/4 = 0.5
    }
    r = layer_head_report(predictions, gold)
    assert r.aer(0) == pytest.approx(1 / 3) and r.aer(1, 1) == 0.5 and r.aer(0, 1) == 1
    assert r.best == (0, 0)  # ties (0, 0) / (1, None) go to the smaller layer
    assert r.best_layer == 1
    assert r.best_head_per_layer == {0: 0, 1: 1}
    assert r.layer_mean_aer == pytest.approx((1 / 3 + 0) / 2)
    assert r.best_head_mean_aer == pytest.approx((0 + 0.5) / 2)
    heads_only = layer_head_report({k: v for k, v in predictions.items() if k[1] is not None}, gold)
    assert heads_only.best_layer is None and heads_only.layer_mean_aer is None
    with pytest.raises(ValueError, match="no \\(layer, head\\) predictions"):
        layer_head_report({}, gold)


@pytest.mark.parametrize("methods", [("weights",), ("weights", "norms")])
def test_the_collector_aligns_each_sentence_s_own_matrices(methods):
    """``fsa-analyze align``'s collector over padded batches of 4, against
    :func:`sentence_alignment` of each sentence's matrices recorded one sentence at a time
    (NormRecorder, checked against the parameters in test_norms.py): the weights' layer is
    Σ_h α_h and its heads α_h; the norms' layer is ‖Σ_h α_h f_h(x)‖, not Σ_h ‖α_h f_h(x)‖,
    and its heads ‖α_h f_h(x)‖."""
    from fairseq_sparse_attn.analysis.alignment import AlignmentCollector
    from fairseq_sparse_attn.analysis.collect import run_passes
    from fairseq_sparse_attn.analysis.norms import NormRecorder

    from helpers import build_model, make_examples

    model, d = build_model("softmax_transformer_wmt_en_de")
    examples = make_examples(d, n=8, seed=2, min_len=4, max_len=9)
    collector = AlignmentCollector(model, examples, methods=methods, settings=("awo", "awi"), scheme="word")
    run_passes(model, examples, [collector], d.pad(), d.pad(), d.eos(), batch_size=4)
    compared, layer_sum_differs = 0, 0
    for ex in examples:
        alone = NormRecorder(model, ("cross",))
        run_passes(model, [ex], [alone], d.pad(), d.pad(), d.eos(), batch_size=1)
        for (_, layer), (r,) in alone.records.items():
            matrices = {("weights", None): r.weights.sum(0), ("norms", None): r.layer}
            for h in range(r.head.shape[0]):
                matrices[("weights", h)], matrices[("norms", h)] = r.weights[h], r.head[h]
            for (method, head), m in matrices.items():
                if method not in methods:
                    continue
                for setting in ("awo", "awi"):
                    want = sentence_alignment(m, ex.source_pieces, ex.target_pieces, setting, "word")
                    assert collector.links[(method, setting, layer, head)][ex.index] == want, (
                        method,
                        setting,
                        layer,
                        head,
                    )
                    compared += 1
            summed = sentence_alignment(r.head.sum(0), ex.source_pieces, ex.target_pieces, "awo", "word")
            layer_sum_differs += summed != sentence_alignment(
                r.layer, ex.source_pieces, ex.target_pieces, "awo", "word"
            )
    assert compared == 8 * len(alone.records) * (model.decoder.layers[0].encoder_attn.num_heads + 1) * 2 * len(methods)
    assert layer_sum_differs > 0  # the two layer norms give other links here: the comparison sees a swap
