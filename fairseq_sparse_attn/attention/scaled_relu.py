"""ReLUFormer attention (Shen et al. 2023, Eq. 6): ReLU weights divided by the variance
reduction factor gamma * sqrt(n_i / 2), where n_i is the number of keys query i may see.

    s_ij = ReLU(q_i . k_j / sqrt(d_h)) / (gamma * sqrt(n_i / 2))

n_i is counted from the visibility mask the attention core hands every activation, so it
is, by construction, the same in teacher-forced training and in incremental decoding:

* encoder self-attention and cross-attention: the non-padding keys of the sentence;
* causal decoder self-attention: the positions up to and including i, minus padding
  (teacher forcing: the causal mask hides j > i; incremental step t: the cache holds
  exactly t keys).

Flags: ``--relu-scale-gamma`` (gamma, default 1.0), ``--relu-no-length-scale`` (the
"w/o scale factor" ablation of Table 5: plain ReLU weights, still collected for the
regularization loss).  The regularization loss itself is computed by
:mod:`fairseq_sparse_attn.criterions.relu_regularized` from the row sums
(:func:`row_sums`) that :func:`~.core.attend` returns in its intermediates when asked
(``collect("row_sums")``, see :mod:`.intermediates`; nothing is computed otherwise).
"""

from typing import Optional

import torch

from .activations import ReLU, register_activation
from .config import ActivationConfig
from .masks import visible_key_counts

__all__ = ["ScaledReLU", "row_sums", "visible_key_counts"]


def row_sums(weights):
    """(sum_j s_ij, sum_j s_ij log s_ij) over the last dim, 0 log 0 = 0 with a finite
    gradient at 0 (xlogy's is -inf, which times the zero ReLU gradient of an inactive key
    would give NaN)."""
    wsum = weights.sum(dim=-1)
    wlogw = (weights * torch.log(weights.clamp(min=1e-30))).sum(dim=-1)
    return wsum, wlogw


@register_activation("relu_scaled")
class ScaledReLU(ReLU):
    """ReLA's ``relu`` (masking included) times the per-row factor."""

    row_scaled = True
    #: attend() returns its row sums when a caller collects "row_sums"
    reports_row_sums = True

    def __init__(self, num_heads, config: ActivationConfig = ActivationConfig()):
        super().__init__(num_heads, config)
        self.gamma = float(config.relu_scale_gamma)
        self.length_scale = not bool(config.relu_no_length_scale)
        if self.gamma <= 0:
            raise ValueError(f"--relu-scale-gamma must be > 0, got {self.gamma}")

    def row_scale(self, n):
        """1 / (gamma * sqrt(n_i / 2)) per row (1 for the no-scale ablation)."""
        if not self.length_scale:
            return torch.ones_like(n)
        return 1.0 / (self.gamma * torch.sqrt(n.clamp(min=1) / 2))

    def row_scale_key(self):
        return ("relu_scaled", self.gamma) if self.length_scale else None

    def forward(self, scores, mask: Optional[torch.Tensor]):
        weights = self.rectified_weights(scores, mask)
        n = visible_key_counts(scores, mask)
        if self.length_scale:
            weights = weights * self.row_scale(n).to(weights.dtype)  # n and the factor in float32
        return weights

    def extra_repr(self):
        return f"relu_scaled, gamma={self.gamma}, length_scale={self.length_scale}"
