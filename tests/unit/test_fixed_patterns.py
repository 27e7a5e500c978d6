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
        "current",
        "previous",
        "next",
        "left_context",
        "right_context",
        "end_of_sentence",
        "start_of_sentence",
        "last_token",
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


def sentence_block(w, start, length):
    """The (length, length) block of a sentence at ``start`` in a padded (L, L) weight
    matrix, after checking that its padding rows and columns are exactly zero."""
    real = torch.zeros(w.shape[-1], dtype=torch.bool)
    real[start : start + length] = True
    assert torch.equal(w[~real], torch.zeros_like(w[~real]))  # padding query rows
    assert torch.equal(w[:, ~real], torch.zeros_like(w[:, ~real]))  # padding key columns
    return w[start : start + length, start : start + length]


@pytest.mark.parametrize("left_pad", [True, False])
def test_batch_token_based(left_pad):
    lengths = torch.tensor([5, 2, 7, 1, 0])
    L = 7
    out = batch_pattern_weights(PATTERNS, lengths, L, left_pad=left_pad)
    assert out.shape == (5, len(PATTERNS), L, L) and out.dtype == torch.float32
    for b, l in enumerate(lengths.tolist()):
        s = L - l if left_pad else 0
        for h, name in enumerate(PATTERNS):
            block = sentence_block(out[b, h], s, l)
            torch.testing.assert_close(block, pattern_matrix(name, l), rtol=0, atol=0)
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
        for h, name in enumerate(PATTERNS):
            block = sentence_block(out[b, h], s, l)
            torch.testing.assert_close(block, word_pattern_matrix(name, ids), rtol=0, atol=0)
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


# ---------------------------------------------------------------------------- readings (issue 16)
# right_context "literal": the paper's f = (j+1)^3 over i+2..n-1 (grows toward the end);
# exclude_eos: the last position (EOS) is not a position of the patterns, its row is 1 on EOS.

N5_LITERAL_RIGHT = [
    [0, 0, 27 / 216, 64 / 216, 125 / 216],  # 3^3, 4^3, 5^3
    [0, 0, 0, 64 / 189, 125 / 189],
    [0, 0, 0, 0, 1],
    [0, 0, 0, 1, 0],  # fallback
    [0, 0, 0, 0, 1],  # fallback
]


def test_right_context_literal_n5():
    got = pattern_matrix("right_context", 5, right_context="literal")
    check(got, T(N5_LITERAL_RIGHT))
    assert got[0, 4] > got[0, 3] > got[0, 2]  # largest weight at the end of the sentence
    # every other pattern is the same under both readings
    for name in PATTERNS:
        if name != "right_context":
            check(pattern_matrix(name, 5, right_context="literal"), T(N5[name]))


def test_right_context_literal_word_example():
    # words 2..6 of the example (a master | of science fiction . </s>), (w+1)^3 =
    # 27, 64, 125, 216, 343; "fiction" has two pieces -> 125 twice, total 900
    got = word_pattern_matrix("right_context", word_ids_from_tokens(EXAMPLE), right_context="literal")
    check(got[0], T([0, 0, 27 / 900, 64 / 900, 125 / 900, 125 / 900, 216 / 900, 343 / 900]))
    check(got[3], T([0, 0, 0, 0, 0, 0, 216 / 559, 343 / 559]))  # science: words 5, 6
    check(got[4], T([0, 0, 0, 0, 0, 0, 0, 1]))  # fic@@: word 6 only


def test_unknown_right_context_reading():
    with pytest.raises(ValueError, match="--encoder-right-context-reading"):
        pattern_matrix("right_context", 3, right_context="reversed")


E = [0, 0, 0, 0, 1]  # EOS row: weight 1 on EOS itself
# n = 5 positions, the last one EOS: the patterns of a 4-token sentence, EOS column 0
N5_WITHOUT_EOS = {
    "current": [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0], E],
    "previous": [[1, 0, 0, 0, 0], [1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 1, 0, 0], E],
    "next": [[0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 1, 0], E],
    "left_context": [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1 / 9, 8 / 9, 0, 0, 0], E],
    # mirrored: (4-j)^3 over j >= i+2 of the 4 tokens: 2^3, 1^3
    "right_context": [[0, 0, 8 / 9, 1 / 9, 0], [0, 0, 0, 1, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0], E],
    "end_of_sentence": [[1 / 100, 8 / 100, 27 / 100, 64 / 100, 0]] * 4 + [E],
    "start_of_sentence": [[64 / 100, 27 / 100, 8 / 100, 1 / 100, 0]] * 4 + [E],
    "last_token": [[0, 0, 0, 1, 0]] * 4 + [E],  # the last token before EOS
}


