"""The collectors of the attention statistics (ReLA, Sec. 5.2 and Fig. 3/6; ``fsa-analyze
stats``, ``hallucination``, ``filter``).

* sparsity rate: fraction of attention weights exactly 0, among *valid* positions only
  (real query x visible key: padding and causally masked keys, and padding queries, are
  excluded);
* null rate: fraction of valid queries whose weights over the visible keys are all 0.

:class:`SparsityStats` keeps both per (kind, layer, head) and aggregates them on request
(the hallucination test's collector); :class:`AttentionStatistics` adds the entropy,
top-p% score sums and head diversity of :mod:`.head_stats` (``stats``);
:class:`NullRatePerSentence` scores each sentence pair (``filter``).  Statistics are
pooled over the corpus by sums and counts (never averages of batch averages).
"""

from collections import defaultdict
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from ..attention.config import ATTENTION_KINDS as KINDS
from ..attention.intermediates import Intermediates
from .head_stats import (
    RELA_TEMPERATURES,
    RowAverage,
    head_js_divergence,
    relu_head_js_divergence,
    row_entropy,
    row_top_p,
    valid_queries,
    visible_keys,
)
from .recording import AttentionSite, Batch, Collector, collecting
from .results import number_key


class SparsityStats(Collector):
    """Sparsity and null rate per (kind, layer, head) of the attention ``kinds``."""

    def __init__(self, kinds: Sequence[str] = KINDS):
        self.kinds = tuple(kinds)
        self._counts: Dict[tuple, torch.Tensor] = {}
        self._heads: Dict[tuple, int] = {}

    def collect(self, site: AttentionSite, inter: Intermediates) -> None:
        if site.kind not in self.kinds:
            return
        weights, mask = inter.weights, inter.mask
        bsz, heads, tgt, src = weights.shape
        visible = torch.ones(bsz, 1, tgt, src, dtype=torch.bool, device=weights.device)
        if mask is not None:
            visible = visible & ~mask
        qpad = None if self.batch is None else self.batch.query_padding(site.kind)
        query_valid = torch.ones(bsz, 1, tgt, dtype=torch.bool, device=weights.device)
        if qpad is not None:
            query_valid = ~qpad.view(bsz, 1, tgt)
        visible = visible & query_valid.unsqueeze(-1)
        nonzero = (weights != 0) & visible
        zeros = ((weights == 0) & visible).sum(dim=(0, 2, 3))
        positions = visible.sum().expand(heads)
        null = ((nonzero.sum(-1) == 0) & query_valid).sum(dim=(0, 2))
        rows = query_valid.sum().expand(heads)
        counts = torch.stack([zeros, positions, null, rows]).double().cpu()
        key = (site.kind, site.layer)
        self._counts[key] = self._counts.get(key, 0) + counts
        self._heads[key] = heads

    def per_head(self):
        """{(kind, layer): {"sparsity": [per head], "null_rate": [per head]}}"""
        out = {}
        for key, (zeros, positions, null, rows) in sorted(self._counts.items()):
            out[key] = {
                "sparsity": (zeros / positions.clamp(min=1)).tolist(),
                "null_rate": (null / rows.clamp(min=1)).tolist(),
            }
        return out

    def per_layer(self):
        """Average over heads, as the ReLA paper reports per layer."""
        return {key: {name: sum(vals) / len(vals) for name, vals in d.items()} for key, d in self.per_head().items()}

    def per_kind(self):
        """Average over layers (of the per-layer head averages)."""
        grouped = defaultdict(list)
        for (kind, _), d in self.per_layer().items():
            grouped[kind].append(d)
        return {kind: {name: sum(d[name] for d in ds) / len(ds) for name in ds[0]} for kind, ds in grouped.items()}


