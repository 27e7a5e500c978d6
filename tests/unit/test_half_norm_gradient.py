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


def plain_formula_grads(z, g, w, o, eps):
    """float64 autograd of the plain formula z r g [* sigmoid(w z)], r = 1/sqrt(mean(z^2) +
    eps), with the bound on the normalization's part of grad_z only: (grad_z, grad_g,
    grad_w); the parameters' gradients are exact at every dtype."""
    z, g, o = z.double().requires_grad_(True), g.double().requires_grad_(True), o.double()
    w = None if w is None else w.double().requires_grad_(True)

    def parts():
        r = 1 / torch.sqrt((z * z).mean(-1, keepdim=True) + eps)
        return r, z * r * g, (torch.sigmoid(w * z) if w is not None else torch.ones_like(z))

    r, normed, gate = parts()
    (gz_norm,) = torch.autograd.grad((normed * gate.detach() * o).sum(), z)
    r, normed, gate = parts()
    gz_gate = torch.autograd.grad((normed.detach() * gate * o).sum(), z)[0] if w is not None else 0.0
    r, normed, gate = parts()
    params = [g] + ([w] if w is not None else [])
    grads = torch.autograd.grad((normed * gate * o).sum(), params)
    c = torch.clamp(1 / (r.detach() * HALF_BACKWARD_RMS_FLOOR), max=1.0)
    return (c * gz_norm + gz_gate, grads[0], grads[1] if w is not None else None)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["gated_rmsnorm", "rmsnorm_i"])
def test_half_backward_gives_every_gradient_of_the_plain_formula(dtype, kind):
    """The fp16/bf16 backward (the bound folded into r, ``_bounded_gradients``): the input's
    gradient is the plain formula's with its normalization part scaled by c, the gain's and
    the gate's gradients are the plain formula's, on rows of every scale (near-null rows
    included), with and without the gate; the parameters keep their dtype (float32)."""
    torch.manual_seed(1)
    norm = build_output_norm(kind, D, D // 4)
    z = torch.randn(5, 7, D) * torch.tensor([1.0, 1e-1, 1e-2, 1e-3, 1e-5]).view(5, 1, 1)
    z = z.to(dtype)
    o = torch.randn(5, 7, D).to(dtype)
    zg = z.clone().requires_grad_(True)
    norm(zg).backward(o)
    gate_weight = getattr(norm, "gate_weight", None)
    want_z, want_g, want_w = plain_formula_grads(
        z.float(), norm.weight.detach(), None if gate_weight is None else gate_weight.detach(), o.float(), norm.eps
    )
    assert zg.grad.dtype == dtype and norm.weight.grad.dtype == torch.float32
    torch.testing.assert_close(zg.grad.double(), want_z, rtol=2e-2, atol=2e-2 * want_z.abs().max().item())
    torch.testing.assert_close(norm.weight.grad.double(), want_g, rtol=1e-4, atol=1e-4 * want_g.abs().max().item())
    if gate_weight is not None:
        torch.testing.assert_close(gate_weight.grad.double(), want_w, rtol=1e-4, atol=1e-4 * want_w.abs().max().item())


def test_half_backward_dispatches_three_ops_fewer_than_scaling_after():
    """The bound folded into r (``_bounded_gradients``): a gated fp16 backward dispatches 17
    ops besides the gradients' accumulation (the two casts, gy, t, the mean, the gate's
    part, the gain's gradient 3, the gate weight's 2, the input's 5 and the clamp), where
    the float32 order with the scale by c after it took 20."""
    from helpers import OpLog

    torch.manual_seed(0)
    norm = build_output_norm("gated_rmsnorm", D, D // 4)
    z = torch.randn(3, 4, D).to(torch.float16).requires_grad_(True)
    out = norm(z)
    grad = torch.ones_like(out)
    log = OpLog()
    with log:
        out.backward(grad)
    computed = [op for op in log.ops if op != "aten.detach"]  # detach: a fresh gradient's accumulation
    assert len(computed) == 17, computed
