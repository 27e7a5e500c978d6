#!/usr/bin/env python
"""Where the host time of one kernel op goes, piece by piece, against one aten op.

On the H200 (2026-11-28) a kernel op of the triton backend cost a training step ~350 µs of
host time where the CPU proxy puts it at ~40-50 µs (docs/performance.md, "The 2026-11-28
H200 session").  A profile of a whole step spreads that over hundreds of ops and adds its
own overhead to each; this times the pieces of one op alone, each as many calls in a row
as fill ``--min-time``, in interleaved rounds (benchmarks/timing.py), on the norm's forward
(``fsa::rms_norm_fwd``: one kernel, five tensors) and the ReLU-attention forward
(``fsa::relu_attention_fwd``: one kernel, eight tensors), at a sentence's size:

* ``aten_add``: ``torch.add`` of two tensors of the norm's input size: one aten op, one
  launch (the reference every row is divided by);
* ``aten_empty``: ``torch.empty_like``: an allocation, no launch;
* ``<op>_op``: the op dispatched below autograd (what the ``autograd.Function`` calls):
  the dispatcher's call into the Python implementation, the implementation, the launch;
* ``<op>_impl``: the Python implementation called directly (no dispatcher): the plan's
  lookup, the outputs' allocations, the launch;
* ``<op>_plan``: the plan's launch alone (``LaunchPlan.__call__``, the direct path);
* ``<op>_launcher``: the compiled kernel's launcher alone, as the plan calls it (Triton's
  C launcher and the driver's ``cuLaunchKernel``);
* ``<op>_triton``: the same launch through Triton's own path (``JITFunction.run``:
  binding, specialization, the kernel-cache key, then the launcher).

``--device cuda`` times wall clock with a synchronization before and after each timing
(the GPU finishes these small kernels faster than the host issues them, so the time is the
host's).  ``--device cpu`` runs the same pieces with the null driver of
benchmarks/triton_host_launch.py (the kernels compiled for sm_90, the launcher stubbed):
a check of this script, not a GPU's figures.

    python benchmarks/launch_costs.py --device cuda --json launch-costs.json
"""

import argparse
import contextlib
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from timing import interleaved_rounds, pin_threads  # noqa: E402

pin_threads(1)

import torch  # noqa: E402

BASELINE = "aten_add"


def capture_launch(module, call):
    """(LaunchPlan, tensors) of the launch that ``call()`` makes through ``module._launch``."""
    seen = {}
    real = module._launch

    def grab(plan, tensors):
        seen.update(plan=plan, tensors=tensors)
        real(plan, tensors)

    module._launch = grab
    try:
        call()
    finally:
        module._launch = real
    plan = seen["plan"]
    return getattr(plan, "launch", plan), seen["tensors"]


def launch_jobs(prefix, op, impl, args, module):
    """The pieces of one kernel op (module docstring) as jobs: name -> callable."""
    plan, tensors = capture_launch(module, lambda: impl(*args))
    plan(tensors)  # the direct launcher kept (aligned tensors: fresh allocations)
    if not plan.interpreted and plan.direct is None:
        raise SystemExit(f"launch_costs: {prefix}: the plan kept no direct launcher (misaligned tensors?)")
    jit = plan.forms.compiled
    options = dict(**plan.constexprs, num_warps=plan.num_warps, num_stages=plan.num_stages)
    run = jit[plan.grid]
    all_args = (*tensors, *plan.scalars)

    def below_autograd():
        with torch._C._AutoDispatchBelowAutograd():
            op(*args)

    # the launcher row: what the plan's direct path calls, set up outside the timed call (the
    # stream is looked up per call, as the plan does)
    from triton.runtime import driver

    kernel = plan.direct[3] if plan.direct is not None else None
    values = (*tensors, *plan.direct[4]) if plan.direct is not None else ()
    grid_xyz = (*plan.grid, 1, 1)[:3]

    def launcher():
        active = driver.active
        stream = active.get_current_stream(active.get_current_device())
        kernel.run(*grid_xyz, stream, kernel.function, kernel.packed_metadata, None, None, None, *values)

    return {
        f"{prefix}_op": below_autograd,
        f"{prefix}_impl": lambda: impl(*args),
        f"{prefix}_plan": lambda: plan(tensors),
        f"{prefix}_launcher": launcher,
        f"{prefix}_triton": lambda: run(*all_args, **options),
    }


