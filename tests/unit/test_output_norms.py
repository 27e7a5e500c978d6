"""ReLA-g / ReLA-i / RMSNorm / LayerNorm formulas, initialisation ranges, null rows."""

import math

import pytest
import torch

from fairseq_sparse_attn.attention import build_output_norm, output_norm_names

D, DH = 32, 8


def plain_rms(z, eps=1e-8):
    return [x / math.sqrt(sum(v * v for v in z) / len(z) + eps) for x in z]


def test_rmsnorm_formula_and_init():
    norm = build_output_norm("rmsnorm", D, DH)
    assert torch.all(norm.weight == 1)
    with torch.no_grad():
        norm.weight.uniform_(-2, 2)
    z = torch.randn(3, D)
    out = norm(z)
    for i in range(3):
        expected = [r * g for r, g in zip(plain_rms(z[i].tolist()), norm.weight.tolist())]
        torch.testing.assert_close(out[i], torch.tensor(expected), atol=1e-5, rtol=1e-5)


def test_rela_i_gain_init_range():
    torch.manual_seed(0)
    norm = build_output_norm("rmsnorm_i", 4096, 64)
    bound = math.sqrt(3 / 64)
    w = norm.weight.detach()
    assert w.abs().max() <= bound
    assert w.abs().max() > 0.95 * bound  # really spans the range
    assert abs(w.mean().item()) < 0.01
    # uniform: variance bound^2 / 3
    assert abs(w.var().item() - bound**2 / 3) < 0.1 * bound**2 / 3


def test_rela_g_formula_and_gate_init():
    torch.manual_seed(0)
    norm = build_output_norm("gated_rmsnorm", D, DH)
    bound = math.sqrt(3 / D)
    assert norm.gate_weight.abs().max() <= bound
    assert torch.all(norm.weight == 1)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    z = torch.randn(4, D)
    out = norm(z)
    for i in range(4):
        rms = plain_rms(z[i].tolist())
        expected = [
            (1 / (1 + math.exp(-w * x))) * r * g
            for x, w, r, g in zip(z[i].tolist(), norm.gate_weight.tolist(), rms, norm.weight.tolist())
        ]
        torch.testing.assert_close(out[i], torch.tensor(expected), atol=1e-5, rtol=1e-5)


def test_layernorm_variants():
    z = torch.randn(5, D)
    ln = build_output_norm("layernorm", D, DH)
    mean = z.mean(-1, keepdim=True)
    var = ((z - mean) ** 2).mean(-1, keepdim=True)
    torch.testing.assert_close(ln(z), (z - mean) / torch.sqrt(var + 1e-5))
    gln = build_output_norm("gated_layernorm", D, DH)
    torch.testing.assert_close(gln(z), torch.sigmoid(z * gln.gate_weight) * (z - mean) / torch.sqrt(var + 1e-5))


@pytest.mark.parametrize("name", ["rmsnorm", "rmsnorm_i", "gated_rmsnorm", "layernorm", "gated_layernorm"])
def test_null_row_gives_finite_output_and_gradients(name):
    norm = build_output_norm(name, D, DH)
    z = torch.zeros(2, D, requires_grad=True)
    out = norm(z)
    assert torch.isfinite(out).all()
    if "rms" in name:
        assert torch.all(out == 0)
    out.sum().backward()
    assert torch.isfinite(z.grad).all()
    for p in norm.parameters():
        assert p.grad is None or torch.isfinite(p.grad).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_safe(dtype):
    norm = build_output_norm("gated_rmsnorm", D, DH)
    z = (torch.randn(3, D) * 1e-3).to(dtype)
    z[0] = 0
    out = norm(z)
    assert out.dtype == dtype and torch.isfinite(out).all()
    ref = norm(z.float())
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)


def test_none_has_no_parameters_and_is_identity():
    norm = build_output_norm("none", D, DH)
    z = torch.randn(2, D)
    assert list(norm.parameters()) == [] and torch.equal(norm(z), z)


def test_unknown_norm_lists_valid_names():
    with pytest.raises(ValueError) as e:
        build_output_norm("rms", D, DH)
    for name in output_norm_names():
        assert name in str(e.value)


def plain_rms_norm_formula(z, gain, gate_weight, eps=1e-8):
    """ReLA Eq. 4 / 5 written plainly; autograd through it is the reference gradient."""
    out = z / torch.sqrt((z * z).mean(-1, keepdim=True) + eps) * gain
    if gate_weight is not None:
        out = out / (1 + torch.exp(-gate_weight * z))
    return out


@pytest.mark.parametrize("name", ["rmsnorm", "rmsnorm_i", "gated_rmsnorm"])
def test_hand_written_backward_matches_autograd_of_the_formula(name):
    torch.manual_seed(1)
    norm = build_output_norm(name, D, DH).double()
    with torch.no_grad():
        norm.weight.uniform_(-1.5, 1.5)
    z = torch.randn(3, 4, D, dtype=torch.float64)
    z[0, 0] = 0  # a null row
    z.requires_grad_(True)
    upstream = torch.randn(3, 4, D, dtype=torch.float64)
    gate = getattr(norm, "gate_weight", None)
    params = [norm.weight] + ([gate] if gate is not None else [])
    got = torch.autograd.grad(norm(z), [z] + params, upstream)
    expected = torch.autograd.grad(plain_rms_norm_formula(z, norm.weight, gate), [z] + params, upstream)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-10, rtol=1e-8)
    assert torch.autograd.gradcheck(lambda x: norm(x), (z[1:2].detach().requires_grad_(True),))


