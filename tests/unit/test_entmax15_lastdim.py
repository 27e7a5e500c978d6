"""The plugin's 1.5-entmax (attention/entmax15_lastdim.py) and sparsemax
(attention/sparsemax_lastdim.py) give the entmax package's numbers bit for bit, forward and
backward, including masked (-1e6) keys and rows whose keys are all masked, and the plain
definitions of 1.5-entmax and sparsemax."""

import pytest
import torch

from fairseq_sparse_attn.attention.activations import ENTMAX_MASK_VALUE
from fairseq_sparse_attn.attention.entmax15_lastdim import entmax15_last_dim
from fairseq_sparse_attn.attention.sparsemax_lastdim import sparsemax_last_dim

entmax = pytest.importorskip("entmax")


#: (the package's mapping, ours)
MAPPINGS = {
    "entmax15": (lambda x: entmax.entmax15(x, dim=-1), entmax15_last_dim),
    "sparsemax": (lambda x: entmax.sparsemax(x, dim=-1), sparsemax_last_dim),
}


@pytest.mark.parametrize("mapping", sorted(MAPPINGS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(3, 4, 7, 9), (8, 8, 24, 24), (2, 1, 5, 1), (5, 11)])
def test_same_numbers_as_the_entmax_package(mapping, dtype, shape):
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(*shape, dtype=dtype, generator=g) * 3
    x[..., : shape[-1] // 3] = ENTMAX_MASK_VALUE
    x[0] = ENTMAX_MASK_VALUE  # rows with every key masked
    a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    package, ours = MAPPINGS[mapping]
    ya, yb = package(a), ours(b)
    upstream = torch.randn(ya.shape, dtype=dtype, generator=g)
    ya.backward(upstream)
    yb.backward(upstream)
    assert torch.equal(ya, yb) and torch.equal(a.grad, b.grad)


def test_definition_sums_to_one_and_is_sparse():
    """1.5-entmax: y = [(z/2 - tau)_+]^2 with tau such that sum y = 1 (Peters et al. 2019)."""
    z = torch.tensor([[3.0, 1.0, 0.2, -2.0]], dtype=torch.float64)
    y = entmax15_last_dim(z)
    tau = (z / 2 - y.sqrt())[y > 0]
    assert torch.allclose(tau, tau[0].expand_as(tau))  # one threshold on the support
    assert torch.allclose(y.sum(), torch.tensor(1.0, dtype=torch.float64)) and y[0, -1] == 0


def test_sparsemax_definition_is_the_projection_onto_the_simplex():
    """sparsemax(z) = max(z - tau, 0) with tau such that the weights sum to 1."""
    z = torch.tensor([[1.0, 0.8, 0.1, -1.0]], dtype=torch.float64)
    assert torch.allclose(sparsemax_last_dim(z), torch.tensor([[0.6, 0.4, 0.0, 0.0]], dtype=torch.float64))