def build_jobs(device, dtype, rows, heads, length):
    from fairseq_sparse_attn.kernels import output_norm, relu_attention
    from fairseq_sparse_attn.kernels.launch import clear_plans

    clear_plans()
    d = 64
    width = heads * d
    g = torch.Generator().manual_seed(0)
    z = torch.randn(rows, width, generator=g).to(device=device, dtype=dtype)
    other = torch.randn(rows, width, generator=g).to(device=device, dtype=dtype)
    w = torch.ones(width, device=device, dtype=dtype)
    gw = torch.full((width,), 0.1, device=device, dtype=dtype)
    bsz = max(1, rows // length)
    q, k, v = (torch.randn(bsz, heads, length, d, generator=g).to(device=device, dtype=dtype) for _ in range(3))
    pad = torch.zeros(bsz, length, dtype=torch.bool, device=device)
    jobs = {
        BASELINE: lambda: torch.add(z, other),
        "aten_empty": lambda: torch.empty_like(z),
    }
    jobs.update(
        launch_jobs("norm_fwd", output_norm.rms_norm_fwd, output_norm._fwd_impl, (z, w, gw, 1e-8, 1e-2), output_norm)
    )
    attention_args = (q, k, v, pad, False, 1, 0.125, False, 1.0, None, 0.0)
    jobs.update(
        launch_jobs(
            "attention_fwd", relu_attention.relu_attention_fwd, relu_attention._fwd_impl, attention_args, relu_attention
        )
    )
    return jobs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--dtype", default="float16", choices=("float16", "bfloat16", "float32"))
    p.add_argument("--heads", type=int, default=8, help="attention heads of head dim 64 (default 8: width 512)")
    p.add_argument("--length", type=int, default=24, help="tokens per sentence (default 24)")
    p.add_argument("--rows", type=int, default=192, help="tokens of the norm's input (default 192: 8 x 24)")
    p.add_argument("--rounds", type=int, default=11)
    p.add_argument("--min-time", type=float, default=0.1, help="seconds one timing of aten_add lasts at least")
    p.add_argument("--json", default=None, help="write the results here (with provenance)")
    args = p.parse_args(argv)
    on_cuda = args.device == "cuda"
    if on_cuda and not torch.cuda.is_available():
        raise SystemExit("launch_costs: --device cuda needs a CUDA device (--device cpu checks the script)")
    dtype = getattr(torch, args.dtype)
    if on_cuda:
        stub = contextlib.nullcontext()
        launches = "real"
    else:
        from triton_host_launch import host_only_launches

        stub = host_only_launches()
        launches = "null driver (sm_90): the launcher stubbed"
    with stub:
        jobs = build_jobs(torch.device(args.device), dtype, args.rows, args.heads, args.length)

        def sync():
            if on_cuda:
                torch.cuda.synchronize()

        timed = interleaved_rounds(
            jobs, BASELINE, rounds=args.rounds, min_time=args.min_time, sync=sync, clock="wall" if on_cuda else "cpu"
        )
    rows = {}
    for name in jobs:
        per_call = [t * 1e6 for t in timed["times"][name]]
        rows[name] = {
            "us_per_call": statistics.median(per_call),
            "min": min(per_call),
            "max": max(per_call),
            "vs_aten_add": statistics.median(1 / s for s in timed["speed"][name]),
        }
    result = {
        "what": "host time per call of the pieces of one kernel op, against one aten op (benchmarks/launch_costs.py)",
        "device": args.device,
        "dtype": args.dtype,
        "kernel_launches": launches,
        "clock": timed["clock"],
        "shape": {"heads": args.heads, "head_dim": 64, "length": args.length, "rows": args.rows},
        "rounds": args.rounds,
        "reps_per_timing": timed["reps"],
        "pieces": rows,
    }
    print(format_table(result))
    if args.json:
        from fairseq_sparse_attn.provenance import finite, write_json

        write_json(args.json, finite(result), seed=0)
        print(f"json: {args.json}")
    return result


def format_table(result) -> str:
    lines = [
        f"launch costs ({result['device']}, {result['dtype']}, launches {result['kernel_launches']}, "
        f"{result['clock']} clock, {result['rounds']} rounds of {result['reps_per_timing']} calls)",
        "| piece | µs / call (median) | min-max | × aten_add |",
        "|---|---|---|---|",
    ]
    for name, row in result["pieces"].items():
        lines.append(
            f"| {name} | {row['us_per_call']:.1f} | {row['min']:.1f}-{row['max']:.1f} | {row['vs_aten_add']:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
