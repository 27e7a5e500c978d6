"""ReLUFormer's row sums inside the fused ReLU-attention kernels
(``relu_attention_with_row_sums``, constexpr ``ROW_SUMS``,
fairseq_sparse_attn/kernels/relu_attention.py), run through Triton's interpreter.

The regularized criterion (ReLUFormer Eq. 7) needs, for every query row, S_i = sum_j w_ij
and sum_j w_ij log w_ij of the weights w_ij = c_i relu(s_ij) before attention dropout, and
their gradients.  The independent computation: the plain formula in float64 with autograd
(weights, their sums, 0 log 0 = 0, the output with dropout's decisions from the numpy
Philox), and the attention core's materialized backend.  The kernels must agree in the
output, both sums and the three gradients of a loss that uses all three, through both
backwards, at every mask, with dropout, on the long tier's tiles, and at rows with no
visible key or no positive score (sums 0, no NaN).
"""

import math
import sys
from pathlib import Path

import pytest
import torch

from conftest import require_kernels  # noqa: E402

require_kernels()  # the Triton kernels run here, else the module skips (CI: fails)

from test_triton_relu_attention import OpCounter, deterministic, padding, rel, weights  # noqa: E402

from fairseq_sparse_attn.kernels import relu_attention as ra  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from philox_reference import keep_mask  # noqa: E402

TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def reference(q, k, v, key_padding, causal, kv_groups, scale, gamma, keep=None, p=0.0):
    """(out, sum_j w_ij, sum_j w_ij log w_ij) in float64, the sums before dropout (the
    weights: test_triton_relu_attention.weights)."""
    w = weights(q, k, key_padding, causal, kv_groups, scale, gamma)
    v = v.double().repeat_interleave(kv_groups, dim=0)
    wsum = w.sum(-1)
    wlogw = torch.where(w > 0, w * torch.log(w.clamp(min=1e-300)), torch.zeros(())).sum(-1)
    mixed = w if keep is None else w * keep.double() / (1.0 - p)
    return mixed @ v, wsum, wlogw


def run(dtype, d, tgt, src, heads=2, kv_bsz=2, key_padding=None, causal=False, kv_groups=1, gamma=None, p=0.0, seed=0):
    """Errors of the kernels' (out, wsum, wlogw) and of dq, dk, dv (one pass and two passes)
    of the loss <out, A> + <wsum, B> + <wlogw, C> against the reference; returns (errors,
    (out, wsum, wlogw, dq, dk, dv))."""
    g = torch.Generator().manual_seed(seed)
    bsz = kv_bsz * kv_groups
    q = torch.randn(bsz, heads, tgt, d, generator=g).to(dtype).requires_grad_()
    k = torch.randn(kv_bsz, heads, src, d, generator=g).to(dtype).requires_grad_()
    v = torch.randn(kv_bsz, heads, src, d, generator=g).to(dtype).requires_grad_()
    a = torch.randn(bsz, heads, tgt, d, generator=g).to(dtype)
    b = torch.randn(bsz, heads, tgt, generator=g)
    c = torch.randn(bsz, heads, tgt, generator=g)
    scale = 1 / math.sqrt(d)
    drop_seed = int(torch.randint(0, 2**62, (1,), generator=g)) if p else None
    seed_arg = None if drop_seed is None else torch.tensor([drop_seed])
    out, wsum, wlogw = ra.relu_attention_with_row_sums(
        q, k, v, key_padding, causal, kv_groups, scale, gamma, p, seed_arg
    )
    assert out.dtype == dtype and wsum.dtype == wlogw.dtype == torch.float32 and wsum.shape == (bsz, heads, tgt)

    def loss():
        return (out.float() * a.float()).sum() + (wsum * b).sum() + (wlogw * c).sum()

    one_pass = torch.autograd.grad(loss(), (q, k, v), retain_graph=True)
    with deterministic():
        two_pass = torch.autograd.grad(loss(), (q, k, v))
    assert torch.equal(one_pass[1], two_pass[1]) and torch.equal(one_pass[2], two_pass[2])  # one dK/dV code
    keep = None if drop_seed is None else keep_mask(drop_seed, bsz, heads, tgt, src, p)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref_out, ref_sum, ref_log = reference(*leaves, key_padding, causal, kv_groups, scale, gamma, keep, p)
    ref_loss = (ref_out * a.double()).sum() + (ref_sum * b.double()).sum() + (ref_log * c.double()).sum()
    wants = torch.autograd.grad(ref_loss, leaves)
    errors = {"out": rel(out, ref_out), "wsum": rel(wsum, ref_sum), "wlogw": rel(wlogw, ref_log)}
    for suffix, grads in (("", one_pass), ("_two_pass", two_pass)):
        for name, grad, want in zip(("dq", "dk", "dv"), grads, wants):
            assert grad.dtype == dtype and torch.isfinite(grad).all()
            errors[name + suffix] = rel(grad, want)
    return errors, (out, wsum, wlogw, *one_pass)


