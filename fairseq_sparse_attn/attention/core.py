"""``attend()``: the attention pipeline as one function without module state.

    scores  = q kᵀ                  (q already scaled by 1/√d_h), float32
    scores += biases                additive mask bias, bias providers (:mod:`.biases`)
    mask    : padding | causal | pattern | provider-hidden keys (True = not visible)
    weights = activation(scores, mask)           (:mod:`.activations`)
    weights = dropout(weights)
    heads   : learned / given (fixed patterns) / masked / RHE-replaced (:mod:`.heads`)
    out     = weights · v  (+ value terms of bias providers)

``attend(q, k, v, inputs, spec) -> (heads_out, Intermediates)``:

* ``q`` (bsz, H_qk, tgt, d) or None (every head given), ``k`` (kv_bsz, H_qk, src, d) or
  None, ``v`` (kv_bsz, H, src, d), with ``bsz = kv_bsz * inputs.kv_groups`` (beam search
  keeps one copy of the encoder keys per sentence);
* ``inputs`` (:class:`AttentionInputs`): everything that changes per batch;
* ``spec`` (:class:`AttendSpec`): everything fixed per module (activation, dropout,
  head policies, bias providers, backend choice);
* returns ``heads_out`` (bsz, H, tgt, d) and :class:`~.intermediates.Intermediates`.

Backends serve the call (:data:`BACKENDS`, :func:`register_backend`): each declares in a
:class:`Capabilities` what it can serve; ``spec.backend = "auto"`` takes the first one in
priority order that serves the call, a named backend that cannot serve it raises a
ValueError saying why.  Backends name the activation *traits* they need
(:mod:`.activations`), never activation names (relu / relu_scaled below: the registered
activations with those traits).  Registered here:

==============  ========  ==========================================================
name            priority  serves
==============  ========  ==========================================================
``sdpa``        20        softmax, learned heads only, no bias providers, no weights
                          returned: torch's fused ``scaled_dot_product_attention``
``key_block``   30        relu / relu_scaled streamed over blocks of keys
                          (:mod:`.chunked_relu`), only with ``--attn-key-block-size``;
                          no weights, no dropout (an error in training), no biases
``flex``        40        relu / relu_scaled through the fused FlexAttention kernel
                          (:mod:`.flex_relu`): in auto only on devices where a recorded
                          benchmark measured it faster (none yet: only when forced),
                          for calls with at least ``--attn-flex-min-keys`` keys; no
                          weights, dropout, biases, row sums
``query_block`` 45        relu / relu_scaled without gradients, block by block over the
                          queries (:mod:`.query_block_relu`): in auto for calls with at
                          least ``--attn-flex-min-keys`` keys (long documents on CPU); no
                          weights, dropout, biases, row sums, gradients
``materialized`` 100      everything (the reference; returns the weights)
==============  ========  ==========================================================

(lower priority = tried first).  A softmax module with no output norm and learned heads
does not reach ``attend()`` at all: :class:`~.multihead.SparseMultiheadAttention` hands
it to stock fairseq (its fused fast path), see :func:`is_stock`.  A fused non-softmax
kernel (e.g. FlexAttention for the ReLU family) registers itself with
:func:`register_backend` and a :class:`Capabilities`.
"""

from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Mapping, NamedTuple, Optional, Protocol, Sequence, Tuple, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import UsageError
from .activations import AttentionActivation, Rectified
from .heads import HeadPlan, real_keys
from .intermediates import Intermediates


@dataclass(frozen=True)
class AttentionInputs:
    """Everything that changes per batch, passed down as an argument.

    hidden: bool broadcastable to (bsz, H, tgt, src), True = key not visible (padding,
        causal, pattern), or None
    score_bias: additive float32 bias broadcastable to the scores (a float attention
        mask with finite values), or None
    key_padding: (bsz, src) bool, True = padding key, or None (self-attention: gives the
        real tokens for fixed patterns, bias providers and RHE)
    kv_groups: queries per key copy (beam search: one encoder copy per sentence)
    pattern_weights: fixed-pattern weights computed once per batch by the encoder, keyed
        by :attr:`~.heads.FixedPatternHeads.key` (patterns, unit, right-context reading,
        EOS exclusion)
    word_ids: (bsz, src) word index of every source token (word-level fixed patterns)
    src_dep, src_rp: (bsz, T, T) syntax annotations (DEA, RHE; LPEA) of the
        ``parse_annotated_translation`` task
    collect: what the caller wants in the returned intermediates
        (:data:`~.intermediates.WANTS`)
    """

    hidden: Optional[Tensor] = None
    score_bias: Optional[Tensor] = None
    key_padding: Optional[Tensor] = None
    kv_groups: int = 1
    pattern_weights: Mapping = field(default_factory=dict)
    word_ids: Optional[Tensor] = None
    src_dep: Optional[Tensor] = None
    src_rp: Optional[Tensor] = None
    collect: FrozenSet[str] = frozenset()


