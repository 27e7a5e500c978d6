"""What one attention call computed besides its output, and how callers collect it.

:func:`~.core.attend` returns an :class:`Intermediates` next to the head outputs: the
attention weights (analysis), the value vectors, the visibility mask, the ReLUFormer row
sums (the regularized criterion) and the per-sentence RHE decisions.  Nothing is stored
on a module.

A caller that wants some of them opens a :func:`collect` scope around the model call::

    with collect("row_sums") as records:
        model(**net_input)
    for module, inter in records: ...

Inside the scope every :class:`~.multihead.SparseMultiheadAttention` call hands its
intermediates to the open scopes (in call order).  Outside any scope nothing is
computed or kept: the cost is one context-variable read per attention call.  The scope
is a :mod:`contextvars` variable (dynamic scope, like ``torch.no_grad``), not a module
attribute, so fairseq's activation checkpointing, which re-runs a layer in backward after
the scope has closed, never delivers a record twice; :mod:`..models.checkpointing` makes
the differentiable parts (row sums) outputs of the checkpointed layer so that their
gradient survives the recomputation.

What can be asked for (``WANTS``):

* ``weights``: weights (bsz, heads, tgt, src) float32 before dropout, values
  (kv_bsz*heads, src, head_dim), mask (bool broadcastable to the weights,
  True = key not visible, or None); forces the materialized backend.
* ``row_sums``: (wsum, wlogw, n) of activations that report them (``relu_scaled``):
  Σ_j s_ij and Σ_j s_ij log s_ij per (bsz, heads, tgt) row, differentiable, and the
  visible-key counts n.
* ``redundant``: (bsz, heads) bool decisions of redundant head identification (RHE).
* ``ffn``: the FFN blocks of the plugin's layers hand an :class:`FFNIntermediates` (their
  residual stream, output and activation rows; ReLUFormer's FFN analysis) to the same
  scopes, as ``(layer, FFNIntermediates)`` (:func:`fairseq_sparse_attn.models.ffn.deliver_ffn_calls`).
"""

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import FrozenSet, Iterator, List, Optional, Tuple

from torch import Tensor

WANTS = ("weights", "row_sums", "redundant", "ffn")


@dataclass
class Intermediates:
    """Returned by :func:`~.core.attend`; fields not asked for stay None."""

    weights: Optional[Tensor] = None
    values: Optional[Tensor] = None
    mask: Optional[Tensor] = None
    row_sums: Optional[Tuple[Tensor, Tensor, Tensor]] = None
    redundant: Optional[Tensor] = None
    backend: str = ""

    def differentiable(self) -> List[Tensor]:
        """The tensors a loss may be built from (activation checkpointing makes them
        outputs of the checkpointed layer): wsum and wlogw of the row sums."""
        return [] if self.row_sums is None else list(self.row_sums[:2])

    def detached(self) -> "Intermediates":
        """A copy whose tensors are detached from the autograd graph (what analyses keep)."""
        kept = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in kept.items():
            if isinstance(value, Tensor):
                kept[name] = value.detach()
            elif isinstance(value, tuple):
                kept[name] = tuple(t.detach() for t in value)
        return Intermediates(**kept)

    def with_differentiable(self, tensors: List[Tensor]) -> "Intermediates":
        """A copy whose differentiable tensors are replaced by ``tensors`` (same order)."""
        if self.row_sums is None:
            return self
        kept = {f.name: getattr(self, f.name) for f in fields(self)}
        kept["row_sums"] = (tensors[0], tensors[1], self.row_sums[2])
        return Intermediates(**kept)


@dataclass
class FFNIntermediates:
    """What one FFN block computed (``collect("ffn")``), detached: the residual stream
    (the block input before any pre-norm), the FFN output fc2(act(fc1(x))) before dropout
    and the residual add (with the LayerNorm of ``softmax_layernorm``), and the activation
    rows (memory scores after the activation), all time-first (T, B, ...)."""

    residual: Tensor
    ffn_output: Tensor
    rows: Optional[Tensor] = None
    #: delivered only to the scopes that ask for it (:func:`deliver`)
    want = "ffn"

    def differentiable(self) -> List[Tensor]:
        return []

    def with_differentiable(self, tensors: List[Tensor]) -> "FFNIntermediates":
        return self

    def detached(self) -> "FFNIntermediates":
        return self  # (recorded detached)


class Records(list):
    """The records of one :func:`collect` scope: a list of (module, Intermediates).

    Any object with ``wants`` and ``append((module, intermediates))`` can be opened as a
    scope (:func:`collecting_into`); the analyses' per-call collectors
    (:mod:`fairseq_sparse_attn.analysis.recording`) are fed through one such object."""

    def __init__(self, wants):
        super().__init__()
        bad = sorted(set(wants) - set(WANTS))
        if bad:
            raise ValueError(f"cannot collect {bad[0]!r}; choose from {', '.join(WANTS)}")
        self.wants: FrozenSet[str] = frozenset(wants)


_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("fairseq_sparse_attn_collectors", default=())


@contextmanager
def collect(*wants: str) -> Iterator[Records]:
    """Collect the intermediates named in ``wants`` of every attention call in the scope."""
    with collecting_into(Records(wants)) as records:
        yield records


@contextmanager
def collecting_into(sink):
    """Like :func:`collect` with a given sink: an object with ``wants`` and ``append``
    (which may convert or forward each record instead of keeping it)."""
    token = _ACTIVE.set(_ACTIVE.get() + (sink,))
    try:
        yield sink
    finally:
        _ACTIVE.reset(token)


@contextmanager
def isolated(wants: FrozenSet[str]) -> Iterator[Records]:
    """A scope that replaces (instead of joining) the open scopes; used by activation
    checkpointing to gather one layer's records and hand them on itself."""
    records = Records(wants)
    token = _ACTIVE.set((records,))
    try:
        yield records
    finally:
        _ACTIVE.reset(token)


def active_collectors() -> Tuple:
    """The sinks of the open scopes, innermost last (empty outside any scope)."""
    return _ACTIVE.get()


def wanted() -> FrozenSet[str]:
    """What the open scopes ask for (empty outside any scope)."""
    active = _ACTIVE.get()
    if not active:
        return frozenset()
    if len(active) == 1:
        return active[0].wants
    return frozenset().union(*(c.wants for c in active))


#: what attention calls deliver (the rest, "ffn", is the FFN blocks')
ATTENTION_WANTS = frozenset(WANTS) - {"ffn"}


def attention_wanted() -> FrozenSet[str]:
    """What the open scopes ask of attention calls (:func:`wanted` without ``"ffn"``)."""
    wants = wanted()
    return wants - {"ffn"} if "ffn" in wants else wants


def deliver(module, intermediates) -> None:
    """Hand one call's intermediates to the sink of every open scope that asks for them:
    an :class:`FFNIntermediates` to the scopes that want ``"ffn"``, an attention call's
    :class:`Intermediates` to the others (every scope that wants something else, or
    nothing in particular)."""
    want = getattr(intermediates, "want", None)
    for sink in _ACTIVE.get():
        wants = sink.wants
        if (want in wants) if want is not None else (not wants or not wants <= {"ffn"}):
            sink.append((module, intermediates))
