"""Teacher-forced passes over a list of examples, with collectors that turn what the
recorders hand over into corpus statistics.  Used by ``fsa-analyze`` (:mod:`.cli`).

    collectors = [AttentionStatistics(model), NullRatePerSentence()]
    run_passes(model, examples, collectors, pad=..., ffn=FFNStatistics(model))

A collector gets, for every batch, :meth:`set_batch` (a :class:`Batch`: padding masks,
tokens, example positions), then one call per attention module (``site, weights=,
values=, mask=``, see :mod:`.recording`), then :meth:`end_batch`.  Statistics are taken
over *valid* positions only (real queries x visible keys), as in :mod:`.attention_stats`
and :mod:`.head_stats`, and pooled over the corpus by sums and counts (never averages
of batch averages).
"""

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Dict, Hashable, Iterable, List, Optional, Sequence, Tuple

import torch

from ..options import ATTENTION_KINDS as KINDS
from .alignment import combine_heads, sentence_alignment
from .attention_stats import SparsityStats
from .ffn_stats import anisotropy, record_ffn
from .head_stats import (
    RELA_TEMPERATURES,
    RowAverage,
    head_js_divergence,
    relu_head_js_divergence,
    row_entropy,
    row_top_p,
    top_count,
    valid_queries,
    visible_keys,
)
from .norms import NormRecorder, category_values, spearman
from .recording import AttentionSite, record_attention


def number_key(x: float) -> str:
    """The JSON key of a temperature or fraction: ``0.5 -> "0.5"``, ``1.0 -> "1"``."""
    return format(float(x), "g")


@dataclass
class Batch:
    source_padding: torch.Tensor  # (bsz, src) bool, True = padding
    target_padding: torch.Tensor  # (bsz, tgt) bool (of prev_output_tokens)
    source_tokens: torch.Tensor
    target_tokens: torch.Tensor  # prev_output_tokens
    ids: List[int]  # position in the example list of each batch row

    def query_padding(self, kind: str) -> torch.Tensor:
        return self.source_padding if kind == "encoder_self" else self.target_padding

    def key_padding(self, kind: str) -> torch.Tensor:
        return self.target_padding if kind == "decoder_self" else self.source_padding


class Collector:
    def set_batch(self, batch: Batch) -> None:
        self.batch = batch

    def __call__(self, site: AttentionSite, weights, values=None, mask=None, **_) -> None:
        pass

    def end_batch(self) -> None:
        pass


@torch.no_grad()
def run_passes(model, examples, collectors: Sequence[Collector], source_pad: int,
               target_pad: int, eos: int, batch_size: Optional[int] = 32,
               max_tokens: Optional[int] = None, device="cpu", progress: bool = False,
               ffn: Optional["FFNStatistics"] = None, description: str = "analysis") -> int:
    """One teacher-forced forward per batch with every collector attached; returns the
    number of sentence pairs seen.  The model is put in eval mode (the recorded weights
    are the ones used, no attention dropout)."""
    from tqdm import tqdm

    from .loading import iterate_batches, make_batches

    model.eval()
    n_batches = len(make_batches(examples, batch_size, max_tokens))

    def dispatch(site, **kw):
        for c in collectors:
            c(site, **kw)

    seen = 0
    with ExitStack() as stack:
        stack.enter_context(record_attention(model, dispatch))
        if ffn is not None:
            stack.enter_context(record_ffn(model, ffn))
        batches = iterate_batches(examples, source_pad, eos, batch_size, max_tokens, device)
        for sample in tqdm(batches, total=n_batches, desc=description, unit="batch",
                           disable=not progress):
            net = sample["net_input"]
            src, prev = net["src_tokens"], net["prev_output_tokens"]
            batch = Batch(src.eq(source_pad), prev.eq(target_pad), src, prev,
                          sample["id"].tolist())
            for c in list(collectors) + ([ffn] if ffn is not None else []):
                c.set_batch(batch)
            model(**net)
            for c in list(collectors) + ([ffn] if ffn is not None else []):
                c.end_batch()
            seen += src.size(0)
    return seen


