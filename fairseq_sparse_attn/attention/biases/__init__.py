"""Bias providers: the "scores += biases" step of the attention core (docs/architecture.md).

A provider is a small ``nn.Module`` that, for one batch of encoder self-attention, returns

* ``bias``: float32 additive scores, broadcastable to ``(bsz, heads, tgt, src)``, or None;
* ``hide``: boolean, broadcastable to the same shape, True = key not visible (the paper's
  −∞ bias), or None.

−∞ is never added as a number: ``hide`` joins the padding mask and every activation
removes hidden keys its own way (−inf before softmax, exact zero after a ReLU), see
:mod:`.activations`.  Rows of padding queries are never hidden by a provider (they keep
seeing the sentence, as in stock fairseq), so no row is left without a visible key.

Rel_Pos also changes the head output (Shaw et al. 2018, Eq. 3): ``value_term(probs, ctx)``
returns ``Σ_j α_ij a^V_ij`` per head, added to ``α·V``.

Registered providers (paper equations in docs/rhe.md):

==============  ===========================================================  =============
name            what                                                        needs
==============  ===========================================================  =============
``dea``         D_ij = 0 if dependency-related or i = j, else −∞            ``src_dep``
``lpea``        P_ij = −|tanh(W_P·w_clip(RP_ij,k) + b_P)·U_P|, −∞ off-phrase ``src_rp``
``rel_pos``     q_i·a^K_clip(j−i,k)/√d_h (+ values term)                     —
``localness``   G_ij = −(j − P_i)² / (2σ_i²), P_i, σ_i from the query         —
==============  ===========================================================  =============

``src_dep`` / ``src_rp`` are the per-batch source annotations of the
``parse_annotated_translation`` task, ``(bsz, T, T)``, padded like ``src_tokens``;
the encoder hands them to the modules (see ``models/sparse_transformer.py``).

Adding a provider = one file in this package with a module ``forward(q, ctx) -> (bias,
hide)`` and ``selected(options)``, decorated with :func:`register_bias` and imported at the
end of this ``__init__`` (+ its option in :class:`fairseq_sparse_attn.options.PluginOptions`
and a line in the table above); see docs/architecture.md for the worked example
(``localness.py``).
"""

from dataclasses import dataclass
from typing import Callable, Optional, Tuple, TypeVar

import torch
import torch.nn as nn
from torch import Tensor

from ...syntax import NO_PHRASE  # src_rp value for "not in the local phrase" (and padding)
from ..registry import Registry

BIAS_REGISTRY = Registry("bias provider", unknown="attention bias")
bias_names = BIAS_REGISTRY.names
T = TypeVar("T")


def register_bias(name: str) -> Callable[[T], T]:
    """Class decorator: register a bias provider under ``name`` (a def, not an alias of
    ``BIAS_REGISTRY.register``, so that the provider modules imported below see its type)."""
    return BIAS_REGISTRY.register(name)


def build_bias(name: str, num_heads: int, head_dim: int, options=None) -> nn.Module:
    return BIAS_REGISTRY.get_or_raise(name)(num_heads=num_heads, head_dim=head_dim, options=options)


def check_source_annotations(valid: Tensor, src_dep: Optional[Tensor] = None,
                             src_rp: Optional[Tensor] = None):
    """Check the syntax annotations of a batch against its real tokens ``valid`` (bsz, T):
    shapes (bsz, T, T), dtypes, and that every real token is related to itself (DEA/RHE:
    dep_ii; LPEA: RP_ii in the local phrase), so no attention row can lose all its keys."""
    bsz, length = valid.shape
    for name, value in (("src_dep", src_dep), ("src_rp", src_rp)):
        if value is not None and tuple(value.shape) != (bsz, length, length):
            raise ValueError(f"{name} has shape {tuple(value.shape)}, expected (bsz, T, T) = "
                             f"({bsz}, {length}, {length}), padded like src_tokens")
    if src_dep is not None:
        if src_dep.dtype != torch.bool:
            raise ValueError(f"src_dep must be a bool tensor, got {src_dep.dtype}")
        if not bool((src_dep.diagonal(dim1=1, dim2=2) | ~valid).all()):
            raise ValueError("src_dep must relate every real token (EOS included) to itself "
                             "(dep[b, i, i] = True)")
    if src_rp is not None:
        if src_rp.dtype.is_floating_point or src_rp.dtype == torch.bool:
            raise ValueError(f"src_rp must be an integer tensor, got {src_rp.dtype}")
        if not bool(((src_rp.diagonal(dim1=1, dim2=2) != NO_PHRASE) | ~valid).all()):
            raise ValueError("src_rp must put every real token (EOS included) in its own local "
                             f"phrase (rp[b, i, i] != NO_PHRASE = {NO_PHRASE})")


