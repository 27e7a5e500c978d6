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
ValueError saying why.  Either error lists every backend with all its reasons
(:func:`dispatch_reasons`); :func:`explain` gives the same for any call ("why not the fast
path?").  Backends name the activation *traits* they need
(:mod:`.activations`), never activation names (relu / relu_scaled below: the registered
activations with those traits).  Registered in :mod:`.backends`, one file each, taking
their masks from :mod:`.masks`:

==============  ========  ==========================================================
name            priority  serves
==============  ========  ==========================================================
``sdpa``        20        softmax, learned heads only, no bias providers, no weights
                          returned: torch's fused ``scaled_dot_product_attention``
``key_block``   30        relu / relu_scaled streamed over blocks of keys
                          (:mod:`.chunked_relu`), only with ``--attn-key-block-size``;
                          no weights, no dropout (an error in training), no biases
``triton``      35        relu / relu_scaled through the fused Triton kernels
                          (:mod:`fairseq_sparse_attn.kernels.relu_attention`): in auto only
                          for training calls on CUDA devices whose family has a recorded
                          ``make bench-gpu`` result showing it faster for the
                          call's activation (2026-11-27: ReLA's relu in bf16 on
                          H200s); padding and causal masks, attention dropout inside the
                          kernels, ReLUFormer's row sums (named only); no weights, biases
``query_block`` 45        relu / relu_scaled without gradients, block by block over the
                          queries (:mod:`.query_block_relu`): in auto for calls with at
                          least ``--attn-flex-min-keys`` keys (long documents on CPU); no
                          weights, dropout, biases, row sums, gradients
``materialized`` 100      everything (the reference; returns the weights)
==============  ========  ==========================================================

(lower priority = tried first).  A softmax module with no output norm and learned heads
does not reach ``attend()`` at all: :class:`~.multihead.SparseMultiheadAttention` hands
it to stock fairseq (its fused fast path), see :func:`is_stock`.  A fused non-softmax
kernel (e.g. the Triton ReLU kernels) registers itself with :func:`register_backend` and a
:class:`Capabilities`.  Removed backends (:data:`REMOVED_BACKENDS`: ``flex``, issue 31.6)
are refused with what to use instead.
"""

from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, List, Mapping, NamedTuple, Optional, Protocol, Sequence, Tuple

import torch
from torch import Tensor
from torch.nn.modules import module as _module

from ..errors import UsageError
from .activations import AttentionActivation
from .heads import HeadPlan
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
    flex_min_keys: > 0: in "auto", the ``query_block`` backend serves calls without
        gradients with at least this many keys (``--attn-flex-min-keys``; 0 = only when
        forced)
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
    head_dim: int = 0  # of the values


def hook_free(module: torch.nn.Module) -> bool:
    """No hook, the module's own or a global one, forward or backward, would see a call of
    ``module``: its work may be done without calling it (the call plan's plain calls, the
    fused kernels' Function)."""
    return not (
        module._forward_hooks
        or module._forward_pre_hooks
        or module._backward_hooks
        or module._backward_pre_hooks
        or _module._global_forward_hooks
        or _module._global_forward_pre_hooks
        or _module._global_backward_hooks
        or _module._global_backward_pre_hooks
    )


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
        head_dim=v.size(-1),
    )


def refusals(caps: Capabilities, call: Call) -> List[str]:
    """Every reason ``caps`` does not cover ``call`` (empty when it does)."""
    reasons = []
    if not caps.activation_traits <= call.activation_traits:
        reasons.append(
            f"activation {call.activation} (serves activations that are {' and '.join(sorted(caps.activation_traits))})"
        )
    checks = (
        (call.needs_weights, caps.returns_weights, "returning attention weights (analysis)"),
        (call.dropout, caps.dropout, "attention dropout (in training, or in inference with --retain-dropout)"),
        (call.score_bias, caps.score_bias, "an additive attention-mask bias"),
        (call.bias_providers, caps.bias_providers, "attention bias providers"),
        (call.given_heads, caps.given_heads, "fixed-pattern heads"),
        (call.head_selection, caps.head_selection, "masked heads / RHE"),
        (call.grad, caps.grad, "gradients"),
        (call.row_sums, caps.row_sums, "ReLUFormer row sums (the relu_regularized_* criterion's regularizer)"),
    )
    reasons += [what for needed, served, what in checks if needed and not served]
    if caps.devices is not None and call.device not in caps.devices:
        reasons.append(f"device {call.device}")
    return reasons


