"""Fixed encoder self-attention patterns (Raganato et al., 2020) against hand-written
matrices: every expected value below is written out by hand, not recomputed with the
module's formula."""

import pytest
import torch

from fairseq_sparse_attn.attention.fixed_patterns import (
    PATTERNS,
    SEVEN,
    batch_pattern_weights,
    pattern_matrix,
    word_ids_from_tokens,
    word_pattern_matrix,
)


def T(rows):
    return torch.tensor(rows, dtype=torch.float32)


def check(got, expected):
    assert got.dtype == torch.float32
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(got.sum(-1), torch.ones(got.shape[:-1]), rtol=0, atol=1e-6)


def onehots(cols, n):
    """Row i has a single 1 at column cols[i]."""
    return T([[1.0 if j == c else 0.0 for j in range(n)] for c in cols])


def test_names():
    assert PATTERNS == (
        "current", "previous", "next", "left_context", "right_context",
        "end_of_sentence", "start_of_sentence", "last_token",
    )
    assert SEVEN == PATTERNS[:7]


# ---------------------------------------------------------------------------- n = 1, 2


@pytest.mark.parametrize("name", PATTERNS)
def test_n1_every_pattern_is_one(name):
    check(pattern_matrix(name, 1), T([[1.0]]))


N2 = {
    "current": [[1, 0], [0, 1]],
    "previous": [[1, 0], [1, 0]],  # i=0 falls back to current
    "next": [[0, 1], [0, 1]],  # i=1 falls back to current
    "left_context": [[1, 0], [0, 1]],  # i<2: fallback everywhere
    "right_context": [[1, 0], [0, 1]],  # i>n-3=-1: fallback everywhere
    "end_of_sentence": [[1 / 9, 8 / 9], [1 / 9, 8 / 9]],  # 1^3, 2^3
    "start_of_sentence": [[8 / 9, 1 / 9], [8 / 9, 1 / 9]],
    "last_token": [[0, 1], [0, 1]],
}


@pytest.mark.parametrize("name", PATTERNS)
def test_n2(name):
    check(pattern_matrix(name, 2), T(N2[name]))


# ---------------------------------------------------------------------------- n = 5

N5 = {
    "current": [
        [1, 0, 0, 0, 0],
        [0, 1, 0, 0, 0],
        [0, 0, 1, 0, 0],
        [0, 0, 0, 1, 0],
        [0, 0, 0, 0, 1],
    ],
    "previous": [
        [1, 0, 0, 0, 0],  # fallback
        [1, 0, 0, 0, 0],
        [0, 1, 0, 0, 0],
        [0, 0, 1, 0, 0],
        [0, 0, 0, 1, 0],
    ],
    "next": [
        [0, 1, 0, 0, 0],
        [0, 0, 1, 0, 0],
        [0, 0, 0, 1, 0],
        [0, 0, 0, 0, 1],
        [0, 0, 0, 0, 1],  # fallback
    ],
    "left_context": [
        [1, 0, 0, 0, 0],  # fallback
        [0, 1, 0, 0, 0],  # fallback
        [1, 0, 0, 0, 0],
        [1 / 9, 8 / 9, 0, 0, 0],
        [1 / 36, 8 / 36, 27 / 36, 0, 0],
    ],
    "right_context": [
        [0, 0, 27 / 36, 8 / 36, 1 / 36],
        [0, 0, 0, 8 / 9, 1 / 9],
        [0, 0, 0, 0, 1],
        [0, 0, 0, 1, 0],  # fallback
        [0, 0, 0, 0, 1],  # fallback
    ],
    "end_of_sentence": [[1 / 225, 8 / 225, 27 / 225, 64 / 225, 125 / 225]] * 5,
    "start_of_sentence": [[125 / 225, 64 / 225, 27 / 225, 8 / 225, 1 / 225]] * 5,
    "last_token": [[0, 0, 0, 0, 1]] * 5,
}


