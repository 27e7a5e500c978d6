"""Checkpoint loading with torch >= 2.6.  ``torch.load`` defaults to
``weights_only=True`` and fairseq checkpoints (argparse Namespace, omegaconf configs)
then fail to load in ``fairseq-generate`` / ``-interactive`` / ``-validate`` /
``hub_utils.from_pretrained``.  We give fairseq's ``checkpoint_utils`` module its own
``torch`` whose ``load`` defaults to ``weights_only=False``: only checkpoints that
fairseq itself is asked to load are affected, the rest of the process keeps torch's
safe default.  (Loading a checkpoint runs pickled code: load only files you trust,
exactly as with fairseq on torch < 2.6.)  ``fairseq.distributed.utils`` gets the same
``torch``: with several processes, rank 0 reads the checkpoint and broadcasts it, and
the other ranks unpickle it with ``torch.load`` (``_broadcast_object_slow``), which
failed with "Weights only load failed" when a multi-process run resumed.
"""

import functools
import inspect
import types

import torch

BEHAVIOUR_CHANGE = False


def _torch_load_supports_weights_only() -> bool:
    try:
        return "weights_only" in inspect.signature(torch.load).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


def _trusted_torch_namespace():
    """A stand-in for the ``torch`` module whose ``load`` trusts fairseq checkpoints."""
    proxy = types.ModuleType("torch")
    proxy.__dict__.update({k: v for k, v in torch.__dict__.items() if not k.startswith("__")})

    @functools.wraps(torch.load)
    def load(*args, **kwargs):
        kwargs.setdefault("weights_only", False)
        return torch.load(*args, **kwargs)

    proxy.load = load
    proxy.__getattr__ = lambda name: getattr(torch, name)  # lazily-loaded submodules
    return proxy


def install_checkpoint_loading_fix():
    from fairseq import checkpoint_utils
    from fairseq.distributed import utils as distributed_utils

    if not _torch_load_supports_weights_only():
        return
    if getattr(checkpoint_utils.torch, "_fsa_trusted", False):
        return
    proxy = _trusted_torch_namespace()
    proxy._fsa_trusted = True
    checkpoint_utils.torch = proxy
    distributed_utils.torch = proxy  # ranks > 0 unpickle the checkpoint rank 0 broadcasts


install = install_checkpoint_loading_fix
