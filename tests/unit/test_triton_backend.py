"""The ``triton`` attention backend (attention/backends/triton.py, issue 31 items 1, 2 and 7)
through :class:`SparseMultiheadAttention` against the materialized path, on CPU (the kernels
run through Triton's interpreter): outputs and the gradients of every parameter, for encoder
self-attention with padding, causal decoder self-attention with padding, cross-attention
and beam search's key groups; the RMS output norms through the fused norm kernel on this
backend only (the eager path elsewhere, unchanged); what it refuses (with the reasons);
``auto`` follows the recorded GPU results only."""

import dataclasses
import json
import re

import pytest
import torch

from conftest import require_kernels

require_kernels()  # the Triton kernels run here, else the module skips (CI: fails)

from fairseq_sparse_attn.attention import SparseMultiheadAttention, masks  # noqa: E402
from fairseq_sparse_attn.attention.activations import build_activation  # noqa: E402
from fairseq_sparse_attn.attention.backends import triton as tb  # noqa: E402
from fairseq_sparse_attn.attention.config import ActivationConfig, BackendConfig  # noqa: E402
from fairseq_sparse_attn.attention.core import AttendSpec, AttentionInputs, attend, explain  # noqa: E402
from fairseq_sparse_attn.attention.heads import HeadPlan  # noqa: E402
from fairseq_sparse_attn.errors import UsageError  # noqa: E402

from helpers import OpLog, attention_config  # noqa: E402

E, H = 64, 2  # head dim 32


def pair(activation, output_norm="none", **kind):
    """(materialized module, triton module) with the same parameters."""
    torch.manual_seed(0)
    ref = SparseMultiheadAttention(E, H, config=_config(activation, "materialized", output_norm), **kind)
    fused = SparseMultiheadAttention(E, H, config=_config(activation, "triton", output_norm), **kind)
    fused.load_state_dict(ref.state_dict())
    return ref, fused


def _config(activation, backend, output_norm="none"):
    return dataclasses.replace(attention_config(activation, output_norm), backend=BackendConfig(name=backend))