def test_half_precision_gradients_keep_their_dtypes():
    norm = build_output_norm("gated_rmsnorm", D, DH)
    z = torch.randn(3, D).to(torch.bfloat16).requires_grad_(True)
    norm(z).float().sum().backward()
    assert z.grad.dtype == torch.bfloat16 and norm.weight.grad.dtype == torch.float32
    z32 = z.detach().float().requires_grad_(True)
    plain_rms_norm_formula(z32, norm.weight.detach(), norm.gate_weight.detach()).sum().backward()
    torch.testing.assert_close(z.grad.float(), z32.grad, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("width", [8, 37, 512])
def test_fused_forward_equals_the_written_out_ops_bit_for_bit(width):
    """The norm's forward runs torch's fused RMSNorm op (one op instead of seven); on CPU its
    numbers are those of the ops it replaced, z * rsqrt(sum(z²) / d + eps) * g, bit for bit
    (the fixture checkpoints' outputs stay the same)."""
    from fairseq_sparse_attn.attention.output_norms import RMSNORM_EPS, _rms_norm_forward

    g = torch.Generator().manual_seed(width)
    for scale in (1e-3, 1.0, 50.0):
        z = torch.randn(6, 5, width, generator=g) * scale
        w = torch.rand(width, generator=g)
        out, r, _, _ = _rms_norm_forward(z, RMSNORM_EPS, w, None)
        ref_r = (z * z).sum(dim=-1, keepdim=True).div_(width).add_(RMSNORM_EPS).rsqrt_()
        assert torch.equal(r, ref_r)
        assert torch.equal(out, z * ref_r * w)


def test_torchs_fused_rms_norm_is_used_only_with_the_schema_it_is_called_with():
    """torch 2.13's aten::_fused_rms_norm (the output and 1/RMS) is used; torch 2.8 has an op
    of that name with another schema (an MPS kernel), which every RMS-normed model's first
    forward called as the newer one and failed on (`Expected a value of type 'int' for
    argument 'normalized_shape_ndim'`, seen with torch 2.8.0): not used."""
    from fairseq_sparse_attn.attention import output_norms as on

    op = getattr(torch.ops.aten, "_fused_rms_norm", None)  # (torch 2.7 and older: none)
    assert on._FUSED_RMS_NORM == (op is not None and on.fused_rms_norm_fits(op.default._schema))
    newer = (
        "aten::_fused_rms_norm(Tensor input, int[] normalized_shape, Tensor? weight, float? eps) -> (Tensor, Tensor)"
    )
    torch_2_8 = "aten::_fused_rms_norm(Tensor input, int normalized_shape_ndim, Tensor weight, float eps) -> Tensor"
    assert on.fused_rms_norm_fits(torch._C.parse_schema(newer))
    assert not on.fused_rms_norm_fits(torch._C.parse_schema(torch_2_8))


@pytest.mark.parametrize("gated", [False, True])
def test_rms_forward_without_torchs_fused_op_is_the_same(gated, monkeypatch):
    """torch builds without aten::_fused_rms_norm as it is called here (torch 2.8 and older):
    the separate-op formula gives the same output and 1/RMS."""
    from fairseq_sparse_attn.attention import output_norms as on

    z, w = torch.randn(4, 6, 16), torch.rand(16) + 0.5
    gw = torch.randn(16) if gated else None
    fused = on._rms_norm_forward(z, 1e-6, w, gw, keep_y=True)
    monkeypatch.setattr(on, "_FUSED_RMS_NORM", False)
    plain = on._rms_norm_forward(z, 1e-6, w, gw, keep_y=True)
    for a, b in zip(fused, plain):
        if a is None:
            assert b is None
        else:
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("name", ["rmsnorm", "rmsnorm_i", "gated_rmsnorm"])
def test_the_no_gradient_path_of_decoding_and_validation_is_the_formula(name, dtype):
    """Decoding and fairseq's validation run the norms without gradients (their own path,
    not the autograd Function): the same formula, z / RMS(z) * g [* sigmoid(w z)]."""
    torch.manual_seed(1)
    norm = build_output_norm(name, D, DH).to(dtype)
    z = torch.randn(3, D).to(dtype)
    with torch.no_grad():
        out = norm(z)
    assert out.dtype == dtype
    gate = getattr(norm, "gate_weight", None)
    for i in range(3):
        x = z[i].float().tolist()
        expected = [r * g for r, g in zip(plain_rms(x), norm.weight.float().tolist())]
        if gate is not None:
            expected = [e / (1 + math.exp(-w * v)) for e, w, v in zip(expected, gate.float().tolist(), x)]
        tol = 1e-5 if dtype == torch.float32 else 2e-3
        torch.testing.assert_close(out[i].float(), torch.tensor(expected), atol=tol, rtol=tol)
