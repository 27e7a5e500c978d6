"""Normalization of the concatenated attention heads, applied before ``out_proj``.

ReLA (Zhang, Titov, Sennrich 2021, Sec. 4) normalizes z = [head_1; ...; head_H] in R^d:

* ``rmsnorm``        Eq. 4:  RMSNorm(z) = z / RMS(z) * g,          g initialised to 1
* ``rmsnorm_i``      ReLA-i: Eq. 4 with g ~ U(-sqrt(3/d_h), sqrt(3/d_h)), d_h = head dim
* ``gated_rmsnorm``  ReLA-g, Eq. 5: sigmoid(w * z) * RMSNorm(z),    g = 1,
                     w ~ U(-sqrt(3/d), sqrt(3/d)) (d = size of z, see below)
* ``layernorm``      ReLA Table 1 row 8 without the gate (plain LayerNorm on z)
* ``gated_layernorm`` ReLA Table 1 row 8 ("ReLA-g + LayerNorm"): sigmoid(w * z) * LN(z)
* ``none``           identity (stock attention; "ReLU alone" ablation row 4)

RMS(z) = sqrt(mean(z^2) + eps) with eps = 1e-8 (the value of the official ReLA code,
``gated_rms_norm`` in bzhangGo/zero), inside the square root, so a null-attention row
(z = 0) gives exactly 0 and finite gradients (1/sqrt(eps) = 1e4).  The gate weight w has
no initialiser in the official code, so it takes that code base's default "uniform unit
scaling" initializer, which for a vector of size d is U(-sqrt(3/d), sqrt(3/d)); we use
the same.  The statistics are computed in float32 whatever the input dtype (fp16/bf16
safe: eps = 1e-8 underflows in fp16) and the result is cast back.

Fused: with ``--attn-backend triton`` (the attention module's backend, read once when the
module is built: ``build_output_norm(..., fused=True)``), ``rmsnorm``, ``rmsnorm_i`` and
``gated_rmsnorm`` run as one Triton kernel per direction
(:func:`fairseq_sparse_attn.kernels.output_norm.fused_rms_normalize`: the same formulas
and the same fp16/bf16 gradient bound) for float32 / float16 / bfloat16 inputs with
float32 or same-dtype parameters; other inputs (float64: gradcheck) take the path below.
The widths the kernel serves (1 to 2048 features) are checked at build: a wider norm is
not fused.
"""

import math
from typing import Callable, Optional, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..kernels.served import NORM_MAX_WIDTH
from .config import OutputNormConfig
from .registry import Registry

OUTPUT_NORM_REGISTRY = Registry("attention output norm")
register_output_norm = OUTPUT_NORM_REGISTRY.register
output_norm_names = OUTPUT_NORM_REGISTRY.names

RMSNORM_EPS = 1e-8


def build_output_norm(
    config: Union[OutputNormConfig, str], embed_dim: int, head_dim: int, fused: bool = False
) -> nn.Module:
    """The output norm ``config`` describes (a name alone: eps = RMSNORM_EPS); ``fused``
    (the attention module's backend is ``triton``): the RMS norms run as the fused Triton
    kernel where it serves the width (module docstring; the other norms ignore it)."""
    if isinstance(config, str):
        config = OutputNormConfig(name=config)
    norm = OUTPUT_NORM_REGISTRY.get_or_raise(config.name)(embed_dim=embed_dim, head_dim=head_dim, eps=float(config.eps))
    if fused and isinstance(norm, _FusableRMSNorm):
        norm.use_fused_kernel()
    return norm


def uniform_unit_scaling_(tensor: torch.Tensor, fan: int) -> torch.Tensor:
    bound = math.sqrt(3.0 / fan)
    with torch.no_grad():
        return tensor.uniform_(-bound, bound)


def _compute_dtype(z: torch.Tensor) -> torch.dtype:
    """float32 for float32/fp16/bf16 inputs, float64 stays float64 (gradcheck).  A
    comparison, not ``torch.promote_types`` (that is a dispatched aten op: one more per
    call in the op count of tests/unit/test_op_count.py)."""
    return torch.float64 if z.dtype == torch.float64 else torch.float32


def _as(t, dtype):
    """t in dtype; no call at all when it already is (``Tensor.to`` costs ~7 us a call on
    CPU, a visible share of a decoding step's tiny norms)."""
    return t if t is None or t.dtype == dtype else t.to(dtype)


def fused_rms_norm_fits(schema) -> bool:
    """Whether ``schema`` (a ``torch.FunctionSchema``) is the fused RMSNorm forward this module
    calls: ``aten::_fused_rms_norm(Tensor input, int[] normalized_shape, Tensor? weight, float?
    eps) -> (Tensor, Tensor)`` (the output and 1/RMS; torch >= 2.9).  torch 2.8 has an op of
    that name with another schema, ``(Tensor input, int normalized_shape_ndim, Tensor weight,
    float eps) -> Tensor`` (an MPS kernel): calling it as the newer one failed at the first
    forward of every RMS-normed model."""
    args = schema.arguments
    return len(args) == 4 and [str(a.type) for a in args[:2]] == ["Tensor", "List[int]"] and len(schema.returns) == 2


