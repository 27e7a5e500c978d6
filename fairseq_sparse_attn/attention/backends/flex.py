"""``flex``: relu / relu_scaled through the fused FlexAttention kernel (:mod:`..flex_relu`):
in auto only on devices where a recorded benchmark measured it faster (none yet: only when
forced), for calls with at least ``--attn-flex-min-keys`` keys; no weights, dropout,
biases, row sums."""

from typing import Optional, cast

import torch

from ..activations import Rectified
from ..core import STREAMED_TRAITS, AttendSpec, AttentionInputs, Backend, Call, Capabilities, register_backend
from ..intermediates import Intermediates


def flex(q, k, v, inputs: AttentionInputs, spec: AttendSpec, call: Call):
    """relu / relu_scaled through the fused FlexAttention kernel (:mod:`..flex_relu`):
    no (tgt × src) weights held; CUDA training and inference, CPU compiled inference."""
    from ..flex_relu import flex_relu_attention

    groups = inputs.kv_groups
    if groups > 1:
        k = k.repeat_interleave(groups, dim=0)
        v = v.repeat_interleave(groups, dim=0)
    act = cast(Rectified, spec.activation)  # (served for rectified activations only)
    out = flex_relu_attention(q, k, v, inputs.hidden, act.row_scale if act.row_scaled else None, score_fn=act.fn)
    return out, Intermediates(backend="flex")


#: devices on which "auto" tries the fused kernel for long calls: those where a recorded
#: benchmark measured it faster (:data:`..flex_relu.FLEX_MEASURED_FASTER`; none yet, so
#: auto never takes it).  On CPU the compiled kernel (forward only) measured slower than
#: the ``query_block`` path at L = 2048 (docs/performance.md); on CUDA nothing is measured.
#: --attn-backend flex forces it anywhere it can run.
def _flex_auto_devices():
    from ..flex_relu import FLEX_MEASURED_FASTER

    return frozenset(FLEX_MEASURED_FASTER)


FLEX_AUTO_DEVICES = _flex_auto_devices()


def _flex_enabled(spec: AttendSpec, call: Call) -> bool:
    """Auto tries it (where it can run: :func:`_flex_unavailable`)."""
    return spec.flex_min_keys > 0 and call.keys >= spec.flex_min_keys and call.device in FLEX_AUTO_DEVICES


def _flex_unavailable(call: Call) -> Optional[str]:
    """Why the fused kernel cannot run this call here (platform, gradients, dtype, mask)."""
    from ..flex_relu import flex_relu_unavailable

    return flex_relu_unavailable(call.device, call.grad, call.dtype or torch.float32, call.query_mask)


register_backend(
    Backend(
        "flex",
        flex,
        Capabilities(activation_traits=STREAMED_TRAITS, devices=frozenset({"cpu", "cuda"})),
        priority=40,
        enabled=_flex_enabled,
        auto_when=(
            "for calls with at least --attn-flex-min-keys keys on the devices where it measured "
            "faster (FLEX_AUTO_DEVICES: none yet)"
        ),
        unavailable=_flex_unavailable,
    )
)
