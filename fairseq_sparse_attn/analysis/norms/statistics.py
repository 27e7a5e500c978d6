"""The statistics of the norm-based analysis (Kobayashi et al. 2020): Spearman's ρ
between α and ‖f(x)‖ per category of the key token (§4.2 / Table 2), and
:class:`NormSummary`, the ``fsa-analyze norms`` collector that pools them and the mean
norms over a corpus."""

import math
import string
import unicodedata
from dataclasses import dataclass
from typing import Callable, Dict, Hashable, Iterable, List, Tuple

import torch

from ...attention.config import ATTENTION_KINDS as KINDS
from ...subwords import strip_markers
from .recording import NormRecorder, SentenceNorms

SPEARMAN_UNITS = ("pair", "key")


def average_ranks(x: torch.Tensor) -> torch.Tensor:
    """1-based ranks of a 1-D tensor, ties sharing the average of their positions
    (``[10, 20, 20, 5] -> [2, 3.5, 3.5, 1]``), float64."""
    if x.dim() != 1:
        raise ValueError(f"average_ranks takes a 1-D tensor, got shape {tuple(x.shape)}")
    x = x.double()
    if torch.isnan(x).any():
        raise ValueError("cannot rank NaN values")
    n = x.numel()
    order = torch.argsort(x, stable=True)
    ordered = x[order]
    starts = torch.ones(n, dtype=torch.bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    group = starts.cumsum(0) - 1
    positions = torch.arange(1, n + 1, dtype=torch.float64)
    sums = torch.zeros(int(group[-1]) + 1 if n else 0, dtype=torch.float64).index_add_(0, group, positions)
    counts = torch.bincount(group).double()
    ranks = torch.empty(n, dtype=torch.float64)
    ranks[order] = (sums / counts)[group]
    return ranks


def spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    """Spearman's ρ: the Pearson correlation of the average ranks of ``x`` and ``y``
    (ties averaged).  ``nan`` with fewer than 2 pairs or when either side is constant."""
    x, y = torch.as_tensor(x).flatten(), torch.as_tensor(y).flatten()
    if x.numel() != y.numel():
        raise ValueError(f"spearman needs paired values, got {x.numel()} and {y.numel()}")
    if x.numel() < 2:
        return math.nan
    rx, ry = average_ranks(x), average_ranks(y)
    dx, dy = rx - rx.mean(), ry - ry.mean()
    denominator = math.sqrt(float((dx * dx).sum()) * float((dy * dy).sum()))
    if denominator == 0:
        return math.nan
    return float((dx * dy).sum()) / denominator


@dataclass(frozen=True)
class CategoryCorrelation:
    """Spearman's ρ between α and ‖f(x)‖ over ``count`` values of one key category."""

    rho: float
    count: int


_PUNCTUATION = set(string.punctuation)


def token_category(symbol: str, eos: str = "</s>") -> str:
    """``"eos"`` for the end-of-sentence symbol, ``"punctuation"`` for a token made only of
    punctuation characters (Unicode category P*, or ASCII punctuation; subword markers
    ``@@`` and ``▁`` ignored), ``"other"`` for everything else (NMT analogues of
    Kobayashi et al.'s [SEP]/[CLS], "comma & period" and "others")."""
    if symbol == eos:
        return "eos"
    core = strip_markers(symbol)
    if core and all(c in _PUNCTUATION or unicodedata.category(c).startswith("P") for c in core):
        return "punctuation"
    return "other"


def dictionary_categorizer(dictionary, categorize: Callable[[str], Hashable] = token_category):
    """Token id -> category through a fairseq ``Dictionary``'s symbols."""
    return lambda token: categorize(dictionary[int(token)])


def category_values(
    sentences: Iterable[SentenceNorms], categorize: Callable[[int], Hashable], unit: str = "pair"
) -> Dict[Hashable, Tuple[torch.Tensor, torch.Tensor]]:
    """The (α, ‖f(x)‖) values :func:`category_spearman` correlates, per key category.

    * ``unit="pair"``: one value per head h, real query i and key j *visible* to i:
      ``(α^h_{ij}, ‖f^h(x_j)‖)`` (zero weights of ReLU heads included; causally hidden
      keys are not attention decisions and are skipped);
    * ``unit="key"``: one value per head h and key j: ``(mean_i α^h_{ij}, ‖f^h(x_j)‖)``,
      the mean over the real queries that see j (Kobayashi App. D.1 ``Weight(p,q,ℓ,h)``;
      keys no query sees are skipped).
    """
    if unit not in SPEARMAN_UNITS:
        raise ValueError(f"unit must be one of {SPEARMAN_UNITS}, got {unit!r}")
    alphas: Dict[Hashable, List[torch.Tensor]] = {}
    norms: Dict[Hashable, List[torch.Tensor]] = {}
    for n, rec in enumerate(sentences):
        if rec.key_tokens is None:
            raise ValueError(
                f"sentence {n} has no key tokens: give set_batch the tokens "
                f"(source_tokens, target_tokens) to categorize keys"
            )
        labels = [categorize(int(t)) for t in rec.key_tokens]
        visible = rec.visible.unsqueeze(0).expand_as(rec.weights)
        for label in set(labels):
            cols = torch.tensor([j for j, l in enumerate(labels) if l == label], dtype=torch.long)
            w = rec.weights[:, :, cols].double()  # (heads, tgt, k)
            vis = visible[:, :, cols]
            fn = rec.transformed[:, cols].double().unsqueeze(1).expand_as(w)
            if unit == "pair":
                a, f = w[vis], fn[vis]
            else:
                seen = vis.sum(dim=1)  # (heads, k)
                keep = seen > 0
                a = ((w * vis).sum(dim=1) / seen.clamp(min=1))[keep]
                f = rec.transformed[:, cols].double()[keep]
            alphas.setdefault(label, []).append(a.reshape(-1))
            norms.setdefault(label, []).append(f.reshape(-1))
    return {label: (torch.cat(alphas[label]), torch.cat(norms[label])) for label in alphas}


def category_spearman(
    sentences: Iterable[SentenceNorms], categorize: Callable[[int], Hashable], unit: str = "pair"
) -> Dict[Hashable, CategoryCorrelation]:
    """Kobayashi et al. §4.2 / Table 2: per category of the key token, Spearman's ρ
    between the attention weight α and ‖f(x)‖, pooled over everything passed in
    (sentences, and the heads and layers they come from: chain the records of several
    layers to pool them, as the paper pools all layers and heads).

    ``categorize`` maps a key token id to a label (see :func:`dictionary_categorizer`,
    :func:`token_category`).  ``unit="pair"`` (default) correlates every (query, key,
    head) pair — what Table 2's counts ("number of vectors", one per query per head for
    each key token) and Fig. 5 ("a pair of α_{i,j} and ‖f(x_j)‖") use; ``unit="key"``
    first averages α over the queries, as App. D.2's text describes.  See
    :func:`category_values`.
    """
    return {
        label: CategoryCorrelation(spearman(a, f), int(a.numel()))
        for label, (a, f) in category_values(sentences, categorize, unit).items()
    }


class NormSummary(NormRecorder):
    """Kobayashi et al. (2020) summaries per (kind, layer): mean ‖f^h(x)‖ per head over
    real keys; mean α and mean ‖α f(x)‖ per head, and mean ‖Σ_h α_h f_h(x)‖, over real
    queries x visible keys; Spearman ρ(α, ‖f(x)‖) per key category, pooled over the layers
    and heads of a kind and per layer (``unit`` as :func:`category_spearman`).  A
    :class:`NormRecorder` that pools each batch's sentences at :meth:`end_batch`."""

    def __init__(self, model, categorize, kinds=KINDS, allow_output_norm: bool = False, unit: str = "pair"):
        """``categorize``: key token id -> label, or ``{kind: that function}`` (the keys of
        decoder self-attention are target tokens, the others source tokens)."""
        super().__init__(model, kinds, allow_output_norm)
        self.categorize = categorize if isinstance(categorize, dict) else {k: categorize for k in KINDS}
        self.unit = unit
        self.sums: Dict[Tuple[str, int], Dict[str, torch.Tensor]] = {}
        self.values: Dict[Tuple[str, int], Dict[Hashable, List[Tuple[torch.Tensor, torch.Tensor]]]] = {}
        self.heads: Dict[Tuple[str, int], int] = {}

    def end_batch(self):
        for key, recs in self.records.items():
            heads = recs[0].weights.shape[0]
            self.heads[key] = heads
            s = self.sums.setdefault(
                key, {n: torch.zeros(heads, dtype=torch.float64) for n in ("f", "keys", "alpha", "alpha_f", "pairs")}
            )
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
        self.clear()

    @staticmethod
    def _correlations(chunks: Dict[Hashable, List[Tuple[torch.Tensor, torch.Tensor]]]) -> Dict:
        out = {}
        for label in sorted(chunks, key=str):
            a = torch.cat([c[0] for c in chunks[label]])
            f = torch.cat([c[1] for c in chunks[label]])
            out[str(label)] = {
                "rho": spearman(a, f),
                "count": int(a.numel()),
                "mean_alpha": float(a.mean()) if a.numel() else None,
                "mean_f_norm": float(f.mean()) if f.numel() else None,
            }
        return out

    def results(self) -> Dict:
        layers: Dict[str, List[Dict]] = {}
        pooled: Dict[str, Dict[Hashable, List]] = {}
        for key in sorted(self.sums):
            kind, layer = key
            s = self.sums[key]
            pairs = s["pairs"].clamp(min=1)
            entry = {
                "layer": layer,
                "heads": self.heads[key],
                "f_norm": (s["f"] / s["keys"].clamp(min=1)).tolist(),
                "alpha": (s["alpha"] / pairs).tolist(),
                "alpha_f_norm": (s["alpha_f"] / pairs).tolist(),
                "layer_norm": float(s["layer"] / pairs[0]),
                "spearman": self._correlations(self.values.get(key, {})),
            }
            layers.setdefault(kind, []).append(entry)
            for label, chunks in self.values.get(key, {}).items():
                pooled.setdefault(kind, {}).setdefault(label, []).extend(chunks)
        return {"layers": layers, "spearman": {kind: self._correlations(chunks) for kind, chunks in pooled.items()}}
