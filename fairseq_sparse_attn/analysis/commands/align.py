"""``fsa-analyze align``: word alignments from cross attention (weights or norms, AWO /
AWI, every layer and head) and, with ``--gold``, precision, recall and AER per layer /
head, the best ones, AoL and AoH.

Word boundaries.  Raw text + BPE codes (``--raw-source/--raw-target --bpe-codes``) keep
every piece's text.  In a binarized split a piece missing from the dictionary became
``<unk>`` and lost its ``@@``/``▁`` marker, so the words of its sentence may be merged
wrongly and every later link of the sentence shift; such sentences are found
(:func:`fairseq_sparse_attn.subwords.uncertain_boundaries`), reported (``unknown_pieces``
in align.json, a warning on stderr) and, by default, left out of the AER
(``--unknown-pieces keep`` scores them anyway).
"""

import logging
import os
from typing import Dict, List, Optional, Sequence

from .base import Context, UsageError, add_model_args, add_plots_flag

NAME = "align"
HELP = "word alignments from cross attention, AER against a gold file"
UNKNOWN_POLICIES = ("exclude", "keep")

logger = logging.getLogger("fairseq_sparse_attn.analysis")


def add_arguments(p) -> None:
    add_model_args(p)
    p.add_argument(
        "--gold",
        metavar="FILE",
        help="gold links in talp format (i-j sure, ipj possible), one line per sentence pair of the data",
    )
    p.add_argument(
        "--zero-indexed",
        action="store_true",
        help="gold and written links count words from 0 (default: from 1, as the RWTH gold)",
    )
    p.add_argument(
        "--reverse-links", action="store_true", help="gold and written links are target-source (default: source-target)"
    )
    p.add_argument(
        "--method",
        nargs="+",
        choices=("weights", "norms"),
        default=["weights"],
        help="alignment scores: attention weights (default) and/or norms ‖αf(x)‖",
    )
    p.add_argument(
        "--setting",
        nargs="+",
        choices=("awo", "awi"),
        default=["awo", "awi"],
        help="alignment with output (AWO, 'normal' α) and/or input (AWI, 'shifted' α[1:])",
    )
    p.add_argument(
        "--unknown-pieces",
        choices=UNKNOWN_POLICIES,
        default="exclude",
        help="binarized split: sentences with an <unk> piece (its subword marker is "
        "lost, word boundaries unsure) are left out of the AER (default) or kept",
    )
    p.add_argument(
        "--allow-output-norm",
        action="store_true",
        help="--method norms on modules with an output norm (ReLA): pre-norm vectors",
    )
    p.add_argument(
        "--no-write-alignments", action="store_true", help="do not write the predicted links of every layer and head"
    )
    add_plots_flag(p)


def read_gold(
    path: str,
    examples,
    total: int,
    where: str,
    scheme: str,
    zero_indexed: bool,
    reverse: bool,
    unchecked: Sequence[int] = (),
):
    """Gold links of ``examples`` (the first sentences of the data) from a talp file that
    must have one line per sentence of the data (``total``); every line is parsed, and the
    lines of the analysed sentences are range-checked against their word counts, except
    the sentences in ``unchecked`` (indices whose word count is unsure)."""
    from ...subwords import word_count
    from ..alignment import parse_alignment_line

    if not os.path.isfile(path):
        raise FileNotFoundError(f"gold alignment file not found: {path}")
    from ...text_lines import read_lines

    lines = read_lines(path, blank_tail=True)  # a blank line: a sentence without links
    if len(lines) != total:
        raise UsageError(f"{path}: {len(lines)} lines, expected {total} (one line per sentence pair of {where})")
    skip = set(unchecked)
    gold = []
    for number, line in enumerate(lines, start=1):
        lengths = None
        if number <= len(examples) and examples[number - 1].index not in skip:
            ex = examples[number - 1]
            lengths = (word_count(ex.source_pieces, scheme), word_count(ex.target_pieces, scheme))
        parsed = parse_alignment_line(line, f"{path}:{number}", not zero_indexed, reverse, lengths)
        if number <= len(examples):
            gold.append(parsed)
    return gold


def sentences_with_unknown_pieces(examples, scheme: str, source_unk: str, target_unk: str) -> List[int]:
    """Indices of the pairs whose source or target has an unknown piece (binarized data)."""
    from ...subwords import uncertain_boundaries

    return [
        ex.index
        for ex in examples
        if uncertain_boundaries(ex.source_pieces, scheme, source_unk)
        or uncertain_boundaries(ex.target_pieces, scheme, target_unk)
    ]


def result_entry(method: str, setting: str, keys, predictions, gold, scored: Optional[List[int]], files: Dict) -> Dict:
    """One ``results`` entry of align.json: rows per (layer, head) and, with gold, the
    summaries of :func:`..alignment.layer_head_report` over the ``scored`` positions."""
    from ..alignment import layer_head_report

    report = None
    if gold is not None:
        pick = range(len(gold)) if scored is None else scored
        report = layer_head_report({k: [v[i] for i in pick] for k, v in predictions.items()}, [gold[i] for i in pick])
    rows = []
    for layer, head in keys:
        row = {
            "layer": layer,
            "head": head,
            "file": files.get((layer, head)),
            "links": sum(len(x) for x in predictions[(layer, head)]),
        }
        if report is not None:
            c = report.counts[(layer, head)]
            row.update(
                aer=c.aer,
                precision=c.precision,
                recall=c.recall,
                predicted=c.predicted,
                sure=c.sure,
                predicted_sure=c.predicted_sure,
                predicted_possible=c.predicted_possible,
            )
        rows.append(row)
    entry = {"method": method, "setting": setting, "rows": rows}
    if report is not None:
        best_layer, best_head = report.best
        entry["best"] = {"layer": best_layer, "head": best_head, "aer": report.aer(*report.best)}
        entry["best_layer"] = (
            None if report.best_layer is None else {"layer": report.best_layer, "aer": report.aer(report.best_layer)}
        )
        entry["best_head_per_layer"] = [
            {"layer": layer, "head": head, "aer": report.aer(layer, head)}
            for layer, head in sorted(report.best_head_per_layer.items())
        ]
        entry["layer_mean_aer"] = report.layer_mean_aer
        entry["best_head_mean_aer"] = report.best_head_mean_aer
    return entry


