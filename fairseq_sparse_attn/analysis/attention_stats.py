"""Sparsity rate and null rate of attention (ReLA, Sec. 5.2 and Fig. 3/6).

* sparsity rate: fraction of attention weights exactly 0, among *valid* positions only
  (real query x visible key: padding and causally masked keys, and padding queries, are
  excluded);
* null rate: fraction of valid queries whose weights over the visible keys are all 0.

Counts are kept per (kind, layer, head) and aggregated on request.
"""

from collections import defaultdict
from typing import Dict, Optional

import torch

from .recording import AttentionSite, record_attention


class SparsityStats:
    def __init__(self):
        self._counts: Dict[tuple, torch.Tensor] = {}
        self._heads: Dict[tuple, int] = {}
        self.query_padding: Dict[str, Optional[torch.Tensor]] = {}

    def set_query_padding(self, source_padding, target_padding):
        """Boolean (bsz, len) masks of the current batch, True = padding query."""
        self.query_padding = {
            "encoder_self": source_padding,
            "decoder_self": target_padding,
            "cross": target_padding,
        }

    def __call__(self, site: AttentionSite, weights, mask=None, **_):
        bsz, heads, tgt, src = weights.shape
        visible = torch.ones(bsz, 1, tgt, src, dtype=torch.bool, device=weights.device)
        if mask is not None:
            visible = visible & ~mask
        qpad = self.query_padding.get(site.kind)
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
        return {
            key: {name: sum(vals) / len(vals) for name, vals in d.items()}
            for key, d in self.per_head().items()
        }

    def per_kind(self):
        """Average over layers (of the per-layer head averages)."""
        grouped = defaultdict(list)
        for (kind, _), d in self.per_layer().items():
            grouped[kind].append(d)
        return {
            kind: {name: sum(d[name] for d in ds) / len(ds) for name in ds[0]}
            for kind, ds in grouped.items()
        }


@torch.no_grad()
def collect_sparsity(model, batches, pad_idx: int, max_sentences: Optional[int] = None):
    """Teacher-forced passes over fairseq ``batches`` (samples with ``net_input``)."""
    stats = SparsityStats()
    model.eval()
    seen = 0
    with record_attention(model, stats):
        for sample in batches:
            net_input = sample["net_input"]
            stats.set_query_padding(net_input["src_tokens"].eq(pad_idx),
                                    net_input["prev_output_tokens"].eq(pad_idx))
            model(**net_input)
            seen += net_input["src_tokens"].size(0)
            if max_sentences is not None and seen >= max_sentences:
                break
    return stats
