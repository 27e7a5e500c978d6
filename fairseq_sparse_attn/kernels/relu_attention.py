"""Fused ReLU attention in Triton: ReLA's ``relu`` and ReLUFormer's ``relu_scaled``,
forward and backward, without materializing the (tgt x src) weights.

    s_ij   = scale * q_i . k_j                                  (fp32 accumulation)
    w_ij   = c_i * max(s_ij, 0)   for a visible key j, else 0
    out_i  = sum_j w_ij v_j
    c_i    = 1                                    (relu, ReLA Eq. 3)
    c_i    = row_coef / sqrt(max(n_i, 1))         (relu_scaled, ReLUFormer Eq. 6 with
                                                   row_coef = sqrt(2) / gamma, i.e.
                                                   c_i = 1 / (gamma sqrt(n_i / 2)))

n_i is the number of keys query i may see (not padding, and, with ``causal``, j <= i + S - T:
teacher forcing when T = S, the last T queries of a longer key sequence otherwise).  A row
with no visible key or no positive score gives exactly 0 (nothing is divided by a sum, so
no NaN can arise).  ReLU attention needs no row maximum and no row sum, so the forward is
one pass over the keys, accumulating in fp32, and the only per-row state kept for the
backward is c_i (``relu_scaled`` only).

Backward (``c_i`` does not depend on q or k):

    dV_j  = sum_i w_ij dO_i
    dS_ij = c_i (dO_i . v_j) [s_ij > 0, j visible]
    dQ_i  = scale sum_j dS_ij k_j          (dQ pass: one program per query block)
    dK_j  = scale sum_i dS_ij q_i          (dK/dV pass: one program per key block, looping
                                            over every query of every beam group)

Two forms.  The one-pass backward (fp16/bf16, the default): the dK/dV pass also computes
each tile's dS^T k and adds it into an fp32 dQ with atomic adds (5 dots per pair of tiles,
one launch; dQ's sums are added in a varying order, so dQ is reproducible to rounding only).
The two passes (fp32, and every dtype under ``torch.use_deterministic_algorithms``): the
dK/dV pass and a dQ pass, no atomics, each output element written by one program (7 dots,
the scores recomputed in each pass, bit-for-bit reproducible).

Masking costs instructions in every element of every tile, so each loop masks only what
its keys need: keys past S and rows past T are loaded as zeros (score 0, nothing flows), the
causal cut is compared element by element only in the blocks it crosses (a loop over the
blocks every row sees whole comes first), and padding is a per-key predicate in loops of
their own (the dK/dV pass loads padded keys as zeros once per program instead); one program
per (block, batch entry, head).

Attention dropout (``dropout_p`` > 0, constexpr ``DROPOUT``): w_ij is kept with probability
1 - p and the kept weights are divided by 1 - p, as ``torch.nn.Dropout`` does to the
weights.  Whether w_ij is kept is a function of the element alone (:func:`_kept`: Philox-
4x32-10 under the call's 64-bit seed at the counter (key j, query i, b * H + h, 0)), so the
forward and both backwards, each with its own tiles, drop the same weights without storing
a mask; the seed is one int64 drawn on the device from torch's generator per call
(:func:`draw_seed`).  The backward: dV_j = sum_i kept w_ij dO_i / (1 - p) and dS_ij carries
kept_ij / (1 - p).

Masks: key padding ``(B_kv, S)`` bool (True = padding), ``causal``, and ``kv_groups``: the
queries' batch is ``B = B_kv * kv_groups`` (beam search keeps one copy of the encoder keys
per sentence, query batch entry b reads key copy b // kv_groups, as
``attention.core._scores``).  Cross-attention is T != S.

Dtypes: fp32 (IEEE dots: ``input_precision="ieee"``), fp16 and bf16, fp32 accumulation;
the weights are rounded to the value dtype before the value mix, as FlashAttention does
(``relu_scaled``: the forward rounds max(s_ij, 0) and multiplies the row's sum by c_i, the
backward's dV rounds c_i max(s_ij, 0): the same to rounding.  A score above the dtype's
largest value, 65,504 in fp16, is inf in the forward even where c_i would bring it back in
range, as it is in the eager path's fp16 scores).
Head dims 32, 64, 128, 256 (:data:`HEAD_DIMS`).

Torch ops (:mod:`.ops`), one per kernel: ``fsa::relu_attention_fwd`` (differentiable:
its autograd runs :class:`_ReluAttention`), ``fsa::relu_attention_bwd`` (one pass),
``fsa::relu_attention_bwd_dkdv``, ``fsa::relu_attention_bwd_dq`` (two passes), each with a
fake implementation for ``torch.compile``; :func:`relu_attention` is the differentiable
entry.

Devices (:mod:`.launch`, shared with :mod:`.output_norm`): CUDA tensors run the compiled
kernels; CPU tensors run the *same kernel source* through Triton's interpreter (slow, for
tests and CI: ``TRITON_INTERPRET`` is not needed, the interpreted form is built
explicitly, so the choice does not depend on the order in which modules were imported).  Interpreter limits: bf16 ``tl.dot`` is wrong there, so an
interpreted bf16 launch upcasts the (bf16-rounded) dot operands to fp32 (constexpr
``UPCAST``, the only difference to the GPU configuration; the products of two bf16 numbers
are exact in fp32, so this is what the tensor cores compute); races never show (programs
run one after another).

Launch configurations: :func:`launch_configs` lists every (kernel, head dim, dtype, tier)
configuration; :func:`_config` picks among them and nothing else, so compiling the list
ahead of time covers every launch.  Masks and the row scale are run-time arguments (not
constexprs), so there are 3 kernels x 4 head dims x 3 dtypes = 36 configurations, 8 of
the one-pass backward (4 head dims x fp16, bf16), and 12 of the long tier: calls whose
queries and keys both number :data:`LONG_FROM` or more take larger tiles (:data:`_LONG_TILES`:
the forward and the dQ pass at head dims 32, 64, 128 in fp16 and bf16); each of these 56
again with attention dropout (``..._dropout``, some on tiles of their own:
:data:`_DROPOUT_TILES`), and each of those 112 again with the row sums (``..._rowsums``,
:data:`_ROW_SUMS_TILES`), 224 in all.

ReLUFormer's row sums (constexpr ``ROW_SUMS``, :func:`relu_attention_with_row_sums`): the
regularized criterion needs sum_j w_ij and sum_j w_ij log w_ij of the weights before
dropout.  The forward adds each tile's sum_j r_ij and sum_j r_ij log r_ij (r = max(s, 0),
fp32, 0 log 0 = 0) into per-row fp32 sums and stores them as a (B, H, T, 2) tensor; with
w = c r, torch makes sum w = c sum r and sum w log w = c sum r log r + c log c sum r.  The
backward's kernels, given the sums' gradients (g_sum, g_log), add g_sum + g_log (log r + 1)
to dS_ij / scale on every visible key with r > 0 (kept by dropout or not: the sums are of
the weights before it), in both backwards.
"""

import functools
import math
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from . import launch as launching
from . import ops
from .launch import LaunchPlan, kernel_forms, plan_cache, remember
from .rounding import rounded
from .served import DTYPES, HEAD_DIMS, unserved, unserved_sizes

__all__ = ["HEAD_DIMS", "DTYPES", "launch_configs", "relu_attention", "relu_attention_with_row_sums", "unsupported"]

_TRITON_DTYPE = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


# --------------------------------------------------------------------------- kernels
@triton.jit
def _kv_tile(k_base, v_base, offs_n, offs_d, S, stride_ks, stride_vs, UPCAST: tl.constexpr):
    """The (keys, D) tiles of k and v at keys ``offs_n``, keys past S as zeros (their
    scores are 0: no mask needed), fp32 when ``UPCAST``."""
    key_ok = offs_n < S
    # k as a (keys, D) tile, transposed in the dot (as the dQ pass does): a (D, keys)
    # load read through swapped strides gave wrong fp32 results at D >= 128 on an H100
    # (Triton 3.6.0; docs/performance.md "GPU")
    k = tl.load(k_base + offs_n[:, None] * stride_ks + offs_d[None, :], mask=key_ok[:, None], other=0.0)
    v = tl.load(v_base + offs_n[:, None] * stride_vs + offs_d[None, :], mask=key_ok[:, None], other=0.0)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    return k, v