@pytest.mark.parametrize("name", PATTERNS)
def test_n5(name):
    check(pattern_matrix(name, 5), T(N5[name]))


def test_context_rows_from_the_brief():
    left = pattern_matrix("left_context", 5)
    check(left[4], T([1 / 36, 8 / 36, 27 / 36, 0, 0]))
    right = pattern_matrix("right_context", 5)
    check(right[0], T([0, 0, 27 / 36, 8 / 36, 1 / 36]))
    # right_context grows toward the token: the nearest key i+2 has the largest weight
    assert right[0, 2] > right[0, 3] > right[0, 4]


def test_empty_sentence():
    for name in PATTERNS:
        assert pattern_matrix(name, 0).shape == (0, 0)


# ---------------------------------------------------------------------------- words

EXAMPLE = "a master of science fic@@ tion . </s>".split()
H = 0.5  # each of the two pieces of "fic@@ tion" under a one-hot word weight


def test_word_ids_from_tokens():
    assert word_ids_from_tokens("a master of science fic@@ tion .".split()) == [0, 1, 2, 3, 4, 4, 5]
    assert word_ids_from_tokens(EXAMPLE) == [0, 1, 2, 3, 4, 4, 5, 6]
    assert word_ids_from_tokens("un@@ believ@@ able".split()) == [0, 0, 0]
    # EOS is its own word even after a dangling continuation marker
    assert word_ids_from_tokens(["x@@", "</s>"]) == [0, 1]
    assert word_ids_from_tokens("a__ b c".split(), continuation="__") == [0, 0, 1]
    assert word_ids_from_tokens([]) == []


# tokens: 0 a, 1 master, 2 of, 3 science, 4 fic@@, 5 tion, 6 ., 7 </s>
# words:  0 a, 1 master, 2 of, 3 science, 4 fiction (tokens 4,5), 5 ., 6 </s>   (m = 7)
WORD_EXPECTED = {
    "current": [
        [1, 0, 0, 0, 0, 0, 0, 0],
        [0, 1, 0, 0, 0, 0, 0, 0],
        [0, 0, 1, 0, 0, 0, 0, 0],
        [0, 0, 0, 1, 0, 0, 0, 0],
        [0, 0, 0, 0, H, H, 0, 0],
        [0, 0, 0, 0, H, H, 0, 0],
        [0, 0, 0, 0, 0, 0, 1, 0],
        [0, 0, 0, 0, 0, 0, 0, 1],
    ],
    "previous": [
        [1, 0, 0, 0, 0, 0, 0, 0],  # word 0: fallback
        [1, 0, 0, 0, 0, 0, 0, 0],
        [0, 1, 0, 0, 0, 0, 0, 0],
        [0, 0, 1, 0, 0, 0, 0, 0],
        [0, 0, 0, 1, 0, 0, 0, 0],  # fic@@ -> science
        [0, 0, 0, 1, 0, 0, 0, 0],  # tion  -> science
        [0, 0, 0, 0, H, H, 0, 0],  # .     -> fiction
        [0, 0, 0, 0, 0, 0, 1, 0],
    ],
    "next": [
        [0, 1, 0, 0, 0, 0, 0, 0],
        [0, 0, 1, 0, 0, 0, 0, 0],
        [0, 0, 0, 1, 0, 0, 0, 0],
        [0, 0, 0, 0, H, H, 0, 0],  # science -> fiction
        [0, 0, 0, 0, 0, 0, 1, 0],  # fic@@ -> .
        [0, 0, 0, 0, 0, 0, 1, 0],  # tion  -> .
        [0, 0, 0, 0, 0, 0, 0, 1],
        [0, 0, 0, 0, 0, 0, 0, 1],  # </s>: fallback
    ],
    "last_token": [[0, 0, 0, 0, 0, 0, 0, 1]] * 8,
    "left_context": [
        [1, 0, 0, 0, 0, 0, 0, 0],  # word 0: fallback
        [0, 1, 0, 0, 0, 0, 0, 0],  # word 1: fallback
        [1, 0, 0, 0, 0, 0, 0, 0],
        [1 / 9, 8 / 9, 0, 0, 0, 0, 0, 0],
        [1 / 36, 8 / 36, 27 / 36, 0, 0, 0, 0, 0],
        [1 / 36, 8 / 36, 27 / 36, 0, 0, 0, 0, 0],
        [1 / 100, 8 / 100, 27 / 100, 64 / 100, 0, 0, 0, 0],
        # words 0..4 weights 1,8,27,64,125; "fiction" has 2 pieces -> 125 twice, /350
        [1 / 350, 8 / 350, 27 / 350, 64 / 350, 125 / 350, 125 / 350, 0, 0],
    ],
    "right_context": [
        # word 0: words 2..6 weights 5^3..1^3 = 125,64,27,8,1 ; fiction twice -> /252
        [0, 0, 125 / 252, 64 / 252, 27 / 252, 27 / 252, 8 / 252, 1 / 252],
        [0, 0, 0, 64 / 127, 27 / 127, 27 / 127, 8 / 127, 1 / 127],
        [0, 0, 0, 0, 27 / 63, 27 / 63, 8 / 63, 1 / 63],
        [0, 0, 0, 0, 0, 0, 8 / 9, 1 / 9],
        [0, 0, 0, 0, 0, 0, 0, 1],
        [0, 0, 0, 0, 0, 0, 0, 1],
        [0, 0, 0, 0, 0, 0, 1, 0],  # word 5: fallback
        [0, 0, 0, 0, 0, 0, 0, 1],  # word 6: fallback
    ],
    # words 1,8,27,64,125,216,343 ; fiction twice -> 909
    "end_of_sentence": [[1 / 909, 8 / 909, 27 / 909, 64 / 909, 125 / 909, 125 / 909, 216 / 909, 343 / 909]] * 8,
    # words 343,216,125,64,27,8,1 ; fiction twice -> 811
    "start_of_sentence": [[343 / 811, 216 / 811, 125 / 811, 64 / 811, 27 / 811, 27 / 811, 8 / 811, 1 / 811]] * 8,
}


