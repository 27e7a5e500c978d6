"""The formulas of the norm-based analysis (Kobayashi et al. 2020): the decomposition of
a multi-head attention module's output into per-head, per-key vectors ``f^h(x_j)``, and
the norms ‖f^h(x_j)‖, ‖α^h_{ij} f^h(x_j)‖ and ‖Σ_h α^h_{ij} f^h(x_j)‖ (see :mod:`.` for
the equations and what makes a module decomposable)."""

from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence

import torch

from ...attention.config import ATTENTION_KINDS as KINDS
from ...attention.config import config_of


def value_term_providers(module) -> List[str]:
    """Names of the module's bias providers that add a term of their own to the heads'
    weighted values (Rel_Pos with ``--encoder-rel-pos-values``)."""
    biases = getattr(module, "biases", None) or {}
    return [name for name, p in biases.items() if getattr(p, "has_value_term", False)]


def pruned_per_sentence(module) -> bool:
    """True when the module zeroes redundant heads per sentence (RHE with pruning)."""
    rhe = getattr(module, "rhe", None)
    return rhe is not None and bool(getattr(rhe, "prune", False))


def check_decomposable(module, allow_output_norm: bool = False) -> None:
    """Raise unless ``Σ_h α_h f_h`` (+ b^O) is the module's output, or the caller accepts
    norms of pre-norm vectors (``allow_output_norm=True``).

    * An output norm on the concatenated heads (ReLA): refused unless
      ``allow_output_norm``.
    * A value term of a bias provider (Rel_Pos values, Shaw et al. Eq. 3:
      ``z_i = Σ_j α_ij (v_j + a^V_{j−i})``): always refused.  The vector a key
      contributes then depends on the query (``f_i(x_j) = (v_j + a^V_{j−i}) W^O``), so
      there is no per-key ``f(x_j)`` as Kobayashi et al. define it.
    * RHE pruning (heads zeroed per sentence) is decomposable: :class:`NormRecorder`
      leaves each sentence's pruned heads out of the layer norm (read from the module's
      identifier in the same forward, returned in the attention's intermediates as ``redundant``).
    """
    for attr in ("out_proj", "num_heads", "head_dim", "embed_dim"):
        if not hasattr(module, attr):
            raise ValueError(
                f"norm analysis needs a multi-head attention module with "
                f"{attr!r} (fairseq MultiheadAttention); got {type(module).__name__}"
            )
    extra = value_term_providers(module)
    if extra:
        raise ValueError(
            f"attention module ({config_of(module).kind}) adds the value term of "
            f"{', '.join(extra)} (--encoder-rel-pos-values: z_i = Σ_j α_ij (v_j + a^V_(j-i))) to "
            f"its heads, so the vector each key contributes depends on the query and the "
            f"output is not Σ_h α_h f_h(x_j) with a per-key f (Kobayashi et al. Eq. 10): the "
            f"norm-based analysis is not defined for it (weight-based analyses are)"
        )
    norm = config_of(module).output_norm.name
    if norm != "none" and not allow_output_norm:
        raise ValueError(
            f"attention module ({config_of(module).kind}) applies the output norm "
            f"{norm!r} to the concatenated heads before out_proj, so its output is not "
            f"Σ_h α_h f_h(x) (Kobayashi et al. Eq. 10) and the norms would not be those of "
            f"its summands; pass allow_output_norm=True (--allow-output-norm) to get the norms "
            f"of the pre-norm vectors anyway"
        )


def model_decomposition(model, kinds: Iterable[str] = KINDS, allow_output_norm: bool = False) -> bool:
    """:func:`check_decomposable` for every attention module of ``kinds``; returns True
    when the decomposition is exact (no output norm), False when only ``allow_output_norm``
    let it through."""
    exact = True
    kinds = tuple(kinds)
    for module in model.attention_modules():
        if module.config.kind in kinds:
            check_decomposable(module, allow_output_norm)
            exact = exact and module.config.output_norm.name == "none"
    return exact


def head_output_blocks(module) -> torch.Tensor:
    """``W^{O,h}`` for every head, ``(heads, head_dim, embed)``: the transposed block of
    ``out_proj.weight`` columns ``h·d_h .. (h+1)·d_h - 1``."""
    weight = module.out_proj.weight  # (embed_out, embed_in = heads * head_dim)
    heads, d = module.num_heads, module.head_dim
    if weight.shape[1] != heads * d:
        raise ValueError(f"out_proj takes {weight.shape[1]} inputs, expected heads x head_dim = {heads} x {d}")
    return weight.detach().view(weight.shape[0], heads, d).permute(1, 2, 0)


