"""Activation checkpointing of a layer that also hands attention intermediates on.

fairseq's ``checkpoint_wrapper`` runs a layer's forward without autograd and re-runs it
in backward.  Two things would go wrong for the plugin with it alone:

* a loss built from intermediates (the ReLUFormer row sums) collected during the first
  run has no graph: its gradient would be lost;
* the re-run in backward would hand its intermediates on again (double counting).

:func:`checkpoint_layer` wraps the layer like fairseq's (same module, same state-dict
keys: it patches ``forward``) and, while a collector is open
(:func:`~..attention.intermediates.collect`), runs the layer inside an isolated scope,
returns the differentiable intermediates as extra outputs of the checkpointed function,
and hands the records of the *first* run, with those outputs in place, to the open
collectors.  The re-run in backward feeds an isolated scope nobody reads.  With no
collector open it is exactly fairseq's wrapper.
"""

import functools

import torch
from fairseq.modules.checkpoint_activations import _checkpointed_forward

from ..attention.intermediates import active_collectors, deliver, isolated, wanted


def checkpoint_layer(layer: torch.nn.Module, offload_to_cpu: bool = False) -> torch.nn.Module:
    assert not hasattr(layer, "precheckpoint_forward"), "checkpoint function has already been applied?"
    layer.precheckpoint_forward = layer.forward
    layer.forward = functools.partial(_forward, layer.precheckpoint_forward, offload_to_cpu)
    return layer


def _forward(original, offload_to_cpu, *args, **kwargs):
    if not active_collectors():
        return _checkpointed_forward(original, offload_to_cpu, *args, **kwargs)
    wants = wanted()
    first = {}

    def run(*a, **kw):
        with isolated(wants) as records:
            out = original(*a, **kw)
        if "records" not in first:  # the forward run (the backward re-run is not read)
            first["records"] = list(records)
            first["tuple"] = isinstance(out, tuple)
        outs = out if isinstance(out, tuple) else (out,)
        first.setdefault("n_out", len(outs))
        extra = [t for _, inter in records for t in inter.differentiable()]
        return tuple(outs) + tuple(extra)

    result = _checkpointed_forward(run, offload_to_cpu, *args, **kwargs)
    result = result if isinstance(result, tuple) else (result,)
    n_out = first["n_out"]
    outs, extra = result[:n_out], list(result[n_out:])
    for module, inter in first["records"]:
        count = len(inter.differentiable())
        rebuilt = inter.with_differentiable(extra[:count])
        extra = extra[count:]
        deliver(module, rebuilt)
    return outs if first["tuple"] else outs[0]
