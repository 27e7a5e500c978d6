"""ReLU-family attention without gradients over blocks of queries: long documents on CPU.

ReLU weights need no normalization across keys, so each block of queries is exact on its
own:

    out_i = c_i * sum_j ReLU(q_i . k_j) v_j      (c_i = 1 for ReLA; ReLUFormer:
                                                   c_i = 1 / (gamma sqrt(n_i / 2)))

For every block of ``t`` queries the (t x S) scores go into one buffer that is reused
(a fresh allocation of that size per block pays page faults on CPU), are rectified in
place and multiplied by the values into the block's rows of the output.  A call with at
least ``PER_HEAD_MIN_QUERIES`` queries takes its blocks one (sentence, head) at a time
(plain matrix products, a (t x S) buffer); fewer queries (decoding steps) take them over
every sentence and head at once (batched products, a (B x H x t x S) buffer).  Peak
attention memory is the buffer, not the (T x S) weights of the materialized path.

Masking costs no pass over the scores when the mask does not depend on the query
(padding, cross-attention) and there are more queries than value dimensions: the hidden
keys' *values* are set to 0, so ``ReLU(s_ij) * 0 = 0`` removes them exactly, as the
materialized path's zero weights do.  A mask with a query dimension (causal teacher
forcing), or one over few queries (a decoding step), is applied to each block's scores.  ``c_i`` multiplies the
block's output rows (the same factor the materialized activation applies to the weights).

Served as the ``query_block`` backend of :mod:`.core` (inference: no gradients, no
weights returned, no dropout, no additive biases, learned heads only).  Measured against
stock SDPA softmax and the other paths by ``benchmarks/bench_long_sequences.py``.
"""

from typing import Callable, Optional

import torch
from torch import Tensor

from .masks import key_counts

#: bytes of the score buffer one block may use (float32: 16 MiB = 4M scores; at L = 2048,
#: batch 2, 8 heads: blocks of 128 queries, 1.47x stock SDPA's memory against 1.97x with
#: 32 MiB at the same time, docs/performance.md)
BLOCK_BYTES = 16 * 2**20

#: with at least this many queries, blocks are taken one (sentence, head) at a time: two
#: matrix products of (rows x d)(d x S) and (rows x S)(S x d) per block run faster than
#: the batched products over every sentence and head with fewer rows each (L = 2048:
#: 0.89-0.94x SDPA's time for the attention against 1.13-1.18x, docs/performance.md)
PER_HEAD_MIN_QUERIES = 256
#: bytes of the score buffer of one (sentence, head) block (float32, S = 2048: 1,024 rows)
HEAD_BLOCK_BYTES = 8 * 2**20


