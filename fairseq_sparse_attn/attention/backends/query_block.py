"""``query_block``: relu / relu_scaled without gradients, block by block over the queries
(:mod:`..query_block_relu`): in auto for calls with at least ``--attn-flex-min-keys`` keys
(long documents on CPU); no weights, dropout, biases, row sums, gradients."""

from typing import cast

from ..activations import Rectified
from ..core import STREAMED_TRAITS, AttendSpec, AttentionInputs, Backend, Call, Capabilities, register_backend
from ..intermediates import Intermediates
from ..masks import per_key_group


def query_block(q, k, v, inputs: AttentionInputs, spec: AttendSpec, call: Call):
    """relu / relu_scaled without gradients, block by block over the queries
    (:mod:`..query_block_relu`): one reused score buffer instead of the (tgt × src) weights,
    no pass over the scores for padding masks."""
    from ..query_block_relu import query_block_relu_attention

    groups = inputs.kv_groups
    hidden = inputs.hidden
    act = cast(Rectified, spec.activation)  # (served for rectified activations only)
    row_scale = act.row_scale if act.row_scaled else None
    if groups == 1:
        return (
            query_block_relu_attention(q, k, v, hidden, row_scale, fn_=act.fn_),
            Intermediates(backend="query_block"),
        )
    bsz, heads, tgt, d = q.shape
    kv_bsz = k.size(0)
    if hidden is not None and hidden.size(2) > 1:  # per-query mask: one key copy per query group
        out = query_block_relu_attention(
            q, k.repeat_interleave(groups, dim=0), v.repeat_interleave(groups, dim=0), hidden, row_scale, fn_=act.fn_
        )
        return out, Intermediates(backend="query_block")
    # beam search keeps one key copy per sentence: the beams' queries become more queries
    # of that sentence (no copy of the keys and values at every decoding step)
    hidden = per_key_group(hidden, bsz, groups)  # the same keys for every beam of a sentence
    q = q.view(kv_bsz, groups, heads, tgt, d).transpose(1, 2).reshape(kv_bsz, heads, groups * tgt, d)
    out = query_block_relu_attention(q, k, v, hidden, row_scale, fn_=act.fn_)
    out = out.view(kv_bsz, heads, groups, tgt, -1).transpose(1, 2).reshape(bsz, heads, tgt, -1)
    return out, Intermediates(backend="query_block")


def _query_block_enabled(spec: AttendSpec, call: Call) -> bool:
    return spec.flex_min_keys > 0 and call.keys >= spec.flex_min_keys


register_backend(
    Backend(
        "query_block",
        query_block,
        Capabilities(activation_traits=STREAMED_TRAITS, grad=False),
        priority=45,
        enabled=_query_block_enabled,
        auto_when="for calls with at least --attn-flex-min-keys keys",
    )
)