def value_transforms(module, values: torch.Tensor, allow_output_norm: bool = False) -> torch.Tensor:
    """Kobayashi et al. Eq. 9: ``f^h(x_j) = (x_j W^{V,h} + b^{V,h}) W^{O,h}``, b^O excluded.

    ``values`` are the recorder's value vectors ``x W^V + b^V``, ``(bsz*heads, src,
    head_dim)`` (head-major within a sentence, as fairseq lays them out).  Returns
    ``(bsz, heads, src, embed)`` float32 (computed in float32 at least, whatever the model
    dtype).  Every head gets its ``f``, masked heads included (see the module docstring).
    """
    check_decomposable(module, allow_output_norm)
    heads, d = module.num_heads, module.head_dim
    if values.dim() != 3 or values.shape[0] % heads or values.shape[2] != d:
        raise ValueError(
            f"values must be (bsz*heads, src, head_dim) with heads={heads}, "
            f"head_dim={d}; got shape {tuple(values.shape)}"
        )
    v = values.detach().view(values.shape[0] // heads, heads, values.shape[1], d)
    dtype = torch.promote_types(v.dtype, torch.float32)
    blocks = head_output_blocks(module).to(dtype)
    return torch.einsum("bhsd,hde->bhse", v.to(dtype), blocks)


@dataclass
class NormStatistics:
    """``transformed``: ‖f^h(x_j)‖ ``(bsz, heads, src)``; ``head``: ‖α^h_{ij} f^h(x_j)‖
    ``(bsz, heads, tgt, src)``; ``layer``: ‖Σ_h α^h_{ij} f^h(x_j)‖ ``(bsz, tgt, src)``.
    float64."""

    transformed: torch.Tensor
    head: torch.Tensor
    layer: torch.Tensor


def norm_statistics(
    weights: torch.Tensor, f: torch.Tensor, masked_heads: Sequence[int] = (), head_keep: Optional[torch.Tensor] = None
) -> NormStatistics:
    """The three norms of the norm-based analysis for one attention module and batch.

    ``weights`` ``(bsz, heads, tgt, src)`` (α, invisible keys 0); ``f`` ``(bsz', heads,
    src, embed)`` from :func:`value_transforms`, ``bsz'`` dividing ``bsz`` (one key copy
    per beam group is repeated).  ``masked_heads`` are left out of the layer-level sum
    (the module zeroes their output); their per-head norms are still given.  ``head_keep``
    ``(bsz, heads)`` bool does the same per sentence (False = pruned in that sentence,
    RHE pruning).

    The layer norm is computed without materializing the ``(bsz, tgt, src, embed)`` sum:
    ``‖Σ_h α_h f_h‖² = Σ_{h,g} α_h α_g ⟨f_h, f_g⟩`` with the per-key Gram matrix of the
    heads' vectors, in float64 (rounding can make a zero norm a tiny negative square,
    clamped to 0).
    """
    if weights.dim() != 4 or f.dim() != 4:
        raise ValueError(
            f"weights must be (bsz, heads, tgt, src) and f (bsz, heads, src, "
            f"embed); got {tuple(weights.shape)} and {tuple(f.shape)}"
        )
    bsz, heads, tgt, src = weights.shape
    fb, fh, fs, _ = f.shape
    if fh != heads or fs != src or bsz % fb:
        raise ValueError(
            f"f {tuple(f.shape)} does not match weights {tuple(weights.shape)}: "
            f"need the same heads and src, and a batch dividing {bsz}"
        )
    if torch.isnan(weights).any():
        raise ValueError("attention weights contain NaN")
    f = f.double()
    if fb != bsz:
        f = f.repeat_interleave(bsz // fb, dim=0)
    alpha = weights.double()
    transformed = torch.linalg.vector_norm(f, dim=-1)  # (bsz, heads, src)
    head = alpha.abs() * transformed.unsqueeze(2)
    keep = torch.ones(heads, dtype=torch.float64, device=alpha.device)
    for h in masked_heads:
        if not 0 <= int(h) < heads:
            raise ValueError(f"masked head {h} out of range for {heads} heads")
        keep[int(h)] = 0.0
    a = alpha * keep.view(1, heads, 1, 1)
    if head_keep is not None:
        if tuple(head_keep.shape) != (bsz, heads):
            raise ValueError(f"head_keep must be (bsz, heads) = ({bsz}, {heads}), got {tuple(head_keep.shape)}")
        a = a * head_keep.to(device=a.device, dtype=a.dtype).view(bsz, heads, 1, 1)
    gram = torch.einsum("bhse,bgse->bshg", f, f)  # (bsz, src, heads, heads)
    ag = torch.einsum("bhts,bshg->bgts", a, gram)
    layer = (ag * a).sum(dim=1).clamp(min=0).sqrt()
    return NormStatistics(transformed, head, layer)
