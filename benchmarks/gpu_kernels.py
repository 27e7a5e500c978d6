#!/usr/bin/env python
"""``make bench-gpu`` part ``kernels``: the Triton kernels on a CUDA device (issue 31, item 8).

1. **Correctness.** ``kernels.relu_attention`` (``relu`` and ``relu_scaled``) at head dims
   32, 64, 128 and 256 in float32, float16 and bfloat16, and the fused output norms
   (RMSNorm-i, gated RMSNorm) in the three dtypes, against the plain formulas computed in
   float64 on the same device from the same (dtype-rounded) inputs: the output and every
   gradient, as ``||x - ref|| / ||ref||``.  Fresh random inputs per check (never zeros); the
   attention cases hold ragged key padding, cross-attention (T != S), causal
   self-attention, a sentence whose keys are all padding (its rows must be exactly 0) and
   rows with no positive score.  Tolerances: float32 1e-5 (IEEE dots), float16 and
   bfloat16 1e-2.
2. **Timing.** Forward + backward of one attention call, ReLU attention (Triton) against
   SDPA's flash kernel (softmax), head dim 64, 8 heads, 16,384 tokens per call
   (batch = 16,384 / length) at lengths 32, 128, 1,024 and 4,096, non-causal and causal,
   in float16 and bfloat16: ``triton.testing.do_bench`` medians (CUDA events, warm-up
   first); flash is timed twice (before and after Triton) so that its own spread is
   reported next to the ratio.  Where the long tier has tiles (float16 and bfloat16), each
   length is also timed on the tier it does not take, on the same inputs: the sentence
   tiles at the lengths that take the long tier (``relu_attention.LONG_FROM``:
   ``relu_triton_sentence_tiles_ms``), the long tier's below them
   (``relu_triton_long_tiles_ms``), so one run says which tier is faster at each length
   and where ``LONG_FROM`` belongs; the correctness part checks the long tier's
   configurations on short calls (``LONG_FROM`` lowered).

    python benchmarks/gpu_kernels.py --out bench_gpu_out/kernels.json
    python benchmarks/gpu_kernels.py --smoke --device cpu     # tiny, through the interpreter

Writes JSON (every figure, the device, torch and Triton versions) and prints a table.
"""

import argparse
import contextlib
import json
import math
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HEAD_DIMS = (32, 64, 128, 256)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
TOLERANCE = {"fp32": 1e-5, "fp16": 1e-2, "bf16": 1e-2}
LENGTHS = (32, 128, 1024, 4096)


def rel_err(x, ref):
    x = x.double()
    den = ref.norm().item()
    num = (x - ref).norm().item()
    if not math.isfinite(num):
        return float("inf")
    return num / den if den > 0 else num


def plain_relu_attention(q, k, v, pad, causal, scale, gamma, keep=None, dropout_p=0.0, row_sums=False):
    """The formula in float64 (kernels/relu_attention.py docstring): materialized weights;
    with ``keep`` ((B, H, T, S) bool, philox_reference.keep_mask), attention dropout; with
    ``row_sums``, (out, sum_j w_ij, sum_j w_ij log w_ij) of the weights before dropout."""
    s = scale * torch.einsum("bhtd,bhsd->bhts", q, k)
    T, S = q.size(2), k.size(2)
    visible = torch.ones(q.size(0), 1, T, S, dtype=torch.bool, device=q.device)
    if pad is not None:
        visible = visible & ~pad[:, None, None, :]
    if causal:
        i = torch.arange(T, device=q.device)[:, None]
        j = torch.arange(S, device=q.device)[None, :]
        visible = visible & (j <= i + S - T)
    w = torch.relu(s) * visible
    if gamma is not None:
        n = visible.sum(-1, keepdim=True).clamp(min=1).double()
        w = w / (gamma * torch.sqrt(n / 2))
    sums = (w.sum(-1), torch.where(w > 0, w * torch.log(w.clamp(min=1e-300)), torch.zeros_like(w)).sum(-1))
    if keep is not None:
        w = w * keep.to(w.device, w.dtype) / (1.0 - dropout_p)
    out = torch.einsum("bhts,bhsd->bhtd", w, v)
    return (out, *sums) if row_sums else out


ATTENTION_CASES = {
    # name: (B, H, T, S, causal, gamma, padded)
    "cross_padded": (3, 2, 37, 53, False, None, True),
    "causal_self_scaled": (2, 2, 48, 48, True, 1.5, True),
    "self_unpadded": (2, 2, 40, 40, False, None, False),
    # causal calls over several key and query blocks: every loop form of each kernel (the
    # blocks every row sees whole, then those the causal cut crosses; padded and not)
    "causal_long_padded": (3, 2, 150, 150, True, None, True),
    "causal_long_scaled": (2, 2, 150, 150, True, 1.2, False),
}
#: the cases also checked with attention dropout (the kernels' ``_dropout`` forms, against
#: the numpy Philox of philox_reference.py), at this probability
DROPOUT_CASES = ("cross_padded", "causal_long_scaled")
DROPOUT_P = 0.3
#: the cases also checked with ReLUFormer's row sums (``relu_attention_with_row_sums``, the
#: kernels' ``_rowsums`` forms: a loss of the output and both sums), with and without dropout
ROW_SUMS_CASES = ("cross_padded", "causal_long_scaled")


