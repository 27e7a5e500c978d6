"""fairseq / torch version shims, in one place.  Installed when the plugin is imported
(``--user-dir fairseq_sparse_attn`` or ``import fairseq_sparse_attn``).

1. Checkpoint loading with torch >= 2.6.  ``torch.load`` defaults to
   ``weights_only=True`` and fairseq checkpoints (argparse Namespace, omegaconf configs)
   then fail to load in ``fairseq-generate`` / ``-interactive`` / ``-validate`` /
   ``hub_utils.from_pretrained``.  We give fairseq's ``checkpoint_utils`` module its own
   ``torch`` whose ``load`` defaults to ``weights_only=False``: only checkpoints that
   fairseq itself is asked to load are affected, the rest of the process keeps torch's
   safe default.  (Loading a checkpoint runs pickled code: load only files you trust,
   exactly as with fairseq on torch < 2.6.)

2. Divergence guard.  A run whose gradients or validation loss become NaN/inf stops
   with a message that says so, and no checkpoint is written from a non-finite model
   (stock fairseq would save ``checkpoint_best.pt`` at the first validation even when
   its loss is NaN).

3. A translation data directory that does not exist (or is not a fairseq-preprocess
   output) fails with a message naming it, before fairseq's own deeper error.
"""

import functools
import inspect
import logging
import math
import types

import torch

logger = logging.getLogger(__name__)

_INSTALLED = False


class TrainingDivergedError(FloatingPointError):
    """Raised when training produces NaN/inf; nothing is saved from that state."""


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

    if not _torch_load_supports_weights_only():
        return
    if getattr(checkpoint_utils.torch, "_fsa_trusted", False):
        return
    proxy = _trusted_torch_namespace()
    proxy._fsa_trusted = True
    checkpoint_utils.torch = proxy


def _all_finite(model) -> bool:
    return all(torch.isfinite(p).all().item() for p in model.parameters())


def install_divergence_guard():
    from fairseq import checkpoint_utils
    from fairseq.trainer import Trainer

    if getattr(checkpoint_utils.save_checkpoint, "_fsa_guarded", False):
        return
    original_save = checkpoint_utils.save_checkpoint

    @functools.wraps(original_save)
    def save_checkpoint(cfg, trainer, epoch_itr, val_loss):
        if val_loss is not None and not math.isfinite(float(val_loss)):
            raise TrainingDivergedError(
                f"training diverged: validation loss is {val_loss} at update "
                f"{trainer.get_num_updates()}; no checkpoint was saved from this model. "
                "(ReLU attention without an output norm is known to fail to train: "
                "ReLA Table 1 row 4; use --attn-output-norm gated_rmsnorm or rmsnorm_i.)"
            )
        if not _all_finite(trainer.get_model()):
            raise TrainingDivergedError(
                f"training diverged: the model has NaN/inf parameters at update "
                f"{trainer.get_num_updates()}; no checkpoint was saved."
            )
        return original_save(cfg, trainer, epoch_itr, val_loss)

    save_checkpoint._fsa_guarded = True
    checkpoint_utils.save_checkpoint = save_checkpoint

    original_train_step = Trainer.train_step

    @functools.wraps(original_train_step)
    def train_step(self, samples, raise_oom=False):
        try:
            return original_train_step(self, samples, raise_oom=raise_oom)
        except TrainingDivergedError:
            raise
        except FloatingPointError as e:
            raise TrainingDivergedError(
                f"training diverged at update {self.get_num_updates()}: {e}. "
                "Stopping; checkpoints already on disk were written before the divergence "
                "and no checkpoint is written from the diverged model."
            ) from e

    Trainer.train_step = train_step


def check_data_dirs(data: str):
    """Clear error for a translation data directory that does not exist or is empty."""
    import os

    from fairseq import utils

    for path in utils.split_paths(data or ""):
        if "://" in path:  # remote storage handled by fairseq's PathManager
            continue
        if not os.path.isdir(path):
            raise FileNotFoundError(
                f"data directory {path!r} does not exist: expected the output folder of "
                "fairseq-preprocess (dict.<lang>.txt, <split>.<src>-<tgt>.<lang>.bin/.idx)"
            )
        if not any(f.startswith("dict.") and f.endswith(".txt") for f in os.listdir(path)):
            raise FileNotFoundError(
                f"data directory {path!r} has no dict.<lang>.txt: is it the output folder "
                "of fairseq-preprocess?"
            )


def install_data_dir_check():
    from fairseq.tasks.translation import TranslationTask

    original = TranslationTask.setup_task.__func__
    if getattr(original, "_fsa_checked", False):
        return

    def setup_task(cls, cfg, **kwargs):
        check_data_dirs(getattr(cfg, "data", None))
        return original(cls, cfg, **kwargs)

    setup_task._fsa_checked = True
    TranslationTask.setup_task = classmethod(setup_task)


def install():
    """Idempotent; called from ``fairseq_sparse_attn/__init__.py``."""
    global _INSTALLED
    if _INSTALLED:
        return
    install_checkpoint_loading_fix()
    install_divergence_guard()
    install_data_dir_check()
    _INSTALLED = True
