"""Fixed encoder heads inside the attention core (Raganato et al. 2020): the module against
a plain computation (patterns from the hand-checked matrices of test_fixed_patterns.py),
parameters, padding on both sides, word ids from the dictionary, head masking, presets,
and generation with a 7F+1L model."""

import math

import pytest
import torch
from fairseq.data import Dictionary

from fairseq_sparse_attn.attention import SparseMultiheadAttention
from fairseq_sparse_attn.attention.fixed_patterns import (
    PATTERNS,
    SEVEN,
    pattern_matrix,
    source_word_ids,
    word_start_table,
)
from fairseq_sparse_attn.options.cli import parse_head_list, parse_pattern_list

from helpers import attention_config, build_model, random_batch
from test_fixed_patterns import EXAMPLE, WORD_EXPECTED

E, H = 32, 8
D = E // H


def make(fixed=SEVEN, masked=(), heads=H, seed=0):
    torch.manual_seed(seed)
    return SparseMultiheadAttention(
        E, heads, self_attention=True, config=attention_config(fixed_patterns=fixed, masked_heads=masked)
    ).eval()


def plain_forward(m, x, n, fixed, masked=()):
    """One unpadded sentence x (n, E) written out: fixed heads from pattern_matrix, learned
    heads softmax(q k^T / sqrt(d)), concatenation, out_proj."""
    v = x @ m.v_proj.weight.T + m.v_proj.bias
    heads, weights = [], []
    for h in range(m.num_heads):
        sl = slice(h * D, (h + 1) * D)
        if h < len(fixed):
            a = pattern_matrix(fixed[h], n)
        else:
            lh = slice((h - len(fixed)) * D, (h - len(fixed) + 1) * D)
            q = x @ m.q_proj.weight[lh].T + m.q_proj.bias[lh]
            k = x @ m.k_proj.weight[lh].T + m.k_proj.bias[lh]
            a = torch.softmax(q @ k.T / math.sqrt(D), dim=-1)
        weights.append(a)
        heads.append(torch.zeros(n, D) if h in masked else a @ v[:, sl])
    return torch.cat(heads, -1) @ m.out_proj.weight.T + m.out_proj.bias, weights


@pytest.mark.parametrize("left_pad", [True, False])
@pytest.mark.parametrize("fixed", [SEVEN, PATTERNS, ("previous", "next")], ids=["7F", "8F", "2F"])
def test_module_against_plain_computation(left_pad, fixed):
    m = make(fixed)
    lengths = [6, 4, 1]
    T = max(lengths)
    torch.manual_seed(1)
    xs = [torch.randn(n, E) for n in lengths]
    x = torch.zeros(T, len(lengths), E)
    pad = torch.ones(len(lengths), T, dtype=torch.bool)
    for b, (xb, n) in enumerate(zip(xs, lengths)):
        s = T - n if left_pad else 0
        x[s : s + n, b] = xb
        pad[b, s : s + n] = False
    out, w = m(x, x, x, key_padding_mask=pad, need_head_weights=True)
    for b, (xb, n) in enumerate(zip(xs, lengths)):
        s = T - n if left_pad else 0
        expected, weights = plain_forward(m, xb, n, fixed)
        torch.testing.assert_close(out[s : s + n, b], expected, atol=1e-5, rtol=1e-5)
        for h in range(H):
            torch.testing.assert_close(w[h, b, s : s + n, s : s + n], weights[h], atol=1e-6, rtol=1e-5)
            # padding never receives weight
            assert torch.all(w[h, b, :, pad[b]] == 0)


def test_fixed_heads_have_no_query_key_parameters():
    stock = make(())
    for fixed, learned in ((SEVEN, 1), (PATTERNS, 0), (("current",), 7)):
        m = make(fixed)
        assert m.num_learned_heads == learned
        if learned:
            assert m.q_proj.weight.shape == (learned * D, E)
            assert m.k_proj.weight.shape == (learned * D, E)
        else:
            assert m.q_proj is None and m.k_proj is None
        n_fixed = len(fixed)
        saved = 2 * n_fixed * (D * E + D)  # q and k weights + biases of the fixed heads
        assert sum(p.numel() for p in stock.parameters()) - sum(p.numel() for p in m.parameters()) == saved
        assert m.v_proj.weight.shape == (E, E) and m.out_proj.weight.shape == (E, E)


