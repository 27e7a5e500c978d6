"""``fsa-analyze`` end to end on tiny models trained here on the Multi30k slice: a ReLA-g
plugin model (fairseq-train --user-dir, 100 updates) and a stock fairseq ``transformer``
(no plugin, 10 updates).  Every subcommand runs; outputs are checked against the schema
documented in docs/analysis.md ("fsa-analyze"), AER against a recomputation from the
written alignment files and a hand-made gold file, and bad input gives clear errors."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fairseq_sparse_attn.analysis import cli

from helpers import model_size_flags

REPO = Path(__file__).resolve().parents[2]
USER_DIR = str(REPO / "fairseq_sparse_attn")
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
TINY = [
    *model_size_flags(layers=2, dim=64, ffn=128, heads=4),
    "--share-all-embeddings",
]
HEADS, LAYERS = 4, 2

# Six test-set pairs (lines 1, 5, 7, 9, 15, 27 of test_2016_flickr) and gold links made by
# hand on their Moses-tokenized words (1-indexed, source-target; "-" sure, "p" possible):
#   Ein Mann mit einem orangefarbenen Hut , der etwas anstarrt . / A man in an orange hat
#   starring at something .    (mit~in possible; anstarrt -> starring (sure), at (possible))
LINES = (1, 5, 7, 9, 15, 27)
GOLD = """1-1 2-2 3p3 4-4 5-5 6-6 10-7 10p8 9-9 11-10
1-1 2p2 2-3 3-4 4-5 5p6 5-7 6-8 7-9
1-1 2-2 3-3 4-4 5-5 6p6 6-7 6p8 7-9 8-10 9-11
1-1 2-2 3-3 4-4 5-5 6-6 7-7
1-1 2-2 3-3 4-4 5-5 6-6 7-7
1-1 2-2 3-3 4-4 5-5 6-6 7-7
"""


def train(data, save_dir, plugin, updates):
    cmd = [
        sys.executable,
        "-m",
        "fairseq_cli.train",
        str(data / "data-bin"),
        *TINY,
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9,0.98)",
        "--lr",
        "3e-3",
        "--max-tokens",
        "1024",
        "--max-update",
        str(updates),
        "--save-dir",
        str(save_dir),
        "--no-epoch-checkpoints",
        "--num-workers",
        "0",
        "--seed",
        "1",
        "--disable-validation",
        "--log-format",
        "simple",
    ]
    if plugin:
        cmd += [
            "--user-dir",
            USER_DIR,
            "--arch",
            "rela_transformer_wmt_en_de",
            "--lr-scheduler",
            "inverse_sqrt",
            "--warmup-updates",
            "40",
            "--criterion",
            "label_smoothed_cross_entropy",
            "--label-smoothing",
            "0.1",
            "--dropout",
            "0.1",
        ]
        env = ENV
    else:  # stock fairseq: no --user-dir, no plugin on the path
        cmd += ["--arch", "transformer", "--criterion", "cross_entropy"]
        env = {k: v for k, v in ENV.items() if k != "PYTHONPATH"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(save_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return save_dir / "checkpoint_last.pt"


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 shared cores: no oversubscription
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def models(data, tmp_path_factory):
    rela = train(data, tmp_path_factory.mktemp("rela"), plugin=True, updates=100)
    stock = train(data, tmp_path_factory.mktemp("stock"), plugin=False, updates=10)
    return {"rela": rela, "stock": stock}


@pytest.fixture(scope="module")
def six(multi30k_raw, tmp_path_factory):
    import gzip

    d = tmp_path_factory.mktemp("six")
    for lang in ("de", "en"):
        with gzip.open(multi30k_raw / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()
        (d / f"six.{lang}").write_text("".join(lines[i - 1] + "\n" for i in LINES), encoding="utf-8")
    (d / "gold.talp").write_text(GOLD)
    return d


def analyze(*argv):
    """Run fsa-analyze in this process; (exit code, stderr text) are checked by callers."""
    return cli.main([str(a) for a in argv])


def common(data, checkpoint, out, *extra):
    return [data / "data-bin", "--path", checkpoint, "--output-dir", out, "--no-progress", *extra]


def load(path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


def is_png(path):
    return Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def read_tsv(path):
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    rows = [dict(zip(header, line.split("\t"))) for line in lines[1:]]
    assert all(len(line.split("\t")) == len(header) for line in lines[1:])
    return header, rows


HEADER_KEYS = {"command", "schema_version", "model", "data", "provenance"}
MODEL_KEYS = {"checkpoint", "arch", "loaded_as"}
LANGS = {"source_lang", "target_lang"}
SPLIT_DATA_KEYS = {"data_bin", "split", "sentences", "sentences_in_data"} | LANGS
RAW_DATA_KEYS = {
    "data_bin",
    "raw_source",
    "raw_target",
    "tokenizer",
    "bpe_codes",
    "sentences",
    "sentences_in_data",
} | LANGS


def check_header(report, command, loaded_as, sentences, data_keys=SPLIT_DATA_KEYS):
    from fairseq_sparse_attn.provenance import check_provenance

    check_provenance(report)
    assert report["command"] == command and report["schema_version"] == 1
    assert set(report["model"]) == MODEL_KEYS and report["model"]["loaded_as"] == loaded_as
    assert set(report["data"]) == data_keys and report["data"]["sentences"] == sentences
    langs = report["data"]["source_lang"], report["data"]["target_lang"]
    assert all(langs) and langs[0] != langs[1]  # the direction analysed


def is_rate(x):
    return isinstance(x, float) and 0.0 <= x <= 1.0 or x in (0, 1)


# ------------------------------------------------------------------------- stats


@pytest.fixture(scope="module")
def stats_dirs(data, models, tmp_path_factory):
    out = {}
    for name in models:
        out[name] = tmp_path_factory.mktemp(f"stats_{name}")
    # the plugin model through the module's command line in a subprocess (entry point)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fairseq_sparse_attn.analysis.cli",
            "stats",
            *map(str, common(data, models["rela"], out["rela"], "--max-sentences", "48", "--batch-size", "16")),
        ],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=str(REPO),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"wrote {out['rela'] / 'stats.json'}" in proc.stdout + proc.stderr  # says where it wrote (issue 14)
    assert analyze("stats", *common(data, models["stock"], out["stock"], "--max-sentences", "24")) == 0
    return out


LAYER_KEYS = {
    "layer",
    "heads",
    "activation",
    "output_norm",
    "sparsity",
    "null_rate",
    "entropy",
    "top_p",
    "js",
    "js_renormalization",
    "js_temperatures",
    "undefined",
    "per_head",
}
FFN_KEYS = {"side", "layer", "name", "ffn_type", "anisotropy_keys", "anisotropy_values", "variance_ratio", "top_p_mass"}


def test_stats_schema_tsv_and_plot(stats_dirs):
    report = load(stats_dirs["rela"] / "stats.json")
    check_header(report, "stats", "plugin", 48)
    assert set(report) == HEADER_KEYS | {"top_p", "temperatures", "js_mode", "attention", "ffn"}
    assert report["model"]["arch"] == "rela_transformer_wmt_en_de"
    assert sorted(report["attention"]) == ["cross", "decoder_self", "encoder_self"]
    header, rows = read_tsv(stats_dirs["rela"] / "stats.tsv")
    assert header == ["kind", "layer", "head", "statistic", "value"]
    tsv = {(r["kind"], r["layer"], r["head"], r["statistic"]): r["value"] for r in rows}
    for kind, layers in report["attention"].items():
        assert [e["layer"] for e in layers] == list(range(LAYERS))
        for e in layers:
            assert set(e) == LAYER_KEYS and e["heads"] == HEADS
            assert (e["activation"], e["output_norm"]) == ("relu", "gated_rmsnorm")
            assert set(e["per_head"]) == {"sparsity", "null_rate", "entropy", "top_p"}
            assert all(
                len(v) == HEADS
                for v in (e["per_head"]["sparsity"], e["per_head"]["null_rate"], e["per_head"]["entropy"])
            )
            assert e["sparsity"] == pytest.approx(sum(e["per_head"]["sparsity"]) / HEADS)
            assert is_rate(e["sparsity"]) and is_rate(e["null_rate"])
            assert sorted(e["top_p"]) == ["0.01", "0.05", "0.1"]
            assert e["top_p"]["0.01"] <= e["top_p"]["0.05"] <= e["top_p"]["0.1"] <= 1
            assert e["js_renormalization"] == "power" and sorted(e["js_temperatures"]) == ["0.1", "0.25", "0.5", "1"]
            assert e["js"] == e["js_temperatures"]["1"]
            # JS of distributions over H heads is in [0, log H]
            assert all(0 <= v <= math.log(HEADS) + 1e-9 for v in e["js_temperatures"].values())
            assert e["undefined"] is None
            assert float(tsv[(kind, str(e["layer"]), "all", "null_rate")]) == pytest.approx(e["null_rate"], rel=1e-5)
            assert float(tsv[(kind, str(e["layer"]), "3", "entropy")]) == pytest.approx(
                e["per_head"]["entropy"][3], rel=1e-5
            )
    # ReLU attention zeroes the negative scores: some sparsity somewhere
    assert max(e["sparsity"] for layers in report["attention"].values() for e in layers) > 0
    ffn = report["ffn"]
    assert [(e["side"], e["layer"]) for e in ffn] == [("encoder", 0), ("encoder", 1), ("decoder", 0), ("decoder", 1)]
    for e in ffn:
        assert set(e) == FFN_KEYS and e["ffn_type"] == "standard"
        assert -1 <= e["anisotropy_keys"] <= 1 and e["variance_ratio"] > 0
        assert float(tsv[(f"{e['side']}_ffn", str(e["layer"]), "-", "variance_ratio")]) == pytest.approx(
            e["variance_ratio"], rel=1e-5
        )
    assert is_png(stats_dirs["rela"] / "stats.png")


def test_stock_transformer_checkpoint(stats_dirs, models, data):
    report = load(stats_dirs["stock"] / "stats.json")
    check_header(report, "stats", "stock-transformer", 24)
    assert report["model"]["arch"] == "transformer"
    for layers in report["attention"].values():
        for e in layers:
            assert (e["activation"], e["output_norm"]) == ("softmax", "none")
            assert e["sparsity"] == 0 and e["null_rate"] == 0  # softmax weights are never 0
            assert e["js_renormalization"] == "none" and e["js_temperatures"] is None
            assert 0 <= e["js"] <= math.log(HEADS)
    # the model fsa-analyze analysed computes what fairseq's own loader gives
    from fairseq import checkpoint_utils
    from fairseq.models.transformer import TransformerModel

    from fairseq_sparse_attn.analysis.loading import examples_from_split, iterate_batches, load_checkpoint

    ours = load_checkpoint(str(models["stock"]), str(data / "data-bin"))
    [theirs], _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(models["stock"])], arg_overrides={"data": str(data / "data-bin")}
    )
    assert type(theirs) is TransformerModel and type(ours.model) is not TransformerModel
    theirs.eval()
    for layer in theirs.encoder.layers:
        # fairseq 0.12.2's eval fast path fails under torch 2.13 ("Mask Type should be
        # defined"): its regular path is the reference (fairseq-fixed has no fast path)
        if hasattr(layer, "can_use_fastpath"):
            layer.can_use_fastpath = False
    examples = examples_from_split(ours.task, "test", 8)
    sample = next(iterate_batches(examples, task.source_dictionary.pad(), task.source_dictionary.eos()))
    with torch.no_grad():
        torch.testing.assert_close(ours.model(**sample["net_input"])[0], theirs(**sample["net_input"])[0])


# ------------------------------------------------------------------------- norms


def test_norms(data, models, tmp_path, capsys):
    out = tmp_path / "norms"
    assert analyze("norms", *common(data, models["rela"], out, "--max-sentences", "16")) == 2
    err = capsys.readouterr().err
    assert "fsa-analyze norms: error:" in err and "gated_rmsnorm" in err and "--allow-output-norm" in err
    assert analyze("norms", *common(data, models["rela"], out, "--max-sentences", "16", "--allow-output-norm")) == 0
    report = load(out / "norms.json")
    check_header(report, "norms", "plugin", 16)
    assert set(report) == HEADER_KEYS | {
        "kinds",
        "spearman_unit",
        "allow_output_norm",
        "exact_decomposition",
        "layers",
        "spearman",
    }
    assert report["exact_decomposition"] is False and report["allow_output_norm"] is True
    for kind in ("encoder_self", "decoder_self", "cross"):
        assert set(report["spearman"][kind]) <= {"eos", "punctuation", "other"}
        assert {"eos", "other"} <= set(report["spearman"][kind])
        for c in report["spearman"][kind].values():
            assert set(c) == {"rho", "count", "mean_alpha", "mean_f_norm"} and c["count"] > 0
            assert c["rho"] is None or -1 <= c["rho"] <= 1
        for e in report["layers"][kind]:
            assert set(e) == {"layer", "heads", "f_norm", "alpha", "alpha_f_norm", "layer_norm", "spearman"}
            assert len(e["f_norm"]) == len(e["alpha_f_norm"]) == HEADS
            # triangle inequality, pair by pair: ‖Σ_h α_h f_h‖ <= Σ_h ‖α_h f_h‖
            assert e["layer_norm"] <= sum(e["alpha_f_norm"]) * (1 + 1e-6)
        # per-layer counts add up to the kind's pooled counts
        for label, c in report["spearman"][kind].items():
            assert c["count"] == sum(e["spearman"][label]["count"] for e in report["layers"][kind])
    header, rows = read_tsv(out / "norms_spearman.tsv")
    assert header == ["kind", "layer", "category", "rho", "count", "mean_alpha", "mean_f_norm"]
    assert len(rows) == sum(len(v) for v in report["spearman"].values()) + sum(
        len(e["spearman"]) for layers in report["layers"].values() for e in layers
    )
    assert read_tsv(out / "norms.tsv")[0] == ["kind", "layer", "head", "statistic", "value"]
    assert is_png(out / "norms.png")
    # the stock softmax model decomposes exactly: no flag needed
    assert (
        analyze("norms", *common(data, models["stock"], tmp_path / "stock", "--max-sentences", "8", "--kinds", "cross"))
        == 0
    )
    stock = load(tmp_path / "stock" / "norms.json")
    assert stock["exact_decomposition"] is True and list(stock["layers"]) == ["cross"]


# ------------------------------------------------------------------------- align


def parse_talp(line, zero=False, reverse=False):
    sure, possible = set(), set()
    for token in line.split():
        sep = "-" if "-" in token else "p"
        a, b = (int(x) for x in token.split(sep))
        link = (b, a) if reverse else (a, b)
        if not zero:
            link = (link[0] - 1, link[1] - 1)
        (sure if sep == "-" else possible).add(link)
    return sure, possible | sure


def plain_aer(predicted_lines, gold_lines, **kw):
    a_s = a_p = n_a = n_s = 0
    for pred, gold in zip(predicted_lines, gold_lines):
        _, links = parse_talp(pred, **kw)
        sure, possible = parse_talp(gold, **kw)
        a_s += len(links & sure)
        a_p += len(links & possible)
        n_a += len(links)
        n_s += len(sure)
    return 1 - (a_s + a_p) / (n_a + n_s), n_a


def align_args(data, checkpoint, six, out, gold, *extra):
    return [
        "align",
        *common(
            data,
            checkpoint,
            out,
            "--raw-source",
            six / "six.de",
            "--raw-target",
            six / "six.en",
            "--tokenizer",
            "moses",
            "--bpe-codes",
            data / "bpe" / "codes",
            "--gold",
            gold,
            *extra,
        ),
    ]


def test_align_with_gold_and_bad_gold_files(data, models, six, tmp_path, capsys):
    out = tmp_path / "align"
    assert (
        analyze(
            *align_args(
                data, models["rela"], six, out, six / "gold.talp", "--method", "weights", "norms", "--allow-output-norm"
            )
        )
        == 0
    )
    report = load(out / "align.json")
    check_header(report, "align", "plugin", 6, RAW_DATA_KEYS)
    assert set(report) == HEADER_KEYS | {"gold", "zero_indexed", "reverse_links", "subword_scheme", "results"}
    assert [(r["method"], r["setting"]) for r in report["results"]] == [
        ("weights", "awo"),
        ("weights", "awi"),
        ("norms", "awo"),
        ("norms", "awi"),
    ]
    gold_lines = GOLD.splitlines()
    tsv_rows = read_tsv(out / "align.tsv")[1]
    assert len(tsv_rows) == 4 * LAYERS * (HEADS + 1)
    for result in report["results"]:
        assert set(result) == {
            "method",
            "setting",
            "rows",
            "best",
            "best_layer",
            "best_head_per_layer",
            "layer_mean_aer",
            "best_head_mean_aer",
        }
        rows = result["rows"]
        assert [(r["layer"], r["head"]) for r in rows] == [
            (layer, head) for layer in range(LAYERS) for head in [None] + list(range(HEADS))
        ]
        for r in rows:
            assert set(r) == {
                "layer",
                "head",
                "file",
                "links",
                "aer",
                "precision",
                "recall",
                "predicted",
                "sure",
                "predicted_sure",
                "predicted_possible",
            }
            predicted = (out / r["file"]).read_text().splitlines()
            assert len(predicted) == 6
            aer, n_links = plain_aer(predicted, gold_lines)
            assert r["aer"] == pytest.approx(aer) and r["predicted"] == r["links"] == n_links
            assert r["sure"] == 45  # sure links in GOLD
        layer_rows = [r for r in rows if r["head"] is None]
        assert result["best"]["aer"] == min(r["aer"] for r in rows)
        assert result["best_layer"]["aer"] == min(r["aer"] for r in layer_rows)
        assert result["layer_mean_aer"] == pytest.approx(sum(r["aer"] for r in layer_rows) / LAYERS)
        best_heads = result["best_head_per_layer"]
        assert [b["layer"] for b in best_heads] == list(range(LAYERS))
        for b in best_heads:
            assert b["aer"] == min(r["aer"] for r in rows if r["layer"] == b["layer"] and r["head"] is not None)
        assert result["best_head_mean_aer"] == pytest.approx(sum(b["aer"] for b in best_heads) / LAYERS)
    assert is_png(out / "align.png")

    # the same gold, 0-indexed and target-source: same scores, links written that way
    def flip(line):
        out = []
        for token in line.split():
            kind = "-" if "-" in token else "p"
            source, target = token.split(kind)
            out.append(f"{int(target) - 1}{kind}{int(source) - 1}")
        return " ".join(out)

    flipped = six / "gold.0.rev.talp"
    flipped.write_text("".join(flip(line) + "\n" for line in gold_lines))
    out2 = tmp_path / "align0"
    assert (
        analyze(
            *align_args(
                data, models["rela"], six, out2, flipped, "--zero-indexed", "--reverse-links", "--setting", "awi"
            )
        )
        == 0
    )
    again = load(out2 / "align.json")["results"][0]
    first = report["results"][1]  # weights, awi
    assert [r["aer"] for r in again["rows"]] == pytest.approx([r["aer"] for r in first["rows"]])
    predicted = (out2 / again["rows"][0]["file"]).read_text().splitlines()
    assert plain_aer(predicted, flipped.read_text().splitlines(), zero=True, reverse=True)[0] == pytest.approx(
        again["rows"][0]["aer"]
    )

    # bad gold files: wrong number of lines, index out of range
    short = six / "short.talp"
    short.write_text("".join(line + "\n" for line in gold_lines[:5]))
    capsys.readouterr()
    assert analyze(*align_args(data, models["rela"], six, tmp_path / "bad", short)) == 2
    err = capsys.readouterr().err
    assert f"{short}: 5 lines, expected 6" in err and "six.de" in err
    wide = six / "wide.talp"
    wide.write_text("".join(line + ("" if i != 3 else " 8-3") + "\n" for i, line in enumerate(gold_lines)))
    assert analyze(*align_args(data, models["rela"], six, tmp_path / "bad", wide)) == 2
    err = capsys.readouterr().err
    assert f"{wide}:4: source index 8 in link '8-3' is out of range for a source sentence of 7 words" in err
    assert (
        analyze(*align_args(data, models["rela"], six, tmp_path / "bad", six / "gold.talp", "--method", "norms")) == 2
    )
    assert "--allow-output-norm" in capsys.readouterr().err


def test_align_on_binarized_data_leaves_out_sentences_with_unknown_pieces(data, models, tmp_path, capsys):
    """A piece missing from the dictionary is <unk> in the data-bin split and has lost its
    "@@": such sentences are found (checked here against BPE applied to the tokenized text
    with subword-nmt and the dictionary files read directly), reported, and left out of the
    AER by default; the raw text + BPE codes path keeps every piece's text."""
    from subword_nmt.apply_bpe import BPE

    tok = {lang: (data / "tok" / f"test.{lang}").read_text(encoding="utf-8").splitlines() for lang in ("de", "en")}
    with open(data / "bpe" / "codes", encoding="utf-8") as f:
        bpe = BPE(f)
    known = {
        lang: {
            line.split()[0]
            for line in (data / "data-bin" / f"dict.{lang}.txt").read_text(encoding="utf-8").splitlines()
        }
        for lang in ("de", "en")
    }
    affected = [
        i
        for i, (s, t) in enumerate(zip(tok["de"], tok["en"]))
        if any(p not in known["de"] for p in bpe.process_line(s).split())
        or any(p not in known["en"] for p in bpe.process_line(t).split())
    ]
    assert affected, "the test split of the slice has no unknown piece"
    gold = tmp_path / "gold.talp"  # rule-made: i-i sure for every position both sides have
    gold.write_text(
        "".join(
            " ".join(f"{i}-{i}" for i in range(1, min(len(s.split()), len(t.split())) + 1)) + "\n"
            for s, t in zip(tok["de"], tok["en"])
        )
    )
    out = tmp_path / "bin"
    capsys.readouterr()
    assert analyze("align", *common(data, models["rela"], out, "--gold", gold, "--setting", "awi", "--no-plots")) == 0
    printed = capsys.readouterr().out.splitlines()
    assert f"wrote {out / 'align.json'}" in printed and f"wrote {out / 'align.tsv'}" in printed
    assert any(line.startswith(f"wrote {out / 'alignments'} (") for line in printed)
    report = load(out / "align.json")
    check_header(report, "align", "plugin", len(tok["de"]))
    assert report["unknown_pieces"] == {
        "sentences": len(affected),
        "indices": affected,
        "policy": "exclude",
        "scored_sentences": len(tok["de"]) - len(affected),
    }
    gold_lines = gold.read_text().splitlines()
    scored = [i for i in range(len(gold_lines)) if i not in set(affected)]
    for r in report["results"][0]["rows"]:
        predicted = (out / r["file"]).read_text().splitlines()
        assert len(predicted) == len(gold_lines)  # predictions written for every sentence
        aer, _ = plain_aer([predicted[i] for i in scored], [gold_lines[i] for i in scored])
        assert r["aer"] == pytest.approx(aer)
    kept = tmp_path / "keep"
    assert (
        analyze(
            "align",
            *common(
                data, models["rela"], kept, "--gold", gold, "--setting", "awi", "--no-plots", "--unknown-pieces", "keep"
            ),
        )
        == 0
    )
    again = load(kept / "align.json")
    assert again["unknown_pieces"]["policy"] == "keep" and again["unknown_pieces"]["scored_sentences"] == len(tok["de"])
    row = again["results"][0]["rows"][0]
    assert row["aer"] == pytest.approx(plain_aer((kept / row["file"]).read_text().splitlines(), gold_lines)[0])
    # raw text + codes: no <unk> question, words as the tokenized text has them
    raw = tmp_path / "raw"
    assert (
        analyze(
            "align",
            *common(
                data,
                models["rela"],
                raw,
                "--raw-source",
                data / "tok" / "test.de",
                "--raw-target",
                data / "tok" / "test.en",
                "--bpe-codes",
                data / "bpe" / "codes",
                "--gold",
                gold,
                "--setting",
                "awi",
                "--no-plots",
                "--max-sentences",
                "200",
            ),
        )
        == 0
    )
    assert "unknown_pieces" not in load(raw / "align.json")
    for line, s, t in zip(
        (raw / report["results"][0]["rows"][0]["file"]).read_text().splitlines(), tok["de"], tok["en"]
    ):
        for link in line.split():
            a, b = (int(x) for x in link.split("-"))
            assert a <= len(s.split()) and b <= len(t.split())