class Dropout(Protocol):
    """What the core reads of a dropout module (``torch.nn.Dropout``, fairseq's
    ``FairseqDropout``)."""

    p: float
    training: bool

    def __call__(self, x: Tensor) -> Tensor: ...


@dataclass
class AttendSpec:
    """Everything fixed per attention module (its submodules are owned by the module).

    activation: scores -> weights module (:mod:`.activations`)
    dropout: weights dropout (a module; its ``p`` and ``training`` are read)
    heads: :class:`~.heads.HeadPlan`
    biases: bias providers (:mod:`.biases`), in order
    backend: ``"auto"`` or a name in :data:`BACKENDS`
    key_block_size: > 0 enables the ``key_block`` backend (blocks of that many keys)
    flex_min_keys: > 0: in "auto", the fused ``flex`` backend serves calls with at least
        this many keys where the platform supports it (0 = only when forced)
    """

    activation: AttentionActivation
    dropout: Dropout
    heads: HeadPlan
    biases: Sequence[torch.nn.Module] = ()
    backend: str = "auto"
    key_block_size: int = 0
    flex_min_keys: int = 0

    @property
    def activation_name(self) -> str:
        return getattr(self.activation, "registry_name", "?")

    @property
    def biased(self) -> bool:
        return bool(self.biases) or self.heads.rhe is not None


def is_stock(activation: str, output_norm: str, heads: HeadPlan, biases) -> bool:
    """True when a module is exactly fairseq's ``MultiheadAttention`` (and uses it)."""
    return activation == "softmax" and output_norm == "none" and heads.all_learned and not biases


# --------------------------------------------------------------------------- backends
@dataclass(frozen=True)
class Capabilities:
    """What a backend can serve.  ``activation_traits``: the traits (:mod:`.activations`)
    an activation must have; empty = any activation."""

    activation_traits: FrozenSet[str] = frozenset()
    returns_weights: bool = False
    dropout: bool = False
    score_bias: bool = False
    bias_providers: bool = False
    given_heads: bool = False  # fixed-pattern heads
    head_selection: bool = False  # masked heads, RHE
    grad: bool = True
    devices: Optional[FrozenSet[str]] = None  # None = any
    row_sums: bool = False  # can return the ReLUFormer row sums


class Call(NamedTuple):
    """What one call needs (derived by :func:`describe_call`; a named tuple: built at
    every attention call, ~4x cheaper than a frozen dataclass)."""

    activation: str  # its name (for messages)
    activation_traits: FrozenSet[str]
    needs_weights: bool
    dropout: bool
    score_bias: bool
    bias_providers: bool
    given_heads: bool
    head_selection: bool
    grad: bool
    device: str
    row_sums: bool
    keys: int = 0  # number of key positions (src)
    dtype: Optional[torch.dtype] = None  # of the values
    query_mask: bool = False  # the hidden mask differs between queries (causal)


def applies_dropout(dropout: Dropout) -> bool:
    """The dropout module changes its input: p > 0 and training, or a fairseq module told to
    apply in inference too (``--retain-dropout``, Monte-Carlo dropout)."""
    return dropout.p > 0 and (dropout.training or getattr(dropout, "apply_during_inference", False))


