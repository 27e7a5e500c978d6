"""``sdpa``: softmax through torch's fused ``scaled_dot_product_attention``; learned heads
only, no bias providers, no weights returned."""

import torch.nn.functional as F

from ..core import AttendSpec, AttentionInputs, Backend, Call, Capabilities, register_backend
from ..intermediates import Intermediates
from ..masks import additive_mask


def sdpa(q, k, v, inputs: AttentionInputs, spec: AttendSpec, call: Call):
    """Softmax through ``torch.nn.functional.scaled_dot_product_attention`` (fused
    kernels on GPU); q is already scaled, so the kernel's own scale is 1."""
    groups = inputs.kv_groups
    if groups > 1:
        k = k.repeat_interleave(groups, dim=0)
        v = v.repeat_interleave(groups, dim=0)
    mask = additive_mask(inputs.hidden, inputs.score_bias, q.dtype, q.device)
    p = spec.dropout.p if call.dropout else 0.0
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, scale=1.0)
    return out, Intermediates(backend="sdpa")


register_backend(
    Backend(
        "sdpa", sdpa, Capabilities(activation_traits=frozenset({"softmax"}), dropout=True, score_bias=True), priority=20
    )
)
