"""Head policies: how each head of an attention gets its weights and whether its output
is kept.  A head is *learned* (weights = activation of its scores) or *given* its weights
(docs/architecture.md); after that, heads may be *masked* (output zeroed) or *replaced* per
sentence (RHE).

==================  ==========================================================  ==============
policy              what                                                        paper / flag
==================  ==========================================================  ==============
``learned``         weights = activation(q·kᵀ/√d_h + biases, mask)              every head
``fixed_pattern``   heads 0..F-1 take fixed, non-learned weights                Raganato et al.
                    (:mod:`.fixed_patterns`); no query/key projections          2020
``masked``          the output of chosen heads is zeroed (test-time ablation)   --encoder-masked-heads
``rhe``             per sentence, heads found redundant on their standard       RHE (docs/rhe.md)
                    weights take the biased (syntax-enhanced) weights, or are
                    pruned (output zero, their computation skipped)
==================  ==========================================================  ==============

The pieces are small objects built once per attention module and used by
:func:`~.core.attend`.  :class:`HeadPlan` holds the active ones in three fixed slots
(fixed, masked, rhe; every other head is learned): a new head policy is a change to
:class:`HeadPlan` and :func:`~.core.attend`, not a registration.
"""

from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import Tensor

from .fixed_patterns import PATTERN_UNITS, check_pattern_names, check_right_context_reading, pattern_weights
from .masks import real_keys
from .rhe import RedundantHeadIdentifier


@dataclass(frozen=True)
class FixedPatternHeads:
    """Heads 0..F-1 take the weights of ``patterns`` (over tokens or words; readings of
    :mod:`.fixed_patterns`: ``right_context_reading``, ``exclude_eos``)."""

    patterns: Tuple[str, ...]
    unit: str = "token"
    right_context_reading: str = "mirrored"
    exclude_eos: bool = False

    def __post_init__(self):
        object.__setattr__(self, "patterns", tuple(check_pattern_names(self.patterns)))
        if self.unit not in PATTERN_UNITS:
            raise ValueError(f"fixed_pattern_unit must be one of {PATTERN_UNITS}, got {self.unit!r}")
        object.__setattr__(self, "right_context_reading", check_right_context_reading(self.right_context_reading))

    @property
    def num_given(self) -> int:
        return len(self.patterns)

    @property
    def key(self):
        """What identifies these weights in :attr:`~.core.AttentionInputs.pattern_weights`."""
        return (self.patterns, self.unit, self.right_context_reading, self.exclude_eos)

    def weights(self, inputs, bsz: int, src_len: int, device) -> Tensor:
        """(bsz, F, src_len, src_len): computed once per batch by the encoder
        (``inputs.pattern_weights``) or here from the padding (tokens) / word ids."""
        given = inputs.pattern_weights.get(self.key) if inputs.pattern_weights else None
        if given is not None:
            expected = (bsz, self.num_given, src_len, src_len)
            if tuple(given.shape) != expected:
                raise ValueError(f"given fixed-pattern weights have shape {tuple(given.shape)}, expected {expected}")
            return given
        valid = real_keys(inputs.key_padding, bsz, src_len, device)
        if self.unit == "word":
            ids = inputs.word_ids
            if ids is None or tuple(ids.shape) != (bsz, src_len):
                raise ValueError(
                    "word-based fixed patterns need the source word ids of this batch "
                    f"(bsz={bsz}, len={src_len}): AttentionInputs.word_ids, filled by the "
                    "plugin's encoder (sparse_transformer) from src_tokens"
                )
        else:
            ids = valid.long().cumsum(dim=1) - 1
        return pattern_weights(self.patterns, ids, valid, self.right_context_reading, self.exclude_eos)


@dataclass(frozen=True)
class MaskedHeads:
    """The output of heads ``heads`` (0-based) is zeroed."""

    heads: Tuple[int, ...]
    num_heads: int

    def __post_init__(self):
        heads = tuple(sorted(set(int(h) for h in self.heads)))
        for h in heads:
            if not 0 <= h < self.num_heads:
                raise ValueError(
                    f"masked head index {h} out of range: this attention has "
                    f"{self.num_heads} heads (0..{self.num_heads - 1})"
                )
        object.__setattr__(self, "heads", heads)

    def keep(self, dtype, device) -> Tensor:
        """(1, heads, 1, 1): 0 for masked heads, 1 otherwise."""
        keep = torch.ones(self.num_heads, dtype=dtype, device=device)
        keep[list(self.heads)] = 0
        return keep.view(1, self.num_heads, 1, 1)


class RedundantHeads:
    """RHE: decide per sentence which heads are redundant (:mod:`.rhe`, Eq. 3, 9, 10)
    on their standard weights; those heads take the enhanced (biased) weights, or with
    ``prune`` their output is zeroed.

    Pruning skips what only the pruned heads would use (:meth:`skips_pruned`, docs/rhe.md
    "Pruning"): the biased (enhanced) attention of every head, the bias providers' value
    term, and the value mix of the pruned (sentence, head) pairs.  It always skips at test
    time (module in eval mode), in training only with ``skip_in_training``
    (``--prune-skip-in-training``), and never when the caller collects the weights (an
    analysis then gets the weights the unskipped computation reports)."""

    def __init__(self, identifier: RedundantHeadIdentifier, skip_in_training: bool = False):
        self.identifier = identifier
        self.skip_in_training = bool(skip_in_training)

    @property
    def prune(self) -> bool:
        return self.identifier.prune

    def skips_pruned(self, training: bool, wants_weights: bool) -> bool:
        """True when this call skips the pruned heads' computation (class docstring)."""
        return self.prune and not wants_weights and (not training or self.skip_in_training)

    def identify(self, standard: Tensor, inputs, valid: Tensor) -> Tensor:
        """(bsz, heads) bool, True = redundant, from the heads' standard weights."""
        if inputs.src_dep is None:
            raise ValueError(
                "redundant head identification needs src_dep for each batch (--task parse_annotated_translation)"
            )
        return self.identifier(standard, inputs.src_dep, valid)

    def replace(self, standard: Tensor, enhanced: Optional[Tensor], inputs, valid: Tensor):
        """(weights, redundant (bsz, heads) bool, keep (bsz, heads) bool or None)."""
        redundant = self.identify(standard, inputs, valid)
        weights = standard
        if enhanced is not None:
            weights = torch.where(redundant.view(*redundant.shape, 1, 1), enhanced, standard)
        keep = ~redundant if self.prune else None
        return weights, redundant, keep


@dataclass(frozen=True)
class HeadPlan:
    """The head policies of one attention module (None = not used)."""

    num_heads: int
    fixed: Optional[FixedPatternHeads] = None
    masked: Optional[MaskedHeads] = None
    rhe: Optional[RedundantHeads] = None

    @property
    def num_given(self) -> int:
        return self.fixed.num_given if self.fixed is not None else 0

    @property
    def num_learned(self) -> int:
        return self.num_heads - self.num_given

    @property
    def all_learned(self) -> bool:
        return self.fixed is None and self.masked is None and self.rhe is None
