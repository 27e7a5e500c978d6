"""Recording what the attention modules compute, only while an analysis asks for it.

The collector protocol.  An analysis owns a :class:`Collector`; while
:func:`collecting` is open, every attention call of the model hands it
``(site, intermediates)``: the :class:`AttentionSite` (which module: kind, layer) and
the :class:`~fairseq_sparse_attn.attention.intermediates.Intermediates` that
:func:`fairseq_sparse_attn.attention.core.attend` returned (weights, values, mask,
RHE decisions), detached.  A teacher-forced pass (:func:`.collect.run_passes`) also
tells it the batch (:meth:`Collector.set_batch`, a :class:`Batch`: padding, tokens,
example positions) before the forward and :meth:`Collector.end_batch` after it::

    with collecting(model, norms, stats):
        for batch, net_input in ...:
            norms.set_batch(batch); stats.set_batch(batch)
            model(**net_input)
            norms.end_batch(); stats.end_batch()

The public recording API is built on it::

    with record_attention(model) as taps:
        model(**sample["net_input"])
    for tap in taps:            # one per attention call, in call order
        tap.site, tap.weights, tap.values, tap.mask, tap.redundant

or, with a callback called once per attention call (the original API)::

    with record_attention(model, callback):
        model(**sample["net_input"])

``callback(site, weights=..., values=..., mask=...)`` (plus ``redundant=`` (bsz, heads),
the RHE decisions, for a module that identifies redundant heads).  Both are one
:func:`~fairseq_sparse_attn.attention.intermediates.collect` scope: outside the ``with``
block nothing is computed or kept.  Recording makes a stock softmax module run the
plugin pipeline (materialized weights), which gives the same outputs (parity-tested).
Tensors are detached.
"""

import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, List, Optional, Union

from torch import Tensor

from ..attention import SparseMultiheadAttention
from ..attention.intermediates import FFNIntermediates, Intermediates, collecting_into

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
            sites.append(AttentionSite(module.config.kind, layer, name, module.num_heads))
    return sites


@dataclass
class Batch:
    """What a teacher-forced pass tells the collectors about the batch it runs next."""

    source_padding: Optional[Tensor]  # (bsz, src) bool, True = padding; None = no padding
    target_padding: Optional[Tensor]  # (bsz, tgt) bool (of prev_output_tokens)
    source_tokens: Optional[Tensor] = None
    target_tokens: Optional[Tensor] = None  # prev_output_tokens
    ids: Optional[List[int]] = None  # position in the example list of each batch row

    def query_padding(self, kind: str) -> Optional[Tensor]:
        return self.source_padding if kind == "encoder_self" else self.target_padding

    def key_padding(self, kind: str) -> Optional[Tensor]:
        return self.target_padding if kind == "decoder_self" else self.source_padding


@dataclass(frozen=True)
class FFNSite:
    side: str  # encoder | decoder
    layer: int  # 0-based layer index
    name: str  # module path of the layer in the model


def ffn_sites(model) -> List[FFNSite]:
    """The layers of ``model`` whose FFN calls are delivered to ``collect("ffn")`` (the
    plugin's layers, :func:`fairseq_sparse_attn.models.ffn.deliver_ffn_calls`)."""
    sites = []
    for name, module in model.named_modules():
        if getattr(getattr(module, "activation_fn", None), "ffn_type", None) is not None and hasattr(module, "fc2"):
            sites.append(FFNSite(name.split(".")[0], int(name.rsplit(".", 1)[-1]), name))
    return sites


class Collector:
    """What an analysis keeps of the model's calls: :meth:`collect` gets every call it
    ``wants`` as ``(site, intermediates)`` (attention calls: ``"weights"``, ``"redundant"``
    with an :class:`AttentionSite`; FFN calls: ``"ffn"`` with an :class:`FFNSite` and an
    :class:`~fairseq_sparse_attn.attention.intermediates.FFNIntermediates`);
    :meth:`set_batch` / :meth:`end_batch` frame each forward of a teacher-forced pass."""

    batch: Optional[Batch] = None
    wants: FrozenSet[str] = frozenset(("weights", "redundant"))

    def set_batch(self, batch: Batch) -> None:
        self.batch = batch

    def collect(self, site, inter) -> None:
        raise NotImplementedError

    def end_batch(self) -> None:
        pass


class _Feed:
    """The sink of the one intermediates scope :func:`collecting` opens: turns each
    (module, intermediates) of the model into (site, detached intermediates) for the
    collectors that want it; calls of other modules, or without weights, are passed over."""

    def __init__(self, sites_by_module: Dict[int, Union[AttentionSite, FFNSite]], collectors):
        self.sites_by_module = sites_by_module
        self.collectors = collectors
        wants = [getattr(c, "wants", Collector.wants) for c in collectors]
        self.wants = frozenset().union(*wants) if wants else frozenset()
        self.ffn = [c for c, w in zip(collectors, wants) if "ffn" in w]
        self.attention = [c for c, w in zip(collectors, wants) if w - {"ffn"}]

    def append(self, record) -> None:
        module, inter = record
        site = self.sites_by_module.get(id(module))
        if site is None:
            return
        if isinstance(inter, FFNIntermediates):
            for collector in self.ffn:
                collector.collect(site, inter)
            return
        if inter.weights is None:
            return
        inter = inter.detached()
        for collector in self.attention:
            collector.collect(site, inter)


@contextmanager
def collecting(model, *collectors: Collector):
    """Hand every attention call of ``model`` in the block to ``collectors``, in call
    order, as ``(site, intermediates)``."""
    modules = dict(model.named_modules())
    sites = attention_sites(model)
    if not sites:
        raise ValueError(
            "the model has no fairseq_sparse_attn attention modules to record "
            f"({type(model).__name__}); load it with the plugin's sparse_transformer"
        )
    by_module: Dict[int, Union[AttentionSite, FFNSite]] = {id(modules[s.name]): s for s in sites}
    if any("ffn" in getattr(c, "wants", ()) for c in collectors):
        by_module.update((id(modules[s.name]), s) for s in ffn_sites(model))
    with collecting_into(_Feed(by_module, collectors)):
        yield


class _Taps(Collector):
    """Turns each call into an :class:`AttentionTap` (or a callback call)."""

    def __init__(self, callback: Optional[Callable]):
        self.callback = callback
        self.taps: List[AttentionTap] = []

    def collect(self, site: AttentionSite, inter: Intermediates) -> None:
        if self.callback is not None:
            extra = {} if inter.redundant is None else {"redundant": inter.redundant}
            self.callback(site, weights=inter.weights, values=inter.values, mask=inter.mask, **extra)
        else:
            self.taps.append(AttentionTap(site, inter.weights, inter.values, inter.mask, inter.redundant))


@contextmanager
def record_attention(model, callback: Optional[Callable] = None):
    """Yields the list of :class:`AttentionTap` of the calls in the block (empty when a
    ``callback`` takes them instead)."""
    taps = _Taps(callback)
    with collecting(model, taps):
        yield taps.taps