def check_attention(device, d, dtype_name, case, seed, diagnose=False, dropout_p=0.0, row_sums=False):
    """One case against float64 (``dropout_p`` > 0: with attention dropout under a seed drawn
    here, the reference dropping what philox_reference.keep_mask drops; ``row_sums``: the
    row sums too, and the gradients of a loss of the output and both sums).  ``diagnose`` adds
    where the forward is wrong: the rows
    (b, h, t) whose own relative error passes the tolerance, the query positions and heads
    they sit at, and whether a second run on the same inputs gives the same output bit for
    bit (an error that moves between runs is a race: METHOD.md)."""
    from fairseq_sparse_attn.kernels.relu_attention import relu_attention, relu_attention_with_row_sums

    B, H, T, S, causal, gamma, padded = ATTENTION_CASES[case]
    dtype = DTYPES[dtype_name]
    g = torch.Generator(device="cpu").manual_seed(seed)
    q, k, v, dout = (
        torch.randn(*shape, generator=g).to(device=device, dtype=dtype)
        for shape in ((B, H, T, d), (B, H, S, d), (B, H, S, d), (B, H, T, d))
    )
    pad = None
    if padded:
        lengths = torch.randint(1, S + 1, (B,), generator=g)
        lengths[0] = S
        pad = torch.arange(S)[None, :] >= lengths[:, None]
        if B > 2:
            pad[-1] = True  # a sentence whose keys are all padding: its rows must be 0
        pad = pad.to(device)
    q[0, 0, 0] = 0  # a row with no positive score (every score is 0): its output must be 0
    scale = d**-0.5
    dropout = {}
    keep = None
    if dropout_p:
        from philox_reference import keep_mask

        dropout_seed = int(torch.randint(0, 2**62, (1,), generator=g))
        dropout = {"dropout_p": dropout_p, "seed": torch.tensor([dropout_seed], device=device)}
        keep = keep_mask(dropout_seed, B, H, T, S, dropout_p)
    refs = [t.double().clone().requires_grad_(True) for t in (q, k, v)]
    errs = {}
    if row_sums:
        g_sum, g_log = (torch.randn(B, H, T, generator=g).to(device) for _ in range(2))

    def run():
        """(out, leaves with their gradients, the row sums or None) of the kernels."""
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        if row_sums:
            out, wsum, wlogw = relu_attention_with_row_sums(
                *leaves, key_padding=pad, causal=causal, scale=scale, gamma=gamma, **dropout
            )
            ((out.float() * dout.float()).sum() + (wsum * g_sum).sum() + (wlogw * g_log).sum()).backward()
            return out, leaves, (wsum, wlogw)
        out = relu_attention(*leaves, key_padding=pad, causal=causal, scale=scale, gamma=gamma, **dropout)
        out.backward(dout)
        return out, leaves, None

    out, leaves, sums = run()
    if row_sums:
        wsum, wlogw = sums
        ref, ref_sum, ref_log = plain_relu_attention(*refs, pad, causal, scale, gamma, keep, dropout_p, row_sums=True)
        ((ref * dout.double()).sum() + (ref_sum * g_sum.double()).sum() + (ref_log * g_log.double()).sum()).backward()
        errs.update(wsum=rel_err(wsum, ref_sum), wlogw=rel_err(wlogw, ref_log))
    else:
        ref = plain_relu_attention(*refs, pad, causal, scale, gamma, keep, dropout_p)
        ref.backward(dout.double())
    # the same call again: on CUDA its launches take the plans made by the first call and
    # their direct launcher (kernels/launch.py: LaunchPlan), where the first call's took
    # Triton's own launch path; the output
    # and dK, dV must be the same bit for bit (dQ of the one-pass backward sums with atomics:
    # the same to rounding, within the tolerance)
    again, again_leaves, again_sums = run()
    relaunch = {
        "same_out": bool(torch.equal(again, out)),
        "same_dk_dv": all(bool(torch.equal(a.grad, b.grad)) for a, b in zip(again_leaves[1:], leaves[1:])),
        "same_sums": sums is None or all(bool(torch.equal(a, b)) for a, b in zip(again_sums, sums)),
        "dq_error": rel_err(again_leaves[0].grad, leaves[0].grad.double()),
    }
    errs["out"] = rel_err(out, ref)
    for name, a, r in zip(("dq", "dk", "dv"), leaves, refs):
        errs[name] = rel_err(a.grad, r.grad)
    finite = all(torch.isfinite(t).all().item() for t in (out, *(a.grad for a in leaves)))
    zero_rows_ok = bool((out[0, 0, 0] == 0).all().item())
    if pad is not None and bool(pad[-1].all()):
        zero_rows_ok = zero_rows_ok and bool((out[-1] == 0).all().item())
    tol = TOLERANCE[dtype_name]
    relaunch_ok = relaunch["same_out"] and relaunch["same_dk_dv"] and relaunch["same_sums"]
    relaunch_ok = relaunch_ok and relaunch["dq_error"] <= tol
    ok = finite and zero_rows_ok and relaunch_ok and all(e <= tol for e in errs.values())
    result = {
        "errors": errs,
        "finite": finite,
        "empty_rows_zero": zero_rows_ok,
        "relaunch": relaunch,
        "tolerance": tol,
        "ok": ok,
    }
    if diagnose:
        with torch.no_grad():
            again = relu_attention(q, k, v, key_padding=pad, causal=causal, scale=scale, gamma=gamma, **dropout)
            ref_rows = ref.detach()
            row_err = (out.detach().double() - ref_rows).norm(dim=-1) / ref_rows.norm(dim=-1).clamp_min(1e-30)
            wrong = (row_err > tol).nonzero().tolist()  # (b, h, t) of each wrong row
        result["diagnosis"] = {
            "rows": int(row_err.numel()),
            "wrong_rows": len(wrong),
            "wrong_query_positions": sorted({t for _, _, t in wrong}),
            "wrong_heads": sorted({h for _, h, _ in wrong}),
            "wrong_batch_entries": sorted({b for b, _, _ in wrong}),
            "repeat_identical": bool(torch.equal(again, out.detach())),
        }
    return result


