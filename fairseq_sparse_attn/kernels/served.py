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

The Triton version: the kernels run with the versions of :data:`TRITON_VERSIONS` only
(:func:`triton_unserved`); the backend refuses the others, and ``auto`` then takes another
backend (a cluster's own torch 2.7-2.9 brings Triton 3.3-3.5).
"""

import functools
from typing import Dict, Optional, Tuple

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


#: the Triton versions (major.minor) the kernels run with: the ones torch 2.10 to 2.13 pin.
#: Under these the unit tests run the kernels (Triton's interpreter), check that a plan's
#: direct launch passes the compiled kernel's launcher what Triton's own launch path passes
#: (``kernels/launch.py``: Triton's internals, which change between versions), and compile
#: every configuration ahead of time.  Others were seen to fail: Triton 3.4 lacks
#: ``knobs.HookChain`` (an ImportError), 3.5's interpreter fails on the forward kernel.
TRITON_VERSIONS = ("3.6", "3.7")
#: the Triton versions (major.minor) under which the CUDA correctness check passed on a GPU
#: (``make bench-gpu``'s kernels part: 3.6.0 on an H100 and an H200, 2026-11-27)
CUDA_CHECKED_TRITON = ("3.6",)


def minor_version(version: str) -> str:
    """ "3.6.0" -> "3.6" (a local or pre-release suffix dropped: "3.7.1+git1a2b" -> "3.7")."""
    return ".".join(version.split("+")[0].split(".")[:2])


@functools.lru_cache(maxsize=None)
def _import_triton() -> Tuple[Optional[str], Optional[str]]:
    """(the installed Triton's version, None) or, where it cannot be imported, (None, the
    error; None when no Triton is installed); imported once."""
    try:
        import triton
    except ModuleNotFoundError as e:
        return None, None if e.name == "triton" else f"{type(e).__name__}: {e}"
    except Exception as e:  # a broken install: its own error, not the kernels'
        return None, f"{type(e).__name__}: {e}"
    return str(getattr(triton, "__version__", "?")), None


def installed_triton() -> Optional[str]:
    """The installed Triton's version ("3.6.0"), or None where none can be imported."""
    return _import_triton()[0]


def triton_unserved(version: Optional[str] = "installed") -> Optional[str]:
    """None when the kernels run with ``version`` of Triton (by default the installed one;
    None: not installed), else why not, in words."""
    if version == "installed":
        return _installed_triton_unserved()
    if version is None:
        return "Triton is not installed (make install installs the version torch pins)"
    if minor_version(version) not in TRITON_VERSIONS:
        return (
            f"Triton {version} is installed; the kernels run with Triton {' or '.join(TRITON_VERSIONS)} "
            "(the versions torch 2.10 to 2.13 pin)"
        )
    return None


@functools.lru_cache(maxsize=None)
def _installed_triton_unserved() -> Optional[str]:
    version, error = _import_triton()
    if error is not None:
        return f"Triton cannot be imported ({error})"
    return triton_unserved(version)


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