def cannot_serve(caps: Capabilities, call: Call) -> Optional[str]:
    """None when ``caps`` covers ``call``, else the first reason it does not (every reason:
    :func:`refusals`)."""
    reasons = refusals(caps, call)
    return reasons[0] if reasons else None


@dataclass(frozen=True)
class Backend:
    name: str
    run: Callable  # (q, k, v, inputs, spec, call) -> (heads_out, Intermediates)
    capabilities: Capabilities
    priority: int = 50
    #: in "auto", the backend is only tried when this says the module asked for it
    enabled: Callable[[AttendSpec, Call], bool] = lambda spec, call: True
    #: when ``enabled`` is true, in words (for the reasons auto did not take the backend)
    auto_when: str = ""
    #: reasons beyond the capabilities that the call cannot run here (a kernel that needs a
    #: platform, a dtype, ...): the reason or None
    unavailable: Optional[Callable[[Call], Optional[str]]] = None

    def cannot_serve(self, call: Call) -> Optional[str]:
        reasons = self.refusals(call)
        return reasons[0] if reasons else None

    def refusals(self, call: Call) -> List[str]:
        """Every reason the backend cannot serve ``call`` (empty when it can)."""
        reasons = refusals(self.capabilities, call)
        if not reasons and self.unavailable is not None:
            reason = self.unavailable(call)
            if reason is not None:
                reasons.append(reason)
        return reasons

    def auto_refusals(self, spec: AttendSpec, call: Call) -> List[str]:
        """Every reason ``auto`` does not take the backend for ``call`` (empty when it would
        if no backend before it in priority did)."""
        reasons = refusals(self.capabilities, call)
        try:
            enabled = self.enabled(spec, call)
        except ValueError as e:  # a module setting that contradicts the call (an error in use)
            enabled, why = False, str(e)
        else:
            why = f"auto takes it {self.auto_when}" if self.auto_when else "not enabled for this module"
        if not enabled:
            reasons.append(why)
        elif not reasons and self.unavailable is not None:
            reason = self.unavailable(call)
            if reason is not None:
                reasons.append(reason)
        return reasons


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


def serves_weight_requests(name: str) -> bool:
    """Whether a module on backend ``name`` answers fairseq's own weight requests
    (``need_weights``, the alignment layer's ``need_head_weights``) with weights: ``auto``
    (such a call takes a backend that returns them) and the backends that return weights.
    A named backend that returns none (triton, key_block, query_block, sdpa) answers them
    with None, as fairseq's fused attention does; an analysis that collects weights still
    gets the backend's one-line refusal."""
    backend = BACKENDS.get(name)
    return name == "auto" or backend is None or backend.capabilities.returns_weights


#: backends that were removed: name -> what to use instead (one line for the user)
REMOVED_BACKENDS = {
    "flex": (
        "the FlexAttention backend 'flex' was removed (issue 31.6: the triton backend serves its cases "
        "at value width d, and no measurement showed flex faster); use --attn-backend triton or auto"
    ),
}


def unknown_backend_message(name: str) -> str:
    """The one line for a backend name that is not registered (a removed one: what to use)."""
    if name in REMOVED_BACKENDS:
        return f"--attn-backend {name}: {REMOVED_BACKENDS[name]}"
    return f"--attn-backend must be one of {', '.join(backend_names())}, got {name!r}"


def dispatch_reasons(spec: AttendSpec, call: Call) -> Dict[str, List[str]]:
    """``{backend: every reason it does not serve call}`` for every registered backend, in
    priority order (an empty list: it serves the call); the reasons of ``auto`` (a backend
    the module did not enable counts) unless ``spec`` names a backend."""
    auto = spec.backend == "auto"
    return {b.name: (b.auto_refusals(spec, call) if auto else b.refusals(call)) for b in _by_priority()}


def describe_reasons(reasons: Dict[str, List[str]]) -> str:
    """One line: ``name: reason, reason | name: serves it | ...``."""
    return " | ".join(f"{name}: {', '.join(why) if why else 'serves it'}" for name, why in reasons.items())