def describe_call(q, v, inputs: AttentionInputs, spec: AttendSpec) -> Call:
    heads = spec.heads
    return Call(
        activation=spec.activation_name,
        activation_traits=getattr(spec.activation, "traits", frozenset()),
        needs_weights="weights" in inputs.collect,
        dropout=applies_dropout(spec.dropout),
        score_bias=inputs.score_bias is not None,
        bias_providers=bool(spec.biases),
        given_heads=heads.fixed is not None,
        head_selection=heads.masked is not None or heads.rhe is not None,
        grad=torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, v)),
        device=v.device.type,
        row_sums="row_sums" in inputs.collect and getattr(spec.activation, "reports_row_sums", False),
        keys=v.size(2),
        dtype=v.dtype,
        query_mask=inputs.hidden is not None and inputs.hidden.dim() == 4 and inputs.hidden.size(2) > 1,
    )


def cannot_serve(caps: Capabilities, call: Call) -> Optional[str]:
    """None when ``caps`` covers ``call``, else the first reason it does not."""
    if not caps.activation_traits <= call.activation_traits:
        return (
            f"activation {call.activation} (serves activations that are {' and '.join(sorted(caps.activation_traits))})"
        )
    checks = (
        (call.needs_weights, caps.returns_weights, "returning attention weights (analysis)"),
        (call.dropout, caps.dropout, "attention dropout in training"),
        (call.score_bias, caps.score_bias, "an additive attention-mask bias"),
        (call.bias_providers, caps.bias_providers, "attention bias providers"),
        (call.given_heads, caps.given_heads, "fixed-pattern heads"),
        (call.head_selection, caps.head_selection, "masked heads / RHE"),
        (call.grad, caps.grad, "gradients"),
        (call.row_sums, caps.row_sums, "ReLUFormer row sums"),
    )
    for needed, served, what in checks:
        if needed and not served:
            return what
    if caps.devices is not None and call.device not in caps.devices:
        return f"device {call.device}"
    return None


@dataclass(frozen=True)
class Backend:
    name: str
    run: Callable  # (q, k, v, inputs, spec, call) -> (heads_out, Intermediates)
    capabilities: Capabilities
    priority: int = 50
    #: in "auto", the backend is only tried when this says the module asked for it
    enabled: Callable[[AttendSpec, Call], bool] = lambda spec, call: True

    def cannot_serve(self, call: Call) -> Optional[str]:
        return cannot_serve(self.capabilities, call)


BACKENDS: Dict[str, Backend] = {}
_BY_PRIORITY: list = []  # BACKENDS sorted by priority (rebuilt when BACKENDS changes)


def register_backend(backend: Backend) -> Backend:
    if backend.name in BACKENDS or backend.name == "auto":
        raise ValueError(f"attention backend {backend.name!r} registered twice")
    BACKENDS[backend.name] = backend
    return backend


def _by_priority():
    if len(_BY_PRIORITY) != len(BACKENDS) or any(BACKENDS.get(b.name) is not b for b in _BY_PRIORITY):
        _BY_PRIORITY[:] = sorted(BACKENDS.values(), key=lambda b: b.priority)
    return _BY_PRIORITY


def backend_names():
    return ["auto"] + sorted(BACKENDS)


def choose_backend(spec: AttendSpec, call: Call) -> Backend:
    if spec.backend != "auto":
        backend = BACKENDS.get(spec.backend)
        if backend is None:
            raise ValueError(f"unknown attention backend {spec.backend!r}; valid values: {', '.join(backend_names())}")
        reason = backend.cannot_serve(call)
        if reason is not None:
            raise UsageError(
                f"attention backend {backend.name!r} (--attn-backend) cannot serve "
                f"this configuration: {reason}; use --attn-backend auto"
            )
        return backend
    for backend in _by_priority():
        if backend.enabled(spec, call) and backend.cannot_serve(call) is None:
            return backend
    raise ValueError(f"no attention backend serves this configuration ({call})")


def attend(
    q: Optional[Tensor], k: Optional[Tensor], v: Tensor, inputs: AttentionInputs, spec: AttendSpec
) -> Tuple[Tensor, Intermediates]:
    """Run the pipeline (module docstring) on the backend chosen for this call."""
    call = describe_call(q, v, inputs, spec)
    backend = choose_backend(spec, call)
    return backend.run(q, k, v, inputs, spec, call)


