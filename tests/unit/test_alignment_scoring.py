"""Scoring alignments: one subword->word grouping, sentences whose pieces became <unk>
in a binarized split (issue 16 item 1), and Kobayashi et al. Table 3's rows
(``fsa-analyze aer-table``, item 3) — each against a computation written here."""

import json
import math

import pytest

from fairseq_sparse_attn.analysis import cli
from fairseq_sparse_attn.analysis.alignment import sentence_alignment
from fairseq_sparse_attn.analysis.commands.aer_table import highest_norm_choices, run_rows, summarize
from fairseq_sparse_attn.analysis.commands.align import result_entry, sentences_with_unknown_pieces
from fairseq_sparse_attn.analysis.loading import Example
from fairseq_sparse_attn.provenance import check_provenance
from fairseq_sparse_attn.subwords import join_words, strip_markers, uncertain_boundaries, word_count, word_index, words

# ------------------------------------------------------------------------ grouping


def test_one_grouping_for_every_scheme_and_the_fixed_pattern_convention():
    pieces = "a master of science fic@@ tion .".split()
    assert word_index(pieces, "subword-nmt") == [0, 1, 2, 3, 4, 4, 5]
    assert word_index(pieces, "bpe") == word_index(pieces, "subword-nmt")  # fixed patterns' name
    assert words(pieces, "subword-nmt") == ["a", "master", "of", "science", "fiction", "."]
    assert join_words(["\u2581new", "\u2581yo", "rk", "\u2581", "!"], "sentencepiece") == "new york !"
    assert word_count("x y z".split(), "word") == 3 and word_count([], "subword-nmt") == 0
    # EOS always its own word and ends the word before it (word-based fixed patterns)
    assert word_index(["ab@@", "</s>", "c"], "subword-nmt", eos="</s>") == [0, 1, 2]
    assert word_index(["\u2581a", "b", "</s>", "c"], "sentencepiece", eos="</s>") == [0, 0, 1, 2]
    with pytest.raises(ValueError, match="must be one of"):
        word_index(["a"], "wordpiece")
    assert [strip_markers(p) for p in (",@@", "\u2581.", "ab", "@@")] == [",", ".", "ab", ""]


# ---------------------------------------------------------------- unknown pieces


def test_a_piece_that_became_unk_shifts_the_words_and_is_detected():
    # raw text "das gro@@ ße haus" -> the dictionary lacks "gro@@": binarized "das <unk> ße haus"
    raw = ["das", "gro@@", "ße", "haus"]
    binarized = ["das", "<unk>", "ße", "haus"]
    assert word_count(raw, "subword-nmt") == 3  # das | große | haus
    assert word_count(binarized, "subword-nmt") == 4  # the <unk> lost its "@@"
    assert uncertain_boundaries(binarized, "subword-nmt") and not uncertain_boundaries(raw, "subword-nmt")
    assert not uncertain_boundaries(binarized, "word")  # every piece a word anyway
    # attention of a 1-piece target on the pieces: the argmax on "ße" is word 1 from the raw
    # pieces (große), word 2 from the binarized ones: the link moves
    import torch

    a = torch.tensor([[0.0, 0.1, 0.6, 0.2, 0.1], [0.0, 0.0, 0.0, 0.0, 1.0]])  # rows: y0, </s>
    assert sentence_alignment(a, raw, ["house"], "awo") == {(1, 0)}
    assert sentence_alignment(a, binarized, ["house"], "awo") == {(2, 0)}
    examples = [
        Example(0, None, None, raw, ["house"]),
        Example(1, None, None, binarized, ["house"]),
        Example(2, None, None, ["ja"], ["<unk>"]),
    ]
    assert sentences_with_unknown_pieces(examples, "subword-nmt", "<unk>", "<unk>") == [1, 2]


