"""``fsa-analyze stats``: sparsity, null rate, entropy H(ŝ), top-p% score sums per kind /
layer / head; head JS per layer; FFN statistics (ReLUFormer)."""

from typing import Dict

from .base import Context, add_model_args, add_plots_flag, fraction_list, positive_float_list

NAME = "stats"
HELP = "sparsity, null rate, entropy, top-p%%, head JS divergence, FFN anisotropy / variance ratio / top-p mass"


def add_arguments(p) -> None:
    add_model_args(p)
    p.add_argument(
        "--top-p",
        type=fraction_list,
        default=[0.01, 0.05, 0.1],
        metavar="P,...",
        help="top-p fractions for the score sums (0.01 = top-1%%; default 0.01,0.05,0.1)",
    )
    p.add_argument(
        "--temperatures",
        type=positive_float_list,
        default=[1.0, 0.5, 0.25, 0.1],
        metavar="T,...",
        help="JS re-normalization temperatures of ReLU-type attention (ReLA Table 6; default 1,0.5,0.25,0.1)",
    )
    p.add_argument(
        "--js-mode",
        choices=("power", "divide"),
        default="power",
        help="re-normalization softmax(α^τ) (ReLA's wording, default) or softmax(α/τ)",
    )
    p.add_argument("--no-ffn", action="store_true", help="skip the FFN statistics")
    add_plots_flag(p)


def tsv_rows(attention: Dict, ffn) -> list:
    rows = []
    for kind, layers in attention.items():
        for e in layers:
            scalar = {
                "sparsity": e["sparsity"],
                "null_rate": e["null_rate"],
                "entropy": e["entropy"],
                "js": e["js"],
                **{f"top_p@{p}": v for p, v in e["top_p"].items()},
                **{f"js@tau={t}": v for t, v in (e["js_temperatures"] or {}).items()},
            }
            rows += [(kind, e["layer"], "all", name, value) for name, value in scalar.items()]
            ph = e["per_head"]
            for h in range(e["heads"]):
                per = {
                    "sparsity": ph["sparsity"][h],
                    "null_rate": ph["null_rate"][h],
                    "entropy": None if ph["entropy"] is None else ph["entropy"][h],
                    **{f"top_p@{p}": (None if v is None else v[h]) for p, v in ph["top_p"].items()},
                }
                rows += [(kind, e["layer"], h, name, value) for name, value in per.items()]
    for e in ffn or []:
        for name in ("anisotropy_keys", "anisotropy_values", "variance_ratio"):
            rows.append((f"{e['side']}_ffn", e["layer"], "-", name, e[name]))
        rows += [(f"{e['side']}_ffn", e["layer"], "-", f"top_p_mass@{p}", v) for p, v in e["top_p_mass"].items()]
    return rows


def run(args) -> Dict:
    from ..attention_stats import AttentionStatistics
    from ..ffn_stats import FFNStatistics
    from ..plots import layer_curves

    ctx = Context(args)
    stats = AttentionStatistics(ctx.model, args.top_p, args.temperatures, args.js_mode)
    ffn = None if args.no_ffn else FFNStatistics(ctx.model, args.top_p)
    ctx.run([stats] if ffn is None else [stats, ffn])
    attention = stats.layers()
    report = {
        **ctx.header(NAME),
        "top_p": args.top_p,
        "temperatures": args.temperatures,
        "js_mode": args.js_mode,
        "attention": attention,
        "ffn": None if ffn is None else ffn.results(),
    }
    ctx.out.json("stats.json", report)
    ctx.out.tsv("stats.tsv", ("kind", "layer", "head", "statistic", "value"), tsv_rows(attention, report["ffn"]))
    if not args.no_plots:
        series = {
            name: {kind: [(e["layer"], e[name]) for e in layers] for kind, layers in attention.items()}
            for name in ("sparsity", "null_rate", "entropy", "js")
        }
        layer_curves(series, ctx.out / "stats.png", title=ctx.title)
        ctx.out.wrote(ctx.out / "stats.png")
    return report
