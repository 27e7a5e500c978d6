"""The plugin's sparsemax (attention/sparsemax_lastdim.py) gives the entmax package's
numbers bit for bit, forward and backward, including masked (-1e6) keys and rows whose
keys are all masked, and the plain definition of sparsemax."""

import pytest
import torch

from fairseq_sparse_attn.attention.activations import ENTMAX_MASK_VALUE
from fairseq_sparse_attn.attention.sparsemax_lastdim import sparsemax_last_dim

entmax = pytest.importorskip("entmax")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(3, 4, 7, 9), (8, 8, 24, 24), (2, 1, 5, 1), (5, 11)])
def test_same_numbers_as_the_entmax_package(dtype, shape):
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(*shape, dtype=dtype, generator=g) * 3
    x[..., : shape[-1] // 3] = ENTMAX_MASK_VALUE
    x[0] = ENTMAX_MASK_VALUE  # rows with every key masked
    a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    ya, yb = entmax.sparsemax(a, dim=-1), sparsemax_last_dim(b)
    upstream = torch.randn(ya.shape, dtype=dtype, generator=g)
    ya.backward(upstream)
    yb.backward(upstream)
    assert torch.equal(ya, yb) and torch.equal(a.grad, b.grad)


def test_definition_is_the_euclidean_projection_onto_the_simplex():
    """sparsemax(z) = max(z - tau, 0) with tau such that the weights sum to 1."""
    z = torch.tensor([[1.0, 0.8, 0.1, -1.0]], dtype=torch.float64)
    y = sparsemax_last_dim(z)
    assert torch.allclose(y, torch.tensor([[0.6, 0.4, 0.0, 0.0]], dtype=torch.float64))
