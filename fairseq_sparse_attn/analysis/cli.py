"""``fsa-analyze``: attention analyses of a trained checkpoint from the command line.

    fsa-analyze stats         DATA --path CKPT --output-dir OUT   sparsity, null rate, entropy,
                                                                   top-p%, head JS, FFN statistics
    fsa-analyze norms         DATA --path CKPT --output-dir OUT   ‖f(x)‖, ‖αf(x)‖, ‖Σ_h αf‖,
                                                                   Spearman ρ(α, ‖f(x)‖) per category
    fsa-analyze align         DATA --path CKPT --output-dir OUT [--gold F]
                                                                   word alignments (AWO/AWI, weights
                                                                   or norms), AER, best layer/head
    fsa-analyze hallucination DATA --path CKPT --output-dir OUT   cross null rate, real vs shuffled targets
    fsa-analyze filter        DATA --path CKPT --output-dir OUT   pairs ranked by cross null rate
    fsa-analyze heatmap       DATA --path CKPT --output-dir OUT --sentence I --layer L
    fsa-analyze curves        [LABEL=]RESULT ... --output-dir OUT per-layer curves of several checkpoints

``DATA`` is a fairseq-preprocess directory: its dictionaries, and the ``--split`` to
analyse (default ``test``) unless ``--raw-source``/``--raw-target`` give raw text
(tokenized with ``--tokenizer moses`` and segmented with ``--bpe-codes``).  Every pass
is teacher-forced (the reference target is the decoder input), batched (``--batch-size``,
``--max-tokens``), on ``--device``; ``--max-sentences N`` analyses the first N pairs.
Results: JSON (schema in docs/analysis.md, "fsa-analyze"), TSV and PNG in
``--output-dir``.
"""

import argparse
import json
import math
import logging
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

SCHEMA_VERSION = 1
SUBCOMMANDS = ("stats", "norms", "align", "hallucination", "filter", "heatmap", "curves")
KINDS = ("encoder_self", "decoder_self", "cross")


class UsageError(ValueError):
    """Bad command-line input (reported as ``fsa-analyze <cmd>: error: ...``, exit 2)."""


# ------------------------------------------------------------------------- helpers