def plain_rms_norm(z, weight, gate_weight, eps):
    r = torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + eps)
    out = z * r * weight
    if gate_weight is not None:
        out = out * torch.sigmoid(gate_weight * z)
    return out


def check_norm(device, dtype_name, gated, seed, rows=300, width=512):
    from fairseq_sparse_attn.attention.output_norms import HALF_BACKWARD_RMS_FLOOR
    from fairseq_sparse_attn.kernels.output_norm import fused_rms_normalize

    dtype = DTYPES[dtype_name]
    g = torch.Generator(device="cpu").manual_seed(seed)
    z = torch.randn(rows, width, generator=g).to(device=device, dtype=dtype)
    dout = torch.randn(rows, width, generator=g).to(device=device, dtype=dtype)
    w = (1 + 0.1 * torch.randn(width, generator=g)).to(device)
    gw = (0.5 * torch.randn(width, generator=g)).to(device) if gated else None
    eps = 1e-6
    leaves = [t.clone().requires_grad_(True) for t in (z, w) + ((gw,) if gated else ())]
    out = fused_rms_normalize(leaves[0], eps, leaves[1], leaves[2] if gated else None, HALF_BACKWARD_RMS_FLOOR)
    out.backward(dout)
    refs = [t.double().clone().requires_grad_(True) for t in (z, w) + ((gw,) if gated else ())]
    ref = plain_rms_norm(refs[0], refs[1], refs[2] if gated else None, eps)
    ref.backward(dout.double())
    errs = {"out": rel_err(out, ref)}
    for name, a, r in zip(("dz", "dweight", "dgate"), leaves, refs):
        errs[name] = rel_err(a.grad, r.grad)
    tol = TOLERANCE[dtype_name]
    finite = bool(torch.isfinite(out).all().item())
    return {"errors": errs, "finite": finite, "tolerance": tol, "ok": finite and all(e <= tol for e in errs.values())}


@contextlib.contextmanager
def every_dtype_served():
    """The kernels launched whatever ``kernels.served`` refuses on CUDA: these checks are
    what that table is made from (a dtype refused after a failed check is checked again)."""
    from fairseq_sparse_attn.kernels import launch, served

    refused = dict(served.CUDA_NOT_SERVED)
    served.CUDA_NOT_SERVED.clear()
    try:
        yield
    finally:
        served.CUDA_NOT_SERVED.update(refused)
        launch.clear_plans()  # (plans are made after the checks: those made here skipped the refusals)


def correctness(device, head_dims, dtype_names, seed=0, rows=None, save=lambda: None, shard=(0, 1)):
    """Every check's row appended to ``rows`` (and ``save()`` called) as it ends.
    ``shard`` (k, n): only the k-th of n shares of the checks (:func:`in_shard`), with the
    seeds they have in the whole run, so that n processes share the compiles."""
    with every_dtype_served():
        return _correctness(device, head_dims, dtype_names, seed, rows, save, shard)


def in_shard(group: int, shard) -> bool:
    """Whether the ``group``-th (head dim, dtype) of the correctness checks (the norms' checks:
    the last group) is in ``shard`` (k, n).  A group's checks share their kernels'
    configurations, so each configuration is compiled in one shard only."""
    k, n = shard
    return group % n == k


#: the cases the long tier's tiles are checked on (``LONG_FROM`` lowered): T != S, and
#: causal calls crossing two 128-query blocks, padded and row-scaled
LONG_TILE_CASES = ("cross_padded", "causal_long_padded", "causal_long_scaled")


def _backwards(d, dtype_name, case):
    """The forms each case is checked through: fp32 the two passes (its default); fp16 and
    bf16 the one pass (the default) and the two passes, and where the long tier has tiles
    for this head dim, the long tier (forward and dQ pass) with the two passes."""
    from fairseq_sparse_attn.kernels import relu_attention as ra

    if dtype_name == "fp32":
        return ("default",)
    has_long = ra._tile("relu_attention_fwd", DTYPES[dtype_name], d, True) is not None
    return ("default", "two_pass") + (("long_tiles",) if has_long and case in LONG_TILE_CASES else ())


@contextlib.contextmanager
def backward_form(backward):
    """A correctness check's backward form (:func:`_backwards`) for the block."""
    with long_tiles() if backward == "long_tiles" else contextlib.nullcontext():
        with two_pass_backward() if backward != "default" else contextlib.nullcontext():
            yield