def grads(module):
    return {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


def run_both(ref, fused, query, key, **kw):
    outs = []
    for m in (ref, fused):
        m.zero_grad()
        out, _ = m(query, key, key, **kw)
        out.backward(torch.ones_like(out) * 0.1 + out.detach())
        outs.append((out.detach(), grads(m)))
    (a, ga), (b, gb) = outs
    assert rel(b, a) <= 1e-5
    assert ga.keys() == gb.keys() and ga
    for n in ga:
        assert rel(gb[n], ga[n]) <= 1e-5, n


def rel(x, ref):
    """||x - ref|| / ||ref|| (the issue's fp32 bound: 1e-5)."""
    return ((x.double() - ref.double()).norm() / ref.double().norm()).item()


def padding(bsz, src, lengths):
    return torch.arange(src)[None, :] >= torch.tensor(lengths)[:, None]


@pytest.mark.parametrize("activation", ["relu", ActivationConfig(name="relu_scaled", relu_scale_gamma=0.8)])
def test_encoder_self_attention_with_padding(activation):
    ref, fused = pair(activation, self_attention=True)
    x = torch.randn(11, 3, E)
    run_both(ref, fused, x, x, key_padding_mask=padding(3, 11, [11, 6, 9]), need_weights=False)


@pytest.mark.parametrize("activation", ["relu", "relu_scaled"])
def test_causal_decoder_self_attention_with_padding(activation):
    ref, fused = pair(activation, self_attention=True)
    x = torch.randn(9, 2, E)
    future = torch.triu(torch.full((9, 9), float("-inf")), 1)
    run_both(ref, fused, x, x, key_padding_mask=padding(2, 9, [9, 5]), attn_mask=future, need_weights=False)


def test_cross_attention():
    ref, fused = pair("relu_scaled", encoder_decoder_attention=True)
    x, enc = torch.randn(5, 2, E), torch.randn(12, 2, E)
    run_both(ref, fused, x, enc, key_padding_mask=padding(2, 12, [12, 7]), need_weights=False, static_kv=True)


RMS_NORMS = ["rmsnorm", "rmsnorm_i", "gated_rmsnorm"]


@pytest.mark.parametrize("norm", RMS_NORMS)
def test_rms_output_norms_run_fused_on_triton_and_match_the_eager_path(norm):
    """Output and every gradient (q/k/v/out projections, the norm's gain and gate weight)
    of the fused norm kernel + attention kernels against the materialized backend with the
    eager norm (fp32, 1e-5), on encoder self-attention with padding; the forward and the
    backward each dispatch the norm as one op (fsa::rms_norm_fwd / fsa::rms_norm_bwd)."""
    ref, fused = pair("relu", norm, self_attention=True)
    assert fused.output_norm.fused and not ref.output_norm.fused
    x = torch.randn(7, 3, E)
    kw = dict(key_padding_mask=padding(3, 7, [7, 4, 6]), need_weights=False)
    with torch.no_grad():
        fused.output_norm.weight.uniform_(-1.5, 1.5)  # a gain that is not 1 (rmsnorm's init)
        ref.output_norm.weight.copy_(fused.output_norm.weight)
    run_both(ref, fused, x, x, **kw)
    names = {n for n, _ in fused.named_parameters()}
    assert "output_norm.weight" in names and ("output_norm.gate_weight" in names) == (norm == "gated_rmsnorm")
    with OpLog() as log:
        out, _ = fused(x, x, x, **kw)
        out.sum().backward()
    assert log.ops.count("fsa.rms_norm_fwd") == 1 and log.ops.count("fsa.rms_norm_bwd") == 1
    with OpLog() as log:
        out, _ = ref(x, x, x, **kw)
        out.sum().backward()
    assert not any(op.startswith("fsa.") for op in log.ops)


@pytest.mark.parametrize("backend", ["auto", "materialized", "sdpa", "key_block", "query_block"])
def test_output_norms_on_other_backends_are_the_eager_path_bit_for_bit(backend):
    """A module on any other backend keeps the eager norm: no fused op, the same numbers as
    ``rms_normalize`` bit for bit."""
    from fairseq_sparse_attn.attention.output_norms import rms_normalize

    for norm in RMS_NORMS:
        torch.manual_seed(0)
        m = SparseMultiheadAttention(E, H, self_attention=True, config=_config("relu", backend, norm))
        assert not m.output_norm.fused
        z = torch.randn(5, 2, E, requires_grad=True)
        with OpLog() as log:
            out = m.output_norm(z)
        assert not any(op.startswith("fsa.") for op in log.ops)
        gate = getattr(m.output_norm, "gate_weight", None)
        assert torch.equal(out, rms_normalize(z, m.output_norm.eps, m.output_norm.weight, gate))


def test_fused_norm_serves_float32_half_and_bfloat16_only_and_its_widths():
    """On triton: float64 inputs (gradcheck) and fp32 inputs with half parameters take the
    eager path; a norm wider than the kernel serves (2048 features) is not fused."""
    from fairseq_sparse_attn.attention.output_norms import build_output_norm
    from fairseq_sparse_attn.kernels.output_norm import MAX_WIDTH

    norm = build_output_norm("gated_rmsnorm", E, 32, fused=True)
    assert norm.fused and "fused" in repr(norm)
    for z, fused_op in (
        (torch.randn(2, E), True),
        (torch.randn(2, E).half(), True),
        (torch.randn(2, E).bfloat16(), True),
        (torch.randn(2, E).double(), False),
    ):
        with OpLog() as log:
            out = norm(z)
        assert out.dtype == z.dtype and ("fsa.rms_norm_fwd" in log.ops) == fused_op, z.dtype
    norm.half()
    with OpLog() as log:
        norm(torch.randn(2, E))
    assert "fsa.rms_norm_fwd" not in log.ops
    assert not build_output_norm("rmsnorm", MAX_WIDTH + 1, 64, fused=True).fused
    assert build_output_norm("rmsnorm", MAX_WIDTH, 64, fused=True).fused
    # the width limit the norms read without importing Triton is the kernel's own
    from fairseq_sparse_attn.kernels.served import NORM_MAX_WIDTH

    assert NORM_MAX_WIDTH == MAX_WIDTH
    # what the kernel takes, asked of a norm that does not run as the kernel itself (auto)
    eager = build_output_norm("gated_rmsnorm", E, 32)
    assert not eager.fused
    with OpLog() as log:  # it runs the eager path itself
        eager(torch.randn(2, E).half())
    assert not [op for op in log.ops if op.startswith("fsa.")]
    assert eager.kernel_arguments(torch.float16)[0] is eager.weight
    assert eager.kernel_arguments(torch.float64) is None
    assert build_output_norm("rmsnorm", MAX_WIDTH + 1, 64).kernel_arguments(torch.float16) is None
    for name in ("none", "layernorm", "gated_layernorm"):
        assert not hasattr(build_output_norm(name, E, 32, fused=True), "fused")


@pytest.mark.parametrize("floor", [None, 1e-4])
def test_fused_norm_takes_the_half_gradient_floor_as_it_is_at_the_call(floor, monkeypatch):
    """fp16 rows of RMS ~1e-3 (under the default floor 1e-2, over 1e-4): the fused norm's
    dz equals the eager norm's, with the module constant read at each call."""
    from fairseq_sparse_attn.attention import output_norms

    if floor is not None:
        monkeypatch.setattr(output_norms, "HALF_BACKWARD_RMS_FLOOR", floor)
    torch.manual_seed(2)
    eager = output_norms.build_output_norm("gated_rmsnorm", E, 32)
    fused = output_norms.build_output_norm("gated_rmsnorm", E, 32, fused=True)
    fused.load_state_dict(eager.state_dict())
    z = (torch.randn(3, E) * 1e-3).half()
    upstream = torch.randn(3, E).half()
    dz = [torch.autograd.grad(m(z.requires_grad_()), z, upstream)[0] for m in (eager, fused)]
    assert rel(dz[1], dz[0]) <= 1e-2
    unbounded = torch.autograd.grad(
        output_norms.rms_normalize(z.float(), eager.eps, eager.weight, eager.gate_weight), z, upstream.float()
    )[0]
    ratio = dz[1].float().norm() / unbounded.float().norm()
    assert (ratio < 0.5) == (floor is None)


def test_attend_with_key_groups_and_a_row_without_keys():
    """attend() directly: beam search's key groups (one key copy per sentence), a sentence
    whose keys are all padding (0, not NaN), against the materialized backend."""
    torch.manual_seed(1)
    kv_bsz, groups, tgt, src, d = 2, 3, 4, 6, 32
    q = torch.randn(kv_bsz * groups, H, tgt, d, requires_grad=True)
    k = torch.randn(kv_bsz, H, src, d, requires_grad=True)
    v = torch.randn(kv_bsz, H, src, d, requires_grad=True)
    pad = padding(kv_bsz, src, [0, 4])
    hidden = pad.repeat_interleave(groups, dim=0).view(kv_bsz * groups, 1, 1, src)
    inputs = AttentionInputs(hidden=hidden, key_padding=pad.repeat_interleave(groups, 0), kv_groups=groups)
    results = []
    for backend in ("materialized", "triton"):
        spec = AttendSpec(build_activation("relu_scaled", H), torch.nn.Dropout(0.0), HeadPlan(H), backend=backend)
        out, inter = attend(q, k, v, inputs, spec)
        assert inter.backend == backend
        g = torch.autograd.grad(out.square().sum(), (q, k, v))
        results.append((out, g))
    (a, ga), (b, gb) = results
    assert torch.equal(b[:groups], torch.zeros_like(b[:groups]))
    assert rel(b, a) <= 1e-5
    for x, y in zip(ga, gb):
        assert torch.isfinite(y).all() and rel(y, x) <= 1e-5


def test_what_it_refuses_goes_elsewhere_with_the_reason():
    spec = AttendSpec(build_activation("relu", H), torch.nn.Dropout(0.1), HeadPlan(H), backend="auto")
    q = torch.randn(1, H, 3, 32, requires_grad=True)
    why = explain(q, q, AttentionInputs(), spec)
    assert "triton: auto takes it for training calls on CUDA devices" in why  # (attention dropout is served)
    assert "attention dropout (in training" not in why.split("triton:")[1].split("|")[0]
    for activation, reason in (("gelu", "activation gelu"), ("entmax15", "activation entmax15")):
        spec = AttendSpec(build_activation(activation, H), torch.nn.Dropout(0.0), HeadPlan(H), backend="triton")
        with pytest.raises(UsageError, match=reason):
            attend(q, q, q, AttentionInputs(), spec)
    spec = AttendSpec(build_activation("relu", H), torch.nn.Dropout(0.0), HeadPlan(H), backend="triton")
    with pytest.raises(UsageError, match="returning attention weights"):
        attend(q, q, q, AttentionInputs(collect=frozenset({"weights"})), spec)
    q48 = torch.randn(1, H, 3, 48)
    with pytest.raises(UsageError, match="head dim 48"):
        attend(q48, q48, q48, AttentionInputs(), spec)
    pattern = torch.rand(1, 1, 3, 3) > 0.5
    pattern[..., 0] = False
    with pytest.raises(UsageError, match="a mask other than key padding and causal"):
        attend(q, q, q, AttentionInputs(hidden=pattern), spec)


def test_masks_padding_and_causal():
    pad = padding(2, 5, [5, 3])
    assert masks.padding_and_causal(None, 1, 2) == (None, False)
    got, causal = masks.padding_and_causal(pad.view(2, 1, 1, 5), 1, 2)
    assert torch.equal(got, pad) and not causal
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)
    got, causal = masks.padding_and_causal(pad.view(2, 1, 1, 5) | future, 1, 2)
    assert torch.equal(got, pad) and causal
    assert masks.padding_and_causal(future.view(1, 1, 5, 5), 1, 2) == (None, True)
    beams = pad.repeat_interleave(3, 0).view(6, 1, 1, 5)
    got, causal = masks.padding_and_causal(beams, 3, 2)
    assert torch.equal(got, pad) and not causal
    assert masks.padding_and_causal(future.T.contiguous().view(1, 1, 5, 5), 1, 2) is None


