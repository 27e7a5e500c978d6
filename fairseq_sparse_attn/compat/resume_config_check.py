"""Refuse to resume a checkpoint whose attention options differ from the flags given.

Stock fairseq restores ``checkpoint_last.pt`` into whatever model the flags build when the
parameter names and shapes match: restarting a ReLA save dir with
``--attn-activation sparsemax`` trained on as sparsemax and overwrote the checkpoint's
configuration, silently.  Before a resume (a load that keeps the optimizer state, i.e.
without ``--reset-optimizer``) of a plugin model, the checkpoint's model options are
compared with this run's (:func:`fairseq_sparse_attn.validation.check_resume_config`);
a difference is a one-line error naming both values.  ``--allow-attention-change``
resumes anyway.  Reads only the checkpoint's pickled configuration (tensors are
memory-mapped, not read).
"""

import functools
import os

BEHAVIOUR_CHANGE = True


def _read_state(path):
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except RuntimeError:  # not the zip format: no mmap
        return torch.load(path, map_location="cpu", weights_only=False)


def read_checkpoint_config(path):
    """The ``cfg`` a fairseq checkpoint saved (tensors memory-mapped, not read), or None."""
    return _read_state(path).get("cfg")


def saved_model_args(path):
    state = _read_state(path)
    cfg = state.get("cfg")
    if cfg is not None and cfg.get("model") is not None:
        model = cfg["model"]
        if isinstance(model, dict):
            import argparse

            return argparse.Namespace(**model)
        return model
    return state.get("args")


def install():
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.trainer import Trainer

    original = Trainer.load_checkpoint
    if getattr(original, "_fsa_resume_check", False):
        return

    @functools.wraps(original)
    def load_checkpoint(self, filename, reset_optimizer=False, *args, **kwargs):
        given = self.cfg.model
        model_class = ARCH_MODEL_REGISTRY.get(getattr(given, "arch", None))
        if (not reset_optimizer and model_class is not None
                and model_class.__module__.startswith("fairseq_sparse_attn")
                and os.path.isfile(filename)):
            from ..validation import check_resume_config

            saved = saved_model_args(filename)
            if saved is not None:
                check_resume_config(filename, saved, given, model_class)
        return original(self, filename, reset_optimizer, *args, **kwargs)

    load_checkpoint._fsa_resume_check = True
    Trainer.load_checkpoint = load_checkpoint
