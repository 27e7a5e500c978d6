"""What ReLUFormer's FFN analysis reads (Sec. 3, Table 1, Eq. 4, Figure 2).

* ``collect("ffn")`` (the one collector protocol,
  :mod:`fairseq_sparse_attn.attention.intermediates`): every FFN call of a plugin layer
  hands ``(layer, FFNIntermediates)``: the FFN block's residual stream (its input before
  any pre-norm), the FFN output fc2(act(fc1(x))) before dropout and the residual add
  (including the LayerNorm of ``softmax_layernorm``), and the activation rows (memory
  scores after the activation).  Nothing is recorded outside the scope.
* ``variance_ratio``: Var(FFN output) / Var(residual) (Table 1).
* ``anisotropy``: mean pairwise cosine similarity of a set of vectors (Eq. 4), e.g. the
  FFN keys ``fc1.weight`` (one row per memory slot) or values ``fc2.weight.T``.
* ``top_p_mass``: mean share of a row's total score held by its top p% entries (Figure 2).
* :class:`FFNStatistics`: the ``fsa-analyze stats`` collector of all of it over a corpus
  (a :class:`.recording.Collector` that wants ``"ffn"``, fed by :func:`.collect.run_passes`
  like the attention collectors).
"""

from typing import Dict, List, Optional, Sequence

import torch

from ..attention.intermediates import FFNIntermediates
from .head_stats import RowAverage, top_count
from .recording import Batch, Collector, FFNSite, ffn_sites
from .results import number_key


def variance_ratio(ffn_output: torch.Tensor, residual: torch.Tensor) -> float:
    return (ffn_output.float().var() / residual.float().var()).item()


def anisotropy(vectors: torch.Tensor) -> float:
    """Mean cosine similarity over all pairs of distinct rows of ``vectors``."""
    v = torch.nn.functional.normalize(vectors.float(), dim=-1)
    n = v.size(0)
    if n < 2:
        raise ValueError("anisotropy needs at least two vectors")
    sim = v @ v.T
    return ((sim.sum() - sim.diagonal().sum()) / (n * (n - 1))).item()


def top_p_mass(rows: torch.Tensor, p: float) -> float:
    """Mean over rows of (sum of the top ceil(p * width) entries) / (row sum)."""
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")
    rows = rows.float().reshape(-1, rows.size(-1))
    k = max(1, int(torch.ceil(torch.tensor(p * rows.size(-1))).item()))
    top = rows.topk(k, dim=-1).values.sum(-1)
    total = rows.sum(-1)
    keep = total > 0
    return (top[keep] / total[keep]).mean().item()


class FFNStatistics(Collector):
    """ReLUFormer's FFN analysis per layer: anisotropy (Eq. 4, mean pairwise cosine) of the
    keys ``fc1.weight`` rows and of the values ``fc2.weight`` columns; Var(FFN output) /
    Var(residual) (Table 1), pooled over the real (non-padding) positions of the corpus;
    top-p% mass of the activation rows (Figure 2) over real positions.  A collector of the
    FFN calls (``wants = {"ffn"}``), framed by :meth:`set_batch` / :meth:`end_batch` like the
    attention collectors."""

    wants = frozenset(("ffn",))

    def __init__(self, model, top_p: Sequence[float] = (0.01, 0.05, 0.1)):
        self.top_p = tuple(top_p)
        self.layers: Dict[str, Dict] = {}
        modules = dict(model.named_modules())
        sites = ffn_sites(model)
        if not sites:
            raise ValueError("no plugin FFN layers found (is this a sparse_transformer model?)")
        for site in sites:
            layer = modules[site.name]
            self.layers[site.name] = {
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
            raise ValueError(
                f"{name}: FFN input has {length} positions but the batch's "
                f"{'source' if name.startswith('encoder') else 'target'} has "
                f"{pad.shape[1]} (teacher-forced passes only)"
            )
        return (~pad).t()  # (T, B), the layers' time-first layout

    def collect(self, site: FFNSite, inter: FFNIntermediates) -> None:
        name, residual, ffn_output, rows = site.name, inter.residual, inter.ffn_output, inter.rows
        valid = self._valid(name, residual.shape[0])
        moments = self._moments.setdefault(name, {"ffn_output": [0, 0.0, 0.0], "residual": [0, 0.0, 0.0]})
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
            out.append(
                {
                    "side": side,
                    "layer": layer,
                    "name": name,
                    **info,
                    "variance_ratio": ratio,
                    "top_p_mass": {number_key(p): (tops[p].value if p in tops else None) for p in self.top_p},
                }
            )
        return out