@pytest.mark.parametrize("gamma", [None, 0.8])
@pytest.mark.parametrize("d", [32, 64, 128, 256])
def test_fp32_ragged_cross_attention_each_head_dim(d, gamma):
    errors, _ = run(torch.float32, d, tgt=19, src=37, key_padding=padding(2, 37, [37, 21]), gamma=gamma)
    assert max(errors.values()) <= TOL[torch.float32], errors


@pytest.mark.parametrize("gamma", [None, 1.3])
def test_fp32_causal_self_attention_with_padding(gamma):
    errors, _ = run(torch.float32, 64, tgt=33, src=33, key_padding=padding(2, 33, [33, 20]), causal=True, gamma=gamma)
    assert max(errors.values()) <= TOL[torch.float32], errors


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [32, 128])
def test_half_dtypes_through_both_backwards(dtype, d):
    errors, _ = run(dtype, d, tgt=21, src=40, key_padding=padding(2, 40, [40, 29]), causal=False, gamma=1.0)
    assert max(errors.values()) <= TOL[dtype], errors


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_with_attention_dropout_the_sums_are_of_the_weights_before_it(dtype):
    """Dropout drops weights from the output only: the sums and their gradients are the
    undropped weights' (the materialized path sums the weights before its dropout)."""
    errors, _ = run(
        dtype, 64, tgt=17, src=17, key_padding=padding(2, 17, [17, 9]), causal=True, gamma=1.0, p=0.3, seed=4
    )
    assert max(errors.values()) <= TOL[dtype], errors


def test_kv_groups_and_a_head_dim_of_256():
    errors, _ = run(torch.float16, 256, tgt=5, src=23, kv_bsz=2, kv_groups=3, key_padding=padding(2, 23, [23, 11]))
    assert max(errors.values()) <= TOL[torch.float16], errors


def test_the_long_tier_s_tiles(monkeypatch):
    """The long tier's 128-query tiles (forward and dQ pass) give the reference's sums and
    gradients, with and without dropout."""
    monkeypatch.setattr(ra, "LONG_FROM", 8)
    for p in (0.0, 0.2):
        errors, _ = run(torch.float16, 64, tgt=70, src=90, kv_bsz=1, causal=True, gamma=1.0, p=p, seed=5)
        assert max(errors.values()) <= TOL[torch.float16], errors


