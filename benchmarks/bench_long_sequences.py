#!/usr/bin/env python
"""Peak memory and time of one self-attention layer at long lengths L: ReLUFormer's
relu_scaled attention on the plain path, the memory-bounded key-block path and the fused
FlexAttention kernel, against stock softmax, printed as ratios against stock softmax.

Modes and rows:
* ``train`` (forward + backward):
    softmax_stock     fairseq's MultiheadAttention (on recent torch it runs fused,
                      memory-efficient scaled_dot_product_attention)
    softmax_explicit  the plugin pipeline with softmax (scores materialized, as the papers)
    relu_plain        relu_scaled, full score matrix
    relu_chunked      relu_scaled, --attn-key-block-size BLOCK (recomputed in backward)
* ``infer`` (forward, no gradients; what generation and analysis of long documents run):
    softmax_stock, relu_plain, relu_chunked as above, and
    relu_query_block  relu_scaled block by block over the queries without gradients
                      (attention/query_block_relu.py; one reused score buffer)

Memory: CUDA peak allocated; on CPU the growth of the process's peak resident set during
the timed steps (the peak is reset after the warm-up, so compilation does not count), each
(mode, row, L) in a fresh process.  Time: per (mode, L) one process runs every row in
interleaved rounds (warm-up discarded) and reports paired per-round ratios
t_softmax_stock / t_row as the median with a bootstrap 95% interval
(benchmarks/timing.py); > 1 = faster than stock softmax.

    python benchmarks/bench_long_sequences.py --lengths 256 512 1024 2048
    python benchmarks/bench_long_sequences.py --modes infer --lengths 2048 --json long.json
"""

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from timing import interleaved_rounds, summarize_ratios  # noqa: E402

ROWS = {
    "train": ("softmax_stock", "softmax_explicit", "relu_plain", "relu_chunked"),
    "infer": ("softmax_stock", "relu_plain", "relu_chunked", "relu_query_block"),
}


def build_step(row, mode, length, args):
    """(step function, device) for one row: the layer and its input built once."""
    import torch

    import fairseq_sparse_attn.plugin  # noqa: F401
    from fairseq_sparse_attn.attention import SparseMultiheadAttention
    from fairseq_sparse_attn.attention.config import ActivationConfig, AttentionConfig

    device = torch.device(args.device)
    torch.manual_seed(0)
    act = "softmax" if row.startswith("softmax") else "relu_scaled"
    config = AttentionConfig(activation=ActivationConfig(act))
    m = SparseMultiheadAttention(args.dim, args.heads, self_attention=True, config=config).to(device)
    m.train(mode == "train")
    # each row names its backend (in auto, relu_scaled over >= --attn-flex-min-keys keys
    # would take query_block in inference)
    m.backend = {
        "softmax_stock": "auto",
        "softmax_explicit": "materialized",
        "relu_plain": "materialized",
        "relu_chunked": "key_block",
        "relu_query_block": "query_block",
    }[row]
    m.key_block_size = args.block if row == "relu_chunked" else 0
    x = torch.randn(length, args.batch, args.dim, device=device, requires_grad=mode == "train")

    def layer():
        return m(x, x, x, need_weights=False)[0]

    if mode == "train":

        def step():
            layer().float().pow(2).mean().backward()
    else:

        def step():
            with torch.no_grad():
                layer()

    return step, device


def _rss_now():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return None