@pytest.mark.parametrize("name", PATTERNS)
def test_word_based_paper_example(name):
    ids = word_ids_from_tokens(EXAMPLE)
    got = word_pattern_matrix(name, ids)
    check(got, T(WORD_EXPECTED[name]))
    # the two pieces of "fiction" share their query row and get equal key weights
    torch.testing.assert_close(got[4], got[5], rtol=0, atol=0)
    torch.testing.assert_close(got[:, 4], got[:, 5], rtol=0, atol=0)


def test_word_based_without_splits_equals_token_based():
    for name in PATTERNS:
        torch.testing.assert_close(word_pattern_matrix(name, [0, 1, 2, 3, 4]), pattern_matrix(name, 5))


def test_bad_word_ids():
    with pytest.raises(ValueError):
        word_pattern_matrix("current", [1, 2, 3])
    with pytest.raises(ValueError):
        word_pattern_matrix("current", [0, 2, 3])
    with pytest.raises(ValueError):
        word_pattern_matrix("current", [0, 1, 0])


# ---------------------------------------------------------------------------- batches


def test_batch_previous_hand_written():
    lengths = torch.tensor([2, 3])
    left = batch_pattern_weights(["previous"], lengths, 3, left_pad=True)
    assert left.shape == (2, 1, 3, 3)
    torch.testing.assert_close(left[0, 0], T([[0, 0, 0], [0, 1, 0], [0, 1, 0]]))
    torch.testing.assert_close(left[1, 0], T([[1, 0, 0], [1, 0, 0], [0, 1, 0]]))
    right = batch_pattern_weights(["previous"], lengths, 3, left_pad=False)
    torch.testing.assert_close(right[0, 0], T([[1, 0, 0], [1, 0, 0], [0, 0, 0]]))
    torch.testing.assert_close(right[1, 0], T([[1, 0, 0], [1, 0, 0], [0, 1, 0]]))


