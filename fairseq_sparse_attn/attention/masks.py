"""Every mask the attention derives, in one place, and the per-batch cache they share.

A call's masks arrive from fairseq as a float or boolean ``attn_mask`` (the decoder's cached
future mask, fairseq's -1e8 conversion of boolean masks, or a user's additive bias) and a
``key_padding_mask``; from them the attention derives

* :func:`split_attn_mask`: a float ``attn_mask`` -> (additive score bias or None, boolean
  hidden mask); fairseq's own masks only hide, so their bias is None;
* :func:`hiding_mask_only`: the call needs no additive score bias;
* :func:`with_one_more_key`: the masks after ``bias_kv`` or zero attention appended a key;
* :func:`cached_key_padding`: the padding mask of the cached keys and this call's keys;
* :func:`visibility_mask`: (bias, hidden) for the call, ``hidden`` broadcastable to
  (bsz, heads, tgt, src), True = the key is not visible (padding | causal | pattern);
* :func:`hide_more`: a mask with more keys hidden (bias providers' hidden keys);
* :func:`real_keys`: (bsz, src) True = a real key (fixed patterns, bias providers, RHE);
* :func:`key_counts` / :func:`visible_key_counts`: n_i, the visible keys of every query row (ReLUFormer);
* :func:`hides_a_whole_row`: some row hides every key;
* :func:`hiding_bias`: a score bias that hides the hidden keys, per (sentence, head) row,
  for the one-group scores of the call plan (``torch.baddbmm``: scores and mask in one op);
* :func:`row_factor`: an activation's per-row factor of the visible key counts, per
  (sentence, head) row (ReLUFormer);
* :func:`additive_mask`: one float mask (bias, -inf where hidden) for fused kernels that
  take one (``sdpa``);
* :func:`per_key_group`: the mask of one key copy when beam search keeps one copy per
  sentence (``query_block``);
* :func:`padding_and_causal`: a hidden mask as (key padding, causal) for kernels that take
  those two (``triton``), or None when it is anything else.

The plan (:mod:`.call_plan`) and the backends (:mod:`.backends`) take their masks from
here and build none of their own (``tests/unit/test_masks.py`` holds that).

The cache.  fairseq hands every layer the same mask tensors (the encoder padding mask to
each encoder self-attention and cross-attention, the decoder padding mask and the cached
future mask to each decoder self-attention), and again at every decoding step.  What the
attention derives from them is the same for every module, so it is computed once per mask
instead of once per module (:func:`cached`): fewer ops per training step
(tests/unit/test_op_count.py) and, on CPU, fewer host syncs (``bool(t.any())``).  The key of
an entry is, for each input tensor, its storage address, shape, strides, dtype, device and
version counter; the entry keeps a reference to the input tensors, so an equal key means
those same, unmodified tensors, never new ones that reuse a freed address.  The last
:data:`MAX_ENTRIES` entries are kept (a handful of masks are alive at a time).

This module needs torch only.
"""

from collections import OrderedDict
from typing import Callable, Optional, Sequence, Tuple

import torch
from torch import Tensor

#: Additive float masks use -inf (decoder future mask) or -1e8/-1e4 (fairseq's encoder
#: conversion of boolean masks).  Anything at or below this is "not visible".
ADDITIVE_MASK_THRESHOLD = -1e4

# --------------------------------------------------------------------------- the cache
MAX_ENTRIES = 16
_ENTRIES: "OrderedDict[tuple, tuple]" = OrderedDict()


def tensor_key(t: Tensor) -> tuple:
    return (t.data_ptr(), t.shape, t.stride(), t.dtype, t.device, t._version)


def cached(slot: str, tensors: Sequence[Tensor], extra, compute: Callable):
    """``compute(*tensors)``, remembered for those tensors (unmodified) in ``slot``;
    ``extra`` is any hashable value the result also depends on.  Tensors made under
    ``torch.inference_mode`` have no version counter (an in-place change would go unseen):
    their results are computed every time."""
    if any(t.is_inference() for t in tensors):
        return compute(*tensors)
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


