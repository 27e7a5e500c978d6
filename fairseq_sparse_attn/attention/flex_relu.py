"""Fused ReLU-family attention (ReLA ``relu``, ReLUFormer ``relu_scaled``) through
``torch.nn.attention.flex_attention``, without materializing the (tgt x src) weights.

FlexAttention computes softmax attention with a user ``score_mod``.  ReLU attention is
recovered exactly with the *log trick* and a *sink* key:

* score_mod: ``s' = log(s)`` where ``s > 0`` on a visible key, ``-inf`` elsewhere, so the
  kernel's softmax weights are ``relu(s_j) / Z`` with ``Z = sum_j relu(s_j)``;
* one extra key (index 0, before the real keys) with score ``s' = 0`` (weight ``1 / (Z + 1)``), always
  visible, whose value is the unit vector ``e_d`` of an extra value column, every real
  value having 0 there.  The kernel returns ``o = [sum_j relu(s_j) v_j, 1] / (Z + 1)``, so

      out = o[:d] / o[d] = sum_j relu(s_j) v_j                       (ReLA, Eq. 3)
      out = c_i * o[:d] / o[d],  c_i = 1 / (gamma sqrt(n_i / 2))    (ReLUFormer, Eq. 6)

A null row (no positive score) and a row whose keys are all padding give ``o = [0, 1]``:
exactly 0, never NaN (the sink keeps every row non-empty).  The same formula is
differentiable, so on CUDA the kernel serves training too.

Platform limits (torch 2.13, checked by :func:`flex_relu_unavailable`):

* CPU: only the *compiled* kernel is fast, and compiled FlexAttention on CPU is forward
  only (no backward) and has no float64: inference only; float32 (the only dtype tested
  on CPU here);
* the compiled CPU kernel returns NaN for a value width that is not a power of two
  (observed for 9 and 24 with 8-wide queries), so the value width ``d + 1`` is padded
  with zero columns to the next power of two (d = 64: 128 columns);
* a mask that differs between queries (causal teacher forcing) makes the generated C++ of
  the compiled CPU kernel fail to build (``'cur_qSplitSize8' was not declared``): on CPU
  only masks without a query dimension are served (padding; incremental decoding, where
  the cache holds exactly the visible keys);
* CUDA: forward and backward in float32 / float16 / bfloat16 as FlexAttention documents it;
  not run here (no GPU): `benchmarks/gpu_check.py` checks it.  The kernel's tiles are
  chosen per head dim, value width, dtype and the device's shared memory
  (:func:`flex_kernel_options`): torch's default tiles are picked from the query width
  alone, but the value here is twice as wide (the sink column padded to a power of two),
  and at head dim 128 in fp16 the backward asked for 246,784 bytes of the H100's 232,448;
* ``--attn-backend auto`` takes the kernel only on the devices of
  :data:`FLEX_MEASURED_FASTER` (none yet: no GPU benchmark has shown it faster).

:func:`flex_relu_attention` is a pure function (q, k, v, hidden, row scale) -> output; the
attention core registers it as a backend (see ``attention/core.py``).
"""

import functools
import shutil
from typing import Callable, Dict, Optional

import torch
from torch import Tensor

LOG_FLOOR = 1e-30
# The compiled CPU kernel returned NaN now and then for rows whose real keys were all
# hidden when the number of keys was not a multiple of its vector width (reads past the
# last key); padding the keys with hidden zero keys to a multiple of this avoids it.
KEY_MULTIPLE = 32


@functools.lru_cache(maxsize=None)
def _flex_module():
    try:
        from torch.nn.attention import flex_attention as fa
    except ImportError:
        return None
    return fa


@functools.lru_cache(maxsize=None)
def _compiled_flex():
    """The compiled kernel, built once per process; dynamic shapes so that incremental
    decoding (one more key per step) does not recompile at every step."""
    return torch.compile(_flex_module().flex_attention, dynamic=None)


def _has_cpp_compiler() -> bool:
    import os

    return bool(os.environ.get("CXX") and shutil.which(os.environ["CXX"])) or any(
        shutil.which(c) for c in ("g++", "c++", "clang++")
    )