def _torch_fused_rms_norm() -> bool:
    op = getattr(torch.ops.aten, "_fused_rms_norm", None)
    try:
        return op is not None and fused_rms_norm_fits(op.default._schema)
    except (AttributeError, RuntimeError):
        return False


#: torch's fused RMSNorm forward op, where this torch has it as this module calls it
#: (:func:`fused_rms_norm_fits`); other builds (a cluster's own CUDA torch 2.8 or older)
#: compute the same formula in separate ops
_FUSED_RMS_NORM = _torch_fused_rms_norm()


def _rms_norm_forward(z, eps, weight, gate_weight, keep_y=False):
    """(out, r, s, y): r = 1/RMS(z), s = sigmoid(w*z) or None, y = z*r*g, out = y*s;
    everything in the compute dtype.  y and r come from torch's fused RMSNorm forward
    (``aten::_fused_rms_norm``: one op instead of seven; on CPU the same numbers bit for
    bit as z * rsqrt(sum(z²)/d + eps) * g, tests/unit/test_output_norms.py).
    ``keep_y`` (training, with the gate): out = y*s is a new tensor and y is returned for
    the backward (which then does not recompute it), else the gate multiplies y in place
    and y is None.  (Without the gate y is the output: saving an output costs a
    ``detach``, recomputing it two ops, so it is recomputed.)"""
    if _FUSED_RMS_NORM:
        out, r = torch.ops.aten._fused_rms_norm(z, [z.size(-1)], weight, eps)
    else:
        r = torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + eps)
        out = z * r * weight
    y = None
    s = None
    if gate_weight is not None:
        s = torch.mul(z, gate_weight).sigmoid_()
        if keep_y:
            y, out = out, out * s
        else:
            out.mul_(s)
    return out, r, s, y


#: fp16/bf16 inputs only: in the backward, the normalization's part of the gradient of a
#: row whose RMS(z) is below this floor is scaled by RMS(z) / floor (docs/rela.md, "fp16
#: and bf16").  float32/float64 inputs get the exact gradient.
HALF_BACKWARD_RMS_FLOOR = 1e-2
_HALF = (torch.float16, torch.bfloat16)


class _RMSNormFunction(torch.autograd.Function):
    """out = z / sqrt(mean(z^2) + eps) * g [* sigmoid(w * z)] with a hand-written backward.

    On CPU the composite ``F.rms_norm`` backward and the autograd graph of the gate cost
    ~6x / ~11x a LayerNorm's forward+backward at the demo's shapes (broadcast multiplies
    and their reductions).  This backward does the same algebra with three full-size
    temporaries (each new full-size tensor is a pass over memory that is not in cache,
    and on CPU the dominant cost; the in-place updates reuse them) and y kept from the
    forward when there is a gate (one more saved tensor):

        r = 1 / RMS(z),  y = z r g,  s = sigmoid(w z)    (s = 1 without the gate)
        gy = o s                                         (o: incoming gradient)
        t = gy y,  proj = mean(t) over the features
        grad_g = sum over rows of (gy r) z
        grad_z = c ((gy r) g - z r^2 proj)  [+ ga w]     (derivative of z r g)
        ga = t (1 - s)                                   (gate pre-activation)
        grad_w = sum over rows of ga z

    c = 1 for float32/float64 inputs (the exact gradient); for fp16/bf16 inputs c =
    min(1, RMS(z) / HALF_BACKWARD_RMS_FLOOR) (:func:`_bounded_gradients`, with c folded
    into r): the normalization's gradient grows as 1/RMS(z) for near-null rows, which in
    fp16 overflows and makes the loss scaler collapse (docs/rela.md, "fp16 and bf16").
    """

    @staticmethod
    def forward(ctx, z, weight, gate_weight, eps):
        dtype = _compute_dtype(z)
        z32, w32, gw32 = _as(z, dtype), _as(weight, dtype), _as(gate_weight, dtype)
        out, r, s, y = _rms_norm_forward(z32, eps, w32, gw32, keep_y=True)
        ctx.save_for_backward(z32, r, w32, gw32, s, y)
        ctx.in_dtype = z.dtype
        ctx.param_dtypes = (
            None if weight is None else weight.dtype,
            None if gate_weight is None else gate_weight.dtype,
        )
        return _as(out, z.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, o):
        z, r, w, gw, s, y = ctx.saved_tensors
        o = _as(o, z.dtype)
        lead = tuple(range(z.dim() - 1))
        need_z, need_w = ctx.needs_input_grad[0], w is not None and ctx.needs_input_grad[1]
        need_gw = s is not None and ctx.needs_input_grad[2]
        # gy = o s: a new tensor, updated in place below (o itself is never modified)
        gy = o * s if s is not None else o
        if y is None:  # no gate: y = z r g recomputed (the same ops as the forward's)
            y = z * r
            if w is not None:
                y.mul_(w)
            t = y.mul_(gy)
        else:
            t = y * gy  # a new tensor: y is saved (a second backward must find it intact)
        proj = t.mean(dim=-1, keepdim=True) if need_z else None
        ga = t.addcmul_(t, s, value=-1.0) if s is not None else None  # t (1 - s) = o y s (1 - s)
        if need_z and ctx.in_dtype in _HALF:  # the bounded gradient (class docstring)
            grad_z, grad_w, grad_gw = _bounded_gradients(
                z, r, w, gw, gy, s is not None, proj, ga, need_w, need_gw, lead
            )
            grad_w = _as(grad_w, ctx.param_dtypes[0])
            grad_gw = _as(grad_gw, ctx.param_dtypes[1])
            return _as(grad_z, ctx.in_dtype), grad_w, grad_gw, None
        u = gy.mul_(r) if s is not None else o * r  # gy r
        scratch = None
        grad_w = grad_gw = grad_z = None
        if need_w:
            scratch = torch.mul(u, z)
            grad_w = _as(scratch.sum(dim=lead), ctx.param_dtypes[0])
        if need_gw:
            scratch = torch.mul(ga, z, out=scratch) if scratch is not None else ga * z  # type: ignore[arg-type]
            grad_gw = _as(scratch.sum(dim=lead), ctx.param_dtypes[1])
        if need_z:
            grad_z = u.mul_(w) if w is not None else u
            grad_z.addcmul_(z, r.square().mul_(proj), value=-1.0)
            if ga is not None:
                grad_z.addcmul_(ga, gw)
            grad_z = _as(grad_z, ctx.in_dtype)
        return grad_z, grad_w, grad_gw, None


