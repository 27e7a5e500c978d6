"""What the ReLU-attention kernels serve, importable without Triton: the attention backend
(``attention/backends/triton.py``) asks here at dispatch, and the kernels' own argument
check (``relu_attention.unsupported``) asks the same function before any launch.

CUDA results are served only where a CUDA correctness check (``benchmarks/gpu_kernels.py``,
part of ``make bench-gpu``) passed on a real GPU; a dtype whose check fails goes in
:data:`CUDA_NOT_SERVED` with the reason.  On an H100 with Triton 3.6.0 (2026-11-27, commit
b5c5029, ``docs/results/bench-gpu.json``) every check passed: float32, float16 and bfloat16
at head dims 32 to 256, output and the three gradients against a float64 reference (float32
within 3e-7).  So did all 124 checks on an H200 (2026-11-27, commit f55f4c7,
``docs/results/bench-gpu-h200.json``), with the long tier's tiles and both backwards (float32
within 3.4e-7).  The run of 2026-11-26 (commit d775827) had found float32 forwards wrong at
head dims 64 and 128; the forward's loop has been rewritten since, and the probe of every
float32 forward tile with IEEE dots found none wrong (docs/performance.md "GPU").  CPU tensors
(Triton's interpreter) are checked by the unit tests at every dtype.
"""

from typing import Dict, Optional

import torch
from torch import Tensor

HEAD_DIMS = (32, 64, 128, 256)
#: the widest row the fused RMS norms serve (``kernels/output_norm.MAX_WIDTH``)
NORM_MAX_WIDTH = 2048
DTYPES = (torch.float32, torch.float16, torch.bfloat16)

#: dtype -> why CUDA launches of it are not served (a failed CUDA correctness check)
CUDA_NOT_SERVED: Dict[torch.dtype, str] = {}


#: the kernels address a tensor's elements within a batch entry with 32-bit offsets (row
#: index times row stride), and launch one program per (block, batch entry, head): CUDA's
#: grid holds at most 65,535 in its second and third dimensions
INDEX_LIMIT = 2**31
GRID_LIMIT = 65535


def extent(t: Tensor) -> int:
    """The elements a 4-d ``t`` reaches, as laid out (its strides), or its size if larger."""
    (a, b, c, d), (sa, sb, sc, sd) = t.shape, t.stride()
    if a * b * c * d == 0:
        return 0
    return max(1 + (a - 1) * abs(sa) + (b - 1) * abs(sb) + (c - 1) * abs(sc) + (d - 1) * abs(sd), a * b * c * d)


def unserved_sizes(q: Tensor, k: Tensor, v: Tensor) -> Optional[str]:
    """None when the kernels' 32-bit offsets and their launch grid hold q (B, H, T, d) and
    k, v (B_kv, H, S, d) (and the outputs, laid out with as many elements), else the reason."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            return f"{name} of {t.dim()} dimensions (the kernels take 4)"
        # a tensor in memory of fewer than 2^31 bytes cannot reach further (~0.3 µs; its
        # extent from shape and strides: ~3 µs, paid per attention call on the host)
        if (t.untyped_storage().nbytes() >= INDEX_LIMIT or t.numel() >= INDEX_LIMIT) and extent(t) >= INDEX_LIMIT:
            return f"{name} of {extent(t):,} elements (the kernels' 32-bit offsets: under 2^31)"
    if q.size(0) > GRID_LIMIT or q.size(1) > GRID_LIMIT:
        return f"{q.size(0):,} batch entries x {q.size(1):,} heads (the launch grid: at most {GRID_LIMIT:,} of each)"
    return None


def unserved(device_type: str, dtype: torch.dtype, head_dim: int) -> Optional[str]:
    """None when the kernels serve this launch, else the reason in words."""
    if head_dim not in HEAD_DIMS:
        return f"head dim {head_dim} (the kernels serve {', '.join(map(str, HEAD_DIMS))})"
    if dtype not in DTYPES:
        return f"dtype {dtype} (the kernels serve float32, float16, bfloat16)"
    if device_type not in ("cuda", "cpu"):
        return f"device {device_type}"
    if device_type == "cuda" and dtype in CUDA_NOT_SERVED:
        return CUDA_NOT_SERVED[dtype]
    return None
