"""Attention dropout inside the fused ReLU-attention kernels (``dropout_p``,
fairseq_sparse_attn/kernels/relu_attention.py), run through Triton's interpreter.

The independent computation: Philox-4x32-10 written out in numpy
(``benchmarks/philox_reference.py``: the published algorithm, Salmon et al. 2011, with the
round and key constants of Random123, which Triton's ``tl.philox`` implements; also the
reference of the CUDA checks in ``gpu_kernels.py``) gives the keep decision of every weight from the seed
and the element's counter (key, query, batch * heads + head, 0); the plain formula in
float64 with autograd, with those weights dropped and the kept ones scaled by 1 / (1 - p),
gives the output and the three gradients.  The kernels must agree with it through both
backwards, at every mask, with the row factor, across tiles of any size (the long tier's
tiles give the same numbers), and the decisions must look like dropout: a keep rate of
1 - p, different on each head, entry and seed, the same for the same seed.
"""

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import require_kernels  # noqa: E402

require_kernels()  # the Triton kernels run here, else the module skips (CI: fails)

from test_triton_relu_attention import padding, reference, rel  # noqa: E402
from test_triton_relu_attention import run as attention_run  # noqa: E402

from fairseq_sparse_attn.kernels import relu_attention as ra  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from philox_reference import keep_mask, philox_first_word  # noqa: E402

TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def run(dtype, d, tgt, src, p, **kwargs):
    """Errors of the kernels' output and gradients (both backwards) against the reference
    with the numpy decisions; returns (errors, output)."""
    errors, outputs = attention_run(dtype, d, tgt, src, dropout_p=p, keep_mask=keep_mask, **kwargs)
    return errors, outputs[0]


def test_the_numpy_philox_is_triton_s():
    """The reference's Philox against ``tl.philox`` itself, run through the interpreter on a
    few counters (so a failure below is the kernels', not the reference's)."""
    import triton.language as tl

    from fairseq_sparse_attn.kernels.launch import LaunchPlan, kernel_forms

    def words(SEED, OUT, N: tl.constexpr):
        i = tl.arange(0, N)
        seed = tl.load(SEED)
        w, _, _, _ = tl.philox(
            seed, (i * 7).to(tl.uint32), (i * 3 + 1).to(tl.uint32), (i + 5).to(tl.uint32), (i * 0).to(tl.uint32)
        )
        tl.store(OUT + i, w.to(tl.int32, bitcast=True))

    seed = 0x1234_5678_9ABC_DEF
    out = torch.zeros(16, dtype=torch.int32)
    LaunchPlan(kernel_forms(words), (1,), (), {"N": 16}, 1, 1, out.device)((torch.tensor([seed]), out))
    i = np.arange(16, dtype=np.uint64)
    want = philox_first_word(seed, i * 7, i * 3 + 1, i + 5, np.uint64(0)).astype(np.uint32).view(np.int32)
    assert np.array_equal(out.numpy(), want)


@pytest.mark.parametrize("gamma", [None, 0.8])
def test_fp32_ragged_cross_attention_against_the_dropped_formula(gamma):
    errors, _ = run(torch.float32, 32, tgt=19, src=37, p=0.3, key_padding=padding(2, 37, [37, 21]), gamma=gamma)
    assert max(errors.values()) <= TOL[torch.float32], errors


@pytest.mark.parametrize("gamma", [None, 1.3])
def test_fp32_causal_self_attention_with_padding(gamma):
    errors, _ = run(
        torch.float32, 64, tgt=33, src=33, p=0.1, key_padding=padding(2, 33, [33, 20]), causal=True, gamma=gamma
    )
    assert max(errors.values()) <= TOL[torch.float32], errors


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [32, 128])
def test_half_dtypes_through_both_backwards(dtype, d):
    errors, _ = run(dtype, d, tgt=21, src=40, p=0.2, key_padding=padding(2, 40, [40, 29]))
    assert max(errors.values()) <= TOL[dtype], errors


@pytest.mark.parametrize("d", [64, 256])
def test_other_head_dims_with_kv_groups(d):
    """Beam-search key groups: query entry b reads key copy b // G, and its decisions are
    its own (the counter names the query's entry)."""
    errors, _ = run(
        torch.float16, d, tgt=5, src=23, p=0.25, kv_bsz=2, kv_groups=3, key_padding=padding(2, 23, [23, 11])
    )
    assert max(errors.values()) <= TOL[torch.float16], errors


