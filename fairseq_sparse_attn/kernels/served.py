"""What the ReLU-attention kernels serve, importable without Triton: the attention backend
(``attention/backends/triton.py``) asks here at dispatch, and the kernels' own argument
check (``relu_attention.unsupported``) asks the same function before any launch.

CUDA results are served only where a CUDA correctness check (``benchmarks/gpu_kernels.py``,
part of ``make bench-gpu``) passed on a real GPU.  On an H100 with Triton 3.6.0
(2026-11-26, ``docs/results/bench-gpu.json``), float16 and bfloat16 passed at every
head dim (output and the three gradients within 3e-4 and 2.4e-3 of a float64 reference);
float32 gave wrong forward outputs at head dims 64 and 128 (relative error 0.7 to 0.9;
gradients right), so float32 on CUDA goes to the other backends until a GPU run shows it
right.  CPU tensors (Triton's interpreter) are checked by the unit tests at every dtype.
"""

from typing import Optional

import torch

HEAD_DIMS = (32, 64, 128, 256)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)

#: dtype -> why CUDA launches of it are not served (a failed CUDA correctness check)
CUDA_NOT_SERVED = {
    torch.float32: (
        "float32 on CUDA (its forward gave wrong outputs at head dims 64 and 128 on an H100, "
        'Triton 3.6.0: docs/performance.md "GPU"; float16 and bfloat16 are served)'
    ),
}


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
