"""Contrastive evaluation of a translation model (``fsa-contrastive``; Sennrich 2017, used
by Raganato et al. 2020, Sec. 5): every (source, target) pair is scored by teacher forcing
(sum of target log-probabilities, EOS included) and a decision is correct when the correct
translation scores strictly higher than the contrastive one(s); accuracy overall and per
group.  Formats ``plain``, ``lingeval97``, ``contrawsd``, ``mucow``, the decision rules
(``variant`` / ``item``), the fields read and the command line: docs/fixed_patterns.md,
"Contrastive test suites".
"""

import argparse
import json
import os
import sys
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from ..errors import OneLineErrorParser, UsageError
from ..writers import output_over_input, unwritable_file, write_text

# text, encoders, batches and the checkpoint loader are the analyses' own (re-exported here)
from .loading import (  # noqa: F401
    Example,
    build_encoder,
    iterate_batches,
    length_batches,
    load_checkpoint,
    open_text,
    parse_overrides,
    read_lines,
)
from .loading import make_batches as _example_batches

make_batches = length_batches  # fsa-contrastive's name for it (lengths -> batches)

FORMATS = ("plain", "lingeval97", "contrawsd", "mucow")
DEFAULT_DECISION = {"plain": "variant", "lingeval97": "variant", "contrawsd": "item", "mucow": "item"}
WSD_GROUP_FIELDS = ("ambig word", "sense")


@dataclass
class ContrastiveItem:
    item_id: str
    source: str
    correct: str
    contrastives: List[str]
    groups: List[Optional[str]]  # one label per contrastive; None = in no group


@dataclass
class Decision:
    item_id: str
    group: Optional[str]
    score_correct: float
    score_incorrect: float

    @property
    def correct(self) -> bool:
        return self.score_correct > self.score_incorrect  # ties are wrong


# --------------------------------------------------------------------------- readers


def read_plain(source_path, correct_path, incorrect_path, group_path=None) -> List[ContrastiveItem]:
    """Line-aligned source / correct / incorrect (/ group) files, one item per line."""
    paths = [p for p in (source_path, correct_path, incorrect_path, group_path) if p is not None]
    # a blank group label is a record (an item in no group), so a group file keeps its
    # trailing blank line
    columns = [read_lines(p, blank_tail=(p is group_path)) for p in paths]
    for path, lines in zip(paths[1:], columns[1:]):
        if len(lines) != len(columns[0]):
            raise ValueError(
                f"{path} has {len(lines)} lines but {paths[0]} has {len(columns[0])}: "
                "contrastive files must be line-aligned"
            )
    groups = [g or None for g in columns[3]] if group_path is not None else [None] * len(columns[0])
    return [
        ContrastiveItem(str(i + 1), src, good, [bad], [group])
        for i, (src, good, bad, group) in enumerate(zip(columns[0], columns[1], columns[2], groups))
    ]


def load_json(path):
    try:
        with open_text(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}, line {e.lineno}, column {e.colno}: malformed JSON ({e.msg})") from None


