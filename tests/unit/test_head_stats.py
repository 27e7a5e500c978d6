"""Entropy, top-p% score sums and head JS divergence against numbers computed by hand
(plain math on Python floats)."""

import math

import pytest
import torch

from fairseq_sparse_attn.analysis.head_stats import (
    RowAverage,
    head_js_divergence,
    mean_entropy,
    relu_head_js_divergence,
    renormalize,
    row_entropy,
    top_count,
    top_p_score_sum,
)
from fairseq_sparse_attn.analysis.recording import record_attention

from helpers import build_model, random_batch


def H(ps):
    """Entropy of a list of probabilities, natural log, 0 log 0 = 0."""
    return -sum(p * math.log(p) for p in ps if p > 0)


CAUSAL = torch.triu(torch.ones(3, 3, dtype=torch.bool), 1).view(1, 1, 3, 3)


# ------------------------------------------------------------------ entropy


def test_entropy_of_row_normalized_weights_excludes_null_padding_and_masked():
    # one sentence, 2 heads, 3 queries (the last is padding), causal mask
    w = torch.tensor(
        [[[[2.0, 0.0, 0.0], [1.0, 3.0, 0.0], [5.0, 5.0, 5.0]], [[0.0, 7.0, 7.0], [0.5, 0.5, 9.0], [1.0, 0.0, 0.0]]]]
    )
    pad = torch.tensor([[False, False, True]])
    # head 0: q0 -> (1) H=0 ; q1 -> (1/4, 3/4) ; q2 padding
    # head 1: q0 sees only k0 = 0 -> null, excluded ; q1 -> (1/2, 1/2), k2 masked
    expected = [0.0, H([0.25, 0.75]), H([0.5, 0.5])]
    got = mean_entropy(w, CAUSAL, pad)
    assert got.rows == 3
    assert got.value == pytest.approx(sum(expected) / 3, abs=1e-12)
    entropy, counted = row_entropy(w, CAUSAL, pad)
    assert counted.tolist() == [[[True, True, False], [False, True, False]]]
    assert entropy[0, 0, 1].item() == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))


def test_entropy_of_uniform_rows_is_log_n_and_batches_pool():
    w = torch.full((1, 1, 1, 4), 0.3)
    assert mean_entropy(w).value == pytest.approx(math.log(4))
    pooled = mean_entropy(w) + mean_entropy(torch.tensor([[[[1.0, 0.0]]]]))
    assert pooled == RowAverage(pytest.approx(math.log(4)), 2)
    assert pooled.value == pytest.approx(math.log(4) / 2)
    assert math.isnan(mean_entropy(torch.zeros(1, 1, 2, 2)).value)  # only null rows


def test_bad_weights_are_refused():
    with pytest.raises(ValueError, match="non-negative"):
        mean_entropy(torch.tensor([[[[0.5, -0.1]]]]))
    with pytest.raises(ValueError, match=r"\(bsz, heads, tgt, src\)"):
        mean_entropy(torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"query_padding must be \(bsz, tgt\)"):
        mean_entropy(torch.ones(1, 1, 2, 2), query_padding=torch.zeros(2, 1, dtype=torch.bool))


# ------------------------------------------------------------------ top-p


def test_top_p_share_by_hand():
    w = torch.tensor(
        [
            [
                [
                    [0.5, 0.1, 0.3, 0.1, 0.0],
                    [0.2, 0.6, 7.0, 7.0, 7.0],  # keys 2.. masked: n = 2
                    [0.0, 0.0, 0.0, 0.0, 0.0],
                ]
            ]
        ]
    )  # null row: excluded
    mask = torch.tensor([[False] * 5, [False, False, True, True, True], [False] * 5]).view(1, 1, 3, 5)
    # p = 0.2: row 0 k = ceil(1.0) = 1 -> 0.5 / 1.0 ; row 1 k = ceil(0.4) = 1 -> 0.6 / 0.8
    got = top_p_score_sum(w, 0.2, mask)
    assert got.rows == 2 and got.value == pytest.approx((0.5 + 0.75) / 2)
    # p = 0.5: row 0 k = ceil(2.5) = 3 -> 0.9 / 1.0 ; row 1 k = ceil(1.0) = 1 -> 0.75
    assert top_p_score_sum(w, 0.5, mask).value == pytest.approx((0.9 + 0.75) / 2)
    # p = 1: every visible weight
    assert top_p_score_sum(w, 1.0, mask).value == pytest.approx(1.0)


