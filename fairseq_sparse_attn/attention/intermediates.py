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
intermediates to the open collectors (in call order).  Outside any scope nothing is
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
"""

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import FrozenSet, Iterator, List, Optional, Tuple

from torch import Tensor

WANTS = ("weights", "row_sums", "redundant")


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

    def with_differentiable(self, tensors: List[Tensor]) -> "Intermediates":
        """A copy whose differentiable tensors are replaced by ``tensors`` (same order)."""
        if self.row_sums is None:
            return self
        kept = {f.name: getattr(self, f.name) for f in fields(self)}
        kept["row_sums"] = (tensors[0], tensors[1], self.row_sums[2])
        return Intermediates(**kept)


class Collector(list):
    """The records of one :func:`collect` scope: a list of (module, Intermediates)."""

    def __init__(self, wants):
        super().__init__()
        bad = sorted(set(wants) - set(WANTS))
        if bad:
            raise ValueError(f"cannot collect {bad[0]!r}; choose from {', '.join(WANTS)}")
        self.wants: FrozenSet[str] = frozenset(wants)


_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("fairseq_sparse_attn_collectors", default=())


@contextmanager
def collect(*wants: str) -> Iterator[Collector]:
    """Collect the intermediates named in ``wants`` of every attention call in the scope."""
    with collecting_into(Collector(wants)) as collector:
        yield collector


@contextmanager
def collecting_into(collector: Collector) -> Iterator[Collector]:
    """Like :func:`collect` with a given collector (a subclass may convert or forward
    the records in its ``append``)."""
    token = _ACTIVE.set(_ACTIVE.get() + (collector,))
    try:
        yield collector
    finally:
        _ACTIVE.reset(token)


@contextmanager
def isolated(wants: FrozenSet[str]) -> Iterator[Collector]:
    """A scope that replaces (instead of joining) the open collectors; used by activation
    checkpointing to gather one layer's records and hand them on itself."""
    collector = Collector(wants)
    token = _ACTIVE.set((collector,))
    try:
        yield collector
    finally:
        _ACTIVE.reset(token)


def active_collectors() -> Tuple[Collector, ...]:
    return _ACTIVE.get()


def wanted() -> FrozenSet[str]:
    """What the open collectors ask for (empty outside any scope)."""
    active = _ACTIVE.get()
    if not active:
        return frozenset()
    if len(active) == 1:
        return active[0].wants
    return frozenset().union(*(c.wants for c in active))


def deliver(module, intermediates: Intermediates) -> None:
    """Hand one call's intermediates to every open collector."""
    for collector in _ACTIVE.get():
        collector.append((module, intermediates))