# ----------------------------------------------------------------- null attention


def test_hallucination(data, models, tmp_path):
    out = tmp_path / "hall"
    assert analyze("hallucination", *common(data, models["rela"], out, "--max-sentences", "32", "--seed", "3")) == 0
    report = load(out / "hallucination.json")
    check_header(report, "hallucination", "plugin", 32)
    assert set(report) == HEADER_KEYS | {"seed", "permutation", "layers", "mean"}
    perm = report["permutation"]
    assert sorted(perm) == list(range(32)) and all(perm[i] != i for i in range(32))
    assert [e["layer"] for e in report["layers"]] == list(range(LAYERS))
    for e in report["layers"]:
        assert set(e) == {"layer", "null_rate_real", "null_rate_shuffled", "difference", "per_head"}
        assert is_rate(e["null_rate_real"]) and is_rate(e["null_rate_shuffled"])
        assert e["difference"] == pytest.approx(e["null_rate_shuffled"] - e["null_rate_real"])
        assert e["null_rate_real"] == pytest.approx(sum(e["per_head"]["real"]) / HEADS)
    header, rows = read_tsv(out / "hallucination.tsv")
    assert header == ["layer", "head", "null_rate_real", "null_rate_shuffled"] and len(rows) == LAYERS * (HEADS + 1)
    assert is_png(out / "hallucination.png")


