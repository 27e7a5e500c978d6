#!/usr/bin/env python
"""Tensor probe of issue 22.2 (docs/rela.md "fp16 and bf16"): the gradient with respect to
the attention weights through ReLA-g's gated RMSNorm, for rows of attention weights with
mass 1 down to 0, in float32, float16 and bfloat16, with the half-precision floor off
(the gradient as it was) and on (``HALF_BACKWARD_RMS_FLOOR``).

One row of ``--keys`` equal weights summing to the mass, values v ~ N(0, 1) of width
``--dim``, z = α v, L = sum(norm(z) · o) with o ~ N(0, 1); printed: max |dL/dα|.

    python benchmarks/half_norm_gradient_probe.py [--dim 512 --keys 24]
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fairseq_sparse_attn.attention import output_norms  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def grad_wrt_weights(norm, v, o, mass, dtype):
    a = torch.full((1, v.size(0)), mass / v.size(0), requires_grad=True)
    (norm((a @ v).to(dtype)).float() * o).sum().backward()
    return a.grad.abs().max().item()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--keys", type=int, default=24)
    args = p.parse_args()
    torch.manual_seed(0)
    norm = output_norms.build_output_norm("gated_rmsnorm", args.dim, args.dim // 4)
    v, o = torch.randn(args.keys, args.dim), torch.randn(1, args.dim)
    floor = output_norms.HALF_BACKWARD_RMS_FLOOR
    print(f"max |dL/dalpha|, d = {args.dim}, {args.keys} keys; 'floor' = HALF_BACKWARD_RMS_FLOOR {floor:g}")
    print("| row mass | fp32 | fp16 no floor | bf16 no floor | fp16 floor | bf16 floor |")
    print("|---|---|---|---|---|---|")
    for mass in (1, 1e-1, 1e-2, 1e-3, 1e-4, 1e-6, 0):
        cells = []
        for name, f in (("fp32", floor), ("fp16", 1e-30), ("bf16", 1e-30), ("fp16", floor), ("bf16", floor)):
            output_norms.HALF_BACKWARD_RMS_FLOOR = f
            cells.append(f"{grad_wrt_weights(norm, v, o, mass, DTYPES[name]):.3g}")
        output_norms.HALF_BACKWARD_RMS_FLOOR = floor
        print(f"| {mass:g} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
