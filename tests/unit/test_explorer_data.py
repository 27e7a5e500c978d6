"""The explorer's storage rules and per-head summaries on hand-built examples
(analysis/explorer.py); the page and the end-to-end data: tests/integration/test_explorer.py."""

import torch

from fairseq_sparse_attn.analysis.explorer import (
    decode_weights,
    head_summary,
    side_tokens,
    stored_norms,
    stored_weights,
)
from fairseq_sparse_attn.analysis.explorer_html import embed_json, embedded_data, render


def test_stored_weights_keep_exact_zeros_apart():
    w = torch.tensor([[[0.0, 0.0004, 0.5, 1.2346], [-0.0002, 0.0005, 0.9994, 0.0]]])
    assert stored_weights(w) == [[[0, 1, 500, 1235], [-1, 1, 999, 0]]]
    back = decode_weights(stored_weights(w))
    assert torch.equal(back == 0, w == 0)
    assert (back - w.double()).abs().max() <= 1e-3


def test_stored_norms_four_digits():
    assert stored_norms(torch.tensor([[1.234567, 0.000123456, 123.456]])) == [[1.235, 0.0001235, 123.5]]


def test_null_rows_and_sparsity_over_visible_pairs():
    # head 0: row 1 all zero; head 1: nothing zero
    w = torch.tensor(
        [[[0.5, 0.5, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]], [[0.2, 0.3, 0.5], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4]]]
    )
    null, sparsity = head_summary(w, "cross")
    assert null == [[1], []]
    assert sparsity == [round(6 / 9, 4), 0.0]
    # decoder self-attention: only j <= i is visible; a row is null when its visible keys are 0
    d = torch.tensor([[[0.0, 0.0, 0.0], [0.4, 0.6, 0.0], [0.0, 0.0, 0.0]]])
    null, sparsity = head_summary(d, "decoder_self")
    assert null == [[0, 2]]
    assert sparsity == [round(4 / 6, 4)]


def test_side_tokens_words_and_eos():
    src = side_tokens("a bi@@ cy@@ cle ride".split(), "subword-nmt", eos_first=False)
    assert src == {
        "tokens": ["a", "bi@@", "cy@@", "cle", "ride", "</s>"],
        "words": ["a", "bicycle", "ride", "</s>"],
        "word_of": [0, 1, 1, 1, 2, 3],
    }
    dec = side_tokens(["▁new", "▁yo", "rk"], "sentencepiece", eos_first=True)
    assert dec == {"tokens": ["</s>", "▁new", "▁yo", "rk"], "words": ["</s>", "new", "york"], "word_of": [0, 1, 2, 2]}


def test_embedded_json_cannot_close_the_script():
    data = {"title": "x", "sentences": [{"source": {"tokens": ["</script>", "<b>"]}}]}
    text = embed_json(data)
    assert "</" not in text
    page = render(data)
    assert page.count("</script>") == 2
    assert embedded_data(page) == data