def _bounded_gradients(z, r, w, gw, gy, gy_is_new, proj, ga, need_w, need_gw, lead):
    """(grad_z, grad_w, grad_gw) of :class:`_RMSNormFunction` for fp16/bf16 inputs, in the
    compute dtype (``gy_is_new``: ``gy`` may be updated in place, else it is the incoming
    gradient itself).  The bound c = min(1, 1 / (r floor)) folds into r: c r = min(r,
    1 / floor) = r~, so the normalization's part c (gy r g - z r^2 proj) is r~ (gy g - z r
    proj): one op for the bound (the clamp of r) where scaling by c takes four (17 ops
    per fp16 backward instead of 20, besides the gradients' accumulation;
    tests/unit/test_half_norm_gradient.py); float32 keeps the plain order (its exact
    gradient, bit for bit as before)."""
    scratch = grad_w = grad_gw = None
    if need_w:
        scratch = torch.mul(gy, z).mul_(r)
        grad_w = scratch.sum(dim=lead)
    if need_gw:
        scratch = torch.mul(ga, z, out=scratch) if scratch is not None else ga * z
        grad_gw = scratch.sum(dim=lead)
    if w is not None:
        grad_z = gy.mul_(w) if gy_is_new else gy * w
    else:
        grad_z = gy if gy_is_new else gy.clone()
    grad_z.addcmul_(z, r * proj, value=-1.0)
    grad_z.mul_(r.clamp(max=1.0 / HALF_BACKWARD_RMS_FLOOR))
    if ga is not None:
        grad_z.addcmul_(ga, gw)
    return grad_z, grad_w, grad_gw


