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

4. Batching that loses sentences.  fairseq's vectorized ``batch_by_size`` (the Cython
   ``batch_by_size_vec`` of fairseq-fixed 0.12.3.1) silently drops the last
   ``len(indices) % required_batch_size_multiple`` examples when only ``max_sentences`` is
   given: ``fairseq-generate --batch-size 32`` on a 447-document test set translated 440
   (its default ``--required-batch-size-multiple`` is 8).  The wrapper puts every
   dropped index back, in extra batches that respect ``max_sentences``/``max_tokens``.
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


def _complete_batches(batches, indices, num_tokens_fn, max_tokens, max_sentences, num_tokens_vec):
    """Append the indices ``batches`` lost, as extra batches within the same limits."""
    import numpy as np

    covered = sum(len(b) for b in batches)
    if covered >= len(indices):
        return batches
    seen = set()
    for b in batches:
        seen.update(int(i) for i in b)
    missing = [int(i) for i in indices if int(i) not in seen]
    max_sentences = max_sentences if max_sentences and max_sentences > 0 else len(missing)
    max_tokens = max_tokens if max_tokens and max_tokens > 0 else None

    def tokens(i):
        return int(num_tokens_vec[i]) if num_tokens_vec is not None else int(num_tokens_fn(i))

    extra, current, longest = [], [], 0
    for i in missing:
        longest_if_added = max(longest, tokens(i))
        too_many = len(current) >= max_sentences
        too_long = max_tokens is not None and current and longest_if_added * (len(current) + 1) > max_tokens
        if current and (too_many or too_long):
            extra.append(current)
            current, longest_if_added = [], tokens(i)
        current.append(i)
        longest = longest_if_added
    if current:
        extra.append(current)
    dtype = batches[0].dtype if len(batches) and hasattr(batches[0], "dtype") else np.int64
    return list(batches) + [np.array(b, dtype=dtype) for b in extra]


def install_batching_fix():
    from fairseq.data import data_utils

    original = data_utils.batch_by_size
    if getattr(original, "_fsa_complete", False):
        return

    @functools.wraps(original)
    def batch_by_size(indices, num_tokens_fn, num_tokens_vec=None, max_tokens=None,
                      max_sentences=None, required_batch_size_multiple=1, fixed_shapes=None):
        batches = original(indices, num_tokens_fn, num_tokens_vec=num_tokens_vec,
                           max_tokens=max_tokens, max_sentences=max_sentences,
                           required_batch_size_multiple=required_batch_size_multiple,
                           fixed_shapes=fixed_shapes)
        if fixed_shapes is not None:
            return batches
        return _complete_batches(batches, indices, num_tokens_fn, max_tokens, max_sentences,
                                 num_tokens_vec)

    batch_by_size._fsa_complete = True
    data_utils.batch_by_size = batch_by_size


def install():
    """Idempotent; called from ``fairseq_sparse_attn/__init__.py``."""
    global _INSTALLED
    if _INSTALLED:
        return
    install_checkpoint_loading_fix()
    install_divergence_guard()
    install_data_dir_check()
    install_batching_fix()
    _INSTALLED = True