# --------------------------------------------------------------------------- fairseq's masks
def split_attn_mask(attn_mask: Tensor) -> Tuple[Optional[Tensor], Tensor]:
    """(additive bias or None, boolean mask) from a float fairseq attention mask.
    fairseq's own masks only hide (-inf future mask, -1e8 converted boolean masks): then
    the bias is None and nothing is added to the scores."""
    hidden = attn_mask <= ADDITIVE_MASK_THRESHOLD
    bias = attn_mask.float().masked_fill(hidden, 0.0)
    return (bias if bool(bias.ne(0).any()) else None), hidden


def hiding_mask_only(attn_mask: Optional[Tensor]) -> bool:
    """True when ``attn_mask`` only hides keys (None, boolean, or fairseq's -inf / -1e8
    float masks): the call needs no additive score bias."""
    if attn_mask is None or attn_mask.dtype == torch.bool:
        return True
    bias, _ = cached("attn_mask", (attn_mask,), None, split_attn_mask)
    return bias is None


def _padding_view(bsz: int, src_len: int):
    def expand(kpm: Tensor) -> Optional[Tensor]:
        pad = kpm.to(torch.bool)
        if pad.device.type == "cpu" and not bool(pad.any()):
            # fairseq's encoder hands an all-False mask for a batch without padding (every
            # batch-1 decoding step): nothing to hide, no masking pass (on a GPU the check
            # would stop the stream, once per batch and module)
            return None
        if pad.size(0) != bsz:  # one key copy per beam group
            pad = pad.repeat_interleave(bsz // pad.size(0), dim=0)
        return pad.view(bsz, 1, 1, src_len)

    return expand


def visibility_mask(
    attn_mask: Optional[Tensor], key_padding_mask: Optional[Tensor], bsz: int, tgt_len: int, src_len: int
) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """(additive bias of a float ``attn_mask`` or None, boolean mask broadcastable to
    (bsz, heads, tgt, src), True = hidden, or None), computed once per mask tensor."""
    bias, mask = None, None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            mask = attn_mask
        else:
            bias, mask = cached("attn_mask", (attn_mask,), None, split_attn_mask)
        mask = mask.view(1, 1, tgt_len, src_len)
    if key_padding_mask is not None:
        pad = cached("key_padding", (key_padding_mask,), bsz, _padding_view(bsz, src_len))
        if pad is not None:
            # decoder self-attention: causal | padding, once for all layers
            mask = pad if mask is None else cached("hidden", (mask, pad), None, torch.bitwise_or)
    return bias, mask


def with_one_more_key(
    key_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor]
) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """The masks after one visible key is appended (``bias_kv``, zero attention): fairseq's
    ``MultiheadAttention._pad_masks``, op for op."""
    if attn_mask is not None:
        shape = attn_mask.size()[:-1] + torch.Size([1])
        attn_mask = torch.cat([attn_mask, attn_mask.new_zeros(shape)], dim=-1)
    if key_padding_mask is not None:
        shape = key_padding_mask.size()[:-1] + torch.Size([1])
        key_padding_mask = torch.cat([key_padding_mask, key_padding_mask.new_zeros(shape)], dim=-1)
    return key_padding_mask, attn_mask