def test_row_factor_of_the_kernels_form_only():
    scaled = build_activation(ActivationConfig(name="relu_scaled", relu_scale_gamma=2.0), H)
    assert tb.row_coef(scaled) == pytest.approx((True, 2**0.5 / 2.0))
    ablation = build_activation(ActivationConfig(name="relu_scaled", relu_no_length_scale=True), H)
    assert tb.row_coef(ablation) == (False, 1.0)
    assert tb.row_coef(build_activation("relu", H)) == (False, 1.0)

    class PerKey:
        row_scaled = True

        def row_scale(self, n):
            return 1.0 / n.clamp(min=1)

        def row_scale_key(self):
            return (type(self),)

    with pytest.raises(ValueError, match="not of the kernels' form"):
        tb.row_coef(PerKey())


def test_a_gamma_set_after_the_first_call_reaches_the_kernels():
    """ReLUFormer's gamma read at each call on the triton backend, as on the materialized one
    (before: the kernels kept the first call's row factor, probed once per module: 4e-2 off
    in the output, 2x in the gradients, with nothing said)."""
    ref, fused = pair(ActivationConfig(name="relu_scaled", relu_scale_gamma=1.0), self_attention=True)
    assert fused.plan().kernel is not None  # the direct call
    x = torch.randn(7, 2, E)
    kw = dict(key_padding_mask=padding(2, 7, [7, 4]), need_weights=False)
    run_both(ref, fused, x, x, **kw)
    for m in (ref, fused):
        m.activation.gamma = 3.0
    run_both(ref, fused, x, x, **kw)
    for m in (ref, fused):  # the no-length-scale ablation: no row factor
        m.activation.length_scale = False
    run_both(ref, fused, x, x, **kw)


def bench_result(
    tmp_path, device, eager, fused, name="bench-gpu-h100.json", dtype="fp16", checks=None, pair=None, triton="3.6.0"
):
    """A make bench-gpu result whose train part ran ``pair`` (fused, eager presets; ReLA-g's
    by default) with the given updates/s per round, and whose kernels passed ``checks``,
    under Triton ``triton`` (None: not recorded)."""
    fused_name, eager_name = pair or ("rela_g_triton", "rela_g")
    train = {"fp16": {"runs": {}, "ratios": {}, "valid": False}, "bf16": {"runs": {}, "ratios": {}, "valid": False}}
    train[dtype] = {"runs": {"softmax": [10.0] * len(eager), eager_name: eager, fused_name: fused}, "ratios": {}}
    checks = [{"ok": True}] * 3 if checks is None else checks
    provenance = {"device": device, "versions": {"triton": triton} if triton else {}}
    data = {"parts": {"train": train, "kernels": {"correctness": checks}}, "provenance": provenance}
    (tmp_path / name).write_text(json.dumps(data))