def planned_checks(head_dims, dtype_names, seed=0, shard=(0, 1)):
    """The correctness checks of a run (of ``shard``), in order, each with the seed it has in
    the whole run: ("attention", d, dtype, case, seed, dropout_p, row_sums, backward) and
    ("norm", dtype, gated, seed).  Their number is written first (``expected_checks``), so
    that a run cut off by its time limit shows as incomplete."""
    plan = []
    group = -1
    for d in head_dims:
        for dt in dtype_names:
            group += 1
            for case in ATTENTION_CASES:
                seed += 1
                if not in_shard(group, shard):
                    continue
                forms = [(p, False) for p in ((0.0, DROPOUT_P) if case in DROPOUT_CASES else (0.0,))]
                if case in ROW_SUMS_CASES:
                    forms += [(0.0, True), (DROPOUT_P, True)]
                for dropout_p, row_sums in forms:
                    for backward in _backwards(d, dt, case):
                        plan.append(("attention", d, dt, case, seed, dropout_p, row_sums, backward))
    group += 1
    for dt in dtype_names:
        for gated in (False, True):
            seed += 1
            if in_shard(group, shard):
                plan.append(("norm", dt, gated, seed))
    return plan


def _correctness(device, head_dims, dtype_names, seed, rows, save, shard=(0, 1)):
    rows = [] if rows is None else rows
    for check in planned_checks(head_dims, dtype_names, seed, shard):
        if check[0] == "attention":
            _, d, dt, case, check_seed, dropout_p, row_sums, backward = check
            t0 = time.time()
            try:
                with backward_form(backward):
                    r = check_attention(device, d, dt, case, check_seed, dropout_p=dropout_p, row_sums=row_sums)
            except Exception as e:  # recorded, never hidden
                r = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            r.update(kernel="relu_attention", head_dim=d, dtype=dt, case=case, backward=backward)
            r.update(dropout=dropout_p, row_sums=row_sums, seconds=round(time.time() - t0, 2))
            rows.append(r)
            save()
            what = f"{case} {backward}" + (f" dropout {dropout_p}" if dropout_p else "")
            what += " row sums" if row_sums else ""
            print(f"[kernels] check relu_attention d{d} {dt} {what}: {fmt_check(r)}", flush=True)
        else:
            _, dt, gated, check_seed = check
            try:
                r = check_norm(device, dt, gated, check_seed)
            except Exception as e:
                r = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            r.update(kernel="gated_rmsnorm" if gated else "rmsnorm", dtype=dt)
            rows.append(r)
            save()
            print(f"[kernels] check {r['kernel']} {dt}: {fmt_check(r)}", flush=True)
    return rows


def merge_results(work, out, shards) -> dict:
    """``out``: the correctness shards' JSON (``work/kernels_correctness_*.json``) merged,
    with the timing part's (``work/kernels_timing.json``) where it ran.  A shard cut off by
    its time limit ran fewer checks than it planned (``expected_checks``, written first), one
    that wrote nothing planned an unknown number: either way ``correctness_ok`` is false and
    the part decides nothing (``attention.backends.triton.kernels_verified``)."""
    work, out, shards = Path(work), Path(out), int(shards)
    merged = {"correctness": [], "expected_checks": 0}
    found = 0
    for p in sorted(work.glob("kernels_correctness_*.json")):
        shard = json.loads(p.read_text())
        found += 1
        merged["correctness"] += shard.pop("correctness", [])
        merged["expected_checks"] += shard.pop("expected_checks", 0)
        shard.pop("correctness_ok", None)
        merged.setdefault("shards", []).append(shard.pop("shard", None))
        merged.update(shard)
    merged["shards_missing"] = shards - found
    if merged["shards_missing"]:
        merged["expected_checks"] = None
    checks = merged["correctness"]
    merged["correctness_ok"] = (
        bool(checks) and merged["expected_checks"] == len(checks) and all(r["ok"] for r in checks)
    )
    timing = work / "kernels_timing.json"
    if timing.exists():
        merged.update({k: v for k, v in json.loads(timing.read_text()).items() if k != "shard"})
    out.write_text(json.dumps(merged, indent=1) + "\n")
    planned = merged["expected_checks"]
    print(
        f"correctness: {sum(r['ok'] for r in checks)} of {len(checks)} checks ok, "
        f"{planned if planned is not None else 'an unknown number'} planned"
        + (f" ({merged['shards_missing']} shard(s) wrote nothing)" if merged["shards_missing"] else "")
    )
    return merged


def fmt_check(r):
    if "error" in r:
        return "ERROR " + r["error"][:300]
    worst = max(r["errors"].values())
    return f"{'ok' if r['ok'] else 'FAIL'} (max rel err {worst:.2e}, tol {r['tolerance']:.0e})"


@contextlib.contextmanager
def two_pass_backward():
    """The kernels' two-pass backward for the block (``torch.use_deterministic_algorithms``,
    which relu_attention's backward reads), without deterministic mode's NaN fill of every
    new tensor, which would add fill kernels to the time."""
    from torch.utils import deterministic

    before = torch.are_deterministic_algorithms_enabled(), deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    deterministic.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0])
        deterministic.fill_uninitialized_memory = before[1]


@contextlib.contextmanager
def one_pass_backward():
    """The kernels' one-pass backward (fp16/bf16) for the block at every key length
    (``relu_attention.TWO_PASS_FROM_KEYS`` lifted)."""
    from fairseq_sparse_attn.kernels import relu_attention as ra

    before = ra.TWO_PASS_FROM_KEYS
    ra.TWO_PASS_FROM_KEYS = 1 << 62
    try:
        yield
    finally:
        ra.TWO_PASS_FROM_KEYS = before


@contextlib.contextmanager
def long_tiles(from_tokens=1):
    """The kernels' long tier for the block from ``from_tokens`` queries and keys
    (``relu_attention.LONG_FROM`` lowered: 1, every call; a huge value, no call)."""
    from fairseq_sparse_attn.kernels import relu_attention as ra

    before = ra.LONG_FROM
    ra.LONG_FROM = from_tokens
    try:
        yield
    finally:
        ra.LONG_FROM = before