def test_filter_ranking_and_top_bottom_files(data, models, tmp_path):
    out = tmp_path / "filter"
    assert analyze("filter", *common(data, models["rela"], out, "--max-sentences", "20", "--k", "3")) == 0
    report = load(out / "filter.json")
    check_header(report, "filter", "plugin", 20)
    assert set(report) == HEADER_KEYS | {"order", "score", "k", "files", "ranking"}
    ranking = report["ranking"]
    assert sorted(r["index"] for r in ranking) == list(range(20))
    scores = [r["null_rate"] for r in ranking]
    assert scores == sorted(scores, reverse=True) and all(is_rate(s) for s in scores)
    assert [r["rank"] for r in ranking] == list(range(1, 21))
    header, rows = read_tsv(out / "filter.tsv")
    assert header == ["rank", "index", "null_rate", "source", "target"]
    assert [int(r["index"]) for r in rows] == [r["index"] for r in ranking]
    assert report["files"] == {
        "top.source": "top.de",
        "top.target": "top.en",
        "bottom.source": "bottom.de",
        "bottom.target": "bottom.en",
    }
    top = (out / "top.de").read_text().splitlines()
    bottom = (out / "bottom.en").read_text().splitlines()
    assert top == [r["source"] for r in rows[:3]] and bottom == [r["target"] for r in rows[-3:]]
    raw = (data / "tok" / "test.de").read_text().splitlines()  # BPE removed = the tokenized text
    assert top[0] == raw[ranking[0]["index"]]