def test_auto_takes_it_only_where_a_recorded_gpu_result_shows_it_faster(tmp_path):
    # docs/results/bench-gpu-h200.json (H200, 2026-11-27): ReLA-g on the kernels faster than
    # eager in each of 3 bf16 rounds; its fp16 has one round.  bench-gpu.json (H100): fp16 in
    # 2 rounds whose ranges overlap, which decided H100 fp16 until the rule asked for 3
    h200 = json.loads((tb.RESULTS / "bench-gpu-h200.json").read_text())["parts"]["train"]
    assert all(f > e for f, e in tb.paired_rounds(h200["bf16"], "rela_g_triton", "rela_g"))
    assert len(tb.paired_rounds(h200["fp16"], "rela_g_triton", "rela_g")) == 1
    h100 = json.loads((tb.RESULTS / "bench-gpu.json").read_text())["parts"]["train"]["fp16"]
    assert len(tb.paired_rounds(h100, "rela_g_triton", "rela_g")) == 2
    assert tb.measured_faster() == {("H200", "relu", "bf16"): tb.Measurement("bench-gpu-h200.json", "3.6")}
    # what auto reads at run time: the package's table, the same as the recorded results
    assert tb.MEASURED_FASTER == tb.measured_faster()
    assert tb.device_family("NVIDIA H200") == "H200"
    assert tb.device_family("NVIDIA H100 80GB HBM3") == "H100"
    assert tb.device_family("NVIDIA H100 PCIe") == "H100 PCIe"  # another board: decided apart
    assert tb.device_family("NVIDIA H100 NVL") == "H100 NVL"
    assert tb.device_family("NVIDIA A100-SXM4-80GB") == "A100"
    assert tb.device_family("NVIDIA A100-PCIE-40GB") == "A100 PCIe"
    bench_result(tmp_path, "NVIDIA H100 80GB HBM3", [9.0, 9.1, 8.8], [9.5, 9.4, 9.0])  # faster in all 3
    bench_result(tmp_path, "NVIDIA A100-SXM4-80GB", [9.0] * 3, [8.5] * 3, name="bench-gpu-a100.json")
    bench_result(tmp_path, "NVIDIA L4", [8.6, 9.1], [10.8, 9.6], name="bench-gpu-l4.json")  # 2 rounds: not enough
    # faster by the median, slower in one round: one lucky round does not decide
    bench_result(tmp_path, "NVIDIA H100 PCIe", [9.0, 9.6, 9.0], [10.0, 9.5, 10.0], name="bench-gpu-pcie.json")
    bench_result(tmp_path, "NVIDIA H200", [9.0, 8.0, 9.0], [9.5, 9.0, 9.1], name="bench-gpu-h200.json", dtype="bf16")
    # a round cut off (None) does not count; the correctness part must have passed, whole
    bench_result(tmp_path, "NVIDIA B200", [9.0, 9.0, None, 9.0], [9.5, 9.5, 9.5, 9.5], name="bench-gpu-b200.json")
    bench_result(tmp_path, "NVIDIA GH200", [9.0] * 3, [9.5] * 3, name="bench-gpu-gh200.json", checks=[{"ok": False}])
    bench_result(tmp_path, "NVIDIA H800", [9.0] * 3, [9.5] * 3, name="bench-gpu-h800.json", checks=[])
    # ReLUFormer's pair decides relu_scaled, not relu
    bench_result(tmp_path, "NVIDIA L40S", [9.0] * 3, [9.5] * 3, name="bench-gpu-l40s.json",
                 pair=("reluformer_triton", "reluformer"))  # fmt: skip
    bench_result(tmp_path, "cpu", [5.0] * 3, [20.0] * 3, name="bench-gpu-cpu.json")
    # the Triton version is part of the measurement; a result that does not record it decides nothing
    bench_result(tmp_path, "NVIDIA H20", [9.0] * 3, [9.5] * 3, name="bench-gpu-h20.json", triton="3.7.1+git")
    bench_result(tmp_path, "NVIDIA A10", [9.0] * 3, [9.5] * 3, name="bench-gpu-a10.json", triton=None)
    assert tb.measured_faster(tmp_path) == {
        ("H100", "relu", "fp16"): tb.Measurement("bench-gpu-h100.json", "3.6"),
        ("H200", "relu", "bf16"): tb.Measurement("bench-gpu-h200.json", "3.6"),
        ("B200", "relu", "fp16"): tb.Measurement("bench-gpu-b200.json", "3.6"),
        ("L40S", "relu_scaled", "fp16"): tb.Measurement("bench-gpu-l40s.json", "3.6"),
        ("H20", "relu", "fp16"): tb.Measurement("bench-gpu-h20.json", "3.7"),
    }
    # a correctness part cut off (fewer checks than it planned, or a shard that wrote
    # nothing) decides nothing either
    data = json.loads((tmp_path / "bench-gpu-h100.json").read_text())
    data["parts"]["kernels"]["expected_checks"] = 4
    assert tb.faster_in(data) == frozenset()
    data["parts"]["kernels"].update(expected_checks=None, shards_missing=1)
    assert tb.faster_in(data) == frozenset()
    # a round in which the eager preset has no figure (cut off) is no round: one pair left
    runs = {"rela_g_triton": [9.5, 9.5, 9.5], "rela_g": [9.0, None, None]}
    assert tb.paired_rounds({"runs": runs}, "rela_g_triton", "rela_g") == [(9.5, 9.0)]
    # on CPU auto never takes it, even when named nowhere
    spec = AttendSpec(build_activation("relu", H), torch.nn.Dropout(0.0), HeadPlan(H), backend="auto")
    q = torch.randn(1, H, 3, 32, requires_grad=True)
    assert "triton: auto takes it for training calls on CUDA devices" in explain(q, q, AttentionInputs(), spec)


def _call(device, dtype, head_dim=64, grad=True):
    from helpers import kernel_call

    return kernel_call(device, dtype, grad=grad, head_dim=head_dim)


def test_auto_on_cuda_takes_it_only_in_the_measured_family_and_dtype(monkeypatch):
    """_auto_enabled asks for the current device's family, the call's activation and its
    dtype: a ReLA training call in bf16 on an H200 (the recorded result) takes it; fp16 and
    fp32 there, ReLUFormer's relu_scaled (not measured), another family (the H100, whose fp16
    had 2 rounds), an inference call and a CPU call do not."""
    from fairseq_sparse_attn.attention.core import Call

    from helpers import on_cuda_device

    family = {"name": "H200"}
    on_cuda_device(monkeypatch, lambda: family["name"])
    assert tb._auto_enabled(None, _call("cuda", torch.bfloat16))
    assert not tb._auto_enabled(None, _call("cuda", torch.float16))
    assert not tb._auto_enabled(None, _call("cuda", torch.float32))
    assert not tb._auto_enabled(None, _call("cuda", torch.bfloat16, grad=False))
    assert not tb._auto_enabled(None, _call("cpu", torch.bfloat16))
    scaled = _call("cuda", torch.bfloat16)._replace(activation="relu_scaled")
    assert isinstance(scaled, Call) and not tb._auto_enabled(None, scaled)
    family["name"] = "H100"
    assert not tb._auto_enabled(None, _call("cuda", torch.float16))
    monkeypatch.setitem(tb.MEASURED_FASTER, ("H100", "relu", "fp16"), tb.Measurement("bench-gpu.json", "3.6"))
    assert tb._auto_enabled(None, _call("cuda", torch.float16))


def test_auto_takes_it_only_under_the_triton_version_it_was_measured_with(monkeypatch):
    """A measurement is of the code one Triton version compiles: the H200's bf16 result ran
    with Triton 3.6.0, so under 3.7 (torch 2.13's) auto does not take the kernels there, nor
    make the plan's direct call; under 3.6 it does."""
    from helpers import on_cuda_device

    assert tb.MEASURED_FASTER[("H200", "relu", "bf16")].triton == "3.6"
    on_cuda_device(monkeypatch, "H200", triton="3.6.0")
    assert tb.auto_may_take_it() and tb._auto_enabled(None, _call("cuda", torch.bfloat16))
    on_cuda_device(monkeypatch, "H200", triton="3.7.1")
    assert not tb.auto_may_take_it() and not tb._auto_enabled(None, _call("cuda", torch.bfloat16))
    monkeypatch.setitem(tb.MEASURED_FASTER, ("H100", "relu", "fp16"), tb.Measurement("bench-gpu.json", "3.7"))
    assert tb.auto_may_take_it() and not tb._auto_enabled(None, _call("cuda", torch.bfloat16))