# --------------------------------------------------------------------------- materialized
def _scores(q: Tensor, k: Tensor, groups: int) -> Tensor:
    """(bsz, H, tgt, src) float32 scores q kᵀ."""
    bsz, heads, tgt, d = q.shape
    kv_bsz, _, src, _ = k.shape
    if groups > 1:  # one key copy per beam group
        scores = torch.einsum("bxhtd,bhsd->bxhts", q.view(kv_bsz, groups, heads, tgt, d), k)
    else:
        scores = torch.bmm(q.reshape(bsz * heads, tgt, d), k.reshape(kv_bsz * heads, src, d).transpose(1, 2))
    return scores.reshape(bsz, heads, tgt, src).float()


def _value_mix(probs: Tensor, v: Tensor, groups: int) -> Tensor:
    """(bsz, H, tgt, d) = probs · v per head."""
    bsz, heads, tgt, src = probs.shape
    kv_bsz, _, _, d = v.shape
    if groups > 1:
        out = torch.einsum("bxhts,bhsd->bxhtd", probs.view(kv_bsz, groups, heads, tgt, src), v)
        return out.reshape(bsz, heads, tgt, d)
    return torch.bmm(probs.view(bsz * heads, tgt, src), v.reshape(kv_bsz * heads, src, d)).view(bsz, heads, tgt, d)