# ----------------------------------------------------------------- attention statistics


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

    def __init__(self, model, top_p: Sequence[float] = (0.01, 0.05, 0.1),
                 temperatures: Sequence[float] = RELA_TEMPERATURES, js_mode: str = "power"):
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
        self.sparsity.set_query_padding(batch.source_padding, batch.target_padding)

    def __call__(self, site, weights, values=None, mask=None, **_):
        self.sparsity(site, weights=weights, mask=mask)
        key = (site.kind, site.layer)
        module = self._modules[site.name]
        normalizing = bool(getattr(module.activation, "normalizing", True))
        self.info[key] = {"activation": module.activation_name,
                          "output_norm": module.output_norm_name,
                          "heads": site.num_heads, "normalizing": normalizing}
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
                    weights, tau, mask, qpad, mode=self.js_mode)

    def layers(self) -> Dict[str, List[Dict]]:
        """``{kind: [layer entry, ...]}`` (the ``attention`` part of stats.json)."""
        sparsity = self.sparsity.per_head()
        out: Dict[str, List[Dict]] = {}
        for key in sorted(self.info):
            kind, layer = key
            info = self.info[key]
            signed = bool(self.signed.get(key))
            sp = sparsity[key]
            entry = {"layer": layer, "heads": info["heads"], "activation": info["activation"],
                     "output_norm": info["output_norm"],
                     "sparsity": _mean(sp["sparsity"]), "null_rate": _mean(sp["null_rate"])}
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
                per_head["top_p"] = {number_key(p): [r.value for r in self.top[key][p]]
                                     for p in self.top_p}
            js = self.js.get(key, {})
            if info["normalizing"]:
                entry["js_renormalization"] = "none"
                entry["js"] = js[None].value
                entry["js_temperatures"] = None
            else:
                entry["js_renormalization"] = self.js_mode
                usable = not signed or self.js_mode == "divide"
                temps = {number_key(t): (js[t].value if usable and t in js else None)
                         for t in self.temperatures}
                entry["js_temperatures"] = temps
                entry["js"] = temps.get("1")
            entry["undefined"] = (
                f"the {info['activation']} attention produced negative weights: entropy, top-p"
                f"{' and the power re-normalization of JS' if self.js_mode == 'power' else ''}"
                f" need non-negative weights" if signed else None)
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


# ---------------------------------------------------------------------------- FFN


