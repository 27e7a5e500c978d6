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
    fsa-analyze aer-table     RUN_DIR ... --output-dir OUT      Kobayashi et al. Table 3 rows over seeds
    fsa-analyze explore       --path CKPT --data DATA --n 20 --out explore.html
                                                                   one self-contained HTML page of every head

``DATA`` is a fairseq-preprocess directory: its dictionaries, and the ``--split`` to
analyse (default ``test``) unless ``--raw-source``/``--raw-target`` give raw text
(tokenized with ``--tokenizer moses`` and segmented with ``--bpe-codes``).  Every pass
is teacher-forced (the reference target is the decoder input), batched (``--batch-size``,
``--max-tokens``), on ``--device``; ``--max-sentences N`` analyses the first N pairs.
Results: JSON (schema in docs/analysis.md, "fsa-analyze"; each with its provenance), TSV
and PNG in ``--output-dir``; every file written is printed on stdout.

One module per subcommand in :mod:`.commands`; this module only dispatches.
"""

import argparse
import sys
from typing import Dict, Optional, Sequence

from ..errors import OneLineErrorParser
from . import commands
from .commands.align import read_gold  # noqa: F401  (public API)
from .commands.base import KINDS, Context, UsageError, add_model_args  # noqa: F401
from .results import SCHEMA_VERSION, committed_outputs, write_json, write_tsv  # noqa: F401

_MODULES = commands.load()
SUBCOMMANDS = tuple(_MODULES)
COMMANDS = {name: module.run for name, module in _MODULES.items()}


def get_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="fsa-analyze",
        description="Attention analyses of a fairseq_sparse_attn (or stock fairseq transformer) "
        "checkpoint: teacher-forced passes over a data split, JSON/TSV/PNG results.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in _MODULES.items():
        module.add_arguments(sub.add_parser(name, help=module.HELP))
    return parser


def run(argv: Optional[Sequence[str]] = None) -> Dict:
    """Parse ``argv`` and run the subcommand; errors propagate (see :func:`main`)."""
    args = get_parser().parse_args(argv)
    # the command line each result's provenance records (this call's, not the process's)
    args.argv = None if argv is None else ["fsa-analyze", *map(str, argv)]
    with committed_outputs():  # results put in place whole, only when the command succeeds
        return COMMANDS[args.command](args)


def main(argv: Optional[Sequence[str]] = None) -> int:
    import logging

    # before fairseq is imported: one of its modules sets the root logger to DEBUG when
    # nothing is configured yet
    logging.basicConfig(
        format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        level=logging.INFO,
        stream=sys.stderr,
    )
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
