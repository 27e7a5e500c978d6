"""``--print-alignment`` (``fairseq-generate``, ``fairseq-interactive``) refused in one line
before any sentence is translated, for a model whose cross-attention runs on a named
backend that computes no weights (``--attn-backend triton``, ``key_block``, ``query_block``
or ``sdpa``, which a checkpoint keeps; ``attention.core.serves_weight_requests``).  fairseq reads each
hypothesis's alignment from the attention weights of the alignment layer's
cross-attention, recorded at every decoding step, and the fused kernels compute no weights
(``attention/backends/triton.py``): every hypothesis came back with an empty attention
tensor and the run crashed inside fairseq (``IndexError: Dimension out of range`` in
``sequence_generator.py``) after translating its first batch.  The error names the
remedy: ``--model-overrides "{'attn_backend': 'auto'}"`` (auto never takes the kernels for
decoding steps, so decoding runs as fast as before and the weights are there).
"""

import functools

BEHAVIOUR_CHANGE = False


def cross_attention_without_weights(models) -> list:
    """(name, backend) of the cross-attention modules of ``models`` on a named backend that
    computes no weights."""
    from ..attention.core import serves_weight_requests
    from ..attention.multihead import SparseMultiheadAttention

    return [
        (name if len(models) == 1 else f"model {i}: {name}", module.backend)
        for i, model in enumerate(models)
        for name, module in model.named_modules()
        if isinstance(module, SparseMultiheadAttention)
        and module.encoder_decoder_attention
        and not serves_weight_requests(module.backend)
    ]


def refuse_without_weights(models) -> None:
    """UsageError when a cross-attention module of ``models`` computes no weights."""
    from ..errors import UsageError

    found = cross_attention_without_weights(models)
    if found:
        (name, backend), more = found[0], len(found) - 1
        which = f"{name} and {more} more run" if more else f"{name} runs"
        raise UsageError(
            f"--print-alignment needs the cross-attention weights, and {which} on "
            f"--attn-backend {backend}, which computes none; add "
            "--model-overrides \"{'attn_backend': 'auto'}\" (auto gives these calls a backend that computes them)"
        )


def install():
    from fairseq import sequence_generator

    cls = sequence_generator.SequenceGeneratorWithAlignment
    if getattr(cls.__init__, "_fsa_alignment_check", False):
        return
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self, models, *args, **kwargs):
        refuse_without_weights(models)
        original(self, models, *args, **kwargs)

    __init__._fsa_alignment_check = True  # type: ignore[attr-defined]
    cls.__init__ = __init__