def test_unknown_sentences_are_not_range_checked_and_are_left_out_of_the_aer(tmp_path):
    examples = [
        Example(0, None, None, ["das", "haus"], ["the", "house"]),
        Example(1, None, None, ["das", "<unk>", "ße", "haus"], ["a", "house"]),
    ]
    gold = tmp_path / "gold.talp"
    gold.write_text("1-1 2-2\n1-1 4p2\n")
    examples[1] = Example(1, None, None, ["das", "<unk>", "haus"], ["a", "house"])  # 3 words here
    with pytest.raises(ValueError, match="out of range"):
        cli.read_gold(str(gold), examples, 2, "DATA", "subword-nmt", False, False)
    parsed = cli.read_gold(str(gold), examples, 2, "DATA", "subword-nmt", False, False, unchecked=[1])
    predictions = {(0, None): [{(0, 0), (1, 1)}, {(0, 0), (2, 1)}], (0, 0): [{(0, 0)}, {(1, 1)}]}
    all_rows = result_entry("weights", "awo", [(0, None), (0, 0)], predictions, parsed, None, {})
    scored = result_entry("weights", "awo", [(0, None), (0, 0)], predictions, parsed, [0], {})

    def plain_aer(pairs):  # Och & Ney written plainly over (predicted, sure, possible) triples
        a_s = sum(len(a & s) for a, s, p in pairs)
        a_p = sum(len(a & p) for a, s, p in pairs)
        return 1 - (a_s + a_p) / (sum(len(a) for a, s, p in pairs) + sum(len(s) for a, s, p in pairs))

    triples = [({(0, 0), (1, 1)}, {(0, 0), (1, 1)}, {(0, 0), (1, 1)}), ({(0, 0), (2, 1)}, {(0, 0)}, {(0, 0), (3, 1)})]
    assert all_rows["rows"][0]["aer"] == pytest.approx(plain_aer(triples))
    assert scored["rows"][0]["aer"] == pytest.approx(plain_aer(triples[:1])) == 0.0
    assert scored["rows"][0]["links"] == 4  # links are counted (and written) for every sentence
    assert scored["rows"][0]["sure"] == 2


# ------------------------------------------------------------------ Table 3 rows


DATA = {"data_bin": "/data-bin", "split": "test", "sentences": 6, "sentences_in_data": 6}


def align_json(checkpoint, aers, data=DATA):
    """aers[(method, setting)] = {(layer, head): aer}"""
    results = []
    for (method, setting), table in aers.items():
        rows = [{"layer": layer, "head": head, "aer": v} for (layer, head), v in table.items()]
        layer_rows = {layer: v for (layer, head), v in table.items() if head is None}
        best = min(layer_rows, key=lambda layer: (layer_rows[layer], layer))
        results.append(
            {
                "method": method,
                "setting": setting,
                "rows": rows,
                "best_layer": {"layer": best, "aer": layer_rows[best]},
                "layer_mean_aer": sum(layer_rows.values()) / len(layer_rows),
            }
        )
    return {
        "command": "align",
        "gold": "/gold.talp",
        "model": {"checkpoint": checkpoint},
        "data": dict(data),
        "results": results,
    }


def norms_json(checkpoint, alpha_f, data=DATA):
    return {
        "command": "norms",
        "model": {"checkpoint": checkpoint},
        "data": dict(data),
        "layers": {"cross": [{"layer": layer, "alpha_f_norm": values} for layer, values in enumerate(alpha_f)]},
    }


def test_highest_average_norm_layer_is_the_head_sum_not_the_largest_head():
    # layer 0: one large head (3.0) but sum 3.2; layer 1: sum 4.0 (footnote 15: the sum)
    layer, head = highest_norm_choices(norms_json("c", [[3.0, 0.1, 0.1], [1.5, 1.5, 1.0]]), "run")
    assert (layer, head) == (1, (0, 0))
    # ties: lower layer, lower head
    assert highest_norm_choices(norms_json("c", [[1.0, 2.0], [2.0, 1.0]]), "run") == (0, (0, 1))


