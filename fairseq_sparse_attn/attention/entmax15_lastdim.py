"""1.5-entmax over the last dimension: the entmax package's exact sort-based algorithm
(``entmax.activations.Entmax15Function`` with ``dim=-1``, ``k=None``, Peters et al. 2019),
the same operations in the same order, so the same numbers bit for bit, with fewer
dispatched ops per call (tests/unit/test_op_count.py):

* the index vector rho = 1..d is made once per (d, dtype, device) and kept (the package
  builds it with ``arange``, ``view`` and ``transpose`` at every call);
* reductions keep their dimension (``sum(keepdim=True)``) instead of ``sum`` + ``unsqueeze``.

Forward, with X the scores (Y = entmax15(X)):

    X = (X - max X) / 2;  Xs = sort(X, descending)
    mean = cumsum(Xs) / rho;  mean_sq = cumsum(Xs²) / rho
    ss = rho (mean_sq - mean²);  delta = (1 - ss) / rho
    tau = mean - sqrt(max(delta, 0));  k = #(tau <= Xs);  tau* = tau[k - 1]
    Y = max(X - tau*, 0)²

Backward: g = sqrt(Y), dX = dY g - g sum(dY g) / sum(g).
"""

import functools

import torch
from torch.autograd import Function


@functools.lru_cache(maxsize=64)
def index_vector(d: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """rho = 1..d, kept per (d, dtype, device) (also sparsemax's, .sparsemax_lastdim)."""
    return torch.arange(1, d + 1, device=device, dtype=dtype)


class Entmax15LastDim(Function):
    @staticmethod
    def forward(ctx, X):
        max_val, _ = X.max(dim=-1, keepdim=True)
        X = X - max_val
        X = X / 2
        Xsrt, _ = torch.sort(X, dim=-1, descending=True)
        rho = index_vector(X.size(-1), X.dtype, X.device)
        mean = Xsrt.cumsum(-1) / rho
        mean_sq = (Xsrt**2).cumsum(-1) / rho
        ss = rho * (mean_sq - mean**2)
        delta = (1 - ss) / rho
        tau = mean - torch.sqrt(torch.clamp(delta, 0))
        support_size = (tau <= Xsrt).sum(-1, keepdim=True)
        tau_star = tau.gather(-1, support_size - 1)
        Y = torch.clamp(X - tau_star, min=0) ** 2
        ctx.save_for_backward(Y)
        return Y

    @staticmethod
    def backward(ctx, dY):
        (Y,) = ctx.saved_tensors
        gppr = Y.sqrt()
        dX = dY * gppr
        q = dX.sum(-1, keepdim=True) / gppr.sum(-1, keepdim=True)
        dX -= q * gppr
        return dX


def entmax15_last_dim(X: torch.Tensor) -> torch.Tensor:
    """1.5-entmax of ``X`` over its last dimension (``entmax.entmax15(X, dim=-1)``)."""
    return Entmax15LastDim.apply(X)