def _kept_value_mix(probs: Tensor, v: Tensor, groups: int, keep: Tensor) -> Tensor:
    """(bsz, H, tgt, d): probs · v for the (sentence, head) pairs where ``keep`` (bsz, H)
    is True, exact zeros elsewhere; the other pairs are not computed."""
    bsz, heads, tgt, _ = probs.shape
    if bool(keep.all()):
        return _value_mix(probs, v, groups)
    out = probs.new_zeros(bsz, heads, tgt, v.size(-1))
    if not bool(keep.any()):
        return out
    b, h = keep.nonzero(as_tuple=True)
    return out.index_put((b, h), torch.bmm(probs[b, h], v[b // groups, h]))


def _biased(q, scores, inputs, spec, valid):
    """Weights with the bias providers and RHE (encoder self-attention): (weights,
    redundant or None, keep or None, value_term or None, skipped).  ``skipped``: RHE
    pruning skips the pruned heads (:meth:`~.heads.RedundantHeads.skips_pruned`): no
    enhanced weights, no value term, and ``keep`` says which (sentence, head) pairs the
    caller must compute at all."""
    from .biases import BiasContext

    heads = spec.heads
    rhe = heads.rhe
    skip = rhe is not None and rhe.skips_pruned(spec.dropout.training, "weights" in inputs.collect)
    # with pruning, only the pruned (redundant) heads would use the biased attention
    providers = () if skip else spec.biases
    needs = {n for p in providers for n in p.needs} | ({"src_dep"} if rhe is not None else set())
    ctx = BiasContext.build(valid, {"src_dep": inputs.src_dep, "src_rp": inputs.src_rp}, sorted(needs))
    mask = inputs.hidden
    if skip:
        standard = spec.activation(scores, mask)
        redundant = rhe.identify(standard, inputs, valid)
        return standard, redundant, ~redundant, None, True
    enhanced = None
    if spec.biases:
        biased, hidden = scores, mask
        for provider in spec.biases:
            bias, hide = provider(q, ctx)
            if bias is not None:
                biased = biased + bias
            if hide is not None:
                hidden = hide if hidden is None else hidden | hide
        enhanced = spec.activation(biased, hidden)
    redundant = keep = None
    if rhe is None:
        weights = enhanced
    else:
        standard = spec.activation(scores, mask)
        weights, redundant, keep = rhe.replace(standard, enhanced, inputs, valid)
    value_term = None
    with_values = [p for p in spec.biases if p.has_value_term]
    if with_values:

        def value_term(probs):
            extra = sum(p.value_term(probs, ctx) for p in with_values)
            if redundant is None:
                return extra
            return extra * redundant.view(*redundant.shape, 1, 1).to(extra.dtype)

    return weights, redundant, keep, value_term, False


def _row_sums(weights, scores_like, mask):
    from .scaled_relu import row_sums, visible_key_counts

    wsum, wlogw = row_sums(weights)
    return wsum, wlogw, visible_key_counts(scores_like, mask)


def _dropout(spec: AttendSpec, call: Call, weights: Tensor) -> Tensor:
    """``spec.dropout(weights)``, skipping the module call where it is the identity
    (:func:`applies_dropout`)."""
    return spec.dropout(weights) if call.dropout else weights


def materialized(q, k, v, inputs: AttentionInputs, spec: AttendSpec, call: Call):
    """Scores and weights as full (bsz, H, tgt, src) tensors: every feature."""
    heads = spec.heads
    groups = inputs.kv_groups
    kv_bsz, num_heads, src_len, _ = v.shape
    bsz = kv_bsz * groups
    mask = inputs.hidden
    fixed = learned = scores = redundant = keep = value_term = None
    skipped = False  # RHE pruning: only the kept (sentence, head) pairs are mixed with v
    if heads.fixed is not None:
        fixed = heads.fixed.weights(inputs, bsz, src_len, v.device)
    if heads.num_learned:
        scores = _scores(q, k, groups)
        if inputs.score_bias is not None:
            scores = scores + inputs.score_bias
        if spec.biased:
            valid = real_keys(inputs.key_padding, bsz, src_len, v.device)
            learned, redundant, keep, value_term, skipped = _biased(q, scores, inputs, spec, valid)
        else:
            learned = spec.activation(scores, mask)  # float32 (bsz, H_learned, tgt, src)

    if fixed is None:
        weights = learned
        probs = _dropout(spec, call, learned.type_as(v))  # type: ignore[union-attr]  # no fixed head: all learned
    else:
        # attention dropout regularizes learned attention only; fixed heads stay exact
        weights = fixed if learned is None else torch.cat([fixed, learned], dim=1)
        probs = fixed.type_as(v)
        if learned is not None:
            probs = torch.cat([probs, _dropout(spec, call, learned.type_as(v))], dim=1)
    if skipped:
        # dropout above ran on every pair (the same random draws as without skipping)
        if heads.masked is not None:
            keep = keep & heads.masked.keep(torch.bool, keep.device).view(1, num_heads)  # type: ignore[operator, union-attr]
        out = _kept_value_mix(probs, v, groups, keep)  # type: ignore[arg-type]  # skipped: _biased set keep
    else:
        if heads.masked is not None:
            probs = probs * heads.masked.keep(probs.dtype, probs.device)
        if keep is not None:
            probs = probs * keep.view(bsz, num_heads, 1, 1).to(probs.dtype)
        out = _value_mix(probs, v, groups)
    if value_term is not None:
        out = out + value_term(probs).to(out.dtype)

    inter = Intermediates(backend="materialized", redundant=redundant)
    if "weights" in inputs.collect:
        inter.weights = weights
        inter.values = v.reshape(kv_bsz * num_heads, src_len, v.size(-1))
        inter.mask = mask
    if call.row_sums and learned is not None:
        inter.row_sums = _row_sums(learned, scores, mask)
    return out, inter


register_backend(
    Backend(
        "materialized",
        materialized,
        Capabilities(
            returns_weights=True,
            dropout=True,
            score_bias=True,
            bias_providers=True,
            given_heads=True,
            head_selection=True,
            row_sums=True,
        ),
        priority=100,
    )
)


# --------------------------------------------------------------------------- key blocks
def key_block(q, k, v, inputs: AttentionInputs, spec: AttendSpec, call: Call):
    """ReLU-family weights streamed over blocks of keys (:mod:`.chunked_relu`): the
    (tgt × src) weights are never held; the row sums come from the same pass."""
    from .chunked_relu import chunked_relu_attention
    from .scaled_relu import visible_key_counts

    groups = inputs.kv_groups
    if groups > 1:
        k = k.repeat_interleave(groups, dim=0)
        v = v.repeat_interleave(groups, dim=0)
    mask = inputs.hidden
    n = visible_key_counts(q.new_empty(1, 1, 1, k.size(2)), mask).float()
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
    )
)


# --------------------------------------------------------------------------- fused softmax
def sdpa(q, k, v, inputs: AttentionInputs, spec: AttendSpec, call: Call):
    """Softmax through ``torch.nn.functional.scaled_dot_product_attention`` (fused
    kernels on GPU); q is already scaled, so the kernel's own scale is 1."""
    groups = inputs.kv_groups
    if groups > 1:
        k = k.repeat_interleave(groups, dim=0)
        v = v.repeat_interleave(groups, dim=0)
    mask = None
    if inputs.hidden is not None or inputs.score_bias is not None:
        mask = torch.zeros((), dtype=torch.float32, device=q.device)
        if inputs.score_bias is not None:
            mask = mask + inputs.score_bias
        if inputs.hidden is not None:
            mask = torch.where(inputs.hidden, torch.tensor(float("-inf"), device=q.device), mask)
        mask = mask.to(q.dtype)
    p = spec.dropout.p if call.dropout else 0.0
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, scale=1.0)
    return out, Intermediates(backend="sdpa")


