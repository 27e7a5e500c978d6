"""``materialized``: scores and weights as full (bsz, H, tgt, src) tensors; every feature
(the reference backend; it returns the weights).  The plan's inference call
(:mod:`..call_plan`) does these operations (:func:`_scores`, activation, :func:`_value_mix`)
directly for calls that need nothing else."""

import torch
from torch import Tensor

from ..core import AttendSpec, AttentionInputs, Backend, Call, Capabilities, register_backend
from ..intermediates import Intermediates
from ..masks import hide_more, real_keys, visible_key_counts


def _scores(q: Tensor, k: Tensor, groups: int) -> Tensor:
    """(bsz, H, tgt, src) float32 scores q kᵀ."""
    bsz, heads, tgt, d = q.shape
    kv_bsz, _, src, _ = k.shape
    if groups > 1:  # one key copy per beam group
        scores = torch.einsum("bxhtd,bhsd->bxhts", q.view(kv_bsz, groups, heads, tgt, d), k)
    else:
        scores = torch.bmm(q.reshape(bsz * heads, tgt, d), k.reshape(kv_bsz * heads, src, d).transpose(1, 2))
    return scores.reshape(bsz, heads, tgt, src).float()


def _value_mix(probs: Tensor, v: Tensor, groups: int) -> Tensor:
    """(bsz, H, tgt, d) = probs · v per head."""
    bsz, heads, tgt, src = probs.shape
    kv_bsz, _, _, d = v.shape
    if groups > 1:
        out = torch.einsum("bxhts,bhsd->bxhtd", probs.view(kv_bsz, groups, heads, tgt, src), v)
        return out.reshape(bsz, heads, tgt, d)
    return torch.bmm(probs.view(bsz * heads, tgt, src), v.reshape(kv_bsz * heads, src, d)).view(bsz, heads, tgt, d)


