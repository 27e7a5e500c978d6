"""The call plan: one per attention module, built once from the module's
:class:`~.config.AttentionConfig` and its parameters, and self-contained: it is the only code
that projects q, k, v, reads or writes fairseq's incremental cache, appends ``bias_kv`` and
zero attention, takes the call's masks (from :mod:`.masks`) and writes the output ending
(output norm, ``out_proj``, the returned head weights).  It never calls back into the module.

:class:`~.multihead.SparseMultiheadAttention`'s ``forward`` is "stock fairseq, else the
plan" (:meth:`CallPlan.delegates_to_stock`, :meth:`CallPlan.forward`).  Every call the plan
serves goes through :meth:`CallPlan.project`:

    q, k, v   = projections (q scaled), in (batch * heads, len, head_dim)
    cache     = fairseq's ``prev_key``, ``prev_value``, ``prev_key_padding_mask``, read and
                written exactly as stock fairseq (incremental calls only: a whole-sequence
                call never caches)

and is then handed to one of three places:

* :func:`~.core.attend` (the general path: analysis collectors, every head policy, bias
  provider and backend);
* :meth:`CallPlan.inline_call`, the *inference call*: a call without gradients, applied
  dropout or analysis on a module with a plain pipeline (:func:`inline_reason` is None) does
  the materialized backend's operations directly, without describing the call or choosing a
  backend.  Decoding one sentence at a time is mostly such calls on tiny tensors (batch 1,
  beam 4: a (1, 4, 256) query), where a call costs its Python bookkeeping and its number of
  operations, not arithmetic (docs/performance.md, "The inference call");
* the *plain training call*: a call with gradients or dropout of such a module, without
  analysis, that ``auto`` would run on ``materialized`` (:meth:`CallPlan.auto_backend`:
  a fused kernel measured faster still gets it) runs the same operations, :meth:`CallPlan.plain`,
  which both share::

      scores  = q kᵀ (+ hiding bias)         one bmm / baddbmm on (batch * heads) tensors
      weights = activation(scores)           (its hiding score: no mask pass; else the mask)
      heads   = dropout(weights) · v
      out     = out_proj(output_norm(heads))  (:meth:`CallPlan.end`, shared with attend())

  the operations of ``materialized`` on the same numbers: outputs, gradients, cache and
  returned weights equal the general path's bit for bit (``tests/unit/test_call_plan.py``),
  with fewer dispatched ops (no 4-d views, the mask inside the product: a training step's op
  count, tests/unit/test_op_count.py).  A long inference call (at least
  ``--attn-flex-min-keys`` keys) of a streamed activation still goes to
  :func:`~.core.attend`, which picks ``query_block`` as in the general path.

The plan holds the submodules and sizes a call reads (a submodule read through
``nn.Module.__getattr__`` costs ~0.7 µs; a call reads a dozen), and is dropped and rebuilt
when the module sets an attribute it was built from (``SPEC_ATTRIBUTES``, the config among
them).  Beam reordering
of the cache is fairseq's own ``reorder_incremental_state`` on the same format.
"""

import dataclasses
from typing import Callable, List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import masks
from .activations import AttentionActivation
from .backends.materialized import _scores, _value_mix
from .config import AttentionConfig
from .core import (
    AttendSpec,
    AttentionInputs,
    Call,
    Dropout,
    applies_dropout,
    attend,
    choose_backend,
    hook_free,
    is_stock,
    serves_weight_requests,
    streamed,
)
from .intermediates import Intermediates

#: What :meth:`CallPlan.project` returns: q (None without learned heads), k (None without
#: learned heads), v in (batch * heads, len, head_dim), the padding and attention masks after
#: the cache, bias_kv and zero attention, and the key batch size (``kv_bsz < bsz`` when
#: cross-attention keeps one key copy per beam group).
Projected = Tuple[Optional[Tensor], Optional[Tensor], Tensor, Optional[Tensor], Optional[Tensor], int]


def inline_reason(module) -> Optional[str]:
    """Why ``module`` (a :class:`~.multihead.SparseMultiheadAttention`) never takes the
    inference call, or None when it may.  Depends only on its config and on attributes that
    drop the module's cached plan when set (``SPEC_ATTRIBUTES``) or that are fixed at build
    time."""
    config: AttentionConfig = module.config
    if config.backend.name not in ("auto", "materialized"):  # the inline calls run materialized's ops
        return f"backend forced to {config.backend.name!r}"
    return plain_pipeline_reason(module)