def test_the_long_tier_s_tiles_drop_the_same_weights(monkeypatch):
    """The decision is the element's, not the tile's: the long tier's 128-query tiles give
    the sentence tiles' numbers (to fp16 rounding of the sums' order) and the reference's."""
    monkeypatch.setattr(ra, "LONG_FROM", 8)
    errors, long_out = run(torch.float16, 64, tgt=70, src=90, p=0.3, causal=True, kv_bsz=1)
    assert max(errors.values()) <= TOL[torch.float16], errors
    monkeypatch.setattr(ra, "LONG_FROM", 10**9)
    _, sentence_out = run(torch.float16, 64, tgt=70, src=90, p=0.3, causal=True, kv_bsz=1)
    assert rel(long_out, sentence_out.double()) < 1e-3


def test_keep_rate_and_independence():
    """1 - p of the weights kept (within 5 standard deviations), different decisions on each
    head and entry and for each seed, the same for the same seed; p = 0 is no dropout."""
    bsz, heads, tgt, src, p = 2, 2, 64, 64, 0.3
    q = torch.ones(bsz, heads, tgt, 32)  # every score positive
    k = torch.ones(bsz, heads, src, 32)
    # v = one-hot keys (32 of them): out[..., j] = kept_ij / (1 - p) * s_ij
    v = torch.zeros(bsz, heads, src, 32)
    v[:, :, torch.arange(32), torch.arange(32)] = 1.0
    seed = torch.tensor([7])
    out = ra.relu_attention(q, k, v, scale=1 / 32, dropout_p=p, seed=seed)
    kept = out != 0
    assert torch.allclose(out[kept], torch.full_like(out[kept], 1 / (1 - p)))
    n = kept.numel()
    assert abs(kept.float().mean().item() - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)
    assert not torch.equal(kept[0, 0], kept[0, 1]) and not torch.equal(kept[0, 0], kept[1, 0])
    assert torch.equal(kept, keep_mask(7, bsz, heads, tgt, src, p)[..., :32])
    again = ra.relu_attention(q, k, v, scale=1 / 32, dropout_p=p, seed=torch.tensor([7]))
    other = ra.relu_attention(q, k, v, scale=1 / 32, dropout_p=p, seed=torch.tensor([8]))
    assert torch.equal(out, again) and not torch.equal(out, other)
    plain = ra.relu_attention(q, k, v, scale=1 / 32)
    assert torch.equal(ra.relu_attention(q, k, v, scale=1 / 32, dropout_p=0.0, seed=seed), plain)


