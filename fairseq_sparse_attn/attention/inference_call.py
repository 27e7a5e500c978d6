"""The inference call: one attention call without gradients, done in a few direct
operations.

A decoding step calls every attention module once per token on tiny tensors (batch 1,
beam 4: a (1, 4, 256) query), where the cost of a call is its Python bookkeeping and its
number of operations, not arithmetic.  Through the general path a ReLA-g call did its
projections and fairseq's cache handling in ~25 µs of Python, then described the call,
chose a backend, built the per-call inputs and intermediates (~30 µs more than stock
fairseq's own incremental path for the *same* softmax), so ReLA decoded 5-10% slower
than stock softmax although ReLU is cheaper than softmax (docs/performance.md).

This module is that call without the bookkeeping, for modules whose pipeline is plain
(:func:`static_reason`) and calls that need nothing from it (:func:`serves`):

    q, k, v   = projections (q scaled), fairseq's cache (prev_key, prev_value,
                prev_key_padding_mask) read and written exactly as stock fairseq
    scores    = q kᵀ                              :func:`.core._scores`
    weights   = activation(scores, hidden)        the module's activation
    heads     = weights · v                       :func:`.core._value_mix`
    out       = out_proj(output_norm(heads))

which are the operations of :func:`.core.attend`'s ``materialized`` backend, in the same
order on the same tensors: the outputs, the cache and the head-averaged weights equal the
general path's bit for bit (``tests/unit/test_inference_call.py``).  Where ``auto`` would
choose another backend for the call (``query_block`` for a call over at least
``--attn-flex-min-keys`` keys, ``flex`` on CUDA), the projected q, k, v go to
:func:`.core.attend` as in the general path.

Not served here (the general path runs): gradients, applied dropout, analysis collectors,
``before_softmax``, an attention mask with additive (non-hiding) values,
softmax (``sdpa``; stock softmax never reaches the plugin's pipeline), fixed-pattern,
masked or RHE heads, bias providers, ``bias_kv`` / zero attention, a forced backend, the
key-block path.
"""

from typing import Callable, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.modules import module as _module

from .activations import AttentionActivation
from .core import AttentionInputs, Dropout, _scores, _value_mix, applies_dropout, attend, streamed


def static_reason(module) -> Optional[str]:
    """Why ``module`` (a :class:`~.multihead.SparseMultiheadAttention`) never takes the
    inference call, or None when it may.  Depends only on attributes that drop the
    module's cached plan when set (``SPEC_ATTRIBUTES``) or that are fixed at build time."""
    if module.backend != "auto":
        return f"backend forced to {module.backend!r}"
    if module.activation.softmax:
        return "softmax (served by sdpa or stock fairseq)"
    if not module.heads.all_learned or module.heads.masked is not None or module.heads.rhe is not None:
        return "fixed-pattern, masked or RHE heads"
    if len(module.biases) or module.rhe is not None:
        return "attention bias providers"
    if module.bias_k is not None or module.add_zero_attn:
        return "bias_kv / zero attention"
    if module.key_block_size > 0:
        return "the key-block path (--attn-key-block-size)"
    if module.q_proj is None or module.k_proj is None:
        return "no query/key projections"
    if not (module.self_attention or module.encoder_decoder_attention):
        return "attention with separate key and value inputs"
    return None


class InferencePlan(NamedTuple):
    """What the inference call reads from its module, looked up once (a submodule read
    through ``nn.Module.__getattr__`` costs ~0.7 µs; a call reads a dozen)."""

    q_proj: torch.nn.Module
    k_proj: torch.nn.Module
    v_proj: torch.nn.Module
    out_proj: torch.nn.Module
    activation: AttentionActivation
    output_norm: torch.nn.Module
    dropout: Dropout
    state_key: str  # fairseq's incremental-state key of the module's cache
    heads: int
    head_dim: int
    embed_dim: int
    scaling: float
    self_attention: bool
    encoder_decoder_attention: bool
    rectify_: Optional[Callable[[Tensor], Tensor]]  # f in place on the fresh scores, or None
    streamed_min_keys: int  # calls over at least this many keys go to attend() (0 = never)