def plain_pipeline_reason(module) -> Optional[str]:
    """Why ``module``'s pipeline is not plain (learned heads only, no bias providers, no
    bias_kv or zero attention, projections of one input), or None when it is: the
    condition of the inference call apart from the backend, and of the direct kernel call
    (:meth:`CallPlan.kernel`)."""
    config: AttentionConfig = module.config
    if module.activation.softmax:
        return "softmax (served by sdpa or stock fairseq)"
    if not module.heads.all_learned or module.heads.masked is not None or module.heads.rhe is not None:
        return "fixed-pattern, masked or RHE heads"
    if len(module.biases) or module.rhe is not None:
        return "attention bias providers"
    if module.bias_k is not None or module.add_zero_attn:
        return "bias_kv / zero attention"
    if config.backend.key_block_size > 0:
        return "the key-block path (--attn-key-block-size)"
    if module.q_proj is None or module.k_proj is None:
        return "no query/key projections"
    if not (module.self_attention or module.encoder_decoder_attention):
        return "attention with separate key and value inputs"
    return None


def _plain_linear(proj) -> bool:
    """A plain ``nn.Linear`` without hooks: applied directly (a module call costs a few µs
    of Python, a visible share of a decoding step)."""
    return type(proj) is torch.nn.Linear and hook_free(proj)


def _linears(x: Tensor, *projs) -> List[Optional[Tensor]]:
    """``proj(x)`` for each of ``projs`` (None for None) on x (len, batch, features), each
    as (len * batch, out) or (len, batch, out).  The plain ones (:func:`_plain_linear`) on a
    contiguous x share one flattening view: ``F.linear`` flattens a contiguous 3-d input
    itself (view, addmm, view per call), so the numbers are its own, bit for bit, with
    two ops fewer per projection (tests/unit/test_op_count.py)."""
    flat = None
    outs: List[Optional[Tensor]] = []
    for proj in projs:
        if proj is None:
            outs.append(None)
        elif _plain_linear(proj):
            params = proj._parameters
            if flat is None:
                flat = x.view(-1, x.size(-1)) if x.is_contiguous() else x
            outs.append(F.linear(flat, params["weight"], params["bias"]))
        else:
            outs.append(proj(x))
    return outs


def _heads_first(x: Tensor, length: int, batch_heads: int, d: int) -> Tensor:
    """(length, batch, heads * d), or flattened (length * batch, heads * d) -> (batch *
    heads, length, d); one position: a view."""
    if length == 1:
        return x.view(batch_heads, 1, d)
    return x.view(length, batch_heads, d).transpose(0, 1)


