"""``--fp16`` training (flat master weights, fairseq's default) without a CUDA device refused
in one line before any work.

fairseq trains in fp16 through its ``FP16Optimizer``, which asks CUDA for the device of its
fp32 master weights: on a machine without a GPU, or with ``--cpu``, the run loaded the data,
built the model and then died in the optimizer with ``AssertionError: Torch not compiled
with CUDA enabled`` (a 40-line traceback).  The check runs where fairseq parses a training
command line (``options.parse_args_and_arch``; a parser of fairseq-generate,
fairseq-validate or fairseq-interactive, whose ``--fp16`` runs the model in half precision
on any device, is left alone) and names the CPU's half precision, ``--bf16``.
"""

import functools

BEHAVIOUR_CHANGE = False


def fp16_without_cuda(args):
    """The refusal's text when ``args`` (a parsed training command line) trains in fp16
    where there is no CUDA device, else None."""
    import torch

    # fairseq's MemoryEfficientFP16Optimizer, and FP16Optimizer with
    # --fp16-no-flatten-grads, train on a CPU (slowly): only the flat fp32 master copy asks
    # CUDA for its device, so only that path is refused (stock fairseq trains the others)
    if not getattr(args, "fp16", False) or getattr(args, "memory_efficient_fp16", False):
        return None
    if getattr(args, "fp16_no_flatten_grads", False) or not hasattr(args, "update_freq"):
        return None  # ... or not a training parser
    if getattr(args, "cpu", False):
        where = "--cpu is given"
    elif not torch.cuda.is_available():
        where = "this machine has no CUDA device"
    else:
        return None
    return (
        f"--fp16 trains on a CUDA GPU (fairseq's FP16Optimizer, flat fp32 master weights), and {where}: "
        "use --bf16 for half precision on the CPU, or leave --fp16 out"
    )


def install():
    from fairseq import options

    original = options.parse_args_and_arch
    if getattr(original, "_fsa_fp16_cuda", False):
        return

    @functools.wraps(original)
    def parse_args_and_arch(parser, *args, **kwargs):
        from ..errors import UsageError

        parsed = original(parser, *args, **kwargs)
        parsed_args = parsed[0] if isinstance(parsed, tuple) else parsed
        reason = fp16_without_cuda(parsed_args)
        if reason is not None:
            raise UsageError(reason)
        return parsed

    parse_args_and_arch._fsa_fp16_cuda = True  # type: ignore[attr-defined]
    options.parse_args_and_arch = parse_args_and_arch
