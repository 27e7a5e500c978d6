"""``fsa-analyze heatmap``: one sentence, one layer of one kind: every head's α and
‖αf(x)‖ side by side, plus the layer row."""

from typing import Dict

from .base import KINDS, Context, UsageError, add_model_args

NAME = "heatmap"
HELP = "heatmaps of one sentence: every head of a layer, weights and norms"
# (query axis, key axis) per kind; the decoder's queries are its inputs </s> y_0 .. y_{n-1}:
# row r predicts target token r
AXES = {
    "encoder_self": ("source (query)", "source (key)"),
    "decoder_self": ("decoder input (query)", "decoder input (key)"),
    "cross": ("decoder input (query)", "source (key)"),
}


def add_arguments(p) -> None:
    add_model_args(p)
    p.add_argument("--sentence", type=int, default=0, help="0-based index of the pair (default 0)")
    p.add_argument("--layer", type=int, default=0, help="0-based layer (default 0)")
    p.add_argument("--kind", choices=KINDS, default="cross")
    p.add_argument(
        "--allow-output-norm", action="store_true", help="norms of modules with an output norm (ReLA): pre-norm vectors"
    )


def check_arguments(args) -> None:
    if args.sentence < 0 or args.layer < 0:
        raise UsageError("--sentence and --layer are 0-based indices (>= 0)")


def run(args) -> Dict:
    from ..norms import NormRecorder
    from ..plots import attention_heatmaps
    from ..recording import attention_sites
    from .norms import require_decomposable

    check_arguments(args)
    ctx = Context(args, limit=args.sentence + 1)
    if args.sentence >= len(ctx.examples):
        raise UsageError(
            f"--sentence {args.sentence} is out of range: {ctx.where} has "
            f"{ctx.total} sentence pairs (0-based indices 0..{ctx.total - 1})"
        )
    ex = ctx.examples[args.sentence]
    layers = sorted({s.layer for s in attention_sites(ctx.model) if s.kind == args.kind})
    if args.layer not in layers:
        raise UsageError(
            f"--layer {args.layer} is out of range: the model's {args.kind} "
            f"attention has layers {layers[0]}..{layers[-1]} (0-based)"
        )
    exact = require_decomposable(ctx.model, (args.kind,), args.allow_output_norm, args.path)
    norms = NormRecorder(ctx.model, (args.kind,), args.allow_output_norm)
    ctx.run([norms], examples=[ex])  # one batch: its records stay after the pass
    rec = norms.records[(args.kind, args.layer)][0]
    heads = rec.weights.shape[0]
    prev = ["</s>"] + ex.target_pieces
    source = ex.source_pieces + ["</s>"]
    queries = source if args.kind == "encoder_self" else prev
    keys = prev if args.kind == "decoder_self" else source
    layer_weights = rec.weights.mean(dim=0)
    panels = [
        ("α", [rec.weights[h] for h in range(heads)] + [layer_weights]),
        ("‖α f(x)‖", [rec.head[h] for h in range(heads)] + [rec.layer]),
    ]
    rows = [f"head {h}" for h in range(heads)] + ["layer"]
    titles = [[f"head {h}: α", f"head {h}: ‖α f(x)‖"] for h in range(heads)]
    titles.append(["layer: mean over heads of α", "layer: ‖Σ_h α f(x)‖"])
    title = f"{ctx.title}: {args.kind} attention, layer {args.layer} (0-based), sentence {ex.index}" + (
        "" if exact else " (norms of pre-output-norm vectors)"
    )
    query_axis, key_axis = AXES[args.kind]
    attention_heatmaps(
        panels,
        rows,
        queries,
        keys,
        ctx.out / "heatmap.png",
        title=title,
        titles=titles,
        query_axis=query_axis,
        key_axis=key_axis,
    )
    ctx.out.wrote(ctx.out / "heatmap.png")
    header = ctx.header(NAME)
    header["data"]["sentences"] = 1
    report = {
        **header,
        "sentence": ex.index,
        "kind": args.kind,
        "layer": args.layer,
        "query_tokens": queries,
        "key_tokens": keys,
        "weights": rec.weights.tolist(),
        "norms": rec.head.tolist(),
        "layer_weights": layer_weights.tolist(),
        "layer_norms": rec.layer.tolist(),
        "image": "heatmap.png",
    }
    ctx.out.json("heatmap.json", report)
    return report
