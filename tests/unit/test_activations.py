"""Each activation against an independent computation (formula written plainly here, or
the entmax package applied to the visible keys only)."""

import math

import entmax
import pytest
import torch

from fairseq_sparse_attn.attention import activation_names, build_activation
from fairseq_sparse_attn.attention.config import ActivationConfig

BSZ, HEADS, TGT, SRC = 2, 3, 4, 6


def scores_and_mask(seed=0):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(BSZ, HEADS, TGT, SRC, generator=g) * 2
    mask = torch.zeros(BSZ, 1, TGT, SRC, dtype=torch.bool)
    mask[1, :, :, 4:] = True  # key padding of sentence 1
    causal = torch.triu(torch.ones(TGT, SRC, dtype=torch.bool), diagonal=3)
    mask = mask | causal.view(1, 1, TGT, SRC)
    return scores, mask


def visible(mask, b, t):
    return (~mask[b, 0, t]).nonzero().flatten()


def plain_row(name, row, alpha=None):
    """The mapping of one row of visible scores, written without the plugin."""
    if name == "softmax":
        e = [math.exp(x) for x in row.tolist()]
        return torch.tensor([x / sum(e) for x in e])
    if name == "relu":
        return torch.tensor([max(0.0, x) for x in row.tolist()])
    if name == "gelu":
        return torch.tensor([0.5 * x * (1 + math.erf(x / math.sqrt(2))) for x in row.tolist()])
    if name == "leaky_relu":
        return torch.tensor([x if x > 0 else 0.01 * x for x in row.tolist()])
    if name == "sparsemax":
        return entmax.sparsemax(row, dim=-1)
    if name == "entmax15":
        return entmax.entmax15(row, dim=-1)
    if name == "entmax_bisect":
        return entmax.entmax_bisect(row, alpha=alpha, dim=-1, n_iter=50)
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["softmax", "relu", "gelu", "leaky_relu", "sparsemax", "entmax15", "entmax_bisect"])
def test_activation_matches_independent_computation_with_masks(name):
    act = build_activation(name, HEADS)
    scores, mask = scores_and_mask()
    weights = act(scores, mask)
    assert weights.shape == scores.shape
    assert torch.all(weights.masked_select(mask.expand_as(weights)) == 0), "masked keys must be exactly 0"
    for b in range(BSZ):
        for h in range(HEADS):
            for t in range(TGT):
                idx = visible(mask, b, t)
                expected = plain_row(name, scores[b, h, t, idx], alpha=1.5)
                torch.testing.assert_close(weights[b, h, t, idx], expected, atol=1e-5, rtol=1e-5)


def test_sparsemax_and_entmax_are_sparse_and_normalized():
    scores, mask = scores_and_mask(3)
    for name in ("sparsemax", "entmax15", "entmax_bisect"):
        w = build_activation(name, HEADS)(scores * 3, mask)
        torch.testing.assert_close(w.sum(-1), torch.ones(BSZ, HEADS, TGT), atol=1e-4, rtol=0)
        assert (w[~mask.expand_as(w)] == 0).any(), f"{name} produced no zero among visible keys"


def test_entmax_bisect_alpha_2_is_sparsemax():
    config = ActivationConfig("entmax_bisect", entmax_alpha=2.0)
    scores, mask = scores_and_mask(5)
    w = build_activation(config, HEADS)(scores, mask)
    ref = build_activation("sparsemax", HEADS)(scores, mask)
    torch.testing.assert_close(w, ref, atol=1e-4, rtol=0)


def test_entmax_bisect_learned_alpha_per_head():
    act = build_activation(ActivationConfig("entmax_bisect", entmax_alpha=1.5, entmax_alpha_learned=True), HEADS)
    assert act.alpha_logit.shape == (HEADS,)
    torch.testing.assert_close(act.alpha(), torch.full((HEADS,), 1.5))
    with torch.no_grad():
        act.alpha_logit.copy_(torch.logit(torch.tensor([0.2, 0.5, 0.9])))
    scores, mask = scores_and_mask(7)
    scores.requires_grad_(True)
    w = act(scores, mask)
    alphas = [1.2, 1.5, 1.9]
    for h, a in enumerate(alphas):
        for t in range(TGT):
            idx = visible(mask, 0, t)
            expected = entmax.entmax_bisect(scores[0, h, t, idx].detach(), alpha=a, dim=-1)
            torch.testing.assert_close(w[0, h, t, idx].detach(), expected, atol=1e-5, rtol=1e-5)
    (w * torch.randn_like(w)).sum().backward()
    assert act.alpha_logit.grad is not None and torch.isfinite(act.alpha_logit.grad).all()
    assert act.alpha_logit.grad.abs().sum() > 0


def test_relu_null_row_is_all_zero_and_gradients_finite():
    act = build_activation("relu", HEADS)
    scores = -torch.rand(1, HEADS, 2, 5) - 0.1  # all negative: null attention
    scores.requires_grad_(True)
    w = act(scores, None)
    assert torch.all(w == 0)
    w.sum().backward()
    assert torch.isfinite(scores.grad).all()


def test_unknown_activation_lists_valid_names():
    with pytest.raises(ValueError) as e:
        build_activation("softmaxx", 2)
    for name in activation_names():
        assert name in str(e.value)


def test_entmax_bisect_rejects_bad_alpha():
    with pytest.raises(ValueError, match="entmax-alpha"):
        build_activation(ActivationConfig("entmax_bisect", entmax_alpha=1.0), 2)


@pytest.mark.parametrize("name", ["sparsemax", "entmax15", "entmax_bisect"])
def test_the_training_call_s_weights_equal_forward_s_with_a_fully_hidden_row(name):
    """The call plan's training call takes the weights from ``weights_of_hiding_scores``
    on scores whose hidden keys hold the hiding score: the same weights as ``forward`` on the
    scores and the mask, a row whose keys are all hidden included (all zeros, not spread
    over the hidden keys)."""
    act = build_activation(name, HEADS)
    scores, mask = scores_and_mask(4)
    mask = mask.clone()
    mask[1, :, 0] = True  # sentence 1, query 0: every key hidden
    fill = act.hiding_score(torch.float32)
    hiding = (scores + torch.zeros_like(scores).masked_fill(mask, fill)).view(BSZ * HEADS, TGT, SRC)
    weights = act.weights_of_hiding_scores(hiding, mask, HEADS).view(BSZ, HEADS, TGT, SRC)
    assert torch.all(weights[1, :, 0] == 0)
    torch.testing.assert_close(weights, act(scores, mask), atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", ["sparsemax", "entmax15", "entmax_bisect"])
def test_entmax_family_zeroes_hidden_keys_and_fully_hidden_rows(name):
    """Hidden keys get exactly 0 whatever their score (here far above the visible ones), and
    a row whose keys are all hidden gets all zeros (the package alone would spread it
    uniformly); the other rows are unchanged by the presence of such a row."""
    act = build_activation(name, HEADS)
    scores, mask = scores_and_mask(3)
    scores = scores.masked_fill(mask, 50.0)
    alone = act(scores, mask)
    assert torch.all(alone.masked_select(mask.expand_as(alone)) == 0)
    full = mask.clone()
    full[1] = True  # sentence 1: every key hidden
    weights = act(scores, full)
    assert torch.all(weights[1] == 0)
    torch.testing.assert_close(weights[0], alone[0], atol=0, rtol=0)