def test_under_a_triton_version_the_kernels_do_not_run_with_the_backend_serves_nothing(monkeypatch):
    """A cluster's own torch 2.7-2.9 brings Triton 3.3-3.5: under 3.4 the kernels do not
    import (no ``knobs.HookChain``), under 3.5 the interpreter fails on the forward; a later
    Triton may change the launcher the direct launch calls.  The backend then serves nothing
    and names the version: auto on CUDA neither takes the kernels nor imports them (it
    imported them, and under Triton 3.4 the first forward of a ReLA model on auto failed
    with an ImportError)."""
    import triton

    from fairseq_sparse_attn.kernels import served

    from helpers import on_cuda_device

    for version in ("3.6.0", "3.7.1", "3.7.1+git4a5b6c"):
        assert served.triton_unserved(version) is None, version
    for version in ("3.3.1", "3.4.0", "3.5.1", "3.8.0", "4.0.0"):
        reason = served.triton_unserved(version)
        assert reason == (
            f"Triton {version} is installed; the kernels run with Triton 3.6 or 3.7 "
            "(the versions torch 2.10 to 2.13 pin)"
        ), reason
    assert served.triton_unserved(None) == "Triton is not installed (make install installs the version torch pins)"
    # a Triton that fails to import (a broken install) is named with its own error
    monkeypatch.setattr(served, "_import_triton", lambda: (None, "ImportError: libtriton.so: cannot open"))
    assert served._installed_triton_unserved.__wrapped__() == (
        "Triton cannot be imported (ImportError: libtriton.so: cannot open)"
    )
    monkeypatch.setattr(served, "_import_triton", lambda: (None, None))
    assert served._installed_triton_unserved.__wrapped__().startswith("Triton is not installed")
    monkeypatch.undo()
    # the installed one (make install: the version torch pins) serves
    assert served.installed_triton() == triton.__version__ and served.triton_unserved() is None

    monkeypatch.setattr(served, "_installed_triton_unserved", lambda: served.triton_unserved("3.4.0"))
    on_cuda_device(monkeypatch, "H200", triton="3.4.0")
    monkeypatch.setitem(tb.MEASURED_FASTER, ("H100", "relu", "fp16"), tb.Measurement("bench-gpu.json", "3.4"))
    assert not tb.auto_may_take_it()
    call = _call("cuda", torch.bfloat16)
    assert tb._unavailable(call).startswith("Triton 3.4.0 is installed; ")
    assert tb._unavailable(_call("cpu", torch.float32)).startswith("Triton 3.4.0 is installed; ")
    # what the call itself has that the kernels do not serve is named too
    assert tb._unavailable(_call("cuda", torch.float16, head_dim=48)).endswith(
        "2.13 pin), head dim 48 (the kernels serve 32, 64, 128, 256)"
    )
    assert tb.direct_call(build_activation("relu", H), torch.nn.Identity(), torch.nn.Dropout(0.0)) is None
    from fairseq_sparse_attn.attention.core import BACKENDS, choose_backend

    assert BACKENDS["triton"].cannot_serve(call) is not None
    spec = AttendSpec(build_activation("relu", H), torch.nn.Dropout(0.0), HeadPlan(H), backend="auto")
    assert choose_backend(spec, call).name != "triton"


def test_float32_on_cuda_is_served_as_the_recorded_gpu_run_showed_it_right(monkeypatch):
    """The H100 run of 2026-11-27 (docs/results/bench-gpu.json) passed every float32 check
    (output and three gradients within 3e-7 of float64 at head dims 32-256) where the run of
    2026-11-26 had found the forward wrong at 64 and 128: float32 on CUDA is served.  A dtype
    that fails a CUDA check goes in CUDA_NOT_SERVED and its CUDA calls go to the other
    backends with the reason; CPU (interpreter) calls stay served."""
    from fairseq_sparse_attn.attention.backends import triton as backend
    from fairseq_sparse_attn.kernels import served

    checks = json.loads((tb.RESULTS / "bench-gpu.json").read_text())["parts"]["kernels"]["correctness"]
    fp32 = [r for r in checks if r["dtype"] == "fp32" and r["kernel"] == "relu_attention"]
    assert {r["head_dim"] for r in fp32} == set(served.HEAD_DIMS) and all(r["ok"] for r in fp32)
    assert served.CUDA_NOT_SERVED == {}
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        assert served.unserved("cuda", dtype, 64) is None
    monkeypatch.setitem(served.CUDA_NOT_SERVED, torch.float32, "float32 on CUDA (a failed check)")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert backend._unavailable(_call("cuda", torch.float32)) == "float32 on CUDA (a failed check)"
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        assert backend._unavailable(_call("cpu", dtype)) is None
    assert "head dim 48" in backend._unavailable(_call("cuda", torch.float16, head_dim=48))


# --------------------------------------------------------------------------- the direct call
def test_a_plain_module_calls_the_kernels_directly_with_the_scale_inside(monkeypatch):
    """A module on the triton backend with a plain pipeline hands its calls straight to the
    kernels (call_plan.CallPlan.kernel): no attend() (no call described, no backend
    chosen), no multiply of q by the scaling (the kernel scales the scores), and the same
    numbers as the materialized backend (test_encoder_self_attention_with_padding and the
    others above run through it)."""
    from fairseq_sparse_attn.attention import call_plan
    from fairseq_sparse_attn.kernels import relu_attention as ra

    ref, fused = pair("relu", self_attention=True)
    assert fused.plan().kernel is not None and ref.plan().kernel is None
    scales = []
    real = ra.relu_attention

    def spy(q, k, v, key_padding=None, causal=False, kv_groups=1, scale=1.0, gamma=None, dropout_p=0.0):
        scales.append(scale)
        return real(q, k, v, key_padding, causal, kv_groups, scale, gamma, dropout_p)

    monkeypatch.setattr(ra, "relu_attention", spy)
    fused.__dict__.pop("_spec_cache")  # the plan is rebuilt with the spy
    monkeypatch.setattr(call_plan, "attend", lambda *a, **k: pytest.fail("attend() was called"))
    x = torch.randn(7, 2, E, requires_grad=True)
    with OpLog() as log:
        out, weights = fused(x, x, x, key_padding_mask=padding(2, 7, [7, 4]), need_weights=True)
    assert weights is None and scales == [fused.scaling]
    assert "aten.mul" not in log.ops and log.ops.count("fsa.relu_attention_fwd") == 1
    monkeypatch.undo()
    ref_out, _ = ref(x, x, x, key_padding_mask=padding(2, 7, [7, 4]), need_weights=False)
    assert rel(out, ref_out) <= 1e-5