def test_top_count_is_an_exact_ceiling():
    n = torch.tensor([100, 1000, 3, 1])
    assert top_count(0.07, n).tolist() == [7, 70, 1, 1]  # 0.07 * 100 = 7.000000000000001 in floats
    assert top_count(0.015, n).tolist() == [2, 15, 1, 1]
    with pytest.raises(ValueError, match="0.002"):
        top_count(1.5, n)


# ------------------------------------------------------------------ head diversity


def test_js_of_distributions_by_hand():
    # 1 sentence, 2 heads, 4 queries (last is padding), 2 keys
    probs = torch.tensor(
        [[[[1.0, 0.0], [0.5, 0.5], [0.9, 0.1], [0.3, 0.7]], [[0.0, 1.0], [0.5, 0.5], [0.5, 0.5], [0.3, 0.7]]]],
        dtype=torch.float64,
    )
    pad = torch.tensor([[False, False, False, True]])
    q0 = H([0.5, 0.5]) - (0 + 0) / 2  # = log 2
    q1 = H([0.5, 0.5]) - (H([0.5, 0.5]) + H([0.5, 0.5])) / 2  # = 0
    q2 = H([0.7, 0.3]) - (H([0.9, 0.1]) + H([0.5, 0.5])) / 2
    got = head_js_divergence(probs, query_padding=pad)
    assert got.rows == 3
    assert got.value == pytest.approx((q0 + q1 + q2) / 3, abs=1e-12)
    assert q0 == pytest.approx(math.log(2))


def test_js_refuses_rows_that_are_not_distributions():
    relu = torch.tensor([[[[0.0, 2.0]], [[1.0, 0.0]]]])
    with pytest.raises(ValueError, match=r"head 0, query 0\) sums to 2.*relu_head_js_divergence"):
        head_js_divergence(relu)


def softmax_visible(alpha, tau, mode):
    """Softmax over the listed (visible) keys of alpha**tau ("power") or alpha/tau."""
    scores = [a**tau if mode == "power" else a / tau for a in alpha]
    e = [math.exp(s) for s in scores]
    return [x / sum(e) for x in e]


@pytest.mark.parametrize("mode", ["power", "divide"])
@pytest.mark.parametrize("tau", [1.0, 0.5, 0.25, 0.1])
def test_relu_js_with_softmax_renormalization_and_null_slot(tau, mode):
    # 1 sentence, 2 heads, 3 queries, 3 keys; key 2 is masked for query 1
    w = torch.tensor(
        [[[[1.0, 0.0, 2.0], [1.0, 1.0, 5.0], [0.0, 0.0, 0.0]], [[0.0, 0.0, 0.0], [0.0, 3.0, 7.0], [0.0, 0.0, 0.0]]]]
    )
    mask = torch.tensor([[False] * 3, [False, False, True], [False] * 3]).view(1, 1, 3, 3)
    # slots: keys 0, 1, 2, then the null slot
    p00 = softmax_visible([1.0, 0.0, 2.0], tau, mode) + [0.0]  # alpha = 0 still gets exp(0)
    p10 = [0.0, 0.0, 0.0, 1.0]  # null row: one-hot on the null slot
    p01 = softmax_visible([1.0, 1.0], tau, mode) + [0.0, 0.0]  # masked key 2 gets nothing
    p11 = softmax_visible([0.0, 3.0], tau, mode) + [0.0, 0.0]
    expected = []
    for a, b in [(p00, p10), (p01, p11), ([0, 0, 0, 1.0], [0, 0, 0, 1.0])]:
        mix = [(x + y) / 2 for x, y in zip(a, b)]
        expected.append(H(mix) - (H(a) + H(b)) / 2)
    assert expected[2] == 0  # both heads null: JS 0, still counted
    got = relu_head_js_divergence(w, tau, mask, mode=mode)
    assert got.rows == 3
    assert got.value == pytest.approx(sum(expected) / 3, abs=1e-12)
    p = renormalize(w, tau, mask, mode=mode)
    assert p[0, 0, 0].tolist() == pytest.approx(p00)
    assert p[0, 1, 0].tolist() == [0.0, 0.0, 0.0, 1.0]


