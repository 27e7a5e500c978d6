"""The bias provider protocol: :class:`BiasProvider`, its per-batch :class:`BiasContext`, the
registry and the check of the source annotations (the providers themselves are the other
modules of this package; see its ``__init__``)."""

from dataclasses import dataclass
from typing import Callable, Optional, Tuple, TypeVar

import torch
import torch.nn as nn
from torch import Tensor

from ...syntax import NO_PHRASE  # src_rp value for "not in the local phrase" (and padding)
from ..config import BiasProviderConfig
from ..registry import Registry

BIAS_REGISTRY = Registry("bias provider", unknown="attention bias")
bias_names = BIAS_REGISTRY.names
T = TypeVar("T")


def register_bias(name: str) -> Callable[[T], T]:
    """Class decorator: register a bias provider under ``name`` (a def, not an alias of
    ``BIAS_REGISTRY.register``, so that the provider modules see its type)."""
    return BIAS_REGISTRY.register(name)


def build_bias(
    name: str, num_heads: int, head_dim: int, config: BiasProviderConfig = BiasProviderConfig()
) -> nn.Module:
    return BIAS_REGISTRY.get_or_raise(name)(num_heads=num_heads, head_dim=head_dim, config=config)


def check_source_annotations(valid: Tensor, src_dep: Optional[Tensor] = None, src_rp: Optional[Tensor] = None):
    """Check the syntax annotations of a batch against its real tokens ``valid`` (bsz, T):
    shapes (bsz, T, T), dtypes, and that every real token is related to itself (DEA/RHE:
    dep_ii; LPEA: RP_ii in the local phrase), so no attention row can lose all its keys."""
    bsz, length = valid.shape
    for name, value in (("src_dep", src_dep), ("src_rp", src_rp)):
        if value is not None and tuple(value.shape) != (bsz, length, length):
            raise ValueError(
                f"{name} has shape {tuple(value.shape)}, expected (bsz, T, T) = "
                f"({bsz}, {length}, {length}), padded like src_tokens"
            )
    if src_dep is not None:
        if src_dep.dtype != torch.bool:
            raise ValueError(f"src_dep must be a bool tensor, got {src_dep.dtype}")
        if not bool((src_dep.diagonal(dim1=1, dim2=2) | ~valid).all()):
            raise ValueError("src_dep must relate every real token (EOS included) to itself (dep[b, i, i] = True)")
    if src_rp is not None:
        if src_rp.dtype.is_floating_point or src_rp.dtype == torch.bool:
            raise ValueError(f"src_rp must be an integer tensor, got {src_rp.dtype}")
        if not bool(((src_rp.diagonal(dim1=1, dim2=2) != NO_PHRASE) | ~valid).all()):
            raise ValueError(
                "src_rp must put every real token (EOS included) in its own local "
                f"phrase (rp[b, i, i] != NO_PHRASE = {NO_PHRASE})"
            )


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
                    "attention modules"
                )
            if tuple(value.shape) != (bsz, length, length):
                raise ValueError(
                    f"{name} has shape {tuple(value.shape)}, expected "
                    f"(bsz, T, T) = ({bsz}, {length}, {length}), padded like src_tokens"
                )
        return ctx

    def real_query_rows(self, hide: Tensor) -> Tensor:
        """``hide`` (bsz, T, T) restricted to real query rows: padding rows keep seeing the
        sentence (their output is never used, and a fully hidden row would be NaN)."""
        return hide & self.valid.unsqueeze(-1)


class BiasProvider(nn.Module):
    registry_name: str = "?"
    #: BiasContext fields this provider reads
    needs: Tuple[str, ...] = ()

    def __init__(self, num_heads: int, head_dim: int, config: BiasProviderConfig = BiasProviderConfig()):
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

    def extra_repr(self):
        return self.registry_name
