"""Feed-forward variants (ReLUFormer, Sec. 3: the FFN as a key-value memory).

``--ffn-type``:
* ``standard``           fairseq's FFN: fc2(act(fc1(x))) with ``--activation-fn`` (relu default)
* ``softmax``            key-value memory, Eq. 2: H = Softmax(X K^T) V, with K = fc1, V = fc2
* ``softmax_layernorm``  H = LN(Softmax(X K^T) V): LayerNorm on the FFN output (Table 1)

The fc1/fc2 biases of fairseq's FFN are kept in all variants (the paper's Eq. 2 has none;
with a bias, K^T x + b is still a score per memory slot).  The softmax is computed in
float32 over the FFN's hidden dimension (the memory slots).

Analysis: inside a ``collect("ffn")`` scope (:mod:`fairseq_sparse_attn.attention.intermediates`,
the one collector protocol of every analysis) each FFN block of a plugin layer hands
``(layer, FFNIntermediates)``: its residual stream, output and activation rows
(:func:`deliver_ffn_calls`); outside any scope nothing is kept.  The keys and values are the
weights ``fc1.weight`` (one row per slot) and ``fc2.weight`` (one column per slot).
"""

import functools
from typing import Dict

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.modules import LayerNorm

from ..attention.intermediates import FFNIntermediates, deliver, wanted


class FFNActivation(nn.Module):
    def __init__(self, ffn_type: str, activation_fn: str):
        """``ffn_type`` one of ``FFN_TYPES`` (checked by ``resolve_model``)."""
        super().__init__()
        self.ffn_type = ffn_type
        self.fn = None if ffn_type != "standard" else utils.get_activation_fn(activation_fn)

    def forward(self, x):
        if self.fn is None:
            return torch.softmax(x.float(), dim=-1).type_as(x)
        return self.fn(x)

    def extra_repr(self):
        return self.ffn_type


class LinearLayerNorm(nn.Linear):
    """fc2 followed by a LayerNorm (``softmax_layernorm``); keeps ``fc2.weight``/``fc2.bias``."""

    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features)
        self.output_layer_norm = LayerNorm(out_features)

    def forward(self, x):
        return self.output_layer_norm(super().forward(x))


# --------------------------------------------------------------------------- collect("ffn")
#: the parts of the FFN call running now in a layer, by id(layer): only inside a
#: collect("ffn") scope, from the block's first hook to its last (fc2)
_CALLS: Dict[int, dict] = {}


def deliver_ffn_calls_when_wanted(layer) -> None:
    """Called at the start of each forward of a plugin layer: the first time the layer
    runs inside a ``collect("ffn")`` scope, :func:`deliver_ffn_calls` hooks it; until then
    it has no hooks.  (A module with a hook takes ``nn.Module``'s slow call path: three
    hooked calls per layer, 36 per base-size step, cost a training step about 1.5% of its
    host time, which a launch-bound GPU step pays: docs/performance.md, "Host time of a
    training step".)"""
    if "ffn" in wanted() and not layer.__dict__.get("_ffn_calls_delivered", False):
        deliver_ffn_calls(layer)


def deliver_ffn_calls(layer) -> None:
    """Make ``layer`` (a plugin encoder or decoder layer, built with an
    :class:`FFNActivation`) hand each FFN call to the open ``collect("ffn")`` scopes as
    ``(layer, FFNIntermediates)``.  Three hooks that do nothing outside such a scope: the
    residual stream at the block input (``final_layer_norm``'s input with pre-norm, else
    ``fc1``'s), the activation rows, and ``fc2``'s output, where the record is delivered.
    Installed once per layer (a deep copy of a hooked layer is hooked: the flag and the
    hooks are copied with it)."""
    layer._ffn_calls_delivered = True
    source = layer.final_layer_norm if layer.normalize_before else layer.fc1
    # (partials of module functions: a deepcopy of the layer hooks the copy)
    source.register_forward_pre_hook(functools.partial(_keep_residual, layer))
    layer.activation_fn.register_forward_hook(functools.partial(_keep_rows, layer))
    layer.fc2.register_forward_hook(functools.partial(_deliver, layer))


def _keep_residual(layer, module, inputs) -> None:
    if "ffn" in wanted():
        _CALLS[id(layer)] = {"residual": inputs[0].detach()}


def _keep_rows(layer, module, inputs, rows) -> None:
    call = _CALLS.get(id(layer))
    if call is not None:
        call["rows"] = rows.detach()


def _deliver(layer, module, inputs, output) -> None:
    call = _CALLS.pop(id(layer), None)
    if call is not None:
        deliver(layer, FFNIntermediates(call["residual"], output.detach(), call.get("rows")))