def test_rows_without_a_visible_key_or_a_positive_score():
    """An entry whose keys are all padding and a row whose scores are all negative: sums 0
    (0 log 0 = 0), output 0, every gradient finite; the other rows as the reference."""
    g = torch.Generator().manual_seed(6)
    q = torch.randn(2, 1, 4, 32, generator=g)
    k = torch.randn(2, 1, 6, 32, generator=g)
    k[0, 0] = k[0, 0].abs()
    q[0, 0, 1] = -q[0, 0, 1].abs()  # row 1 of entry 0: every score <= 0
    pad = padding(2, 6, [6, 0])  # entry 1: no visible key
    q, k = q.requires_grad_(), k.requires_grad_()
    v = torch.randn(2, 1, 6, 32, generator=g, requires_grad=True)
    out, wsum, wlogw = ra.relu_attention_with_row_sums(q, k, v, pad, gamma=1.0)
    assert torch.equal(wsum[1], torch.zeros_like(wsum[1])) and torch.equal(wlogw[1], torch.zeros_like(wlogw[1]))
    assert wsum[0, 0, 1] == 0 and wlogw[0, 0, 1] == 0 and torch.equal(out[0, 0, 1], torch.zeros(32))
    (out.sum() + wsum.sum() + wlogw.sum()).backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    _, ref_sum, ref_log = reference(q.detach(), k.detach(), v.detach(), pad, False, 1, 1.0, 1.0)
    torch.testing.assert_close(wsum.double(), ref_sum, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(wlogw.double(), ref_log, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])  # the two passes, the one pass
def test_a_loss_of_the_sums_alone(dtype):
    """Where only the sums reach the loss (the output does not), the backward runs with a
    zero output gradient: dV is zero, dQ and dK are the sums' alone."""
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, 9, 32, generator=g).to(dtype).requires_grad_() for _ in range(3))
    pad = padding(1, 9, [7])
    _, wsum, wlogw = ra.relu_attention_with_row_sums(q, k, v, pad, gamma=1.0, dropout_p=0.2)
    (wsum.sum() + 0.5 * wlogw.sum()).backward()
    assert torch.equal(v.grad, torch.zeros_like(v))
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    _, ref_sum, ref_log = reference(*leaves, pad, False, 1, 1.0, 1.0)
    (ref_sum.sum() + 0.5 * ref_log.sum()).backward()
    for t, leaf in zip((q, k), leaves):
        assert rel(t.grad, leaf.grad) < TOL[dtype]


def test_without_row_sums_nothing_changes(monkeypatch):
    """The output of the row-sums form is the plain form's, bit for bit, and a call that does
    not ask for the sums launches the forms without them."""
    monkeypatch.setattr(ra, "LAUNCH_LOG", [])
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(2, 2, 11, 64, generator=g).half().requires_grad_() for _ in range(3))
    plain = ra.relu_attention(q, k, v, padding(2, 11, [11, 7]), gamma=1.0)
    plain.sum().backward()
    with_sums = ra.relu_attention_with_row_sums(q, k, v, padding(2, 11, [11, 7]), gamma=1.0)[0]
    assert torch.equal(plain, with_sums)
    with_sums.sum().backward()  # the sums took no part in the loss: the plain backward
    names = [entry[0] for entry in ra.LAUNCH_LOG]
    assert names == [
        "relu_attention_fwd_d64_fp16",
        "relu_attention_bwd_d64_fp16",
        "relu_attention_fwd_d64_fp16_rowsums",
        "relu_attention_bwd_d64_fp16",
    ]


