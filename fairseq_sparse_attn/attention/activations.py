"""Attention activations: scores -> weights, one small module per name.

Every activation receives float32 scores of shape ``(bsz, heads, tgt_len, src_len)`` and a
boolean ``mask`` broadcastable to it (``True`` = the key may not be seen) or ``None``, and
returns weights of the same shape in which masked positions are exactly zero.

Two families:

* *normalizing* (softmax, sparsemax, entmax15, entmax_bisect): masked scores are removed
  before the mapping (``-inf`` for softmax, a large finite negative number for the
  entmax family whose sort/bisection would turn ``-inf`` into NaN), so each row is a
  probability distribution over the visible keys only;
* *rectified* (relu, gelu, leaky_relu): element-wise, so masked scores are zeroed
  *after* the function.  ``gelu(-inf)`` and ``leaky_relu(-inf)`` are not zero, which is
  why masking is never done by adding ``-inf`` for this family.

Each class declares its *traits* (class attributes, collected in ``cls.traits``), and the
rest of the core reads those, never the names: the backends of :mod:`.core` declare the
traits they need (:class:`~.core.Capabilities`), the inference call takes the in-place
weights function of a rectified activation, validation reads ``supports_chunking``.

==================  ==============================================================
trait               meaning
==================  ==============================================================
normalizing         each row a distribution over the visible keys: hidden scores are
                    removed *before* the mapping
softmax             the mapping is softmax (what fused softmax kernels compute)
rectified           element-wise ``f(scores)``; hidden keys are zeroed (masked by 0,
                    never by ``-inf``); ``fn(s)`` and the in-place ``fn_(s)`` give f
exact_zeros         the weights hold exact zeros.  For a rectified activation: f >= 0,
                    and f(s) = 0 for every s <= 0, so a hidden key may be zeroed
                    before or after f (a score set to 0, or a value set to 0)
row_scaled          the weights are multiplied per row by ``row_scale(n)``, n = the
                    number of keys the query may see (ReLUFormer's γ√(n/2))
supports_chunking   runs in the memory-bounded key-block path (:mod:`.chunked_relu`,
                    whose backward is ReLU's)
==================  ==============================================================

Adding an activation = writing a module with this ``forward(scores, mask)`` signature,
declaring its traits and decorating it with :func:`register_activation`; a rectified one
with exact zeros only defines ``fn`` and ``fn_`` (``tests/unit/test_activation_traits.py``
adds one and runs it through every backend that serves it).
"""

from typing import FrozenSet, Optional, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ActivationConfig
from .masks import hides_a_whole_row, row_factor, visible_key_counts
from .registry import Registry

ACTIVATION_REGISTRY = Registry("attention activation")
register_activation = ACTIVATION_REGISTRY.register
activation_names = ACTIVATION_REGISTRY.names

# Finite stand-in for -inf for the sort/bisection based mappings.  Far below any real
# attention score, small enough that squaring it (entmax15) stays finite in float32.
ENTMAX_MASK_VALUE = -1e6


def build_activation(config: Union[ActivationConfig, str], num_heads: int) -> "AttentionActivation":
    """The activation ``config`` describes (a name alone: its default hyper-parameters) for
    a module with ``num_heads`` heads."""
    if isinstance(config, str):
        config = ActivationConfig(name=config)
    return ACTIVATION_REGISTRY.get_or_raise(config.name)(num_heads=num_heads, config=config)


#: the boolean class attributes that are traits (module docstring)
TRAITS = ("normalizing", "softmax", "rectified", "exact_zeros", "row_scaled", "supports_chunking")


class AttentionActivation(nn.Module):
    #: hidden scores are removed before the mapping; rows are distributions (module docstring)
    normalizing: bool = True
    #: the mapping is softmax
    softmax: bool = False
    #: element-wise f, hidden keys zeroed after it; provides ``fn`` and ``fn_``
    rectified: bool = False
    #: the weights hold exact zeros (rectified: f >= 0 and f(s) = 0 for s <= 0)
    exact_zeros: bool = False
    #: the weights are multiplied per row by ``row_scale(n)`` (n visible keys)
    row_scaled: bool = False
    #: can run in the memory-bounded key-block path (attention/chunked_relu.py); such an
    #: activation also provides ``row_scale(n)``
    supports_chunking: bool = False
    #: the names in TRAITS whose attribute is true, set for every subclass
    traits: FrozenSet[str] = frozenset({"normalizing"})
    registry_name: str = "?"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.traits = frozenset(t for t in TRAITS if getattr(cls, t))

    def __init__(self, num_heads: int, config: ActivationConfig = ActivationConfig()):
        super().__init__()
        self.num_heads = num_heads

    def extra_repr(self):
        return self.registry_name

    def hiding_score(self, dtype: torch.dtype) -> Optional[float]:
        """A score (representable in ``dtype``) that this activation maps to weight exactly 0
        with gradient 0 whatever real score is added to it, or None (the default: the mask
        is applied by :meth:`forward`).  With one, the call plan adds the mask to the scores
        inside their product (``torch.baddbmm``, one op instead of a product and a mask
        pass) and takes the weights from :meth:`weights_of_hiding_scores`."""
        return None

    def weights_of_hiding_scores(self, scores: torch.Tensor, hidden: Optional[torch.Tensor], heads: int):
        """The weights of ``scores`` (bsz * heads, tgt, src), float32, a tensor the caller
        owns, whose hidden keys hold :meth:`hiding_score` plus a real score; ``hidden`` is
        the mask (broadcastable to (bsz, heads, tgt, src)) or None.  The same numbers as
        :meth:`forward` on the unbiased scores and the mask."""
        raise NotImplementedError(f"{type(self).__name__} has no hiding score")


