"""Per-row attention statistics: entropy, head diversity (JS), top-p% score sums.

Same conventions as :mod:`.attention_stats` (what the recorder hands over):

* ``weights``: ``(bsz, heads, tgt, src)``;
* ``mask``: bool, broadcastable to ``weights``, True = key *not* visible (padding,
  causal), or ``None``;
* ``query_padding``: bool ``(bsz, tgt)``, True = padding query, or ``None``.

Statistics are taken over *valid* positions only: real queries x visible keys.  Each
function returns a :class:`RowAverage` (sum and number of rows), so that batches add up
to exact corpus averages; ``.value`` is the average (``nan`` over zero rows).  Logs are
natural.

* :func:`mean_entropy` — ReLUFormer (Shen et al. 2023) §4.2 / Table 3:
  ``H(ŝ) = −Σ_j ŝ_j log ŝ_j`` with ``ŝ_j = s_j / Σ_k s_k`` over the visible keys.
* :func:`top_p_score_sum` — ReLUFormer §3.4 / Figs. 2 and 4: share of the row total held
  by the ``⌈p·n⌉`` largest of the ``n`` visible weights.
* :func:`head_js_divergence`, :func:`relu_head_js_divergence` — ReLA (Zhang et al. 2021)
  §5.2 / Fig. 5 / Table 6, after Correia et al. (2019):
  ``JS = H(1/H Σ_h p_h) − 1/H Σ_h H(p_h)`` across the heads of one layer, per query;
  ReLU weights are re-normalized by ``softmax(α^τ)`` (ReLA's "α^τ before applying
  softmax", Table 6) or, on request, ``softmax(α/τ)``.

Null rows (all visible weights exactly 0, ReLA's null attention) have no distribution
ŝ: entropy and top-p exclude them (they are counted by ``null_rate`` in
:mod:`.attention_stats`).  The JS divergence keeps them, as ReLA does, as a one-hot on a
dummy "null" slot (entropy 0).
"""

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch

# ReLA Table 6: the re-normalization temperatures it reports.
RELA_TEMPERATURES = (1.0, 0.5, 0.25, 0.1)
# renormalize(): "power" = softmax(alpha ** tau) (ReLA's wording), "divide" = softmax(alpha / tau)
RENORMALIZATION_MODES = ("power", "divide")


@dataclass(frozen=True)
class RowAverage:
    """``total`` over ``rows`` rows; add two to pool batches."""

    total: float = 0.0
    rows: int = 0

    def __add__(self, other: "RowAverage") -> "RowAverage":
        return RowAverage(self.total + other.total, self.rows + other.rows)

    @property
    def value(self) -> float:
        return self.total / self.rows if self.rows else math.nan


# ----------------------------------------------------------------------- masks


def _check_weights(weights: torch.Tensor) -> None:
    if weights.dim() != 4:
        raise ValueError(f"attention weights must be (bsz, heads, tgt, src), got shape {tuple(weights.shape)}")
    if torch.isnan(weights).any():
        raise ValueError("attention weights contain NaN")