def test_power_is_the_default_and_matches_hand_numbers():
    # alpha = (0, 1, 4), tau = 0.5: alpha**tau = (0, 1, 2) -> (1, e, e^2) / (1 + e + e^2);
    # the zero key keeps score 0 and still gets e^0 / Z
    w = torch.tensor([[[[0.0, 1.0, 4.0]]]])
    z = 1 + math.e + math.e**2
    want = [1 / z, math.e / z, math.e**2 / z, 0.0]
    assert renormalize(w, 0.5).tolist()[0][0][0] == pytest.approx(want, abs=1e-15)
    # alpha = (4, 9), tau = 0.5: scores (2, 3)
    two = renormalize(torch.tensor([[[[4.0, 9.0]]]]), 0.5)[0, 0, 0, :2].tolist()
    assert two == pytest.approx([1 / (1 + math.e), math.e / (1 + math.e)], abs=1e-15)
    # the default of relu_head_js_divergence is the power reading too: 2 heads, 1 query
    w2 = torch.tensor([[[[0.0, 4.0]], [[9.0, 0.0]]]])
    a = [1 / (1 + math.e**2), math.e**2 / (1 + math.e**2)]  # (0, 4) -> (0, 2)
    b = [math.e**3 / (1 + math.e**3), 1 / (1 + math.e**3)]  # (9, 0) -> (3, 0)
    js = H([(x + y) / 2 for x, y in zip(a, b)]) - (H(a) + H(b)) / 2
    assert relu_head_js_divergence(w2, 0.5).value == pytest.approx(js, abs=1e-12)


def test_smaller_power_temperature_smooths_and_divide_sharpens():
    # alpha = (1, 4, 16): power scores 1, 4, 16 / 1, 2, 4 / 1, 1.41, 2 / ... -> entropy rises
    w = torch.tensor([[[[1.0, 4.0, 16.0]]]])
    power = [H(renormalize(w, tau)[0, 0, 0].tolist()) for tau in (1.0, 0.5, 0.25, 0.1)]
    assert power == sorted(power) and power[-1] < math.log(3)
    divide = [H(renormalize(w, tau, mode="divide")[0, 0, 0].tolist()) for tau in (1.0, 0.5, 0.25)]
    assert divide == sorted(divide, reverse=True)
    # divide: softmax(alpha / tau), tau = 0.5 on (1, 2)
    sharp = renormalize(torch.tensor([[[[1.0, 2.0]]]]), 0.5, None, mode="divide")[0, 0, 0, :2].tolist()
    assert sharp == pytest.approx([1 / (1 + math.exp(2)), math.exp(2) / (1 + math.exp(2))])
    # ... and softmax(tau * alpha) is divide with temperature 1 / tau
    smooth = renormalize(torch.tensor([[[[1.0, 2.0]]]]), 2.0, None, mode="divide")[0, 0, 0, :2].tolist()
    assert smooth == pytest.approx([1 / (1 + math.exp(0.5)), math.exp(0.5) / (1 + math.exp(0.5))])


def test_renormalize_refuses_bad_arguments():
    w = torch.tensor([[[[1.0, 2.0]]]])
    with pytest.raises(ValueError, match="temperature must be > 0"):
        renormalize(w, 0.0)
    with pytest.raises(ValueError, match=r"mode must be one of \('power', 'divide'\).*'square'"):
        renormalize(w, 0.5, mode="square")
    signed = torch.tensor([[[[1.0, -0.5, -3.0]]]])
    mask = torch.tensor([False, False, True]).view(1, 1, 1, 3)  # key 2 hidden: its sign is ignored
    with pytest.raises(ValueError, match=r"non-negative.*query 0, key 1\) is -0.5.*mode='divide'"):
        renormalize(signed, 0.5, mask)
    assert renormalize(signed, 0.5, mask, mode="divide")[0, 0, 0].tolist() == pytest.approx(
        [math.exp(2) / (math.exp(2) + math.exp(-1)), math.exp(-1) / (math.exp(2) + math.exp(-1)), 0.0, 0.0]
    )


# ------------------------------------------------------------------ recorded attention


def test_recorded_softmax_attention_gives_bounded_statistics():
    """The recorder's (weights, mask) plug straight in: softmax rows are distributions,
    so JS lies in [0, log H] and the entropy in [0, log n]."""
    model, d = build_model()
    src, lengths, prev = random_batch(d)
    seen = []

    def callback(site, weights, mask=None, **_):
        seen.append((site, weights, mask))

    with torch.no_grad(), record_attention(model, callback):
        model(src, lengths, prev)
    tgt_pad = prev.eq(d.pad())
    src_pad = src.eq(d.pad())
    for site, weights, mask in seen:
        qpad = src_pad if site.kind == "encoder_self" else tgt_pad
        js = head_js_divergence(weights, mask, qpad)
        assert js.rows == int((~qpad).sum())
        assert 0 <= js.value <= math.log(site.num_heads) + 1e-9
        ent = mean_entropy(weights, mask, qpad)
        assert 0 <= ent.value <= math.log(weights.shape[-1]) + 1e-9
        assert top_p_score_sum(weights, 1.0, mask, qpad).value == pytest.approx(1.0)