def test_the_seed_comes_from_torch_s_generator():
    """Without a seed, one is drawn from torch's generator: ``torch.manual_seed`` fixes the
    decisions, and a second call draws another."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 9, 32, generator=g) for _ in range(3))
    torch.manual_seed(5)
    first = ra.relu_attention(q, k, v, dropout_p=0.5)
    second = ra.relu_attention(q, k, v, dropout_p=0.5)
    torch.manual_seed(5)
    assert torch.equal(ra.relu_attention(q, k, v, dropout_p=0.5), first)
    assert not torch.equal(first, second)


def test_p_one_drops_everything_without_nan():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 1, 6, 32, generator=g).requires_grad_() for _ in range(3))
    out = ra.relu_attention(q, k, v, dropout_p=1.0)
    out.sum().backward()
    assert torch.equal(out, torch.zeros_like(out))
    for t in (q, k, v):
        assert torch.equal(t.grad, torch.zeros_like(t))


def test_recomputed_under_activation_checkpointing_with_the_same_decisions():
    """torch.utils.checkpoint restores the generator before recomputing the forward, so the
    recomputed call draws the same seed: gradients equal those without checkpointing."""
    g = torch.Generator().manual_seed(3)
    leaves = [torch.randn(2, 2, 12, 32, generator=g).requires_grad_() for _ in range(3)]

    def f(q, k, v):
        return ra.relu_attention(q, k, v, scale=0.2, dropout_p=0.4)

    torch.manual_seed(11)
    plain = torch.autograd.grad(f(*leaves).square().sum(), leaves)
    torch.manual_seed(11)
    out = torch.utils.checkpoint.checkpoint(f, *leaves, use_reentrant=False)
    checkpointed = torch.autograd.grad(out.square().sum(), leaves)
    for a, b in zip(plain, checkpointed):
        assert torch.equal(a, b)


def test_bad_dropout_arguments_are_one_clear_error():
    q = torch.randn(1, 1, 4, 32)
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\], got 1.5"):
        ra.relu_attention(q, q, q, dropout_p=1.5)
    with pytest.raises(ValueError, match="dropout needs its seed, one int64"):
        ra.relu_attention(q, q, q, dropout_p=0.1, seed=torch.tensor([1.0]))


def test_dropout_configurations_are_listed_and_launched(monkeypatch):
    """Every kernel has a dropout form in launch_configs() (so the AOT check compiles it),
    named ``..._dropout``, and a call with dropout launches those only."""
    names = {c["name"] for c in ra.launch_configs() if not c["name"].endswith("_rowsums")}  # test_triton_row_sums.py
    plain = {n for n in names if not n.endswith("_dropout")}
    assert {n + "_dropout" for n in plain} == names - plain
    for c in ra.launch_configs():
        assert c["constexprs"]["DROPOUT"] == c["name"].removesuffix("_rowsums").endswith("_dropout")
    monkeypatch.setattr(ra, "LAUNCH_LOG", [])
    q = torch.randn(1, 1, 5, 32, dtype=torch.float16, requires_grad=True)
    ra.relu_attention(q, q, q, dropout_p=0.1).sum().backward()
    launched = [entry[0] for entry in ra.LAUNCH_LOG]
    assert launched == ["relu_attention_fwd_d32_fp16_dropout", "relu_attention_bwd_d32_fp16_dropout"]
    assert all(entry[0] in names for entry in ra.LAUNCH_LOG)


# --------------------------------------------------------------------------- the backend
def _module(activation, backend, output_norm="none", p=0.3):
    import dataclasses

    from fairseq_sparse_attn.attention import SparseMultiheadAttention
    from fairseq_sparse_attn.attention.config import BackendConfig

    from helpers import attention_config

    config = dataclasses.replace(attention_config(activation, output_norm), backend=BackendConfig(name=backend))
    torch.manual_seed(0)
    return SparseMultiheadAttention(64, 2, config=config, self_attention=True, dropout=p)


class KernelDecisions(torch.nn.Module):
    """A dropout module that applies the kernels' decisions (the numpy Philox) under the
    seed the kernels will draw: the materialized path's ``dropout(weights)`` made to drop
    exactly what they drop."""

    def __init__(self, p, seed, bsz, heads):
        super().__init__()
        self.p, self.seed, self.bsz, self.heads = p, seed, bsz, heads
        self.apply_during_inference = True

    def forward(self, probs):  # (bsz * heads, tgt, src)
        _, tgt, src = probs.shape
        keep = keep_mask(self.seed, self.bsz, self.heads, tgt, src, self.p).view(-1, tgt, src)
        return probs * keep.to(probs.dtype) / (1 - self.p)


@pytest.mark.parametrize(
    "activation, output_norm",
    [("relu", "gated_rmsnorm"), ("relu", "rmsnorm_i"), ("relu_scaled", "none")],
)
def test_a_module_on_triton_drops_in_the_kernels_what_the_formula_drops(activation, output_norm):
    """``--attn-backend triton`` with attention dropout in training: the kernels run (their
    dropout forms, no materialized weights), and the output and every parameter's gradient
    equal the materialized path's with the same decisions (fp32, 1e-5)."""
    from helpers import OpLog

    fused = _module(activation, "triton", output_norm)
    ref = _module(activation, "materialized", output_norm)
    ref.load_state_dict(fused.state_dict())
    x = torch.randn(9, 3, 64)
    pad = padding(3, 9, [9, 5, 7])
    torch.manual_seed(21)
    seed = int(ra.draw_seed(x))
    ref.dropout_module = KernelDecisions(0.3, seed, 3, 2)
    results = []
    for module in (ref, fused):
        module.train()
        xin = x.clone().requires_grad_()
        torch.manual_seed(21)  # the kernels draw their seed first thing
        with OpLog() as log:
            out, _ = module(xin, xin, xin, key_padding_mask=pad, need_weights=False)
        out.backward(out.detach() * 0.1 + 1.0)
        grads = {n: p.grad for n, p in module.named_parameters()}
        results.append((out.detach(), xin.grad, grads, log.ops))
    (a, ga, pa, _), (b, gb, pb, ops) = results
    assert ops.count("fsa.relu_attention_fwd") == 1
    assert rel(b, a.double()) <= 1e-5 and rel(gb, ga.double()) <= 1e-5
    for n in pa:
        assert rel(pb[n], pa[n].double()) <= 1e-5, n
    fused.eval()  # no dropout in evaluation: the same as the reference's
    ref.dropout_module = torch.nn.Dropout(0.3)
    ref.eval()
    with torch.no_grad():
        assert rel(fused(x, x, x, key_padding_mask=pad)[0], ref(x, x, x, key_padding_mask=pad)[0].double()) <= 1e-5