@triton.jit
def _key_ranges(pid_m, S, shift, causal, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """(whole, hi) of the query block ``pid_m``: every row of it sees the keys [0, whole)
    (but padding; whole key blocks), some row sees [0, hi); query i sees keys j <= i + shift
    when ``causal``."""
    hi = S
    whole = S
    if causal != 0:
        hi = tl.minimum(S, (pid_m + 1) * BLOCK_M + shift)
        whole = tl.minimum(tl.maximum(pid_m * BLOCK_M + shift + 1, 0) // BLOCK_N * BLOCK_N, hi)
    return whole, hi


@triton.jit
def _kept(seed, rows, keys, bh, drop_p):
    """Attention dropout's decision for the weights of queries ``rows`` and keys ``keys``
    (index tiles that broadcast to one (queries, keys) or (keys, queries) tile) of batch entry
    and head ``bh`` = b * H + h: Philox-4x32-10 (Triton's ``tl.philox``) under the call's
    64-bit ``seed`` at the counter (key, query, bh, 0); its first word as a uniform number in
    [0, 1) (``tl.uint_to_uniform_float``); the weight is kept when that number is >= p.  The
    counter names the element, not the tile or the program, so the forward and both
    backwards, whatever their tiles, drop the same weights."""
    rows, keys = tl.broadcast(rows, keys)
    zero = tl.zeros_like(rows).to(tl.uint32)
    word, _, _, _ = tl.philox(seed, keys.to(tl.uint32), rows.to(tl.uint32), zero + bh.to(tl.uint32), zero)
    return tl.uint_to_uniform_float(word) >= drop_p


@triton.jit
def _row_sums_grad(r, active, g_sum, g_log):
    """The gradient that the row sums' gradients (``g_sum`` of sum_j r_ij, ``g_log`` of
    sum_j r_ij log r_ij) send to the scores r of the ``active`` elements (visible, r > 0;
    the others' relu passes nothing): g_sum + g_log (log r + 1).  Dropout plays no part:
    the sums are of the weights before it."""
    return tl.where(active, g_sum + g_log * (tl.log(tl.maximum(r, 1e-30)) + 1.0), 0.0)


@triton.jit
def _fwd_tile(
    acc, rsum, rlog, q, k_base, v_base, pad_base, start_n, offs_m, offs_d, stride_ks, stride_vs,
    S, shift, scale, seed, bh, drop_p,
    VT: tl.constexpr, PADDED: tl.constexpr, CAUSAL_CUT: tl.constexpr, BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr, DROPOUT: tl.constexpr, ROW_SUMS: tl.constexpr,
):  # fmt: skip
    """``acc + rne(relu(s)) v`` over the keys [start_n, start_n + BLOCK_N).  Keys past S are
    loaded as zeros (s = 0: nothing added) and so are the rows past T (q = 0), so neither
    needs a mask on the scores; padding is one predicate per key, and the causal cut is
    compared element by element only in the blocks it crosses (``CAUSAL_CUT``).  With
    ``DROPOUT`` the dropped weights are zeroed (:func:`_kept`; the kept ones are scaled by
    1 / (1 - p) once, on the accumulated row).  With ``ROW_SUMS`` the per-row fp32 ``rsum``
    and ``rlog`` add the tile's sums of relu(s) and relu(s) log relu(s) before dropout
    (0 log 0 = 0)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k, v = _kv_tile(k_base, v_base, offs_n, offs_d, S, stride_ks, stride_vs, UPCAST)
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
    if PADDED:
        pad = tl.load(pad_base + offs_n, mask=offs_n < S, other=0)
        s = tl.where((pad == 0)[None, :], s, 0.0)
    if CAUSAL_CUT:
        s = tl.where(offs_n[None, :] <= offs_m[:, None] + shift, s, 0.0)
    p = tl.maximum(s, 0.0)
    if ROW_SUMS:
        rsum += tl.sum(p, axis=1)
        rlog += tl.sum(p * tl.log(tl.maximum(p, 1e-30)), axis=1)  # 0 log 0 = 0 (0 * log 1e-30)
    if DROPOUT:
        p = tl.where(_kept(seed, offs_m[:, None], offs_n[None, :], bh, drop_p), p, 0.0)
    p = rounded(p, VT, UPCAST)
    return tl.dot(p, v, acc, input_precision=PRECISION), rsum, rlog


def _relu_attention_fwd(
    Q, K, V, PAD, O, RS, SEED, SUMS,
    stride_qb, stride_qh, stride_qt,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_ot,
    stride_pb,
    H, G, T, S,
    scale, row_coef, drop_p, keep_scale,
    has_pad, causal, row_scaled,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr, DROPOUT: tl.constexpr, ROW_SUMS: tl.constexpr,
):  # fmt: skip
    """One program per (query block, batch, head): out = c * sum_j relu(s_ij) v_j; with
    ``DROPOUT``, out = c / (1 - p) * sum_j kept_ij relu(s_ij) v_j (``keep_scale`` = 1 / (1 - p),
    0 for p = 1).  With ``ROW_SUMS`` also sum_j relu(s_ij) and sum_j relu(s_ij) log relu(s_ij)
    (before dropout, without c) into the fp32 (B, H, T, 2) ``SUMS``."""
    pid_m = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    h = tl.program_id(2).to(tl.int64)
    kb = b // G
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    row_ok = offs_m < T
    q = tl.load(
        Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :],
        mask=row_ok[:, None],
        other=0.0,
    )
    if UPCAST:
        q = q.to(tl.float32)
    k_base = K + kb * stride_kb + h * stride_kh
    v_base = V + kb * stride_vb + h * stride_vh
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    # the row sums (summed per tile: (queries, keys) accumulators spilled at the larger tiles;
    # without ROW_SUMS they are never changed, and the compiler drops them)
    rsum = tl.zeros([BLOCK_M], dtype=tl.float32)
    rlog = tl.zeros([BLOCK_M], dtype=tl.float32)
    pad_base = PAD + kb * stride_pb
    shift = S - T  # query i sees keys j <= i + shift when causal
    whole, hi = _key_ranges(pid_m, S, shift, causal, BLOCK_M, BLOCK_N)
    seed = 0
    if DROPOUT:
        seed = tl.load(SEED)
    bh = b * H + h
    # four forms of one loop, each masking only what its keys need (padding: a per-key
    # predicate; the causal cut: element by element, only in the blocks it crosses)
    if has_pad != 0:
        for start_n in range(0, whole, BLOCK_N):
            acc, rsum, rlog = _fwd_tile(acc, rsum, rlog, q, k_base, v_base, pad_base, start_n, offs_m, offs_d,
                stride_ks, stride_vs, S, shift, scale, seed, bh, drop_p, V.dtype.element_ty, True, False, BLOCK_N,
                UPCAST, PRECISION, DROPOUT, ROW_SUMS)  # fmt: skip
        for start_n in range(whole, hi, BLOCK_N):
            acc, rsum, rlog = _fwd_tile(acc, rsum, rlog, q, k_base, v_base, pad_base, start_n, offs_m, offs_d,
                stride_ks, stride_vs, S, shift, scale, seed, bh, drop_p, V.dtype.element_ty, True, True, BLOCK_N,
                UPCAST, PRECISION, DROPOUT, ROW_SUMS)  # fmt: skip
    else:
        for start_n in range(0, whole, BLOCK_N):
            acc, rsum, rlog = _fwd_tile(acc, rsum, rlog, q, k_base, v_base, pad_base, start_n, offs_m, offs_d,
                stride_ks, stride_vs, S, shift, scale, seed, bh, drop_p, V.dtype.element_ty, False, False, BLOCK_N,
                UPCAST, PRECISION, DROPOUT, ROW_SUMS)  # fmt: skip
        for start_n in range(whole, hi, BLOCK_N):
            acc, rsum, rlog = _fwd_tile(acc, rsum, rlog, q, k_base, v_base, pad_base, start_n, offs_m, offs_d,
                stride_ks, stride_vs, S, shift, scale, seed, bh, drop_p, V.dtype.element_ty, False, True, BLOCK_N,
                UPCAST, PRECISION, DROPOUT, ROW_SUMS)  # fmt: skip
    if row_scaled != 0:
        # n_i, the keys row i sees, in a loop of its own over the padding mask: counted in
        # the loop above, in the dots' register layout, the row sums took 80 shuffles and
        # ~40% of the forward's instructions (SASS, sm_90, d 64 fp16), for ReLA too
        count = tl.zeros([BLOCK_M], dtype=tl.float32)
        for start_n in range(0, hi, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            key_ok = offs_n < S
            pad = tl.load(PAD + kb * stride_pb + offs_n, mask=key_ok & (has_pad != 0), other=0)
            visible = (key_ok & (pad == 0))[None, :] & row_ok[:, None]
            if causal != 0:
                visible = visible & (offs_n[None, :] <= offs_m[:, None] + shift)
            count += tl.sum(visible.to(tl.float32), axis=1)
        c = row_coef / tl.sqrt(tl.maximum(count, 1.0))
        acc = acc * c[:, None]
        tl.store(RS + (b * H + h) * T + offs_m, c, mask=row_ok)
    if ROW_SUMS:
        sums_base = SUMS + ((b * H + h) * T + offs_m) * 2
        tl.store(sums_base, rsum, mask=row_ok)
        tl.store(sums_base + 1, rlog, mask=row_ok)
    if DROPOUT:
        acc = acc * keep_scale
    tl.store(
        O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_ot + offs_d[None, :],
        rounded(acc, O.dtype.element_ty, UPCAST),
        mask=row_ok[:, None],
    )


@triton.jit
def _dkdv_tile(
    dk, dv, k, v, q_base, do_base, rs_base, gs_base, dq_base, start_m, offs_n, offs_d,
    stride_qt, stride_dot, stride_dqt, T, shift, scale, row_scaled, seed, bh, drop_p, keep_scale,
    QT: tl.constexpr, DOT: tl.constexpr, CAUSAL_CUT: tl.constexpr, BLOCK_M: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr, WITH_DQ: tl.constexpr, DROPOUT: tl.constexpr,
    ROW_SUMS: tl.constexpr,
):  # fmt: skip
    """(dk, dv) plus the queries [start_m, start_m + BLOCK_M)'s share, and with ``WITH_DQ``
    their dQ share added into the fp32 accumulator.  Rows past T are loaded as zeros (s = 0:
    nothing flows), padded keys came as zeros, so only the causal cut needs an element mask,
    in the blocks it crosses (``CAUSAL_CUT``).  With ``DROPOUT`` the weights the forward
    dropped pass nothing (:func:`_kept`, transposed), and dS carries the kept ones' 1 / (1 - p)
    (``keep_scale``; dV takes it once, at the end of the pass).  With ``ROW_SUMS`` dS also
    carries the row sums' gradients (:func:`_row_sums_grad`)."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    row_ok = offs_m < T
    q = tl.load(q_base + offs_m[:, None] * stride_qt + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    do = tl.load(do_base + offs_m[:, None] * stride_dot + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    st = tl.dot(k, tl.trans(q), input_precision=PRECISION) * scale  # (keys, queries)
    active = st > 0.0
    if CAUSAL_CUT:
        active = active & (offs_n[:, None] <= offs_m[None, :] + shift)
    positive = active  # ... and kept by dropout
    ds_scale = scale
    if DROPOUT:
        positive = active & _kept(seed, offs_m[None, :], offs_n[:, None], bh, drop_p)
        ds_scale = scale * keep_scale
    dpt = tl.dot(v, tl.trans(do), input_precision=PRECISION)  # dO_i . v_j
    # c_i loaded without a branch (1 where not row-scaled: the product is exact): a load
    # under `if row_scaled` inside this loop made Triton 3.6.0's software pipeliner fail
    # ("PassManager::run failed"), so this pass ran unpipelined
    c = tl.load(rs_base + offs_m, mask=row_ok & (row_scaled != 0), other=1.0)
    wt = rounded(tl.where(positive, st * c[None, :], 0.0), DOT, UPCAST)
    if ROW_SUMS:
        g_sum = tl.load(gs_base + offs_m * 2, mask=row_ok, other=0.0)
        g_log = tl.load(gs_base + offs_m * 2 + 1, mask=row_ok, other=0.0)
        dst = tl.where(positive, dpt * c[None, :], 0.0) * ds_scale
        dst = rounded(dst + _row_sums_grad(st, active, g_sum[None, :], g_log[None, :]) * scale, QT, UPCAST)
    else:
        dst = rounded(tl.where(positive, dpt * c[None, :], 0.0) * ds_scale, QT, UPCAST)
    dv = tl.dot(wt, do, dv, input_precision=PRECISION)
    dk = tl.dot(dst, q, dk, input_precision=PRECISION)
    if WITH_DQ:  # compiled out of the two-pass form
        dq = tl.dot(tl.trans(dst), k, input_precision=PRECISION)  # (queries, D)
        tl.atomic_add(dq_base + offs_m[:, None] * stride_dqt + offs_d[None, :], dq, mask=row_ok[:, None], sem="relaxed")
    return dk, dv


def _relu_attention_bwd_dkdv(
    Q, K, V, PAD, DO, RS, SEED, GSUMS, DK, DV, DQ_ACC,
    stride_qb, stride_qh, stride_qt,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_dob, stride_doh, stride_dot,
    stride_dkb, stride_dkh, stride_dks,
    stride_dvb, stride_dvh, stride_dvs,
    stride_dqb, stride_dqh, stride_dqt,
    stride_pb,
    H, G, T, S,
    scale, drop_p, keep_scale,
    has_pad, causal, row_scaled,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr, WITH_DQ: tl.constexpr, DROPOUT: tl.constexpr,
    ROW_SUMS: tl.constexpr,
):  # fmt: skip
    """One program per (key block, key batch, head), looping over the queries of every
    beam group: dV_j = sum_i w_ij dO_i, dK_j = scale sum_i dS_ij q_i (transposed tiles).
    With ``WITH_DQ`` (the one-pass backward) it also adds this block's share of
    dQ_i = scale sum_j dS_ij k_j into the fp32 ``DQ_ACC`` with atomic adds."""
    pid_n = tl.program_id(0)
    kb = tl.program_id(1).to(tl.int64)
    h = tl.program_id(2).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    key_ok = offs_n < S
    if has_pad != 0:  # padded keys as zeros: their scores are 0, so nothing flows to or from them
        pad = tl.load(PAD + kb * stride_pb + offs_n, mask=key_ok, other=1)
        key_ok = key_ok & (pad == 0)
    k = tl.load(
        K + kb * stride_kb + h * stride_kh + offs_n[:, None] * stride_ks + offs_d[None, :],
        mask=key_ok[:, None],
        other=0.0,
    )
    v = tl.load(
        V + kb * stride_vb + h * stride_vh + offs_n[:, None] * stride_vs + offs_d[None, :],
        mask=key_ok[:, None],
        other=0.0,
    )
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    shift = S - T
    lo = pid_n * 0  # the queries some of this block's keys are visible to: [lo, T)
    cut_end = lo  # ... and those the causal cut crosses: [lo, cut_end)
    if causal != 0:
        lo = tl.maximum(pid_n * BLOCK_N - shift, 0) // BLOCK_M * BLOCK_M
        # the first query that sees every key of the block, rounded up to a query block
        first_whole = tl.maximum((pid_n + 1) * BLOCK_N - 1 - shift, 0)
        cut_end = tl.minimum(tl.maximum((first_whole + BLOCK_M - 1) // BLOCK_M * BLOCK_M, lo), T)
    seed = 0
    if DROPOUT:
        seed = tl.load(SEED)
    for g in range(0, G):
        b = kb * G + g
        bh = b * H + h
        q_base = Q + b * stride_qb + h * stride_qh
        do_base = DO + b * stride_dob + h * stride_doh
        rs_base = RS + (b * H + h) * T
        gs_base = GSUMS + (b * H + h) * T * 2
        dq_base = DQ_ACC + b * stride_dqb + h * stride_dqh
        for start_m in range(lo, cut_end, BLOCK_M):
            dk, dv = _dkdv_tile(dk, dv, k, v, q_base, do_base, rs_base, gs_base, dq_base, start_m, offs_n, offs_d,
                stride_qt, stride_dot, stride_dqt, T, shift, scale, row_scaled, seed, bh, drop_p, keep_scale,
                Q.dtype.element_ty, DO.dtype.element_ty, True, BLOCK_M, UPCAST, PRECISION, WITH_DQ, DROPOUT,
                ROW_SUMS)  # fmt: skip
        for start_m in range(cut_end, T, BLOCK_M):
            dk, dv = _dkdv_tile(dk, dv, k, v, q_base, do_base, rs_base, gs_base, dq_base, start_m, offs_n, offs_d,
                stride_qt, stride_dot, stride_dqt, T, shift, scale, row_scaled, seed, bh, drop_p, keep_scale,
                Q.dtype.element_ty, DO.dtype.element_ty, False, BLOCK_M, UPCAST, PRECISION, WITH_DQ, DROPOUT,
                ROW_SUMS)  # fmt: skip
    if DROPOUT:
        dv = dv * keep_scale
    key_in = offs_n < S
    tl.store(
        DK + kb * stride_dkb + h * stride_dkh + offs_n[:, None] * stride_dks + offs_d[None, :],
        rounded(dk, DK.dtype.element_ty, UPCAST),
        mask=key_in[:, None],
    )
    tl.store(
        DV + kb * stride_dvb + h * stride_dvh + offs_n[:, None] * stride_dvs + offs_d[None, :],
        rounded(dv, DV.dtype.element_ty, UPCAST),
        mask=key_in[:, None],
    )


@triton.jit
def _dq_tile(
    dq, q, do, c, g_sum, g_log, k_base, v_base, pad_base, start_n, offs_m, offs_d, stride_ks, stride_vs, S, shift,
    scale, ds_scale, seed, bh, drop_p,
    QT: tl.constexpr, PADDED: tl.constexpr, CAUSAL_CUT: tl.constexpr, BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr, DROPOUT: tl.constexpr, ROW_SUMS: tl.constexpr,
):  # fmt: skip
    """``dq + dS k`` over the keys [start_n, start_n + BLOCK_N), masked as :func:`_fwd_tile`
    masks (keys past S and rows past T are zeros, no mask needed); dS carries ``ds_scale``
    (the scale, times 1 / (1 - p) with ``DROPOUT``, whose dropped weights pass nothing), and
    with ``ROW_SUMS`` the row sums' gradients (:func:`_row_sums_grad`)."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    k, v = _kv_tile(k_base, v_base, offs_n, offs_d, S, stride_ks, stride_vs, UPCAST)
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
    active = s > 0.0
    if PADDED:
        pad = tl.load(pad_base + offs_n, mask=offs_n < S, other=0)
        active = active & (pad == 0)[None, :]
    if CAUSAL_CUT:
        active = active & (offs_n[None, :] <= offs_m[:, None] + shift)
    positive = active  # ... and kept by dropout
    if DROPOUT:
        positive = active & _kept(seed, offs_m[:, None], offs_n[None, :], bh, drop_p)
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
    if ROW_SUMS:
        ds = tl.where(positive, dp * c[:, None], 0.0) * ds_scale
        ds = rounded(ds + _row_sums_grad(s, active, g_sum[:, None], g_log[:, None]) * scale, QT, UPCAST)
    else:
        ds = rounded(tl.where(positive, dp * c[:, None], 0.0) * ds_scale, QT, UPCAST)
    return tl.dot(ds, k, dq, input_precision=PRECISION)


def _relu_attention_bwd_dq(
    Q, K, V, PAD, DO, RS, SEED, GSUMS, DQ,
    stride_qb, stride_qh, stride_qt,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_dob, stride_doh, stride_dot,
    stride_dqb, stride_dqh, stride_dqt,
    stride_pb,
    H, G, T, S,
    scale, drop_p, keep_scale,
    has_pad, causal, row_scaled,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr, DROPOUT: tl.constexpr, ROW_SUMS: tl.constexpr,
):  # fmt: skip
    """One program per (query block, batch, head): dQ_i = scale sum_j dS_ij k_j."""
    pid_m = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    h = tl.program_id(2).to(tl.int64)
    kb = b // G
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    row_ok = offs_m < T
    q = tl.load(
        Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :],
        mask=row_ok[:, None],
        other=0.0,
    )
    do = tl.load(
        DO + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dot + offs_d[None, :],
        mask=row_ok[:, None],
        other=0.0,
    )
    if UPCAST:
        q = q.to(tl.float32)
        do = do.to(tl.float32)
    c = tl.full([BLOCK_M], 1.0, dtype=tl.float32)
    if row_scaled != 0:
        c = tl.load(RS + (b * H + h) * T + offs_m, mask=row_ok, other=0.0)
    g_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    g_log = tl.zeros([BLOCK_M], dtype=tl.float32)
    if ROW_SUMS:
        g_sum = tl.load(GSUMS + ((b * H + h) * T + offs_m) * 2, mask=row_ok, other=0.0)
        g_log = tl.load(GSUMS + ((b * H + h) * T + offs_m) * 2 + 1, mask=row_ok, other=0.0)
    k_base = K + kb * stride_kb + h * stride_kh
    v_base = V + kb * stride_vb + h * stride_vh
    dq = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    pad_base = PAD + kb * stride_pb
    shift = S - T
    whole, hi = _key_ranges(pid_m, S, shift, causal, BLOCK_M, BLOCK_N)
    seed = 0
    ds_scale = scale
    if DROPOUT:
        seed = tl.load(SEED)
        ds_scale = scale * keep_scale
    bh = b * H + h
    if has_pad != 0:
        for start_n in range(0, whole, BLOCK_N):
            dq = _dq_tile(dq, q, do, c, g_sum, g_log, k_base, v_base, pad_base, start_n, offs_m, offs_d, stride_ks,
                stride_vs, S, shift, scale, ds_scale, seed, bh, drop_p, Q.dtype.element_ty, True, False, BLOCK_N, UPCAST,
                PRECISION, DROPOUT, ROW_SUMS)  # fmt: skip
        for start_n in range(whole, hi, BLOCK_N):
            dq = _dq_tile(dq, q, do, c, g_sum, g_log, k_base, v_base, pad_base, start_n, offs_m, offs_d, stride_ks,
                stride_vs, S, shift, scale, ds_scale, seed, bh, drop_p, Q.dtype.element_ty, True, True, BLOCK_N, UPCAST,
                PRECISION, DROPOUT, ROW_SUMS)  # fmt: skip
    else:
        for start_n in range(0, whole, BLOCK_N):
            dq = _dq_tile(dq, q, do, c, g_sum, g_log, k_base, v_base, pad_base, start_n, offs_m, offs_d, stride_ks,
                stride_vs, S, shift, scale, ds_scale, seed, bh, drop_p, Q.dtype.element_ty, False, False, BLOCK_N, UPCAST,
                PRECISION, DROPOUT, ROW_SUMS)  # fmt: skip
        for start_n in range(whole, hi, BLOCK_N):
            dq = _dq_tile(dq, q, do, c, g_sum, g_log, k_base, v_base, pad_base, start_n, offs_m, offs_d, stride_ks,
                stride_vs, S, shift, scale, ds_scale, seed, bh, drop_p, Q.dtype.element_ty, False, True, BLOCK_N, UPCAST,
                PRECISION, DROPOUT, ROW_SUMS)  # fmt: skip
    tl.store(
        DQ + b * stride_dqb + h * stride_dqh + offs_m[:, None] * stride_dqt + offs_d[None, :],
        rounded(dq, DQ.dtype.element_ty, UPCAST),
        mask=row_ok[:, None],
    )


#: sizes and flags vary from call to call: one binary for every value (Triton would
#: otherwise compile a separate one where a value happens to be 1)
_NOT_SPECIALIZED = ("H", "G", "T", "S", "has_pad", "causal", "row_scaled")

#: kernel name -> (compiled form for CUDA tensors, interpreted form for CPU tensors)
_KERNELS = {
    fn.__name__.lstrip("_"): kernel_forms(fn, do_not_specialize=_NOT_SPECIALIZED)
    for fn in (_relu_attention_fwd, _relu_attention_bwd_dkdv, _relu_attention_bwd_dq)
}
#: the one-pass backward: the dK/dV kernel with WITH_DQ (its own configurations, on dK/dV's tiles)
_KERNELS["relu_attention_bwd"] = _KERNELS["relu_attention_bwd_dkdv"]

# --------------------------------------------------------------------------- configurations
#: (kernel, half = fp16/bf16 or fp32, head dim) -> (BLOCK_M, BLOCK_N, num_warps, num_stages).
#: BLOCK_M: queries per tile, BLOCK_N: keys per tile.  Sized for sentence-length calls
#: (tens of tokens: small tiles waste less on padding rows) and for the shared memory of
#: sm_80 (164 KiB) and sm_90 (227 KiB); the fp32 tiles are half as large.
_TILES: Dict[Tuple[str, bool, int], Tuple[int, int, int, int]] = {}
for _d, _half, _fwd, _dkdv, _dq in (
    (32, True, (64, 32, 4, 3), (32, 64, 4, 2), (64, 64, 8, 2)),
    (64, True, (64, 32, 4, 3), (16, 64, 4, 2), (64, 64, 8, 2)),
    (128, True, (64, 64, 8, 2), (16, 64, 8, 2), (64, 64, 8, 2)),
    (256, True, (64, 32, 8, 2), (16, 32, 8, 2), (64, 32, 8, 2)),
    (32, False, (32, 32, 4, 2), (32, 32, 4, 2), (32, 16, 4, 2)),
    (64, False, (64, 32, 8, 2), (16, 32, 4, 2), (32, 32, 8, 2)),
    (128, False, (32, 32, 4, 2), (32, 32, 8, 1), (16, 32, 8, 1)),
    (256, False, (32, 16, 8, 1), (16, 16, 8, 1), (32, 16, 8, 1)),
):
    _TILES[("relu_attention_fwd", _half, _d)] = _fwd
    _TILES[("relu_attention_bwd_dkdv", _half, _d)] = _dkdv
    _TILES[("relu_attention_bwd_dq", _half, _d)] = _dq
    if _half:  # the one-pass backward: the dK/dV kernel with WITH_DQ, on dK/dV's tiles (so
        # its dK and dV are those of the two passes, bit for bit); fp16/bf16 only: fp32's FMA
        # dots leave no registers for the dQ tile (every fp32 tile tried spilled on sm_80 or
        # sm_90 under Triton 3.6.0 or 3.7.1), so fp32 takes the two passes (ONE_PASS_DTYPES)
        _TILES[("relu_attention_bwd", _half, _d)] = _dkdv
#: calls whose queries and keys both number at least this take the long tier's tiles
#: (:data:`_LONG_TILES`) where it has one: the sentence tiles above are sized for tens of
#: tokens, and on long calls their 64-query blocks read every key and value block once per
#: 64 queries and issue more instructions per score than a 128-query block (compiled for
#: sm_90, fp16, head dim 64: the forward's loop 7.7 -> 5.5 thread-instructions per score
#: element, the dQ pass's 19.5 -> 9.1; docs/performance.md "Long calls take larger tiles")
LONG_FROM = 1024
#: (kernel, head dim) -> (BLOCK_M, BLOCK_N, num_warps, num_stages) of the long tier, fp16 and
#: bf16 only.  Each was compiled for sm_80 and sm_90 under Triton 3.6.0 and 3.7.1 without
#: spills; the dK/dV pass keeps its sentence tiles (no candidate had both fewer
#: instructions per score and no spills), and so do head dim 256 and fp32.
_LONG_TILES: Dict[Tuple[str, int], Tuple[int, int, int, int]] = {
    ("relu_attention_fwd", 32): (128, 64, 8, 3),
    ("relu_attention_fwd", 64): (128, 64, 8, 3),
    ("relu_attention_fwd", 128): (128, 32, 8, 3),
    ("relu_attention_bwd_dq", 32): (128, 64, 8, 3),
    ("relu_attention_bwd_dq", 64): (128, 64, 8, 3),
    ("relu_attention_bwd_dq", 128): (128, 32, 8, 2),
}
#: (kernel, half, head dim, long) -> the tile of a kernel's attention-dropout form where it
#: differs from the form without (:data:`_TILES`, :data:`_LONG_TILES`).  The Philox state of
#: every element of a tile (4 words through 10 rounds) takes registers beside the
#: accumulators: on the tiles without dropout these forms spilled (``make check-kernels``:
#: 15 configurations under Triton 3.7.1, 18 under 3.6.0, all backward).  Each tile below
#: compiled for sm_80 and sm_90 under both Triton versions without spills, chosen among the
#: candidates of a search (the same tile with 8 warps, other stage counts, the same area
#: reshaped, half the area) preferring the fewest changes and a pipelined loop (2+ stages;
#: head dim 256's dK/dV pass had none without spills); the one-pass backward keeps the dK/dV
#: pass's tile (its dK and dV equal the two passes', bit for bit).
_DROPOUT_TILES: Dict[Tuple[str, bool, int, bool], Tuple[int, int, int, int]] = {
    ("relu_attention_bwd_dkdv", True, 32, False): (32, 64, 8, 2),  # was (32, 64, 4, 2)
    ("relu_attention_bwd_dkdv", True, 64, False): (16, 64, 8, 2),  # (16, 64, 4, 2)
    ("relu_attention_bwd_dkdv", True, 128, False): (32, 32, 8, 2),  # (16, 64, 8, 2)
    ("relu_attention_bwd_dkdv", True, 256, False): (16, 32, 8, 1),  # (16, 32, 8, 2)
    ("relu_attention_bwd_dkdv", False, 32, False): (32, 32, 4, 3),  # (32, 32, 4, 2)
    ("relu_attention_bwd_dkdv", False, 128, False): (32, 32, 8, 2),  # (32, 32, 8, 1)
    ("relu_attention_bwd_dq", True, 128, False): (64, 32, 8, 2),  # (64, 64, 8, 2)
    ("relu_attention_bwd_dq", True, 256, False): (64, 16, 8, 2),  # (64, 32, 8, 2)
    ("relu_attention_bwd_dq", False, 128, False): (16, 16, 8, 1),  # (16, 32, 8, 1)
    ("relu_attention_bwd_dq", True, 64, True): (128, 32, 8, 3),  # (128, 64, 8, 3)
    ("relu_attention_bwd_dq", True, 128, True): (128, 16, 8, 2),  # (128, 32, 8, 2)
}
for (_kernel, _half, _d, _long), _tile_with_dropout in list(_DROPOUT_TILES.items()):
    if _kernel == "relu_attention_bwd_dkdv" and _half:
        _DROPOUT_TILES[("relu_attention_bwd", _half, _d, _long)] = _tile_with_dropout
#: (kernel, half, head dim, long, dropout) -> the tile of a kernel's row-sums form
#: (``ROW_SUMS``: ReLUFormer's regularized criterion) where it differs from the tile it
#: starts from: the form's own without row sums, or for the backward kernels the dropout
#: form's (:data:`_DROPOUT_TILES`: the sums' gradient, like Philox, takes registers beside
#: the accumulators).  On those, ``make check-kernels`` found spills in 8 configurations
#: under Triton 3.7.1 and 17 under 3.6.0: the half-precision dK/dV pass and one-pass
#: backward at head dims 32 and 64 on sm_80, fp32's forward and dK/dV pass.  Each tile below compiled for sm_80 and sm_90
#: under both versions without spills, the first such among the candidates of a search (8
#: warps, a stage fewer, half the queries or keys, and their combinations), preferring a
#: pipelined loop (fp32's dK/dV pass at head dim 128 with dropout had none without spills);
#: the one-pass backward keeps the dK/dV pass's tile.
_ROW_SUMS_TILES: Dict[Tuple[str, bool, int, bool, bool], Tuple[int, int, int, int]] = {
    ("relu_attention_fwd", False, 32, False, True): (32, 32, 8, 2),  # was (32, 32, 4, 2)
    ("relu_attention_fwd", False, 128, False, False): (16, 32, 8, 2),  # (32, 32, 4, 2)
    ("relu_attention_fwd", False, 128, False, True): (32, 16, 8, 2),  # (32, 32, 4, 2)
    ("relu_attention_fwd", False, 256, False, False): (16, 16, 4, 2),  # (32, 16, 8, 1)
    ("relu_attention_fwd", False, 256, False, True): (16, 16, 8, 1),  # (32, 16, 8, 1)
    ("relu_attention_bwd_dkdv", False, 32, False, False): (16, 32, 4, 3),  # (32, 32, 4, 3)
    ("relu_attention_bwd_dkdv", False, 64, False, False): (16, 32, 8, 2),  # (16, 32, 4, 2)
    ("relu_attention_bwd_dkdv", False, 128, False, False): (16, 32, 4, 2),  # (32, 32, 8, 2)
    ("relu_attention_bwd_dkdv", False, 128, False, True): (16, 32, 8, 1),  # (32, 32, 8, 2)
    ("relu_attention_bwd_dkdv", True, 32, False, False): (16, 64, 8, 2),  # (32, 64, 8, 2)
    ("relu_attention_bwd_dkdv", True, 32, False, True): (16, 64, 8, 2),  # (32, 64, 8, 2)
    ("relu_attention_bwd_dkdv", True, 64, False, False): (16, 32, 8, 2),  # (16, 64, 8, 2)
    ("relu_attention_bwd_dkdv", True, 64, False, True): (16, 32, 8, 2),  # (16, 64, 8, 2)
}
for (_kernel, _half, _d, _long, _dropout), _tile_with_sums in list(_ROW_SUMS_TILES.items()):
    if _kernel == "relu_attention_bwd_dkdv" and _half:
        _ROW_SUMS_TILES[("relu_attention_bwd", _half, _d, _long, _dropout)] = _tile_with_sums
ONE_PASS_DTYPES = (torch.float16, torch.bfloat16)
#: key length from which the backward takes the two passes in every dtype.  On an H100
#: (2026-11-27, docs/results/bench-gpu.json, head dim 64, fp16 and bf16, full and causal) the
#: one pass's atomic dQ adds (one per key block) cost more than the second pass from 1,024
#: keys: forward+backward against flash 0.65-0.73x one pass, 0.77-0.79x two passes at 4,096
#: keys (all four cases); at 1,024 two passes won two cases, tied one and lost one (geometric
#: means 0.70x and 0.65x); at 32 and 128 keys the one pass won five of eight.
TWO_PASS_FROM_KEYS = 1024

_I32 = "i32"
_CONSTEXPRS = ("D", "BLOCK_M", "BLOCK_N", "UPCAST", "PRECISION", "WITH_DQ", "DROPOUT", "ROW_SUMS")
_FLOATS = ("scale", "row_coef", "drop_p", "keep_scale")
_DATA = ("Q", "K", "V", "O", "DO", "DK", "DV", "DQ")  # tensors in the inputs' dtype


def _signature(kernel: str, dtype: torch.dtype) -> Dict[str, str]:
    """Argument name -> Triton type of ``kernel`` launched on ``dtype`` tensors (the
    kernel's own parameter names, in order)."""
    fn = _KERNELS[kernel][0]
    sig: Dict[str, str] = {}
    for name in fn.arg_names:
        if name in _CONSTEXPRS:
            sig[name] = "constexpr"
        elif name in _FLOATS:
            sig[name] = "fp32"
        elif name == "PAD":  # key padding, viewed as int8
            sig[name] = "*i8"
        elif name in ("RS", "DQ_ACC", "SUMS", "GSUMS"):  # the row factor c, the one-pass
            # backward's dQ sums, the row sums (forward) and their gradients (backward)
            sig[name] = "*fp32"
        elif name == "SEED":  # attention dropout's seed (one int64 on the device)
            sig[name] = "*i64"
        elif name in _DATA:
            sig[name] = "*" + _TRITON_DTYPE[dtype]
        else:  # strides, sizes (H, G, T, S), flags
            sig[name] = _I32
    return sig


def _tile(
    kernel: str, dtype: torch.dtype, head_dim: int, long: bool, dropout: bool = False, row_sums: bool = False
) -> Optional[Tuple[int, int, int, int]]:
    """The tile of ``kernel`` in a tier (``long``: :data:`_LONG_TILES`), None where that
    tier has none (the long tier: fp16/bf16, the kernels and head dims it lists); with
    ``dropout``, the attention-dropout form's (:data:`_DROPOUT_TILES` where it has its own);
    with ``row_sums``, the row-sums form's (:data:`_ROW_SUMS_TILES` where it has its own)."""
    half = dtype != torch.float32
    if long:
        tile = _LONG_TILES.get((kernel, head_dim)) if half else None
    else:
        tile = _TILES.get((kernel, half, head_dim))
    if tile is None:
        return None
    if row_sums:
        own = _ROW_SUMS_TILES.get((kernel, half, head_dim, long, dropout))
        if own is not None:
            return own
    if dropout or row_sums:  # (only backward kernels have dropout tiles: the row sums' need their registers)
        return _DROPOUT_TILES.get((kernel, half, head_dim, long), tile)
    return tile


def _make_config(
    kernel: str, dtype: torch.dtype, head_dim: int, long: bool = False, dropout: bool = False, row_sums: bool = False
) -> dict:
    tile = _tile(kernel, dtype, head_dim, long, dropout, row_sums)
    assert tile is not None, (kernel, dtype, head_dim, long)
    block_m, block_n, warps, stages = tile
    signature = _signature(kernel, dtype)
    constexprs = {"D": head_dim, "BLOCK_M": block_m, "BLOCK_N": block_n, "UPCAST": False, "PRECISION": "ieee"}
    if "WITH_DQ" in signature:
        constexprs["WITH_DQ"] = kernel == "relu_attention_bwd"
    constexprs["DROPOUT"] = dropout
    constexprs["ROW_SUMS"] = row_sums
    return {
        "name": f"{kernel}_d{head_dim}_{_TRITON_DTYPE[dtype]}"
        + ("_long" if long else "")
        + ("_dropout" if dropout else "")
        + ("_rowsums" if row_sums else ""),
        "kernel": _KERNELS[kernel][0],
        "signature": signature,
        "constexprs": constexprs,
        "num_warps": warps,
        "num_stages": stages,
    }


@functools.lru_cache(maxsize=None)
def _all_configs() -> Dict[Tuple[str, torch.dtype, int, bool, bool, bool], dict]:
    """(kernel, dtype, head dim, long, dropout, row sums) -> its configuration, built once (a
    launch looks its configuration up here: a dict lookup, not a search).  Attention dropout
    and the row sums are constexprs (``DROPOUT``, ``ROW_SUMS``), so the kernels without them
    are those measured before they existed, instruction for instruction."""
    return {
        (kernel, dtype, d, long, dropout, row_sums): _make_config(kernel, dtype, d, long, dropout, row_sums)
        for kernel in _KERNELS
        for d in HEAD_DIMS
        for dtype in DTYPES
        for long in (False, True)
        for dropout in (False, True)
        for row_sums in (False, True)
        if _tile(kernel, dtype, d, long) is not None
    }


def configurations_changed() -> None:
    """After a change of the tile tables (``_TILES``, ``_LONG_TILES``, ...: the GPU scripts'
    tile sweeps and probes): the configurations are built again, and the plans made with
    the old ones are forgotten."""
    _all_configs.cache_clear()
    launching.clear_plans()


def launch_configs() -> List[dict]:
    """Every configuration the launcher can pick (see the module docstring)."""
    return [dict(c) for c in _all_configs().values()]


def _config(
    kernel: str, dtype: torch.dtype, head_dim: int, long: bool = False, dropout: bool = False, row_sums: bool = False
) -> dict:
    """The configuration a launch takes: an entry of :func:`launch_configs` (``long``: the
    long tier's where it has one, else the sentence tiles'; ``dropout``: the form with
    attention dropout; ``row_sums``: the form with the row sums or their gradients)."""
    configs = _all_configs()
    config = (long and configs.get((kernel, dtype, head_dim, True, dropout, row_sums))) or configs.get(
        (kernel, dtype, head_dim, False, dropout, row_sums)
    )
    if config is None:  # unsupported() is checked first
        raise AssertionError(f"no launch configuration {kernel}_d{head_dim}_{_TRITON_DTYPE.get(dtype, dtype)}")
    return config


def _blocks(n: int, block: int) -> int:
    """ceil(n / block) (``triton.cdiv`` is a constexpr function: ~5 µs a call on the host)."""
    return -(-n // block)


#: every launch made, as (config name, kernel, constexprs, num_warps, num_stages, argument
#: types) when a test sets it to a list (checks that launches use launch_configs() only)
LAUNCH_LOG: Optional[list] = None


def _arg_type(x) -> str:
    if isinstance(x, Tensor):
        return "*" + ({torch.int8: "i8", torch.int64: "i64"}.get(x.dtype) or _TRITON_DTYPE[x.dtype])
    if isinstance(x, float):
        return "fp32"
    return _I32


def _is_long(tgt: int, src: int) -> bool:
    """Whether a call of ``tgt`` queries and ``src`` keys takes the long tier's tiles."""
    return min(tgt, src) >= LONG_FROM


class _Plan(NamedTuple):
    """A kernel op's launch for one call signature (:func:`_plan`), and its outputs' shapes."""

    launch: LaunchPlan
    config: dict  # the configuration (:func:`_config`)
    shapes: tuple  # the op's output shapes, per op


def _plan(kernel: str, cfg: dict, grid, scalars: tuple, like: Tensor, shapes: tuple) -> _Plan:
    """The launch plan of ``kernel`` with the configuration ``cfg`` (:func:`_config`) on
    ``like``'s device and dtype (``like``: q)."""
    constexprs = dict(cfg["constexprs"])
    if launching.interpreted(like.device) and like.dtype == torch.bfloat16:
        constexprs["UPCAST"] = True  # the interpreter's bf16 tl.dot is wrong (module docstring)
    forms = _KERNELS[kernel]
    launch = LaunchPlan(forms, grid, scalars, constexprs, cfg["num_warps"], cfg["num_stages"], like.device)
    return _Plan(launch, cfg, shapes)


def _launch(plan: _Plan, tensors: tuple) -> None:
    """Launches ``plan`` on ``tensors`` (its kernel's pointer arguments)."""
    if LAUNCH_LOG is not None:
        cfg, launch = plan.config, plan.launch
        LAUNCH_LOG.append(
            (
                cfg["name"],
                launch.forms.interpreted if launch.interpreted else launch.forms.compiled,
                dict(cfg["constexprs"]),
                cfg["num_warps"],
                cfg["num_stages"],
                [_arg_type(a) for a in (*tensors, *launch.scalars)],
            )
        )
    plan.launch(tensors)


# --------------------------------------------------------------------------- checks
def unsupported(q: Tensor, k: Tensor, v: Tensor) -> Optional[str]:
    """None when the kernels serve these shapes and dtypes (:func:`.served.unserved`), else
    the reason in words."""
    d = q.size(-1)
    if k.size(-1) != d or v.size(-1) != d:
        return f"head dims q {d}, k {k.size(-1)}, v {v.size(-1)} (serves equal head dims of {HEAD_DIMS})"
    if k.dtype != q.dtype or v.dtype != q.dtype:
        return f"dtypes {q.dtype}, {k.dtype}, {v.dtype} (serves one dtype for q, k and v)"
    return unserved(q.device.type, q.dtype, d) or unserved_sizes(q, k, v)


def _check(q: Tensor, k: Tensor, v: Tensor, key_padding: Optional[Tensor], kv_groups: int) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape:
        raise ValueError(
            f"relu_attention: q, k, v must be (B, H, T, d), (B_kv, H, S, d) x2, got {q.shape}, {k.shape}, {v.shape}"
        )
    reason = unsupported(q, k, v)
    if reason is not None:
        raise ValueError(f"relu_attention: {reason}")
    if kv_groups < 1 or q.size(0) != k.size(0) * kv_groups or q.size(1) != k.size(1):
        raise ValueError(
            f"relu_attention: q batch {q.size(0)} must be key batch {k.size(0)} x kv_groups {kv_groups}, heads equal"
        )
    if key_padding is not None and (key_padding.dtype != torch.bool or key_padding.shape != (k.size(0), k.size(2))):
        raise ValueError(
            f"relu_attention: key_padding must be bool (B_kv, S) = {(k.size(0), k.size(2))}, got {key_padding.dtype} {tuple(key_padding.shape)}"
        )
    for t in (q, k, v):
        if t.stride(-1) != 1:
            raise ValueError("relu_attention: tensors need a unit last stride")
    if k.device != q.device or v.device != q.device or (key_padding is not None and key_padding.device != q.device):
        raise ValueError(
            f"relu_attention: q, k, v and key_padding must be on one device, got {q.device}, {k.device}, {v.device}"
            + ("" if key_padding is None else f", {key_padding.device}")
        )


def _heads_like(q: Tensor) -> Tensor:
    """An empty (B, H, T, d) output laid out as (T, B, H, d): fairseq's (T, B, H * d)
    is then a view, not a copy."""
    bsz, heads, tgt, d = q.shape
    return q.new_empty(tgt, bsz, heads, d).permute(1, 2, 0, 3)


def _placeholder(like: Tensor, dtype: torch.dtype) -> Tensor:
    """A one-element tensor on ``like``'s device for a pointer argument the kernel does not
    read (no padding, no row scale): made once per device and dtype (~4 µs a call saved)."""
    key = (like.device, dtype)
    t = _PLACEHOLDERS.get(key)
    if t is None:
        t = _PLACEHOLDERS[key] = torch.zeros(1, dtype=dtype, device=like.device)
    return t


_PLACEHOLDERS: Dict[Tuple[torch.device, torch.dtype], Tensor] = {}


def _dropout_scalars(dropout_p: float) -> Tuple[float, float, bool]:
    """(drop_p, keep_scale, DROPOUT) of a launch with attention dropout of probability
    ``dropout_p`` (0: none)."""
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"relu_attention: dropout_p must be in [0, 1], got {dropout_p}")
    if dropout_p == 0.0:
        return 0.0, 1.0, False
    return float(dropout_p), (1.0 / (1.0 - dropout_p) if dropout_p < 1.0 else 0.0), True


def _seed_arg(seed: Optional[Tensor], dropout_p: float, like: Tensor) -> Tensor:
    """The SEED argument of a launch: ``seed`` (one int64 on ``like``'s device) with
    attention dropout, else a placeholder."""
    if not dropout_p:
        return _placeholder(like, torch.int64)
    if seed is None or seed.dtype != torch.int64 or seed.numel() != 1 or seed.device != like.device:
        raise ValueError("relu_attention: dropout needs its seed, one int64 on the inputs' device")
    return seed


def draw_seed(like: Tensor) -> Tensor:
    """A dropout seed for the kernels, drawn from torch's generator of ``like``'s device (so
    ``torch.manual_seed`` and fairseq's ``--seed`` fix it, and activation checkpointing,
    which restores the generators' states, draws the same one again); an int64 on that
    device, never read back to the host (no synchronisation, and ``torch.compile`` traces
    the draw)."""
    return torch.randint(0, 2**62, (1,), dtype=torch.int64, device=like.device)


def _pad_tensor(key_padding: Optional[Tensor], like: Tensor) -> Tensor:
    """The padding mask as the kernels read it (one byte per key, rows of S bytes), or a
    placeholder."""
    if key_padding is None:
        return _placeholder(like, torch.int8)
    return key_padding.contiguous().view(torch.int8)


def _pad_scalars(key_padding: Optional[Tensor]) -> Tuple[int, int]:
    """(stride_p, has_pad) of a launch: a contiguous (B_kv, S) mask's row stride."""
    return (0, 0) if key_padding is None else (key_padding.size(1), 1)


def _call_signature(q: Tensor, k: Tensor, v: Tensor, key_padding: Optional[Tensor]) -> tuple:
    """What a plan of q, k, v and the padding mask depends on (the mask is laid out
    contiguously at each call: its strides do not count), and :data:`LONG_FROM` as it is now."""
    return (
        LONG_FROM,
        q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device,
        v.shape, v.stride(), v.dtype, v.device,
        None if key_padding is None else (key_padding.shape, key_padding.dtype, key_padding.device),
    )  # fmt: skip


def _meta_strides(shape, permutation=None) -> Tuple[int, ...]:
    """The strides of a new contiguous tensor of ``shape`` (permuted by ``permutation``)."""
    t = torch.empty(shape, device="meta")
    return (t.permute(*permutation) if permutation else t).stride()


# --------------------------------------------------------------------------- ops
#: each op's plans, by call signature (:mod:`.launch`: made once per signature, after the checks)
_FWD_PLANS = plan_cache()
_KEY_BLOCK_PLANS = plan_cache()
_DQ_PLANS = plan_cache()


def _fwd_impl(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding: Optional[Tensor],
    causal: bool,
    kv_groups: int,
    scale: float,
    row_scaled: bool,
    row_coef: float,
    seed: Optional[Tensor],
    dropout_p: float,
    row_sums: bool = False,
) -> Tuple[Tensor, Tensor, Tensor]:
    """(out (B, H, T, d), c (B, H, T) fp32 or an empty tensor when not ``row_scaled``, the
    row sums (B, H, T, 2) fp32 of relu(s) and relu(s) log relu(s) before dropout and c, or
    an empty tensor when not ``row_sums``)."""
    signature = (
        _call_signature(q, k, v, key_padding),
        causal,
        kv_groups,
        scale,
        row_scaled,
        row_coef,
        dropout_p,
        row_sums,
    )
    plan = _FWD_PLANS.get(signature) or remember(
        _FWD_PLANS,
        signature,
        _fwd_plan(q, k, v, key_padding, causal, kv_groups, scale, row_scaled, row_coef, dropout_p, row_sums),
    )
    seed_arg = _seed_arg(seed, dropout_p, q)
    out_shape, rs_shape, sums_shape = plan.shapes
    out = q.new_empty(out_shape).permute(1, 2, 0, 3)  # (B, H, T, d) laid out as (T, B, H, d): _heads_like
    rs = q.new_empty(rs_shape, dtype=torch.float32)
    sums = q.new_empty(sums_shape, dtype=torch.float32)
    rs_arg = rs if row_scaled else _placeholder(q, torch.float32)
    sums_arg = sums if row_sums else _placeholder(q, torch.float32)
    _launch(plan, (q, k, v, _pad_tensor(key_padding, q), out, rs_arg, seed_arg, sums_arg))
    return out, rs, sums


def _fwd_plan(q, k, v, key_padding, causal, kv_groups, scale, row_scaled, row_coef, dropout_p, row_sums) -> _Plan:
    _check(q, k, v, key_padding, kv_groups)
    drop_p, keep_scale, dropout = _dropout_scalars(dropout_p)
    bsz, heads, tgt, d = q.shape
    src = k.size(2)
    out_shape = (tgt, bsz, heads, d)
    stride_p, has_pad = _pad_scalars(key_padding)
    cfg = _config("relu_attention_fwd", q.dtype, d, _is_long(tgt, src), dropout, row_sums)
    grid = (_blocks(tgt, cfg["constexprs"]["BLOCK_M"]), bsz, heads)
    scalars = (
        *q.stride()[:3],
        *k.stride()[:3],
        *v.stride()[:3],
        *_meta_strides(out_shape, (1, 2, 0, 3))[:3],
        stride_p,
        heads, kv_groups, tgt, src,
        float(scale), float(row_coef), drop_p, keep_scale,
        has_pad, int(causal), int(row_scaled),
    )  # fmt: skip
    shapes = (out_shape, (bsz, heads, tgt) if row_scaled else (0,), (bsz, heads, tgt, 2) if row_sums else (0,))
    return _plan("relu_attention_fwd", cfg, grid, scalars, q, shapes)


def _fwd_fake(q, k, v, key_padding, causal, kv_groups, scale, row_scaled, row_coef, seed, dropout_p, row_sums=False):
    bsz, heads, tgt, _ = q.shape
    return (
        _heads_like(q),
        q.new_empty((bsz, heads, tgt) if row_scaled else (0,), dtype=torch.float32),
        q.new_empty((bsz, heads, tgt, 2) if row_sums else (0,), dtype=torch.float32),
    )


#: the backward ops' arguments (each kernel of the backward reads the forward's inputs, dO,
#: the row factor c, the dropout seed, and the row sums' gradients (B, H, T, 2) fp32 where
#: the loss used the row sums, else None)
_BWD_ARGS = (
    "(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor? key_padding, Tensor row_scale, bool causal, "
    "int kv_groups, float scale, bool row_scaled, Tensor? seed, float dropout_p, Tensor? dsums=None)"
)


def _dkdv_impl(
    dout, q, k, v, key_padding, row_scale, causal, kv_groups, scale, row_scaled, seed, dropout_p, dsums=None
):
    """(dk, dv), each (B_kv, H, S, d) in the dtype of k."""
    return _key_block_pass(
        "relu_attention_bwd_dkdv", dout, q, k, v, key_padding, row_scale, causal, kv_groups, scale, row_scaled,
        seed, dropout_p, dsums,
    )[1:]  # fmt: skip


def _row_scale_arg(row_scale: Tensor, row_scaled: bool, like: Tensor) -> Tensor:
    """The ROW_SCALE argument of a backward launch: the forward's row factors c (B, H, T)
    fp32 as the kernels read them (contiguous: a direct caller's view is copied), or a
    placeholder."""
    if not row_scaled:
        return _placeholder(like, torch.float32)
    return row_scale if row_scale.is_contiguous() else row_scale.contiguous()


def _sums_grad(dsums: Optional[Tensor], like: Tensor) -> Tensor:
    """The GSUMS argument of a backward launch: the row sums' gradients as a contiguous fp32
    (B, H, T, 2) tensor, or a placeholder."""
    if dsums is None:
        return _placeholder(like, torch.float32)
    return dsums.to(torch.float32).contiguous()


def _backward_signature(
    kernel, dout, q, k, v, key_padding, row_scale, causal, kv_groups, scale, row_scaled, dropout_p, dsums
):
    return (
        kernel, _call_signature(q, k, v, key_padding), dout.shape, dout.stride(), dout.dtype, dout.device,
        causal, kv_groups, scale, row_scaled, dropout_p,
        None if dsums is None else (dsums.shape, dsums.device),
        (row_scale.shape, row_scale.dtype, row_scale.device) if row_scaled else None,
    )  # fmt: skip


def _check_backward(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, key_padding, row_scale, row_scaled: bool, kv_groups: int, dsums
) -> None:
    _check(q, k, v, key_padding, kv_groups)
    if row_scaled and (
        row_scale.shape != q.shape[:-1] or row_scale.dtype != torch.float32 or row_scale.device != q.device
    ):
        raise ValueError(
            f"relu_attention backward: the row factors must be {tuple(q.shape[:-1])} float32 on {q.device} "
            f"(the forward's), got {tuple(row_scale.shape)} {row_scale.dtype} on {row_scale.device}"
        )
    if dout.shape != q.shape[:-1] + (v.size(-1),) or dout.dtype != q.dtype or dout.device != q.device:
        raise ValueError(
            f"relu_attention backward: dout must be {tuple(q.shape[:-1]) + (v.size(-1),)} {q.dtype} on {q.device}, "
            f"got {tuple(dout.shape)} {dout.dtype} on {dout.device}"
        )
    if dsums is not None and (dsums.shape != q.shape[:-1] + (2,) or dsums.device != q.device):
        raise ValueError(
            f"relu_attention backward: the row sums' gradients must be {tuple(q.shape[:-1]) + (2,)} on {q.device}, "
            f"got {tuple(dsums.shape)} on {dsums.device}"
        )


def _backward_scalars(
    dout, q, k, v, key_padding, causal, kv_groups, scale, row_scaled, dropout_p, output_strides: tuple
) -> tuple:
    """A backward kernel's scalar arguments: the inputs' and dO's strides (dO laid out as the
    launch lays it out: unit last stride), ``output_strides`` (the kernel's outputs'), then
    the mask, sizes, scale, dropout and flags."""
    dout_strides = dout.stride() if dout.stride(-1) == 1 else _meta_strides(dout.shape)
    stride_p, has_pad = _pad_scalars(key_padding)
    drop_p, keep_scale, _ = _dropout_scalars(dropout_p)
    heads, tgt, src = q.size(1), q.size(2), k.size(2)
    return (
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *dout_strides[:3],
        *output_strides,
        stride_p,
        heads, kv_groups, tgt, src,
        float(scale), drop_p, keep_scale,
        has_pad, int(causal), int(row_scaled),
    )  # fmt: skip


def _key_block_pass(
    kernel: str,
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding: Optional[Tensor],
    row_scale: Tensor,
    causal: bool,
    kv_groups: int,
    scale: float,
    row_scaled: bool,
    seed: Optional[Tensor],
    dropout_p: float,
    dsums: Optional[Tensor] = None,
) -> Tuple[Optional[Tensor], Tensor, Tensor]:
    """Launches the key-block kernel: ``relu_attention_bwd_dkdv`` (dK, dV) or
    ``relu_attention_bwd`` (also dQ, summed in fp32 with atomic adds); returns (dq or None,
    dk, dv)."""
    signature = _backward_signature(
        kernel, dout, q, k, v, key_padding, row_scale, causal, kv_groups, scale, row_scaled, dropout_p, dsums
    )
    plan = _KEY_BLOCK_PLANS.get(signature) or remember(
        _KEY_BLOCK_PLANS,
        signature,
        _key_block_plan(
            kernel, dout, q, k, v, key_padding, row_scale, causal, kv_groups, scale, row_scaled, dropout_p, dsums
        ),
    )
    dout = dout if dout.stride(-1) == 1 else dout.contiguous()
    dk = torch.empty_like(k, memory_format=torch.contiguous_format)
    dv = torch.empty_like(v, memory_format=torch.contiguous_format)
    with_dq = kernel == "relu_attention_bwd"
    dq_acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device) if with_dq else None
    tensors = (
        q, k, v, _pad_tensor(key_padding, q), dout, _row_scale_arg(row_scale, row_scaled, q),
        _seed_arg(seed, dropout_p, q), _sums_grad(dsums, q), dk, dv,
        _placeholder(q, torch.float32) if dq_acc is None else dq_acc,
    )  # fmt: skip
    _launch(plan, tensors)
    return (None if dq_acc is None else dq_acc.to(q.dtype)), dk, dv


def _key_block_plan(
    kernel, dout, q, k, v, key_padding, row_scale, causal, kv_groups, scale, row_scaled, dropout_p, dsums
):
    _check_backward(dout, q, k, v, key_padding, row_scale, row_scaled, kv_groups, dsums)
    bsz, heads, tgt, d = q.shape
    kv_bsz, _, src, _ = k.shape
    kv_strides = _meta_strides(k.shape)[:3]  # dk, dv: contiguous, k's shape
    acc_strides = _meta_strides(q.shape)[:3] if kernel == "relu_attention_bwd" else (0, 0, 0)
    cfg = _config(kernel, q.dtype, d, _is_long(tgt, src), dropout_p > 0, dsums is not None)
    grid = (_blocks(src, cfg["constexprs"]["BLOCK_N"]), kv_bsz, heads)
    scalars = _backward_scalars(
        dout,
        q,
        k,
        v,
        key_padding,
        causal,
        kv_groups,
        scale,
        row_scaled,
        dropout_p,
        kv_strides + kv_strides + acc_strides,
    )
    return _plan(kernel, cfg, grid, scalars, q, ())


def _dkdv_fake(
    dout, q, k, v, key_padding, row_scale, causal, kv_groups, scale, row_scaled, seed, dropout_p, dsums=None
):
    return (
        torch.empty_like(k, memory_format=torch.contiguous_format),
        torch.empty_like(v, memory_format=torch.contiguous_format),
    )


def _one_pass_impl(
    dout, q, k, v, key_padding, row_scale, causal, kv_groups, scale, row_scaled, seed, dropout_p, dsums=None
):
    """(dq, dk, dv) in one pass over the key blocks, fp16/bf16 (:data:`ONE_PASS_DTYPES`): dQ
    summed across programs with fp32 atomic adds (5 dots per tile pair instead of the two
    passes' 7, one kernel launch instead of two; the adds' order varies from run to run, so
    dQ is reproducible to rounding, not bit for bit: :class:`_ReluAttention` takes the two
    passes under ``torch.use_deterministic_algorithms``)."""
    return _key_block_pass(
        "relu_attention_bwd", dout, q, k, v, key_padding, row_scale, causal, kv_groups, scale, row_scaled,
        seed, dropout_p, dsums,
    )  # fmt: skip


def _one_pass_fake(
    dout, q, k, v, key_padding, row_scale, causal, kv_groups, scale, row_scaled, seed, dropout_p, dsums=None
):
    return (
        torch.empty_like(q, memory_format=torch.contiguous_format),
        torch.empty_like(k, memory_format=torch.contiguous_format),
        torch.empty_like(v, memory_format=torch.contiguous_format),
    )


def _dq_impl(dout, q, k, v, key_padding, row_scale, causal, kv_groups, scale, row_scaled, seed, dropout_p, dsums=None):
    """dq, (B, H, T, d) in the dtype of q."""
    signature = _backward_signature(
        "relu_attention_bwd_dq", dout, q, k, v, key_padding, row_scale, causal, kv_groups, scale, row_scaled,
        dropout_p, dsums,
    )  # fmt: skip
    plan = _DQ_PLANS.get(signature) or remember(
        _DQ_PLANS,
        signature,
        _dq_plan(dout, q, k, v, key_padding, row_scale, causal, kv_groups, scale, row_scaled, dropout_p, dsums),
    )
    dout = dout if dout.stride(-1) == 1 else dout.contiguous()
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    tensors = (
        q, k, v, _pad_tensor(key_padding, q), dout, _row_scale_arg(row_scale, row_scaled, q),
        _seed_arg(seed, dropout_p, q), _sums_grad(dsums, q), dq,
    )  # fmt: skip
    _launch(plan, tensors)
    return dq


def _dq_plan(dout, q, k, v, key_padding, row_scale, causal, kv_groups, scale, row_scaled, dropout_p, dsums) -> _Plan:
    _check_backward(dout, q, k, v, key_padding, row_scale, row_scaled, kv_groups, dsums)
    bsz, heads, tgt, d = q.shape
    cfg = _config("relu_attention_bwd_dq", q.dtype, d, _is_long(tgt, k.size(2)), dropout_p > 0, dsums is not None)
    grid = (_blocks(tgt, cfg["constexprs"]["BLOCK_M"]), bsz, heads)
    scalars = _backward_scalars(
        dout, q, k, v, key_padding, causal, kv_groups, scale, row_scaled, dropout_p, _meta_strides(q.shape)[:3]
    )
    return _plan("relu_attention_bwd_dq", cfg, grid, scalars, q, ())


def _dq_fake(dout, q, k, v, key_padding, row_scale, causal, kv_groups, scale, row_scaled, seed, dropout_p, dsums=None):
    return torch.empty_like(q, memory_format=torch.contiguous_format)


relu_attention_fwd = ops.define(
    "relu_attention_fwd",
    "(Tensor q, Tensor k, Tensor v, Tensor? key_padding, bool causal, int kv_groups, float scale, "
    "bool row_scaled, float row_coef, Tensor? seed, float dropout_p, bool row_sums=False) -> (Tensor, Tensor, Tensor)",
    _fwd_impl,
    _fwd_fake,
)
relu_attention_bwd_dkdv = ops.define(
    "relu_attention_bwd_dkdv", _BWD_ARGS + " -> (Tensor, Tensor)", _dkdv_impl, _dkdv_fake
)
relu_attention_bwd = ops.define(
    "relu_attention_bwd", _BWD_ARGS + " -> (Tensor, Tensor, Tensor)", _one_pass_impl, _one_pass_fake
)
relu_attention_bwd_dq = ops.define("relu_attention_bwd_dq", _BWD_ARGS + " -> Tensor", _dq_impl, _dq_fake)


class _ReluAttention(torch.autograd.Function):
    """Autograd of ``fsa::relu_attention_fwd`` (:func:`.ops.differentiable`)."""

    @staticmethod
    def forward(
        ctx, q, k, v, key_padding, causal, kv_groups, scale, row_scaled, row_coef, seed, dropout_p, row_sums=False
    ):  # fmt: skip
        out, rs, sums = ops.below_autograd(
            relu_attention_fwd, q, k, v, key_padding, causal, kv_groups, scale, row_scaled, row_coef, seed,
            dropout_p, row_sums,
        )  # fmt: skip
        # c carries no gradient: marked so, it needs no zero gradient in the backward and
        # may be kept on ctx without a reference cycle
        ctx.mark_non_differentiable(rs)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(q, k, v, key_padding, seed)
        ctx.row_scale = rs
        ctx.args = (causal, kv_groups, scale, row_scaled)
        ctx.dropout_p = dropout_p
        ctx.row_sums = row_sums
        return out, rs, sums

    @staticmethod
    @ops.once_differentiable  # the backward ops have no autograd: a clear error
    def backward(ctx, dout, _drs, dsums):
        if not ctx.row_sums:
            dsums = None
        if dout is None and dsums is None:  # (materialize_grads off) no output took part in the loss
            return (None,) * 12
        q, k, v, key_padding, seed = ctx.saved_tensors
        if dout is None:  # only the row sums took part in the loss
            dout = torch.zeros(q.shape[:-1] + (v.size(-1),), dtype=q.dtype, device=q.device)
        args = (*ctx.args, seed, ctx.dropout_p)
        dq, dk, dv = gradients(dout, q, k, v, key_padding, ctx.row_scale, args, ctx.needs_input_grad[:3], dsums)
        return dq, dk, dv, None, None, None, None, None, None, None, None, None


def gradients(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding: Optional[Tensor],
    row_scale: Tensor,
    args: tuple,
    needed: Tuple[bool, bool, bool],
    dsums: Optional[Tensor] = None,
) -> Tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
    """(dq, dk, dv) of the forward (None where not ``needed``), from the backward ops: one
    pass (fp16/bf16, :data:`ONE_PASS_DTYPES`, fewer than :data:`TWO_PASS_FROM_KEYS` keys) or
    the two passes (fp32, long keys, deterministic mode).
    ``args``: the forward's (causal, kv_groups, scale, row_scaled, seed, dropout_p);
    ``dsums``: the row sums' gradients (B, H, T, 2), or None."""
    args = (*args, dsums)
    need_q, need_k, need_v = needed
    dq = dk = dv = None
    one_pass = (
        q.dtype in ONE_PASS_DTYPES
        and k.size(2) < TWO_PASS_FROM_KEYS
        and not torch._C._get_deterministic_algorithms()  # (torch.are_deterministic_algorithms_enabled, one call fewer)
    )
    if one_pass and need_q and (need_k or need_v):
        return relu_attention_bwd(dout, q, k, v, key_padding, row_scale, *args)
    if need_k or need_v:
        dk, dv = relu_attention_bwd_dkdv(dout, q, k, v, key_padding, row_scale, *args)
    if need_q:
        dq = relu_attention_bwd_dq(dout, q, k, v, key_padding, row_scale, *args)
    return dq, dk, dv


ops.differentiable(relu_attention_fwd, _ReluAttention)


def relu_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding: Optional[Tensor] = None,
    causal: bool = False,
    kv_groups: int = 1,
    scale: float = 1.0,
    gamma: Optional[float] = None,
    dropout_p: float = 0.0,
    seed: Optional[Tensor] = None,
) -> Tensor:
    """Differentiable fused ReLU attention (module docstring): ``gamma=None`` gives ReLA's
    ``relu``, a float gives ReLUFormer's ``relu_scaled`` with that gamma.  ``dropout_p`` > 0
    applies attention dropout to the weights (:func:`_kept`) under ``seed`` (one int64 on
    the inputs' device; None: :func:`draw_seed`).

    q (B, H, T, d), k and v (B_kv, H, S, d) with B = B_kv * kv_groups, key_padding
    (B_kv, S) bool (True = padding) or None; returns (B, H, T, d) in q's dtype."""
    return _forward(q, k, v, key_padding, causal, kv_groups, scale, gamma, dropout_p, seed, False)[0]


def relu_attention_with_row_sums(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding: Optional[Tensor] = None,
    causal: bool = False,
    kv_groups: int = 1,
    scale: float = 1.0,
    gamma: Optional[float] = None,
    dropout_p: float = 0.0,
    seed: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor, Tensor]:
    """:func:`relu_attention`'s output and the row sums of its weights w_ij = c_i relu(s_ij)
    (before dropout) that ReLUFormer's regularized loss needs, all differentiable:
    (out (B, H, T, d), sum_j w_ij, sum_j w_ij log w_ij (0 log 0 = 0)), the sums (B, H, T)
    fp32, as :func:`fairseq_sparse_attn.attention.scaled_relu.row_sums` computes them from the
    weights.  The kernels sum r = relu(s) and r log r (fp32, in the forward's loop, no extra
    pass); with w = c r, sum w = c sum r and sum w log w = c sum r log r + c log c sum r."""
    out, c, sums = _forward(q, k, v, key_padding, causal, kv_groups, scale, gamma, dropout_p, seed, True)
    r_sum, r_log = sums.unbind(-1)
    if c.numel() == 0:  # no row factor (ReLA's relu, or ReLUFormer's no-length-scale ablation)
        return out, r_sum, r_log
    w_sum = c * r_sum
    return out, w_sum, c * r_log + torch.log(c) * w_sum


def _forward(q, k, v, key_padding, causal, kv_groups, scale, gamma, dropout_p, seed, row_sums: bool):
    """The differentiable forward op's (out, c, sums) for the public entries (their arguments;
    a seed is drawn where dropout needs one and none was given)."""
    row_scaled, row_coef = row_arguments(gamma)
    if dropout_p and seed is None:
        seed = draw_seed(q)
    return ops.call_differentiable(
        relu_attention_fwd, _ReluAttention, q, k, v, key_padding, causal, kv_groups, scale, row_scaled, row_coef,
        seed, float(dropout_p), row_sums,
    )  # fmt: skip


def row_arguments(gamma: Optional[float]) -> Tuple[bool, float]:
    """(row_scaled, row_coef) of the kernels for ReLUFormer's gamma (None: ReLA's relu)."""
    if gamma is None:
        return False, 1.0
    if not gamma > 0:
        raise ValueError(f"relu_attention: gamma must be > 0, got {gamma}")
    return True, math.sqrt(2.0) / gamma
