"""What ReLUFormer's FFN analysis reads (Sec. 3, Table 1, Eq. 4, Figure 2).

* ``record_ffn(model, callback)``: for every encoder/decoder layer and forward, calls
  ``callback(name, residual=..., ffn_output=..., rows=...)`` with the FFN block's
  residual stream (its input before any pre-norm), the FFN output fc2(act(fc1(x))) before
  dropout and the residual add (including the LayerNorm of ``softmax_layernorm``), and the
  activation rows (memory scores after the activation).  Nothing is recorded outside the
  ``with`` block.
* ``variance_ratio``: Var(FFN output) / Var(residual) (Table 1).
* ``anisotropy``: mean pairwise cosine similarity of a set of vectors (Eq. 4), e.g. the
  FFN keys ``fc1.weight`` (one row per memory slot) or values ``fc2.weight.T``.
* ``top_p_mass``: mean share of a row's total score held by its top p% entries (Figure 2).
"""

from contextlib import contextmanager

import torch

from ..models.ffn import FFNActivation


def _ffn_layers(model):
    for name, module in model.named_modules():
        if isinstance(getattr(module, "activation_fn", None), FFNActivation) and hasattr(module, "fc2"):
            yield name, module


@contextmanager
def record_ffn(model, callback):
    handles, layers = [], list(_ffn_layers(model))
    if not layers:
        raise ValueError("no plugin FFN layers found (is this a sparse_transformer model?)")
    state = {}
    try:
        for name, layer in layers:
            residual_source = layer.final_layer_norm if layer.normalize_before else layer.fc1

            def keep_residual(mod, inputs, _name=name):
                state[_name] = {"residual": inputs[0].detach()}

            def keep_rows(mod, rows, _name=name):
                state[_name]["rows"] = rows

            def emit(mod, inputs, output, _name=name):
                entry = state.pop(_name)
                callback(_name, residual=entry["residual"], ffn_output=output.detach(),
                         rows=entry.get("rows"))

            handles.append(residual_source.register_forward_pre_hook(keep_residual))
            handles.append(layer.fc2.register_forward_hook(emit))
            layer.activation_fn.recorder = keep_rows
        yield [name for name, _ in layers]
    finally:
        for h in handles:
            h.remove()
        for _, layer in layers:
            layer.activation_fn.recorder = None


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