def cached_key_padding(
    key_padding_mask: Optional[Tensor],
    prev_key_padding_mask: Optional[Tensor],
    batch_size: int,
    src_len: int,
    static_kv: bool,
) -> Optional[Tensor]:
    """The padding mask of the cached keys and this call's keys (fairseq's
    ``MultiheadAttention._append_prev_key_padding_mask``, op for op: the cache format is
    fairseq's, so is this mask's dtype)."""
    if prev_key_padding_mask is not None and static_kv:
        return prev_key_padding_mask
    if prev_key_padding_mask is not None and key_padding_mask is not None:
        return torch.cat([prev_key_padding_mask.float(), key_padding_mask.float()], dim=1)
    # during incremental decoding, as the padding token enters and leaves the frame, there
    # is a time when the previous or the current mask is None
    if prev_key_padding_mask is not None:
        if src_len > prev_key_padding_mask.size(1):
            filler = torch.zeros(
                (batch_size, src_len - prev_key_padding_mask.size(1)), device=prev_key_padding_mask.device
            )
            return torch.cat([prev_key_padding_mask.float(), filler.float()], dim=1)
        return prev_key_padding_mask.float()
    if key_padding_mask is not None:
        if src_len > key_padding_mask.size(1):
            filler = torch.zeros((batch_size, src_len - key_padding_mask.size(1)), device=key_padding_mask.device)
            return torch.cat([filler.float(), key_padding_mask.float()], dim=1)
        return key_padding_mask.float()
    return prev_key_padding_mask


# --------------------------------------------------------------------------- derived masks
def hide_more(hidden: Optional[Tensor], more: Optional[Tensor]) -> Optional[Tensor]:
    """``hidden | more`` (either may be None: nothing hidden)."""
    if more is None:
        return hidden
    return more if hidden is None else hidden | more


def real_keys(key_padding: Optional[Tensor], bsz: int, src_len: int, device) -> Tensor:
    """(bsz, src_len) bool, True = real key position (not padding)."""
    if key_padding is None:
        return torch.ones(bsz, src_len, dtype=torch.bool, device=device)
    return ~key_padding.to(torch.bool)


def key_counts(mask: Optional[Tensor], src_len: int, device) -> Tensor:
    """n_i, the keys each query row sees, in float32 (exact for any length; fp16 holds
    integers exactly only up to 2,048, bf16 up to 256): (…, tgt, 1) from ``mask`` (True =
    hidden, last dim = the keys), or (1, 1, 1, 1) = ``src_len`` without one."""
    if mask is None:
        return torch.full((1, 1, 1, 1), float(src_len), device=device)
    return (~mask).sum(dim=-1, keepdim=True).float()


def visible_key_counts(scores: Tensor, mask: Optional[Tensor]) -> Tensor:
    """n_i for every query row of ``scores`` (:func:`key_counts`: float32, whatever
    ``scores``' dtype), shape broadcastable to ``scores`` with a last dim of 1."""
    return key_counts(mask, scores.size(-1), scores.device)


def hides_a_whole_row(mask: Tensor) -> bool:
    """Some row of ``mask`` hides every key (computed once per mask for all modules)."""
    return cached("hides_a_whole_row", (mask,), None, lambda m: bool(m.all(dim=-1).any()))


def _rows_shape(hidden: Tensor, bsz: int, heads: int) -> Tuple[int, int]:
    """(sentences, heads) of a per-row tensor for ``hidden``: (1, 1) when it is the same
    for every sentence and head (it then broadcasts over the (bsz * heads) rows)."""
    if hidden.size(0) == 1 and hidden.size(1) == 1:
        return 1, 1
    return bsz, heads


def hiding_bias(hidden: Tensor, bsz: int, heads: int, value: float, dtype: torch.dtype) -> Tensor:
    """``value`` where ``hidden`` (broadcastable to (bsz, heads, tgt, src)), 0 elsewhere, as
    (bsz * heads or 1, tgt or 1, src) in ``dtype``: the ``input`` of ``torch.baddbmm`` for
    scores of shape (bsz * heads, tgt, src), computed once per mask for every module."""

    def compute(h: Tensor) -> Tensor:
        b, n = _rows_shape(h, bsz, heads)
        bias = torch.zeros((b, n) + h.shape[2:], dtype=dtype, device=h.device).masked_fill_(h, value)
        return bias.view((b * n,) + h.shape[2:])

    return cached("hiding_bias", (hidden,), (bsz, heads, value, dtype), compute)


