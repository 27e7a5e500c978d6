"""``fsa-analyze norms``: the norm-based analysis of Kobayashi et al. (2020): mean ‖f(x)‖,
α, ‖αf(x)‖ per head, ‖Σ_h αf‖ per layer, Spearman ρ(α, ‖f(x)‖) per key category."""

from typing import Dict

from .base import KINDS, Context, UsageError, add_model_args, add_plots_flag

NAME = "norms"
HELP = "norm-based analysis (Kobayashi et al. 2020)"


def add_arguments(p) -> None:
    add_model_args(p)
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    p.add_argument(
        "--spearman-unit",
        choices=("pair", "key"),
        default="pair",
        help="one value per (query, key, head) pair (default) or per (key, head)",
    )
    p.add_argument(
        "--allow-output-norm",
        action="store_true",
        help="allow modules with an output norm (ReLA): norms of the pre-norm vectors",
    )
    add_plots_flag(p)


def require_decomposable(model, kinds, allow_output_norm: bool, path: str) -> bool:
    """The model-level check of :func:`..norms.check_decomposable` as a usage error naming
    the checkpoint; returns whether the decomposition is exact (no output norm)."""
    from ..norms import model_decomposition

    try:
        return model_decomposition(model, kinds, allow_output_norm)
    except ValueError as e:
        hint = ""
        if "value term" in str(e) and "encoder_self" in kinds:
            hint = "; leave encoder self-attention out (--kinds cross decoder_self) to analyse the rest"
        raise UsageError(f"{path}: {e}{hint}") from None


def run(args) -> Dict:
    from ..norms import NormSummary, dictionary_categorizer
    from ..plots import layer_curves

    ctx = Context(args)
    exact = require_decomposable(ctx.model, args.kinds, args.allow_output_norm, args.path)
    src = dictionary_categorizer(ctx.loaded.source_dictionary)
    tgt = dictionary_categorizer(ctx.loaded.target_dictionary)
    summary = NormSummary(
        ctx.model,
        {"encoder_self": src, "cross": src, "decoder_self": tgt},
        args.kinds,
        args.allow_output_norm,
        args.spearman_unit,
    )
    ctx.run([summary])
    res = summary.results()
    report = {
        **ctx.header(NAME),
        "kinds": list(args.kinds),
        "spearman_unit": args.spearman_unit,
        "allow_output_norm": args.allow_output_norm,
        "exact_decomposition": exact,
        "layers": res["layers"],
        "spearman": res["spearman"],
    }
    ctx.out.json("norms.json", report)
    rows = []
    for kind, layers in res["layers"].items():
        for e in layers:
            for h in range(e["heads"]):
                rows += [(kind, e["layer"], h, name, e[name][h]) for name in ("f_norm", "alpha", "alpha_f_norm")]
            rows.append((kind, e["layer"], "all", "layer_norm", e["layer_norm"]))
    ctx.out.tsv("norms.tsv", ("kind", "layer", "head", "statistic", "value"), rows)
    rows = []
    for kind, layers in res["layers"].items():
        for label, c in res["spearman"].get(kind, {}).items():
            rows.append((kind, "all", label, c["rho"], c["count"], c["mean_alpha"], c["mean_f_norm"]))
        for e in layers:
            for label, c in e["spearman"].items():
                rows.append((kind, e["layer"], label, c["rho"], c["count"], c["mean_alpha"], c["mean_f_norm"]))
    ctx.out.tsv("norms_spearman.tsv", ("kind", "layer", "category", "rho", "count", "mean_alpha", "mean_f_norm"), rows)
    if not args.no_plots:

        def head_mean(values):
            return sum(values) / len(values)

        series = {
            name: {kind: [(e["layer"], head_mean(e[name])) for e in layers] for kind, layers in res["layers"].items()}
            for name in ("alpha", "f_norm", "alpha_f_norm")
        }
        series["layer_norm"] = {
            kind: [(e["layer"], e["layer_norm"]) for e in layers] for kind, layers in res["layers"].items()
        }
        layer_curves(
            series,
            ctx.out / "norms.png",
            title=ctx.title,
            ylabels={
                "alpha": "mean α",
                "f_norm": "mean ‖f(x)‖",
                "alpha_f_norm": "mean ‖αf(x)‖",
                "layer_norm": "mean ‖Σ αf(x)‖",
            },
        )
        ctx.out.wrote(ctx.out / "norms.png")
    return report