def time_case(device, dtype_name, length, tokens, heads, d, causal, two_pass=False, one_pass=False, graphs=False):
    """Forward+backward and forward-only medians of ReLU attention (Triton) and SDPA flash
    on one shape; flash and Triton alternate twice (each one's spread next to the ratio).
    The Triton backward is the shipped choice (one pass in fp16/bf16 below
    ``TWO_PASS_FROM_KEYS`` keys), or the two passes with ``two_pass``, or the one pass with
    ``one_pass``; with neither, ``relu_triton_one_pass_ms`` and ``relu_triton_two_pass_ms``
    are each form's time (fp16/bf16), and where the long tier has tiles for the dtype and
    head dim, ``relu_triton_{tier}_tiles_ms`` and ``relu_triton_{tier}_tiles_fwd_ms`` are
    the shipped backward's and the forward's time on the tier the length does not take
    (``tier``: ``sentence`` from ``LONG_FROM`` tokens, ``long`` below; below
    ``TWO_PASS_FROM_KEYS`` keys the backward is the one pass, which has no long tiles, so
    there the tiers differ in the forward only).  With ``graphs``, ``flash_graph_ms`` and
    ``relu_triton_graph_ms`` are the same forward+backward replayed from a CUDA graph
    (``graphs="only"``: those alone, for :func:`timing`'s second pass)
    (``do_bench_cudagraph``): the GPU's time without the host's between the kernels, so that
    a ratio that moves far between the two timings points at the host (the 2026-11-27 H200
    run: flash took longer at 32 tokens than at 128, and the forward at 1,024 tokens had a
    fixed ~0.05 ms that 4,096 did not show).  The two differ in more than the host: the
    graph replays its steps back to back, where ``do_bench`` clears the L2 cache before
    each step, so small calls may also gain from a warm cache there."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench, do_bench_cudagraph

    from fairseq_sparse_attn.kernels import relu_attention as ra
    from fairseq_sparse_attn.kernels.relu_attention import relu_attention

    dtype = DTYPES[dtype_name]
    B = max(1, tokens // length)
    q, k, v, dout = (torch.randn(B, heads, length, d, device=device, dtype=dtype) for _ in range(4))
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    scale = d**-0.5

    def flash():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

    def relu():
        return relu_attention(q, k, v, causal=causal, scale=scale)

    def bench(fn, backward=True, graph=False):
        def step():
            if backward:
                fn().backward(dout)
            else:
                with torch.no_grad():
                    fn()

        if graph:
            return do_bench_cudagraph(step, rep=100, grad_to_none=[q, k, v], return_mode="median")
        return do_bench(step, warmup=25, rep=100, grad_to_none=[q, k, v], return_mode="median")

    def graph_times(r):
        """The GPU's time alone: the same steps replayed from a CUDA graph, no host between."""
        try:
            r["flash_graph_ms"] = bench(flash, graph=True)
            with form():
                r["relu_triton_graph_ms"] = bench(relu, graph=True)
            r["graph_speedup_vs_flash"] = r["flash_graph_ms"] / r["relu_triton_graph_ms"]
        except Exception as e:  # a step that cannot be captured: recorded
            r["graph_error"] = f"{type(e).__name__}: {e}"[:500]
        return r

    r = {"dtype": dtype_name, "length": length, "batch": B, "heads": heads, "head_dim": d, "causal": causal}

    def form():  # the backward form timed, a new context manager at each use (one can be entered once)
        return two_pass_backward() if two_pass else one_pass_backward() if one_pass else contextlib.nullcontext()

    if graphs == "only":
        return graph_times(r)
    try:
        r["flash_ms"], r["relu_triton_ms"] = [], []
        for _ in range(2):
            r["flash_ms"].append(bench(flash))
            with form():
                r["relu_triton_ms"].append(bench(relu))
        if not (two_pass or one_pass):  # each backward form's own time
            with two_pass_backward():
                r["relu_triton_two_pass_ms"] = bench(relu)
            if dtype_name != "fp32":
                with one_pass_backward():
                    r["relu_triton_one_pass_ms"] = bench(relu)
            if ra._tile("relu_attention_fwd", dtype, d, True) is not None:  # the tier not taken
                other = "sentence" if ra._is_long(length, length) else "long"
                with long_tiles(1 << 62 if other == "sentence" else 1):
                    r[f"relu_triton_{other}_tiles_ms"] = bench(relu)
                    r[f"relu_triton_{other}_tiles_fwd_ms"] = bench(relu, backward=False)
        r["flash_fwd_ms"] = bench(flash, backward=False)
        r["relu_triton_fwd_ms"] = bench(relu, backward=False)
        r["speedup_vs_flash"] = statistics_ratio(r["flash_ms"], r["relu_triton_ms"])
        r["fwd_speedup_vs_flash"] = r["flash_fwd_ms"] / r["relu_triton_fwd_ms"]
    except Exception as e:  # recorded, never hidden
        r["error"] = f"{type(e).__name__}: {e}"[:500]
        return r
    return graph_times(r) if graphs else r


