"""Values derived from mask tensors, computed once and shared by every attention module.

fairseq hands every layer the same mask tensors (the encoder padding mask to each encoder
self-attention and cross-attention, the decoder padding mask and the cached future mask to
each decoder self-attention), and again at every decoding step.  What the attention derives
from them (the boolean (bsz, 1, 1, src) padding view, a combined causal | padding mask,
whether a row hides every key) is the same for every module, so it is computed once per
mask instead of once per module: fewer ops per training step (tests/unit/test_op_count.py)
and, on CPU, fewer host syncs (``bool(t.any())``).

The key of an entry is, for each input tensor, its storage address, shape, strides, dtype,
device and version counter; the entry keeps a reference to the input tensors, so an equal
key means those same, unmodified tensors, never new ones that reuse a freed address.  The
last :data:`MAX_ENTRIES` entries are kept (a handful of masks are alive at a time).
"""

from collections import OrderedDict
from typing import Callable, Sequence

import torch

MAX_ENTRIES = 16
_ENTRIES: "OrderedDict[tuple, tuple]" = OrderedDict()


def tensor_key(t: torch.Tensor) -> tuple:
    return (t.data_ptr(), t.shape, t.stride(), t.dtype, t.device, getattr(t, "_version", None))


def cached(slot: str, tensors: Sequence[torch.Tensor], extra, compute: Callable):
    """``compute(*tensors)``, remembered for those tensors (unmodified) in ``slot``;
    ``extra`` is any hashable value the result also depends on."""
    key = (slot, tuple(tensor_key(t) for t in tensors), extra)
    hit = _ENTRIES.get(key)
    if hit is not None:
        _ENTRIES.move_to_end(key)
        return hit[1]
    value = compute(*tensors)
    _ENTRIES[key] = (tuple(tensors), value)
    while len(_ENTRIES) > MAX_ENTRIES:
        _ENTRIES.popitem(last=False)
    return value


def clear():
    _ENTRIES.clear()
