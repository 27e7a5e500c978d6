"""fairseq / torch fixes, one module per patch.  Installed when the plugin is imported
(``--user-dir``, the ``fsa-*`` commands or ``import fairseq_sparse_attn.plugin``);
``install()`` logs one line naming the active patches, at DEBUG unless verbose
(``fsa-* -v`` or ``FSA_VERBOSE=1``).

=======================  =========  ==================================================
patch                    behaviour  what it does
=======================  =========  ==================================================
quiet_logs               no         drops the tensorboardX and hydra deprecation noise
checkpoint_loading       no         fairseq's checkpoint loader reads with
                                    ``weights_only=False`` on torch >= 2.6
data_checks              no         data-bin / side-file problems as one-line errors
                                    before any work starts
divergence_guard         yes        NaN/inf stops training; no checkpoint of that model
batching                 yes        ``batch_by_size`` keeps every sentence (not in
                                    training unless ``FSA_COMPLETE_TRAIN_BATCHES=1``)
cpu_distributed          yes        torchrun / srun on CPU (gloo), see docs/distributed.md
exact_resume             yes        a restart builds the epoch's batches as the
                                    uninterrupted run did (exact resume after epoch 1)
save_dir_lock            yes        one training per ``--save-dir``: a lock file naming
                                    pid and host; a second start refuses in one line
crash_safe_checkpoints   yes        checkpoints written to a temporary file and renamed;
                                    a restart skips a checkpoint that does not load
epoch_end_save_points    yes        with ``FSA_SAVE_POINTS_AT_EPOCH_ENDS=1`` (the
                                    scripts): a ``--save-interval-updates`` save on an
                                    epoch's last update also gets its
                                    ``checkpoint_<epoch>_<updates>.pt``
resume_config_check      yes        refuses to resume a checkpoint whose attention
                                    options differ from the flags
                                    (``--allow-attention-change`` to allow it); a
                                    stock checkpoint counts as softmax
checkpoint_record        yes        checkpoints record their dictionaries (sha256) and
                                    attention options; a load for a data-bin with
                                    other dictionaries is refused in one line
preemption               yes        SIGUSR1 / SIGTERM: every rank stops after the same
                                    update, checkpoint_last.pt is saved, SIGUSR1
                                    requeues a SLURM job (docs/distributed.md)
clean_exit               no         fairseq's batch-prefetch threads are stopped at
                                    exit (no SIGABRT after a run cut by
                                    ``--max-update`` / ``--max-valid-steps``)
checkpoint_overrides     no         plugin options given at load time (``--mask-encoder-
                                    heads``, ``--model-overrides``) refused for a
                                    checkpoint of a stock fairseq model
no_crash_dump            no         no ``crash.pt`` when a training step fails on bad
                                    input (a UsageError), only on real crashes
pin_memory               no         fairseq's data loaders pin memory only when CUDA
                                    is available (no torch UserWarning on CPU)
bf16_not_tpu             yes        ``--bf16`` trains in bfloat16 on CUDA / the CPU
                                    when torch_xla is absent and ``--tpu`` not given
                                    (fairseq 0.12 sets ``--tpu`` for it and fails)
fp16_needs_cuda          no         ``--fp16`` training without a CUDA device (or with
                                    ``--cpu``) refused in one line before any work
                                    (fairseq's FP16Optimizer asserted after the model
                                    was built)
alignment_weights        no         ``--print-alignment`` refused in one line for a
                                    model whose cross-attention runs on the triton
                                    backend (no weights: fairseq crashed after the
                                    first batch)
=======================  =========  ==================================================

``FSA_COMPAT_OFF`` turns patches off for a process: ``FSA_COMPAT_OFF=behaviour`` (or
``all``) leaves every behaviour-changing patch out (stock fairseq behaviour, e.g. to
reproduce a stock run), ``FSA_COMPAT_OFF=exact_resume,batching`` names patches.  An
unknown name is an error.
"""

import logging
import os