def test_row_sums_configurations_are_listed_and_launched(monkeypatch):
    """Every configuration has a row-sums form in launch_configs() (so the AOT check compiles
    it), named ``..._rowsums``, and a call whose loss uses the sums launches those only."""
    names = {c["name"] for c in ra.launch_configs()}
    plain = {n for n in names if not n.endswith("_rowsums")}
    assert {n + "_rowsums" for n in plain} == names - plain
    for c in ra.launch_configs():
        assert c["constexprs"]["ROW_SUMS"] == c["name"].endswith("_rowsums")
    log = []
    monkeypatch.setattr(ra, "LAUNCH_LOG", log)
    for dtype in ra.DTYPES:
        q = torch.randn(1, 1, 5, 32, dtype=dtype, requires_grad=True)
        out, wsum, wlogw = ra.relu_attention_with_row_sums(q, q, q, dropout_p=0.1)
        (out.float().sum() + wsum.sum() + wlogw.sum()).backward(retain_graph=True)
        with deterministic():
            (out.float().sum() + wsum.sum()).backward()
    assert all(name.endswith("_dropout_rowsums") for name, *_ in log)
    listed = {c["name"]: c for c in ra.launch_configs()}
    for name, fn, constexprs, warps, stages, arg_types in log:
        c = listed[name]
        assert fn.fn is c["kernel"].fn
        assert (constexprs, warps, stages) == (c["constexprs"], c["num_warps"], c["num_stages"])
        assert arg_types == [t for t in c["signature"].values() if t != "constexpr"]
    # a forward per dtype; fp32: the two passes twice; fp16, bf16: the one pass, then the two
    assert len(log) == 3 + 2 * 2 + 2 * (1 + 2)


def test_one_op_per_kernel_and_opcheck():
    x = torch.randn(1, 2, 7, 32, dtype=torch.float16)
    q, k, v = (x.clone().requires_grad_() for _ in range(3))
    with OpCounter() as fwd:
        out, wsum, _ = ra.relu_attention_with_row_sums(q, k, v, gamma=1.0)
    assert [op for op in fwd.ops if op.startswith("fsa.")] == ["fsa.relu_attention_fwd.default"]
    with OpCounter() as bwd:
        (out.float().sum() + wsum.sum()).backward()
    assert [op for op in bwd.ops if op.startswith("fsa.")] == ["fsa.relu_attention_bwd.default"]
    q = torch.randn(2, 1, 5, 32, requires_grad=True)
    k = torch.randn(1, 1, 6, 32, requires_grad=True)
    v = torch.randn(1, 1, 6, 32, requires_grad=True)
    pad = padding(1, 6, [4])
    for dropout in ((None, 0.0), (torch.tensor([3]), 0.25)):
        torch.library.opcheck(
            ra.relu_attention_fwd,
            (q, k, v, pad, False, 2, 0.5, True, 1.4, *dropout, True),
            test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
        )
        half = [t.detach().half() for t in (q, k, v)]
        dout = torch.randn(2, 1, 5, 32).half()
        rs, dsums = torch.rand(2, 1, 5), torch.randn(2, 1, 5, 2)
        for op in (ra.relu_attention_bwd, ra.relu_attention_bwd_dkdv, ra.relu_attention_bwd_dq):
            torch.library.opcheck(
                op,
                (dout, *half, pad, rs, False, 2, 0.5, True, *dropout, dsums),
                test_utils=("test_schema", "test_faketensor"),
            )


def test_traced_by_torch_compile_without_graph_breaks():
    q, k, v = (torch.randn(1, 2, 6, 32, requires_grad=True) for _ in range(3))

    def f(q, k, v):
        out, wsum, wlogw = ra.relu_attention_with_row_sums(q * 2, k, v, causal=True, gamma=1.0)
        return out.sum() + wsum.square().sum() + wlogw.sum()

    torch._dynamo.reset()
    loss = torch.compile(f, backend="aot_eager", fullgraph=True)(q, k, v)
    loss.backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    eager = f(q, k, v)
    eager.backward()
    assert torch.allclose(loss, eager)
    for a, t in zip(grads, (q, k, v)):
        assert torch.allclose(a, t.grad)


