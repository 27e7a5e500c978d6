"""The fused Triton output norms (fairseq_sparse_attn/kernels/output_norm.py) against
attention/output_norms.py's modules (same weights, same dtype) and against the plain
formula in float64: outputs and the gradients of the input, the gain and the gate weight,
in float32 (1e-5 relative), float16 and bfloat16 (1e-2), ragged row counts (not a
multiple of the backward's programs), widths 37 to 2048 including non-powers of two, null
rows, and the fp16/bf16 gradient bound.

The kernels run on CPU tensors in Triton's interpreter, in this process (the kernel
modules build the interpreted form themselves, fairseq_sparse_attn/kernels/launch.py:
``TRITON_INTERPRET`` is not needed, so nothing here leaks into other tests)."""

import pytest
import torch

from conftest import require_kernels  # noqa: E402

require_kernels()  # the Triton kernels run here, else the module skips (CI: fails)

from fairseq_sparse_attn.attention import build_output_norm, output_norms  # noqa: E402
from fairseq_sparse_attn.kernels import output_norm as fused  # noqa: E402

from helpers import OpLog  # noqa: E402

NORMS = ["rmsnorm_i", "gated_rmsnorm"]
#: relative tolerance (max abs error / max abs reference) per input dtype
TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}
TRITON_TYPES = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16"}


def formula64(z, gain, gate_weight, eps=output_norms.RMSNORM_EPS):
    """ReLA Eq. 4 / 5 written plainly in float64."""
    out = z / torch.sqrt((z * z).mean(-1, keepdim=True) + eps) * gain
    if gate_weight is not None:
        out = out / (1 + torch.exp(-gate_weight * z))
    return out


