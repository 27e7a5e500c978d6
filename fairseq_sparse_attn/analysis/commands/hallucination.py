"""``fsa-analyze hallucination``: ReLA's hallucination test, the cross-attention null rate
per layer and head with the real targets and with targets shuffled across sentences."""

from typing import Dict

from .base import Context, add_model_args, add_plots_flag

NAME = "hallucination"
HELP = "ReLA's hallucination test: cross null rate, real vs shuffled targets"


def add_arguments(p) -> None:
    add_model_args(p)
    p.add_argument("--seed", type=int, default=1, help="seed of the target shuffle (default 1)")
    add_plots_flag(p)


def run(args) -> Dict:
    from ..attention_stats import SparsityStats
    from ..loading import shuffle_targets
    from ..plots import real_vs_shuffled

    ctx = Context(args)
    shuffled, perm = shuffle_targets(ctx.examples, args.seed)
    real = SparsityStats(("cross",))
    fake = SparsityStats(("cross",))
    ctx.run([real], description="real targets")
    ctx.run([fake], examples=shuffled, description="shuffled targets")
    real_heads, fake_heads = real.per_head(), fake.per_head()
    layers, rows = [], []
    for kind, layer in sorted(real_heads):
        r, s = real_heads[(kind, layer)]["null_rate"], fake_heads[(kind, layer)]["null_rate"]
        mr, ms = sum(r) / len(r), sum(s) / len(s)
        layers.append(
            {
                "layer": layer,
                "null_rate_real": mr,
                "null_rate_shuffled": ms,
                "difference": ms - mr,
                "per_head": {"real": r, "shuffled": s},
            }
        )
        rows.append((layer, "all", mr, ms))
        rows += [(layer, h, r[h], s[h]) for h in range(len(r))]

    def mean(xs):
        return sum(xs) / len(xs)

    report = {
        **ctx.header(NAME),
        "seed": args.seed,
        "permutation": perm,
        "layers": layers,
        "mean": {
            "null_rate_real": mean([e["null_rate_real"] for e in layers]),
            "null_rate_shuffled": mean([e["null_rate_shuffled"] for e in layers]),
        },
    }
    ctx.out.json("hallucination.json", report, seed=args.seed)
    ctx.out.tsv("hallucination.tsv", ("layer", "head", "null_rate_real", "null_rate_shuffled"), rows)
    if not args.no_plots:
        real_vs_shuffled(
            [e["layer"] for e in layers],
            [e["null_rate_real"] for e in layers],
            [e["null_rate_shuffled"] for e in layers],
            ctx.out / "hallucination.png",
            title=f"cross-attention null rate: {ctx.title}",
        )
        ctx.out.wrote(ctx.out / "hallucination.png")
    return report
