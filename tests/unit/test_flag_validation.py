"""Every invalid model flag is refused by ``validate_model_args`` (called once by
``SparseTransformerModel.build_model``) as one UsageError line naming the flag, before any
module is built (issue 24).  Before, these were ValueError / AssertionError /
ZeroDivisionError tracebacks at model build, or failed only inside the first training step,
where fairseq's trainer writes crash.pt.  The real command is run by
tests/integration/test_user_errors.py."""

import pytest

from fairseq_sparse_attn.errors import UsageError
from fairseq_sparse_attn.options.schema import OPTION_FIELDS, TRANSFORMER_RANGES, Range
from fairseq_sparse_attn.validation import validate_model_args

from helpers import build_model, model_args, random_batch

# (overrides, the flag named in the message, a fragment of the message)
INVALID = {
    "negative_gamma": (
        dict(attn_activation="relu_scaled", relu_scale_gamma=-1.0),
        "--relu-scale-gamma -1.0: must be > 0",
    ),
    "zero_gamma": (dict(attn_activation="relu_scaled", relu_scale_gamma=0.0), "--relu-scale-gamma 0.0: must be > 0"),
    "entmax_alpha_1": (dict(attn_activation="entmax_bisect", entmax_alpha=1.0), "--entmax-alpha 1.0: must be > 1"),
    "entmax_alpha_below_1": (
        dict(attn_activation="entmax_bisect", entmax_alpha=0.5),
        "--entmax-alpha 0.5: must be > 1",
    ),
    "learned_alpha_2": (
        dict(attn_activation="entmax_bisect", entmax_alpha=2.0, entmax_alpha_learned=True),
        "--entmax-alpha must be in (1, 2) when learned per head, got 2.0",
    ),
    "zero_bisect_iters": (
        dict(attn_activation="entmax_bisect", entmax_bisect_iters=0),
        "--entmax-bisect-iters 0: must be >= 1",
    ),
    "negative_leaky_slope": (
        dict(attn_activation="leaky_relu", leaky_relu_slope=-0.1),
        "--leaky-relu-slope -0.1: must be in [0, 1)",
    ),
    "zero_norm_eps": (dict(attn_output_norm="rmsnorm", attn_norm_eps=0.0), "--attn-norm-eps 0.0: must be > 0"),
    "negative_key_block": (
        dict(attn_activation="relu", attn_key_block_size=-16),
        "--attn-key-block-size -16: must be >= 0",
    ),
    "negative_flex_min_keys": (
        dict(attn_activation="relu", attn_flex_min_keys=-1),
        "--attn-flex-min-keys -1: must be >= 0",
    ),
    "negative_rel_pos_k": (dict(encoder_rel_pos_k=-2), "--encoder-rel-pos-k -2: must be >= 0"),
    "negative_lpea_distance": (
        dict(encoder_syntax_attention="lpea", lpea_max_distance=-1),
        "--lpea-max-distance -1: must be >= 0",
    ),
    "rhe_gate_above_1": (dict(rhe=True, rhe_gate="1.5"), "--rhe-gate must be 'dynamic' or a number in (0, 1], got 1.5"),
    "bias_layer_out_of_range": (
        dict(encoder_rel_pos_k=2, encoder_bias_layers="5"),
        "--encoder-bias-layers: layer 5 out of range, the encoder has 2 layers (0..1)",
    ),
    "zero_encoder_heads": (dict(encoder_attention_heads=0), "--encoder-attention-heads 0: must be >= 1"),
    "zero_decoder_heads": (dict(decoder_attention_heads=0), "--decoder-attention-heads 0: must be >= 1"),
    "embed_not_divisible": (
        dict(encoder_attention_heads=3),
        "--encoder-embed-dim 16 is not divisible by --encoder-attention-heads "
        "3: each head gets embed_dim / heads dimensions (e.g. "
        "--encoder-attention-heads 2)",
    ),
    "decoder_embed_not_divisible": (
        dict(decoder_embed_dim=18),
        "--decoder-embed-dim 18 is not divisible by --decoder-attention-heads 4",
    ),
    "attention_dropout_above_1": (dict(attention_dropout=1.5), "--attention-dropout 1.5: must be in [0, 1]"),
    "attention_dropout_negative": (dict(attention_dropout=-0.1), "--attention-dropout -0.1: must be in [0, 1]"),
    "dropout_above_1": (dict(dropout=2.0), "--dropout 2.0: must be in [0, 1]"),
    "activation_dropout_above_1": (dict(activation_dropout=1.1), "--activation-dropout 1.1: must be in [0, 1]"),
    "zero_embed_dim": (dict(encoder_embed_dim=0), "--encoder-embed-dim 0: must be >= 1"),
    "zero_max_positions": (dict(max_source_positions=0), "--max-source-positions 0: must be >= 1"),
    "nan_dropout": (dict(dropout=float("nan")), "--dropout nan: must be in [0, 1]"),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_flag_is_one_usage_error_naming_it(case):
    overrides, message = INVALID[case]
    with pytest.raises(UsageError) as e:
        validate_model_args(model_args(**overrides))
    assert message in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("case", sorted(INVALID))
def test_build_model_refuses_before_building(case):
    """The model's own build path raises the same UsageError (not a ValueError from a
    constructor, not an error at the first forward)."""
    overrides, message = INVALID[case]
    with pytest.raises(UsageError, match=None) as e:
        build_model(**overrides)
    assert message in str(e.value)


def test_every_declared_range_has_a_case():
    """A range added to an option (options/schema.py ``valid=``) gets a case here."""
    ranged = {name for name, f in OPTION_FIELDS.items() if f.metadata["valid"] is not None}
    named = {"-".join(msg.split()[0].lstrip("-").split("-")).replace("-", "_") for _, msg in INVALID.values()}
    assert ranged - named == set()
    assert {
        "attention_dropout",
        "dropout",
        "activation_dropout",
        "encoder_attention_heads",
        "decoder_attention_heads",
    } <= set(TRANSFORMER_RANGES) & named


@pytest.mark.parametrize(
    "overrides",
    [
        dict(attention_dropout=0.0),
        dict(attention_dropout=1.0),
        dict(dropout=0.3),
        dict(attn_activation="relu_scaled", relu_scale_gamma=1e-3),
        dict(attn_activation="entmax_bisect", entmax_alpha=1.01, entmax_bisect_iters=1),
        dict(attn_activation="leaky_relu", leaky_relu_slope=0.0),
        dict(encoder_rel_pos_k=0),
        dict(encoder_rel_pos_k=3),
        dict(encoder_attention_heads=8),
        dict(encoder_attention_heads=1),
        dict(encoder_localness=True, encoder_bias_layers="all"),
    ],
)
def test_boundary_values_are_accepted_and_train(overrides):
    """The edges of each range build a model whose training forward is finite."""
    import torch

    validate_model_args(model_args(**overrides))
    model, d = build_model(**overrides)
    model.train()
    src, lengths, prev = random_batch(d)
    out = model(src, lengths, prev)[0]
    assert torch.isfinite(out).all()


@pytest.mark.parametrize(
    "valid,inside,outside,text",
    [
        (Range(0, 1), [0, 0.5, 1], [-1e-9, 1.0001], "in [0, 1]"),
        (Range(1, low_open=True), [1.0001, 7], [1, 0], "> 1"),
        (Range(0, 1, high_open=True), [0, 0.99], [1, -0.5], "in [0, 1)"),
        (Range(None, 3), [-5, 3], [3.5], "<= 3"),
    ],
)
def test_range(valid, inside, outside, text):
    assert all(v in valid for v in inside)
    assert not any(v in valid for v in outside)
    assert str(valid) == text


def test_shared_embeddings_need_equal_dims_and_one_dictionary():
    """fairseq raised a ValueError (traceback) for both, from inside the model build."""
    from argparse import Namespace

    from fairseq.data import Dictionary

    with pytest.raises(
        UsageError,
        match=r"--share-all-embeddings needs --encoder-embed-dim \(16\) "
        r"equal to --decoder-embed-dim \(32\)",
    ):
        validate_model_args(model_args(share_all_embeddings=True, decoder_embed_dim=32))
    src, tgt = Dictionary(), Dictionary()
    src.add_symbol("a"), tgt.add_symbol("b"), tgt.add_symbol("c")
    task = Namespace(source_dictionary=src, target_dictionary=tgt, cfg=Namespace(data="bin"))
    with pytest.raises(
        UsageError,
        match="the source and target dictionaries in bin differ "
        r"\(5 and 6 entries\): binarize with fairseq-preprocess "
        "--joined-dictionary",
    ):
        validate_model_args(model_args(share_all_embeddings=True), task)
    same_size = Dictionary()
    same_size.add_symbol("b")  # as many entries, another symbol: still two dictionaries
    task.target_dictionary = same_size
    with pytest.raises(UsageError, match=r"dictionaries in bin differ \(5 and 5 entries\)"):
        validate_model_args(model_args(share_all_embeddings=True), task)
    task.target_dictionary = src
    validate_model_args(model_args(share_all_embeddings=True), task)