class FFNStatistics:
    """ReLUFormer's FFN analysis per layer: anisotropy (Eq. 4, mean pairwise cosine) of the
    keys ``fc1.weight`` rows and of the values ``fc2.weight`` columns; Var(FFN output) /
    Var(residual) (Table 1), pooled over the real (non-padding) positions of the corpus;
    top-p% mass of the activation rows (Figure 2) over real positions.  A
    :func:`.ffn_stats.record_ffn` callback."""

    def __init__(self, model, top_p: Sequence[float] = (0.01, 0.05, 0.1)):
        from .ffn_stats import _ffn_layers

        self.top_p = tuple(top_p)
        self.layers: Dict[str, Dict] = {}
        for name, layer in _ffn_layers(model):
            self.layers[name] = {
                "ffn_type": layer.activation_fn.ffn_type,
                "anisotropy_keys": anisotropy(layer.fc1.weight.detach()),
                "anisotropy_values": anisotropy(layer.fc2.weight.detach().t()),
            }
        # name -> [n, sum, sum of squares] for ffn output and residual (float64)
        self._moments: Dict[str, Dict[str, List[float]]] = {}
        self._top: Dict[str, Dict[float, RowAverage]] = {}
        self.batch: Optional[Batch] = None

    def set_batch(self, batch: Batch) -> None:
        self.batch = batch

    def end_batch(self) -> None:
        pass

    def _valid(self, name: str, length: int) -> torch.Tensor:
        pad = self.batch.source_padding if name.startswith("encoder") else self.batch.target_padding
        if pad.shape[1] != length:
            raise ValueError(f"{name}: FFN input has {length} positions but the batch's "
                             f"{'source' if name.startswith('encoder') else 'target'} has "
                             f"{pad.shape[1]} (teacher-forced passes only)")
        return (~pad).t()  # (T, B), the layers' time-first layout

    def __call__(self, name: str, residual, ffn_output, rows=None) -> None:
        valid = self._valid(name, residual.shape[0])
        moments = self._moments.setdefault(name, {"ffn_output": [0, 0.0, 0.0],
                                                  "residual": [0, 0.0, 0.0]})
        for what, x in (("ffn_output", ffn_output), ("residual", residual)):
            v = x[valid].double()
            m = moments[what]
            m[0] += v.numel()
            m[1] += float(v.sum())
            m[2] += float((v * v).sum())
        if rows is not None:
            r = rows[valid].double()  # (positions, slots)
            total = r.sum(-1)
            keep = total > 0
            tops = self._top.setdefault(name, {p: RowAverage() for p in self.top_p})
            for p in self.top_p:
                k = int(top_count(p, torch.tensor(r.shape[-1])))
                share = r.topk(k, dim=-1).values.sum(-1)[keep] / total[keep]
                tops[p] = tops[p] + RowAverage(float(share.sum()), int(keep.sum()))

    @staticmethod
    def _variance(n: float, s: float, ss: float) -> float:
        if n < 2:
            return float("nan")
        return (ss - s * s / n) / (n - 1)

    def results(self) -> List[Dict]:
        out = []
        for name, info in self.layers.items():
            side = "encoder" if name.startswith("encoder") else "decoder"
            layer = int(name.rsplit(".", 1)[-1])
            m = self._moments.get(name)
            ratio = None
            if m is not None:
                var_out, var_res = self._variance(*m["ffn_output"]), self._variance(*m["residual"])
                ratio = var_out / var_res if var_res > 0 else float("nan")
            tops = self._top.get(name, {})
            out.append({"side": side, "layer": layer, "name": name, **info,
                        "variance_ratio": ratio,
                        "top_p_mass": {number_key(p): (tops[p].value if p in tops else None)
                                       for p in self.top_p}})
        return out


# ------------------------------------------------------------- sparsity / null rate


class SparsityCollector(Collector):
    """:class:`.attention_stats.SparsityStats` of the attention ``kinds`` only."""

    def __init__(self, kinds: Sequence[str] = KINDS):
        self.kinds = tuple(kinds)
        self.stats = SparsityStats()

    def set_batch(self, batch: Batch) -> None:
        super().set_batch(batch)
        self.stats.set_query_padding(batch.source_padding, batch.target_padding)

    def __call__(self, site, weights, values=None, mask=None, **_):
        if site.kind in self.kinds:
            self.stats(site, weights=weights, mask=mask)


# ------------------------------------------------------------- sentence null rates


class NullRatePerSentence(Collector):
    """Per sentence pair, the mean cross-attention null rate: null rows (every visible
    weight exactly 0) / rows, over all cross layers, heads and real target positions."""

    def __init__(self):
        self.null: Dict[int, float] = {}
        self.rows: Dict[int, float] = {}

    def __call__(self, site, weights, values=None, mask=None, **_):
        if site.kind != "cross":
            return
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


def rank_by_score(scores: Dict[int, float], descending: bool = True) -> List[Tuple[int, float]]:
    """``[(index, score)]`` sorted by score (highest first when ``descending``), ties by
    index; ``nan`` scores last."""
    import math

    def key(item):
        i, s = item
        missing = s is None or math.isnan(s)
        return (missing, 0.0 if missing else (-s if descending else s), i)

    return sorted(scores.items(), key=key)


# --------------------------------------------------------------- per-sentence matrices


@dataclass
class SentenceWeights:
    sentence: int
    weights: torch.Tensor  # (heads, tgt, src), cropped to real tokens


