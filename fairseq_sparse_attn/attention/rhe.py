"""Redundant head identification (RHE, "Enlivening Redundant Heads in Multi-head
Self-attention for Machine Translation", Sec. 4.3, Eq. 3, 9, 10).

Per sentence and per head, from the head's own (standard) attention weights A:

    h_conf   = 1/n Σ_i max_j A_ij                    (Eq. 3, Voita et al.'s confidence)
    Syn_attn = 1/n Σ_i Σ_j A_ij · dep_ij             (Eq. 9, dep_ij: related or i = j)
    Syn_gate = sigmoid(h_conf)   (dynamic)   or a constant in (0, 1]   (fixed)
    important  iff Syn_attn > Syn_gate                (Eq. 10, h_label = 1)
    redundant  otherwise

n and the means run over the real (non-padding) query tokens of the sentence, EOS
included.  The decision is a hard, non-differentiable label (computed on detached
weights).  What a redundant head then does (syntax-enhanced attention, pruning) is decided
by the attention module, :class:`~.multihead.SparseMultiheadAttention`.
"""

from typing import Optional, Union

import torch
import torch.nn as nn
from torch import Tensor

GATE_DYNAMIC = "dynamic"
#: the per-batch inputs (:class:`~.biases.BiasContext` fields) RHE reads
RHE_NEEDS = ("src_dep",)


def parse_gate(value) -> Union[str, float]:
    """``"dynamic"`` or a fixed gate value in (0, 1] (the paper's Figure 4 uses 0.1-0.5)."""
    if value is None or value == GATE_DYNAMIC:
        return GATE_DYNAMIC
    try:
        gate = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"--rhe-gate must be 'dynamic' or a number in (0, 1], got {value!r}") from None
    if not 0.0 < gate <= 1.0:
        raise ValueError(f"--rhe-gate must be 'dynamic' or a number in (0, 1], got {gate}")
    return gate


def _row_mean(per_row: Tensor, valid: Tensor) -> Tensor:
    """(bsz, heads, T) -> (bsz, heads): mean over the real query rows."""
    valid = valid.to(per_row.dtype).unsqueeze(1)
    return (per_row * valid).sum(-1) / valid.sum(-1).clamp(min=1)


def head_confidence(weights: Tensor, valid: Tensor) -> Tensor:
    """h_conf (Eq. 3).  weights (bsz, heads, T, T); valid (bsz, T) real tokens."""
    return _row_mean(weights.amax(dim=-1), valid)


def syntactic_attention(weights: Tensor, dep: Tensor, valid: Tensor) -> Tensor:
    """Syn_attn (Eq. 9): attention mass on dependency-related keys (and the token itself)."""
    related = (weights * dep.to(weights.dtype).unsqueeze(1)).sum(-1)
    return _row_mean(related, valid)


def syntactic_gate(weights: Tensor, valid: Tensor, gate: Union[str, float] = GATE_DYNAMIC) -> Tensor:
    """Syn_gate per (sentence, head): sigmoid(h_conf) or the fixed constant."""
    if gate == GATE_DYNAMIC:
        return torch.sigmoid(head_confidence(weights, valid))
    return weights.new_full(weights.shape[:2], float(gate))


def redundant_heads(weights: Tensor, dep: Tensor, valid: Tensor, gate: Union[str, float] = GATE_DYNAMIC) -> Tensor:
    """(bsz, heads) bool, True = redundant: Syn_attn <= Syn_gate (Eq. 10)."""
    weights = weights.detach().float()
    return syntactic_attention(weights, dep, valid) <= syntactic_gate(weights, valid, gate)


class RedundantHeadIdentifier(nn.Module):
    """The identification step of one attention module (no parameters, no state).

    Calling it returns the (bsz, heads) redundant mask of the batch.  The attention
    returns that mask in its intermediates (``redundant``); the model logs the fraction
    of (sentence, head) pairs found redundant as ``rhe_redundant_<name>`` through
    fairseq's metrics after its forward (:func:`log_redundant_fractions`), so a layer
    recomputed by activation checkpointing is not counted twice.
    """

    def __init__(self, gate: Union[str, float] = GATE_DYNAMIC, prune: bool = False, name: Optional[str] = None):
        super().__init__()
        self.gate = parse_gate(gate)
        self.prune = bool(prune)
        self.name = name

    def forward(self, weights: Tensor, dep: Tensor, valid: Tensor) -> Tensor:
        return redundant_heads(weights, dep, valid, self.gate)

    def extra_repr(self):
        return f"gate={self.gate}, prune={self.prune}, name={self.name}"


def log_redundant_fractions(records) -> None:
    """Log ``rhe_redundant_<name>`` for every (module, intermediates) record of a
    forward that carries RHE decisions (see :mod:`.intermediates`)."""
    from fairseq.logging import metrics  # here: the rest of the module needs torch only

    for module, inter in records:
        identifier = getattr(module, "rhe", None)
        if inter.redundant is None or identifier is None or identifier.name is None:
            continue
        redundant = inter.redundant
        metrics.log_scalar(
            f"rhe_redundant_{identifier.name}", redundant.float().mean(), weight=redundant.numel(), round=3
        )
