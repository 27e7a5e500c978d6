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
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .registry import Registry

OUTPUT_NORM_REGISTRY = Registry("attention output norm")
register_output_norm = OUTPUT_NORM_REGISTRY.register
output_norm_names = OUTPUT_NORM_REGISTRY.names

RMSNORM_EPS = 1e-8


def build_output_norm(name: str, embed_dim: int, head_dim: int, options=None) -> nn.Module:
    from ..options import plugin_options

    eps = plugin_options(options).attn_norm_eps  # default RMSNORM_EPS
    return OUTPUT_NORM_REGISTRY.get_or_raise(name)(embed_dim=embed_dim, head_dim=head_dim, eps=float(eps))


def uniform_unit_scaling_(tensor: torch.Tensor, fan: int) -> torch.Tensor:
    bound = math.sqrt(3.0 / fan)
    with torch.no_grad():
        return tensor.uniform_(-bound, bound)


_FUSED_RMS_NORM = hasattr(F, "rms_norm")  # torch >= 2.4


def rms_normalize(z: torch.Tensor, eps: float, weight: torch.Tensor = None) -> torch.Tensor:
    """z / sqrt(mean(z^2) + eps) * weight over the last dimension, computed in float32."""
    z32 = z.float()
    w32 = None if weight is None else weight.float()
    if _FUSED_RMS_NORM:
        return F.rms_norm(z32, (z32.size(-1),), w32, eps)
    out = z32 * torch.rsqrt(z32.pow(2).mean(dim=-1, keepdim=True) + eps)
    return out if w32 is None else out * w32


@register_output_norm("none")
class NoOutputNorm(nn.Identity):
    def __init__(self, embed_dim, head_dim, eps):
        super().__init__()


@register_output_norm("rmsnorm")
class RMSNorm(nn.Module):
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
        return rms_normalize(z, self.eps, self.weight).type_as(z)

    def extra_repr(self):
        return f"{self.weight.numel()}, eps={self.eps}"


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
class GatedRMSNorm(_Gated):
    def __init__(self, embed_dim, head_dim, eps):
        super().__init__(embed_dim, head_dim, eps)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(embed_dim))

    def forward(self, z):
        return self.gated(rms_normalize(z, self.eps, self.weight), self.gate(z)).type_as(z)

    def extra_repr(self):
        return f"{self.weight.numel()}, eps={self.eps}"


@register_output_norm("layernorm")
class LayerNormOutput(nn.LayerNorm):
    """Plain LayerNorm on the concatenated heads (float32 statistics, eps 1e-5)."""

    def __init__(self, embed_dim, head_dim, eps):
        super().__init__(embed_dim)

    def forward(self, z):
        return F.layer_norm(
            z.float(), self.normalized_shape, self.weight.float(), self.bias.float(), self.eps
        ).type_as(z)


@register_output_norm("gated_layernorm")
class GatedLayerNorm(_Gated):
    def __init__(self, embed_dim, head_dim, eps):
        super().__init__(embed_dim, head_dim, eps)
        self.norm = LayerNormOutput(embed_dim, head_dim, eps)

    def forward(self, z):
        return self.gated(self.norm(z).float(), self.gate(z)).type_as(z)