register_backend(
    Backend(
        "sdpa", sdpa, Capabilities(activation_traits=frozenset({"softmax"}), dropout=True, score_bias=True), priority=20
    )
)


# --------------------------------------------------------------------------- fused ReLU
def flex(q, k, v, inputs: AttentionInputs, spec: AttendSpec, call: Call):
    """relu / relu_scaled through the fused FlexAttention kernel (:mod:`.flex_relu`):
    no (tgt × src) weights held; CUDA training and inference, CPU compiled inference."""
    from .flex_relu import flex_relu_attention, flex_relu_unavailable

    reason = flex_relu_unavailable(call.device, call.grad, q.dtype, call.query_mask)
    if reason is not None:
        raise UsageError(
            f"attention backend 'flex' (--attn-backend) cannot serve this "
            f"configuration: {reason}; use --attn-backend auto"
        )
    groups = inputs.kv_groups
    if groups > 1:
        k = k.repeat_interleave(groups, dim=0)
        v = v.repeat_interleave(groups, dim=0)
    act = cast(Rectified, spec.activation)  # (served for rectified activations only)
    out = flex_relu_attention(q, k, v, inputs.hidden, act.row_scale if act.row_scaled else None, score_fn=act.fn)
    return out, Intermediates(backend="flex")


#: devices on which "auto" tries the fused kernel for long calls: those where a recorded
#: benchmark measured it faster (:data:`.flex_relu.FLEX_MEASURED_FASTER`; none yet, so
#: auto never takes it).  On CPU the compiled kernel (forward only) measured slower than
#: the ``query_block`` path at L = 2048 (docs/performance.md); on CUDA nothing is measured.
#: --attn-backend flex forces it anywhere it can run.
def _flex_auto_devices():
    from .flex_relu import FLEX_MEASURED_FASTER

    return frozenset(FLEX_MEASURED_FASTER)


FLEX_AUTO_DEVICES = _flex_auto_devices()


def _flex_enabled(spec: AttendSpec, call: Call) -> bool:
    if spec.flex_min_keys <= 0 or call.keys < spec.flex_min_keys or call.device not in FLEX_AUTO_DEVICES:
        return False
    from .flex_relu import flex_relu_unavailable

    return flex_relu_unavailable(call.device, call.grad, call.dtype or torch.float32, call.query_mask) is None


#: what the streamed backends (flex, query_block) need of an activation: element-wise with
#: f(s) = 0 for s <= 0, so hidden keys may be zeroed before f, or through their values
STREAMED_TRAITS = frozenset({"rectified", "exact_zeros"})


def streamed(activation) -> bool:
    """``activation``'s long calls may go to the streamed backends."""
    return STREAMED_TRAITS <= getattr(activation, "traits", frozenset())


register_backend(
    Backend(
        "flex",
        flex,
        Capabilities(activation_traits=STREAMED_TRAITS, devices=frozenset({"cpu", "cuda"})),
        priority=40,
        enabled=_flex_enabled,
    )
)


# --------------------------------------------------------------------------- query blocks
def query_block(q, k, v, inputs: AttentionInputs, spec: AttendSpec, call: Call):
    """relu / relu_scaled without gradients, block by block over the queries
    (:mod:`.query_block_relu`): one reused score buffer instead of the (tgt × src) weights,
    no pass over the scores for padding masks."""
    from .query_block_relu import query_block_relu_attention

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
    if hidden is not None and hidden.size(0) == bsz:
        hidden = hidden[::groups]  # the same keys for every beam of a sentence
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
    )
)