def timing(device, dtype_names, lengths, tokens, heads, d, rows=None, save=lambda: None, graphs=True):
    """Every case of :func:`time_case`, saved as it ends; then, with ``graphs``, each case's
    CUDA-graph times added to its row (a second pass: a failed capture cannot touch the first
    pass's figures; after one, the other cases are not captured)."""
    rows = [] if rows is None else rows
    cases = [(dt, length, causal) for dt in dtype_names for length in lengths for causal in (False, True)]
    for dt, length, causal in cases:
        r = time_case(device, dt, length, tokens, heads, d, causal)
        rows.append(r)
        save()
        print(f"[kernels] time {fmt_time(r)}", flush=True)
    failed = None
    for r, (dt, length, causal) in zip(rows[len(rows) - len(cases) :], cases) if graphs else ():
        if "error" in r:
            continue
        if failed is not None:
            r["graph_error"] = f"not captured after an earlier capture failed ({failed[:200]})"
        else:
            extra = time_case(device, dt, length, tokens, heads, d, causal, graphs="only")
            r.update({k: v for k, v in extra.items() if "graph" in k})
            failed = r.get("graph_error")
        save()
        print(f"[kernels] time (CUDA graph) {fmt_time(r)}", flush=True)
    return rows


#: tiles tried by ``--parts sweep`` per kernel, (BLOCK_M, BLOCK_N, num_warps, num_stages),
#: for half precision at head dim 64, at each of ``--sweep-lengths``; the tile replaces the
#: kernel's tile in both tiers (relu_attention._TILES and _LONG_TILES), so a long call takes
#: it too.  The backward first: on the H200 (2026-11-27, docs/results/bench-gpu-h200.json)
#: the forward ran at 1.50-1.67x flash at 4,096 tokens and the backward at 0.73x (1.77 ms
#: against flash's 1.29, fp16, full), the dK/dV pass on its sentence tile.  dK/dV: the
#: shipped (16, 64, 4, 2), 128-key tiles (half the query and dO traffic per score) and
#: 32- and 64-query tiles (fewer, larger dots); the one pass (``relu_attention_bwd``): the
#: same, up to FlashAttention-2's 64 x 128 with 8 warps (a quarter of the shipped tile's
#: atomic dQ adds per score).  Compiled here for sm_90 (2026-11-27): under Triton 3.7.1
#: none spills; under 3.6.0 (the GPU machines') the dK/dV pass's 64-query tiles with 2
#: stages spill 4-12 bytes and the one pass's 56 (its (64, 128, 8, 1), unpipelined, does
#: not), timed to see what that costs; with 4 warps the 32- and 64-query tiles spill more
#: and are left out.  On sm_80 every 64-query tile spills, so a winner for the H100/H200
#: would need a tile per device family (make check-kernels requires both).  dK/dV and dQ are timed with the two-pass backward (the one they
#: belong to), the one pass's tiles with the one pass, at every length.  Forward and dQ: the
#: sentence tiles, the long tier's, and the other 128-query tiles that compile without
#: spills (docs/performance.md "Long calls take larger tiles"; (128, 128, 8, 2) spills,
#: timed to see what spilling costs).
SWEEP = {
    "relu_attention_bwd_dkdv": [
        (16, 64, 4, 2),
        (16, 128, 8, 2),
        (32, 64, 8, 2),
        (32, 128, 8, 2),
        (32, 128, 8, 3),
        (64, 64, 8, 2),
        (64, 128, 8, 2),
        (64, 128, 8, 1),
    ],
    "relu_attention_bwd": [
        (16, 64, 4, 2),
        (32, 64, 8, 2),
        (32, 128, 8, 2),
        (64, 64, 8, 2),
        (64, 128, 8, 2),
        (64, 128, 8, 1),
    ],
    "relu_attention_bwd_dq": [(64, 64, 8, 2), (128, 64, 8, 3), (128, 64, 8, 2), (128, 32, 8, 3), (64, 64, 4, 2)],
    "relu_attention_fwd": [(64, 32, 4, 3), (128, 64, 8, 3), (128, 32, 4, 3), (128, 32, 8, 3), (128, 128, 8, 2)],
}
#: the sweep's default lengths (tokens per sequence; 16,384 tokens per call)
SWEEP_LENGTHS = (4096, 1024)