def row_factor(
    hidden: Optional[Tensor], bsz: int, heads: int, src_len: int, dtype: torch.dtype, device, scale, key
) -> Tensor:
    """``scale(n)`` of the visible key counts n (:func:`key_counts`) as (bsz * heads or 1,
    tgt or 1, 1) in ``dtype``, for weights of shape (bsz * heads, tgt, src); computed once
    per mask and ``key`` (what ``scale`` depends on besides n) for every module.  n and
    ``scale(n)`` are float32, rounded to ``dtype`` once at the end (as the key-block and
    Triton paths compute them): counted in bf16, 301 keys would be 300."""

    def compute(*h: Tensor) -> Tensor:
        if not h:
            return scale(torch.full((1, 1, 1), float(src_len), device=device)).to(dtype)
        n = key_counts(h[0], src_len, device)
        b, k = _rows_shape(h[0], bsz, heads)
        return scale(n).to(dtype).expand(b, k, n.size(2), 1).reshape(b * k, n.size(2), 1)

    tensors = () if hidden is None else (hidden,)
    return cached("row_factor", tensors, (bsz, heads, src_len, dtype, str(device), key), compute)


def additive_mask(
    hidden: Optional[Tensor], score_bias: Optional[Tensor], dtype: torch.dtype, device
) -> Optional[Tensor]:
    """One float mask of ``dtype``: ``score_bias`` (or 0), -inf where ``hidden``; None
    when there is neither."""
    if hidden is None and score_bias is None:
        return None
    mask = torch.zeros((), dtype=torch.float32, device=device)
    if score_bias is not None:
        mask = mask + score_bias
    if hidden is not None:
        mask = torch.where(hidden, torch.tensor(float("-inf"), device=device), mask)
    return mask.to(dtype)


def per_key_group(hidden: Optional[Tensor], bsz: int, groups: int) -> Optional[Tensor]:
    """The mask of each key copy when ``groups`` queries (beams) share one: the beams of a
    sentence see the same keys, so one row of every group is kept."""
    if hidden is not None and hidden.size(0) == bsz:
        return hidden[::groups]
    return hidden


def _padding_and_causal(hidden: Tensor, groups: int, kv_bsz: int) -> Optional[Tuple[Optional[Tensor], bool]]:
    if hidden.dim() != 4 or hidden.size(1) != 1:
        return None
    rows, _, tgt, src = hidden.shape
    last = hidden[:, 0, -1, :]  # the last query sees every key but padding, causal or not
    if groups > 1 and rows == kv_bsz * groups:
        pad = last[::groups]
        rebuilt = pad.repeat_interleave(groups, dim=0)
    elif rows in (kv_bsz, 1):
        pad = last.expand(kv_bsz, src)
        rebuilt = last
    else:
        return None
    rebuilt = rebuilt.view(rows, 1, 1, src)
    kept = pad if bool(pad.any()) else None
    if torch.equal(hidden, rebuilt.expand_as(hidden)):
        return kept, False
    causal = torch.ones(tgt, src, dtype=torch.bool, device=hidden.device).triu(src - tgt + 1)
    if torch.equal(hidden, rebuilt | causal):
        return kept, True
    return None


def padding_and_causal(hidden: Optional[Tensor], groups: int, kv_bsz: int) -> Optional[Tuple[Optional[Tensor], bool]]:
    """``hidden`` as (key padding (kv_bsz, src) bool or None, causal) when it is exactly
    padding | causal (key j hidden from query i when j > i + src - tgt), None when it is
    anything else (a pattern, a user's mask): for fused kernels that take those two
    (``triton``).  Checked by value once per mask tensor (on a GPU one host sync per batch
    and mask), so it holds for any mask a caller builds."""
    if hidden is None:
        return None, False
    return cached("padding_and_causal", (hidden,), (groups, kv_bsz), lambda h: _padding_and_causal(h, groups, kv_bsz))