# --------------------------------------------------------------------------- the backend
def test_attend_on_triton_returns_the_materialized_row_sums():
    """``attend()`` collecting "row_sums" on ``--attn-backend triton``: (wsum, wlogw, n) and
    every gradient of a loss of them and of the output equal the materialized path's, run
    in float64 (fp32: 1e-5 relative in norm, the kernels' tolerance; element by element the
    two fp32 paths differ by their rounding, which depends on the CPU: 2.6e-6 on gradients
    of size 4 on one machine)."""
    from torch import nn

    from fairseq_sparse_attn.attention import build_activation
    from fairseq_sparse_attn.attention.core import AttendSpec, AttentionInputs, attend
    from fairseq_sparse_attn.attention.heads import HeadPlan

    g = torch.Generator().manual_seed(9)
    bsz, heads, tgt, d = 2, 2, 7, 32
    pad = padding(bsz, tgt, [7, 4])
    causal = torch.ones(tgt, tgt, dtype=torch.bool).triu(1)
    hidden = pad.view(bsz, 1, 1, tgt) | causal.view(1, 1, tgt, tgt)
    results = {}
    for backend, dtype in (("materialized", torch.float64), ("triton", torch.float32)):
        leaves = [
            (torch.randn(bsz, heads, tgt, d, generator=g.manual_seed(9 + i)) / 4).to(dtype).requires_grad_()
            for i in range(3)
        ]
        spec = AttendSpec(
            activation=build_activation("relu_scaled", heads),
            dropout=nn.Dropout(0.0),
            heads=HeadPlan(heads),
            backend=backend,
        )
        out, inter = attend(*leaves, AttentionInputs(hidden=hidden, collect=frozenset({"row_sums"})), spec)
        assert inter.backend == backend
        wsum, wlogw, n = inter.row_sums
        (out.square().sum() + wsum.square().sum() + wlogw.sum()).backward()
        results[backend] = (out, wsum, wlogw, n.expand(bsz, 1, tgt, 1), *(t.grad for t in leaves))
    got, want = results["triton"], results["materialized"]
    assert torch.equal(got[3], want[3].to(got[3].dtype))  # the visible keys: counts
    for name, a, b in zip(("out", "wsum", "wlogw", None, "dq", "dk", "dv"), got, want):
        if name is not None:
            assert a.dtype == torch.float32, name
            error = ((a.double() - b).norm() / b.norm()).item()
            assert error <= 1e-5, (name, error)


@pytest.mark.parametrize("backend", ["triton", "materialized"])
def test_the_visible_key_counts_are_exact_in_half_precision(backend):
    """n_i (the criterion's entropy bound c log n_i) is counted in fp32 on either backend:
    301 visible keys stay 301 with bf16 inputs (bf16 holds integers exactly only up to 256)."""
    from torch import nn

    from fairseq_sparse_attn.attention import build_activation
    from fairseq_sparse_attn.attention.core import AttendSpec, AttentionInputs, attend
    from fairseq_sparse_attn.attention.heads import HeadPlan

    q = torch.randn(1, 1, 2, 32).bfloat16()
    k = torch.randn(1, 1, 310, 32).bfloat16()
    hidden = padding(1, 310, [301]).view(1, 1, 1, 310)
    spec = AttendSpec(
        activation=build_activation("relu_scaled", 1), dropout=nn.Dropout(0.0), heads=HeadPlan(1), backend=backend
    )
    _, inter = attend(q, k, k, AttentionInputs(hidden=hidden, collect=frozenset({"row_sums"})), spec)
    assert inter.row_sums[2].dtype == torch.float32 and inter.row_sums[2].flatten().tolist() == [301.0]


def test_auto_takes_the_kernels_for_row_sums_only_where_measured(monkeypatch):
    """A call with row sums is a setting of its own ("fp16+rowsums", "fp16+dropout+rowsums"):
    no recorded run has measured it, so auto does not take the kernels for it, until one
    does (``make bench-gpu``'s ``reluformer_reg*`` presets)."""
    from fairseq_sparse_attn.attention.backends import triton as tb

    from helpers import kernel_call, on_cuda_device

    def call(dropout, row_sums):
        return kernel_call(activation="relu_scaled", dropout=dropout, row_sums=row_sums)

    on_cuda_device(monkeypatch, "H100")
    monkeypatch.setitem(tb.MEASURED_FASTER, ("H100", "relu_scaled", "fp16"), tb.Measurement("bench-gpu.json", "3.6"))
    assert tb._auto_enabled(None, call(False, False))
    assert not tb._auto_enabled(None, call(False, True)) and not tb._auto_enabled(None, call(True, True))
    monkeypatch.setitem(
        tb.MEASURED_FASTER, ("H100", "relu_scaled", "fp16+dropout+rowsums"), tb.Measurement("bench-gpu.json", "3.6")
    )
    assert tb._auto_enabled(None, call(True, True)) and not tb._auto_enabled(None, call(False, True))