def run(args) -> Dict:
    from ..alignment import AlignmentCollector, format_alignment
    from ..plots import layer_curves
    from .norms import require_decomposable

    ctx = Context(args)
    if "norms" in args.method:
        require_decomposable(ctx.model, ("cross",), args.allow_output_norm, args.path)
    unknown = None
    if ctx.binarized:
        affected = sentences_with_unknown_pieces(
            ctx.examples,
            args.subword_scheme,
            ctx.loaded.source_dictionary.unk_word,
            ctx.loaded.target_dictionary.unk_word,
        )
        unknown = {
            "sentences": len(affected),
            "indices": affected,
            "policy": args.unknown_pieces,
            "scored_sentences": len(ctx.examples) - (len(affected) if args.unknown_pieces == "exclude" else 0),
        }
        if affected:
            logger.warning(
                "%s: %d of %d sentence pairs have a piece that became <unk> (its subword marker "
                "is lost, so their word boundaries are unsure); %s. Give raw text and BPE codes "
                "(--raw-source --raw-target --bpe-codes) to score every sentence.",
                ctx.where,
                len(affected),
                len(ctx.examples),
                "they are left out of the AER" if args.unknown_pieces == "exclude" else "they are scored anyway",
            )
    gold = None
    if args.gold is not None:
        gold = read_gold(
            args.gold,
            ctx.examples,
            ctx.total,
            ctx.where,
            args.subword_scheme,
            args.zero_indexed,
            args.reverse_links,
            unchecked=unknown["indices"] if unknown else (),
        )
    scored = None
    if unknown is not None and args.unknown_pieces == "exclude" and unknown["sentences"]:
        excluded = set(unknown["indices"])
        scored = [i for i, ex in enumerate(ctx.examples) if ex.index not in excluded]
        if gold is not None and not scored:
            raise UsageError(
                f"{ctx.where}: every analysed sentence has an unknown piece, none is "
                f"left to score; give raw text and BPE codes, or --unknown-pieces keep"
            )
    collector = AlignmentCollector(
        ctx.model, ctx.examples, args.method, args.setting, args.subword_scheme, args.allow_output_norm
    )
    ctx.run([collector])
    out_dir = ctx.out / "alignments"
    if not args.no_write_alignments:
        out_dir.mkdir(exist_ok=True)
    results, tsv, written = [], [], 0
    for method in args.method:
        for setting in args.setting:
            keys = sorted(
                {(layer, head) for (m, s, layer, head) in collector.links if m == method and s == setting},
                key=lambda k: (k[0], -1 if k[1] is None else k[1]),
            )
            predictions = {k: [collector.links[(method, setting) + k][ex.index] for ex in ctx.examples] for k in keys}
            files = {}
            if not args.no_write_alignments:
                for layer, head in keys:
                    name = f"{method}.{setting}.layer{layer}" + ("" if head is None else f".head{head}") + ".txt"
                    with open(out_dir / name, "w", encoding="utf-8") as f:
                        for links in predictions[(layer, head)]:
                            f.write(format_alignment(links, not args.zero_indexed, args.reverse_links) + "\n")
                    files[(layer, head)] = f"alignments/{name}"
                    written += 1
            entry = result_entry(method, setting, keys, predictions, gold, scored, files)
            for row in entry["rows"]:
                tsv.append(
                    (
                        method,
                        setting,
                        row["layer"],
                        "layer" if row["head"] is None else row["head"],
                        row.get("aer"),
                        row.get("precision"),
                        row.get("recall"),
                        row["links"],
                        row["file"],
                    )
                )
            results.append(entry)
    if written:
        ctx.out.wrote(out_dir, f"{written} alignment files")
    report = {
        **ctx.header(NAME),
        "gold": None if args.gold is None else os.path.abspath(args.gold),
        "zero_indexed": args.zero_indexed,
        "reverse_links": args.reverse_links,
        "subword_scheme": args.subword_scheme,
        "results": results,
    }
    if unknown is not None:
        report["unknown_pieces"] = unknown
    ctx.out.json("align.json", report)
    ctx.out.tsv("align.tsv", ("method", "setting", "layer", "head", "aer", "precision", "recall", "links", "file"), tsv)
    if gold is not None and not args.no_plots:
        series = {"AER (layer attention)": {}, "AER (best head)": {}}
        for e in results:
            label = f"{e['method']}/{e['setting']}"
            series["AER (layer attention)"][label] = [(r["layer"], r["aer"]) for r in e["rows"] if r["head"] is None]
            series["AER (best head)"][label] = [(b["layer"], b["aer"]) for b in e["best_head_per_layer"]]
        layer_curves(series, ctx.out / "align.png", title=ctx.title)
        ctx.out.wrote(ctx.out / "align.png")
    return report
