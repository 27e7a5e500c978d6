#!/usr/bin/env python
"""Peak memory and time of one self-attention layer (forward + backward) at long
lengths L: ReLUFormer's relu_scaled attention on the plain path and on the memory-bounded
key-block path, against softmax, in one run; printed as ratios.

Rows:
* softmax_stock     fairseq's MultiheadAttention (fused; on recent torch this uses
                    scaled_dot_product_attention, which is itself memory-efficient)
* softmax_explicit  the plugin pipeline with softmax (scores materialized, as the papers)
* relu_plain        relu_scaled, full score matrix
* relu_chunked      relu_scaled, --attn-key-block-size BLOCK (recomputed in backward)

Memory: CUDA peak allocated on GPU; on CPU the growth of the process's peak RSS during
the step, each measurement in a fresh subprocess (so peaks do not hide each other).

    python benchmarks/bench_long_sequences.py --lengths 256 512 1024 2048
"""

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ROWS = ("softmax_stock", "softmax_explicit", "relu_plain", "relu_chunked")


def measure(row, length, args):
    import torch

    import fairseq_sparse_attn  # noqa: F401
    from fairseq_sparse_attn.attention import SparseMultiheadAttention

    device = torch.device(args.device)
    torch.manual_seed(0)
    act = "softmax" if row.startswith("softmax") else "relu_scaled"
    m = SparseMultiheadAttention(args.dim, args.heads, self_attention=True, activation=act).to(device).train()
    m.force_pipeline = row == "softmax_explicit"
    m.key_block_size = args.block if row == "relu_chunked" else 0
    x = torch.randn(length, args.batch, args.dim, device=device, requires_grad=True)

    def step():
        out, _ = m(x, x, x, need_weights=False)
        out.float().pow(2).mean().backward()

    # baseline before the first step: module, inputs; the peak then includes the step's
    # transient tensors (scores, weights, saved activations) and the gradient buffers,
    # the latter equal for every row
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    step()  # warm-up
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    return {"peak_bytes": max(peak, 0), "time_s": sorted(times)[len(times) // 2]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048])
    p.add_argument("--device", default=None)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--block", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None)
    p.add_argument("--one", nargs=2, metavar=("ROW", "L"), help=argparse.SUPPRESS)
    args = p.parse_args()
    import torch

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.one:
        print(json.dumps(measure(args.one[0], int(args.one[1]), args)))
        return

    results = {}
    for length in args.lengths:
        results[length] = {}
        for row in ROWS:
            cmd = [sys.executable, __file__, "--one", row, str(length), "--device", args.device,
                   "--dim", str(args.dim), "--heads", str(args.heads), "--batch", str(args.batch),
                   "--block", str(args.block), "--repeats", str(args.repeats)]
            # a fixed mmap threshold makes glibc return every large tensor to the OS when
            # it is freed, so the process's peak RSS follows the peak of live tensors
            env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                sys.exit(f"measurement {row} L={length} failed:\n{proc.stderr[-2000:]}")
            results[length][row] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"L={length} done", file=sys.stderr, flush=True)

    machine = platform.processor() or platform.machine()
    print(f"\none self-attention layer fwd+bwd, d={args.dim}, {args.heads} heads, batch {args.batch}, "
          f"block {args.block}, {args.device} ({machine})")
    print("L".rjust(6) + "".join(f"{r} MiB".rjust(22) for r in ROWS)
          + "  mem softmax_explicit/chunked  mem softmax_stock/chunked  time chunked/plain")
    for length, r in results.items():
        mib = "".join(f"{r[row]['peak_bytes'] / 2**20:.1f} ({r[row]['time_s'] * 1000:.0f} ms)".rjust(22) for row in ROWS)
        chunk = max(r["relu_chunked"]["peak_bytes"], 1)
        print(str(length).rjust(6) + mib
              + f"{r['softmax_explicit']['peak_bytes'] / chunk:.2f}x".rjust(30)
              + f"{r['softmax_stock']['peak_bytes'] / chunk:.2f}x".rjust(27)
              + f"{r['relu_chunked']['time_s'] / r['relu_plain']['time_s']:.2f}x".rjust(20))
    if args.json:
        from fairseq_sparse_attn.provenance import finite, write_json

        write_json(args.json, finite({"settings": vars(args), "results": results}))


if __name__ == "__main__":
    main()
