"""``--bf16`` trains in bfloat16 on a GPU (or the CPU with ``--cpu``), not on a TPU that is
not there.

fairseq 0.12's ``options.parse_args_and_arch`` sets ``args.tpu = True`` whenever ``--bf16``
(or ``--memory-efficient-bf16``) is given, a shortcut from when bf16 meant a TPU (fairseq
issue #4696, "bf16 with A100 GPUs").  Without torch_xla every such training then fails in
``Trainer.__init__`` (``utils.get_tpu_device()``: ``AttributeError: 'NoneType' object has
no attribute 'xla_device'``), and before that ``infer_init_method`` skips the
torchrun / SLURM set-up of a multi-GPU run.

The patch wraps ``parse_args_and_arch``, where fairseq derives ``tpu`` from ``bf16`` (the
plugin is imported by ``options.get_parser``, before fairseq's commands parse): when
torch_xla is not installed and ``--tpu`` is not on the command line, ``args.tpu`` goes back
to False, with one INFO line::

    --bf16 without torch_xla and without --tpu: bfloat16 on cuda, not a TPU (fairseq 0.12 would set --tpu and fail, fairseq issue #4696)

Everything else is fairseq's bf16 path (the model and batches in bfloat16, fp32 master
weights in ``FP16Optimizer``, no loss scaling).  With torch_xla installed, or ``--tpu``
given, fairseq's behaviour is unchanged.  fairseq-generate / fairseq-validate read neither
``--tpu`` nor ``--bf16`` (they run in float32 unless ``--fp16``), stock and with the patch.
``FSA_COMPAT_OFF=bf16_not_tpu`` (or ``behaviour``) restores fairseq's shortcut.
"""

import argparse
import functools
import logging
import sys

BEHAVIOUR_CHANGE = True  # FSA_COMPAT_OFF=behaviour: fairseq's --bf16 = --tpu

logger = logging.getLogger(__name__)


def asked_for_tpu(argv):
    """Whether ``--tpu`` is on the command line (read as fairseq reads ``--user-dir``)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--tpu", action="store_true")
    known, _ = parser.parse_known_args(sys.argv[1:] if argv is None else list(argv))
    return known.tpu


def xla_installed():
    """fairseq's own test: ``fairseq.utils`` imports torch_xla's ``xla_model`` as ``xm``."""
    from fairseq import utils

    return utils.xm is not None


def device_name(args):
    import torch

    return "cuda" if torch.cuda.is_available() and not getattr(args, "cpu", False) else "the CPU"


def undo_bf16_tpu(args, argv):
    """``args`` parsed from ``argv`` (None: ``sys.argv[1:]``) with ``tpu`` set back to False
    when fairseq set it only for ``--bf16``; returns whether it did."""
    if not (getattr(args, "bf16", False) and getattr(args, "tpu", False)):
        return False
    if xla_installed() or asked_for_tpu(argv):
        return False
    args.tpu = False
    logger.info(
        f"--bf16 without torch_xla and without --tpu: bfloat16 on {device_name(args)}, not a TPU "
        "(fairseq 0.12 would set --tpu and fail, fairseq issue #4696)"
    )
    return True


def install():
    from fairseq import options

    original = options.parse_args_and_arch
    if getattr(original, "_fsa_bf16", False):
        return

    @functools.wraps(original)
    def parse_args_and_arch(parser, input_args=None, *args, **kwargs):
        parsed = original(parser, input_args, *args, **kwargs)
        found = parsed[0] if isinstance(parsed, tuple) else parsed  # parse_known: (args, extra)
        undo_bf16_tpu(found, input_args)
        return parsed

    parse_args_and_arch._fsa_bf16 = True
    options.parse_args_and_arch = parse_args_and_arch