@torch.no_grad()
def collect_sparsity(model, batches, pad_idx: int, max_sentences: Optional[int] = None):
    """Teacher-forced passes over fairseq ``batches`` (samples with ``net_input``)."""
    stats = SparsityStats()
    model.eval()
    seen = 0
    with collecting(model, stats):
        for sample in batches:
            net_input = sample["net_input"]
            stats.set_batch(Batch(net_input["src_tokens"].eq(pad_idx), net_input["prev_output_tokens"].eq(pad_idx)))
            model(**net_input)
            seen += net_input["src_tokens"].size(0)
            if max_sentences is not None and seen >= max_sentences:
                break
    return stats


class AttentionStatistics(Collector):
    """Per (kind, layer): sparsity rate and null rate per head (:class:`SparsityStats`),
    entropy ``H(ŝ)`` and top-p% score sums per head (:mod:`.head_stats`), and head
    diversity (generalized JS) per layer.

    JS: for normalizing activations (softmax, sparsemax, entmax, fixed patterns) the
    weights are used as they are (:func:`head_js_divergence`); for rectified ones (ReLU,
    scaled ReLU) they are re-normalized at every temperature of ``temperatures``
    (:func:`relu_head_js_divergence`, ``mode``).  Entropy, top-p and the ``power``
    re-normalization need non-negative weights: for an activation that produced a
    negative weight (GELU, leaky ReLU) they are left undefined, with the reason.
    """

    def __init__(
        self,
        model,
        top_p: Sequence[float] = (0.01, 0.05, 0.1),
        temperatures: Sequence[float] = RELA_TEMPERATURES,
        js_mode: str = "power",
    ):
        self.sparsity = SparsityStats()
        self.top_p = tuple(top_p)
        self.temperatures = tuple(temperatures)
        self.js_mode = js_mode
        self._modules = dict(model.named_modules())
        self.entropy: Dict[Tuple[str, int], List[RowAverage]] = {}
        self.top: Dict[Tuple[str, int], Dict[float, List[RowAverage]]] = {}
        self.js: Dict[Tuple[str, int], Dict[Optional[float], RowAverage]] = {}
        self.info: Dict[Tuple[str, int], Dict] = {}
        self.signed: Dict[Tuple[str, int], bool] = {}

    def set_batch(self, batch: Batch) -> None:
        super().set_batch(batch)
        self.sparsity.set_batch(batch)

    def collect(self, site: AttentionSite, inter: Intermediates) -> None:
        self.sparsity.collect(site, inter)
        weights, mask = inter.weights, inter.mask
        key = (site.kind, site.layer)
        module = self._modules[site.name]
        normalizing = bool(getattr(module.activation, "normalizing", True))
        self.info[key] = {
            "activation": module.config.activation.name,
            "output_norm": module.config.output_norm.name,
            "heads": site.num_heads,
            "normalizing": normalizing,
        }
        qpad = self.batch.query_padding(site.kind)
        valid = valid_queries(weights, qpad).unsqueeze(-1)
        visible = visible_keys(weights, mask)
        if not normalizing and bool(((weights < 0) & visible & valid).any()):
            self.signed[key] = True
        signed = self.signed.get(key, False)
        heads = weights.shape[1]
        if not signed:
            ent = self.entropy.setdefault(key, [RowAverage()] * heads)
            top = self.top.setdefault(key, {p: [RowAverage()] * heads for p in self.top_p})
            _add_per_head(ent, *row_entropy(weights, mask, qpad))
            for p in self.top_p:
                _add_per_head(top[p], *row_top_p(weights, p, mask, qpad))
        js = self.js.setdefault(key, {})
        if normalizing:
            js[None] = js.get(None, RowAverage()) + head_js_divergence(weights, mask, qpad)
        elif not signed or self.js_mode == "divide":
            for tau in self.temperatures:
                js[tau] = js.get(tau, RowAverage()) + relu_head_js_divergence(
                    weights, tau, mask, qpad, mode=self.js_mode
                )

    def layers(self) -> Dict[str, List[Dict]]:
        """``{kind: [layer entry, ...]}`` (the ``attention`` part of stats.json)."""
        sparsity = self.sparsity.per_head()
        out: Dict[str, List[Dict]] = {}
        for key in sorted(self.info):
            kind, layer = key
            info = self.info[key]
            signed = bool(self.signed.get(key))
            sp = sparsity[key]
            entry = {
                "layer": layer,
                "heads": info["heads"],
                "activation": info["activation"],
                "output_norm": info["output_norm"],
                "sparsity": _mean(sp["sparsity"]),
                "null_rate": _mean(sp["null_rate"]),
            }
            per_head = {"sparsity": sp["sparsity"], "null_rate": sp["null_rate"]}
            if signed:
                entry["entropy"] = None
                entry["top_p"] = {number_key(p): None for p in self.top_p}
                per_head["entropy"] = None
                per_head["top_p"] = {number_key(p): None for p in self.top_p}
            else:
                ent = self.entropy[key]
                entry["entropy"] = _pooled(ent)
                entry["top_p"] = {number_key(p): _pooled(self.top[key][p]) for p in self.top_p}
                per_head["entropy"] = [r.value for r in ent]
                per_head["top_p"] = {number_key(p): [r.value for r in self.top[key][p]] for p in self.top_p}
            js = self.js.get(key, {})
            if info["normalizing"]:
                entry["js_renormalization"] = "none"
                entry["js"] = js[None].value
                entry["js_temperatures"] = None
            else:
                entry["js_renormalization"] = self.js_mode
                usable = not signed or self.js_mode == "divide"
                temps = {number_key(t): (js[t].value if usable and t in js else None) for t in self.temperatures}
                entry["js_temperatures"] = temps
                entry["js"] = temps.get("1")
            entry["undefined"] = (
                f"the {info['activation']} attention produced negative weights: entropy, top-p"
                f"{' and the power re-normalization of JS' if self.js_mode == 'power' else ''}"
                f" need non-negative weights"
                if signed
                else None
            )
            entry["per_head"] = per_head
            out.setdefault(kind, []).append(entry)
        return out