def build_plan(module) -> Optional[InferencePlan]:
    """The module's plan, or None where :func:`static_reason` rules the call out."""
    if static_reason(module) is not None:
        return None
    m = module
    act = m.activation
    # long calls of these activations: ``auto`` hands them to query_block (CPU) or flex (CUDA)
    streamed_min_keys = m.flex_min_keys if streamed(act) else 0
    # a rectified activation with exact zeros and no row factor: f(0) = 0, so the hidden
    # scores are zeroed and f applied in place, the activation's own forward without a copy
    inplace = act.rectified and act.exact_zeros and not act.row_scaled
    return InferencePlan(
        q_proj=m.q_proj,
        k_proj=m.k_proj,
        v_proj=m.v_proj,
        out_proj=m.out_proj,
        activation=m.activation,
        output_norm=m.output_norm,
        dropout=m.dropout_module,
        state_key=m._get_full_incremental_state_key("attn_state"),
        heads=m.num_heads,
        head_dim=m.head_dim,
        embed_dim=m.embed_dim,
        scaling=m.scaling,
        self_attention=m.self_attention,
        encoder_decoder_attention=m.encoder_decoder_attention,
        rectify_=act.fn_ if inplace else None,
        streamed_min_keys=max(int(streamed_min_keys), 0),
    )


def serves(plan: InferencePlan, before_softmax: bool, collect) -> bool:
    """The per-call conditions (cheap: checked at every call)."""
    return not collect and not before_softmax and not torch.is_grad_enabled() and not applies_dropout(plan.dropout)


def _linear(proj, x: Tensor) -> Tensor:
    """``proj(x)``; a plain ``nn.Linear`` without hooks is applied directly (a module call
    costs a few µs of Python, a visible share of a decoding step)."""
    if (
        type(proj) is torch.nn.Linear
        and not proj._forward_hooks
        and not proj._forward_pre_hooks
        and not _module._global_forward_hooks
        and not _module._global_forward_pre_hooks
    ):
        params = proj._parameters
        return F.linear(x, params["weight"], params["bias"])  # type: ignore[arg-type]  # a Linear's weight
    return proj(x)


def hiding_mask_only(module, attn_mask: Optional[Tensor]) -> bool:
    """True when ``attn_mask`` only hides keys (None, boolean, or fairseq's -inf / -1e8
    float masks): the call needs no additive score bias."""
    if attn_mask is None or attn_mask.dtype == torch.bool:
        return True
    bias, _ = module._cached("attn_mask", attn_mask, None, module._split_attn_mask)
    return bias is None


