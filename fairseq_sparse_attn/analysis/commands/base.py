"""What every ``fsa-analyze`` subcommand shares: command-line types, the flags of the
subcommands that run a model (:func:`add_model_args`), and :class:`Context` (the loaded
checkpoint, the sentence pairs and the output directory).

A subcommand is one module of this package with ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> report``, listed in
:data:`fairseq_sparse_attn.analysis.commands.MODULES`.
"""

import argparse
import os
from typing import Dict, List, Optional

from ...attention.config import ATTENTION_KINDS as KINDS  # noqa: F401  (re-exported)
from ...errors import UsageError  # bad input, reported as ``fsa-analyze <cmd>: error: ...`` (exit 2)
from ..results import SCHEMA_VERSION, Output, check_output_dir


def float_list(text: str) -> List[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one number, got {text!r}")
    return values


def positive_float_list(text: str) -> List[float]:
    """Comma-separated numbers, each > 0 (``--temperatures``: a temperature of 0 or below was
    recorded on a softmax model, and on a ReLU one failed after the model and data loaded)."""
    values = float_list(text)
    bad = [v for v in values if not v > 0]
    if bad:
        raise argparse.ArgumentTypeError(f"every value must be > 0, got {text!r}")
    return values


def fraction_list(text: str) -> List[float]:
    """Comma-separated fractions, each in (0, 1] (``--top-p``: 0 or 1.5 was refused only
    after the model and the split had loaded)."""
    values = float_list(text)
    if any(not 0 < v <= 1 for v in values):
        raise argparse.ArgumentTypeError(f"every value must be a fraction in (0, 1] (top-1% is 0.01), got {text!r}")
    return values


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available")
    return torch.device(name)


class Context:
    """The loaded checkpoint, the examples and where the results go."""

    def __init__(self, args, limit: Optional[int] = None):
        from ..loading import (
            check_lengths,
            check_source_annotations_available,
            examples_from_raw,
            examples_from_split,
            load_checkpoint,
            parse_overrides,
            read_text_lines,
            split_size,
        )

        self.args = args
        try:  # before any work: a file named as --output-dir
            check_output_dir(args.output_dir)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if (args.raw_source is None) != (args.raw_target is None):
            raise UsageError("--raw-source and --raw-target go together (line-aligned raw text)")
        if args.target_bpe_codes is not None and args.bpe_codes is None:
            raise UsageError("--target-bpe-codes goes with --bpe-codes (the source side's codes)")
        if args.raw_source is None and (args.tokenizer != "none" or args.bpe_codes is not None):
            raise UsageError(
                "--tokenizer / --bpe-codes apply to raw text "
                "(--raw-source/--raw-target); a data-bin split is already encoded"
            )
        self.device = device(args.device)
        self.loaded = load_checkpoint(
            args.path, args.data, args.source_lang, args.target_lang, parse_overrides(args.model_overrides), self.device
        )
        task = self.loaded.task
        limit = args.max_sentences if limit is None else limit
        self.binarized = args.raw_source is None  # pieces from a data-bin split
        if not self.binarized:
            self.examples = examples_from_raw(
                task,
                args.raw_source,
                args.raw_target,
                args.tokenizer,
                args.bpe_codes,
                limit,
                args.source_lang,
                args.target_lang,
                target_bpe_codes=args.target_bpe_codes,
            )
            self.total = len(read_text_lines(args.raw_source))
            self.where = f"{args.raw_source} / {args.raw_target}"
            self.data = {
                "data_bin": os.path.abspath(args.data),
                "raw_source": os.path.abspath(args.raw_source),
                "raw_target": os.path.abspath(args.raw_target),
                "tokenizer": args.tokenizer,
                "bpe_codes": None if args.bpe_codes is None else os.path.abspath(args.bpe_codes),
            }
            if args.target_bpe_codes is not None:  # per-language BPE
                self.data["target_bpe_codes"] = os.path.abspath(args.target_bpe_codes)
        else:
            self.examples = examples_from_split(task, args.split, limit)
            self.total = split_size(task, args.split)
            self.where = f"{args.data} split {args.split!r}"
            self.data = {"data_bin": os.path.abspath(args.data), "split": args.split}
        # the direction analysed (a model's two languages, checked against its record)
        self.data["source_lang"] = getattr(task.cfg, "source_lang", None)
        self.data["target_lang"] = getattr(task.cfg, "target_lang", None)
        if not self.examples:
            raise UsageError(f"{self.where}: no sentence pairs to analyse")
        check_lengths(self.examples, self.loaded.model, self.where)
        check_source_annotations_available(self.loaded.model, self.examples, self.where, args.path)
        self.out = Output(args.output_dir, argv=getattr(args, "argv", None))

    @property
    def model(self):
        return self.loaded.model

    @property
    def title(self) -> str:
        """The plots' title: the model's architecture and its run (:func:`model_title`)."""
        return model_title(self.args.path, self.loaded.arch)

    def header(self, command: str) -> Dict:
        return {
            "command": command,
            "schema_version": SCHEMA_VERSION,
            "model": self.loaded.describe(),
            "data": {**self.data, "sentences": len(self.examples), "sentences_in_data": self.total},
        }

    def run(self, collectors, examples=None, description=None) -> int:
        from ..collect import run_passes

        src, tgt = self.loaded.source_dictionary, self.loaded.target_dictionary
        return run_passes(
            self.model,
            self.examples if examples is None else examples,
            collectors,
            src.pad(),
            tgt.pad(),
            tgt.eos(),
            self.args.batch_size,
            self.args.max_tokens,
            self.device,
            not self.args.no_progress,
            description or self.args.command,
        )


def add_model_args(
    p: argparse.ArgumentParser, output_dir: bool = True, max_sentences: bool = True, data_option: bool = False
) -> None:
    """The flags of a subcommand that runs a model; ``output_dir`` / ``max_sentences``:
    whether it takes ``--output-dir`` / ``--max-sentences`` (``explore`` writes one file,
    ``--out``, and limits with ``--n``); ``data_option``: DATA may also be given as
    ``--data DATA`` (see :func:`resolve_data`)."""
    from ...subwords import SUBWORD_SCHEMES

    data_help = "fairseq-preprocess directory (dictionaries; the split unless raw text is given)"
    if data_option:
        p.add_argument("data", metavar="DATA", nargs="?", help=data_help)
        p.add_argument("--data", dest="data_option", metavar="DATA", help="the same as DATA")
    else:
        p.add_argument("data", metavar="DATA", help=data_help)
    p.add_argument(
        "--path",
        required=True,
        metavar="CHECKPOINT",
        help="checkpoint trained with the plugin, or a stock fairseq transformer",
    )
    if output_dir:
        p.add_argument("--output-dir", required=True, metavar="DIR", help="where results are written")
    p.add_argument("--split", default="test", help="split of DATA to analyse (default: test)")
    p.add_argument(
        "--raw-source",
        metavar="FILE",
        help="raw source text, one sentence per line (instead of --split; with --raw-target)",
    )
    p.add_argument("--raw-target", metavar="FILE", help="raw target text, line-aligned with --raw-source")
    p.add_argument(
        "--tokenizer",
        choices=("moses", "none"),
        default="none",
        help="raw text: tokenize before BPE (default none: already tokenized)",
    )
    p.add_argument("--bpe-codes", metavar="FILE", help="raw text: subword-nmt codes (default: already segmented)")
    p.add_argument(
        "--target-bpe-codes",
        metavar="FILE",
        help="raw text: subword-nmt codes of the target side when they differ from "
        "--bpe-codes (per-language BPE, e.g. Europarl De-En; default: --bpe-codes)",
    )
    p.add_argument("-s", "--source-lang", default=None)
    p.add_argument("-t", "--target-lang", default=None)
    p.add_argument(
        "--subword-scheme",
        choices=SUBWORD_SCHEMES,
        default="subword-nmt",
        help="how pieces form words ('@@' continuation, '▁' word start, or none); "
        "alignments and the text of filter's output (default subword-nmt)",
    )
    p.add_argument("--batch-size", type=positive_int, default=32, help="max pairs per batch (default 32)")
    p.add_argument("--max-tokens", type=positive_int, default=None, help="max padded tokens per batch")
    if max_sentences:
        p.add_argument(
            "--max-sentences",
            type=positive_int,
            default=None,
            metavar="N",
            help="analyse only the first N sentence pairs (a quick look)",
        )
    p.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="default: cuda when available, else cpu"
    )
    p.add_argument(
        "--model-overrides",
        default=None,
        metavar="DICT",
        help="Python dict literal of model arguments to override, as fairseq-generate's",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def resolve_data(args) -> None:
    """``args.data`` from DATA or ``--data`` (one of them, or both the same)."""
    given = [d for d in (args.data, getattr(args, "data_option", None)) if d is not None]
    if not given:
        raise UsageError("the data-bin directory is missing: give it as DATA or --data DATA")
    if len(set(given)) > 1:
        raise UsageError(f"DATA {given[0]!r} and --data {given[1]!r} differ: give one")
    args.data = given[0]


def add_plots_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-plots", action="store_true", help="no PNG")


def checkpoint_name(args) -> str:
    return os.path.basename(args.path)


def model_title(path: str, arch: str) -> str:
    """A title naming the model and the run: ``"<arch>, run <folder>/<file>"`` (the folder
    of a training run says which run it is; ``checkpoint_best.pt`` alone does not)."""
    path = os.path.abspath(path)
    run = os.path.basename(os.path.dirname(path))
    name = os.path.basename(path)
    return f"{arch}, run {run}/{name}" if run else f"{arch}, {name}"