def test_aer_table_rows_over_seeds(tmp_path):
    layers, heads = 3, 2
    runs, expected = [], {}
    for seed, (shift, alpha_f) in enumerate(
        [(0.00, [[1, 2], [4, 1], [0, 0.5]]), (0.10, [[5, 1], [1, 1], [0.2, 0.3]])], start=1
    ):
        aers = {}
        for method in ("weights", "norms"):
            for setting in ("awo", "awi"):
                table = {}
                for layer in range(layers):
                    base = 0.2 + 0.1 * layer + (0.05 if method == "weights" else 0) + shift
                    table[(layer, None)] = base
                    for h in range(heads):
                        table[(layer, h)] = base + 0.01 * (h + 1) + (0.1 if setting == "awo" else 0)
                aers[(method, setting)] = table
        d = tmp_path / f"seed{seed}"
        d.mkdir()
        (d / "align.json").write_text(json.dumps(align_json(f"/ckpt{seed}.pt", aers)))
        (d / "norms.json").write_text(json.dumps(norms_json(f"/ckpt{seed}.pt", alpha_f)))
        runs.append(d)
        # written plainly: layer = argmax_l Σ_h ‖αf‖, head = argmax_(l,h) ‖αf‖
        sums = [sum(v) for v in alpha_f]
        top_layer = sums.index(max(sums))
        flat = [(v, -layer, -h) for layer, vs in enumerate(alpha_f) for h, v in enumerate(vs)]
        _, l_, h_ = max(flat)
        for setting in ("awo", "awi"):
            for method in ("weights", "norms"):
                table = aers[(method, setting)]
                layer_aers = [table[(layer, None)] for layer in range(layers)]
                expected.setdefault((setting, method, "layer mean"), []).append(sum(layer_aers) / layers)
                expected.setdefault((setting, method, "best layer"), []).append(min(layer_aers))
            norms = aers[("norms", setting)]
            expected.setdefault((setting, "norms", "layer with the highest average ‖αf(x)‖"), []).append(
                norms[(top_layer, None)]
            )
            expected.setdefault((setting, "norms", "head with the highest average ‖αf(x)‖"), []).append(
                norms[(-l_, -h_)]
            )
    out = tmp_path / "table"
    report = cli.run(["aer-table", *map(str, runs), "--output-dir", str(out)])
    assert [(e["setting"], e["method"], e["row"]) for e in report["rows"]] == list(expected)
    for e in report["rows"]:
        values = expected[(e["setting"], e["method"], e["row"])]
        mean = sum(values) / 2
        assert e["aer"] == pytest.approx(mean)
        assert e["sd"] == pytest.approx(math.sqrt(sum((v - mean) ** 2 for v in values) / 1))
        assert [r["aer"] for r in e["runs"]] == pytest.approx(values)
    written = json.loads((out / "aer_table.json").read_text())
    check_provenance(written)
    tsv = (out / "aer_table.tsv").read_text().splitlines()
    assert tsv[0].split("\t") == ["setting", "method", "row", "aer", "sd", "runs", "choices"]
    head_row = [line.split("\t") for line in tsv[1:] if "head with" in line][0]
    assert head_row[6] == "L1H0 L0H0"  # seed 1: 4 at layer 1 head 0; seed 2: 5 at layer 0 head 0
    assert summarize([0.5]) == (0.5, None) and summarize([0.5, None]) == (None, None)