def sweep(device, dtype_name="fp16", d=64, lengths=SWEEP_LENGTHS, tokens=16384, heads=8, rows=None, save=lambda: None):
    """Forward+backward time of ReLU attention with each tile of :data:`SWEEP` at each of
    ``lengths``, one kernel's tile changed at a time (the others as shipped), each checked
    against float64 first (a tile that computes wrong is reported, never timed); one row per
    tile and length (a tile is compiled once: its check and its lengths run together)."""
    from fairseq_sparse_attn.kernels import relu_attention as ra

    rows = [] if rows is None else rows
    shipped, shipped_long = dict(ra._TILES), dict(ra._LONG_TILES)

    def put_back():
        ra._TILES.clear()
        ra._TILES.update(shipped)
        ra._LONG_TILES.clear()
        ra._LONG_TILES.update(shipped_long)
        ra.configurations_changed()

    def taken(kernel, length):
        """The tile a call of ``length`` tokens takes as shipped."""
        return (ra._is_long(length, length) and shipped_long.get((kernel, d))) or shipped[(kernel, True, d)]

    try:
        for kernel, tiles in SWEEP.items():
            for tile in tiles:
                put_back()
                # both tiers: the check below runs a short call, the timing a long one
                ra._TILES[(kernel, True, d)] = tile
                ra._LONG_TILES[(kernel, d)] = tile
                ra.configurations_changed()
                two_pass = kernel in ("relu_attention_bwd_dkdv", "relu_attention_bwd_dq")
                check = None
                for length in lengths:
                    r = {"kernel": kernel, "tile": tile, "length": length, "shipped": taken(kernel, length) == tile}
                    try:
                        if check is None:
                            with two_pass_backward() if two_pass else contextlib.nullcontext():
                                check = check_attention(
                                    device, d, dtype_name, "causal_self_scaled", seed=hash(tile) % 1000
                                )
                        r["ok"] = check["ok"]
                        if check["ok"]:
                            t = time_case(
                                device,
                                dtype_name,
                                length,
                                tokens,
                                heads,
                                d,
                                causal=False,
                                two_pass=two_pass,
                                one_pass=kernel == "relu_attention_bwd",
                            )
                            r["relu_triton_ms"], r["flash_ms"] = t.get("relu_triton_ms"), t.get("flash_ms")
                            r["speedup_vs_flash"] = t.get("speedup_vs_flash")
                            r["error"] = t.get("error")
                        elif check.get("error"):
                            r["error"] = check["error"]
                    except Exception as e:  # a tile that does not compile or launch: recorded
                        r["ok"], r["error"] = False, f"{type(e).__name__}: {e}"[:300]
                        if check is None:  # its check failed: the other lengths are not tried
                            check = {"ok": False, "error": r["error"]}
                    rows.append(r)
                    save()
                    s = r.get("speedup_vs_flash")
                    said = f" {s['mean']:.2f}x flash" if s else ""
                    if r.get("error"):  # a wrong tile, or one that ran right and could not be timed
                        said += f" ({r['error'][:200]})"
                    print(
                        f"[kernels] sweep {kernel} {tile} at {length}: {'ok' if r['ok'] else 'FAIL'}{said}", flush=True
                    )
    finally:
        put_back()
    return rows


#: fp32 forward tiles probed by ``--parts fp32probe`` at head dims 64 and 128, (BLOCK_M,
#: BLOCK_N, num_warps, num_stages): on the H100 (Triton 3.6.0) the shipped fp32 forward was
#: wrong at d64 (64, 32, 8, 2) and d128 (32, 32, 4, 2), right at d32 (64, 32, 4, 2) and d256
#: (16, 32, 8, 1); one call earlier (k read through swapped strides) d64 (64, 32, 4, 2) was
#: right and d128 (32, 32, 4, 2), d256 (32, 32, 8, 1) wrong.  Warps, stages and tile sizes
#: each varied alone, and each tile with TF32 dots: an error that stays with "tf32" is not
#: in the IEEE dot path.
FP32_PROBE = {
    64: [
        (64, 32, 8, 2),
        (64, 32, 4, 2),
        (64, 32, 8, 1),
        (32, 32, 4, 2),
        (32, 32, 4, 1),
        (16, 32, 4, 1),
        (64, 16, 4, 1),
    ],
    128: [(32, 32, 4, 2), (32, 32, 4, 1), (32, 32, 8, 1), (16, 32, 4, 1), (16, 16, 4, 1), (64, 32, 8, 1)],
}


def fp32_probe(device, rows=None, save=lambda: None):
    """The fp32 forward of each tile of :data:`FP32_PROBE` checked against float64 (every
    case of the correctness part), with IEEE and with TF32 dots: which settings give the
    wrong fp32 forward seen on the H100 (docs/performance.md "GPU")."""
    from fairseq_sparse_attn.kernels import relu_attention as ra

    rows = [] if rows is None else rows
    shipped, make = dict(ra._TILES), ra._make_config

    def with_precision(precision):
        def made(kernel, dtype, head_dim, long=False, dropout=False, row_sums=False):
            config = make(kernel, dtype, head_dim, long, dropout, row_sums)
            config["constexprs"] = dict(config["constexprs"], PRECISION=precision)
            return config

        return made

    try:
        with every_dtype_served():
            for d, tiles in FP32_PROBE.items():
                for tile in tiles:
                    for precision in ("ieee", "tf32"):
                        ra._TILES.clear()
                        ra._TILES.update(shipped)
                        ra._TILES[("relu_attention_fwd", False, d)] = tile
                        ra._make_config = with_precision(precision)
                        ra.configurations_changed()
                        r = {"head_dim": d, "tile": tile, "precision": precision}
                        errors, diagnoses = {}, {}
                        for case in ATTENTION_CASES:
                            try:
                                check = check_attention(device, d, "fp32", case, seed=len(rows) + 1, diagnose=True)
                                errors[case] = check["errors"]["out"]
                                diagnoses[case] = check["diagnosis"]
                            except Exception as e:  # a tile that does not compile: recorded
                                errors[case] = f"{type(e).__name__}: {e}"[:200]
                        r["out_errors"], r["diagnosis"] = errors, diagnoses
                        tol = 1e-5 if precision == "ieee" else 5e-3
                        r["ok"] = all(isinstance(e, float) and e <= tol for e in errors.values())
                        rows.append(r)
                        save()
                        worst = max((e for e in errors.values() if isinstance(e, float)), default=float("nan"))
                        wrong = sum(x["wrong_rows"] for x in diagnoses.values())
                        moved = [c for c, x in diagnoses.items() if not x["repeat_identical"]]
                        print(
                            f"[kernels] fp32probe d{d} {tile} {precision}: {'ok' if r['ok'] else 'WRONG'} "
                            f"(worst out error {worst:.2g}; {wrong} of {sum(x['rows'] for x in diagnoses.values())} "
                            f"rows wrong; {'moves between runs: ' + ','.join(moved) if moved else 'same on a rerun'})",
                            flush=True,
                        )
    finally:
        ra._TILES.clear()
        ra._TILES.update(shipped)
        ra._make_config = make
        ra.configurations_changed()
    return rows