class CallPlan(NamedTuple):
    """What a call reads, looked up once from the config and the module's parameters (see
    the module docstring); a named tuple: fields read at every call cost a tuple index."""

    config: AttentionConfig
    spec: AttendSpec  # what attend() needs (activation, dropout, heads, biases, backend)
    stock: bool  # the module is exactly fairseq's MultiheadAttention (core.is_stock)
    q_proj: Optional[torch.nn.Module]  # None: no learned heads (all heads fixed patterns)
    k_proj: Optional[torch.nn.Module]
    v_proj: torch.nn.Module
    out_proj: torch.nn.Module
    bias_k: Optional[Tensor]  # fairseq's add_bias_kv parameters
    bias_v: Optional[Tensor]
    add_zero_attn: bool
    activation: AttentionActivation
    output_norm: torch.nn.Module
    dropout: Dropout
    state_key: str  # fairseq's incremental-state key of the module's cache
    beam_size: int  # fairseq's set_beam_size (cross-attention keeps one key copy per sentence)
    heads: int
    qk_heads: int  # heads with query/key projections (= heads unless some are fixed)
    head_dim: int
    embed_dim: int
    scaling: float
    self_attention: bool
    encoder_decoder_attention: bool
    inline: bool  # inline_reason(module) is None: calls that need nothing else go inline
    #: the fused kernels' direct call (backends.triton.direct_call) of a module with a plain
    #: pipeline whose backend is triton, or auto where auto may take the kernels (a CUDA
    #: device and a recorded measurement showing them faster); else None
    kernel: Optional[Callable[..., Optional[Tensor]]]
    #: the backend is auto: :attr:`kernel` serves the CUDA training calls that auto gives the
    #: triton backend (:meth:`auto_backend`), the others go on as without it
    kernel_if_auto_takes_it: bool
    streamed_min_keys: int  # inline calls over at least this many keys go to attend() (0 = never)
    #: fairseq's own weight requests are answered with weights (:func:`~.core.serves_weight_requests`)
    weights_on_request: bool

    # ------------------------------------------------------------------ stock fairseq or the plan
    def delegates_to_stock(self, collect, need_head_weights: bool) -> bool:
        """The call goes to stock fairseq's ``MultiheadAttention.forward`` (its fused fast
        path): a stock module (:func:`~.core.is_stock`), backend auto, and neither an analysis
        collecting weights nor per-head weights asked for (the fused path averages them)."""
        return self.stock and self.config.backend.name == "auto" and "weights" not in collect and not need_head_weights

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor],
        incremental_state,
        need_weights: bool,
        static_kv: bool,
        attn_mask: Optional[Tensor],
        before_softmax: bool,
        need_head_weights: bool,
        attn_inputs: Optional[AttentionInputs],
        collect,
    ) -> Tuple[Tensor, Optional[Tensor], Optional[Intermediates]]:
        """A call of the module that does not go to stock fairseq: ``(out, weights,
        intermediates for the open collectors or None)``; see the module docstring."""
        if self.serves_inline(before_softmax, collect) and masks.hiding_mask_only(attn_mask):
            # inference without analysis: the materialized backend's operations without the
            # per-call bookkeeping
            out, weights = self.inline_call(
                query, key, key_padding_mask, incremental_state, need_weights, static_kv, attn_mask, need_head_weights
            )
            return out, weights, None
        if need_head_weights:
            need_weights = True
        tgt_len, bsz, embed_dim = query.size()
        assert embed_dim == self.embed_dim, f"query dim {embed_dim} != {self.embed_dim}"
        if self.qk_heads != self.heads and (incremental_state is not None or before_softmax):
            raise ValueError(
                "fixed attention patterns are for encoder self-attention: no "
                "incremental decoding, no before_softmax scores"
            )
        if self.spec.biased and (incremental_state is not None or before_softmax):
            raise ValueError(
                "attention biases and RHE are for encoder self-attention: no "
                "incremental decoding, no before_softmax scores"
            )
        direct = self.kernel is not None and not collect and not before_softmax
        if direct and self.kernel_if_auto_takes_it:  # auto takes the kernels for training calls only
            direct = torch.is_grad_enabled()
        q, k, v, key_padding_mask, attn_mask, kv_bsz = self.project(
            query, key, value, key_padding_mask, incremental_state, static_kv, attn_mask, scale_q=not direct
        )
        src_len = v.size(1)
        heads, d, qk_heads = self.heads, self.head_dim, self.qk_heads
        bias, mask = masks.visibility_mask(attn_mask, key_padding_mask, bsz, tgt_len, src_len)
        chosen: Optional[str] = None  # auto's backend for this call, once asked
        if direct and self.kernel_if_auto_takes_it:
            chosen = self.auto_backend(q, v, mask, need_weights)
            if chosen != "triton":  # not this call: q scaled as project() would have
                assert q is not None  # a plain pipeline
                direct = False
                q = q * self.scaling
        if direct:
            assert q is not None and k is not None and self.kernel is not None  # a plain pipeline
            normed: Optional[Tensor] = None
            if bias is None:
                # the kernels scale the scores themselves (no op for q * scaling)
                normed = self.kernel(
                    q.view(bsz, heads, tgt_len, d),
                    k.view(kv_bsz, heads, src_len, d),
                    v.view(kv_bsz, heads, src_len, d),
                    mask,
                    bsz // kv_bsz,
                    self.scaling,
                    self.dropout.p if applies_dropout(self.dropout) else 0.0,
                )
            if normed is not None:  # the concatenated heads after the output norm
                out, _ = self.project_out(normed, tgt_len, bsz, None, False, False)
                return out, None, None
            # a call the kernels do not serve: attend() with the scaled q (it says why)
            q = q * self.scaling
        if (
            self.inline
            and not collect
            and not before_softmax
            and bias is None
            and kv_bsz == bsz
            and (chosen or self.auto_backend(q, v, mask, need_weights)) == "materialized"
        ):
            # (training calls): the materialized backend's operations on the (bsz * heads)
            # tensors, without the per-call bookkeeping of attend()
            out, weights = self.plain(q, k, v, mask, bsz, tgt_len, need_weights)  # type: ignore[arg-type]
            attn = self.heads_last(out, tgt_len, bsz)
            out, weights = self.end(attn, tgt_len, bsz, weights, need_weights, need_head_weights)
            return out, weights, None
        q4 = q.view(bsz, qk_heads, tgt_len, d) if q is not None else None
        k4 = k.view(kv_bsz, qk_heads, src_len, d) if k is not None else None
        v4 = v.view(kv_bsz, heads, src_len, d)

        if before_softmax:
            scores = _scores(q4, k4, bsz // kv_bsz)  # type: ignore[arg-type]  # no fixed heads here
            if bias is not None:
                scores = scores + bias
            if mask is not None:
                scores = scores.masked_fill(mask, float("-inf"))
            return scores.view(bsz * heads, tgt_len, src_len).type_as(q), v, None  # type: ignore[arg-type]

        # a named backend that returns no weights (triton, key_block, query_block, sdpa)
        # returns none unless an analysis collector asks for them (then the backend's error
        # says why): fairseq's own requests (the alignment layer's need_head_weights, which
        # its decoder makes at every forward, and need_weights by default) get None.  With
        # --attn-key-block-size, head-averaged weights are returned only when the call ran
        # materialized (the key-block path returns none)
        backend = self.config.backend
        if self.weights_on_request and (need_head_weights or (need_weights and not backend.key_block_size)):
            collect = collect | {"weights"}
        if attn_inputs is None:  # the usual call (decoder, cross-attention): no copy of defaults
            inputs = AttentionInputs(
                hidden=mask, score_bias=bias, key_padding=key_padding_mask, kv_groups=bsz // kv_bsz, collect=collect
            )
        else:
            inputs = dataclasses.replace(
                attn_inputs,
                hidden=mask,
                score_bias=bias,
                key_padding=key_padding_mask,
                kv_groups=bsz // kv_bsz,
                collect=collect,
            )
        out, inter = attend(q4, k4, v4, inputs, self.spec)
        # (bsz, H, tgt, d) -> (tgt, bsz, H*d); one query (a decoding step): a view, no copy
        attn = out.permute(2, 0, 1, 3).reshape(tgt_len * bsz, self.embed_dim)
        out, weights = self.end(attn, tgt_len, bsz, inter.weights, need_weights, need_head_weights)
        return out, weights, inter

    def end(
        self,
        attn: Tensor,
        tgt_len: int,
        bsz: int,
        weights: Optional[Tensor],
        need_weights: bool,
        need_head_weights: bool,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """The output ending of every call the plan serves: ``out_proj(output_norm(heads))``
        (tgt, bsz, embed) for the concatenated heads ``attn`` (tgt * bsz, embed), and the
        weights (bsz, heads, tgt, src) returned as fairseq returns them: per head (heads,
        bsz, tgt, src) when ``need_head_weights``, averaged over the heads when
        ``need_weights``, else None."""
        return self.project_out(self.output_norm(attn), tgt_len, bsz, weights, need_weights, need_head_weights)

    def project_out(
        self,
        normed: Tensor,
        tgt_len: int,
        bsz: int,
        weights: Optional[Tensor],
        need_weights: bool,
        need_head_weights: bool,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """:meth:`end` after the output norm: ``out_proj(normed)`` and the weights."""
        if _plain_linear(self.out_proj):
            params = self.out_proj._parameters
            out = F.linear(normed, params["weight"], params["bias"]).view(tgt_len, bsz, -1)  # type: ignore[arg-type]
        else:
            out = self.out_proj(normed.view(tgt_len, bsz, -1))
        if need_weights and weights is not None:
            weights = weights.transpose(1, 0)
            return out, (weights if need_head_weights else weights.mean(dim=0))
        return out, None

    # ------------------------------------------------------------------ projections + cache
    def project(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor],
        incremental_state,
        static_kv: bool,
        attn_mask: Optional[Tensor],
        scale_q: bool = True,
    ) -> Projected:
        """q, k, v of a call and its masks; with ``incremental_state``, fairseq's cache of
        the module read and updated exactly as stock fairseq (``prev_key``, ``prev_value``
        as (kv_bsz, heads, len, d), ``prev_key_padding_mask``; static keys and values are
        projected once and then read from the cache).  q is scaled unless ``scale_q`` is
        False (the direct kernel call scales the scores)."""
        tgt_len, bsz, _ = query.shape
        heads, qk_heads, d = self.heads, self.qk_heads, self.head_dim
        saved = None
        if incremental_state is not None:
            saved = incremental_state.get(self.state_key)
            if saved is None:
                saved = incremental_state[self.state_key] = {}
            elif static_kv and "prev_key" in saved:
                key = value = None  # the encoder's keys and values are cached

        if self.self_attention:
            key = value = query
        elif self.encoder_decoder_attention and key is not None:
            beam = self.beam_size
            if beam > 1 and bsz == key.size(1):
                # key is [T, bsz*beam, C]: one copy per sentence (stock fairseq's optimisation)
                key = key.view(key.size(0), -1, beam, key.size(2))[:, :, 0, :]
                if key_padding_mask is not None:
                    key_padding_mask = key_padding_mask.view(-1, beam, key_padding_mask.size(1))[:, 0, :]
            value = key
        k: Optional[Tensor] = None
        v: Optional[Tensor] = None
        if key is query:  # self-attention: one flattened input for the three projections
            q, k, v = _linears(query, self.q_proj, self.k_proj, self.v_proj)
        else:
            (q,) = _linears(query, self.q_proj)
            if key is not None:
                assert value is not None  # key given: value too
                if value is key:
                    k, v = _linears(key, self.k_proj, self.v_proj)
                else:
                    (k,), (v,) = _linears(key, self.k_proj), _linears(value, self.v_proj)
        if q is not None:
            if scale_q:
                # in place without autograd; with it, in place on the projection's output (a
                # view of a 2-d product) would cost a copy-slices pass in backward
                q = q * self.scaling if q.requires_grad else q.mul_(self.scaling)
            q = q.view(bsz * qk_heads, 1, d) if tgt_len == 1 else q.view(tgt_len, bsz * qk_heads, d).transpose(0, 1)
        kv_bsz = bsz
        if key is not None:
            assert v is not None
            kv_bsz, src_len = key.size(1), key.size(0)
            if self.bias_k is not None:
                # fairseq's _add_bias: one learned key and value appended (bsz copies, as stock)
                assert k is not None and self.bias_v is not None  # add_bias_kv: learned heads
                k = torch.cat([k.view(src_len, kv_bsz, -1), self.bias_k.repeat(1, bsz, 1)])
                v = torch.cat([v.view(src_len, kv_bsz, -1), self.bias_v.repeat(1, bsz, 1)])
                src_len += 1
                key_padding_mask, attn_mask = masks.with_one_more_key(key_padding_mask, attn_mask)
            if k is not None:
                k = _heads_first(k, src_len, kv_bsz * qk_heads, d)
            v = _heads_first(v, src_len, kv_bsz * heads, d)

        if saved is not None:
            prev_key = saved.get("prev_key")
            if prev_key is not None:
                kv_bsz = prev_key.size(0)
                prev_key = prev_key.view(kv_bsz * qk_heads, -1, d)
                prev_value = saved["prev_value"].view(kv_bsz * heads, -1, d)
                if static_kv:
                    k, v = prev_key, prev_value
                else:
                    k = torch.cat([prev_key, k], dim=1)  # type: ignore[list-item]  # projected above
                    v = torch.cat([prev_value, v], dim=1)  # type: ignore[list-item]
            assert v is not None  # (no key input: the cache holds them)
            prev_pad = saved.get("prev_key_padding_mask")
            if prev_pad is not None or key_padding_mask is not None:
                key_padding_mask = masks.cached_key_padding(key_padding_mask, prev_pad, kv_bsz, v.size(1), static_kv)
            if k is not None:
                saved["prev_key"] = k.view(kv_bsz, qk_heads, -1, d)
            saved["prev_value"] = v.view(kv_bsz, heads, -1, d)
            saved["prev_key_padding_mask"] = key_padding_mask
        if key_padding_mask is not None and key_padding_mask.dim() == 0:
            key_padding_mask = None
        assert v is not None
        if self.add_zero_attn:
            # fairseq's _append_zero_attn: one zero key and value appended
            assert k is not None
            shape = k.size()[:-2] + torch.Size([1]) + k.size()[-1:]
            k = torch.cat([k, torch.zeros(shape, dtype=k.dtype, device=k.device)], dim=-2)
            v = torch.cat([v, torch.zeros(shape, dtype=v.dtype, device=v.device)], dim=-2)
            key_padding_mask, attn_mask = masks.with_one_more_key(key_padding_mask, attn_mask)
        return q, k, v, key_padding_mask, attn_mask, kv_bsz  # (a plain tuple: ~0.3 µs less per call)

    # ------------------------------------------------------------------ the inference call
    def serves_inline(self, before_softmax: bool, collect) -> bool:
        """The per-call conditions of the inference call (cheap: checked at every call)."""
        return (
            self.inline
            and not collect
            and not before_softmax
            and not torch.is_grad_enabled()
            and not applies_dropout(self.dropout)
        )

    def inline_call(
        self,
        query: Tensor,
        key: Optional[Tensor],
        key_padding_mask: Optional[Tensor],
        incremental_state,
        need_weights: bool,
        static_kv: bool,
        attn_mask: Optional[Tensor],
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """The module's ``forward`` for a call that :meth:`serves_inline`: returns ``(out,
        weights)``, the weights (float32) averaged over the heads (bsz, tgt, src) when
        ``need_weights``, per head (heads, bsz, tgt, src) when ``need_head_weights``
        (fairseq asks for them from the alignment layer's cross-attention at every decoding
        step), else None."""
        need_weights = need_weights or need_head_weights
        tgt_len, bsz, embed_dim = query.shape
        if embed_dim != self.embed_dim:
            raise ValueError(f"query dim {embed_dim} != {self.embed_dim}")
        heads, d = self.heads, self.head_dim
        q, k, v, key_padding_mask, attn_mask, kv_bsz = self.project(
            query, key, key, key_padding_mask, incremental_state, static_kv, attn_mask
        )
        assert q is not None and k is not None  # inline modules have learned heads only
        src_len = v.size(1)
        hidden = None
        if attn_mask is not None or key_padding_mask is not None:
            hidden = masks.visibility_mask(attn_mask, key_padding_mask, bsz, tgt_len, src_len)[1]
        groups = bsz // kv_bsz
        weights = None
        if self.streamed_min_keys and src_len >= self.streamed_min_keys and not need_weights:
            # a long call: the backend auto chooses (query_block without gradients)
            inputs = AttentionInputs(hidden=hidden, key_padding=key_padding_mask, kv_groups=groups)
            out, _ = attend(
                q.view(bsz, heads, tgt_len, d),
                k.view(kv_bsz, heads, src_len, d),
                v.view(kv_bsz, heads, src_len, d),
                inputs,
                self.spec,
            )
            out = out.view(bsz * heads, tgt_len, d)
        elif groups == 1:
            out, weights = self.plain(q, k, v, hidden, bsz, tgt_len, need_weights)
        else:
            # the materialized backend's operations (_scores, activation, _value_mix)
            scores = _scores(q.view(bsz, heads, tgt_len, d), k.view(kv_bsz, heads, src_len, d), groups)
            weights = self.activation(scores, hidden)
            # (reshape: with one sentence, kv_bsz = 1, the einsum's output is not viewable)
            out = _value_mix(weights.type_as(v), v.view(kv_bsz, heads, src_len, d), groups)
            out = out.reshape(bsz * heads, tgt_len, d)
        attn = self.heads_last(out, tgt_len, bsz)
        return self.end(attn, tgt_len, bsz, weights, need_weights, need_head_weights)

    # ------------------------------------------------------------------ the plain call
    def auto_backend(self, q: Optional[Tensor], v: Tensor, hidden: Optional[Tensor], need_weights: bool) -> str:
        """The backend :func:`~.core.attend` would run this call on (no analysis, bias or
        head policy: an inline module), by name, without its 4-d views: ``materialized``,
        or e.g. ``triton`` where auto takes the kernels on this device."""
        call = Call(
            activation=self.spec.activation_name,
            activation_traits=self.activation.traits,
            needs_weights=need_weights,
            dropout=applies_dropout(self.dropout),
            score_bias=False,
            bias_providers=False,
            given_heads=False,
            head_selection=False,
            grad=torch.is_grad_enabled() and (v.requires_grad or (q is not None and q.requires_grad)),
            device=v.device.type,
            row_sums=False,
            keys=v.size(1),
            dtype=v.dtype,
            query_mask=hidden is not None and hidden.dim() == 4 and hidden.size(2) > 1,
            head_dim=v.size(-1),
        )
        return choose_backend(self.spec, call).name

    def plain(
        self, q: Tensor, k: Tensor, v: Tensor, hidden: Optional[Tensor], bsz: int, tgt_len: int, need_weights: bool
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """The materialized backend's operations for one key copy per query (no beam
        groups) on q, k, v in (bsz * heads, len, head_dim): ``(heads out (bsz * heads, tgt,
        d), weights (bsz, heads, tgt, src) float32 when need_weights else None)``.  The
        same numbers, outputs and gradients, as the backend, bit for bit
        (tests/unit/test_call_plan.py), with fewer ops: no 4-d views, and an activation with
        a hiding score (:meth:`~.activations.AttentionActivation.hiding_score`) gets the mask
        added inside the scores' product (one ``baddbmm``; the bias is made once per mask,
        :func:`.masks.hiding_bias`) instead of a pass over the scores."""
        act, heads = self.activation, self.heads
        kt = k.transpose(1, 2)
        # an activation with hooks is called as a module (its hooks see the scores and mask)
        fill = act.hiding_score(q.dtype) if hook_free(act) else None
        if fill is not None:
            if hidden is None:
                scores = torch.bmm(q, kt)
            else:
                scores = torch.baddbmm(masks.hiding_bias(hidden, bsz, heads, fill, q.dtype), q, kt)
            weights = act.weights_of_hiding_scores(scores.float(), hidden, heads)
        else:
            scores = torch.bmm(q, kt)
            weights = act(scores.view(bsz, heads, tgt_len, -1).float(), hidden).view(bsz * heads, tgt_len, -1)
        probs = weights.type_as(v)
        if applies_dropout(self.dropout):
            probs = self.dropout(probs)
        out = torch.bmm(probs, v)
        return out, (weights.view(bsz, heads, tgt_len, -1) if need_weights else None)

    def heads_last(self, out: Tensor, tgt_len: int, bsz: int) -> Tensor:
        """(bsz * heads, tgt, d) -> (tgt * bsz, embed) (the concatenated heads); one query:
        a view."""
        if tgt_len == 1:
            return out.view(bsz, self.embed_dim)
        return out.transpose(0, 1).reshape(tgt_len * bsz, self.embed_dim)


def build_plan(config: AttentionConfig, module) -> CallPlan:
    """The plan of an attention module: every setting from ``config``; the parameters and
    submodules (projections, activation, output norm, bias providers, dropout) and fairseq's
    sizes from ``module`` (a :class:`~.multihead.SparseMultiheadAttention`)."""
    m = module
    act = m.activation
    inline = inline_reason(m) is None
    backend = config.backend
    spec = AttendSpec(
        activation=act,
        dropout=m.dropout_module,
        heads=m.heads,
        biases=tuple(m.biases.values()),
        backend=backend.name,
        key_block_size=backend.key_block_size,
        flex_min_keys=backend.flex_min_keys,
    )
    # long calls of these activations: ``auto`` hands them to query_block
    streamed_min_keys = backend.flex_min_keys if streamed(act) else 0
    kernel = None
    if backend.name in ("triton", "auto") and plain_pipeline_reason(m) is None:
        from .backends import triton as triton_backend

        # auto: where it may take the kernels (CUDA and a recorded measurement showing them faster)
        if backend.name == "triton" or triton_backend.auto_may_take_it():
            kernel = triton_backend.direct_call(act, m.output_norm, m.dropout_module)
    return CallPlan(
        config=config,
        spec=spec,
        stock=is_stock(config.activation.name, config.output_norm.name, m.heads, m.biases),
        q_proj=m.q_proj,
        k_proj=m.k_proj,
        v_proj=m.v_proj,
        out_proj=m.out_proj,
        bias_k=m.bias_k,
        bias_v=m.bias_v,
        add_zero_attn=bool(m.add_zero_attn),
        activation=act,
        output_norm=m.output_norm,
        dropout=m.dropout_module,
        state_key=m._get_full_incremental_state_key("attn_state"),
        beam_size=m.beam_size,
        heads=m.num_heads,
        qk_heads=m.num_learned_heads,
        head_dim=m.head_dim,
        embed_dim=m.embed_dim,
        scaling=m.scaling,
        self_attention=m.self_attention,
        encoder_decoder_attention=m.encoder_decoder_attention,
        inline=inline,
        kernel=kernel,
        kernel_if_auto_takes_it=kernel is not None and backend.name == "auto",
        streamed_min_keys=max(int(streamed_min_keys), 0),
        weights_on_request=serves_weight_requests(backend.name),
    )
