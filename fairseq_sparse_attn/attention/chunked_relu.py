"""Memory-bounded ReLU attention for long sequences (ReLUFormer Sec. 5, L up to 2048).

ReLU weights need no normalization across keys, so

    out_i = sum_j s_ij v_j,     s_ij = ReLU(q_i . k_j) * c_i     (c_i = 1 / (gamma sqrt(n_i/2)))

can be accumulated block by block over the keys without ever holding the (T x S) weight
matrix.  The backward pass recomputes each block's weights instead of storing them.  Peak
attention memory is O(T x block) per head instead of O(T x S).

Besides the output, the function returns per-row sums needed by the ReLUFormer
regularizer, also accumulated per block and differentiable:

    wsum_i  = sum_j s_ij                wlogw_i = sum_j s_ij log s_ij   (0 log 0 = 0)

so that H(s_hat_i) = log wsum_i - wlogw_i / wsum_i without the full matrix.

Limitations (checked): no attention dropout (a dropout mask would have to be replayed per
block), no per-head weights returned (there is no full matrix; use the plain path for
analysis).
"""

from typing import Optional

import torch

LOG_FLOOR = 1e-30


def _block_weights(q, k_blk, mask_blk, scale):
    """s = ReLU(q k^T) * scale with hidden keys zeroed; s > 0 exactly where the ReLU is
    active on a visible key (scale > 0), which is all the backward needs."""
    s = torch.relu_(torch.matmul(q, k_blk.transpose(-1, -2)))  # (B, H, T, C)
    if mask_blk is not None:
        s.masked_fill_(mask_blk, 0.0)
    return s.mul_(scale)


class ChunkedReLUAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask: Optional[torch.Tensor], scale: torch.Tensor, block: int, with_sums: bool):
        ctx.set_materialize_grads(False)
        bsz, heads, tgt, _ = q.shape
        src = k.size(-2)
        out = q.new_zeros(bsz, heads, tgt, v.size(-1))
        wsum = q.new_zeros(bsz, heads, tgt)
        wlogw = q.new_zeros(bsz, heads, tgt)
        for start in range(0, src, block):
            end = min(start + block, src)
            mask_blk = None if mask is None else mask[..., start:end]
            s = _block_weights(q, k[..., start:end, :], mask_blk, scale)
            out += torch.matmul(s, v[..., start:end, :])
            if with_sums:
                wsum += s.sum(-1)
                wlogw += (s * torch.log(s.clamp(min=LOG_FLOOR))).sum(-1)
        ctx.save_for_backward(q, k, v, mask if mask is not None else torch.empty(0), scale)
        ctx.has_mask = mask is not None
        ctx.block = block
        return out, wsum, wlogw

    @staticmethod
    def backward(ctx, g_out, g_wsum, g_wlogw):
        q, k, v, mask, scale = ctx.saved_tensors
        mask = mask if ctx.has_mask else None
        if g_out is None:
            g_out = torch.zeros(q.shape[:-1] + (v.size(-1),), dtype=q.dtype, device=q.device)
        g_q = torch.zeros_like(q)
        g_k = torch.zeros_like(k)
        g_v = torch.zeros_like(v)
        src = k.size(-2)
        for start in range(0, src, ctx.block):
            end = min(start + ctx.block, src)
            k_blk, v_blk = k[..., start:end, :], v[..., start:end, :]
            mask_blk = None if mask is None else mask[..., start:end]
            s = _block_weights(q, k_blk, mask_blk, scale)
            g_s = torch.matmul(g_out, v_blk.transpose(-1, -2))
            if g_wsum is not None:
                g_s += g_wsum.unsqueeze(-1)
            if g_wlogw is not None:
                g_s += g_wlogw.unsqueeze(-1) * (torch.log(s.clamp(min=LOG_FLOOR)) + 1)
            g_raw = g_s.mul_(scale).masked_fill_(s <= 0, 0.0)
            g_q += torch.matmul(g_raw, k_blk)
            g_k[..., start:end, :] = torch.matmul(g_raw.transpose(-1, -2), q)
            g_v[..., start:end, :] = torch.matmul(s.transpose(-1, -2), g_out)
        return g_q, g_k, g_v, None, None, None, None


def chunked_relu_attention(q, k, v, mask, scale, block: int = 256, with_sums: bool = True):
    """q: (B, H, T, d) already multiplied by 1/sqrt(d_h); k, v: (B, H, S, d); mask: bool
    broadcastable to (B, H, T, S), True = hidden, or None; scale: per-row factor
    broadcastable to (B, H, T, 1).  Returns (out (B, H, T, d), wsum, wlogw (B, H, T));
    with ``with_sums=False`` the two sums are not computed (returned as zeros)."""
    if block <= 0:
        raise ValueError(f"block size must be positive, got {block}")
    scale = scale.to(q.dtype).expand(q.size(0), 1, q.size(2), 1) if scale.dim() == 4 else scale
    return ChunkedReLUAttention.apply(q, k, v, mask, scale, block, with_sums)