def auto_takes_the_kernels_for_training_calls(monkeypatch):
    """As on a measured H100 (faked on this CPU machine): auto takes the kernels for
    training calls."""
    from fairseq_sparse_attn.attention import core

    monkeypatch.setattr(tb, "auto_may_take_it", lambda: True)
    triton_backend = dataclasses.replace(core.BACKENDS["triton"], enabled=lambda spec, call: call.grad)
    monkeypatch.setitem(core.BACKENDS, "triton", triton_backend)


def test_auto_where_it_takes_the_kernels_calls_them_directly(monkeypatch):
    """A module on ``auto`` where auto takes the kernels (a measured CUDA family and dtype;
    here faked on CPU) gets the same direct call as one on ``triton``, for the calls auto
    gives the kernels (training calls): no attend(), the fused norm in the kernels'
    Function, outputs and gradients bit for bit those of the named backend.  A call auto
    does not give them (no gradients) runs as without the direct call; and where auto never
    takes them (no CUDA, no measurement) the plan has no kernel at all."""
    from fairseq_sparse_attn.attention import call_plan

    torch.manual_seed(0)
    auto = SparseMultiheadAttention(E, H, config=_config("relu", "auto", "gated_rmsnorm"), self_attention=True)
    assert auto.plan().kernel is None  # this machine: no CUDA, so auto never takes it
    auto_takes_the_kernels_for_training_calls(monkeypatch)
    named = SparseMultiheadAttention(E, H, config=_config("relu", "triton", "gated_rmsnorm"), self_attention=True)
    auto = SparseMultiheadAttention(E, H, config=_config("relu", "auto", "gated_rmsnorm"), self_attention=True)
    auto.load_state_dict(named.state_dict())
    assert auto.plan().kernel is not None and auto.plan().kernel_if_auto_takes_it
    assert not named.plan().kernel_if_auto_takes_it
    x = torch.randn(7, 2, E)
    pad = padding(2, 7, [7, 4])
    results = []
    for module in (named, auto):
        xin = x.clone().requires_grad_()
        with monkeypatch.context() as m:
            m.setattr(call_plan, "attend", lambda *a, **k: pytest.fail("attend() was called"))
            with OpLog() as log:
                out, _ = module(xin, xin, xin, key_padding_mask=pad, need_weights=False)
        assert [op for op in log.ops if op.startswith("fsa.")] == ["fsa.relu_attention_fwd", "fsa.rms_norm_fwd"]
        assert "aten.mul" not in log.ops  # the scale inside the kernel
        out.backward(out.detach() * 0.1 + 1.0)
        results.append((out.detach(), xin.grad, grads(module)))
    (a, ga, pa), (b, gb, pb) = results
    assert torch.equal(a, b) and torch.equal(ga, gb) and pa.keys() == pb.keys()
    assert all(torch.equal(pa[n], pb[n]) for n in pa)
    with torch.no_grad():  # no gradients: auto runs materialized, q scaled in the projection
        out, _ = auto(x, x, x, key_padding_mask=pad, need_weights=False)
    ref = SparseMultiheadAttention(E, H, config=_config("relu", "materialized", "gated_rmsnorm"), self_attention=True)
    ref.load_state_dict(named.state_dict())
    with torch.no_grad():
        want, _ = ref(x, x, x, key_padding_mask=pad, need_weights=False)
    assert torch.equal(out, want)


def test_a_training_call_auto_does_not_give_the_kernels_runs_as_materialized(monkeypatch):
    """A module whose plan holds the direct call for auto (a measured family) and a training
    call that auto gives another backend (a setting not measured): the call runs as on
    materialized, q scaled (the direct call leaves the scale to the kernels)."""
    from fairseq_sparse_attn.attention import core

    auto_takes_the_kernels_for_training_calls(monkeypatch)
    torch.manual_seed(0)
    auto = SparseMultiheadAttention(E, H, config=_config("relu", "auto", "gated_rmsnorm"), self_attention=True)
    ref = SparseMultiheadAttention(E, H, config=_config("relu", "materialized", "gated_rmsnorm"), self_attention=True)
    ref.load_state_dict(auto.state_dict())
    assert auto.plan().kernel_if_auto_takes_it
    declines = dataclasses.replace(core.BACKENDS["triton"], enabled=lambda spec, call: False)
    monkeypatch.setitem(core.BACKENDS, "triton", declines)
    x = torch.randn(7, 2, E)
    pad = padding(2, 7, [7, 4])
    (out, _), (want, _) = (m(x, x, x, key_padding_mask=pad, need_weights=False) for m in (auto, ref))
    assert torch.equal(out, want)


def test_an_additive_mask_is_never_dropped_by_the_kernels(monkeypatch):
    """The kernels take key padding and causal masks, not an additive float mask: named
    triton refuses the call in one line, and auto where it takes the kernels runs it on the
    exact path (the numbers of materialized)."""
    torch.manual_seed(0)
    named = SparseMultiheadAttention(E, H, config=_config("relu", "triton", "gated_rmsnorm"), self_attention=True)
    ref = SparseMultiheadAttention(E, H, config=_config("relu", "materialized", "gated_rmsnorm"), self_attention=True)
    ref.load_state_dict(named.state_dict())
    x = torch.randn(5, 2, E, requires_grad=True)
    bias = torch.randn(5, 5)  # finite: a bias on the scores, not a mask that hides keys
    with pytest.raises(UsageError, match="an additive attention-mask bias"):
        named(x, x, x, attn_mask=bias, need_weights=False)
    auto_takes_the_kernels_for_training_calls(monkeypatch)
    auto = SparseMultiheadAttention(E, H, config=_config("relu", "auto", "gated_rmsnorm"), self_attention=True)
    auto.load_state_dict(named.state_dict())
    (out, _), (want, _) = (m(x, x, x, attn_mask=bias, need_weights=False) for m in (auto, ref))
    assert rel(out, want) <= 1e-6