def _add_per_head(averages: List[RowAverage], values: torch.Tensor, counted: torch.Tensor) -> None:
    """Add a batch's per-row ``values`` (bsz, heads, tgt) over the ``counted`` rows to
    each head's running average."""
    totals = torch.where(counted, values, torch.zeros_like(values)).sum(dim=(0, 2)).tolist()
    rows = counted.sum(dim=(0, 2)).tolist()
    for h, (t, n) in enumerate(zip(totals, rows)):
        averages[h] = averages[h] + RowAverage(t, int(n))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _pooled(averages: Iterable[RowAverage]) -> float:
    total = RowAverage()
    for a in averages:
        total = total + a
    return total.value


class NullRatePerSentence(Collector):
    """Per sentence pair, the mean cross-attention null rate: null rows (every visible
    weight exactly 0) / rows, over all cross layers, heads and real target positions."""

    def __init__(self):
        self.null: Dict[int, float] = {}
        self.rows: Dict[int, float] = {}

    def collect(self, site: AttentionSite, inter: Intermediates) -> None:
        if site.kind != "cross":
            return
        weights, mask = inter.weights, inter.mask
        visible = visible_keys(weights, mask)
        valid = ~self.batch.target_padding.view(weights.shape[0], 1, -1)  # (bsz, 1, tgt)
        null = ~((weights != 0) & visible).any(dim=-1)  # (bsz, heads, tgt)
        nulls = (null & valid).sum(dim=(1, 2)).double().cpu()
        rows = (valid.sum(dim=(1, 2)) * weights.shape[1]).double().cpu()
        for b, i in enumerate(self.batch.ids):
            self.null[i] = self.null.get(i, 0.0) + float(nulls[b])
            self.rows[i] = self.rows.get(i, 0.0) + float(rows[b])

    def rates(self) -> Dict[int, float]:
        return {i: self.null[i] / self.rows[i] if self.rows[i] else float("nan") for i in self.null}