# --------------------------------------------------------------------- heatmaps


def test_heatmap(data, models, tmp_path, capsys):
    out = tmp_path / "heat"
    assert (
        analyze("heatmap", *common(data, models["rela"], out, "--sentence", "4", "--layer", "1", "--allow-output-norm"))
        == 0
    )
    report = load(out / "heatmap.json")
    check_header(report, "heatmap", "plugin", 1)
    assert set(report) == HEADER_KEYS | {
        "sentence",
        "kind",
        "layer",
        "query_tokens",
        "key_tokens",
        "weights",
        "norms",
        "layer_weights",
        "layer_norms",
        "image",
    }
    tgt = (data / "bpe" / "test.en").read_text().splitlines()[4].split()
    src = (data / "bpe" / "test.de").read_text().splitlines()[4].split()
    assert report["query_tokens"] == ["</s>"] + tgt and report["key_tokens"] == src + ["</s>"]
    w = torch.tensor(report["weights"])
    assert w.shape == (HEADS, len(tgt) + 1, len(src) + 1) and torch.tensor(report["norms"]).shape == w.shape
    torch.testing.assert_close(torch.tensor(report["layer_weights"]), w.mean(0))
    assert is_png(out / "heatmap.png")
    capsys.readouterr()
    assert analyze("heatmap", *common(data, models["rela"], out, "--sentence", "1000", "--allow-output-norm")) == 2
    assert "--sentence 1000 is out of range" in capsys.readouterr().err
    assert analyze("heatmap", *common(data, models["stock"], out, "--layer", "2")) == 2
    assert "--layer 2 is out of range" in capsys.readouterr().err