def _float_list(text: str) -> List[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one number, got {text!r}")
    return values


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _clean(value):
    """JSON-safe: nan/inf -> None, tuples -> lists, keys -> str."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_json(data: Dict, path: Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(_clean(data), f, indent=2, ensure_ascii=False, allow_nan=False)
        f.write("\n")
    logging.getLogger("fairseq_sparse_attn.analysis").info(f"wrote {path}")  # issue 14


def _cell(value) -> str:
    if value is None:
        return "nan"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else format(value, ".6g")
    return str(value).replace("\t", " ").replace("\n", " ")


def write_tsv(path: Path, header: Sequence[str], rows: Sequence[Sequence]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("\t".join(header) + "\n")
        for row in rows:
            f.write("\t".join(_cell(v) for v in row) + "\n")
    logging.getLogger("fairseq_sparse_attn.analysis").info(f"wrote {path}")  # issue 14


def _post_process(pieces: Sequence[str], scheme: str) -> str:
    from fairseq.data.data_utils import post_process

    text = " ".join(pieces)
    symbol = {"subword-nmt": "subword_nmt", "sentencepiece": "sentencepiece"}.get(scheme)
    return post_process(text, symbol) if symbol else text


def _overrides(text: Optional[str]) -> Dict:
    from .contrastive import parse_overrides

    return parse_overrides(text)


def _device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available")
    return torch.device(name)


# --------------------------------------------------------------------- model + data


class Context:
    """The loaded checkpoint, the examples and where the results go."""

    def __init__(self, args, limit: Optional[int] = None):
        from .loading import (check_lengths, examples_from_raw, examples_from_split,
                              load_checkpoint, read_text_lines, split_size)

        self.args = args
        if (args.raw_source is None) != (args.raw_target is None):
            raise UsageError("--raw-source and --raw-target go together (line-aligned raw text)")
        if args.raw_source is None and (args.tokenizer != "none" or args.bpe_codes is not None):
            raise UsageError("--tokenizer / --bpe-codes apply to raw text "
                             "(--raw-source/--raw-target); a data-bin split is already encoded")
        self.device = _device(args.device)
        self.loaded = load_checkpoint(args.path, args.data, args.source_lang, args.target_lang,
                                      _overrides(args.model_overrides), self.device)
        task = self.loaded.task
        limit = args.max_sentences if limit is None else limit
        if args.raw_source is not None:
            self.examples = examples_from_raw(task, args.raw_source, args.raw_target,
                                              args.tokenizer, args.bpe_codes, limit,
                                              args.source_lang, args.target_lang)
            self.total = len(read_text_lines(args.raw_source))
            self.where = f"{args.raw_source} / {args.raw_target}"
            self.data = {"data_bin": os.path.abspath(args.data),
                         "raw_source": os.path.abspath(args.raw_source),
                         "raw_target": os.path.abspath(args.raw_target),
                         "tokenizer": args.tokenizer,
                         "bpe_codes": None if args.bpe_codes is None else os.path.abspath(args.bpe_codes)}
        else:
            self.examples = examples_from_split(task, args.split, limit)
            self.total = split_size(task, args.split)
            self.where = f"{args.data} split {args.split!r}"
            self.data = {"data_bin": os.path.abspath(args.data), "split": args.split}
        if not self.examples:
            raise UsageError(f"{self.where}: no sentence pairs to analyse")
        check_lengths(self.examples, self.loaded.model, self.where)
        self.out = Path(args.output_dir)
        self.out.mkdir(parents=True, exist_ok=True)

    @property
    def model(self):
        return self.loaded.model

    def header(self, command: str) -> Dict:
        return {"command": command, "schema_version": SCHEMA_VERSION,
                "model": self.loaded.describe(),
                "data": {**self.data, "sentences": len(self.examples),
                         "sentences_in_data": self.total}}

    def run(self, collectors, examples=None, ffn=None, description=None) -> int:
        from .collect import run_passes

        src, tgt = self.loaded.source_dictionary, self.loaded.target_dictionary
        return run_passes(self.model, self.examples if examples is None else examples, collectors,
                          src.pad(), tgt.pad(), tgt.eos(), self.args.batch_size,
                          self.args.max_tokens, self.device, not self.args.no_progress, ffn,
                          description or self.args.command)


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("data", metavar="DATA",
                   help="fairseq-preprocess directory (dictionaries; the split unless raw text is given)")
    p.add_argument("--path", required=True, metavar="CHECKPOINT",
                   help="checkpoint trained with the plugin, or a stock fairseq transformer")
    p.add_argument("--output-dir", required=True, metavar="DIR", help="where results are written")
    p.add_argument("--split", default="test", help="split of DATA to analyse (default: test)")
    p.add_argument("--raw-source", metavar="FILE", help="raw source text, one sentence per line "
                   "(instead of --split; with --raw-target)")
    p.add_argument("--raw-target", metavar="FILE", help="raw target text, line-aligned with --raw-source")
    p.add_argument("--tokenizer", choices=("moses", "none"), default="none",
                   help="raw text: tokenize before BPE (default none: already tokenized)")
    p.add_argument("--bpe-codes", metavar="FILE", help="raw text: subword-nmt codes (default: already segmented)")
    p.add_argument("-s", "--source-lang", default=None)
    p.add_argument("-t", "--target-lang", default=None)
    p.add_argument("--subword-scheme", choices=("subword-nmt", "sentencepiece", "word"),
                   default="subword-nmt",
                   help="how pieces form words ('@@' continuation, '▁' word start, or none); "
                        "alignments and the text of filter's output (default subword-nmt)")
    p.add_argument("--batch-size", type=_positive_int, default=32, help="max pairs per batch (default 32)")
    p.add_argument("--max-tokens", type=_positive_int, default=None, help="max padded tokens per batch")
    p.add_argument("--max-sentences", type=_positive_int, default=None, metavar="N",
                   help="analyse only the first N sentence pairs (a quick look)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="default: cuda when available, else cpu")
    p.add_argument("--model-overrides", default=None, metavar="DICT",
                   help="Python dict literal of model arguments to override, as fairseq-generate's")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


# --------------------------------------------------------------------------- stats


def cmd_stats(args) -> Dict:
    from .collect import AttentionStatistics, FFNStatistics
    from .plots import layer_curves

    ctx = Context(args)
    stats = AttentionStatistics(ctx.model, args.top_p, args.temperatures, args.js_mode)
    ffn = None if args.no_ffn else FFNStatistics(ctx.model, args.top_p)
    ctx.run([stats], ffn=ffn)
    attention = stats.layers()
    report = {**ctx.header("stats"), "top_p": args.top_p, "temperatures": args.temperatures,
              "js_mode": args.js_mode, "attention": attention,
              "ffn": None if ffn is None else ffn.results()}
    write_json(report, ctx.out / "stats.json")
    rows = []
    for kind, layers in attention.items():
        for e in layers:
            scalar = {"sparsity": e["sparsity"], "null_rate": e["null_rate"], "entropy": e["entropy"],
                      "js": e["js"], **{f"top_p@{p}": v for p, v in e["top_p"].items()},
                      **{f"js@tau={t}": v for t, v in (e["js_temperatures"] or {}).items()}}
            rows += [(kind, e["layer"], "all", name, value) for name, value in scalar.items()]
            ph = e["per_head"]
            for h in range(e["heads"]):
                per = {"sparsity": ph["sparsity"][h], "null_rate": ph["null_rate"][h],
                       "entropy": None if ph["entropy"] is None else ph["entropy"][h],
                       **{f"top_p@{p}": (None if v is None else v[h]) for p, v in ph["top_p"].items()}}
                rows += [(kind, e["layer"], h, name, value) for name, value in per.items()]
    for e in report["ffn"] or []:
        for name in ("anisotropy_keys", "anisotropy_values", "variance_ratio"):
            rows.append((f"{e['side']}_ffn", e["layer"], "-", name, e[name]))
        rows += [(f"{e['side']}_ffn", e["layer"], "-", f"top_p_mass@{p}", v)
                 for p, v in e["top_p_mass"].items()]
    write_tsv(ctx.out / "stats.tsv", ("kind", "layer", "head", "statistic", "value"), rows)
    if not args.no_plots:
        series = {name: {kind: [(e["layer"], e[name]) for e in layers]
                         for kind, layers in attention.items()}
                  for name in ("sparsity", "null_rate", "entropy", "js")}
        layer_curves(series, ctx.out / "stats.png", title=os.path.basename(args.path))
    return report


# --------------------------------------------------------------------------- norms


def cmd_norms(args) -> Dict:
    from .collect import NormSummary
    from .norms import dictionary_categorizer
    from .plots import layer_curves

    ctx = Context(args)
    _require_decomposable(ctx.model, args.kinds, args.allow_output_norm, args.path)
    src = dictionary_categorizer(ctx.loaded.source_dictionary)
    tgt = dictionary_categorizer(ctx.loaded.target_dictionary)
    summary = NormSummary(ctx.model, {"encoder_self": src, "cross": src, "decoder_self": tgt},
                          args.kinds, args.allow_output_norm, args.spearman_unit)
    ctx.run([summary])
    res = summary.results()
    report = {**ctx.header("norms"), "kinds": list(args.kinds), "spearman_unit": args.spearman_unit,
              "allow_output_norm": args.allow_output_norm,
              "exact_decomposition": _decomposable(ctx.model, args.kinds),
              "layers": res["layers"], "spearman": res["spearman"]}
    write_json(report, ctx.out / "norms.json")
    rows = []
    for kind, layers in res["layers"].items():
        for e in layers:
            for h in range(e["heads"]):
                rows += [(kind, e["layer"], h, name, e[name][h]) for name in ("f_norm", "alpha", "alpha_f_norm")]
            rows.append((kind, e["layer"], "all", "layer_norm", e["layer_norm"]))
    write_tsv(ctx.out / "norms.tsv", ("kind", "layer", "head", "statistic", "value"), rows)
    rows = []
    for kind, layers in res["layers"].items():
        for label, c in res["spearman"].get(kind, {}).items():
            rows.append((kind, "all", label, c["rho"], c["count"], c["mean_alpha"], c["mean_f_norm"]))
        for e in layers:
            for label, c in e["spearman"].items():
                rows.append((kind, e["layer"], label, c["rho"], c["count"], c["mean_alpha"], c["mean_f_norm"]))
    write_tsv(ctx.out / "norms_spearman.tsv",
              ("kind", "layer", "category", "rho", "count", "mean_alpha", "mean_f_norm"), rows)
    if not args.no_plots:
        def head_mean(values):
            return sum(values) / len(values)

        series = {name: {kind: [(e["layer"], head_mean(e[name])) for e in layers]
                         for kind, layers in res["layers"].items()}
                  for name in ("alpha", "f_norm", "alpha_f_norm")}
        series["layer_norm"] = {kind: [(e["layer"], e["layer_norm"]) for e in layers]
                                for kind, layers in res["layers"].items()}
        layer_curves(series, ctx.out / "norms.png", title=os.path.basename(args.path),
                     ylabels={"alpha": "mean α", "f_norm": "mean ‖f(x)‖",
                              "alpha_f_norm": "mean ‖αf(x)‖", "layer_norm": "mean ‖Σ αf(x)‖"})
    return report


def _decomposable(model, kinds) -> bool:
    return all(m.output_norm_name == "none" for m in model.attention_modules() if m.kind in kinds)


def _require_decomposable(model, kinds, allow: bool, path: str) -> None:
    """The norm-based analysis is exact only without an output norm (docs/analysis.md)."""
    if allow:
        return
    norms = sorted({(m.kind, m.output_norm_name) for m in model.attention_modules()
                    if m.kind in kinds and m.output_norm_name != "none"})
    if norms:
        what = ", ".join(f"{kind}: {norm}" for kind, norm in norms)
        raise UsageError(
            f"{path}: the attention applies an output norm to the concatenated heads ({what}), "
            f"so its output is not the sum Σ_h α_h f_h(x) of Kobayashi et al. and the norms "
            f"would not be those of its summands; pass --allow-output-norm to get the norms "
            f"of the pre-norm vectors anyway")


# --------------------------------------------------------------------------- align


def _words(pieces: Sequence[str], scheme: str) -> int:
    from .alignment import word_index

    groups = word_index(pieces, scheme)
    return (groups[-1] + 1) if groups else 0


def read_gold(path: str, examples, total: int, where: str, scheme: str, zero_indexed: bool,
              reverse: bool):
    """Gold links of ``examples`` (the first sentences of the data) from a talp file that
    must have one line per sentence of the data (``total``); every line is parsed, and the
    lines of the analysed sentences are range-checked against their word counts."""
    from .alignment import parse_alignment_line

    if not os.path.isfile(path):
        raise FileNotFoundError(f"gold alignment file not found: {path}")
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    if len(lines) != total:
        raise UsageError(f"{path}: {len(lines)} lines, expected {total} (one line per sentence "
                         f"pair of {where})")
    gold = []
    for number, line in enumerate(lines, start=1):
        lengths = None
        if number <= len(examples):
            ex = examples[number - 1]
            lengths = (_words(ex.source_pieces, scheme), _words(ex.target_pieces, scheme))
        parsed = parse_alignment_line(line, f"{path}:{number}", not zero_indexed, reverse, lengths)
        if number <= len(examples):
            gold.append(parsed)
    return gold


def cmd_align(args) -> Dict:
    from .alignment import format_alignment, layer_head_report
    from .collect import AlignmentCollector
    from .plots import layer_curves

    ctx = Context(args)
    if "norms" in args.method:
        _require_decomposable(ctx.model, ("cross",), args.allow_output_norm, args.path)
    gold = None
    if args.gold is not None:
        gold = read_gold(args.gold, ctx.examples, ctx.total, ctx.where, args.subword_scheme,
                         args.zero_indexed, args.reverse_links)
    collector = AlignmentCollector(ctx.model, ctx.examples, args.method, args.setting,
                                   args.subword_scheme, args.allow_output_norm)
    ctx.run([collector])
    out_dir = ctx.out / "alignments"
    if not args.no_write_alignments:
        out_dir.mkdir(exist_ok=True)
    results, tsv = [], []
    for method in args.method:
        for setting in args.setting:
            keys = sorted({(layer, head) for (m, s, layer, head) in collector.links
                           if m == method and s == setting}, key=lambda k: (k[0], -1 if k[1] is None else k[1]))
            predictions = {k: [collector.links[(method, setting) + k][ex.index] for ex in ctx.examples]
                           for k in keys}
            report = layer_head_report(predictions, gold) if gold is not None else None
            rows = []
            for layer, head in keys:
                name = f"{method}.{setting}.layer{layer}" + ("" if head is None else f".head{head}") + ".txt"
                if not args.no_write_alignments:
                    with open(out_dir / name, "w", encoding="utf-8") as f:
                        for links in predictions[(layer, head)]:
                            f.write(format_alignment(links, not args.zero_indexed, args.reverse_links) + "\n")
                row = {"layer": layer, "head": head,
                       "file": None if args.no_write_alignments else f"alignments/{name}",
                       "links": sum(len(x) for x in predictions[(layer, head)])}
                if report is not None:
                    c = report.counts[(layer, head)]
                    row.update(aer=c.aer, precision=c.precision, recall=c.recall,
                               predicted=c.predicted, sure=c.sure, predicted_sure=c.predicted_sure,
                               predicted_possible=c.predicted_possible)
                rows.append(row)
                tsv.append((method, setting, layer, "layer" if head is None else head,
                            row.get("aer"), row.get("precision"), row.get("recall"), row["links"],
                            row["file"]))
            entry = {"method": method, "setting": setting, "rows": rows}
            if report is not None:
                best_layer, best_head = report.best
                entry["best"] = {"layer": best_layer, "head": best_head, "aer": report.aer(*report.best)}
                entry["best_layer"] = (None if report.best_layer is None else
                                       {"layer": report.best_layer, "aer": report.aer(report.best_layer)})
                entry["best_head_per_layer"] = [
                    {"layer": layer, "head": head, "aer": report.aer(layer, head)}
                    for layer, head in sorted(report.best_head_per_layer.items())]
                entry["layer_mean_aer"] = report.layer_mean_aer
                entry["best_head_mean_aer"] = report.best_head_mean_aer
            results.append(entry)
    report = {**ctx.header("align"), "gold": None if args.gold is None else os.path.abspath(args.gold),
              "zero_indexed": args.zero_indexed, "reverse_links": args.reverse_links,
              "subword_scheme": args.subword_scheme, "results": results}
    write_json(report, ctx.out / "align.json")
    write_tsv(ctx.out / "align.tsv", ("method", "setting", "layer", "head", "aer", "precision",
                                      "recall", "links", "file"), tsv)
    if gold is not None and not args.no_plots:
        series = {"AER (layer attention)": {}, "AER (best head)": {}}
        for e in results:
            label = f"{e['method']}/{e['setting']}"
            series["AER (layer attention)"][label] = [(r["layer"], r["aer"]) for r in e["rows"] if r["head"] is None]
            series["AER (best head)"][label] = [(b["layer"], b["aer"]) for b in e["best_head_per_layer"]]
        layer_curves(series, ctx.out / "align.png", title=os.path.basename(args.path))
    return report


# ------------------------------------------------------------------- hallucination


def cmd_hallucination(args) -> Dict:
    from .collect import SparsityCollector
    from .loading import shuffle_targets
    from .plots import real_vs_shuffled

    ctx = Context(args)
    shuffled, perm = shuffle_targets(ctx.examples, args.seed)
    real = SparsityCollector(("cross",))
    fake = SparsityCollector(("cross",))
    ctx.run([real], description="real targets")
    ctx.run([fake], examples=shuffled, description="shuffled targets")
    real_heads, fake_heads = real.stats.per_head(), fake.stats.per_head()
    layers, rows = [], []
    for (kind, layer) in sorted(real_heads):
        r, s = real_heads[(kind, layer)]["null_rate"], fake_heads[(kind, layer)]["null_rate"]
        mr, ms = sum(r) / len(r), sum(s) / len(s)
        layers.append({"layer": layer, "null_rate_real": mr, "null_rate_shuffled": ms,
                       "difference": ms - mr, "per_head": {"real": r, "shuffled": s}})
        rows.append((layer, "all", mr, ms))
        rows += [(layer, h, r[h], s[h]) for h in range(len(r))]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    report = {**ctx.header("hallucination"), "seed": args.seed,
              "permutation": perm, "layers": layers,
              "mean": {"null_rate_real": mean([e["null_rate_real"] for e in layers]),
                       "null_rate_shuffled": mean([e["null_rate_shuffled"] for e in layers])}}
    write_json(report, ctx.out / "hallucination.json")
    write_tsv(ctx.out / "hallucination.tsv", ("layer", "head", "null_rate_real", "null_rate_shuffled"), rows)
    if not args.no_plots:
        real_vs_shuffled([e["layer"] for e in layers], [e["null_rate_real"] for e in layers],
                         [e["null_rate_shuffled"] for e in layers], ctx.out / "hallucination.png",
                         title=f"cross-attention null rate: {os.path.basename(args.path)}")
    return report


# --------------------------------------------------------------------------- filter


def cmd_filter(args) -> Dict:
    from .collect import NullRatePerSentence, rank_by_score

    ctx = Context(args)
    collector = NullRatePerSentence()
    ctx.run([collector])
    ranking = rank_by_score(collector.rates(), descending=not args.ascending)
    by_index = {ex.index: ex for ex in ctx.examples}
    text = {i: (_post_process(by_index[i].source_pieces, args.subword_scheme),
                _post_process(by_index[i].target_pieces, args.subword_scheme)) for i, _ in ranking}
    rows = [(rank, i, score, text[i][0], text[i][1]) for rank, (i, score) in enumerate(ranking, start=1)]
    write_tsv(ctx.out / "filter.tsv", ("rank", "index", "null_rate", "source", "target"), rows)
    k = min(args.k, len(ranking))
    src_lang = ctx.loaded.task.cfg.source_lang or "src"
    tgt_lang = ctx.loaded.task.cfg.target_lang or "tgt"
    files = {}
    for name, part in (("top", ranking[:k]), ("bottom", ranking[len(ranking) - k:])):
        for side, lang in ((0, src_lang), (1, tgt_lang)):
            path = ctx.out / f"{name}.{lang}"
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(text[i][side] + "\n" for i, _ in part)
            files[f"{name}.{'source' if side == 0 else 'target'}"] = path.name
    report = {**ctx.header("filter"), "order": "ascending" if args.ascending else "descending",
              "score": "mean cross-attention null rate over layers, heads and target positions",
              "k": k, "files": files,
              "ranking": [{"rank": r, "index": i, "null_rate": s} for r, (i, s) in enumerate(ranking, start=1)]}
    write_json(report, ctx.out / "filter.json")
    return report


# -------------------------------------------------------------------------- heatmap


def cmd_heatmap(args) -> Dict:
    from .collect import NormCollector
    from .plots import attention_heatmaps

    ctx = Context(args, limit=args.sentence + 1)
    if args.sentence >= len(ctx.examples):
        raise UsageError(f"--sentence {args.sentence} is out of range: {ctx.where} has "
                         f"{ctx.total} sentence pairs (0-based indices 0..{ctx.total - 1})")
    ex = ctx.examples[args.sentence]
    layers = sorted({m_layer for (kind, m_layer) in _site_layers(ctx.model) if kind == args.kind})
    if args.layer not in layers:
        raise UsageError(f"--layer {args.layer} is out of range: the model's {args.kind} "
                         f"attention has layers {layers[0]}..{layers[-1]} (0-based)")
    _require_decomposable(ctx.model, (args.kind,), args.allow_output_norm, args.path)
    norms = NormCollector(ctx.model, (args.kind,), args.allow_output_norm)
    ctx.run([norms], examples=[ex])  # one batch: its records stay after the pass
    rec = norms.records[(args.kind, args.layer)][0]
    heads = rec.weights.shape[0]
    prev = ["</s>"] + ex.target_pieces
    source = ex.source_pieces + ["</s>"]
    queries = source if args.kind == "encoder_self" else prev
    keys = prev if args.kind == "decoder_self" else source
    layer_weights = rec.weights.mean(dim=0)
    panels = [("α", [rec.weights[h] for h in range(heads)] + [layer_weights]),
              ("‖α f(x)‖", [rec.head[h] for h in range(heads)] + [rec.layer])]
    rows = [f"head {h}" for h in range(heads)] + ["layer"]
    titles = [[f"head {h}: α", f"head {h}: ‖α f(x)‖"] for h in range(heads)]
    titles.append(["layer: mean over heads of α", "layer: ‖Σ_h α f(x)‖"])
    title = (f"{os.path.basename(args.path)}: {args.kind} layer {args.layer}, sentence {ex.index}"
             + ("" if _decomposable(ctx.model, (args.kind,)) else " (norms of pre-output-norm vectors)"))
    attention_heatmaps(panels, rows, queries, keys, ctx.out / "heatmap.png", title=title, titles=titles)
    header = ctx.header("heatmap")
    header["data"]["sentences"] = 1
    report = {**header, "sentence": ex.index, "kind": args.kind, "layer": args.layer,
              "query_tokens": queries, "key_tokens": keys,
              "weights": rec.weights.tolist(), "norms": rec.head.tolist(),
              "layer_weights": layer_weights.tolist(), "layer_norms": rec.layer.tolist(),
              "image": "heatmap.png"}
    write_json(report, ctx.out / "heatmap.json")
    return report


def _site_layers(model):
    from .recording import attention_sites

    return [(s.kind, s.layer) for s in attention_sites(model)]


# --------------------------------------------------------------------------- curves

CURVE_METRICS = ("sparsity", "null_rate", "entropy", "js", "aer")


def _read_result(spec: str) -> Tuple[str, Dict[str, Dict]]:
    """``[LABEL=]PATH``: a stats.json / align.json, or a directory holding them.
    Returns (label, {command: result})."""
    if Path(spec).exists() or "=" not in spec:  # a path may contain "=" (out/lr=3e-3)
        label, path = "", spec
    else:
        label, _, path = spec.partition("=")
    p = Path(path)
    files = [p / "stats.json", p / "align.json"] if p.is_dir() else [p]
    results = {}
    for f in files:
        if not f.is_file():
            if p.is_dir():
                continue
            raise FileNotFoundError(f"result file not found: {f}")
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise UsageError(f"{f}, line {e.lineno}, column {e.colno}: malformed JSON ({e.msg})") from None
        command = data.get("command") if isinstance(data, dict) else None
        if command not in ("stats", "align"):
            raise UsageError(f"{f}: not a result of 'fsa-analyze stats' or 'fsa-analyze align' "
                             f"(its \"command\" is {command!r})")
        results[command] = data
    if not results:
        raise FileNotFoundError(f"{p}: no stats.json or align.json in this directory")
    if not label:
        label = p.name if p.is_dir() else (p.parent.name or p.stem)
    return label, results


def cmd_curves(args) -> Dict:
    from .plots import layer_curves

    inputs: List[Tuple[str, Dict[str, Dict]]] = []
    for spec in args.inputs:  # one label may collect a stats.json and an align.json
        label, results = _read_result(spec)
        merged = dict(inputs).get(label)
        if merged is None:
            inputs.append((label, results))
            continue
        clash = sorted(set(merged) & set(results))
        if clash:
            raise UsageError(f"label {label!r} is given two {clash[0]} results; name the inputs "
                             f"LABEL=PATH with different labels")
        merged.update(results)
    tau = format(float(args.tau), "g")
    wanted = args.metrics or list(CURVE_METRICS)
    series: Dict[str, Dict[str, List]] = {}
    for label, results in inputs:
        stats = results.get("stats")
        if stats is not None:
            for e in stats["attention"].get(args.kind, []):
                for metric in ("sparsity", "null_rate", "entropy"):
                    series.setdefault(metric, {}).setdefault(label, []).append((e["layer"], e[metric]))
                temps = e.get("js_temperatures")
                if temps is not None and tau not in temps:
                    raise UsageError(f"--tau {args.tau}: {label}'s stats were computed at "
                                     f"temperatures {sorted(temps)}")
                value = e["js"] if temps is None else temps[tau]
                series.setdefault("js", {}).setdefault(label, []).append((e["layer"], value))
        align = results.get("align")
        if align is not None and args.kind == "cross":
            for entry in align["results"]:
                if entry["method"] == args.align_method and entry["setting"] == args.align_setting:
                    points = [(r["layer"], r.get("aer")) for r in entry["rows"] if r["head"] is None]
                    if any(v is not None for _, v in points):
                        series.setdefault("aer", {})[label] = points
    missing = [m for m in (args.metrics or []) if m not in series]
    if missing:
        raise UsageError(f"no input has {', '.join(missing)} for {args.kind} attention"
                         + (" (AER needs an align.json made with --gold, and --kind cross)"
                            if "aer" in missing else ""))
    series = {m: series[m] for m in wanted if m in series}
    if not series:
        raise UsageError(f"nothing to plot: the inputs have no {args.kind} per-layer statistics")
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = {"sparsity": "sparsity rate", "null_rate": "null rate", "entropy": "entropy H(ŝ)",
             "js": f"JS divergence (ReLU: τ={tau})", "aer": f"AER ({args.align_method}, {args.align_setting})"}
    layer_curves(series, out / "curves.png", title=f"{args.kind} attention",
                 ylabels={m: names[m] for m in series})
    report = {"command": "curves", "schema_version": SCHEMA_VERSION, "kind": args.kind, "tau": tau,
              "align_method": args.align_method, "align_setting": args.align_setting,
              "inputs": {label: {c: r.get("model", {}).get("checkpoint") for c, r in res.items()}
                         for label, res in inputs},
              "series": {m: {label: [{"layer": layer, "value": v} for layer, v in pts]
                             for label, pts in d.items()} for m, d in series.items()},
              "image": "curves.png"}
    write_json(report, out / "curves.json")
    write_tsv(out / "curves.tsv", ("statistic", "label", "layer", "value"),
              [(m, label, layer, v) for m, d in series.items() for label, pts in d.items()
               for layer, v in pts])
    return report


# ---------------------------------------------------------------------------- parser


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fsa-analyze",
        description="Attention analyses of a fairseq_sparse_attn (or stock fairseq transformer) "
                    "checkpoint: teacher-forced passes over a data split, JSON/TSV/PNG results.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("stats", help="sparsity, null rate, entropy, top-p%%, head JS divergence, "
                                     "FFN anisotropy / variance ratio / top-p mass")
    add_model_args(p)
    p.add_argument("--top-p", type=_float_list, default=[0.01, 0.05, 0.1], metavar="P,...",
                   help="top-p fractions for the score sums (0.01 = top-1%%; default 0.01,0.05,0.1)")
    p.add_argument("--temperatures", type=_float_list, default=[1.0, 0.5, 0.25, 0.1], metavar="T,...",
                   help="JS re-normalization temperatures of ReLU-type attention (ReLA Table 6; "
                        "default 1,0.5,0.25,0.1)")
    p.add_argument("--js-mode", choices=("power", "divide"), default="power",
                   help="re-normalization softmax(α^τ) (ReLA's wording, default) or softmax(α/τ)")
    p.add_argument("--no-ffn", action="store_true", help="skip the FFN statistics")
    p.add_argument("--no-plots", action="store_true")

    p = sub.add_parser("norms", help="norm-based analysis (Kobayashi et al. 2020)")
    add_model_args(p)
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    p.add_argument("--spearman-unit", choices=("pair", "key"), default="pair",
                   help="one value per (query, key, head) pair (default) or per (key, head)")
    p.add_argument("--allow-output-norm", action="store_true",
                   help="allow modules with an output norm (ReLA): norms of the pre-norm vectors")
    p.add_argument("--no-plots", action="store_true")

    p = sub.add_parser("align", help="word alignments from cross attention, AER against a gold file")
    add_model_args(p)
    p.add_argument("--gold", metavar="FILE", help="gold links in talp format (i-j sure, ipj "
                   "possible), one line per sentence pair of the data")
    p.add_argument("--zero-indexed", action="store_true",
                   help="gold and written links count words from 0 (default: from 1, as the RWTH gold)")
    p.add_argument("--reverse-links", action="store_true",
                   help="gold and written links are target-source (default: source-target)")
    p.add_argument("--method", nargs="+", choices=("weights", "norms"), default=["weights"],
                   help="alignment scores: attention weights (default) and/or norms ‖αf(x)‖")
    p.add_argument("--setting", nargs="+", choices=("awo", "awi"), default=["awo", "awi"],
                   help="alignment with output (AWO, 'normal' α) and/or input (AWI, 'shifted' α[1:])")
    p.add_argument("--allow-output-norm", action="store_true",
                   help="--method norms on modules with an output norm (ReLA): pre-norm vectors")
    p.add_argument("--no-write-alignments", action="store_true",
                   help="do not write the predicted links of every layer and head")
    p.add_argument("--no-plots", action="store_true")

    p = sub.add_parser("hallucination",
                       help="ReLA's hallucination test: cross null rate, real vs shuffled targets")
    add_model_args(p)
    p.add_argument("--seed", type=int, default=1, help="seed of the target shuffle (default 1)")
    p.add_argument("--no-plots", action="store_true")

    p = sub.add_parser("filter", help="rank sentence pairs by mean cross-attention null rate")
    add_model_args(p)
    p.add_argument("--k", type=_positive_int, default=10, help="pairs in the top/bottom files (default 10)")
    p.add_argument("--ascending", action="store_true", help="lowest null rate first")

    p = sub.add_parser("heatmap", help="heatmaps of one sentence: every head of a layer, weights and norms")
    add_model_args(p)
    p.add_argument("--sentence", type=int, default=0, help="0-based index of the pair (default 0)")
    p.add_argument("--layer", type=int, default=0, help="0-based layer (default 0)")
    p.add_argument("--kind", choices=KINDS, default="cross")
    p.add_argument("--allow-output-norm", action="store_true",
                   help="norms of modules with an output norm (ReLA): pre-norm vectors")

    p = sub.add_parser("curves", help="per-layer curves of several checkpoints on the same axes")
    p.add_argument("inputs", nargs="+", metavar="[LABEL=]RESULT",
                   help="stats.json / align.json of fsa-analyze, or an --output-dir holding them")
    p.add_argument("--output-dir", required=True, metavar="DIR")
    p.add_argument("--kind", choices=KINDS, default="cross")
    p.add_argument("--metrics", nargs="+", choices=CURVE_METRICS, default=None,
                   help="default: every one the inputs have")
    p.add_argument("--tau", type=float, default=1.0,
                   help="temperature of the JS of ReLU-type attention (default 1)")
    p.add_argument("--align-method", choices=("weights", "norms"), default="weights")
    p.add_argument("--align-setting", choices=("awo", "awi"), default="awi")
    return parser


COMMANDS = {"stats": cmd_stats, "norms": cmd_norms, "align": cmd_align,
            "hallucination": cmd_hallucination, "filter": cmd_filter, "heatmap": cmd_heatmap,
            "curves": cmd_curves}


def run(argv: Optional[Sequence[str]] = None) -> Dict:
    """Parse ``argv`` and run the subcommand; errors propagate (see :func:`main`)."""
    args = get_parser().parse_args(argv)
    if args.command == "heatmap" and (args.sentence < 0 or args.layer < 0):
        raise UsageError("--sentence and --layer are 0-based indices (>= 0)")
    return COMMANDS[args.command](args)


def main(argv: Optional[Sequence[str]] = None) -> int:
    import logging

    # before fairseq is imported: one of its modules sets the root logger to DEBUG when
    # nothing is configured yet
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
                        datefmt="%Y-%m-%d %H:%M:%S", level=logging.INFO, stream=sys.stderr)
    logging.getLogger().setLevel(logging.INFO)
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if a in SUBCOMMANDS), "")
    try:
        run(argv)
    except (UsageError, ValueError, FileNotFoundError) as e:
        print(f"fsa-analyze {command}: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