def _kept_value_mix(probs: Tensor, v: Tensor, groups: int, keep: Tensor) -> Tensor:
    """(bsz, H, tgt, d): probs · v for the (sentence, head) pairs where ``keep`` (bsz, H)
    is True, exact zeros elsewhere; the other pairs are not computed."""
    bsz, heads, tgt, _ = probs.shape
    if bool(keep.all()):
        return _value_mix(probs, v, groups)
    out = probs.new_zeros(bsz, heads, tgt, v.size(-1))
    if not bool(keep.any()):
        return out
    b, h = keep.nonzero(as_tuple=True)
    return out.index_put((b, h), torch.bmm(probs[b, h], v[b // groups, h]))


def _biased(q, scores, inputs, spec, valid):
    """Weights with the bias providers and RHE (encoder self-attention): (weights,
    redundant or None, keep or None, value_term or None, skipped).  ``skipped``: RHE
    pruning skips the pruned heads (:meth:`~..heads.RedundantHeads.skips_pruned`): no
    enhanced weights, no value term, and ``keep`` says which (sentence, head) pairs the
    caller must compute at all."""
    from ..biases import BiasContext

    heads = spec.heads
    rhe = heads.rhe
    skip = rhe is not None and rhe.skips_pruned(spec.dropout.training, "weights" in inputs.collect)
    # with pruning, only the pruned (redundant) heads would use the biased attention
    providers = () if skip else spec.biases
    needs = {n for p in providers for n in p.needs} | ({"src_dep"} if rhe is not None else set())
    ctx = BiasContext.build(valid, {"src_dep": inputs.src_dep, "src_rp": inputs.src_rp}, sorted(needs))
    mask = inputs.hidden
    if skip:
        standard = spec.activation(scores, mask)
        redundant = rhe.identify(standard, inputs, valid)
        return standard, redundant, ~redundant, None, True
    enhanced = None
    if spec.biases:
        biased, hidden = scores, mask
        for provider in spec.biases:
            bias, hide = provider(q, ctx)
            if bias is not None:
                biased = biased + bias
            hidden = hide_more(hidden, hide)
        enhanced = spec.activation(biased, hidden)
    redundant = keep = None
    if rhe is None:
        weights = enhanced
    else:
        standard = spec.activation(scores, mask)
        weights, redundant, keep = rhe.replace(standard, enhanced, inputs, valid)
    value_term = None
    with_values = [p for p in spec.biases if p.has_value_term]
    if with_values:

        def value_term(probs):
            extra = sum(p.value_term(probs, ctx) for p in with_values)
            if redundant is None:
                return extra
            return extra * redundant.view(*redundant.shape, 1, 1).to(extra.dtype)

    return weights, redundant, keep, value_term, False


def _row_sums(weights, scores_like, mask):
    from ..scaled_relu import row_sums

    wsum, wlogw = row_sums(weights)
    return wsum, wlogw, visible_key_counts(scores_like, mask)


def _dropout(spec: AttendSpec, call: Call, weights: Tensor) -> Tensor:
    """``spec.dropout(weights)``, skipping the module call where it is the identity
    (:func:`applies_dropout`)."""
    return spec.dropout(weights) if call.dropout else weights


def materialized(q, k, v, inputs: AttentionInputs, spec: AttendSpec, call: Call):
    """Scores and weights as full (bsz, H, tgt, src) tensors: every feature."""
    heads = spec.heads
    groups = inputs.kv_groups
    kv_bsz, num_heads, src_len, _ = v.shape
    bsz = kv_bsz * groups
    mask = inputs.hidden
    fixed = learned = scores = redundant = keep = value_term = None
    skipped = False  # RHE pruning: only the kept (sentence, head) pairs are mixed with v
    if heads.fixed is not None:
        fixed = heads.fixed.weights(inputs, bsz, src_len, v.device)
    if heads.num_learned:
        scores = _scores(q, k, groups)
        if inputs.score_bias is not None:
            scores = scores + inputs.score_bias
        if spec.biased:
            valid = real_keys(inputs.key_padding, bsz, src_len, v.device)
            learned, redundant, keep, value_term, skipped = _biased(q, scores, inputs, spec, valid)
        else:
            learned = spec.activation(scores, mask)  # float32 (bsz, H_learned, tgt, src)

    if fixed is None:
        weights = learned
        probs = _dropout(spec, call, learned.type_as(v))  # type: ignore[union-attr]  # no fixed head: all learned
    else:
        # attention dropout regularizes learned attention only; fixed heads stay exact
        weights = fixed if learned is None else torch.cat([fixed, learned], dim=1)
        probs = fixed.type_as(v)
        if learned is not None:
            probs = torch.cat([probs, _dropout(spec, call, learned.type_as(v))], dim=1)
    if skipped:
        # dropout above ran on every pair (the same random draws as without skipping)
        if heads.masked is not None:
            keep = keep & heads.masked.keep(torch.bool, keep.device).view(1, num_heads)  # type: ignore[operator, union-attr]
        out = _kept_value_mix(probs, v, groups, keep)  # type: ignore[arg-type]  # skipped: _biased set keep
    else:
        if heads.masked is not None:
            probs = probs * heads.masked.keep(probs.dtype, probs.device)
        if keep is not None:
            probs = probs * keep.view(bsz, num_heads, 1, 1).to(probs.dtype)
        out = _value_mix(probs, v, groups)
    if value_term is not None:
        out = out + value_term(probs).to(out.dtype)

    inter = Intermediates(backend="materialized", redundant=redundant)
    if "weights" in inputs.collect:
        inter.weights = weights
        inter.values = v.reshape(kv_bsz * num_heads, src_len, v.size(-1))
        inter.mask = mask
    if call.row_sums and learned is not None:
        inter.row_sums = _row_sums(learned, scores, mask)
    return out, inter


register_backend(
    Backend(
        "materialized",
        materialized,
        Capabilities(
            returns_weights=True,
            dropout=True,
            score_bias=True,
            bias_providers=True,
            given_heads=True,
            head_selection=True,
            row_sums=True,
        ),
        priority=100,
    )
)