def _field(obj, name, kind, where):
    """obj[name], which must exist and be of type ``kind``; ``where`` names file and entry."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, found {type(obj).__name__}")
    if name not in obj:
        raise ValueError(f"{where}: missing field {name!r}")
    if not isinstance(obj[name], kind):
        raise ValueError(f"{where}: field {name!r} should be a {kind.__name__}, found {type(obj[name]).__name__}")
    return obj[name]


def _default_group(fmt, entry, error, where) -> Optional[str]:
    if fmt == "lingeval97":
        return _field(error, "type", str, where)
    return ":".join(str(_field(entry, name, str, where)) for name in WSD_GROUP_FIELDS)


def _group_by_field(entry, error, field) -> Optional[str]:
    for obj in (error, entry):
        if field in obj and obj[field] is not None:
            return str(obj[field])
    return None


def read_json_suite(
    path, fmt, group_by: Optional[str] = None, error_types: Optional[Sequence[str]] = None
) -> List[ContrastiveItem]:
    """A LingEval97 / ContraWSD / MuCoW JSON file (see the module docstring for the fields).
    ``error_types`` (LingEval97 only, its ``evaluate.py --categories``): keep only the errors
    of these types, and the items that have one; a type no error has is refused, naming
    the suite's types."""
    if fmt not in FORMATS[1:]:
        raise ValueError(f"unknown JSON format {fmt!r}; expected one of {FORMATS[1:]}")
    if error_types is not None and fmt != "lingeval97":
        raise ValueError(f"--error-types is for --format lingeval97 (its errors' 'type'), not {fmt}")
    data = load_json(path)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of items, found {type(data).__name__}")
    items = []
    types_seen = set()
    for index, entry in enumerate(data):
        where = f"{path}, item {index}"
        source = _field(entry, "source", str, where)
        reference = _field(entry, "reference", str, where)
        errors = _field(entry, "errors", list, where)
        contrastives, groups = [], []
        for k, error in enumerate(errors):
            where_error = f"{where}, errors[{k}]"
            contrastive = _field(error, "contrastive", str, where_error)
            if error_types is not None:
                kind = _field(error, "type", str, where_error)
                types_seen.add(kind)
                if kind not in error_types:
                    continue
            contrastives.append(contrastive)
            if group_by is None:
                groups.append(_default_group(fmt, entry, error, where_error))
            else:
                groups.append(_group_by_field(entry, error, group_by))
        if contrastives or error_types is None:
            items.append(ContrastiveItem(str(index), source, reference, contrastives, groups))
    if error_types is not None:
        missing = [t for t in error_types if t not in types_seen]
        if missing:
            raise ValueError(
                f"{path}: no error has the type {', '.join(map(repr, missing))} given to --error-types; "
                f"the suite's types: {', '.join(sorted(types_seen)) or 'none'}"
            )
    if group_by is not None and items and all(g is None for item in items for g in item.groups):
        raise ValueError(f"{path}: no item or error has the field {group_by!r} given to --group-by")
    return items


# --------------------------------------------------------------------------- scoring


def identity(text: str) -> str:
    return text


def encode_text(dictionary, text: str) -> torch.Tensor:
    """Space-separated symbols -> LongTensor of indices, EOS appended, unknown -> <unk>."""
    return dictionary.encode_line(text, add_if_not_exist=False, append_eos=True).long()


def check_length(tokens: torch.Tensor, limit: Optional[int], what: str):
    if limit is not None and tokens.numel() > limit:
        raise ValueError(f"{what} has {tokens.numel()} tokens (with EOS) but the model accepts at most {limit}")


def _position_limits(model) -> Tuple[Optional[int], Optional[int]]:
    limits = model.max_positions()
    if isinstance(limits, tuple):
        return limits[0], limits[1]
    return limits, limits


def batch_scores(model, src_tokens, src_lengths, prev_output_tokens, target, pad: int) -> torch.Tensor:
    """Sum over the target positions (padding excluded) of log p(target_t | ...), per row."""
    net_output = model(src_tokens, src_lengths, prev_output_tokens)
    lprobs = model.get_normalized_probs(net_output, log_probs=True)
    token_lprobs = lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return token_lprobs.masked_fill(target.eq(pad), 0.0).double().sum(dim=1)


def score_pairs(
    model,
    pairs: Sequence[Tuple[torch.Tensor, torch.Tensor]],
    pad: int,
    eos: int,
    batch_size: Optional[int] = 32,
    max_tokens: Optional[int] = None,
    device=None,
    progress: bool = False,
) -> List[float]:
    """Teacher-forced log-probability sums of already encoded (source, target) pairs, in the
    order given, computed in length-sorted batches (:func:`.loading.iterate_batches`, as
    every analysis) with the model in eval mode."""
    from tqdm import tqdm

    device = device or next(model.parameters()).device
    model.eval()
    scores = [0.0] * len(pairs)
    examples = [Example(i, s, t, [], []) for i, (s, t) in enumerate(pairs)]
    total = len(_example_batches(examples, batch_size, max_tokens))
    with torch.no_grad():
        batches = iterate_batches(examples, pad, eos, batch_size, max_tokens, device)
        for sample in tqdm(batches, total=total, desc="scoring", unit="batch", disable=not progress):
            net = sample["net_input"]
            batch = batch_scores(
                model, net["src_tokens"], net["src_lengths"], net["prev_output_tokens"], sample["target"], pad=pad
            )
            for i, score in zip(sample["id"].tolist(), batch.tolist()):
                scores[i] = score
    return scores