def make(name, width, dtype, rows=(3, 5), param_dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    norm = build_output_norm(name, width, max(1, width // 8)).to(param_dtype)
    with torch.no_grad():
        norm.weight.uniform_(-1.5, 1.5)
    z = (torch.randn(*rows, width) * 2).to(dtype)
    z[0, 0] = 0  # a null row
    return norm, z, torch.randn(*rows, width).to(dtype)


def params(norm):
    gate = getattr(norm, "gate_weight", None)
    return [norm.weight] + ([gate] if gate is not None else [])


def fused_forward(norm, z):
    gate = getattr(norm, "gate_weight", None)
    # the floor as it is at the call, as attention/output_norms.py passes it
    return fused.fused_rms_normalize(z, norm.eps, norm.weight, gate, output_norms.HALF_BACKWARD_RMS_FLOOR)


def grads(fn, norm, z, upstream):
    z = z.detach().requires_grad_(True)
    out = fn(norm, z)
    return [out] + list(torch.autograd.grad(out, [z] + params(norm), upstream))


def rel_err(got, ref):
    return ((got.double() - ref.double()).abs().max() / ref.double().abs().max().clamp_min(1e-30)).item()


def assert_all_close(got, expected, tol, what):
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape, (what, i)
        assert torch.isfinite(g).all(), (what, i)
        err = rel_err(g, e)
        assert err <= tol, f"{what}: {['out', 'dz', 'dgain', 'dgate'][i]} relative error {err:.2e} > {tol:.0e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize("width", [37, 128, 320, 768, 1024])
def test_matches_the_module_and_the_float64_formula(name, width, dtype):
    norm, z, upstream = make(name, width, dtype)
    got = grads(fused_forward, norm, z, upstream)
    assert got[0].dtype == dtype and got[1].dtype == dtype
    assert all(g.dtype == torch.float32 for g in got[2:])
    module = grads(lambda n, x: n(x), norm, z, upstream)
    assert_all_close(got, module, TOL[dtype], f"{name} {dtype} d={width} vs module")
    # the formula in float64 on the same (rounded) inputs
    norm64 = build_output_norm(name, width, max(1, width // 8)).double()
    norm64.load_state_dict(norm.state_dict())
    exact = grads(
        lambda n, x: formula64(x, n.weight, getattr(n, "gate_weight", None)), norm64, z.double(), upstream.double()
    )
    if dtype != torch.float32:  # the null row's dz is bounded there (test_gradient_bound_of_near_null_rows)
        got[1], exact[1] = got[1].reshape(-1, width)[1:], exact[1].reshape(-1, width)[1:]
    assert_all_close(got, exact, TOL[dtype], f"{name} {dtype} d={width} vs float64 formula")


@pytest.mark.parametrize("gated", [False, True])
def test_bfloat16_results_are_rounded_to_nearest_as_on_a_gpu(gated):
    """The interpreter's bf16 casts truncate; the kernels round by hand there, so out and dz
    are the float64 values rounded to nearest bf16 (a truncating cast: about half of them
    one bf16 step low)."""
    g = torch.Generator().manual_seed(6)
    z = torch.randn(64, 256, generator=g).bfloat16().requires_grad_()
    w = torch.randn(256, generator=g).requires_grad_()
    gw = torch.randn(256, generator=g).requires_grad_() if gated else None
    upstream = torch.randn(64, 256, generator=g).bfloat16()
    out = fused.fused_rms_normalize(z, 1e-6, w, gw, output_norms.HALF_BACKWARD_RMS_FLOOR)
    (dz,) = torch.autograd.grad(out, z, upstream)
    z64 = z.detach().double().requires_grad_()
    ref = output_norms.rms_normalize(z64, 1e-6, w.detach().double(), None if gw is None else gw.detach().double())
    (dz64,) = torch.autograd.grad(ref, z64, upstream.double())
    for got, want in ((out, ref), (dz, dz64)):
        assert (got == want.to(torch.bfloat16)).float().mean() > 0.99


@pytest.mark.parametrize("width", [64, 2048])
def test_block_width_edges_in_float32(width):
    norm, z, upstream = make("gated_rmsnorm", width, torch.float32, rows=(9,))
    got = grads(fused_forward, norm, z, upstream)
    norm64 = build_output_norm("gated_rmsnorm", width, 8).double()
    norm64.load_state_dict(norm.state_dict())
    exact = grads(lambda n, x: formula64(x, n.weight, n.gate_weight), norm64, z.double(), upstream.double())
    assert_all_close(got, exact, TOL[torch.float32], f"d={width}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", NORMS)
def test_half_parameters_as_in_fp16_and_bf16_models(name, dtype):
    """``--fp16`` / ``--bf16`` models hold half parameters: gradients in their dtype."""
    norm, z, upstream = make(name, 320, dtype, param_dtype=dtype)
    got = grads(fused_forward, norm, z, upstream)
    assert all(g.dtype == dtype for g in got)
    assert_all_close(got, grads(lambda n, x: n(x), norm, z, upstream), TOL[dtype], f"{name} {dtype} half params")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_gradient_bound_of_near_null_rows(dtype):
    """fp16/bf16: the normalization's part of dz of a row with RMS(z) under the floor is
    scaled by RMS(z) / floor (the gate's part and the parameter gradients are exact);
    float32: the exact gradient, ~1/RMS(z).  Rows from 0 to far above the floor."""
    norm, _, upstream = make("gated_rmsnorm", 256, dtype, rows=(6,))
    torch.manual_seed(3)
    scales = torch.tensor([0.0, 1e-6, 1e-4, 3e-3, 3e-2, 1.0]).unsqueeze(-1)
    z = (torch.randn(6, 256) * scales).to(dtype)
    got = grads(fused_forward, norm, z, upstream)
    assert_all_close(got, grads(lambda n, x: n(x), norm, z, upstream), TOL[dtype], f"{dtype} vs module")
    # against the formula by hand: c * norm part + gate part (float64)
    zd, g, w, o = z.double(), norm.weight.double().detach(), norm.gate_weight.double().detach(), upstream.double()
    zr = zd.clone().requires_grad_(True)
    r = 1 / torch.sqrt((zr * zr).mean(-1, keepdim=True) + norm.eps)
    gate = torch.sigmoid(w * zr)
    (norm_part,) = torch.autograd.grad((zr * r * g * gate.detach() * o).sum(), zr)
    (gate_part,) = torch.autograd.grad(((zr * r * g).detach() * gate * o).sum(), zr)
    c = (1 / (r.detach() * output_norms.HALF_BACKWARD_RMS_FLOOR)).clamp(max=1.0) if dtype != torch.float32 else 1.0
    expected = c * norm_part + gate_part
    for row in range(6):
        err = rel_err(got[1][row], expected[row])
        assert err <= TOL[dtype], f"row of scale {scales[row].item()}: {err:.2e}"
    if dtype == torch.float32:  # unbounded: RMS = sqrt(1e-12 + eps) = 1e-4, ~1e4 x the unit row's
        assert got[1][1].abs().max() > 1e3 * got[1][5].abs().max()
    else:  # bounded by 1/floor
        assert got[1][:4].abs().max() < 10 * got[1][5].abs().max() / output_norms.HALF_BACKWARD_RMS_FLOOR


def test_the_floor_is_read_at_the_call(monkeypatch):
    norm, _, upstream = make("rmsnorm_i", 128, torch.float16, rows=(2,))
    z = (torch.randn(2, 128) * 1e-3).half()
    default = grads(fused_forward, norm, z, upstream)[1]
    monkeypatch.setattr(output_norms, "HALF_BACKWARD_RMS_FLOOR", 1e-4)  # the rows' RMS is above it
    unbounded = grads(fused_forward, norm, z, upstream)[1]
    assert_all_close([unbounded], [grads(lambda n, x: n(x), norm, z, upstream)[1]], TOL[torch.float16], "floor 1e-4")
    rms = z.float().square().mean(-1).sqrt()
    ratio = default.float().abs().max(-1).values / unbounded.float().abs().max(-1).values
    torch.testing.assert_close(ratio, rms / 1e-2, rtol=2e-2, atol=0)


def test_strided_inputs_and_parameters():
    """A transposed input and parameters that are every other element of a buffer."""
    torch.manual_seed(5)
    z = torch.randn(96, 7).t()  # (7, 96), column stride 7
    gain, gate = torch.randn(192)[::2], torch.randn(192)[::2] * 0.2
    out = fused.fused_gated_rmsnorm(z, gain, gate, 1e-8, 1e-2)
    expected = formula64(z.double(), gain.double(), gate.double())
    assert rel_err(out, expected) <= TOL[torch.float32]


@pytest.mark.parametrize("name", NORMS)
def test_null_rows_give_zero_and_finite_gradients(name):
    norm, _, upstream = make(name, 96, torch.float32, rows=(2,))
    z = torch.zeros(2, 96)
    out, dz, *dparams = grads(fused_forward, norm, z, upstream)
    assert torch.equal(out, torch.zeros_like(out))
    assert all(torch.isfinite(t).all() for t in [dz] + dparams)


@pytest.mark.parametrize("param_dtype", [torch.float32, torch.float16])
def test_the_gated_norm_s_two_gradients_accumulate_apart(param_dtype):
    """The gated norm's gain and gate gradients come out of the op as one (2, n) tensor, so
    after a first backward each parameter's ``.grad`` is a view of that tensor.  Accumulating
    a second backward (``--update-freq``) adds to each alone: the same as two backwards of
    the unfused module, which gives each parameter a tensor of its own."""
    norm, z, upstream = make("gated_rmsnorm", 96, torch.float16, param_dtype=param_dtype)
    reference = build_output_norm("gated_rmsnorm", 96, 12).to(param_dtype)
    reference.load_state_dict(norm.state_dict())
    for module, forward in ((norm, fused_forward), (reference, lambda m, x: m(x))):
        forward(module, z).backward(upstream)
        first = [p.grad.clone() for p in params(module)]
        forward(module, z).backward(2 * upstream)
        for p, g in zip(params(module), first):
            assert torch.allclose(p.grad.float(), 3 * g.float(), rtol=1e-2, atol=1e-3)
    for fused_p, ref_p in zip(params(norm), params(reference)):
        assert rel_err(fused_p.grad, ref_p.grad) < TOL[torch.float16]


@pytest.mark.parametrize("name", NORMS)
def test_one_dispatched_op_per_direction(name):
    """What a dispatch-level op counter sees: the forward is one op, the backward one op
    (beside autograd's accumulation of leaf gradients)."""
    norm, z, upstream = make(name, 128, torch.float16)
    z.requires_grad_(True)
    with OpLog() as fwd:
        out = fused_forward(norm, z)
    assert fwd.ops == ["fsa.rms_norm_fwd"]
    with OpLog() as bwd:
        out.backward(upstream)
    # the gated norm's two parameter gradients come as one (2, n) tensor, split by a view
    # (unbind); AccumulateGrad stores each leaf's first gradient as a detached alias (any
    # op's backward)
    split = ["aten.unbind"] if name == "gated_rmsnorm" else []
    assert bwd.ops == ["fsa.rms_norm_bwd"] + split + ["aten.detach"] * (1 + len(params(norm)))
    with OpLog() as module:
        norm(z).backward(upstream)
    assert len(module.ops) > 10  # what the fused op replaces


@pytest.mark.parametrize("name", NORMS)
def test_registration_opcheck(name):
    """torch.library.opcheck: schema, fake (meta) kernels, autograd registration and AOT
    dispatch (what torch.compile traces) of both ops agree with the real kernels."""
    norm, z, upstream = make(name, 64, torch.float32, rows=(4,))
    gate = getattr(norm, "gate_weight", None)
    z.requires_grad_(True)
    torch.library.opcheck(torch.ops.fsa.rms_norm_fwd, (z, norm.weight, gate, 1e-8, 1e-2))
    out, rstd = torch.ops.fsa.rms_norm_fwd(
        z.detach(), norm.weight.detach(), None if gate is None else gate.detach(), 1e-8, 1e-2
    )
    detached = (upstream, z.detach(), norm.weight.detach(), None if gate is None else gate.detach(), rstd, 1e-2)
    torch.library.opcheck(torch.ops.fsa.rms_norm_bwd, detached)


def test_torch_compile_full_graph_matches_eager():
    norm, z, upstream = make("gated_rmsnorm", 320, torch.float32, rows=(5,))
    eager = grads(fused_forward, norm, z, upstream)
    compiled = torch.compile(fused_forward, backend="aot_eager", fullgraph=True)
    got = grads(compiled, norm, z, upstream)
    for g, e in zip(got, eager):
        torch.testing.assert_close(g, e, rtol=0, atol=0)


# --- the launcher picks only declared configurations (no kernel runs) ---


def test_launcher_picks_only_declared_configs(monkeypatch):
    declared = fused.launch_configs()
    names = [c["name"] for c in declared]
    assert len(names) == len(set(names))
    launched = []
    real_plan = fused._plan
    monkeypatch.setattr(fused, "_plan", lambda config, *args: launched.append(config) or real_plan(config, *args))
    fused.launching.clear_plans()  # (each call below makes its plan: a signature of its own)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for pdtype in {torch.float32, dtype}:
            for width in (1, 37, 64, 65, 320, 512, 768, 1024, 2048):
                for gated in (False, True):
                    z = torch.randn(3, width).to(dtype)
                    w = torch.ones(width, dtype=pdtype)
                    gw = torch.ones(width, dtype=pdtype) if gated else None
                    out, rstd = torch.ops.fsa.rms_norm_fwd(z, w, gw, 1e-8, 1e-2)
                    torch.ops.fsa.rms_norm_bwd(out, z, w, gw, rstd, 1e-2)
                    fwd_config, bwd_config = launched[-2:]
                    for config, kind in ((fwd_config, "fwd"), (bwd_config, "bwd")):
                        assert config in declared
                        assert config["name"].startswith(f"rms_norm_{kind}_")
                        block = config["constexprs"]["BLOCK_D"]
                        assert block >= width and (block == 64 or block < 2 * width)
                        assert config["constexprs"]["HAS_GATE"] == gated
                        sig = config["signature"]
                        assert (sig["Z"], sig["W"]) == (TRITON_TYPES[dtype], TRITON_TYPES[pdtype])
                    assert bwd_config["constexprs"]["HALF_BOUND"] == (dtype != torch.float32)
    assert len(launched) == 2 * 5 * 9 * 2


@pytest.mark.parametrize(
    "dtype, pdtype, width, message",
    [
        (torch.float64, torch.float64, 64, "input dtype torch.float64 not served"),
        (torch.float16, torch.bfloat16, 64, "torch.bfloat16 weights with torch.float16 inputs not served"),
        (torch.float32, torch.float32, 2049, "width 2049 not served (1 to 2048 features)"),
    ],
)
def test_unserved_inputs_fail_with_one_line(dtype, pdtype, width, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        torch.ops.fsa.rms_norm_fwd(torch.ones(2, width, dtype=dtype), torch.ones(width, dtype=pdtype), None, 1e-8, 1e-2)


def test_cpu_tensors_run_in_the_interpreter_without_triton_interpret(monkeypatch):
    """CPU tensors run the interpreted form (whatever TRITON_INTERPRET says); the configs
    list the compiled form (what the AOT check compiles); other devices: one clear error."""
    from triton.runtime.jit import JITFunction

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    out = fused.fused_rmsnorm(torch.ones(2, 64) * 3, torch.full((64,), 2.0), 1e-8, 1e-2)
    torch.testing.assert_close(out, torch.full((2, 64), 2.0))
    assert all(isinstance(c["kernel"], JITFunction) for c in fused.launch_configs())
    with pytest.raises(RuntimeError, match="CUDA tensors, or on CPU tensors in the interpreter; got meta"):
        fused._plan(fused.launch_configs()[0], (1,), torch.device("meta"), torch.float32, ())


def test_a_strided_rstd_is_read_by_its_strides():
    """A direct caller of ``fsa::rms_norm_bwd`` may pass r as any view: every other element
    of a longer tensor, or a transposed (rows, cols) one.  The op gives what it gives for
    the same values laid out contiguously (the kernel itself reads r of row i at i).  An r
    of another dtype or shape is one clear error."""
    norm, z, upstream = make("gated_rmsnorm", 96, torch.float32, rows=(4, 6))
    w, gw = norm.weight.detach(), norm.gate_weight.detach()
    _, rstd = torch.ops.fsa.rms_norm_fwd(z, w, gw, norm.eps, 1e-2)
    expected = torch.ops.fsa.rms_norm_bwd(upstream, z, w, gw, rstd, 1e-2)
    every_other = torch.stack([rstd.reshape(-1), torch.full((24,), 7.0)], dim=1).reshape(-1)[::2]
    transposed = rstd.t().contiguous().t()
    for strided in (every_other.view(4, 6), transposed):
        assert not strided.is_contiguous() and torch.equal(strided, rstd)
        got = torch.ops.fsa.rms_norm_bwd(upstream, z, w, gw, strided, 1e-2)
        assert all(torch.equal(a, b) for a, b in zip(got, expected))
    flat = torch.ops.fsa.rms_norm_bwd(upstream.view(24, 96), z.view(24, 96), w, gw, every_other, 1e-2)
    assert all(torch.equal(a.reshape(b.shape), b) for a, b in zip(flat, expected))
    for wrong in (rstd.half(), rstd[:, :5], upstream):  # another dtype or shape: one clear error
        with pytest.raises(ValueError, match=r"fused RMSNorm backward: .* \(rstd: the forward's, float32\)"):
            torch.ops.fsa.rms_norm_bwd(upstream, z, w, gw, wrong, 1e-2)


def test_fake_tensors_give_shapes_and_dtypes_without_a_kernel():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        z = torch.empty(4, 6, 320, dtype=torch.float16)
        w = torch.empty(320)
        out, rstd = torch.ops.fsa.rms_norm_fwd(z, w, w, 1e-8, 1e-2)
        dz, gated = torch.ops.fsa.rms_norm_bwd(out, z, w, w, rstd, 1e-2)
        _, plain = torch.ops.fsa.rms_norm_bwd(out, z, w, None, rstd, 1e-2)
    assert (out.shape, out.dtype, rstd.shape, rstd.dtype) == (z.shape, z.dtype, (4, 6), torch.float32)
    assert (dz.shape, dz.dtype) == (z.shape, z.dtype)
    assert (gated.shape, gated.dtype, plain.shape, plain.dtype) == ((2, 320), torch.float32, (320,), torch.float32)


@pytest.mark.parametrize("name", ["gated_rmsnorm", "rmsnorm_i"])
def test_a_configured_eps_reaches_the_kernel(name):
    """``--attn-norm-eps``: the fused norm (and the fused attention + norm, which reads
    ``kernel_arguments``) computes with the module's eps, not the default 1e-8: small z,
    eps 1e-2, where the two differ by most of the output."""
    from fairseq_sparse_attn.attention.config import OutputNormConfig

    torch.manual_seed(0)
    eps = 1e-2
    norm = build_output_norm(OutputNormConfig(name=name, eps=eps), 16, 4, fused=True)
    assert norm.fused and norm.kernel_arguments(torch.float32)[2] == eps
    z = torch.randn(3, 16) * 0.05
    gate = getattr(norm, "gate_weight", None)
    expected = z.double() / torch.sqrt((z.double() ** 2).mean(-1, keepdim=True) + eps) * norm.weight.double()
    if gate is not None:
        expected = expected * torch.sigmoid(gate.double() * z.double())
    with torch.no_grad():
        assert rel_err(norm(z), expected) < 1e-5
        unfused = build_output_norm(OutputNormConfig(name=name, eps=eps), 16, 4)
        unfused.load_state_dict(norm.state_dict())
        assert rel_err(unfused(z), expected) < 1e-5