def inference_call(
    module,
    plan: InferencePlan,
    query: Tensor,
    key: Optional[Tensor],
    key_padding_mask: Optional[Tensor],
    incremental_state,
    need_weights: bool,
    static_kv: bool,
    attn_mask: Optional[Tensor],
    need_head_weights: bool = False,
):
    """``module.forward`` for a call that :func:`serves`, with the module's
    :class:`InferencePlan`: returns ``(out, weights)``, the weights (float32) averaged over
    the heads (bsz, tgt, src) when ``need_weights``, per head (heads, bsz, tgt, src) when
    ``need_head_weights`` (fairseq asks for them from the alignment layer's
    cross-attention at every decoding step), else None."""
    need_weights = need_weights or need_head_weights
    tgt_len, bsz, embed_dim = query.shape
    if embed_dim != plan.embed_dim:
        raise ValueError(f"query dim {embed_dim} != {plan.embed_dim}")
    heads, d = plan.heads, plan.head_dim

    saved = None
    if incremental_state is not None:
        saved = incremental_state.get(plan.state_key)
        if saved is None:
            saved = incremental_state[plan.state_key] = {}
        elif static_kv and "prev_key" in saved:
            key = None  # the encoder's keys and values are cached

    k: Optional[Tensor]
    v: Optional[Tensor]
    # (tgt, bsz, embed) -> (bsz * heads, tgt, d); one query (a decoding step): one view
    q = _linear(plan.q_proj, query).mul_(plan.scaling)
    q = q.view(bsz * heads, 1, d) if tgt_len == 1 else q.view(tgt_len, bsz * heads, d).transpose(0, 1)
    kv_bsz = bsz
    if plan.self_attention:
        key = query
    if key is not None:
        beam = getattr(module, "beam_size", 1)
        if plan.encoder_decoder_attention and beam > 1 and bsz == key.size(1):
            # key is [T, bsz*beam, C]: one copy per sentence (stock fairseq's optimisation)
            key = key.view(key.size(0), -1, beam, key.size(2))[:, :, 0, :]
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.view(-1, beam, key_padding_mask.size(1))[:, 0, :]
        kv_bsz = key.size(1)
        # (the value input is the key input: self-attention and encoder-decoder attention)
        k = _linear(plan.k_proj, key)
        v = _linear(plan.v_proj, key)
        if key.size(0) == 1:
            k = k.view(kv_bsz * heads, 1, d)
            v = v.view(kv_bsz * heads, 1, d)
        else:
            k = k.view(-1, kv_bsz * heads, d).transpose(0, 1)
            v = v.view(-1, kv_bsz * heads, d).transpose(0, 1)
    else:
        k = v = None
    if saved is not None:
        prev_key = saved.get("prev_key")
        if prev_key is not None:
            kv_bsz = prev_key.size(0)
            prev_key = prev_key.view(kv_bsz * heads, -1, d)
            prev_value = saved["prev_value"].view(kv_bsz * heads, -1, d)
            if static_kv:
                k, v = prev_key, prev_value
            else:
                k = torch.cat([prev_key, k], dim=1)  # type: ignore[list-item]  # projected above
                v = torch.cat([prev_value, v], dim=1)  # type: ignore[list-item]
        assert k is not None and v is not None  # (no key input: the cache holds them)
        prev_pad = saved.get("prev_key_padding_mask")
        if prev_pad is not None or key_padding_mask is not None:
            key_padding_mask = module._append_prev_key_padding_mask(
                key_padding_mask=key_padding_mask,
                prev_key_padding_mask=prev_pad,
                batch_size=kv_bsz,
                src_len=v.size(1),
                static_kv=static_kv,
            )
        saved["prev_key"] = k.view(kv_bsz, heads, -1, d)
        saved["prev_value"] = v.view(kv_bsz, heads, -1, d)
        saved["prev_key_padding_mask"] = key_padding_mask
    if key_padding_mask is not None and key_padding_mask.dim() == 0:
        key_padding_mask = None

    assert k is not None and v is not None
    src_len = v.size(1)
    hidden = None
    if attn_mask is not None or key_padding_mask is not None:
        hidden = module._visibility_mask(attn_mask, key_padding_mask, bsz, tgt_len, src_len)[1]
    groups = bsz // kv_bsz
    weights = None
    if plan.streamed_min_keys and src_len >= plan.streamed_min_keys and not need_weights:
        # a long call: the backend auto chooses (query_block on CPU, flex on CUDA)
        inputs = AttentionInputs(hidden=hidden, key_padding=key_padding_mask, kv_groups=groups)
        out, _ = attend(
            q.view(bsz, heads, tgt_len, d),
            k.view(kv_bsz, heads, src_len, d),
            v.view(kv_bsz, heads, src_len, d),
            inputs,
            module.spec(),
        )
        out = out.view(bsz * heads, tgt_len, d)
    else:
        # the materialized backend's operations (core._scores, activation, core._value_mix)
        if groups == 1:
            scores = torch.bmm(q, k.transpose(1, 2)).view(bsz, heads, tgt_len, src_len).float()
        else:
            scores = _scores(q.view(bsz, heads, tgt_len, d), k.view(kv_bsz, heads, src_len, d), groups)
        if plan.rectify_ is not None:  # Rectified.forward, in place on the fresh scores
            if hidden is not None:
                scores.masked_fill_(hidden, 0.0)
            weights = plan.rectify_(scores)
        else:
            weights = plan.activation(scores, hidden)
        probs = weights.type_as(v)
        if groups == 1:
            out = torch.bmm(probs.view(bsz * heads, tgt_len, src_len), v)
        else:
            out = _value_mix(probs, v.view(kv_bsz, heads, src_len, d), groups).view(bsz * heads, tgt_len, d)
    # (bsz * heads, tgt, d) -> (tgt, bsz, embed); one query: a view
    if tgt_len == 1:
        attn = out.view(1, bsz, plan.embed_dim)
    else:
        attn = out.transpose(0, 1).reshape(tgt_len, bsz, plan.embed_dim)
    attn = _linear(plan.out_proj, plan.output_norm(attn))
    if need_weights and weights is not None:
        weights = weights.transpose(1, 0)
        return attn, (weights if need_head_weights else weights.mean(dim=0))
    return attn, None