def test_aer_table_refuses_mismatched_or_incomplete_runs(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    table = {(0, None): 0.3, (0, 0): 0.4}
    aers = {(m, s): table for m in ("weights", "norms") for s in ("awo", "awi")}
    (d / "align.json").write_text(json.dumps(align_json("/a.pt", aers)))
    (d / "norms.json").write_text(json.dumps(norms_json("/b.pt", [[1.0]])))
    with pytest.raises(cli.UsageError, match="not of the same checkpoint"):
        run_rows(json.loads((d / "align.json").read_text()), json.loads((d / "norms.json").read_text()), "run")
    (d / "norms.json").unlink()
    assert cli.main(["aer-table", str(d), "--output-dir", str(tmp_path / "o")]) == 2
    no_gold = dict(align_json("/a.pt", aers), gold=None)
    with pytest.raises(cli.UsageError, match="without --gold"):
        run_rows(no_gold, norms_json("/a.pt", [[1.0]]), "run")
    # the norms of other sentences than the aligned ones (norms --max-sentences 1): the
    # highest-norm rows would take their layer and head from other data
    fewer = dict(DATA, sentences=1)
    with pytest.raises(
        cli.UsageError, match=r"align.json and norms.json are not of the same data \(sentences: 6 against 1\)"
    ):
        run_rows(align_json("/a.pt", aers), norms_json("/a.pt", [[1.0]], data=fewer), "run")
    with pytest.raises(cli.UsageError, match="not of the same data"):
        run_rows(align_json("/a.pt", aers), norms_json("/a.pt", [[1.0]], data=dict(DATA, split="valid")), "run")
    codes = dict(DATA, bpe_codes="/bpe/codes.de", target_bpe_codes="/bpe/codes.en")  # per-language BPE
    with pytest.raises(cli.UsageError, match="target_bpe_codes: /bpe/codes.en against /bpe/other.en"):
        run_rows(
            align_json("/a.pt", aers, codes),
            norms_json("/a.pt", [[1.0]], dict(codes, target_bpe_codes="/bpe/other.en")),
            "run",
        )
    texts = dict(DATA, raw_source="/text/test.de")  # text input (--source-text): the files count too
    with pytest.raises(cli.UsageError, match="raw_source: /text/test.de against /text/other.de"):
        run_rows(
            align_json("/a.pt", aers, texts),
            norms_json("/a.pt", [[1.0]], dict(texts, raw_source="/text/other.de")),
            "run",
        )
    assert run_rows(
        align_json("/a.pt", aers), norms_json("/a.pt", [[1.0]], data=dict(DATA, data_bin="/x/../data-bin")), "run"
    )


def test_aer_table_refuses_runs_that_are_not_seeds_of_one_experiment(tmp_path, capsys):
    """A directory given three times counted as three seeds (sd 1e-16); runs of another
    architecture, gold file or data set were averaged in without a word."""
    table = {(0, None): 0.3, (0, 0): 0.4}
    aers = {(m, s): table for m in ("weights", "norms") for s in ("awo", "awi")}

    def make(name, checkpoint="/a.pt", arch="rela", gold="/gold.talp", data=DATA):
        d = tmp_path / name
        d.mkdir()
        align = dict(align_json(checkpoint, aers, data), gold=gold)
        align["model"]["arch"] = arch
        (d / "align.json").write_text(json.dumps(align))
        (d / "norms.json").write_text(json.dumps(norms_json(checkpoint, [[1.0]], data)))
        return str(d)

    a = make("a")
    cases = [
        ([a, a], "the run directory"),
        ([a, str(tmp_path / "." / "a")], "is given twice"),
        ([a, make("copy")], "are results of the same checkpoint /a.pt"),
        ([a, make("arch", "/b.pt", arch="softmax")], "of different architectures"),
        ([a, make("gold", "/c.pt", gold="/other.talp")], "were scored against different gold alignments"),
        ([a, make("data", "/d.pt", data=dict(DATA, sentences=5))], "are not of the same data (sentences: 5 against 6)"),
    ]
    for runs, message in cases:
        assert cli.main(["aer-table", *runs, "--output-dir", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "out").exists()
    # seeds: other checkpoints of the same architecture, data and gold (a copy of the gold
    # file elsewhere is the same gold)
    gold_copy = tmp_path / "gold_copy.talp"
    gold_copy.write_text("1-1\n")
    (tmp_path / "gold.talp").write_text("1-1\n")
    b = make("b", "/b.pt", gold=str(tmp_path / "gold.talp"))
    c = make("c", "/c.pt", gold=str(gold_copy))
    assert cli.main(["aer-table", b, c, "--output-dir", str(tmp_path / "out")]) == 0
