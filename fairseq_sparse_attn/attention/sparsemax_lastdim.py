"""Sparsemax over the last dimension: the entmax package's exact sort-based algorithm
(``entmax.activations.SparsemaxFunction`` with ``dim=-1``, ``k=None``, Martins & Astudillo
2016), the same arithmetic in the same order, so the same numbers bit for bit, with fewer
dispatched ops per call (tests/unit/test_op_count.py):

* the index vector rho = 1..d is made once per (d, dtype, device) and kept (the package
  builds it with ``arange``, ``view`` and ``transpose`` at every call);
* reductions keep their dimension instead of ``sum`` + ``unsqueeze`` / ``squeeze``;
* the support size is kept in the scores' dtype from the forward (the package converts it
  again in the backward), and the backward zeroes the gradient off the support with one
  mask instead of an index assignment and a ``where``.

Forward, with X the scores (Y = sparsemax(X)):

    X = X - max X;  Xs = sort(X, descending);  c = cumsum(Xs) - 1
    k = #(rho Xs > c);  tau = c[k - 1] / k;  Y = max(X - tau, 0)

Backward: g = dY on the support (Y != 0), 0 elsewhere; dX = g - sum(g) / k on the support.
"""

import torch
from torch.autograd import Function

from .entmax15_lastdim import index_vector


class SparsemaxLastDim(Function):
    @staticmethod
    def forward(ctx, X):
        max_val, _ = X.max(dim=-1, keepdim=True)
        X = X - max_val
        topk, _ = torch.sort(X, dim=-1, descending=True)
        topk_cumsum = topk.cumsum(-1) - 1
        support = index_vector(X.size(-1), X.dtype, X.device) * topk > topk_cumsum
        support_size = support.sum(dim=-1, keepdim=True)
        tau = topk_cumsum.gather(-1, support_size - 1)
        size = support_size.to(X.dtype)
        tau /= size
        output = torch.clamp(X - tau, min=0)
        ctx.save_for_backward(size, output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        size, output = ctx.saved_tensors
        off = output == 0
        grad_input = grad_output.masked_fill(off, 0)
        v_hat = grad_input.sum(dim=-1, keepdim=True) / size
        return (grad_input - v_hat).masked_fill_(off, 0)


def sparsemax_last_dim(X: torch.Tensor) -> torch.Tensor:
    """Sparsemax of ``X`` over its last dimension (``entmax.sparsemax(X, dim=-1)``)."""
    return SparsemaxLastDim.apply(X)