def encode_items(
    items: Sequence[ContrastiveItem],
    src_dict,
    tgt_dict,
    encode_source: Callable[[str], str] = identity,
    encode_target: Optional[Callable[[str], str]] = None,
    max_positions: Tuple[Optional[int], Optional[int]] = (None, None),
):
    """(source, target) index tensors: per item the correct target, then each contrastive."""
    encode_target = encode_target or encode_source
    pairs = []
    ties = []  # (item id, k): a contrastive target with the correct one's ids
    for item in items:
        src = encode_text(src_dict, encode_source(item.source))
        check_length(src, max_positions[0], f"item {item.item_id}: the source")
        for k, text in enumerate([item.correct] + item.contrastives):
            tgt = encode_text(tgt_dict, encode_target(text))
            what = "the correct target" if k == 0 else f"contrastive target {k}"
            check_length(tgt, max_positions[1], f"item {item.item_id}: {what}")
            if k == 0:
                correct = tgt
            elif torch.equal(tgt, correct):
                ties.append((item.item_id, k))
            pairs.append((src, tgt))
    if ties:  # as check_items for equal texts: a tie counts as the model's error
        item_id, k = ties[0]
        raise ValueError(
            f"item {item_id}: contrastive target {k} has the same token ids as the correct one once encoded "
            f"(so have {len(ties)} of the pairs): the words that differ are unknown to the dictionary "
            "(<unk>) or lost in encoding, and a tie counts as an error of the model; give the suite's "
            "--tokenizer / --bpe-codes, or remove those pairs"
        )
    return pairs


def score_items(
    model,
    items: Sequence[ContrastiveItem],
    src_dict,
    tgt_dict,
    encode_source: Callable[[str], str] = identity,
    encode_target: Optional[Callable[[str], str]] = None,
    batch_size: Optional[int] = 32,
    max_tokens: Optional[int] = None,
    device=None,
    progress: bool = False,
) -> List[Tuple[float, List[float]]]:
    """Per item: (score of the correct target, [score of each contrastive target])."""
    pairs = encode_items(items, src_dict, tgt_dict, encode_source, encode_target, _position_limits(model))
    flat = score_pairs(model, pairs, tgt_dict.pad(), tgt_dict.eos(), batch_size, max_tokens, device, progress)
    out, pos = [], 0
    for item in items:
        n = 1 + len(item.contrastives)
        out.append((flat[pos], flat[pos + 1 : pos + n]))
        pos += n
    return out


# --------------------------------------------------------------------------- decisions and report


def decide(
    items: Sequence[ContrastiveItem], scores: Sequence[Tuple[float, List[float]]], unit: str = "variant"
) -> List[Decision]:
    """One decision per contrastive variant, or per item (correct beats every variant)."""
    if unit not in ("variant", "item"):
        raise ValueError(f"decision unit must be 'variant' or 'item', not {unit!r}")
    decisions = []
    for item, (good, bads) in zip(items, scores):
        if unit == "variant":
            decisions += [Decision(item.item_id, g, good, bad) for g, bad in zip(item.groups, bads)]
        elif bads:
            if len(set(item.groups)) > 1:
                raise ValueError(
                    f"item {item.item_id}: its contrastive variants are in different "
                    f"groups {sorted(map(str, set(item.groups)))}; per-item decisions "
                    "need one group per item (use decisions per variant)"
                )
            decisions.append(Decision(item.item_id, item.groups[0], good, max(bads)))
    return decisions


def _counts(decisions: Sequence[Decision]) -> Dict[str, float]:
    n = len(decisions)
    correct = sum(d.correct for d in decisions)
    return {"correct": correct, "total": n, "accuracy": correct / n if n else None}


def _group_key(group: str):
    """Numeric groups (distances) in numeric order, then the others alphabetically."""
    try:
        return (0, float(group), "")
    except ValueError:
        return (1, 0.0, group)


def summarize(decisions: Sequence[Decision], average_groups: Optional[Sequence[str]] = None) -> Dict:
    """{"overall": counts, "by_group": {group: counts}} with counts = correct, total, accuracy.
    Decisions without a group count in "overall" only.  With ``average_groups``, also
    "average": {"groups": [...], "accuracy": the mean of those groups' accuracies} (each
    group weighs the same, whatever its size: Raganato et al. (2020) report MuCoW as "the
    average result from the TED and Tatoeba" corpora; docs/fixed_patterns.md)."""
    by_group: Dict[str, List[Decision]] = {}
    for d in decisions:
        if d.group is not None:
            by_group.setdefault(d.group, []).append(d)
    report = {
        "overall": _counts(decisions),
        "by_group": OrderedDict((g, _counts(by_group[g])) for g in sorted(by_group, key=_group_key)),
    }
    if average_groups:
        missing = [g for g in average_groups if g not in report["by_group"]]
        if missing:
            raise ValueError(f"no decision in the group(s) {', '.join(missing)} to average")
        accuracies = [report["by_group"][g]["accuracy"] for g in average_groups]
        report["average"] = {"groups": list(average_groups), "accuracy": sum(accuracies) / len(accuracies)}
    return report