def rms_normalize(
    z: torch.Tensor, eps: float, weight: Optional[torch.Tensor] = None, gate_weight: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """z / sqrt(mean(z^2) + eps) * weight [* sigmoid(gate_weight * z)] over the last
    dimension, computed in float32 (float64 stays float64), returned in z's dtype."""
    if torch.is_grad_enabled() and (
        z.requires_grad
        or (weight is not None and weight.requires_grad)
        or (gate_weight is not None and gate_weight.requires_grad)
    ):
        return _RMSNormFunction.apply(z, weight, gate_weight, eps)
    # no gradient (decoding): the training forward's ops without the autograd function
    # (F.rms_norm is a composite on CPU that adds two copies; measured in a decoder call:
    # a few microseconds more than these ops, and these give the training forward's numbers)
    dtype = _compute_dtype(z)
    out = _rms_norm_forward(_as(z, dtype), eps, _as(weight, dtype), _as(gate_weight, dtype))[0]
    return _as(out, z.dtype)


_FUSED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class _FusableRMSNorm(nn.Module):
    """An RMS norm that can run as the fused Triton kernel (:func:`build_output_norm`)."""

    eps: float
    weight: nn.Parameter
    #: ``fused_rms_normalize`` once :meth:`use_fused_kernel` chose it, else None
    _fused: Optional[Callable[..., torch.Tensor]] = None

    def use_fused_kernel(self) -> None:
        """Run as the fused kernel from now on, where it serves the width (else unchanged)."""
        from ..kernels import output_norm

        if 1 <= self.weight.numel() <= NORM_MAX_WIDTH:
            self._fused = output_norm.fused_rms_normalize

    @property
    def fused(self) -> bool:
        return self._fused is not None

    def _normalize(self, z, gate_weight=None):
        fused = self.kernel_arguments(z.dtype) if self._fused is not None else None
        if fused is not None:
            w, _, eps, floor = fused  # the floor as it is now
            return self._fused(z, eps, w, gate_weight, floor)  # type: ignore[misc]  # fused: set
        return rms_normalize(z, self.eps, self.weight, gate_weight)

    def kernel_arguments(self, dtype: torch.dtype) -> Optional[tuple]:
        """What the fused kernel takes for inputs of ``dtype`` where it serves them (the
        width, the dtypes), whether or not this module runs as the kernel itself: for a
        caller that runs the kernel (``kernels/normed_attention.py``, the direct kernel call
        of a module on ``triton``, or on ``auto`` where auto takes the kernels)."""
        w = self.weight
        if dtype not in _FUSED_DTYPES or not (w.dtype == torch.float32 or w.dtype == dtype):
            return None
        if not 1 <= w.numel() <= NORM_MAX_WIDTH:
            return None
        return w, getattr(self, "gate_weight", None), self.eps, HALF_BACKWARD_RMS_FLOOR


@register_output_norm("none")
class NoOutputNorm(nn.Identity):
    def __init__(self, embed_dim, head_dim, eps):
        super().__init__()


@register_output_norm("rmsnorm")
class RMSNorm(_FusableRMSNorm):
    """RMSNorm(z) = z / RMS(z) * g (ReLA Eq. 4), gain initialised to 1."""

    def __init__(self, embed_dim, head_dim, eps):
        super().__init__()
        self.eps = eps
        self.head_dim = head_dim
        self.weight = nn.Parameter(torch.ones(embed_dim))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.ones_(self.weight)

    def forward(self, z):
        return self._normalize(z)

    def extra_repr(self):
        return f"{self.weight.numel()}, eps={self.eps}" + (", fused" if self.fused else "")


@register_output_norm("rmsnorm_i")
class RMSNormUniformGain(RMSNorm):
    """ReLA-i: RMSNorm with gain g ~ U(-sqrt(3/d_h), sqrt(3/d_h)), d_h = head dimension."""

    def reset_parameters(self):
        uniform_unit_scaling_(self.weight, self.head_dim)


class _Gated(nn.Module):
    """sigmoid(w * z) * inner(z) (ReLA-g, Eq. 5)."""

    def __init__(self, embed_dim, head_dim, eps):
        super().__init__()
        self.gate_weight = nn.Parameter(torch.empty(embed_dim))
        uniform_unit_scaling_(self.gate_weight, embed_dim)

    def gate(self, z):
        return (z.float() * self.gate_weight.float()).sigmoid_()

    @staticmethod
    def gated(normed, gate):
        """normed * gate; in place when no gradient is recorded (decoding)."""
        return normed.mul_(gate) if not torch.is_grad_enabled() else normed * gate


@register_output_norm("gated_rmsnorm")
class GatedRMSNorm(_Gated, _FusableRMSNorm):
    def __init__(self, embed_dim, head_dim, eps):
        super().__init__(embed_dim, head_dim, eps)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(embed_dim))

    def forward(self, z):
        return self._normalize(z, self.gate_weight)

    def extra_repr(self):
        return f"{self.weight.numel()}, eps={self.eps}" + (", fused" if self.fused else "")


@register_output_norm("layernorm")
class LayerNormOutput(nn.LayerNorm):
    """Plain LayerNorm on the concatenated heads (float32 statistics, eps 1e-5)."""

    def __init__(self, embed_dim, head_dim, eps):
        super().__init__(embed_dim)

    def forward(self, z):
        return F.layer_norm(z.float(), self.normalized_shape, self.weight.float(), self.bias.float(), self.eps).type_as(
            z
        )


@register_output_norm("gated_layernorm")
class GatedLayerNorm(_Gated):
    def __init__(self, embed_dim, head_dim, eps):
        super().__init__(embed_dim, head_dim, eps)
        self.norm = LayerNormOutput(embed_dim, head_dim, eps)

    def forward(self, z):
        return self.gated(self.norm(z).float(), self.gate(z)).type_as(z)
