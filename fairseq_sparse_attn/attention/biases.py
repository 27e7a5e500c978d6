"""Bias providers: the "scores += biases" step of the attention core (DESIGN.md).

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

Adding a provider = a module with ``forward(q, ctx) -> (bias, hide)`` decorated with
:func:`register_bias`.
"""

import math
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from ..syntax import NO_PHRASE  # src_rp value for "not in the local phrase" (and padding)

BIAS_REGISTRY: Dict[str, Callable[..., nn.Module]] = {}

# Localness: floor of sigma^2 (in positions^2), so that a window predicted as ~0 gives a
# very sharp but finite Gaussian instead of 0/0.
LOCALNESS_MIN_VARIANCE = 1e-4


def register_bias(name: str):
    def wrap(cls):
        if name in BIAS_REGISTRY:
            raise ValueError(f"bias provider {name!r} registered twice")
        BIAS_REGISTRY[name] = cls
        cls.registry_name = name
        return cls

    return wrap


def bias_names():
    return sorted(BIAS_REGISTRY)


def build_bias(name: str, num_heads: int, head_dim: int, options=None) -> nn.Module:
    if name not in BIAS_REGISTRY:
        raise ValueError(f"unknown attention bias {name!r}; valid values: {', '.join(bias_names())}")
    return BIAS_REGISTRY[name](num_heads=num_heads, head_dim=head_dim, options=options)


def _opt(options, name, default):
    value = getattr(options, name, None) if options is not None else None
    return default if value is None else value


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

    #: True when :meth:`value_term` adds to the head output
    has_value_term: bool = False

    def value_term(self, probs: Tensor, ctx: BiasContext) -> Tensor:
        """Extra head output (bsz, heads, T, head_dim) from the attention probabilities
        (only called when :attr:`has_value_term`)."""
        raise NotImplementedError(f"{self.registry_name} adds nothing to the head output")

    def extra_repr(self):
        return self.registry_name


@register_bias("dea")
class DependencyMask(BiasProvider):
    """DEA (Eq. 4-5): keys that are neither dependency-related to the query nor the query
    itself are hidden.  No parameters."""

    needs = ("src_dep",)

    def forward(self, q, ctx):
        return None, ctx.real_query_rows(~ctx.src_dep.to(torch.bool)).unsqueeze(1)


def relative_label_bias(rel_embed: Tensor, proj: nn.Linear, out: Tensor) -> Tensor:
    """Eq. 8 once per label: −|tanh(W_P w_r + b_P) · U_P| for r = −k..k, shape (2k+1,).
    P_ij is this vector looked up at clip(RP_ij); computing it per label instead of per
    (i, j) pair gives the same numbers at (2k+1)/T² of the cost."""
    return -(torch.tanh(proj(rel_embed.float())) @ out.float()).abs()


@register_bias("lpea")
class LocalPhraseBias(BiasProvider):
    """LPEA (Eq. 6-8): learned bias from the relative phrasal position RP_ij, clipped to
    [−k, k]; keys outside the local phrase of the query (RP_ij = NO_PHRASE) are hidden.

    Parameters (one set per layer, shared by its heads): ``rel_embed`` = w_{−k..k}
    (2k+1, d_h), ``proj`` = W_P (d_h × d_h) and b_P, ``out`` = U_P (d_h)."""

    needs = ("src_rp",)

    def __init__(self, num_heads, head_dim, options=None):
        super().__init__(num_heads, head_dim, options)
        k = int(_opt(options, "lpea_max_distance", 6))
        if k < 0:
            raise ValueError(f"--lpea-max-distance must be >= 0, got {k}")
        self.max_distance = k
        self.rel_embed = nn.Parameter(torch.empty(2 * k + 1, head_dim))
        self.proj = nn.Linear(head_dim, head_dim)
        self.out = nn.Parameter(torch.empty(head_dim))
        nn.init.xavier_uniform_(self.rel_embed)
        nn.init.xavier_uniform_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)
        nn.init.normal_(self.out, std=head_dim ** -0.5)

    def forward(self, q, ctx):
        rp = ctx.src_rp.long()
        outside = rp == NO_PHRASE
        k = self.max_distance
        labels = relative_label_bias(self.rel_embed, self.proj, self.out)
        bias = labels[rp.clamp(-k, k) + k]  # NO_PHRASE entries read label -k: hidden anyway
        return bias.unsqueeze(1), ctx.real_query_rows(outside).unsqueeze(1)

    def extra_repr(self):
        return f"lpea, k={self.max_distance}"