def _reset_peak_rss():
    """Reset the kernel's peak-RSS mark (Linux: 5 > /proc/self/clear_refs); False if not."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure_memory(row, mode, length, args):
    import torch

    step, device = build_step(row, mode, length, args)
    step()  # warm-up
    step()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        if not _reset_peak_rss():
            sys.exit("cannot reset the peak RSS (/proc/self/clear_refs): CPU memory needs Linux")
        base = _rss_now()
    for _ in range(args.memory_repeats):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = _peak_rss() - base
    return {"peak_bytes": max(peak, 0)}


def measure_times(mode, length, rows, args):
    import torch

    jobs = {}
    device = None
    for row in rows:
        jobs[row], device = build_step(row, mode, length, args)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    run = interleaved_rounds(jobs, "softmax_stock", args.rounds, warmup=args.warmup, min_time=0.0, reps=1, sync=sync)
    return {
        row: {
            "speed_vs_softmax_stock": summarize_ratios(run["speed"][row]),
            "median_s": sorted(run["times"][row])[len(run["times"][row]) // 2],
        }
        for row in rows
    }


def run_child(what, args, *extra):
    cmd = [
        sys.executable,
        __file__,
        "--child",
        what,
        *extra,
        "--device",
        args.device,
        "--dim",
        str(args.dim),
        "--heads",
        str(args.heads),
        "--batch",
        str(args.batch),
        "--block",
        str(args.block),
        "--rounds",
        str(args.rounds),
        "--warmup",
        str(args.warmup),
        "--memory-repeats",
        str(args.memory_repeats),
    ]
    # a fixed mmap threshold makes glibc return every large tensor to the OS when it is
    # freed, so the process's resident set follows the live tensors
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"measurement {' '.join(extra)} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048])
    p.add_argument("--modes", nargs="+", choices=sorted(ROWS), default=["train", "infer"])
    p.add_argument("--device", default=None)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--block", type=int, default=256)
    p.add_argument("--rounds", type=int, default=7, help="timed interleaved rounds (default 7)")
    p.add_argument("--warmup", type=int, default=2, help="discarded rounds (default 2)")
    p.add_argument("--memory-repeats", type=int, default=2)
    p.add_argument("--json", default=None, help="write the results here (with provenance)")
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    import torch

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.child:
        what, mode, length = args.child[0], args.child[1], int(args.child[2])
        if what == "memory":
            print(json.dumps(measure_memory(args.child[3], mode, length, args)))
        else:
            print(json.dumps(measure_times(mode, length, args.child[3].split(","), args)))
        return

    results = {}
    skipped = {}
    for mode in args.modes:
        rows = list(ROWS[mode])
        results[mode] = {}
        for length in args.lengths:
            times = run_child("time", args, mode, str(length), ",".join(rows))
            entry = {}
            for row in rows:
                entry[row] = dict(times[row], **run_child("memory", args, mode, str(length), row))
            results[mode][length] = entry
            print(f"{mode} L={length} done", file=sys.stderr, flush=True)

    machine = platform.processor() or platform.machine()
    print(
        f"\none self-attention layer, d={args.dim}, {args.heads} heads, batch {args.batch}, "
        f"block {args.block}, {args.device} ({machine}, {torch.get_num_threads()} threads); "
        f"ratios against stock softmax: time = t_row / t_stock (median of {args.rounds} paired "
        f"rounds [95% interval]), memory = peak_row / peak_stock (MiB)"
    )
    for mode, by_length in results.items():
        rows = list(next(iter(by_length.values())))
        print(f"\n{mode}" + "".join(r.rjust(40) for r in rows[1:]))
        for length, r in by_length.items():
            base_mem = max(r["softmax_stock"]["peak_bytes"], 1)
            cells = []
            for row in rows[1:]:
                s = r[row]["speed_vs_softmax_stock"]
                cells.append(
                    f"{1 / s['median']:.2f}x [{1 / s['ci95_high']:.2f},{1 / s['ci95_low']:.2f}] "
                    f"{r[row]['peak_bytes'] / base_mem:.2f}x ({r[row]['peak_bytes'] / 2**20:.0f} MiB)"
                )
            print(
                f"L={length}".ljust(len(mode))
                + "".join(c.rjust(40) for c in cells)
                + f"   stock: {r['softmax_stock']['median_s'] * 1e3:.0f} ms, "
                f"{r['softmax_stock']['peak_bytes'] / 2**20:.1f} MiB"
            )
    for row, reason in skipped.items():
        print(f"\n{row} not measured: {reason}")
    if args.json:
        from fairseq_sparse_attn.provenance import finite, write_json

        write_json(args.json, finite({"settings": vars(args), "results": results, "skipped": skipped}))


if __name__ == "__main__":
    main()
