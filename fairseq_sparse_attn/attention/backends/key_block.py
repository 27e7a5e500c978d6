"""``key_block``: ReLU-family attention streamed over blocks of keys
(:mod:`..chunked_relu`), only with ``--attn-key-block-size``; no weights, no dropout (an
error in training), no biases."""

from typing import cast

from ..activations import Rectified
from ..core import AttendSpec, AttentionInputs, Backend, Call, Capabilities, register_backend
from ..intermediates import Intermediates
from ..masks import key_counts


def key_block(q, k, v, inputs: AttentionInputs, spec: AttendSpec, call: Call):
    """ReLU-family weights streamed over blocks of keys (:mod:`..chunked_relu`): the
    (tgt × src) weights are never held; the row sums come from the same pass."""
    from ..chunked_relu import chunked_relu_attention

    groups = inputs.kv_groups
    if groups > 1:
        k = k.repeat_interleave(groups, dim=0)
        v = v.repeat_interleave(groups, dim=0)
    mask = inputs.hidden
    n = key_counts(mask, k.size(2), q.device)
    # (served for activations with supports_chunking: rectified, with a row factor)
    scale = cast(Rectified, spec.activation).row_scale(n)
    out, wsum, wlogw = chunked_relu_attention(
        q.float(), k.float(), v.float(), mask, scale, block=spec.key_block_size, with_sums=call.row_sums
    )
    inter = Intermediates(backend="key_block")
    if call.row_sums:
        inter.row_sums = (wsum, wlogw, n)
    return out.type_as(q), inter


def _key_block_enabled(spec: AttendSpec, call: Call) -> bool:
    if spec.key_block_size <= 0 or not getattr(spec.activation, "supports_chunking", False):
        return False
    if call.dropout:
        raise ValueError(
            "--attn-key-block-size needs --attention-dropout 0 (the key-block path cannot replay a dropout mask)"
        )
    return True


register_backend(
    Backend(
        "key_block",
        key_block,
        Capabilities(activation_traits=frozenset({"supports_chunking"}), row_sums=True),
        priority=30,
        enabled=_key_block_enabled,
        auto_when="with --attn-key-block-size > 0",
    )
)