def flex_relu_unavailable(
    device_type: str, grad: bool, dtype: torch.dtype = torch.float32, query_mask: bool = False
) -> Optional[str]:
    """None when the fused kernel can serve a call on ``device_type`` (with gradients when
    ``grad``) in ``dtype``, with a mask that differs between queries when ``query_mask``
    (causal teacher forcing); otherwise the reason, in words."""
    if _flex_module() is None:
        return f"torch {torch.__version__} has no torch.nn.attention.flex_attention"
    if device_type == "cuda":
        if not torch.cuda.is_available():
            return "CUDA is not available"
        if dtype == torch.float64:
            return "FlexAttention has no float64 kernel"
        return None
    if device_type == "cpu":
        if grad:
            return "compiled FlexAttention on CPU is forward-only (no gradients): inference only"
        if dtype != torch.float32:
            return f"the fused kernel on CPU is tested in float32 only, not {dtype}"
        if query_mask:
            return (
                "a mask that differs between queries (causal teacher forcing) does not "
                "build in the compiled CPU kernel of this torch; incremental decoding and "
                "padding-only masks are served"
            )
        if not _has_cpp_compiler():
            return "torch.compile on CPU needs a C++ compiler (g++ / clang++) on PATH"
        return None
    return f"device {device_type} (FlexAttention serves cpu inference and cuda)"


# --------------------------------------------------------------------------- kernel options
#: Where ``--attn-backend auto`` may take the fused kernel: device type -> the recorded
#: benchmark that measured it faster than the materialized path (file, date, device).
#: Empty until a GPU measurement exists (docs/performance.md "The fused backend"): auto
#: never takes flex; ``--attn-backend flex`` still forces it.
FLEX_MEASURED_FASTER: Dict[str, str] = {}

#: shared memory per block (bytes) when the device does not report
#: ``shared_memory_per_block_optin``: the 48 KiB every CUDA GPU since Kepler has
DEFAULT_SHARED_MEMORY = 48 * 1024

#: Candidate tiles, best first (larger tiles, more stages: faster where they fit).
#: Forward: (BLOCK_M, BLOCK_N, num_stages, num_warps); backward: (BLOCK_M1, BLOCK_N1,
#: BLOCK_M2, BLOCK_N2, num_stages, num_warps) - torch's own H100 choices for head dim
#: <= 128 first, then smaller ones.
FWD_CANDIDATES = (
    (128, 64, 3, 8),
    (128, 64, 2, 8),
    (64, 64, 3, 4),
    (64, 64, 2, 4),
    (64, 32, 2, 4),
    (32, 32, 2, 4),
    (32, 32, 1, 4),
    (16, 16, 1, 4),
)
BWD_CANDIDATES = (
    (64, 128, 128, 64, 3, 8),
    (64, 128, 128, 64, 2, 8),
    (64, 64, 64, 64, 3, 4),
    (64, 64, 64, 64, 2, 4),
    (32, 64, 64, 32, 2, 4),
    (32, 32, 32, 32, 2, 4),
    (32, 32, 32, 32, 1, 4),
    (16, 16, 16, 16, 1, 4),
)


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def fwd_shared_memory(block_m, block_n, stages, qk_dim, v_dim, dtype) -> int:
    """Estimated shared memory (bytes) of the forward kernel: the resident query tile
    (BLOCK_M x qk_dim) plus ``stages`` pipelined key and value tiles (BLOCK_N x (qk_dim +
    v_dim)), in the input's element size."""
    return _element_size(dtype) * (block_m * qk_dim + stages * block_n * (qk_dim + v_dim))


def bwd_shared_memory(block_m1, block_n1, block_m2, block_n2, stages, qk_dim, v_dim, dtype) -> int:
    """Estimated shared memory (bytes) of the backward kernel, the larger of its two loops:

        dK/dV loop:  e (BLOCK_N1 + stages BLOCK_M1) (qk_dim + v_dim) + 16 BLOCK_M1
        dQ loop:     e (BLOCK_M2 + stages BLOCK_N2) (qk_dim + v_dim) + 16 BLOCK_N2

    (resident key/value resp. query/output-gradient tiles, ``stages`` pipelined tiles of
    the other side, and the float32 logsumexp/delta rows).  It reproduces the failure of
    issue 22 exactly: head dim 128 (value width 256 with the sink column), fp16, torch's
    H100 choice (64, 128, 128, 64, 3 stages) gives 246,784 bytes, the "Required: 246784"
    Triton reported against the H100's 232,448."""
    e, width = _element_size(dtype), qk_dim + v_dim
    return max(
        e * (block_n1 + stages * block_m1) * width + 16 * block_m1,
        e * (block_m2 + stages * block_n2) * width + 16 * block_n2,
    )


