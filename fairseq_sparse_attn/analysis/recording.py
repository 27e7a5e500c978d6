"""Recording what the attention modules compute, only while an analysis asks for it.

    with record_attention(model, callback):
        model(**sample["net_input"])

calls ``callback(site, weights=..., values=..., mask=...)`` once per attention module and
forward, where ``site`` says which module it is (kind, layer).  Outside the ``with``
block the modules carry no recorder and pay nothing.  Attaching a recorder makes a stock
softmax module run the plugin pipeline, which gives the same outputs (parity-tested).
"""

import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, List

from ..attention import SparseMultiheadAttention

_LAYER = re.compile(r"layers\.(\d+)\.")


@dataclass(frozen=True)
class AttentionSite:
    kind: str  # encoder_self | decoder_self | cross
    layer: int  # 0-based layer index
    name: str  # module path in the model
    num_heads: int


def attention_sites(model) -> List[AttentionSite]:
    sites = []
    for name, module in model.named_modules():
        if isinstance(module, SparseMultiheadAttention):
            match = _LAYER.search(name + ".")
            layer = int(match.group(1)) if match else 0
            sites.append(AttentionSite(module.kind, layer, name, module.num_heads))
    return sites


@contextmanager
def record_attention(model, callback: Callable):
    modules = dict(model.named_modules())
    sites = attention_sites(model)
    if not sites:
        raise ValueError(
            "the model has no fairseq_sparse_attn attention modules to record "
            f"({type(model).__name__}); load it with the plugin's sparse_transformer"
        )
    try:
        for site in sites:
            modules[site.name].recorder = (
                lambda module, _site=site, **kw: callback(_site, **kw)
            )
        yield sites
    finally:
        for site in sites:
            modules[site.name].recorder = None
