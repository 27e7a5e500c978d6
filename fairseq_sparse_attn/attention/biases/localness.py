"""Localness (Yang et al. 2018): a learned Gaussian bias.  ``--encoder-localness``."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import BiasProviderConfig
from .provider import BiasProvider, register_bias

# Localness: floor of sigma^2 (in positions^2), so that a window predicted as ~0 gives a
# very sharp but finite Gaussian instead of 0/0.
LOCALNESS_MIN_VARIANCE = 1e-4


@register_bias("localness")
class GaussianLocalness(BiasProvider):
    """Localness (Yang et al. 2018, "Modeling Localness for Self-Attention Networks"):

        [p_i; z_i] = [U_p; U_d]ᵀ tanh(W_p q_i)        q_i: the head's query (unscaled)
        P_i = I · sigmoid(p_i),  D_i = I · sigmoid(z_i),  σ_i = D_i / 2
        G_ij = −(j − P_i)² / (2 σ_i²)

    I = the sentence length (tokens incl. EOS), j = the key's position in the sentence
    (0-based, padding excluded).  Each head predicts its own center and window from its
    own query; W_p (d_h × d_h), U_p, U_d (d_h) are shared by the heads of the layer.
    σ² is floored at ``LOCALNESS_MIN_VARIANCE``."""

    def __init__(self, num_heads, head_dim, config: BiasProviderConfig = BiasProviderConfig()):
        super().__init__(num_heads, head_dim, config)
        self.proj = nn.Linear(head_dim, head_dim, bias=False)
        self.center = nn.Parameter(torch.empty(head_dim))
        self.window = nn.Parameter(torch.empty(head_dim))
        nn.init.xavier_uniform_(self.proj.weight)
        nn.init.normal_(self.center, std=head_dim**-0.5)
        nn.init.normal_(self.window, std=head_dim**-0.5)

    def center_and_sigma(self, q, valid):
        """P_i and σ_i, each (bsz, heads, T), from the scaled query q; in float32 whatever
        the parameters' dtype (an fp16/bf16 model: ``--fp16``, ``--bf16``)."""
        hidden = torch.tanh(F.linear(q.float() * math.sqrt(self.head_dim), self.proj.weight.float()))
        length = valid.sum(dim=1).float().view(-1, 1, 1)
        center = length * torch.sigmoid(hidden @ self.center.float())
        sigma = length * torch.sigmoid(hidden @ self.window.float()) / 2
        return center, sigma

    def forward(self, q, ctx):
        center, sigma = self.center_and_sigma(q, ctx.valid)
        position = (ctx.valid.long().cumsum(dim=1) - 1).float()  # j within the sentence
        distance = position.view(position.size(0), 1, 1, -1) - center.unsqueeze(-1)
        variance = (sigma**2).clamp(min=LOCALNESS_MIN_VARIANCE).unsqueeze(-1)
        return -(distance**2) / (2 * variance), None