def test_fixed_heads_ignore_inputs_of_their_query_and_key():
    """A fixed head's weights do not depend on the input (only on positions)."""
    m = make(SEVEN)
    x1, x2 = torch.randn(5, 1, E), torch.randn(5, 1, E)
    _, w1 = m(x1, x1, x1, need_head_weights=True)
    _, w2 = m(x2, x2, x2, need_head_weights=True)
    torch.testing.assert_close(w1[:7], w2[:7], rtol=0, atol=0)
    assert not torch.allclose(w1[7], w2[7])


def test_masked_heads_zero_their_output():
    torch.manual_seed(3)
    x = torch.randn(5, 1, E)
    for masked in ((0,), (1, 7), tuple(range(H))):
        m = make(SEVEN, masked=masked)
        out, _ = m(x, x, x)
        expected, _ = plain_forward(m, x[:, 0], 5, SEVEN, masked=masked)
        torch.testing.assert_close(out[:, 0], expected, atol=1e-5, rtol=1e-5)
    # every head masked: only the output bias remains
    torch.testing.assert_close(out[:, 0], m.out_proj.bias.expand(5, E))
    # masking works on a fully learned (stock softmax) module too: it leaves the fast path
    m = make((), masked=(2,))
    assert not m.is_stock
    out, _ = m(x, x, x)
    expected, _ = plain_forward(m, x[:, 0], 5, (), masked=(2,))
    torch.testing.assert_close(out[:, 0], expected, atol=1e-5, rtol=1e-5)


def test_bad_configurations():
    with pytest.raises(ValueError, match="out of range"):
        make(SEVEN, masked=(8,))
    with pytest.raises(ValueError, match="do not fit"):
        make(PATTERNS, heads=4)
    with pytest.raises(ValueError, match="diagonal"):
        make(("diagonal",))
    with pytest.raises(ValueError, match="self-attention"):
        SparseMultiheadAttention(E, H, encoder_decoder_attention=True, config=attention_config(fixed_patterns=SEVEN))
    m = SparseMultiheadAttention(
        E, H, self_attention=True, config=attention_config(fixed_patterns=SEVEN, fixed_pattern_unit="word")
    )
    x = torch.randn(3, 1, E)
    with pytest.raises(ValueError, match="word ids"):
        m(x, x, x)


def test_flag_parsing():
    assert parse_pattern_list("7F") == SEVEN
    assert parse_pattern_list("8f") == PATTERNS
    assert parse_pattern_list("none") == () == parse_pattern_list("")
    assert parse_pattern_list("previous, next") == ("previous", "next")
    with pytest.raises(ValueError, match="valid names"):
        parse_pattern_list("previous,diagonal")
    assert parse_head_list("0,7") == (0, 7)
    assert parse_head_list("") == ()
    with pytest.raises(ValueError, match="head indices"):
        parse_head_list("first")


# ---------------------------------------------------------------------------- words


def dictionary(words):
    d = Dictionary()
    for w in words:
        d.add_symbol(w)
    return d


