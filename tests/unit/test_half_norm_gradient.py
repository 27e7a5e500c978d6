"""fp16/bf16 robustness of the gated RMSNorm backward (issue 22.2, docs/rela.md "fp16 and
bf16"): the gradient with respect to the attention weights of a near-null row grows as
1/RMS(z) (up to 1/sqrt(eps) = 1e4); for fp16/bf16 inputs the normalization's part of it
is scaled by c = min(1, RMS(z) / HALF_BACKWARD_RMS_FLOOR), fp32 keeps the exact gradient.
The reference is autograd through the plain fp32 formula, split into the normalization's
part and the gate's part."""

import pytest
import torch

from fairseq_sparse_attn.attention import build_output_norm
from fairseq_sparse_attn.attention.output_norms import HALF_BACKWARD_RMS_FLOOR

D, KEYS = 64, 12
EPS = 1e-8


def setup(seed=0):
    torch.manual_seed(seed)
    norm = build_output_norm("gated_rmsnorm", D, D // 4)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    return norm, torch.randn(KEYS, D), torch.randn(1, D)


def grad_wrt_weights(norm, v, o, mass, dtype):
    """d(sum(norm(a v) * o))/da for a row a of KEYS equal weights summing to ``mass``,
    z = a v rounded to ``dtype``; also returns z as the norm saw it (in float32)."""
    a = torch.full((1, KEYS), mass / KEYS, requires_grad=True)
    z = (a @ v).to(dtype)
    (norm(z).float() * o).sum().backward()
    return a.grad, z.detach().float()


def formula_grad(norm, v, o, z, scale_norm_part):
    """The plain fp32 formula's gradient wrt a (through z = a v, chain rule by hand):
    norm part (z r g with the gate held fixed) times c, plus the gate part."""
    g, w = norm.weight.detach(), norm.gate_weight.detach()
    z = z.clone().requires_grad_(True)
    r = 1 / torch.sqrt((z * z).mean(-1, keepdim=True) + EPS)
    gate = torch.sigmoid(w * z)
    (gz_norm,) = torch.autograd.grad(((z * r * g) * gate.detach() * o).sum(), z)
    (gz_gate,) = torch.autograd.grad(((z * r * g).detach() * gate * o).sum(), z)
    c = torch.clamp(1 / (r.detach() * HALF_BACKWARD_RMS_FLOOR), max=1.0) if scale_norm_part else 1.0
    return (c * gz_norm + gz_gate) @ v.t()


def test_fp32_gradient_is_the_exact_formula_even_for_null_rows():
    norm, v, o = setup()
    for mass in (1.0, 1e-2, 1e-4, 1e-6):
        got, z = grad_wrt_weights(norm, v, o, mass, torch.float32)
        torch.testing.assert_close(got, formula_grad(norm, v, o, z, False), rtol=1e-4, atol=1e-3)
    # the hypothesis of issue 22: unbounded in fp32, ~1/mass
    big, _ = grad_wrt_weights(norm, v, o, 1e-6, torch.float32)
    one, _ = grad_wrt_weights(norm, v, o, 1.0, torch.float32)
    assert big.abs().max() > 1e3 * one.abs().max()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mass", [1e-6, 1e-5, 1e-4, 1e-3, 1e-2])
def test_half_gradient_of_near_null_rows_is_bounded(dtype, mass):
    norm, v, o = setup()
    got, z = grad_wrt_weights(norm, v, o, mass, dtype)
    assert torch.isfinite(got).all()
    expected = formula_grad(norm, v, o, z, True)
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=1e-2 * expected.abs().max().item())
    # bounded: the norm part's amplification 1/RMS is at most 1/floor, so the gradient is
    # at most what the exact formula gives a row whose RMS is the floor
    exact = formula_grad(norm, v, o, z, False)
    rms = z.square().mean().add(EPS).sqrt().item()
    if rms < HALF_BACKWARD_RMS_FLOOR / 2:
        assert got.abs().max() < exact.abs().max() * 2 * rms / HALF_BACKWARD_RMS_FLOOR + 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_gradient_of_rows_above_the_floor_is_unchanged(dtype):
    norm, v, o = setup()
    got, z = grad_wrt_weights(norm, v, o, 1.0, dtype)
    assert z.square().mean().sqrt() > HALF_BACKWARD_RMS_FLOOR
    expected = formula_grad(norm, v, o, z, False)
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2 * expected.abs().max().item())
