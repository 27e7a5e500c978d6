#!/usr/bin/env python
"""Where decoding at batch 1 spends its time: the CPU cost of one incremental attention
call (query length 1, beam 4, 24 cached keys) of the demo-size model, per variant, and two
diagnostic variants that split ReLA-g's extra cost into its parts:

* ``softmax``            stock: the façade hands the call to fairseq's MultiheadAttention
* ``softmax_pipeline``   softmax through the plugin's own pipeline (``attend()``, materialized
                         backend): the cost of the pipeline itself
* ``rela_g_no_norm``     ReLA-g with its gated RMSNorm replaced by the identity: the cost of
                         the output norm is rela_g minus this
* ``rela_g``, ``rela_i``

Paired interleaved rounds (``timing.py``); by default the CPU clock with one thread, so the
figures hold on a shared machine.  Per-call microseconds and the ratio against stock
softmax (> 1 = slower here, unlike bench_attention's speed ratios).

    python benchmarks/decode_step_costs.py --rounds 15 [--json costs.json]
    python benchmarks/decode_step_costs.py --rounds 15 --before REV   # a change, per call

``--before REV`` adds ``softmax_pipeline``, ``rela_g`` and ``rela_i`` with the attention code
of git revision REV (``bench_attention.attention_class_at``) to the same rounds.
"""

import argparse
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from timing import interleaved_rounds, pin_threads, summarize_ratios  # noqa: E402

pin_threads(1)
import torch  # noqa: E402

VARIANTS = ("softmax", "softmax_pipeline", "rela_g_no_norm", "rela_g", "rela_i")


def attention_module(variant, kind, dictionary, before=None):
    from bench_attention import build, run_attention_as

    variant, _, rev = variant.partition("@")
    model = build(
        {"softmax_pipeline": "softmax", "rela_g_no_norm": "rela_g"}.get(variant, variant),
        "small",
        dictionary,
        torch.device("cpu"),
    ).eval()
    if rev:
        run_attention_as(model, before)
    layer = model.decoder.layers[1]
    module = layer.self_attn if kind == "self" else layer.encoder_attn
    if variant == "softmax_pipeline":
        module.backend = "materialized"
    if variant == "rela_g_no_norm":
        module.output_norm = torch.nn.Identity()
    return module


def step_job(module, kind, steps, beam=4, src_len=24, dim=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, beam, dim, generator=g)
    enc = torch.randn(src_len, beam, dim, generator=g)
    pad = torch.zeros(beam, src_len, dtype=torch.bool)

    def run():
        state = {}
        with torch.no_grad():
            for _ in range(steps):
                if kind == "self":
                    module(x, x, x, incremental_state=state, need_weights=False)
                else:
                    module(
                        x, enc, enc, key_padding_mask=pad, incremental_state=state, static_kv=True, need_weights=False
                    )

    return run


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--steps", type=int, default=20, help="decoding steps per job (calls per timing unit)")
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    p.add_argument("--min-time", type=float, default=0.2, help="seconds one timing of softmax lasts at least")
    p.add_argument("--before", default=None, metavar="REV", help="also time the attention code of git revision REV")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    import fairseq_sparse_attn.plugin  # noqa: F401
    from fairseq_sparse_attn.models.standalone import synthetic_dictionary

    dictionary = synthetic_dictionary(8000)
    result = {
        "clock": args.clock,
        "threads": torch.get_num_threads(),
        "steps": args.steps,
        "unit": "microseconds per attention call",
        "kinds": {},
    }
    variants, before = list(VARIANTS), None
    if args.before:
        from bench_attention import attention_class_at

        sha, before = attention_class_at(args.before)
        variants += [f"{v}@{sha}" for v in ("softmax_pipeline", "rela_g", "rela_i")]
        result["before"] = {"rev": args.before, "sha": sha}
    for kind in ("self", "cross"):
        jobs = {v: step_job(attention_module(v, kind, dictionary, before), kind, args.steps) for v in variants}
        run = interleaved_rounds(jobs, "softmax", args.rounds, warmup=2, min_time=args.min_time, clock=args.clock)
        per_call = {v: statistics.median(run["times"][v]) / args.steps * 1e6 for v in variants}
        cost = {v: summarize_ratios([1 / s for s in run["speed"][v]]) for v in variants}
        result["kinds"][kind] = {
            "per_call_us": per_call,
            "cost_vs_stock_softmax": cost,
            "times_s": run["times"],
            "reps_per_timing": run["reps"],
        }
        print(
            f"\n{kind}-attention, one incremental call (beam 4, 24 keys), {args.clock} clock, "
            f"median of {args.rounds} paired rounds"
        )
        for v in variants:
            c = cost[v]
            print(f"  {v:26s} {per_call[v]:7.1f} us   x{c['median']:.3f} [{c['ci95_low']:.3f}, {c['ci95_high']:.3f}]")
    if args.json:
        from fairseq_sparse_attn.provenance import write_json

        write_json(args.json, result, seed=0)
        print(f"json: {args.json}")


if __name__ == "__main__":
    main()