@register_activation("softmax")
class Softmax(AttentionActivation):
    """Stock attention: softmax over the visible keys (float32, as fairseq)."""

    softmax = True

    def forward(self, scores, mask: Optional[torch.Tensor]):
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1)


class Rectified(AttentionActivation):
    """Element-wise ``f(scores)``, hidden keys zeroed: a subclass defines ``fn`` (and, for
    speed, ``fn_``) and declares ``exact_zeros`` / ``row_scaled`` where they hold."""

    normalizing = False
    rectified = True

    def fn(self, scores):
        """f(scores), a new tensor."""
        raise NotImplementedError

    def fn_(self, scores):
        """f(scores) in place on ``scores`` (a tensor the caller owns), returned."""
        return scores.copy_(self.fn(scores))

    def row_scale(self, n):
        """The per-row factor for ``n`` visible keys (1 unless ``row_scaled``)."""
        return torch.ones_like(n)

    def row_scale_key(self):
        """What :meth:`row_scale` depends on besides n (hashable; modules with equal keys
        share the factor of a mask), or None when the weights have no row factor."""
        return (type(self),) if self.row_scaled else None

    def hiding_score(self, dtype):
        """The lowest finite score: f of it is 0 (exact zeros: f(s) = 0 for s <= 0)."""
        return float(torch.finfo(dtype).min) if self.exact_zeros else None

    def weights_of_hiding_scores(self, scores, hidden, heads):
        weights = self.fn_(scores)  # hidden keys: f(hiding score) = 0, with gradient 0
        key = self.row_scale_key()
        if key is not None:
            factor = row_factor(
                hidden,
                scores.size(0) // heads,
                heads,
                scores.size(-1),
                scores.dtype,
                scores.device,
                self.row_scale,
                key,
            )
            weights = weights * factor
        return weights

    def rectified_weights(self, scores, mask: Optional[torch.Tensor]):
        """f(scores) with the hidden keys zeroed (no row factor)."""
        if self.exact_zeros:
            # hide first (f(0) = 0), then rectify in place: one tensor instead of two
            if mask is not None:
                return self.fn_(scores.masked_fill(mask, 0.0))
            return self.fn(scores)
        weights = self.fn(scores)
        if mask is not None:
            weights = weights.masked_fill(mask, 0.0)
        return weights

    def forward(self, scores, mask: Optional[torch.Tensor]):
        weights = self.rectified_weights(scores, mask)
        if self.row_scaled:
            weights = weights * self.row_scale(visible_key_counts(scores, mask)).to(weights.dtype)
        return weights


@register_activation("relu")
class ReLU(Rectified):
    """ReLA (Zhang et al. 2021, Eq. 3): alpha = max(0, scores)."""

    exact_zeros = True
    supports_chunking = True

    def fn(self, scores):
        return F.relu(scores)

    def fn_(self, scores):
        return scores.relu_()


@register_activation("gelu")
class GELU(Rectified):
    """ReLA Table 1 row 9: GeLU instead of ReLU (not sparse, may be negative)."""

    def fn(self, scores):
        return F.gelu(scores)


@register_activation("leaky_relu")
class LeakyReLU(Rectified):
    """ReLA Table 1 row 10: leaky ReLU (slope ``--leaky-relu-slope``, default 0.01)."""

    def __init__(self, num_heads, config: ActivationConfig = ActivationConfig()):
        super().__init__(num_heads, config)
        self.slope = float(config.leaky_relu_slope)

    def fn(self, scores):
        return F.leaky_relu(scores, self.slope)


def _entmax_package():
    try:
        import entmax
    except ImportError as e:  # pragma: no cover - entmax is an install requirement
        raise ImportError("sparsemax/entmax attention needs the 'entmax' package: pip install entmax") from e
    return entmax


