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

A checkpoint without plugin options (a stock fairseq ``transformer``) counts as the softmax
attention it computes: restarting its save dir with ``--arch rela_transformer_wmt_en_de``
is refused like any other change (issue 24: it loaded and trained on as ReLA), while the
plugin's ``softmax_transformer_*`` presets resume it.  The converse, a plugin checkpoint
restarted with a stock ``--arch``, is compared the same way.
"""

import functools
import os

BEHAVIOUR_CHANGE = True


def _read_state(path):
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except RuntimeError:  # not the zip format: no mmap
        state = torch.load(path, map_location="cpu", weights_only=False)
    return state if isinstance(state, dict) else {}  # not a checkpoint: the load says so


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


@functools.lru_cache(maxsize=None)
def _plugin_option_names():
    from ..models.sparse_transformer import SparseTransformerModel
    from ..validation import plugin_option_names

    return tuple(plugin_option_names(SparseTransformerModel))


def stock_softmax_args():
    """The plugin options of a stock fairseq transformer: the softmax preset's values."""
    import argparse

    from ..models.architectures import ATTENTION_PRESETS
    from ..options.schema import fill_defaults

    args = argparse.Namespace()
    fill_defaults(args, **ATTENTION_PRESETS["softmax"])
    return args


def has_plugin_options(model_args):
    return any(hasattr(model_args, n) for n in _plugin_option_names())


def plugin_model_options(model_args):
    """{plugin option: value} of a model's args (a stock model: the softmax values)."""
    source = model_args if has_plugin_options(model_args) else stock_softmax_args()
    return {n: getattr(source, n) for n in _plugin_option_names() if hasattr(source, n)}


def _is_plugin(model_class):
    return model_class is not None and model_class.__module__.startswith("fairseq_sparse_attn")


def check_against_checkpoint(filename, saved, given, given_class):
    """The attention options of ``saved`` (a checkpoint's model args) against ``given``
    (this run's), a model without plugin options counting as softmax."""
    from ..models.sparse_transformer import SparseTransformerModel
    from ..validation import check_resume_config

    saved_plugin, given_plugin = has_plugin_options(saved), _is_plugin(given_class)
    if not saved_plugin and not given_plugin:
        return  # stock on stock
    label = filename
    if not saved_plugin:
        label = (
            f"{filename} (a stock fairseq {getattr(saved, 'arch', None) or 'transformer'} "
            "checkpoint: softmax attention)"
        )
        saved = stock_softmax_args()
    if not given_plugin:
        allow = getattr(given, "allow_attention_change", False)
        given = stock_softmax_args()
        given.allow_attention_change = allow
    check_resume_config(label, saved, given, SparseTransformerModel)


def check_epoch_position(filename, extra_state, trainer):
    """UsageError when a checkpoint saved inside an epoch by W processes is resumed by
    another number: fairseq records the epoch's position as the batches each process read,
    so W' processes would repeat or skip examples of that epoch (measured 2026-11-28: 488
    examples trained twice and 32 never, or 344 never, or fairseq's "dataloader mismatch"
    error), where the docs called the two trainings the same."""
    position = (extra_state or {}).get("train_iterator") or {}
    checkpoint_cfg = trainer.cfg.checkpoint
    if not position.get("iterations_in_epoch") or getattr(checkpoint_cfg, "reset_dataloader", False):
        return
    finetune = getattr(checkpoint_cfg, "finetune_from_model", None)
    if finetune and os.path.abspath(finetune) == os.path.abspath(filename):
        return  # fairseq starts a fine-tuning at epoch 1 whatever the checkpoint's position
    if not os.path.isfile(filename):
        return  # a rank without the file (fairseq loads on rank 0 and broadcasts); rank 0 decides
    cfg = read_checkpoint_config(filename) or {}
    distributed = cfg.get("distributed_training") if hasattr(cfg, "get") else None
    saved = distributed.get("distributed_world_size") if distributed is not None else None
    now = getattr(trainer.cfg.distributed_training, "distributed_world_size", None) or trainer.data_parallel_world_size
    if saved is not None and int(saved) != now:
        from ..errors import UsageError

        raise UsageError(
            f"{filename} was saved inside epoch {position.get('epoch')} (after {position['iterations_in_epoch']} "
            f"batches of each of {saved} processes); resumed by {now} process(es), the rest of that epoch would "
            f"repeat or skip examples: resume it with {saved} processes (--update-freq may change), resume from an "
            "end-of-epoch checkpoint, or add --reset-dataloader to start the epoch over"
        )


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
        if not reset_optimizer and model_class is not None and os.path.isfile(filename):
            saved = saved_model_args(filename)
            if saved is not None:
                check_against_checkpoint(filename, saved, given, model_class)
        extra_state = original(self, filename, reset_optimizer, *args, **kwargs)
        if extra_state is not None:
            check_epoch_position(filename, extra_state, self)
        return extra_state

    load_checkpoint._fsa_resume_check = True
    Trainer.load_checkpoint = load_checkpoint