from . import (  # noqa: F401  (the patch modules)
    alignment_weights,
    batching,
    bf16_not_tpu,
    checkpoint_loading,
    checkpoint_overrides,
    checkpoint_record,
    clean_exit,
    cpu_distributed,
    crash_safe_checkpoints,
    data_checks,
    divergence_guard,
    epoch_end_save_points,
    exact_resume,
    fp16_needs_cuda,
    no_crash_dump,
    pin_memory,
    preemption,
    quiet_logs,
    resume_config_check,
    save_dir_lock,
)

# names that tests, scripts and users import from ``fairseq_sparse_attn.compat``
from .batching import _complete_batches, install_batching_fix  # noqa: F401
from .checkpoint_loading import install_checkpoint_loading_fix  # noqa: F401
from .cpu_distributed import (  # noqa: F401
    DistributedSetupError,
    _runs_on_cpu,
    configure_cpu_distributed,
    cpu_launcher_world,
    first_slurm_host,
    install_cpu_distributed_fix,
)
from .data_checks import DataError, check_data_dirs, install_data_dir_check  # noqa: F401
from .divergence_guard import TrainingDivergedError, install_divergence_guard  # noqa: F401

logger = logging.getLogger(__name__)

PATCHES = {
    "quiet_logs": quiet_logs,  # first: before the others import fairseq
    "checkpoint_loading": checkpoint_loading,
    "data_checks": data_checks,
    "divergence_guard": divergence_guard,
    "batching": batching,
    "cpu_distributed": cpu_distributed,
    "exact_resume": exact_resume,
    "save_dir_lock": save_dir_lock,
    "crash_safe_checkpoints": crash_safe_checkpoints,
    "epoch_end_save_points": epoch_end_save_points,
    "resume_config_check": resume_config_check,
    "checkpoint_record": checkpoint_record,
    "preemption": preemption,
    "clean_exit": clean_exit,
    "no_crash_dump": no_crash_dump,
    "checkpoint_overrides": checkpoint_overrides,
    "pin_memory": pin_memory,
    "bf16_not_tpu": bf16_not_tpu,
    "alignment_weights": alignment_weights,
    "fp16_needs_cuda": fp16_needs_cuda,
}
SWITCH = "FSA_COMPAT_OFF"
VERBOSE = "FSA_VERBOSE"

_ACTIVE = None


def patches_off(env=None):
    """The patch names ``$FSA_COMPAT_OFF`` turns off."""
    value = (os.environ if env is None else env).get(SWITCH, "")
    names = {n.strip() for n in value.split(",") if n.strip()}
    off = set()
    for name in names:
        if name in ("behaviour", "behavior", "all"):
            off |= {n for n, m in PATCHES.items() if m.BEHAVIOUR_CHANGE}
        elif name in PATCHES:
            off.add(name)
        else:
            raise ValueError(
                f"${SWITCH}: unknown patch {name!r}; known: "
                f"{', '.join(PATCHES)}, or 'behaviour' for every behaviour change"
            )
    return off


def verbose(env=None) -> bool:
    """Whether the plugin logs its start-up lines at INFO: ``FSA_VERBOSE=1`` (set by the
    ``fsa-*`` commands' ``-v`` / ``--verbose``)."""
    return (os.environ if env is None else env).get(VERBOSE, "") not in ("", "0")


def install():
    """Install every patch not turned off by ``$FSA_COMPAT_OFF``.  Idempotent: the set is
    fixed by the first call in a process."""
    global _ACTIVE
    if _ACTIVE is not None:
        return list(_ACTIVE)
    off = patches_off()
    active = []
    for name, module in PATCHES.items():
        if name not in off:
            module.install()
            active.append(name)
    _ACTIVE = active
    logger.log(
        logging.INFO if verbose() else logging.DEBUG,
        "fairseq_sparse_attn compat patches: %s%s",
        ", ".join(active),
        f" ({SWITCH} leaves out: {', '.join(sorted(off))})" if off else "",
    )
    return list(active)


def active_patches():
    return list(_ACTIVE or [])