# ------------------------------------------------------------------------ curves


def test_curves_compare_checkpoints(stats_dirs, data, models, six, tmp_path):
    align_out = tmp_path / "align"
    assert (
        analyze(
            *align_args(data, models["rela"], six, align_out, six / "gold.talp", "--no-plots", "--no-write-alignments")
        )
        == 0
    )
    out = tmp_path / "curves"
    assert (
        analyze(
            "curves",
            f"softmax={stats_dirs['stock']}",
            f"rela={stats_dirs['rela']}",
            f"rela={align_out / 'align.json'}",
            "--output-dir",
            out,
        )
        == 0
    )
    report = load(out / "curves.json")
    assert set(report) == {
        "command",
        "schema_version",
        "kind",
        "tau",
        "align_method",
        "align_setting",
        "inputs",
        "series",
        "image",
        "provenance",
    }
    from fairseq_sparse_attn.provenance import check_provenance

    assert "curves" in check_provenance(report)["command"]
    assert list(report["series"]) == ["sparsity", "null_rate", "entropy", "js", "aer"]
    assert sorted(report["series"]["sparsity"]) == ["rela", "softmax"]
    assert list(report["series"]["aer"]) == ["rela"]
    stats = load(stats_dirs["rela"] / "stats.json")
    assert [p["value"] for p in report["series"]["null_rate"]["rela"]] == [
        e["null_rate"] for e in stats["attention"]["cross"]
    ]
    aer = [r["aer"] for r in load(align_out / "align.json")["results"][1]["rows"] if r["head"] is None]
    assert [p["value"] for p in report["series"]["aer"]["rela"]] == aer  # weights, awi
    assert is_png(out / "curves.png")
    # one label of two checkpoints' results (the stock model's stats, ReLA's alignments)
    # drew one curve of both with nothing said
    mixed = analyze(
        "curves", f"x={stats_dirs['stock']}", f"x={align_out / 'align.json'}", "--output-dir", tmp_path / "m"
    )
    assert mixed == 2 and not (tmp_path / "m").exists()


# --------------------------------------------------------------- bad checkpoints


def test_unknown_architecture_checkpoint(models, data, tmp_path, capsys):
    state = torch.load(str(models["stock"]), weights_only=False)
    state["cfg"]["model"].arch = state["cfg"]["model"]._name = "lstm"
    torch.save(state, str(tmp_path / "lstm.pt"))
    assert analyze("stats", *common(data, tmp_path / "lstm.pt", tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert "fsa-analyze stats: error:" in err and "lstm.pt: architecture 'lstm' is not supported" in err
    assert "rela_transformer_wmt_en_de" in err and "transformer_iwslt_de_en" in err
    assert analyze("stats", *common(data, tmp_path / "missing.pt", tmp_path / "out")) == 2
    assert "checkpoint not found" in capsys.readouterr().err