@pytest.mark.parametrize("left_pad", [True, False])
def test_source_word_ids_bpe(left_pad):
    d = dictionary("a master of science fic@@ tion . un@@ believ@@ able x".split())
    # the last: a source cut inside a word (--truncate-source) before its EOS, which is
    # still a word of its own
    sents = ["a master of science fic@@ tion .", "un@@ believ@@ able x", "x", "a science fic@@"]
    expected = [[0, 1, 2, 3, 4, 4, 5, 6], [0, 0, 0, 1, 2], [0, 1], [0, 1, 2, 3]]
    T = 8
    src = torch.full((4, T), d.pad())
    for b, s in enumerate(sents):
        ids = [d.index(w) for w in s.split()] + [d.eos()]
        start = T - len(ids) if left_pad else 0
        src[b, start : start + len(ids)] = torch.tensor(ids)
    got = source_word_ids(src, word_start_table(d, "bpe"), "bpe", d.pad(), d.eos())
    for b, exp in enumerate(expected):
        start = T - len(exp) if left_pad else 0
        assert got[b, start : start + len(exp)].tolist() == exp


def test_source_word_ids_sentencepiece():
    d = dictionary(["\u2581a", "\u2581mas", "ter", "\u2581of", "."])
    toks = ["\u2581a", "\u2581mas", "ter", "\u2581of", "."]
    src = torch.tensor([[d.index(t) for t in toks] + [d.eos()]])
    got = source_word_ids(src, word_start_table(d, "sentencepiece"), "sentencepiece", d.pad(), d.eos())
    assert got.tolist() == [[0, 1, 1, 2, 2, 3]]


def test_encoder_word_patterns_on_the_paper_example():
    """The encoder derives word ids from the source dictionary: the fixed heads of a
    word-based 7F+1L model reproduce the hand-written word matrices of the paper example."""
    from fairseq_sparse_attn.analysis.recording import record_attention

    words = EXAMPLE[:-1]  # without </s>
    d = dictionary(words + ["pad1", "pad2"])
    model, _ = build_model(
        "fixed_pattern_word_transformer_wmt_en_de",
        dictionary=d,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_embed_dim=32,
        decoder_embed_dim=32,
    )
    sent = [d.index(w) for w in words] + [d.eos()]
    src = torch.full((2, 10), d.pad())
    src[0, 2:] = torch.tensor(sent)  # left-padded as fairseq's default
    src[1, 7:] = torch.tensor([d.index("pad1"), d.index("pad2"), d.eos()])
    prev = torch.tensor([[d.eos(), d.index("a")]] * 2)
    seen = []
    with record_attention(model, lambda site, weights, **_: seen.append((site, weights))):
        model(src, torch.tensor([8, 3]), prev)
    enc = [w for site, w in seen if site.kind == "encoder_self"]
    assert len(enc) == 2
    for w in enc:
        for h, name in enumerate(SEVEN):
            torch.testing.assert_close(w[0, h, 2:, 2:], torch.tensor(WORD_EXPECTED[name]), rtol=1e-6, atol=1e-7)
            assert torch.all(w[0, h, :, :2] == 0) and torch.all(w[0, h, :2] == 0)
    for m in model.encoder.modules():  # per-batch inputs are arguments, never module state
        if isinstance(m, SparseMultiheadAttention):
            assert not any(torch.is_tensor(v) for v in vars(m).values())


# ---------------------------------------------------------------------------- models


def test_presets():
    from helpers import model_args

    a = model_args(
        "fixed_pattern_transformer_iwslt_de_en",
        dropout=None,
        share_all_embeddings=None,
        encoder_attention_heads=None,
        encoder_embed_dim=None,
    )
    assert (a.encoder_fixed_patterns, a.encoder_fixed_pattern_unit) == ("7F", "token")
    assert a.dropout == 0.3 and a.share_all_embeddings is True
    assert a.encoder_attention_heads == 8 and a.encoder_embed_dim == 512
    a = model_args("fixed_pattern_word_transformer_wmt_en_de", dropout=None)
    assert a.encoder_fixed_pattern_unit == "word" and a.dropout == 0.1
    a = model_args("fixed_pattern_transformer_wmt_en_de", encoder_fixed_patterns="8F")
    assert a.encoder_fixed_patterns == "8F"
    a = model_args("softmax_transformer_wmt_en_de")
    assert a.encoder_fixed_patterns == "none" and a.encoder_masked_heads == ""