def test_a_hooked_activation_is_never_skipped_by_the_kernels(monkeypatch):
    """The kernels compute the activation inside, so a hook on the activation module would
    never run there.  Named ``triton``: one clear error naming the hooks.  ``auto`` where it
    takes the kernels (faked on CPU, as above): the call runs the exact path, where the
    forward and the backward hook see the activation's call, with the numbers of
    ``materialized``.  Without the hooks, auto's call is the kernels' again."""
    torch.manual_seed(0)
    named = SparseMultiheadAttention(E, H, config=_config("relu", "triton", "gated_rmsnorm"), self_attention=True)
    x = torch.randn(7, 2, E)
    pad = padding(2, 7, [7, 4])
    handle = named.activation.register_forward_hook(lambda module, inputs, output: None)
    with pytest.raises(UsageError, match="hooks on the activation module"):
        named(x, x, x, key_padding_mask=pad, need_weights=False)
    handle.remove()
    named(x, x, x, key_padding_mask=pad, need_weights=False)  # served again
    from torch.nn.modules.module import register_module_forward_hook

    handle = register_module_forward_hook(lambda module, inputs, output: None)  # every module's
    try:
        with pytest.raises(UsageError, match="global module hooks .registered for every module"):
            named(x, x, x, key_padding_mask=pad, need_weights=False)
    finally:
        handle.remove()

    auto_takes_the_kernels_for_training_calls(monkeypatch)
    auto = SparseMultiheadAttention(E, H, config=_config("relu", "auto", "gated_rmsnorm"), self_attention=True)
    ref = SparseMultiheadAttention(E, H, config=_config("relu", "materialized", "gated_rmsnorm"), self_attention=True)
    auto.load_state_dict(named.state_dict())
    ref.load_state_dict(named.state_dict())
    seen, grads_seen = [], []
    auto.activation.register_forward_hook(lambda module, inputs, output: seen.append(tuple(output.shape)))
    auto.activation.register_full_backward_hook(lambda module, gin, gout: grads_seen.append(1))
    xin = x.clone().requires_grad_()
    with OpLog() as log:
        out, _ = auto(xin, xin, xin, key_padding_mask=pad, need_weights=False)
    assert not [op for op in log.ops if op.startswith("fsa.relu_attention")]
    assert seen == [(2, H, 7, 7)]
    out.backward(torch.ones_like(out))
    assert grads_seen == [1]
    xref = x.clone().requires_grad_()
    want, _ = ref(xref, xref, xref, key_padding_mask=pad, need_weights=False)
    want.backward(torch.ones_like(want))
    assert torch.allclose(out, want, atol=1e-6) and torch.allclose(xin.grad, xref.grad, atol=1e-6)
    auto.activation._forward_hooks.clear()
    auto.activation._backward_hooks.clear()
    with OpLog() as log:
        auto(xin, xin, xin, key_padding_mask=pad, need_weights=False)
    assert log.ops.count("fsa.relu_attention_fwd") == 1


@pytest.mark.parametrize(
    "case, reason",
    [
        ("pattern", "a mask other than key padding and causal"),
        ("head_dim", "head dim 48"),
    ],
)
def test_a_call_the_kernels_do_not_serve_goes_to_attend_which_says_why(case, reason):
    """The direct call declines what the kernels do not take; the call then goes through
    attend() (with q scaled as there), whose error names the reason, as before."""
    embed, heads = (96, 2) if case == "head_dim" else (E, H)
    config = _config("relu", "triton")
    torch.manual_seed(0)
    module = SparseMultiheadAttention(embed, heads, config=config, self_attention=True, dropout=0.1)
    module.train(case == "dropout")
    if case == "retain_dropout":  # fairseq's --retain-dropout, in inference
        module.dropout_module.apply_during_inference = True
    x = torch.randn(5, 2, embed)
    mask = None
    if case == "pattern":
        mask = torch.zeros(5, 5).masked_fill(torch.rand(5, 5) > 0.5, float("-inf"))
        mask[:, 0] = 0.0
    with pytest.raises(UsageError, match=re.escape(reason)):
        module(x, x, x, attn_mask=mask, need_weights=False)