def test_attend_on_triton_and_retain_dropout_in_inference():
    """Through attend() (the general path) in training, and with fairseq's --retain-dropout
    in inference (the decisions applied without gradients): the kernels' numbers."""
    from fairseq_sparse_attn.attention.activations import build_activation
    from fairseq_sparse_attn.attention.core import AttendSpec, AttentionInputs, attend
    from fairseq_sparse_attn.attention.heads import HeadPlan

    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 2, 6, 32, generator=g) for _ in range(3))
    dropout = torch.nn.Dropout(0.25)
    spec = AttendSpec(build_activation("relu", 2), dropout, HeadPlan(2), backend="triton")
    torch.manual_seed(3)
    seed = int(ra.draw_seed(q))
    torch.manual_seed(3)
    out, _ = attend(q.requires_grad_(), k, v, AttentionInputs(), spec)
    want = reference(q, k, v, keep=keep_mask(seed, 2, 2, 6, 6, 0.25), p=0.25)
    assert rel(out, want) <= 1e-5
    fairseq_like = _module("relu", "triton", p=0.25)
    fairseq_like.eval()
    fairseq_like.dropout_module.apply_during_inference = True  # --retain-dropout
    x = torch.randn(6, 2, 64)
    with torch.no_grad():
        first, _ = fairseq_like(x, x, x, need_weights=False)
        second, _ = fairseq_like(x, x, x, need_weights=False)
        fairseq_like.dropout_module.apply_during_inference = False
        plain, _ = fairseq_like(x, x, x, need_weights=False)
    assert not torch.equal(first, second) and not torch.equal(first, plain)
    # attend() on triton with the dropout module in eval mode (a gradient taken at
    # inference, e.g. an attribution): no dropout, the formula's numbers
    dropout.eval()
    out, _ = attend(q, k, v, AttentionInputs(), spec)
    assert rel(out, reference(q, k, v)) <= 1e-5


def test_auto_takes_the_kernels_with_dropout_only_where_dropout_was_measured(monkeypatch, tmp_path):
    """A call with attention dropout is a setting of its own ("fp16+dropout"): auto takes the
    kernels for it only where a recorded run of the ``*_dropout`` presets shows them faster."""
    import json

    from fairseq_sparse_attn.attention.backends import triton as tb

    from helpers import kernel_call, on_cuda_device

    def call(dropout):
        return kernel_call(dropout=dropout)

    on_cuda_device(monkeypatch, "H100")
    monkeypatch.setitem(tb.MEASURED_FASTER, ("H100", "relu", "fp16"), tb.Measurement("bench-gpu.json", "3.6"))
    assert tb._auto_enabled(None, call(False)) and not tb._auto_enabled(None, call(True))
    monkeypatch.setitem(tb.MEASURED_FASTER, ("H100", "relu", "fp16+dropout"), tb.Measurement("bench-gpu.json", "3.6"))
    assert tb._auto_enabled(None, call(True))

    runs = {"softmax_dropout": [7.0] * 3, "rela_g_dropout": [7.0, 7.2, 6.9], "rela_g_triton_dropout": [7.5, 7.6, 7.1]}
    runs.update(rela_g=[8.0] * 3, rela_g_triton=[7.5] * 3)  # slower without dropout: not decided
    kernels = {"correctness": [{"ok": True}]}
    result = {
        "parts": {"train": {"bf16": {"runs": runs}}, "kernels": kernels},
        "provenance": {"device": "NVIDIA H200", "versions": {"triton": "3.6.0"}},
    }
    (tmp_path / "bench-gpu-h200.json").write_text(json.dumps(result))
    assert tb.measured_faster(tmp_path) == {
        ("H200", "relu", "bf16+dropout"): tb.Measurement("bench-gpu-h200.json", "3.6")
    }
    runs["rela_g_triton_dropout"] = [7.5, None, None]  # one round decides nothing
    (tmp_path / "bench-gpu-h200.json").write_text(json.dumps(result))
    assert tb.measured_faster(tmp_path) == {}