class WeightsRecorder(Collector):
    """Each sentence's weights cropped to its real queries and keys, for ``kinds``
    (the weights-only counterpart of :class:`.norms.NormRecorder`; no output-norm
    restriction).  ``records[(kind, layer)]`` lists this batch's sentences; cleared by
    :meth:`clear`."""

    def __init__(self, kinds: Sequence[str] = ("cross",)):
        self.kinds = tuple(kinds)
        self.records: Dict[Tuple[str, int], List[SentenceWeights]] = {}

    def __call__(self, site, weights, values=None, mask=None, **_):
        if site.kind not in self.kinds:
            return
        q = ~self.batch.query_padding(site.kind).cpu()
        k = ~self.batch.key_padding(site.kind).cpu()
        w = weights.detach().float().cpu()
        out = self.records.setdefault((site.kind, site.layer), [])
        for b in range(w.shape[0]):
            qi, ki = q[b].nonzero().squeeze(1), k[b].nonzero().squeeze(1)
            out.append(SentenceWeights(b, w[b][:, qi][:, :, ki]))

    def clear(self):
        self.records = {}


class NormCollector(Collector):
    """Wraps :class:`.norms.NormRecorder` (one batch at a time) for alignment and norm
    summaries."""

    def __init__(self, model, kinds=KINDS, allow_output_norm: bool = False):
        self.recorder = NormRecorder(model, kinds, allow_output_norm)

    def set_batch(self, batch: Batch) -> None:
        super().set_batch(batch)
        self.recorder.records = {}
        self.recorder.set_batch(batch.source_padding, batch.target_padding,
                                batch.source_tokens, batch.target_tokens)

    def __call__(self, site, weights, values=None, mask=None, **_):
        self.recorder(site, weights=weights, values=values, mask=mask)

    @property
    def records(self):
        return self.recorder.records


# ---------------------------------------------------------------------- norm summaries


class NormSummary(Collector):
    """Kobayashi et al. (2020) summaries per (kind, layer): mean ‖f^h(x)‖ per head over
    real keys; mean α and mean ‖α f(x)‖ per head, and mean ‖Σ_h α_h f_h(x)‖, over real
    queries x visible keys; Spearman ρ(α, ‖f(x)‖) per key category, pooled over the layers
    and heads of a kind and per layer (``unit`` as :func:`.norms.category_spearman`)."""

    def __init__(self, model, categorize, kinds=KINDS, allow_output_norm: bool = False,
                 unit: str = "pair"):
        """``categorize``: key token id -> label, or ``{kind: that function}`` (the keys of
        decoder self-attention are target tokens, the others source tokens)."""
        self.norms = NormCollector(model, kinds, allow_output_norm)
        self.categorize = categorize if isinstance(categorize, dict) else {k: categorize for k in KINDS}
        self.unit = unit
        self.sums: Dict[Tuple[str, int], Dict[str, torch.Tensor]] = {}
        self.values: Dict[Tuple[str, int], Dict[Hashable, List[Tuple[torch.Tensor, torch.Tensor]]]] = {}
        self.heads: Dict[Tuple[str, int], int] = {}

    def set_batch(self, batch):
        super().set_batch(batch)
        self.norms.set_batch(batch)

    def __call__(self, site, weights, values=None, mask=None, **_):
        self.norms(site, weights=weights, values=values, mask=mask)

    def end_batch(self):
        for key, recs in self.norms.records.items():
            heads = recs[0].weights.shape[0]
            self.heads[key] = heads
            s = self.sums.setdefault(key, {n: torch.zeros(heads, dtype=torch.float64) for n in
                                           ("f", "keys", "alpha", "alpha_f", "pairs")})
            s.setdefault("layer", torch.zeros((), dtype=torch.float64))
            for rec in recs:
                vis = rec.visible.unsqueeze(0).double()  # (1, tgt, src)
                s["f"] += rec.transformed.double().sum(-1)
                s["keys"] += rec.transformed.shape[-1]
                s["alpha"] += (rec.weights.double() * vis).sum(dim=(1, 2))
                s["alpha_f"] += (rec.head.double() * vis).sum(dim=(1, 2))
                s["pairs"] += vis.sum()
                s["layer"] += (rec.layer.double() * vis[0]).sum()
            for label, pair in category_values(recs, self.categorize[key[0]], self.unit).items():
                self.values.setdefault(key, {}).setdefault(label, []).append(pair)
        self.norms.recorder.records = {}

    @staticmethod
    def _correlations(chunks: Dict[Hashable, List[Tuple[torch.Tensor, torch.Tensor]]]) -> Dict:
        out = {}
        for label in sorted(chunks, key=str):
            a = torch.cat([c[0] for c in chunks[label]])
            f = torch.cat([c[1] for c in chunks[label]])
            out[str(label)] = {"rho": spearman(a, f), "count": int(a.numel()),
                               "mean_alpha": float(a.mean()) if a.numel() else None,
                               "mean_f_norm": float(f.mean()) if f.numel() else None}
        return out

    def results(self) -> Dict:
        layers: Dict[str, List[Dict]] = {}
        pooled: Dict[str, Dict[Hashable, List]] = {}
        for key in sorted(self.sums):
            kind, layer = key
            s = self.sums[key]
            pairs = s["pairs"].clamp(min=1)
            entry = {
                "layer": layer, "heads": self.heads[key],
                "f_norm": (s["f"] / s["keys"].clamp(min=1)).tolist(),
                "alpha": (s["alpha"] / pairs).tolist(),
                "alpha_f_norm": (s["alpha_f"] / pairs).tolist(),
                "layer_norm": float(s["layer"] / pairs[0]),
                "spearman": self._correlations(self.values.get(key, {})),
            }
            layers.setdefault(kind, []).append(entry)
            for label, chunks in self.values.get(key, {}).items():
                pooled.setdefault(kind, {}).setdefault(label, []).extend(chunks)
        return {"layers": layers,
                "spearman": {kind: self._correlations(chunks) for kind, chunks in pooled.items()}}


