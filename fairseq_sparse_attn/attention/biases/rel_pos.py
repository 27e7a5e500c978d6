"""Rel_Pos (Shaw et al. 2018): relative position representations.  ``--encoder-rel-pos-k K``,
``--encoder-rel-pos-values``."""

import torch
import torch.nn as nn
from torch import Tensor

from ..config import RelativePositionConfig
from .provider import BiasProvider, register_bias


def relative_positions(length: int, k: int, device) -> Tensor:
    """(T, T) long: clip(j − i, −k, k) + k, the row of w^K / w^V for query i and key j."""
    pos = torch.arange(length, device=device)
    return (pos.view(1, -1) - pos.view(-1, 1)).clamp(-k, k) + k


@register_bias("rel_pos")
class RelativePosition(BiasProvider):
    """Rel_Pos (Shaw et al. 2018, Eq. 3-4) with clipping distance k:

        e_ij = q_i · (k_j + a^K_ij) / √d_h,   z_i = Σ_j α_ij (v_j + a^V_ij),
        a^K_ij = w^K_clip(j−i,k),  a^V_ij = w^V_clip(j−i,k)

    w^K (and w^V with ``--encoder-rel-pos-values``) are (2k+1, d_h), shared by the heads
    of the layer, as in the paper.  Token positions: left padding shifts i and j alike."""

    def __init__(self, num_heads, head_dim, config: RelativePositionConfig = RelativePositionConfig()):
        super().__init__(num_heads, head_dim, config)
        k = int(config.max_distance)  # >= 1 (RelativePositionConfig)
        self.max_distance = k
        self.key_embed = nn.Parameter(torch.empty(2 * k + 1, head_dim))
        nn.init.xavier_uniform_(self.key_embed)
        self.value_embed = None
        if config.values:
            self.value_embed = nn.Parameter(torch.empty(2 * k + 1, head_dim))
            nn.init.xavier_uniform_(self.value_embed)

    def forward(self, q, ctx):
        bsz, heads, length, _ = q.shape
        idx = relative_positions(length, self.max_distance, q.device)
        per_label = q.float() @ self.key_embed.float().t()  # (bsz, heads, T, 2k+1)
        bias = per_label.gather(-1, idx.expand(bsz, heads, length, length))
        return bias, None

    @property
    def has_value_term(self) -> bool:
        return self.value_embed is not None

    def value_term(self, probs, ctx):
        bsz, heads, length, _ = probs.shape
        idx = relative_positions(length, self.max_distance, probs.device)
        per_label = probs.new_zeros(bsz, heads, length, 2 * self.max_distance + 1)
        per_label.scatter_add_(-1, idx.expand(bsz, heads, length, length), probs)
        assert self.value_embed is not None  # (called only when has_value_term)
        return per_label @ self.value_embed.to(probs.dtype)

    def extra_repr(self):
        return f"rel_pos, k={self.max_distance}, values={self.value_embed is not None}"