def device_shared_memory(device=None, properties=None) -> int:
    """Shared memory per block a kernel may opt into on ``device`` (bytes):
    ``shared_memory_per_block_optin`` of its properties (H100 232,448 = 227 KiB; A100
    166,912 = 163 KiB; consumer Ampere/Ada 101,376 = 99 KiB), else
    :data:`DEFAULT_SHARED_MEMORY`.  ``properties`` stands in for
    ``torch.cuda.get_device_properties(device)`` (tests)."""
    if properties is None:
        properties = torch.cuda.get_device_properties(device)
    return int(getattr(properties, "shared_memory_per_block_optin", 0) or DEFAULT_SHARED_MEMORY)


def flex_kernel_options(qk_dim: int, v_dim: int, dtype: torch.dtype, shared_memory: int) -> dict:
    """FlexAttention ``kernel_options`` for a call with query/key width ``qk_dim`` and value
    width ``v_dim`` (the kernel's, i.e. with the sink column and padding), in ``dtype``,
    on a device with ``shared_memory`` bytes per block: the first candidate tiles whose
    estimated shared memory (:func:`fwd_shared_memory`, :func:`bwd_shared_memory`) fits,
    forward and backward chosen separately.  Raises ValueError when not even the
    smallest fits."""
    fwd = next((c for c in FWD_CANDIDATES if fwd_shared_memory(*c[:3], qk_dim, v_dim, dtype) <= shared_memory), None)
    bwd = next((c for c in BWD_CANDIDATES if bwd_shared_memory(*c[:5], qk_dim, v_dim, dtype) <= shared_memory), None)
    if fwd is None or bwd is None:
        raise ValueError(
            f"flex_relu_attention: no kernel tiles fit {shared_memory} bytes of shared "
            f"memory for head dim {qk_dim} (value width {v_dim}) in {dtype}; "
            f"use --attn-backend materialized"
        )
    return {
        "fwd_BLOCK_M": fwd[0],
        "fwd_BLOCK_N": fwd[1],
        "fwd_num_stages": fwd[2],
        "fwd_num_warps": fwd[3],
        "bwd_BLOCK_M1": bwd[0],
        "bwd_BLOCK_N1": bwd[1],
        "bwd_BLOCK_M2": bwd[2],
        "bwd_BLOCK_N2": bwd[3],
        "bwd_num_stages": bwd[4],
        "bwd_num_warps": bwd[5],
    }


@functools.lru_cache(maxsize=None)
def _cuda_kernel_options(qk_dim: int, v_dim: int, dtype: torch.dtype, device_index: int) -> dict:
    return flex_kernel_options(qk_dim, v_dim, dtype, device_shared_memory(device_index))


def _padded_width(d: int) -> int:
    """Value width with the sink column: the next power of two >= d + 1."""
    return 1 << d.bit_length()


def _as_3d(hidden: Tensor) -> Tensor:
    """(B|1, 1, T|1, S) -> (B|1, T|1, S); the fused kernel takes one mask for all heads."""
    if hidden.size(1) != 1:
        raise ValueError(
            f"flex_relu_attention: per-head masks are not served (hidden has "
            f"{hidden.size(1)} heads); use the materialized path"
        )
    return hidden[:, 0]