def explain(q: Optional[Tensor], v: Tensor, inputs: AttentionInputs, spec: AttendSpec) -> str:
    """Why this call runs where it runs: the backend :func:`attend` chooses (or the error)
    and every reason of every backend that would not serve it ("why not the fast path?")."""
    call = describe_call(q, v, inputs, spec)
    try:
        chosen = f"runs on {choose_backend(spec, call).name}"
    except ValueError as e:
        chosen = f"cannot run: {e}"
    return f"{chosen}; backends: {describe_reasons(dispatch_reasons(spec, call))}"


def auto_remedy(grad: bool) -> str:
    """What a forced backend's refusal tells the user to do: in training (a call with
    gradients) the flag, without gradients (fairseq-generate, fsa-analyze, ...: a trained
    checkpoint, which keeps the backend it was trained on) the load-time override first."""
    override = "--model-overrides \"{'attn_backend': 'auto'}\""
    if grad:
        return f"use --attn-backend auto (for a trained checkpoint: {override})"
    return f"use {override} (in training: --attn-backend auto)"


def static_refusals(
    backend_name: str,
    activation: AttentionActivation,
    head_dim: Optional[int],
    given_heads: bool,
    head_selection: bool,
    bias_providers: bool,
) -> List[str]:
    """Why the backend named ``backend_name`` can serve no call of a module so configured:
    what the configuration fixes (the activation, the head dim, fixed-pattern or masked
    heads, RHE, bias providers), checked when the model is built; [] when those fit (a call
    may still be refused for what only it shows: dropout in training, weights asked for, the
    mask, the dtype, the device).  An unknown name gives [] (refused where it is resolved)."""
    backend = BACKENDS.get(backend_name)
    if backend is None:
        return []
    devices = backend.capabilities.devices
    call = Call(
        activation=getattr(activation, "registry_name", type(activation).__name__),
        activation_traits=getattr(activation, "traits", frozenset()),
        needs_weights=False,
        dropout=False,
        score_bias=False,
        bias_providers=bias_providers,
        given_heads=given_heads,
        head_selection=head_selection,
        grad=False,
        device=sorted(devices)[0] if devices else "cpu",
        row_sums=False,
        dtype=torch.float32,
        head_dim=head_dim or 0,
    )
    reasons = refusals(backend.capabilities, call)
    if not reasons and head_dim and backend.unavailable is not None:
        reason = backend.unavailable(call)
        if reason is not None:
            reasons.append(reason)
    return reasons


def choose_backend(spec: AttendSpec, call: Call) -> Backend:
    if spec.backend != "auto":
        backend = BACKENDS.get(spec.backend)
        if backend is None:
            if spec.backend in REMOVED_BACKENDS:
                raise UsageError(unknown_backend_message(spec.backend))
            raise ValueError(f"unknown attention backend {spec.backend!r}; valid values: {', '.join(backend_names())}")
        reasons = backend.refusals(call)
        if reasons:
            raise UsageError(
                f"attention backend {backend.name!r} (--attn-backend) cannot serve "
                f"this configuration: {', '.join(reasons)}; {auto_remedy(call.grad)} "
                f"(every backend: {describe_reasons(dispatch_reasons(spec, call))})"
            )
        return backend
    for backend in _by_priority():
        if backend.enabled(spec, call) and backend.cannot_serve(call) is None:
            return backend
    raise ValueError(
        f"no attention backend serves this configuration ({call}); every backend: "
        f"{describe_reasons(dispatch_reasons(spec, call))}"
    )


def attend(
    q: Optional[Tensor], k: Optional[Tensor], v: Tensor, inputs: AttentionInputs, spec: AttendSpec
) -> Tuple[Tensor, Intermediates]:
    """Run the pipeline (module docstring) on the backend chosen for this call."""
    call = describe_call(q, v, inputs, spec)
    backend = choose_backend(spec, call)
    return backend.run(q, k, v, inputs, spec, call)


#: what the streamed backend (query_block) needs of an activation: element-wise with
#: f(s) = 0 for s <= 0, so hidden keys may be zeroed before f, or through their values
STREAMED_TRAITS = frozenset({"rectified", "exact_zeros"})


def streamed(activation) -> bool:
    """``activation``'s long calls may go to the streamed backends."""
    return STREAMED_TRAITS <= getattr(activation, "traits", frozenset())