def test_model_parameter_count_drops_by_fixed_query_key():
    kw = dict(
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_embed_dim=32,
        decoder_embed_dim=32,
        encoder_layers=3,
    )
    learned, _ = build_model("softmax_transformer_wmt_en_de", **kw)
    fixed, _ = build_model("fixed_pattern_transformer_wmt_en_de", **kw)
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    d_h = 32 // 8
    assert n(learned) - n(fixed) == 3 * 2 * 7 * (d_h * 32 + d_h)


def test_padding_invariance_and_generation():
    """A sentence encodes the same alone and in a padded batch; beam search runs with a
    7F+1L encoder (the decoder is untouched) and gives the same output either way."""
    from fairseq.sequence_generator import SequenceGenerator

    model, d = build_model(
        "fixed_pattern_transformer_wmt_en_de",
        encoder_attention_heads=8,
        encoder_embed_dim=32,
        decoder_embed_dim=32,
        decoder_attention_heads=4,
    )
    src, lengths, _ = random_batch(d, bsz=3, src_len=7)
    enc = model.encoder(src, lengths)["encoder_out"][0]
    for b, n in enumerate(lengths.tolist()):
        alone = model.encoder(src[b : b + 1, -n:], lengths[b : b + 1])["encoder_out"][0]
        torch.testing.assert_close(enc[-n:, b], alone[:, 0], atol=1e-5, rtol=1e-5)
    gen = SequenceGenerator([model], d, beam_size=3, max_len_b=8)
    batch_hyps = gen.forward({"net_input": {"src_tokens": src, "src_lengths": lengths}})
    for b, n in enumerate(lengths.tolist()):
        alone = gen.forward({"net_input": {"src_tokens": src[b : b + 1, -n:], "src_lengths": lengths[b : b + 1]}})
        assert batch_hyps[b][0]["tokens"].tolist() == alone[0][0]["tokens"].tolist()


@pytest.mark.parametrize("arch", ["fixed_pattern_transformer_wmt_en_de", "fixed_pattern_word_transformer_wmt_en_de"])
def test_encoder_computes_pattern_weights_once_per_batch(arch, monkeypatch):
    """Every layer carries the same patterns: the encoder computes them once per forward,
    and the result equals what each module computes on its own from the padding mask."""
    import fairseq_sparse_attn.models.sparse_transformer as st

    model, d = build_model(
        arch, encoder_layers=3, encoder_attention_heads=8, encoder_embed_dim=32, decoder_embed_dim=32
    )
    src, lengths, prev = random_batch(d, bsz=3, src_len=7)
    calls = []
    real = st.pattern_weights
    monkeypatch.setattr(st, "pattern_weights", lambda *a: calls.append(a) or real(*a))
    shared = model(src, lengths, prev)[0]
    assert len(calls) == 1
    if "word" not in arch:  # token patterns: the modules' own computation gives the same
        model.encoder._pattern_sets = []  # each module computes its own weights
        alone = model(src, lengths, prev)[0]
        torch.testing.assert_close(shared, alone, rtol=0, atol=0)


# ---------------------------------------------------------------------------- readings (issue 16)