def query_block_rows(bsz: int, heads: int, tgt: int, src: int, element_size: int = 4, budget: int = BLOCK_BYTES) -> int:
    """Queries per block: as many as fit ``budget`` bytes of scores (at least 1, at most tgt)."""
    per_row = max(1, bsz * heads * src * element_size)
    return max(1, min(tgt, budget // per_row))


def query_block_relu_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    hidden: Optional[Tensor] = None,
    row_scale: Optional[Callable[[Tensor], Tensor]] = None,
    block: Optional[int] = None,
    fn_: Callable[[Tensor], Tensor] = torch.relu_,
) -> Tensor:
    """sum_j f(q_i . k_j) v_j (times ``row_scale(n_i)`` when given) per head, block by
    block over the queries; f = ReLU, or the in-place ``fn_`` of an activation with the
    ``rectified`` and ``exact_zeros`` traits (f(s) = 0 for s <= 0: hidden keys are removed
    by a zero score or a zero value).

    q: (B, H, T, d), already multiplied by 1/sqrt(d_h); k, v: (B, H, S, d); hidden: bool
    broadcastable to (B, H, T, S), True = the key may not be seen, or None; row_scale:
    maps the visible-key counts n (float32, last dim 1) to per-row factors, or None;
    block: queries per block (default: :func:`query_block_rows`).  No gradients: call it
    under ``torch.no_grad()`` (or with tensors that do not require them).  Returns
    (B, H, T, d) in v's dtype.
    """
    if (
        q.dim() != 4
        or k.dim() != 4
        or v.dim() != 4
        or q.shape[:2] != k.shape[:2]
        or k.shape[:3] != v.shape[:3]
        or q.size(-1) != k.size(-1)
    ):
        raise ValueError(
            f"query_block_relu_attention: q (B, H, T, d) and k, v (B, H, S, d) "
            f"expected, got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise ValueError(
            "query_block_relu_attention computes no gradients (inference only); "
            "use the materialized or key-block path for training"
        )
    bsz, heads, tgt, _ = q.shape
    src = k.size(2)
    if hidden is not None and (hidden.dtype != torch.bool or hidden.dim() != 4 or hidden.size(-1) != src):
        raise ValueError(
            f"query_block_relu_attention: hidden must be a bool mask broadcastable "
            f"to (B, H, T, S) = {(bsz, heads, tgt, src)}, got {hidden.dtype} "
            f"{tuple(hidden.shape)}"
        )
    # a mask without a query dimension, over more queries than the value width: hidden keys
    # get value 0 (ReLU(s) * 0 = 0), one pass over the values instead of one over the scores
    # (a decoding step, one query, masks its few scores instead of copying every value)
    mask_scores = hidden is not None and (hidden.size(2) > 1 or tgt <= v.size(-1))
    if hidden is not None and not mask_scores:
        v = v.masked_fill(hidden.transpose(2, 3), 0.0)
    scores_dtype = torch.promote_types(q.dtype, k.dtype)
    element = torch.finfo(scores_dtype).bits // 8
    per_head = tgt >= PER_HEAD_MIN_QUERIES
    if block is None:
        block = (
            query_block_rows(1, 1, tgt, src, element, HEAD_BLOCK_BYTES)
            if per_head
            else query_block_rows(bsz, heads, tgt, src, element)
        )
    if block <= 0:
        raise ValueError(f"query block size must be positive, got {block}")
    kt = k.transpose(2, 3)
    out = v.new_empty(bsz, heads, tgt, v.size(-1))
    if per_head:
        _per_head_blocks(q, kt, v, hidden if mask_scores else None, block, scores_dtype, out, fn_)
        return _scaled(out, row_scale, hidden, src, q.device)
    buf = q.new_empty(bsz, heads, min(block, tgt), src, dtype=scores_dtype)
    mask = hidden if mask_scores else None
    for start in range(0, tgt, block):
        end = min(start + block, tgt)
        # the last, shorter block gets its own (contiguous) buffer
        s = buf if end - start == buf.size(2) else q.new_empty(bsz, heads, end - start, src, dtype=scores_dtype)
        torch.matmul(q[:, :, start:end], kt, out=s)
        if mask is not None:
            s.masked_fill_(mask[:, :, start:end] if mask.size(2) > 1 else mask, 0.0)
        s = fn_(s)
        # into a new tensor, then copied: with 2 threads, ``out=`` a slice of ``out`` (not
        # contiguous over the batch and heads) measured 1.46x against 1.29x SDPA's time
        out[:, :, start:end] = torch.matmul(s if s.dtype == v.dtype else s.to(v.dtype), v)
    return _scaled(out, row_scale, hidden, src, q.device)


def _per_head_blocks(
    q: Tensor,
    kt: Tensor,
    v: Tensor,
    hidden: Optional[Tensor],
    block: int,
    scores_dtype: torch.dtype,
    out: Tensor,
    fn_: Callable[[Tensor], Tensor] = torch.relu_,
) -> None:
    """``out[b, h]`` = ReLU(q kᵀ) v one (sentence, head) and ``block`` queries at a time,
    the scores in one reused (block x S) buffer; ``hidden``: the mask to apply to the
    scores (with or without a query dimension) or None."""
    bsz, heads, tgt, _ = q.shape
    buf = q.new_empty(min(block, tgt), kt.size(-1), dtype=scores_dtype)
    for b in range(bsz):
        for h in range(heads):
            kt_bh, v_bh = kt[b, h], v[b, h]
            mask = None
            if hidden is not None:
                mask = hidden[b if hidden.size(0) > 1 else 0, h if hidden.size(1) > 1 else 0]
            for start in range(0, tgt, block):
                end = min(start + block, tgt)
                s = buf[: end - start]  # leading rows of a contiguous buffer: contiguous
                torch.mm(q[b, h, start:end], kt_bh, out=s)
                if mask is not None:
                    s.masked_fill_(mask[start:end] if mask.size(0) > 1 else mask, 0.0)
                s = fn_(s)
                if s.dtype == v.dtype:
                    torch.mm(s, v_bh, out=out[b, h, start:end])
                else:
                    out[b, h, start:end] = torch.mm(s.to(v.dtype), v_bh)


def _scaled(out: Tensor, row_scale, hidden: Optional[Tensor], src: int, device) -> Tensor:
    if row_scale is not None:
        # n_i counted as the materialized activation counts it (float32 counts)
        n = key_counts(hidden, src, device)
        out = out.mul_(row_scale(n).to(out.dtype))
    return out
