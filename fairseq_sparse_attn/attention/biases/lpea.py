"""LPEA (syntax-enhanced attention, RHE paper Eq. 6-8): a learned local-phrase bias.
``--encoder-syntax-attention lpea``, ``--lpea-max-distance K``."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ...syntax import NO_PHRASE
from ..config import LocalPhraseConfig
from .provider import BiasProvider, register_bias


def relative_label_bias(rel_embed: Tensor, proj: nn.Linear, out: Tensor) -> Tensor:
    """Eq. 8 once per label: −|tanh(W_P w_r + b_P) · U_P| for r = −k..k, shape (2k+1,).
    P_ij is this vector looked up at clip(RP_ij); computing it per label instead of per
    (i, j) pair gives the same numbers at (2k+1)/T² of the cost.  Computed in float32
    whatever the parameters' dtype (an fp16/bf16 model: ``--fp16``, ``--bf16``)."""
    hidden = F.linear(rel_embed.float(), proj.weight.float(), proj.bias.float())
    return -(torch.tanh(hidden) @ out.float()).abs()


@register_bias("lpea")
class LocalPhraseBias(BiasProvider):
    """LPEA (Eq. 6-8): learned bias from the relative phrasal position RP_ij, clipped to
    [−k, k]; keys outside the local phrase of the query (RP_ij = NO_PHRASE) are hidden.

    Parameters (one set per layer, shared by its heads): ``rel_embed`` = w_{−k..k}
    (2k+1, d_h), ``proj`` = W_P (d_h × d_h) and b_P, ``out`` = U_P (d_h)."""

    needs = ("src_rp",)

    def __init__(self, num_heads, head_dim, config: LocalPhraseConfig = LocalPhraseConfig()):
        super().__init__(num_heads, head_dim, config)
        k = int(config.max_distance)  # >= 0 (LocalPhraseConfig)
        self.max_distance = k
        self.rel_embed = nn.Parameter(torch.empty(2 * k + 1, head_dim))
        self.proj = nn.Linear(head_dim, head_dim)
        self.out = nn.Parameter(torch.empty(head_dim))
        nn.init.xavier_uniform_(self.rel_embed)
        nn.init.xavier_uniform_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)
        nn.init.normal_(self.out, std=head_dim**-0.5)

    def forward(self, q, ctx):
        rp = ctx.src_rp.long()
        outside = rp == NO_PHRASE
        k = self.max_distance
        labels = relative_label_bias(self.rel_embed, self.proj, self.out)
        bias = labels[rp.clamp(-k, k) + k]  # NO_PHRASE entries read label -k: hidden anyway
        return bias.unsqueeze(1), ctx.real_query_rows(outside).unsqueeze(1)

    def extra_repr(self):
        return f"lpea, k={self.max_distance}"