def relative_positions(length: int, k: int, device) -> Tensor:
    """(T, T) long: clip(j − i, −k, k) + k, the row of w^K / w^V for query i and key j."""
    pos = torch.arange(length, device=device)
    return (pos.view(1, -1) - pos.view(-1, 1)).clamp(-k, k) + k


@register_bias("rel_pos")
class RelativePosition(BiasProvider):
    """Rel_Pos (Shaw et al. 2018, Eq. 3-4) with clipping distance k:

        e_ij = q_i · (k_j + a^K_ij) / √d_h,   z_i = Σ_j α_ij (v_j + a^V_ij),
        a^K_ij = w^K_clip(j−i,k),  a^V_ij = w^V_clip(j−i,k)

    w^K (and w^V with ``--encoder-rel-pos-values``) are (2k+1, d_h), shared by the heads
    of the layer, as in the paper.  Token positions: left padding shifts i and j alike."""

    def __init__(self, num_heads, head_dim, options=None):
        super().__init__(num_heads, head_dim, options)
        k = int(_opt(options, "encoder_rel_pos_k", 0))
        if k < 1:
            raise ValueError(f"rel_pos needs a clipping distance --encoder-rel-pos-k >= 1, got {k}")
        self.max_distance = k
        self.key_embed = nn.Parameter(torch.empty(2 * k + 1, head_dim))
        nn.init.xavier_uniform_(self.key_embed)
        self.value_embed = None
        if bool(_opt(options, "encoder_rel_pos_values", False)):
            self.value_embed = nn.Parameter(torch.empty(2 * k + 1, head_dim))
            nn.init.xavier_uniform_(self.value_embed)

    def forward(self, q, ctx):
        bsz, heads, length, _ = q.shape
        idx = relative_positions(length, self.max_distance, q.device)
        per_label = q.float() @ self.key_embed.float().t()  # (bsz, heads, T, 2k+1)
        bias = per_label.gather(-1, idx.expand(bsz, heads, length, length))
        return bias, None

    @property
    def has_value_term(self):
        return self.value_embed is not None

    def value_term(self, probs, ctx):
        bsz, heads, length, _ = probs.shape
        idx = relative_positions(length, self.max_distance, probs.device)
        per_label = probs.new_zeros(bsz, heads, length, 2 * self.max_distance + 1)
        per_label.scatter_add_(-1, idx.expand(bsz, heads, length, length), probs)
        return per_label @ self.value_embed.to(probs.dtype)

    def extra_repr(self):
        return f"rel_pos, k={self.max_distance}, values={self.value_embed is not None}"


@register_bias("localness")
class GaussianLocalness(BiasProvider):
    """Localness (Yang et al. 2018, "Modeling Localness for Self-Attention Networks"):

        [p_i; z_i] = [U_p; U_d]ᵀ tanh(W_p q_i)        q_i: the head's query (unscaled)
        P_i = I · sigmoid(p_i),  D_i = I · sigmoid(z_i),  σ_i = D_i / 2
        G_ij = −(j − P_i)² / (2 σ_i²)

    I = the sentence length (tokens incl. EOS), j = the key's position in the sentence
    (0-based, padding excluded).  Each head predicts its own center and window from its
    own query; W_p (d_h × d_h), U_p, U_d (d_h) are shared by the heads of the layer.
    σ² is floored at ``LOCALNESS_MIN_VARIANCE``."""

    def __init__(self, num_heads, head_dim, options=None):
        super().__init__(num_heads, head_dim, options)
        self.proj = nn.Linear(head_dim, head_dim, bias=False)
        self.center = nn.Parameter(torch.empty(head_dim))
        self.window = nn.Parameter(torch.empty(head_dim))
        nn.init.xavier_uniform_(self.proj.weight)
        nn.init.normal_(self.center, std=head_dim ** -0.5)
        nn.init.normal_(self.window, std=head_dim ** -0.5)

    def center_and_sigma(self, q, valid):
        """P_i and σ_i, each (bsz, heads, T), from the scaled query q."""
        hidden = torch.tanh(self.proj(q.float() * math.sqrt(self.head_dim)))
        length = valid.sum(dim=1).float().view(-1, 1, 1)
        center = length * torch.sigmoid(hidden @ self.center.float())
        sigma = length * torch.sigmoid(hidden @ self.window.float()) / 2
        return center, sigma

    def forward(self, q, ctx):
        center, sigma = self.center_and_sigma(q, ctx.valid)
        position = (ctx.valid.long().cumsum(dim=1) - 1).float()  # j within the sentence
        distance = position.view(position.size(0), 1, 1, -1) - center.unsqueeze(-1)
        variance = (sigma ** 2).clamp(min=LOCALNESS_MIN_VARIANCE).unsqueeze(-1)
        return -distance ** 2 / (2 * variance), None
