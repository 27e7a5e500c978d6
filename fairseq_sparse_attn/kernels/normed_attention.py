"""ReLU attention followed by the fused RMS norm of the concatenated heads (ReLA-g's and
ReLA-i's output ending), as one ``autograd.Function``: the kernels of
:mod:`.relu_attention` and :mod:`.output_norm`, their ops dispatched exactly as when
called one after the other (the same numbers, bit for bit: tested), with one autograd
node, one Python ``Function`` and no norm module call between them.

Why: a launch-bound GPU step pays the host time of every call; the two ``Function``\\ s
and the norm module's call cost ReLA-g's attention about 5% of a training step on the
host (docs/performance.md, "Host time of a training step").  Used by the triton backend's
direct call (``attention/backends/triton.direct_call``) when not compiling; under
``torch.compile`` the two ops are traced as they are.

    heads = relu_attention(q, k, v, ...)                  (B, H, T, d), laid out (T, B, H, d)
    z     = heads as (T * B, H * d)                       a view
    out   = z r g [* sigmoid(w z)]                        fsa::rms_norm_fwd
"""

from typing import Optional

import torch
from torch import Tensor

from .ops import once_differentiable
from .output_norm import param_grads, rms_norm_bwd, rms_norm_fwd
from .relu_attention import draw_seed, gradients, relu_attention_fwd, row_arguments


class _NormedReluAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, key_padding, seed, weight, gate_weight, settings):
        # (the arguments that are not tensors in one tuple: Function.apply's Python handles
        # each argument, at every call)
        causal, kv_groups, scale, row_scaled, row_coef, dropout_p, eps, half_floor = settings
        bsz, heads, tgt, d = q.shape
        with torch._C._AutoDispatchBelowAutograd():
            out, rs, _ = relu_attention_fwd(
                q, k, v, key_padding, causal, kv_groups, scale, row_scaled, row_coef, seed, dropout_p
            )
            z = out.permute(2, 0, 1, 3).reshape(tgt * bsz, heads * d)  # the kernel's layout: a view
            normed, rstd = rms_norm_fwd(z, weight, gate_weight, eps, half_floor)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(q, k, v, key_padding, weight, gate_weight, seed)
        ctx.inner = (rs, z, rstd)  # made here, never returned: kept without version checks
        ctx.args = (causal, kv_groups, scale, row_scaled)
        ctx.dropout_p = dropout_p
        ctx.half_floor = half_floor
        return normed

    @staticmethod
    @once_differentiable  # the backward ops have no autograd: a clear error
    def backward(ctx, grad):
        if grad is None:  # (materialize_grads off) the output took no part in the loss
            return (None,) * 8
        q, k, v, key_padding, weight, gate_weight, seed = ctx.saved_tensors
        rs, z, rstd = ctx.inner
        dz, grads = rms_norm_bwd(grad, z, weight, gate_weight, rstd, ctx.half_floor)
        bsz, heads, tgt, d = q.shape
        dout = dz.view(tgt, bsz, heads, d).permute(1, 2, 0, 3)
        args = (*ctx.args, seed, ctx.dropout_p)
        dq, dk, dv = gradients(dout, q, k, v, key_padding, rs, args, ctx.needs_input_grad[:3])
        dw, dgw = param_grads(grads, gate_weight)
        return dq, dk, dv, None, None, dw, dgw, None


def normed_relu_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding: Optional[Tensor],
    causal: bool,
    kv_groups: int,
    scale: float,
    gamma: Optional[float],
    weight: Tensor,
    gate_weight: Optional[Tensor],
    eps: float,
    half_floor: float,
    dropout_p: float = 0.0,
) -> Tensor:
    """``rms_normalize(relu_attention(q, k, v, ...) as (T * B, H * d), eps, weight,
    gate_weight)`` with the fused kernels (arguments: :func:`.relu_attention.relu_attention`
    and :func:`.output_norm.fused_rms_normalize`; ``dropout_p`` > 0: attention dropout under
    a seed drawn here); returns (T * B, H * d) in q's dtype."""
    row_scaled, row_coef = row_arguments(gamma)
    seed = draw_seed(q) if dropout_p else None
    settings = (causal, kv_groups, scale, row_scaled, row_coef, float(dropout_p), float(eps), float(half_floor))
    return _NormedReluAttention.apply(q, k, v, key_padding, seed, weight, gate_weight, settings)