@pytest.mark.parametrize("name", PATTERNS)
def test_n5_without_eos(name):
    check(pattern_matrix(name, 5, exclude_eos=True), T(N5_WITHOUT_EOS[name]))


def test_without_eos_literal_right_context():
    check(
        pattern_matrix("right_context", 5, right_context="literal", exclude_eos=True),
        T([[0, 0, 27 / 91, 64 / 91, 0], [0, 0, 0, 1, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0], E]),
    )


def test_without_eos_single_position():
    for name in PATTERNS:
        check(pattern_matrix(name, 1, exclude_eos=True), T([[1.0]]))


def test_without_eos_word_example():
    ids = word_ids_from_tokens(EXAMPLE)  # EOS (token 7) is word 6
    eos = [0, 0, 0, 0, 0, 0, 0, 1]
    # words 0..5 weights 1,8,27,64,125,216; fiction twice -> 566
    check(
        word_pattern_matrix("end_of_sentence", ids, exclude_eos=True),
        T([[1 / 566, 8 / 566, 27 / 566, 64 / 566, 125 / 566, 125 / 566, 216 / 566, 0]] * 7 + [eos]),
    )
    check(
        word_pattern_matrix("last_token", ids, exclude_eos=True), T([[0, 0, 0, 0, 0, 0, 1, 0]] * 7 + [eos])
    )  # "." is the last word
    check(
        word_pattern_matrix("next", ids, exclude_eos=True)[5:],
        T(
            [
                [0, 0, 0, 0, 0, 0, 1, 0],  # tion -> .
                [0, 0, 0, 0, 0, 0, 1, 0],  # . : fallback to itself, not EOS
                eos,
            ]
        ),
    )


@pytest.mark.parametrize("left_pad", [True, False])
def test_batch_without_eos(left_pad):
    lengths = torch.tensor([5, 2, 1])
    L = 6
    out = batch_pattern_weights(PATTERNS, lengths, L, left_pad=left_pad, exclude_eos=True)
    for b, l in enumerate(lengths.tolist()):
        s = L - l if left_pad else 0
        for h, name in enumerate(PATTERNS):
            block = sentence_block(out[b, h], s, l)
            if l == 5:
                check(block, T(N5_WITHOUT_EOS[name]))
            else:  # one token + EOS / EOS alone: each attends to itself
                check(block, torch.eye(l))


@pytest.mark.parametrize(
    "style,scheme,pieces",
    [
        ("bpe", "subword-nmt", ["a", "b@@", "c", "d@@", "e@@", "f", "g"]),
        ("sentencepiece", "sentencepiece", ["\u2581a", "b", "\u2581c", "\u2581d", "e", "f", "\u2581g"]),
    ],
)
def test_batched_word_ids_follow_the_one_subword_grouping(style, scheme, pieces):
    """The encoder's vectorized word ids (word_start_table + source_word_ids) equal the
    project's one grouping, fairseq_sparse_attn.subwords.word_index, sentence by sentence
    (random sentences, left padding, EOS its own word)."""
    from fairseq.data import Dictionary

    from fairseq_sparse_attn.attention.fixed_patterns import source_word_ids, word_start_table
    from fairseq_sparse_attn.subwords import word_index

    d = Dictionary()
    for p in pieces:
        d.add_symbol(p)
    g = torch.Generator().manual_seed(3)
    sentences = []
    for n in (7, 3, 1, 5):
        idx = torch.randint(len(pieces), (n,), generator=g).tolist()
        sent = [pieces[i] for i in idx]
        if scheme == "subword-nmt" and sent[-1].endswith("@@"):
            sent[-1] = "c"  # a sentence cannot end inside a word
        sentences.append(sent)
    T = max(len(s) for s in sentences) + 1
    src = torch.full((len(sentences), T), d.pad())
    for b, sent in enumerate(sentences):
        toks = [d.index(p) for p in sent] + [d.eos()]
        src[b, T - len(toks) :] = torch.tensor(toks)
    got = source_word_ids(src, word_start_table(d, style), style, d.pad(), d.eos())
    for b, sent in enumerate(sentences):
        n = len(sent) + 1
        want = word_index(sent + ["</s>"], scheme, eos="</s>")
        assert got[b, T - n :].tolist() == want, (sent, got[b].tolist(), want)