def flex_relu_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    hidden: Optional[Tensor] = None,
    row_scale: Optional[Callable[[Tensor], Tensor]] = None,
    compiled: bool = True,
    score_fn: Optional[Callable[[Tensor], Tensor]] = None,
) -> Tensor:
    """sum_j f(q_i . k_j) v_j  (times ``row_scale(n_i)`` when given) per head, f = ReLU or
    ``score_fn``: element-wise, f >= 0 and f(s) = 0 for s <= 0 (an activation with the
    ``rectified`` and ``exact_zeros`` traits; the log trick needs f >= 0).

    q: (B, H, T, d), already multiplied by 1/sqrt(d_h); k, v: (B, H, S, d);
    hidden: bool broadcastable to (B, H, T, S), True = the key may not be seen (padding,
    causal, ...), or None; row_scale: maps the visible-key counts n (shape of ``hidden``
    reduced over keys, float32, last dim 1) to per-row factors (ReLUFormer's
    1 / (gamma sqrt(n/2))), or None for plain ReLA.  ``compiled=False`` runs FlexAttention
    eagerly (slow, materializes; for checks).  Returns (B, H, T, d) in q's dtype.
    """
    if q.dim() != 4 or k.shape != v.shape[:-1] + (k.size(-1),) or q.shape[:2] != k.shape[:2]:
        raise ValueError(
            f"flex_relu_attention: q (B, H, T, d) and k, v (B, H, S, d) expected, got "
            f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if hidden is not None:
        if hidden.dtype != torch.bool or hidden.dim() != 4 or hidden.size(-1) != k.size(2):
            raise ValueError(
                f"flex_relu_attention: hidden must be a bool mask broadcastable to "
                f"(B, H, T, S) = {(q.size(0), q.size(1), q.size(2), k.size(2))}, got "
                f"{hidden.dtype} {tuple(hidden.shape)}"
            )
    bsz, heads, tgt, d = q.shape
    src = k.size(2)
    if q.device.type == "cpu" and hidden is not None and hidden.size(2) > 1:
        raise ValueError(f"flex_relu_attention: {flex_relu_unavailable('cpu', False, q.dtype, True)}")
    width = _padded_width(v.size(-1))
    # the sink: key 0 (score forced to 0 below) whose value is e_d; first, so that every
    # block of keys the kernel visits after it starts from a finite running maximum (with
    # the sink last, rows whose real keys are all hidden came out NaN now and then)
    # keys padded to a multiple of KEY_MULTIPLE with hidden zero keys (see below)
    total = -(-(src + 1) // KEY_MULTIPLE) * KEY_MULTIPLE
    k_ext = k.new_zeros(bsz, heads, total, d)
    k_ext[:, :, 1 : src + 1] = k
    v_ext = v.new_zeros(bsz, heads, total, width)
    v_ext[:, :, 1 : src + 1, : v.size(-1)] = v
    v_ext[:, :, 0, v.size(-1)] = 1
    sink = torch.zeros((), dtype=torch.long, device=q.device)
    # the mask, extended over the sink and the padding keys, with the batch dimension in
    # full; indexed [b, kv] or [b, q, kv] (the compiled CPU kernel fails to build when the
    # query index enters any other expression, e.g. q_idx * 0 for a broadcast dimension)
    hidden3 = _as_3d(hidden) if hidden is not None else torch.zeros(1, 1, src, dtype=torch.bool, device=q.device)
    hidden_ext = hidden3.new_ones((bsz, hidden3.size(1), total))  # per-query only on CUDA
    hidden_ext[..., 0] = False  # the sink is always visible
    hidden_ext[..., 1 : src + 1] = hidden3
    if hidden_ext.size(1) == 1:
        hidden_ext = hidden_ext[:, 0]

        def hidden_at(b, q_idx, kv_idx):
            return hidden_ext[b, kv_idx]
    else:

        def hidden_at(b, q_idx, kv_idx):
            return hidden_ext[b, q_idx, kv_idx]

    def score_mod(score, b, h, q_idx, kv_idx):
        if score_fn is not None:
            score = score_fn(score)
        keep = (score > 0) & ~hidden_at(b, q_idx, kv_idx)
        s = torch.where(keep, torch.log(torch.clamp(score, min=LOG_FLOOR)), -float("inf"))
        return torch.where(kv_idx == sink, 0.0, s)

    fn = _compiled_flex() if compiled else _flex_module().flex_attention
    options = None
    if q.device.type == "cuda":  # tiles that fit the device's shared memory (backward too)
        options = _cuda_kernel_options(d, width, q.dtype, q.device.index or 0)
    o = fn(q, k_ext, v_ext, score_mod=score_mod, scale=1.0, kernel_options=options)
    dv = v.size(-1)
    out = o[..., :dv].float() / o[..., dv : dv + 1].float()
    if row_scale is not None:
        from .masks import visible_key_counts

        out = out * row_scale(visible_key_counts(torch.empty(1, 1, 1, src, device=q.device), hidden))
    return out.to(q.dtype)