def check_average_groups(items: Sequence[ContrastiveItem], average_groups: Sequence[str]) -> None:
    """ValueError naming the groups of ``average_groups`` that no item has (and the groups
    the items do have), before any scoring."""
    present = {g for item in items for g in item.groups if g is not None}
    missing = [g for g in average_groups if g not in present]
    if missing:
        known = sorted(present, key=_group_key)
        shown = ", ".join(known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
        raise ValueError(
            f"--average-groups: no item is in the group(s) {', '.join(missing)}; the groups are: {shown or 'none'}"
        )


def write_json(report: Dict, path):
    """The report as it is (library use); ``fsa-contrastive --output-json`` writes it with
    provenance (:func:`fairseq_sparse_attn.provenance.write_json`)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, ensure_ascii=False)
        f.write("\n")


def load_model(path: str, data_bin: str, source_lang=None, target_lang=None, model_overrides=None):
    """(model, task) from a fairseq checkpoint, dictionaries read from ``data_bin``;
    ``model_overrides`` (dict) replaces saved arguments, as fairseq's ``--model-overrides``.
    The analyses' loader (:func:`.loading.load_checkpoint`): plugin checkpoints as trained,
    stock fairseq transformers as the parity-tested ``sparse_transformer``."""
    from .loading import source_annotations_needed

    loaded = load_checkpoint(path, data_bin, source_lang, target_lang, model_overrides)
    needs = source_annotations_needed(loaded.model)
    if needs:  # the suites are raw text: no parses for the encoder (one line, before any scoring)
        raise UsageError(
            f"{path}: its attention needs the source's syntax ({', '.join(needs)}) for each sentence, "
            "which a contrastive suite (raw text) does not give"
        )
    return loaded.model, loaded.task


def write_decisions_tsv(decisions: Sequence[Decision], path):
    lines = ["item_id\tgroup\tscore_correct\tscore_incorrect\tcorrect"]
    for d in decisions:
        group = "" if d.group is None else d.group
        lines.append(f"{d.item_id}\t{group}\t{d.score_correct:.6f}\t{d.score_incorrect:.6f}\t{int(d.correct)}")
    write_text(path, "\n".join(lines) + "\n")


def format_report(report: Dict) -> str:
    def line(name, c):
        accuracy = "n/a" if c["accuracy"] is None else f"{c['accuracy']:.4f}"
        return f"{name}\t{c['correct']}/{c['total']}\t{accuracy}"

    lines = [line("overall", report["overall"])]
    lines += [line(g, c) for g, c in report["by_group"].items()]
    if "average" in report:
        lines.append(f"average({','.join(report['average']['groups'])})\t-\t{report['average']['accuracy']:.4f}")
    return "\n".join(lines)


def evaluate(
    model,
    items: Sequence[ContrastiveItem],
    src_dict,
    tgt_dict,
    encode_source: Callable[[str], str] = identity,
    encode_target: Optional[Callable[[str], str]] = None,
    unit: str = "variant",
    batch_size: Optional[int] = 32,
    max_tokens: Optional[int] = None,
    device=None,
    progress: bool = False,
    average_groups: Optional[Sequence[str]] = None,
):
    """Score, decide and summarize: returns (report dict, decisions)."""
    scores = score_items(
        model, items, src_dict, tgt_dict, encode_source, encode_target, batch_size, max_tokens, device, progress
    )
    decisions = decide(items, scores, unit)
    return summarize(decisions, average_groups), decisions


# --------------------------------------------------------------------------- command line


def read_items(
    fmt: str, inputs: Sequence[str], group_file=None, group_by=None, error_types=None
) -> List[ContrastiveItem]:
    if fmt == "plain":
        if len(inputs) != 3:
            raise ValueError(f"--format plain needs 3 input files (source, correct, incorrect), got {len(inputs)}")
        if group_by is not None:
            raise ValueError("--group-by is for the JSON formats; use --group-file with --format plain")
        if error_types is not None:
            raise ValueError("--error-types is for --format lingeval97 (its errors' 'type'), not plain")
        return read_plain(*inputs, group_path=group_file)
    if len(inputs) != 1:
        raise ValueError(f"--format {fmt} needs 1 JSON input file, got {len(inputs)}")
    if group_file is not None:
        raise ValueError("--group-file is for --format plain; use --group-by FIELD with JSON formats")
    return read_json_suite(inputs[0], fmt, group_by, error_types)


def check_items(items: Sequence[ContrastiveItem], fmt: str, inputs: Sequence[str]) -> None:
    """ValueError naming the input when there is nothing to score, or naming the line
    (plain) or item (JSON) where a contrastive translation is the correct one itself: the
    two would tie, which counts as the model's error, so the accuracy would be wrong with
    nothing said."""
    if not any(item.contrastives for item in items):
        raise ValueError(f"{', '.join(map(str, inputs))}: no contrastive pair to score")
    for item in items:
        for k, contrastive in enumerate(item.contrastives):
            if contrastive == item.correct:
                where = (
                    f"{inputs[2]} line {item.item_id}"
                    if fmt == "plain"
                    else f"{inputs[0]}, item {item.item_id}, contrastive {k + 1}"
                )
                raise ValueError(
                    f"{where}: the contrastive translation equals the correct one (a tie, which counts as an "
                    "error of the model); remove the pair"
                )


def get_parser() -> argparse.ArgumentParser:
    p = OneLineErrorParser(
        prog="fsa-contrastive",
        description="Contrastive evaluation: accuracy of a fairseq translation model at scoring "
        "correct translations above contrastive ones (LingEval97 protocol).",
    )
    p.add_argument("data_bin", metavar="DATA_BIN", help="fairseq-preprocess directory with the dictionaries")
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="plain: SOURCE CORRECT INCORRECT (line-aligned, .gz allowed); JSON formats: FILE",
    )
    p.add_argument("--path", required=True, metavar="CHECKPOINT", help="model checkpoint")
    p.add_argument("--format", choices=FORMATS, default="plain")
    p.add_argument("-s", "--source-lang", default=None)
    p.add_argument("-t", "--target-lang", default=None)
    p.add_argument(
        "--tokenizer",
        choices=("moses", "none"),
        default="none",
        help="tokenize raw text before BPE (default: none, text already tokenized)",
    )
    p.add_argument("--bpe-codes", default=None, help="subword-nmt codes (default: text already BPE'd)")
    p.add_argument("--group-file", default=None, help="plain: line-aligned group labels")
    p.add_argument(
        "--group-by",
        default=None,
        metavar="FIELD",
        help="JSON formats: group by this field of each error (or item) "
        "(default: lingeval97 'type', contrawsd/mucow 'ambig word:sense')",
    )
    p.add_argument(
        "--error-types",
        default=None,
        metavar="T1,T2,...",
        help="lingeval97: score only the errors of these types (LingEval97's evaluate.py "
        "--categories); Raganato et al.'s Fig. 3: --error-types subj_verb_agreement --group-by distance",
    )
    p.add_argument(
        "--average-groups",
        default=None,
        metavar="G1,G2,...",
        help="also report the mean of these groups' accuracies, each group weighing the same "
        "(Raganato et al.'s MuCoW figure: --format mucow --group-by origin --average-groups ted,tatoeba)",
    )
    p.add_argument(
        "--decision",
        choices=("variant", "item"),
        default=None,
        help="one decision per contrastive variant, or per item (correct beats all); "
        "default: item for contrawsd/mucow, variant otherwise (the suites' own scripts)",
    )
    p.add_argument("--batch-size", type=int, default=32, help="max pairs per batch")
    p.add_argument("--max-tokens", type=int, default=None, help="max padded tokens per batch")
    p.add_argument("--max-items", type=int, default=None, help="evaluate only the first N items")
    p.add_argument(
        "--model-overrides",
        default=None,
        metavar="DICT",
        help="Python dict literal of model arguments to override, as in fairseq-generate, "
        "e.g. \"{'encoder_masked_heads': '7'}\"",
    )
    p.add_argument("--cpu", action="store_true", help="run on CPU even when CUDA is available")
    p.add_argument("--output-json", default=None, help="write the report here")
    p.add_argument(
        "--output-tsv",
        default=None,
        help="write one line per decision: item_id, group, score_correct, score_incorrect, correct",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def cli_main(argv=None) -> Dict:
    parser = get_parser()
    args = parser.parse_args(argv)
    for name in ("batch_size", "max_tokens", "max_items"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    error_types = None
    if args.error_types is not None:
        error_types = [t.strip() for t in args.error_types.split(",") if t.strip()]
        if not error_types:
            parser.error(f"--error-types: give error types separated by commas, got {args.error_types!r}")
    try:
        items = read_items(args.format, args.inputs, args.group_file, args.group_by, error_types)
    except OSError as e:  # a missing input, a directory, an unreadable file
        parser.error(f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e))
    except ValueError as e:
        parser.error(str(e))
    if args.max_items is not None:
        items = items[: args.max_items]
    try:
        check_items(items, args.format, args.inputs)
    except ValueError as e:
        parser.error(str(e))
    outputs = [(f, p) for f, p in (("--output-json", args.output_json), ("--output-tsv", args.output_tsv)) if p]
    reasons = [unwritable_file(path, flag) for flag, path in outputs]
    reasons.append(output_over_input(outputs, [(i, "an input") for i in args.inputs] + [(args.path, "the checkpoint")]))
    for reason in filter(None, reasons):
        parser.error(reason)
    if args.bpe_codes is not None and not os.path.isfile(args.bpe_codes):
        parser.error(
            f"--bpe-codes {args.bpe_codes}: "
            + ("is a directory" if os.path.isdir(args.bpe_codes) else "does not exist")
        )
    average_groups = [g.strip() for g in args.average_groups.split(",") if g.strip()] if args.average_groups else None
    if args.average_groups is not None and not average_groups:
        parser.error(f"--average-groups: give group names separated by commas, got {args.average_groups!r}")
    if average_groups:
        try:
            check_average_groups(items, average_groups)
        except ValueError as e:
            parser.error(str(e))

    try:
        model, task = load_model(
            args.path, args.data_bin, args.source_lang, args.target_lang, parse_overrides(args.model_overrides)
        )
    except (ValueError, FileNotFoundError) as e:
        parser.error(str(e))
    device = torch.device("cuda" if torch.cuda.is_available() and not args.cpu else "cpu")
    model.to(device)
    src_lang = args.source_lang or getattr(task.cfg, "source_lang", None)
    tgt_lang = args.target_lang or getattr(task.cfg, "target_lang", None)
    encode_source = build_encoder(args.tokenizer, args.bpe_codes, src_lang)
    encode_target = build_encoder(args.tokenizer, args.bpe_codes, tgt_lang)

    try:
        report, decisions = evaluate(
            model,
            items,
            task.source_dictionary,
            task.target_dictionary,
            encode_source,
            encode_target,
            unit=args.decision or DEFAULT_DECISION[args.format],
            batch_size=args.batch_size,
            max_tokens=args.max_tokens,
            device=device,
            progress=not args.no_progress,
            average_groups=average_groups,
        )
    except ValueError as e:  # a sentence longer than the model's positions; items of two groups
        where = "line" if args.format == "plain" else "item"
        parser.error(f"{' / '.join(args.inputs)}, {str(e).replace('item ', where + ' ', 1)}")
    report["decision"] = args.decision or DEFAULT_DECISION[args.format]
    report["checkpoint"] = os.path.abspath(args.path)
    report["inputs"] = [os.path.abspath(p) for p in args.inputs]
    print(format_report(report))
    if args.output_tsv:  # first: the JSON (with provenance) is the record that the run finished
        write_decisions_tsv(decisions, args.output_tsv)
    if args.output_json:
        from ..provenance import write_json as write_with_provenance

        write_with_provenance(
            args.output_json, report, argv=None if argv is None else ["fsa-contrastive", *map(str, argv)]
        )
        print(f"wrote {args.output_json}")
    if args.output_tsv:
        print(f"wrote {args.output_tsv}")
    return report


def main(argv=None) -> None:
    """The ``fsa-contrastive`` command: exit status 0 on success (a console script passes
    what its function returns to ``sys.exit``, so :func:`cli_main`'s report would read as
    a failure)."""
    from ..cli import configure_logging

    configure_logging(sys.stderr)  # fairseq's format on stderr, INFO (LOGLEVEL=...), as the fsa-* wrappers
    cli_main(argv)


if __name__ == "__main__":
    main()