@pytest.mark.parametrize("norm", ["rmsnorm_i", "gated_rmsnorm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_direct_call_runs_attention_and_norm_in_one_function_bit_for_bit(norm, dtype, monkeypatch):
    """A fused RMS output norm runs inside the kernels' autograd Function
    (kernels/normed_attention.py): one graph node for attention + norm, the same ops, and
    outputs and every gradient equal bit for bit to the two Functions one after the other
    (the path a forward hook on the norm gets: the hook still sees the call)."""
    from fairseq_sparse_attn.kernels import normed_attention

    _, fused = pair("relu", norm, self_attention=True)
    fused.to(dtype)
    with torch.no_grad():
        fused.output_norm.weight.uniform_(-1.5, 1.5)
    x = torch.randn(7, 3, E, dtype=dtype)
    kw = dict(key_padding_mask=padding(3, 7, [7, 4, 6]), need_weights=False)
    merged = []
    real = normed_attention._NormedReluAttention.forward
    monkeypatch.setattr(
        normed_attention._NormedReluAttention, "forward", staticmethod(lambda *a: merged.append(1) or real(*a))
    )

    def run():
        fused.zero_grad()
        xi = x.clone().requires_grad_()
        with OpLog() as log:
            out, _ = fused(xi, xi, xi, **kw)
            out.backward(torch.ones_like(out) * 0.1 + out.detach())
        return out.detach(), {**grads(fused), "x": xi.grad}, [op for op in log.ops if op.startswith("fsa.")]

    one, one_grads, one_ops = run()
    assert merged == [1]
    seen = []
    fused.output_norm.register_forward_hook(lambda module, inputs, output: seen.append(output.shape))
    two, two_grads, two_ops = run()
    assert merged == [1] and seen == [(7 * 3, E)]  # the hooked norm: its own module call
    assert one_ops == two_ops and len(one_ops) == (4 if dtype == torch.float16 else 5)
    assert torch.equal(one, two)
    assert one_grads.keys() == two_grads.keys() and len(one_grads) >= 5
    for name in one_grads:
        assert torch.equal(one_grads[name], two_grads[name]), name


def test_a_backward_hook_on_the_norm_keeps_its_module_call():
    """A full backward hook on the output norm (here: one that halves the gradient it passes
    back) sees the call through the direct kernel call too: the norm runs as its own module,
    and the gradients are the materialized backend's."""
    ref, fused = pair("relu", "gated_rmsnorm", self_attention=True)
    fired = []
    for m in (ref, fused):
        m.output_norm.register_full_backward_hook(lambda module, gin, gout: fired.append(1) or (gin[0] * 0.5,))
    x = torch.randn(5, 2, E)
    run_both(ref, fused, x, x, key_padding_mask=padding(2, 5, [5, 3]), need_weights=False)
    assert fired == [1, 1]


def test_a_call_too_large_for_the_kernels_is_refused_with_the_reason(monkeypatch):
    """Sizes beyond the kernels' 32-bit offsets or launch grid (here: a grid limit of one
    batch entry) leave the direct call for attend(), where the named backend says why."""
    from fairseq_sparse_attn.errors import UsageError
    from fairseq_sparse_attn.kernels import served

    _, fused = pair("relu", "gated_rmsnorm", self_attention=True)
    x = torch.randn(3, 2, E)
    fused(x, x, x)  # served
    monkeypatch.setattr(served, "GRID_LIMIT", 1)
    with pytest.raises(UsageError, match="2 batch entries x 2 heads .the launch grid: at most 1 of each"):
        fused(x, x, x)


def seq2seq_size(decoder_layers=1, **options):
    """A one-encoder-layer ReLA model's size (head dim 32) for the generator tests."""
    return dict(
        encoder_embed_dim=E,
        decoder_embed_dim=E,
        encoder_attention_heads=H,
        decoder_attention_heads=H,
        encoder_layers=1,
        decoder_layers=decoder_layers,
        encoder_ffn_embed_dim=2 * E,
        decoder_ffn_embed_dim=2 * E,
        attn_activation="relu",
        **options,
    )


def test_beam_search_through_the_direct_call_matches_the_materialized_backend(monkeypatch):
    """Incremental decoding (fairseq's SequenceGenerator, beam 2: cached keys, one query per
    step, cross-attention with one key copy per sentence) on the triton backend, through
    the plan's direct kernel call, against the same model on the materialized backend: the
    same hypotheses, scores within fp32 rounding."""
    from fairseq.sequence_generator import SequenceGenerator

    from helpers import build_model, make_dictionary, random_batch

    d = make_dictionary(30)
    size = seq2seq_size(attn_output_norm="gated_rmsnorm")
    ref, _ = build_model("sparse_transformer", dictionary=d, attn_backend="materialized", **size)
    fused, _ = build_model("sparse_transformer", dictionary=d, attn_backend="triton", **size)
    fused.load_state_dict(ref.state_dict())
    assert fused.decoder.layers[0].encoder_attn.plan().kernel is not None
    src, lengths, _ = random_batch(d, bsz=2, src_len=6)
    sample = {"net_input": {"src_tokens": src, "src_lengths": lengths}}
    hyps = []
    for model in (ref, fused):
        gen = SequenceGenerator([model], d, beam_size=2, max_len_a=0, max_len_b=5, min_len=5)
        if model is fused:  # every call served directly: none goes to attend()
            from fairseq_sparse_attn.attention import call_plan

            monkeypatch.setattr(call_plan, "attend", lambda *a, **k: pytest.fail("attend() was called"))
        with torch.no_grad(), OpLog() as log:
            hyps.append(gen.generate([model], sample))
    assert log.ops.count("fsa.relu_attention_fwd") >= 2 * 6 and "fsa.rms_norm_fwd" in log.ops
    for a, b in zip(*hyps):
        assert [h["tokens"].tolist() for h in a] == [h["tokens"].tolist() for h in b]
        for x, y in zip(a, b):
            assert abs(x["score"].item() - y["score"].item()) <= 1e-4


def test_print_alignment_on_the_triton_backend_is_refused_before_decoding():
    """fairseq's --print-alignment reads the alignment layer's cross-attention weights at
    every decoding step, which the kernels do not compute: building the alignment generator
    for a model whose cross-attention is on the triton backend is one UsageError naming the
    module and the remedy (before: empty attention per hypothesis, then an IndexError inside
    fairseq).  The remedy, auto, decodes and aligns; a model on auto is untouched."""
    from fairseq.sequence_generator import SequenceGeneratorWithAlignment

    from fairseq_sparse_attn.errors import UsageError

    from helpers import build_model, make_dictionary, random_batch

    d = make_dictionary(30)
    size = seq2seq_size(decoder_layers=2)
    model, _ = build_model("sparse_transformer", dictionary=d, attn_backend="triton", **size)
    model.eval()
    with pytest.raises(UsageError) as e:
        SequenceGeneratorWithAlignment([model], d, beam_size=2, max_len_b=4)
    message = str(e.value)
    assert "decoder.layers.0.encoder_attn and 1 more run on --attn-backend triton" in message
    assert "--model-overrides \"{'attn_backend': 'auto'}\"" in message
    for module in model.modules():  # what the remedy's override builds
        if hasattr(module, "encoder_decoder_attention"):
            module.backend = "auto"
    gen = SequenceGeneratorWithAlignment([model], d, beam_size=2, max_len_a=0, max_len_b=4, min_len=4)
    src, lengths, _ = random_batch(d, bsz=2, src_len=6)
    with torch.no_grad():
        hyps = gen.generate([model], {"net_input": {"src_tokens": src, "src_lengths": lengths}})
    for sentence in hyps:
        for h in sentence:  # one hard alignment link per target token but the final eos
            assert len(h["alignment"]) == len(h["tokens"]) - 1


def test_auto_needs_a_measurement_with_row_sums_for_a_row_sums_call(monkeypatch):
    """The H200's recorded result is ReLA's relu in bf16 without row sums: a bf16 training
    call that also needs the row sums (ReLUFormer's regularized criterion) was not measured
    that way, so auto does not take the kernels for it."""
    from helpers import kernel_call, on_cuda_device

    assert ("H200", "relu", "bf16+rowsums") not in tb.MEASURED_FASTER
    on_cuda_device(monkeypatch, "H200")
    measured = kernel_call("cuda", torch.bfloat16, grad=True, head_dim=64)
    assert tb._auto_enabled(None, measured)
    assert not tb._auto_enabled(None, measured._replace(row_sums=True))