def test_traced_by_torch_compile_with_the_seed_drawn_in_the_graph():
    """Under torch.compile (aot_eager, fullgraph) the seed's draw is part of the graph, not a
    constant of the trace: two compiled calls drop different weights, and a compiled call
    after torch.manual_seed drops what the eager call does (outputs and gradients)."""
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 2, 8, 32, generator=g, requires_grad=True) for _ in range(3))

    def f(q, k, v):
        return ra.relu_attention(q, k, v, causal=True, dropout_p=0.5)

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    torch.manual_seed(9)
    out = compiled(q, k, v)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    assert not torch.equal(out, compiled(q, k, v))
    torch.manual_seed(9)
    eager = f(q, k, v)
    assert torch.equal(out, eager)
    for a, b in zip(grads, torch.autograd.grad(eager.sum(), (q, k, v))):
        assert torch.equal(a, b)


@pytest.mark.parametrize("backend", ["triton", "auto"])
def test_a_dropout_module_the_kernels_cannot_stand_in_for_is_never_skipped(backend, monkeypatch):
    """The kernels apply dropout from the module's p, without calling it: a hook on the
    dropout module, or a module of another kind, would be skipped.  Named ``triton``: one
    clear error naming it; ``auto`` where it takes the kernels (faked on this CPU): the
    call runs the exact path, which calls the module."""
    from test_triton_backend import auto_takes_the_kernels_for_training_calls

    from fairseq_sparse_attn.errors import UsageError

    if backend == "auto":
        auto_takes_the_kernels_for_training_calls(monkeypatch)
    module = _module("relu", backend, "gated_rmsnorm", p=0.2).train()
    x = torch.randn(5, 2, 64)
    seen = []
    module.dropout_module.register_forward_hook(lambda m, args, out: seen.append(out.shape))
    if backend == "triton":
        with pytest.raises(UsageError, match="hooks on the attention dropout module"):
            module(x, x, x, need_weights=False)
    else:
        module(x, x, x, need_weights=False)
        assert seen == [(2, 2, 5, 5)]  # the exact path called it
    module.dropout_module._forward_hooks.clear()

    calls = []

    class OtherDropout(torch.nn.Dropout):
        def forward(self, x):
            calls.append(x.shape)
            return super().forward(x)

    module.dropout_module = OtherDropout(0.2)
    if backend == "triton":
        with pytest.raises(UsageError, match="attention dropout by a OtherDropout module"):
            module(x, x, x, need_weights=False)
    else:
        out, _ = module(x, x, x, need_weights=False)
        assert torch.isfinite(out).all()
        assert calls == [(2, 2, 5, 5)]  # the exact path called the module, the kernels did not stand in


def test_the_dropout_check_needs_no_fairseq(monkeypatch):
    """The attention core needs torch only: with fairseq's dropout module not imported, a
    torch.nn.Dropout is still served (no import is attempted)."""
    import builtins
    import sys

    from fairseq_sparse_attn.attention.backends import triton as tb

    monkeypatch.delitem(sys.modules, "fairseq.modules.fairseq_dropout", raising=False)
    real_import = builtins.__import__

    def no_fairseq(name, *args, **kwargs):
        if name.startswith("fairseq."):
            raise ModuleNotFoundError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_fairseq)
    assert tb.dropout_reason(torch.nn.Dropout(0.1)) is None
    assert "a Dropout1d module" in tb.dropout_reason(torch.nn.Dropout1d(0.1))