def visible_keys(weights: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Bool, broadcastable to ``weights``: True where the key is visible to the query."""
    if mask is None:
        return torch.ones((1,) * weights.dim(), dtype=torch.bool, device=weights.device)
    return ~mask.bool()


def valid_queries(weights: torch.Tensor, query_padding: Optional[torch.Tensor]) -> torch.Tensor:
    """Bool ``(bsz, heads, tgt)``: True for real (non-padding) queries."""
    bsz, heads, tgt, _ = weights.shape
    if query_padding is None:
        return torch.ones(bsz, heads, tgt, dtype=torch.bool, device=weights.device)
    if tuple(query_padding.shape) != (bsz, tgt):
        raise ValueError(f"query_padding must be (bsz, tgt) = {(bsz, tgt)}, got {tuple(query_padding.shape)}")
    return (~query_padding.bool()).view(bsz, 1, tgt).expand(bsz, heads, tgt)


def _visible_weights(
    weights: torch.Tensor, mask: Optional[torch.Tensor], query_padding: Optional[torch.Tensor], non_negative: bool
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float64 weights with invisible keys zeroed, the visibility mask, valid queries."""
    _check_weights(weights)
    visible = visible_keys(weights, mask).expand_as(weights)
    valid = valid_queries(weights, query_padding)
    w = torch.where(visible, weights.double(), torch.zeros((), dtype=torch.float64))
    if non_negative and (w[valid] < 0).any():
        raise ValueError(
            f"row normalization needs non-negative weights (ReLU, softmax, ...); the minimum "
            f"visible weight of a valid query is {w[valid].min().item()}"
        )
    return w, visible, valid


# --------------------------------------------------------------------- entropy


def row_entropy(
    weights: torch.Tensor, mask: Optional[torch.Tensor] = None, query_padding: Optional[torch.Tensor] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per row ``H(ŝ) = −Σ_j ŝ_j log ŝ_j``, ``ŝ = s / Σ s`` over visible keys, ``0 log 0 = 0``.

    Returns ``(entropy, counted)``, both ``(bsz, heads, tgt)``; ``counted`` is True for
    valid, non-null rows (entropy is 0 elsewhere and means nothing there).
    """
    w, _, valid = _visible_weights(weights, mask, query_padding, non_negative=True)
    total = w.sum(dim=-1)
    counted = valid & (total > 0)
    s_hat = w / torch.where(counted, total, torch.ones_like(total)).unsqueeze(-1)
    entropy = -torch.xlogy(s_hat, s_hat).sum(dim=-1)
    return torch.where(counted, entropy, torch.zeros_like(entropy)), counted


def mean_entropy(
    weights: torch.Tensor, mask: Optional[torch.Tensor] = None, query_padding: Optional[torch.Tensor] = None
) -> RowAverage:
    """ReLUFormer Table 3: average ``H(ŝ)`` over valid, non-null rows of all heads."""
    entropy, counted = row_entropy(weights, mask, query_padding)
    return RowAverage(entropy[counted].sum().item(), int(counted.sum()))


# ----------------------------------------------------------------------- top-p


def top_count(p: float, n: torch.Tensor) -> torch.Tensor:
    """``⌈p·n⌉`` per row (p·n is rounded to 9 decimals first, so that 0.07·100 gives 7,
    not the 8 a float ceil would)."""
    if not 0 < p <= 1:
        raise ValueError(f"top-p fraction must be in (0, 1] (top-0.2% is p=0.002), got {p}")
    return torch.ceil(torch.round(p * n.double(), decimals=9)).long()


def row_top_p(
    weights: torch.Tensor, p: float, mask: Optional[torch.Tensor] = None, query_padding: Optional[torch.Tensor] = None
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per row: (sum of the ``⌈p·n⌉`` largest visible weights) / (sum of all visible
    weights), ``n`` = number of visible keys of that row.

    Returns ``(share, counted)``, both ``(bsz, heads, tgt)``; ``counted`` is True for valid,
    non-null rows.
    """
    w, visible, valid = _visible_weights(weights, mask, query_padding, non_negative=True)
    total = w.sum(dim=-1)
    counted = valid & (total > 0)
    k = top_count(p, visible.sum(dim=-1))
    ordered = torch.where(visible, w, torch.full_like(w, -1.0)).sort(dim=-1, descending=True).values
    cumulative = ordered.clamp(min=0).cumsum(dim=-1)
    top = cumulative.gather(-1, (k - 1).clamp(min=0).unsqueeze(-1)).squeeze(-1)
    share = top / torch.where(counted, total, torch.ones_like(total))
    return torch.where(counted, share, torch.zeros_like(share)), counted


def top_p_score_sum(
    weights: torch.Tensor, p: float, mask: Optional[torch.Tensor] = None, query_padding: Optional[torch.Tensor] = None
) -> RowAverage:
    """ReLUFormer Figs. 2/4: the top-p% share of :func:`row_top_p`, averaged over valid,
    non-null rows of all heads.  ``p`` is a fraction: top-1.5% is ``p=0.015``."""
    share, counted = row_top_p(weights, p, mask, query_padding)
    return RowAverage(share[counted].sum().item(), int(counted.sum()))


# ------------------------------------------------------------------ head diversity


def _entropy(p: torch.Tensor) -> torch.Tensor:
    return -torch.xlogy(p, p).sum(dim=-1)


def _js(probs: torch.Tensor, valid: torch.Tensor) -> RowAverage:
    """Generalized JS over dim 1 (heads) of ``(bsz, heads, tgt, K)`` distributions."""
    mixture = probs.mean(dim=1)  # (bsz, tgt, K)
    js = _entropy(mixture) - _entropy(probs).mean(dim=1)  # (bsz, tgt)
    rows = valid[:, 0]  # the same for every head
    return RowAverage(js[rows].sum().item(), int(rows.sum()))


def head_js_divergence(
    probs: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
    query_padding: Optional[torch.Tensor] = None,
    atol: float = 1e-4,
) -> RowAverage:
    """Head diversity of attention that already is a distribution per row (softmax,
    sparsemax, entmax): for each valid query,

        JS = H( (1/H) Σ_h p_h ) − (1/H) Σ_h H(p_h)       (Correia et al. 2019, ReLA Fig. 5)

    over the visible keys, averaged over valid queries.  No re-normalization: each valid
    row must be non-negative and sum to 1 over its visible keys (within ``atol``),
    otherwise use :func:`relu_head_js_divergence`.
    """
    p, _, valid = _visible_weights(probs, mask, query_padding, non_negative=True)
    sums = p.sum(dim=-1)
    bad = valid & ((sums - 1).abs() > atol)
    if bad.any():
        b, h, t = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"head_js_divergence needs rows that are distributions over the visible keys; "
            f"row (batch {b}, head {h}, query {t}) sums to {sums[b, h, t].item():.6g}. "
            f"For ReLU weights use relu_head_js_divergence (softmax re-normalization)"
        )
    return _js(p, valid)


def renormalize(
    weights: torch.Tensor, temperature: float, mask: Optional[torch.Tensor] = None, mode: str = "power"
) -> torch.Tensor:
    """ReLA §5.2 re-normalization of non-probabilistic (ReLU) weights, with a null slot.

    Returns ``(bsz, heads, tgt, src + 1)``; the last slot is the dummy "null" position.

    * a row with some non-zero visible weight: ``p_j = exp(s_j) / Σ_{k visible} exp(s_k)``
      for visible j, 0 for invisible keys and for the null slot, where the scores are

      - ``mode="power"`` (default, ReLA's literal wording "α^τ (in Eq. 3) before applying
        softmax"): ``s_j = α_j^τ``.  Needs ``α ≥ 0`` on visible keys (ReLU outputs are);
        a negative visible weight is an error.  A key with ``α_j = 0`` keeps ``s_j =
        0^τ = 0`` and so still receives mass ``e^0 / Z``, as any softmax would;
      - ``mode="divide"`` (the usual softmax temperature): ``s_j = α_j / τ``, any sign.

    * a null row (every visible α exactly 0): all mass on the null slot (entropy 0).

    What τ does.  ``power``: ``log α^τ = τ·log α``, so τ < 1 pulls every positive weight
    towards 1 and shrinks the ratios between positive weights (τ → 0: all positive keys
    get the same score 1) — the smoothing ReLA describes ("smaller temperatures will
    enforce smoothness").  It also lifts weights below 1 away from the zero keys (0.01 vs
    0 becomes 0.1 vs 0 at τ = 0.5), so on rows whose weights are all small it can
    *sharpen* the contrast between the zero and the positive keys.  ``divide``: τ < 1
    scales every score up and sharpens; ``softmax(τ·α)`` (the other smoothing reading) is
    ``mode="divide"`` with ``temperature = 1/τ``.  See docs/analysis.md.
    """
    if mode not in RENORMALIZATION_MODES:
        raise ValueError(
            f"re-normalization mode must be one of {RENORMALIZATION_MODES} "
            f"(softmax(alpha**tau) or softmax(alpha/tau)), got {mode!r}"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    _check_weights(weights)
    visible = visible_keys(weights, mask).expand_as(weights)
    w = weights.double()
    if mode == "power":
        negative = visible & (w < 0)
        if negative.any():
            b, h, t, s = (int(i) for i in negative.nonzero()[0])
            raise ValueError(
                f"mode='power' computes alpha**tau and needs non-negative weights (ReLU "
                f"outputs) on visible keys; weight (batch {b}, head {h}, query {t}, key {s}) "
                f"is {w[b, h, t, s].item():.6g}. Use mode='divide' for signed scores"
            )
        scores = w.pow(temperature)  # 0 ** tau = 0 for tau > 0
    else:
        scores = w / temperature
    null = ~((w != 0) & visible).any(dim=-1, keepdim=True)
    scores = scores.masked_fill(~visible, -math.inf)
    scores = scores.masked_fill(null, 0.0)  # keep softmax finite on rows replaced below
    p = torch.softmax(scores, dim=-1).masked_fill(null, 0.0)
    return torch.cat([p, null.double()], dim=-1)


def relu_head_js_divergence(
    weights: torch.Tensor,
    temperature: float = 1.0,
    mask: Optional[torch.Tensor] = None,
    query_padding: Optional[torch.Tensor] = None,
    mode: str = "power",
) -> RowAverage:
    """ReLA §5.2 / Table 6 head diversity for ReLU attention: the JS of
    :func:`head_js_divergence` on the distributions of :func:`renormalize`
    (``softmax(α^τ)`` over visible keys by default, ``softmax(α/τ)`` with
    ``mode="divide"``; null rows one-hot on a dummy slot), averaged over valid queries —
    queries where every head is null count, with JS 0."""
    p = renormalize(weights, temperature, mask, mode)
    return _js(p, valid_queries(weights, query_padding))
