"""DEA (syntax-enhanced attention, RHE paper Eq. 4-5): a dependency mask.  ``--encoder-syntax-attention dea``."""

import torch

from .provider import BiasProvider, register_bias


@register_bias("dea")
class DependencyMask(BiasProvider):
    """DEA (Eq. 4-5): keys that are neither dependency-related to the query nor the query
    itself are hidden.  No parameters."""

    needs = ("src_dep",)

    def forward(self, q, ctx):
        return None, ctx.real_query_rows(~ctx.src_dep.to(torch.bool)).unsqueeze(1)