@pytest.mark.parametrize("left_pad", [True, False])
def test_batch_token_based(left_pad):
    lengths = torch.tensor([5, 2, 7, 1, 0])
    L = 7
    out = batch_pattern_weights(PATTERNS, lengths, L, left_pad=left_pad)
    assert out.shape == (5, len(PATTERNS), L, L) and out.dtype == torch.float32
    for b, l in enumerate(lengths.tolist()):
        s = L - l if left_pad else 0
        real = torch.zeros(L, dtype=torch.bool)
        real[s : s + l] = True
        for h, name in enumerate(PATTERNS):
            w = out[b, h]
            assert torch.equal(w[~real], torch.zeros_like(w[~real]))  # padding query rows
            assert torch.equal(w[:, ~real], torch.zeros_like(w[:, ~real]))  # padding key cols
            torch.testing.assert_close(w[s : s + l, s : s + l], pattern_matrix(name, l), rtol=0, atol=0)
    # the n=5 sentence against the hand-written matrices
    s = 2 if left_pad else 0
    for h, name in enumerate(PATTERNS):
        torch.testing.assert_close(out[0, h, s : s + 5, s : s + 5], T(N5[name]))


@pytest.mark.parametrize("left_pad", [True, False])
def test_batch_word_based(left_pad):
    L = 10
    ids_ex = word_ids_from_tokens(EXAMPLE)  # 8 tokens
    ids_short = [0, 0, 1]  # "x@@ y </s>"
    lengths = torch.tensor([8, 3])
    word_ids = torch.full((2, L), 99, dtype=torch.long)  # junk at padding: ignored
    for b, ids in enumerate([ids_ex, ids_short]):
        s = L - len(ids) if left_pad else 0
        word_ids[b, s : s + len(ids)] = torch.tensor(ids)
    out = batch_pattern_weights(PATTERNS, lengths, L, left_pad=left_pad, word_ids=word_ids)
    for b, ids in enumerate([ids_ex, ids_short]):
        l = len(ids)
        s = L - l if left_pad else 0
        real = torch.zeros(L, dtype=torch.bool)
        real[s : s + l] = True
        for h, name in enumerate(PATTERNS):
            w = out[b, h]
            assert torch.equal(w[~real], torch.zeros_like(w[~real]))
            assert torch.equal(w[:, ~real], torch.zeros_like(w[:, ~real]))
            torch.testing.assert_close(w[s : s + l, s : s + l], word_pattern_matrix(name, ids), rtol=0, atol=0)
    s = 2 if left_pad else 0
    for h, name in enumerate(PATTERNS):
        torch.testing.assert_close(out[0, h, s : s + 8, s : s + 8], T(WORD_EXPECTED[name]))
    # "x@@ y </s>", current: both pieces of word 0 split the weight
    s = L - 3 if left_pad else 0
    torch.testing.assert_close(
        out[1, PATTERNS.index("current"), s : s + 3, s : s + 3],
        T([[H, H, 0], [H, H, 0], [0, 0, 1]]),
    )


def test_batch_bad_length():
    with pytest.raises(ValueError):
        batch_pattern_weights(SEVEN, torch.tensor([4]), 3, left_pad=False)


# ---------------------------------------------------------------------------- errors


def test_unknown_pattern_name():
    with pytest.raises(ValueError) as err:
        pattern_matrix("diagonal", 4)
    msg = str(err.value)
    assert "diagonal" in msg
    for name in PATTERNS:
        assert name in msg
    with pytest.raises(ValueError):
        word_pattern_matrix("diagonal", [0, 1])
    with pytest.raises(ValueError):
        batch_pattern_weights(["current", "diagonal"], torch.tensor([2]), 2, left_pad=True)
    with pytest.raises(TypeError):
        batch_pattern_weights("current", torch.tensor([2]), 2, left_pad=True)
