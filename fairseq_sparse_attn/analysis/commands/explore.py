"""``fsa-analyze explore``: one self-contained HTML file to browse every head of the first
``--n`` sentence pairs: α or ‖αf(x)‖, subwords or words, null rows and sparsity, fixed
heads named (data: :mod:`..explorer`, page: :mod:`..explorer_html`)."""

import os
from typing import Dict

from .base import Context, UsageError, add_model_args, positive_int, resolve_data

NAME = "explore"
HELP = "interactive HTML explorer of every head (weights and norms), one file"


def add_arguments(p) -> None:
    add_model_args(p, output_dir=False, max_sentences=False, data_option=True)
    p.add_argument(
        "--n",
        type=positive_int,
        default=20,
        metavar="N",
        help="the first N sentence pairs (default 20; the file grows with N)",
    )
    p.add_argument(
        "--out", default="explore.html", metavar="FILE", help="the HTML file to write (default explore.html)"
    )


def _inputs(args):
    """(path, what) of every file this command reads."""
    inputs = [(args.path, "the checkpoint")]
    for flag in ("raw_source", "raw_target", "bpe_codes", "target_bpe_codes"):
        if getattr(args, flag, None):
            inputs.append((getattr(args, flag), "--" + flag.replace("_", "-")))
    if os.path.isdir(args.data):
        inputs += [
            (os.path.join(args.data, name), f"a file of the data directory {args.data}")
            for name in os.listdir(args.data)
        ]
    return inputs


def run(args) -> Dict:
    from ...provenance import provenance
    from ...writers import output_over_input, unwritable_file, write_text
    from ..explorer import ExplorerCollector, explorer_data, norm_support
    from ..explorer_html import render

    resolve_data(args)
    if os.path.isdir(args.out):
        raise UsageError(f"--out {args.out}: is a directory; give the HTML file to write")
    # before the model and the data load; an --out naming an input (the checkpoint, a file
    # of the data directory, a raw text or BPE codes file) would replace it
    reason = unwritable_file(args.out, "--out") or output_over_input([("--out", args.out)], _inputs(args))
    if reason:
        raise UsageError(reason)
    args.output_dir = os.path.dirname(os.path.abspath(args.out))
    args.max_sentences = args.n
    ctx = Context(args)
    norm_kinds = [k for k, (defined, _, _) in norm_support(ctx.model).items() if defined]
    collector = ExplorerCollector(ctx.model, norm_kinds)
    ctx.run([collector])
    header = ctx.header(NAME)
    header["provenance"] = provenance(argv=getattr(args, "argv", None))
    data = explorer_data(ctx.model, ctx.examples, collector, args.subword_scheme, ctx.title, header)
    path = os.path.abspath(args.out)
    write_text(path, render(data))
    size = os.path.getsize(path)
    ctx.out.wrote(path, note=f"{len(data['sentences'])} sentences, {size / 1024:.0f} KiB")
    return data