class _EntmaxFamily(AttentionActivation):
    exact_zeros = True

    def mapping(self, scores):
        raise NotImplementedError

    @staticmethod
    def _zeros_whole_rows(mask: Optional[torch.Tensor]) -> bool:
        """Hidden keys of a row with a visible key get exactly 0 (their score, at most
        -1e6, lies far below the threshold); a row whose keys are *all* hidden would be
        spread over them and is zeroed.  On CPU the small mask is checked first, so the
        full-size fill runs only when such a row exists; on a GPU that check would stop the
        stream (a host sync per call) and the fill is cheap."""
        return mask is not None and (mask.device.type != "cpu" or hides_a_whole_row(mask))

    def forward(self, scores, mask: Optional[torch.Tensor]):
        if mask is not None:
            scores = scores.masked_fill(mask, ENTMAX_MASK_VALUE)
        weights = self.mapping(scores)
        if self._zeros_whole_rows(mask):
            weights = weights.masked_fill(mask, 0.0)
        return weights

    def hiding_score(self, dtype):
        """-1e6 (:data:`ENTMAX_MASK_VALUE`; float32 / float64 scores only: not a half
        number): a hidden score s - 1e6 lies as far below the threshold as -1e6 does, so a
        row with a visible key has the same support, threshold and weights."""
        return ENTMAX_MASK_VALUE if dtype in (torch.float32, torch.float64) else None

    def weights_of_hiding_scores(self, scores, hidden, heads):
        weights = self.mapping(scores)
        if self._zeros_whole_rows(hidden):
            shape = weights.shape
            weights = weights.view(shape[0] // heads, heads, *shape[1:]).masked_fill(hidden, 0.0).view(shape)
        return weights


@register_activation("sparsemax")
class Sparsemax(_EntmaxFamily):
    """Sparsemax (Martins & Astudillo 2016), exact sort-based algorithm of the entmax package."""

    def mapping(self, scores):
        # the package's algorithm op for op, fewer dispatched ops (.sparsemax_lastdim)
        from .sparsemax_lastdim import sparsemax_last_dim

        return sparsemax_last_dim(scores)


@register_activation("entmax15")
class Entmax15(_EntmaxFamily):
    """1.5-entmax (Peters et al. 2019), exact sort-based algorithm of the entmax package."""

    def mapping(self, scores):
        # the package's algorithm op for op, fewer dispatched ops (.entmax15_lastdim)
        from .entmax15_lastdim import entmax15_last_dim

        return entmax15_last_dim(scores)


@register_activation("entmax_bisect")
class EntmaxBisect(_EntmaxFamily):
    """alpha-entmax by bisection (entmax package), alpha fixed or learned per head.

    Learned alpha follows Correia et al. (2019), "Adaptively Sparse Transformers":
    alpha_h = 1 + sigmoid(a_h) in (1, 2), one scalar per head, with a_h initialised so
    that alpha_h starts at ``--entmax-alpha`` (default 1.5).
    """

    def __init__(self, num_heads, config: ActivationConfig = ActivationConfig()):
        super().__init__(num_heads, config)
        alpha = float(config.entmax_alpha)
        self.n_iter = int(config.entmax_bisect_iters)
        self.learned = bool(config.entmax_alpha_learned)
        if self.learned:
            if not 1.0 < alpha < 2.0:
                raise ValueError(f"--entmax-alpha must be in (1, 2) when learned per head, got {alpha}")
            logit = torch.logit(torch.tensor(alpha - 1.0))
            self.alpha_logit = nn.Parameter(torch.full((num_heads,), float(logit)))
        else:
            if alpha <= 1.0:
                raise ValueError(f"--entmax-alpha must be > 1 for entmax_bisect (use softmax for 1), got {alpha}")
            self.register_buffer("fixed_alpha", torch.tensor(alpha), persistent=False)

    def alpha(self):
        """Per-head alpha, shape (heads,) (learned) or a scalar tensor (fixed)."""
        if self.learned:
            return 1.0 + torch.sigmoid(self.alpha_logit.float())
        return self.fixed_alpha

    def hiding_score(self, dtype):
        """None with a learned alpha: its per-head alpha needs the (bsz, heads, tgt, src)
        scores of :meth:`forward`, not the call plan's (bsz * heads, tgt, src)."""
        return None if self.learned else super().hiding_score(dtype)

    def mapping(self, scores):
        alpha = self.alpha().to(scores)
        if alpha.dim() == 1:
            alpha = alpha.view(1, -1, 1, 1).expand(scores.size(0), -1, scores.size(2), 1)
        return _entmax_package().entmax_bisect(scores, alpha=alpha, dim=-1, n_iter=self.n_iter)

    def extra_repr(self):
        return f"entmax_bisect, learned_alpha={self.learned}, n_iter={self.n_iter}"
