"""Recording what the attention modules compute, only while an analysis asks for it.

    with record_attention(model) as taps:
        model(**sample["net_input"])
    for tap in taps:            # one per attention call, in call order
        tap.site, tap.weights, tap.values, tap.mask, tap.redundant

or, with a callback called once per attention call (the original API)::

    with record_attention(model, callback):
        model(**sample["net_input"])

``callback(site, weights=..., values=..., mask=...)`` (plus ``redundant=`` (bsz, heads),
the RHE decisions, for a module that identifies redundant heads), where ``site`` says
which module it is (kind, layer).  Both are built on the intermediates that
:func:`fairseq_sparse_attn.attention.core.attend` returns (a
:func:`~fairseq_sparse_attn.attention.intermediates.collect` scope): outside the ``with``
block nothing is computed or kept.  Recording makes a stock softmax module run the
plugin pipeline (materialized weights), which gives the same outputs (parity-tested).
Tensors are detached.
"""

import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, List, Optional

from torch import Tensor

from ..attention import SparseMultiheadAttention
from ..attention.intermediates import Collector, collecting_into

_LAYER = re.compile(r"layers\.(\d+)\.")


@dataclass(frozen=True)
class AttentionSite:
    kind: str  # encoder_self | decoder_self | cross
    layer: int  # 0-based layer index
    name: str  # module path in the model
    num_heads: int


@dataclass(frozen=True)
class AttentionTap:
    """What one attention call computed (detached).

    weights (bsz, heads, tgt, src) float32 before dropout; values (kv_bsz*heads, src,
    head_dim); mask bool broadcastable to weights (True = key not visible) or None;
    redundant (bsz, heads) bool RHE decisions or None."""

    site: AttentionSite
    weights: Tensor
    values: Tensor
    mask: Optional[Tensor]
    redundant: Optional[Tensor] = None


def attention_sites(model) -> List[AttentionSite]:
    sites = []
    for name, module in model.named_modules():
        if isinstance(module, SparseMultiheadAttention):
            match = _LAYER.search(name + ".")
            layer = int(match.group(1)) if match else 0
            sites.append(AttentionSite(module.kind, layer, name, module.num_heads))
    return sites


class _Taps(Collector):
    """A collector that turns each record into an :class:`AttentionTap` (and calls the
    callback) as it arrives."""

    def __init__(self, sites_by_module, callback):
        super().__init__(("weights", "redundant"))
        self.sites_by_module = sites_by_module
        self.callback = callback
        self.taps: List[AttentionTap] = []

    def append(self, record):
        module, inter = record
        site = self.sites_by_module.get(id(module))
        if site is None or inter.weights is None:
            return
        detach = lambda t: None if t is None else t.detach()  # noqa: E731
        tap = AttentionTap(site, inter.weights.detach(), inter.values.detach(), detach(inter.mask),
                           detach(inter.redundant))
        if self.callback is not None:
            extra = {} if tap.redundant is None else {"redundant": tap.redundant}
            self.callback(site, weights=tap.weights, values=tap.values, mask=tap.mask, **extra)
        else:
            self.taps.append(tap)


@contextmanager
def record_attention(model, callback: Optional[Callable] = None):
    """Yields the list of :class:`AttentionTap` of the calls in the block (empty when a
    ``callback`` takes them instead)."""
    modules = dict(model.named_modules())
    sites = attention_sites(model)
    if not sites:
        raise ValueError(
            "the model has no fairseq_sparse_attn attention modules to record "
            f"({type(model).__name__}); load it with the plugin's sparse_transformer"
        )
    taps = _Taps({id(modules[s.name]): s for s in sites}, callback)
    with collecting_into(taps):
        yield taps.taps