@dataclass
class BiasContext:
    """What providers may use for one batch of self-attention (queries = keys).

    valid: (bsz, T) bool, True = real token (not padding)
    src_dep: (bsz, T, T) bool or None;  src_rp: (bsz, T, T) integer or None
    """

    valid: Tensor
    src_dep: Optional[Tensor] = None
    src_rp: Optional[Tensor] = None

    @classmethod
    def build(cls, valid: Tensor, source: Optional[dict] = None, needs=()):
        source = source or {}
        bsz, length = valid.shape
        ctx = cls(valid, source.get("src_dep"), source.get("src_rp"))
        for name in needs:
            value = getattr(ctx, name)
            if value is None:
                raise ValueError(
                    f"this attention needs {name} for each batch (syntax-enhanced attention / "
                    "RHE): train and generate with --task parse_annotated_translation, whose "
                    f"collater puts {name} in net_input; the plugin's encoder hands it to the "
                    "attention modules")
            if tuple(value.shape) != (bsz, length, length):
                raise ValueError(f"{name} has shape {tuple(value.shape)}, expected "
                                 f"(bsz, T, T) = ({bsz}, {length}, {length}), padded like src_tokens")
        return ctx

    def real_query_rows(self, hide: Tensor) -> Tensor:
        """``hide`` (bsz, T, T) restricted to real query rows: padding rows keep seeing the
        sentence (their output is never used, and a fully hidden row would be NaN)."""
        return hide & self.valid.unsqueeze(-1)


class BiasProvider(nn.Module):
    registry_name: str = "?"
    #: BiasContext fields this provider reads
    needs: Tuple[str, ...] = ()

    def __init__(self, num_heads: int, head_dim: int, options=None):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim

    def forward(self, q: Tensor, ctx: BiasContext) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """q: (bsz, heads, T, head_dim), the query already scaled by 1/√d_h (as used in
        the scores).  Returns (bias, hide), each broadcastable to (bsz, heads, T, T)."""
        raise NotImplementedError

    @property
    def has_value_term(self) -> bool:
        """True when :meth:`value_term` adds to the head output."""
        return False

    def value_term(self, probs: Tensor, ctx: BiasContext) -> Tensor:
        """Extra head output (bsz, heads, T, head_dim) from the attention probabilities
        (only called when :attr:`has_value_term`)."""
        raise NotImplementedError(f"{self.registry_name} adds nothing to the head output")

    @classmethod
    def selected(cls, options) -> bool:
        """True when the plugin options (:class:`fairseq_sparse_attn.options.PluginOptions`)
        turn this provider on (in the layers of ``--encoder-bias-layers``)."""
        return False

    @classmethod
    def check_options(cls, options) -> None:
        """Raise ValueError for inconsistent options of this provider (called for every
        registered provider when the encoder resolves its biases)."""

    def extra_repr(self):
        return self.registry_name


def provider_options(options):
    """The plugin options a provider reads (defaults where ``options`` lacks them)."""
    from ...options import plugin_options

    return plugin_options(options)


# the providers, in registration order (the order of the encoder's resolution)
# isort: off
from .dea import DependencyMask  # noqa: E402,F401
from .lpea import LocalPhraseBias, relative_label_bias  # noqa: E402,F401
from .rel_pos import RelativePosition, relative_positions  # noqa: E402,F401
from .localness import LOCALNESS_MIN_VARIANCE, GaussianLocalness  # noqa: E402,F401
# isort: on
