"""Divergence guard.  A run whose gradients or validation loss become NaN/inf stops
with a message that says so, and no checkpoint is written from a non-finite model
(stock fairseq would save ``checkpoint_best.pt`` at the first validation even when
its loss is NaN).
"""

import functools
import math

import torch

from ..errors import TrainingDivergedError

BEHAVIOUR_CHANGE = True


def _all_finite(model) -> bool:
    return all(torch.isfinite(p).all().item() for p in model.parameters())


def _floating_point_error_in_chain(exc):
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, FloatingPointError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


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
        except Exception as e:
            # fairseq raises FloatingPointError("gradients are Nan/Inf") and then re-runs
            # the step under its NanDetector, whose hooks can themselves fail (StopIteration
            # on torch >= 2.x): look for the FloatingPointError in the exception chain
            cause = _floating_point_error_in_chain(e)
            if cause is None:
                raise
            raise TrainingDivergedError(
                f"training diverged at update {self.get_num_updates()}: {cause}. "
                "Stopping; no checkpoint_last/checkpoint_best is written from the diverged "
                "model (fairseq may leave crash.pt, its debugging dump of the failing state)."
            ) from e

    Trainer.train_step = train_step


install = install_divergence_guard