# --------------------------------------------------------------------------- alignment

METHODS = ("weights", "norms")


class AlignmentCollector(Collector):
    """Word alignments from cross attention for every (method, setting, layer, head):
    ``method`` ``"weights"`` (α per head, Σ_h α_h per layer) or ``"norms"`` (‖α f(x)‖
    per head, ‖Σ_h α_h f_h(x)‖ per layer); ``setting`` ``"awo"`` / ``"awi"``; words by
    :func:`.alignment.sentence_alignment` (``scheme``).  ``links[(method, setting, layer,
    head)][position]`` is a set of (source word, target word) links; head ``None`` = the
    layer."""

    def __init__(self, model, examples, methods=("weights",), settings=("awo", "awi"),
                 scheme: str = "subword-nmt", allow_output_norm: bool = False):
        bad = [m for m in methods if m not in METHODS]
        if bad or not methods:
            raise ValueError(f"alignment methods must be a non-empty subset of {METHODS}, got {methods}")
        self.examples = examples
        self.methods, self.settings, self.scheme = tuple(methods), tuple(settings), scheme
        self.norms = NormCollector(model, ("cross",), allow_output_norm) if "norms" in methods else None
        self.weights = None if self.norms is not None else WeightsRecorder(("cross",))
        self.links: Dict[Tuple[str, str, int, Optional[int]], Dict[int, set]] = {}

    def set_batch(self, batch):
        super().set_batch(batch)
        (self.norms or self.weights).set_batch(batch)

    def __call__(self, site, weights, values=None, mask=None, **_):
        (self.norms or self.weights)(site, weights=weights, values=values, mask=mask)

    def end_batch(self):
        records = self.norms.records if self.norms is not None else self.weights.records
        for (_kind, layer), recs in records.items():
            for rec in recs:
                ex = self.examples[self.batch.ids[rec.sentence]]
                matrices = {}
                if "weights" in self.methods:
                    w = rec.weights
                    matrices["weights"] = [(None, combine_heads(w))] + [(h, w[h]) for h in range(w.shape[0])]
                if "norms" in self.methods:
                    matrices["norms"] = [(None, rec.layer)] + [(h, rec.head[h]) for h in range(rec.head.shape[0])]
                for method, items in matrices.items():
                    for setting in self.settings:
                        for head, matrix in items:
                            links = sentence_alignment(matrix, ex.source_pieces, ex.target_pieces,
                                                       setting, self.scheme)
                            self.links.setdefault((method, setting, layer, head), {})[ex.index] = links
        if self.norms is not None:
            self.norms.recorder.records = {}
        else:
            self.weights.clear()