@pytest.mark.parametrize("attention_dropout", [0.0, 0.1])
def test_the_regularized_criterion_trains_on_triton_as_on_the_plain_path(attention_dropout):
    """A ReLUFormer training step with ``relu_regularized_label_smoothed_cross_entropy`` on
    ``--attn-backend triton`` (before: refused at the first step).  Without dropout: the
    loss, the regularizer and every parameter's gradient equal the materialized path's in
    float64 (to 1e-4 relative: the materialized path in fp32 is 3e-5 from it too, the
    regularizer's gradient sums terms of opposite signs).  With attention dropout 0.1 (the
    draws differ between the paths): a finite step with the regularizer's rows."""
    import argparse

    from fairseq.logging import metrics

    from fairseq_sparse_attn.criterions.relu_regularized import ReLURegularizedCriterion

    from helpers import build_model, random_batch

    size = dict(encoder_embed_dim=64, decoder_embed_dim=64, encoder_attention_heads=2, decoder_attention_heads=2)
    size.update(encoder_ffn_embed_dim=64, decoder_ffn_embed_dim=64, dropout=0.0, attention_dropout=attention_dropout)
    steps = {}
    for backend, dtype in (("materialized", torch.float64), ("materialized", torch.float32), ("triton", torch.float32)):
        model, d = build_model("reluformer_iwslt_de_en", attn_backend=backend, **size)
        model = model.to(dtype).train()
        src, lengths, prev = random_batch(d, bsz=3, src_len=9, tgt_len=7)
        target = torch.cat([prev[:, 1:], torch.full((3, 1), d.eos())], dim=1)
        target[prev.eq(d.pad())] = d.pad()
        net_input = {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev}
        sample = {"net_input": net_input, "target": target, "ntokens": int(target.ne(d.pad()).sum()), "nsentences": 3}
        criterion = ReLURegularizedCriterion(argparse.Namespace(target_dictionary=d), False, 0.1, relu_reg_lambda=1.0)
        with metrics.aggregate():
            loss, _, log = criterion(model, sample)
        loss.backward()
        grads = {name: p.grad.double() for name, p in model.named_parameters() if p.grad is not None}
        steps[(backend, dtype)] = (loss.detach().double(), log, grads)
    loss_r, log_r, grads_r = steps[("materialized", torch.float64)]
    loss_t, log_t, grads_t = steps[("triton", torch.float32)]
    assert log_t["reg_loss"] > 0 and torch.isfinite(loss_t) and set(grads_t) == set(grads_r)
    for kind in ("encoder_self", "decoder_self", "cross"):
        assert log_t[f"reg_{kind}_rows"] > 0
    if attention_dropout:
        assert all(torch.isfinite(g).all() for g in grads_t.values())
        return
    for kind in ("encoder_self", "decoder_self", "cross"):
        assert log_t[f"reg_{kind}_rows"] == log_r[f"reg_{kind}_rows"]
    assert rel(loss_t, loss_r) < 1e-5 and abs(float(log_t["reg_loss"]) / float(log_r["reg_loss"]) - 1) < 1e-5
    for name, want in grads_r.items():
        assert rel(grads_t[name], want) < 1e-4, name
        assert rel(steps[("materialized", torch.float32)][2][name], want) < 1e-4, name  # fp32's own error