def statistics_ratio(flash, relu):
    """flash / relu time: the ratio of the medians' means, with the range over pairings."""
    pairs = [a / b for a in flash for b in relu]
    return {"mean": sum(flash) / len(flash) / (sum(relu) / len(relu)), "min": min(pairs), "max": max(pairs)}


def fmt_time(r):
    head = f"{r['dtype']} L={r['length']} B={r['batch']} {'causal' if r['causal'] else 'full'}"
    if "error" in r:
        return f"{head}: ERROR {r['error'][:300]}"
    s = r["speedup_vs_flash"]
    return (
        f"{head}: flash {'/'.join(f'{x:.3f}' for x in r['flash_ms'])} ms, relu-triton "
        f"{'/'.join(f'{x:.3f}' for x in r['relu_triton_ms'])} ms fwd+bwd -> "
        f"{s['mean']:.2f}x [{s['min']:.2f}-{s['max']:.2f}]; fwd only {r['fwd_speedup_vs_flash']:.2f}x"
        + "".join(
            f"; {form}-pass backward {r[f'relu_triton_{form}_pass_ms']:.3f} ms fwd+bwd"
            for form in ("one", "two")
            if f"relu_triton_{form}_pass_ms" in r
        )
        + "".join(
            f"; {tier} tiles {r[f'relu_triton_{tier}_tiles_ms']:.3f} ms fwd+bwd, "
            f"{r[f'relu_triton_{tier}_tiles_fwd_ms']:.3f} ms fwd"
            for tier in ("sentence", "long")
            if f"relu_triton_{tier}_tiles_ms" in r
        )
        + (
            f"; CUDA graph: flash {r['flash_graph_ms']:.3f}, relu-triton {r['relu_triton_graph_ms']:.3f} ms "
            f"-> {r['graph_speedup_vs_flash']:.2f}x"
            if "graph_speedup_vs_flash" in r
            else f"; CUDA graph: {r['graph_error'][:200]}"
            if "graph_error" in r
            else ""
        )
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="bench_gpu_out/kernels.json")
    p.add_argument("--device", default="cuda")
    p.add_argument("--parts", default="correctness,timing", help="comma list of correctness, timing, sweep, fp32probe")
    p.add_argument("--smoke", action="store_true", help="tiny sizes (a CPU check of this script)")
    p.add_argument(
        "--shard",
        default="0/1",
        metavar="K/N",
        help="correctness: only the K-th of N shares of the checks (0-based), for N processes that share the compiles",
    )
    p.add_argument(
        "--sweep-lengths",
        default=",".join(map(str, SWEEP_LENGTHS)),
        metavar="N[,N...]",
        help="sweep: the tokens per sequence each tile is timed at (default %(default)s)",
    )
    args = p.parse_args(argv)
    parts = args.parts.split(",")
    try:
        sweep_lengths = tuple(int(x) for x in args.sweep_lengths.split(","))
        if not sweep_lengths or min(sweep_lengths) < 1:
            raise ValueError
    except ValueError:
        print(
            f"gpu_kernels: error: --sweep-lengths {args.sweep_lengths!r}: expected positive integers", file=sys.stderr
        )
        return 2
    try:
        k, n = (int(x) for x in args.shard.split("/"))
        if not 0 <= k < n:
            raise ValueError
    except ValueError:
        print(f"gpu_kernels: error: --shard {args.shard!r}: expected K/N with 0 <= K < N", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_kernels: error: no CUDA device (use --device cpu --smoke for a CPU check)", file=sys.stderr)
        return 2
    import triton

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu (Triton interpreter)",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "shard": args.shard,
    }
    from fairseq_sparse_attn.provenance import git_state

    result["git_commit"], result["git_dirty"] = git_state()  # the kernels measured, by commit

    def save():
        out.write_text(json.dumps(result, indent=1) + "\n")

    if "correctness" in parts:
        dims = (32,) if args.smoke else HEAD_DIMS
        result["correctness"] = []
        result["expected_checks"] = len(planned_checks(dims, list(DTYPES), shard=(k, n)))
        save()  # (a shard cut off by its time limit shows fewer checks than expected)
        correctness(args.device, dims, list(DTYPES), rows=result["correctness"], save=save, shard=(k, n))
        result["correctness_ok"] = all(r["ok"] for r in result["correctness"])
        save()
    if "timing" in parts:
        result["timing"] = []
        if args.smoke:
            timing(args.device, ["fp32"], (16,), 32, 2, 32, rows=result["timing"], save=save, graphs=False)
        else:
            timing(args.device, ["fp16", "bf16"], LENGTHS, 16384, 8, 64, rows=result["timing"], save=save,
                   graphs=args.device == "cuda")  # fmt: skip
    if "sweep" in parts:  # the tiles of SWEEP at head dim 64, fp16, at each of --sweep-lengths
        result["sweep"] = []
        sweep(args.device, lengths=sweep_lengths, rows=result["sweep"], save=save)
    if "fp32probe" in parts:  # the fp32 forward's tiles of FP32_PROBE, IEEE and TF32 dots
        result["fp32probe"] = []
        fp32_probe(args.device, rows=result["fp32probe"], save=save)
    print(f"[kernels] wrote {out}; correctness {'ok' if result.get('correctness_ok', True) else 'FAILED'}")
    return 0 if result.get("correctness_ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())