def test_encoder_right_context_reading_and_exclude_eos_flags():
    """--encoder-right-context-reading literal / --encoder-fixed-patterns-exclude-eos reach
    every fixed-pattern module through the encoder: a left-padded 4-token sentence + EOS
    gets the hand-written matrices of test_fixed_patterns.py; defaults keep today's."""
    import argparse

    from fairseq_sparse_attn.analysis.recording import record_attention
    from fairseq_sparse_attn.options import add_plugin_args

    from test_fixed_patterns import N5, N5_LITERAL_RIGHT, N5_WITHOUT_EOS

    parser = argparse.ArgumentParser()
    add_plugin_args(parser)
    args = parser.parse_args(["--encoder-right-context-reading", "literal", "--encoder-fixed-patterns-exclude-eos"])
    assert args.encoder_right_context_reading == "literal" and args.encoder_fixed_patterns_exclude_eos
    with pytest.raises(SystemExit):
        parser.parse_args(["--encoder-right-context-reading", "reversed"])

    words = ["w1", "w2", "w3", "w4"]
    d = dictionary(words)
    sent = [d.index(w) for w in words] + [d.eos()]
    src = torch.full((1, 7), d.pad())
    src[0, 2:] = torch.tensor(sent)
    prev = torch.tensor([[d.eos(), d.index("w1")]])
    rc = SEVEN.index("right_context")

    def encoder_weights(**flags):
        model, _ = build_model(
            "fixed_pattern_transformer_wmt_en_de",
            dictionary=d,
            encoder_attention_heads=8,
            decoder_attention_heads=8,
            encoder_embed_dim=32,
            decoder_embed_dim=32,
            **flags,
        )
        seen = []
        with record_attention(model, lambda site, weights, **_: seen.append((site, weights))):
            model(src, torch.tensor([5]), prev)
        return [w for site, w in seen if site.kind == "encoder_self"], model

    for w in encoder_weights()[0]:  # defaults: mirrored, EOS a position
        torch.testing.assert_close(w[0, rc, 2:, 2:], torch.tensor(N5["right_context"], dtype=torch.float32))
    for w in encoder_weights(encoder_right_context_reading="literal")[0]:
        torch.testing.assert_close(w[0, rc, 2:, 2:], torch.tensor(N5_LITERAL_RIGHT, dtype=torch.float32))
    enc, model = encoder_weights(encoder_fixed_patterns_exclude_eos=True)
    for w in enc:
        for h, name in enumerate(SEVEN):
            torch.testing.assert_close(w[0, h, 2:, 2:], torch.tensor(N5_WITHOUT_EOS[name], dtype=torch.float32))
            assert torch.all(w[0, h, :2] == 0) and torch.all(w[0, h, :, :2] == 0)
    # a source that does not end in EOS cannot be read without its EOS
    bad = src.clone()
    bad[0, -1] = d.index("w4")
    with pytest.raises(ValueError, match="must end in EOS"):
        model(bad, torch.tensor([5]), prev)


def test_attention_dropout_in_training_leaves_the_fixed_heads_exact():
    """Attention dropout (training) applies to the learned heads' weights only: the fixed
    heads' output is their pattern weights times v exactly, with left padding."""
    import torch.nn as nn

    from fairseq_sparse_attn.attention import build_activation
    from fairseq_sparse_attn.attention.core import AttendSpec, AttentionInputs, attend
    from fairseq_sparse_attn.attention.fixed_patterns import pattern_weights
    from fairseq_sparse_attn.attention.heads import FixedPatternHeads, HeadPlan

    torch.manual_seed(0)
    B, H, F, T, d = 2, 4, 2, 5, 8
    heads = HeadPlan(H, fixed=FixedPatternHeads(("previous", "next")))
    spec = AttendSpec(activation=build_activation("softmax", H - F), dropout=nn.Dropout(0.5).train(), heads=heads)
    q, k = torch.randn(B, H - F, T, d, requires_grad=True), torch.randn(B, H - F, T, d)
    v = torch.randn(B, H, T, d)
    pad = torch.tensor([[False] * 5, [True, False, False, False, False]])
    out, _ = attend(q, k, v, AttentionInputs(hidden=pad.view(B, 1, 1, T), key_padding=pad), spec)
    ids = (~pad).long().cumsum(1) - 1
    torch.testing.assert_close(out[:, :F], pattern_weights(["previous", "next"], ids, ~pad) @ v[:, :F])
    # the learned heads did get dropout: not their output without it
    spec_eval = AttendSpec(activation=build_activation("softmax", H - F), dropout=nn.Dropout(0.5).eval(), heads=heads)
    plain, _ = attend(q, k, v, AttentionInputs(hidden=pad.view(B, 1, 1, T), key_padding=pad), spec_eval)
    assert not torch.allclose(out[:, F:], plain[:, F:])
