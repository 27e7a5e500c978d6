"""softmax everywhere + no output norm == stock fairseq ``transformer``."""

import pytest
import torch
from fairseq.models.transformer import TransformerModel

from fairseq_sparse_attn.models.sparse_transformer import FAST_PATH_PARAMETERS

from helpers import build_model, random_batch


def stock_state(model):
    """A stock model's state dict without the weight copies that fairseq 0.12.2's encoder
    layers keep for their fast path (ours leave them out; fairseq-fixed 0.12.3.1 has none)."""
    return {k: v for k, v in model.state_dict().items() if k.rsplit(".", 1)[-1] not in FAST_PATH_PARAMETERS}


@pytest.mark.parametrize("backend", ["auto", "materialized"])
def test_loads_stock_state_dict_and_gives_same_outputs(backend):
    stock, d = build_model(arch="transformer", seed=3)
    ours, _ = build_model(
        arch="softmax_transformer_wmt_en_de", seed=4, dictionary=d, encoder_embed_dim=16, decoder_embed_dim=16
    )
    assert type(stock) is TransformerModel
    assert set(ours.state_dict()) == set(stock_state(stock))
    ours.load_state_dict(stock.state_dict(), strict=True)  # unchanged (0.12.2's copies too)
    for m in ours.attention_modules():
        m.backend = backend
    src, lengths, prev = random_batch(d, bsz=4, src_len=9, tgt_len=7)
    with torch.no_grad():
        a, extra_a = stock(src, lengths, prev)
        b, extra_b = ours(src, lengths, prev)
    torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(extra_b["attn"][0], extra_a["attn"][0], atol=1e-6, rtol=1e-6)


def test_same_seed_same_initialisation_as_stock():
    stock, d = build_model(arch="transformer", seed=7)
    ours, _ = build_model(arch="sparse_transformer", seed=7, dictionary=d)
    stock_sd, ours_sd = stock_state(stock), ours.state_dict()
    assert list(stock_sd) == list(ours_sd)
    for k, v in ours_sd.items():
        # the positions' _float_tensor: a placeholder for dtype and device, uninitialised
        # memory in fairseq 0.12.2
        assert torch.equal(v, stock_sd[k]) or k.endswith("._float_tensor"), k


def test_per_kind_configuration():
    model, _ = build_model(
        attn_activation="relu",
        attn_output_norm="gated_rmsnorm",
        cross_attn_activation="entmax15",
        cross_attn_output_norm="none",
        encoder_self_attn_output_norm="rmsnorm_i",
    )
    kinds = {}
    for m in model.attention_modules():
        kinds.setdefault(m.kind, set()).add((m.activation_name, m.output_norm_name))
    assert kinds == {
        "encoder_self": {("relu", "rmsnorm_i")},
        "decoder_self": {("relu", "gated_rmsnorm")},
        "cross": {("entmax15", "none")},
    }


def test_rela_preset_is_rela_g_and_sizes():
    from helpers import model_args

    args = model_args("rela_transformer_wmt_en_de", encoder_embed_dim=None)
    assert (args.attn_activation, args.attn_output_norm) == ("relu", "gated_rmsnorm")
    args = model_args(
        "rela_transformer_iwslt_de_en", encoder_embed_dim=None, encoder_ffn_embed_dim=None, encoder_attention_heads=None
    )
    assert (args.encoder_embed_dim, args.encoder_ffn_embed_dim, args.encoder_attention_heads) == (512, 1024, 4)
    # the other papers' presets: ReLUFormer's scaled ReLU (its Eq. 6) without an output norm,
    # the entmax family and softmax without one
    for arch, pair in (
        ("reluformer_wmt_en_de", ("relu_scaled", "none")),
        ("sparsemax_transformer_wmt_en_de", ("sparsemax", "none")),
        ("entmax15_transformer_iwslt_de_en", ("entmax15", "none")),
        ("softmax_transformer_wmt_en_de", ("softmax", "none")),
    ):
        args = model_args(arch)
        assert (args.attn_activation, args.attn_output_norm) == pair, arch


def test_encoder_layer_never_takes_bettertransformer_path():
    """fairseq 0.12.2 sets BT_version/can_use_fastpath in the encoder layer; ours ignore it."""
    model, _ = build_model(attn_activation="relu", attn_output_norm="gated_rmsnorm")
    layer = model.encoder.layers[0]
    layer.BT_version = True
    layer.can_use_fastpath = True
    assert layer.BT_version is False and layer.can_use_fastpath is False


@pytest.mark.parametrize("patterns", ["7F", "8F"])
def test_encoder_layers_keep_no_fast_path_copies_and_load_a_state_dict_that_has_them(patterns):
    """fairseq 0.12.2's encoder layer keeps copies of its weights for the fast path, as
    parameters, sized from the query projection: dead weight in our layers (the parameter
    count, the optimizer, every checkpoint), a checkpoint of a fixed-pattern model that did
    not load (query and key projections for one head, the copy sized for three times the
    query's), and a model with every head fixed (no query projection) that did not build.
    Ours have none of them, and a state dict saved with them (0.12.2) loads without them."""
    size = dict(encoder_attention_heads=8, decoder_attention_heads=8, encoder_embed_dim=32, decoder_embed_dim=32)
    model, d = build_model("fixed_pattern_transformer_wmt_en_de", encoder_fixed_patterns=patterns, **size)
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_parameters()}
    assert not names & set(FAST_PATH_PARAMETERS)
    layer = model.encoder.layers[0]
    assert (layer.self_attn.q_proj is None) == (patterns == "8F")  # no stand-in left behind
    saved = model.state_dict()
    with_copies = dict(saved)
    for i in range(len(model.encoder.layers)):
        for name in FAST_PATH_PARAMETERS:
            with_copies[f"encoder.layers.{i}.{name}"] = torch.zeros(3, 32)  # as 0.12.2 saves them
    other, _ = build_model(
        "fixed_pattern_transformer_wmt_en_de", seed=5, dictionary=d, encoder_fixed_patterns=patterns, **size
    )
    other.load_state_dict(with_copies, strict=True)
    loaded = other.state_dict()
    # (the positions' _float_tensor: uninitialised memory in fairseq 0.12.2, maybe a NaN)
    assert [k for k, v in saved.items() if not torch.equal(v, loaded[k]) and not k.endswith("._float_tensor")] == []
    src, lengths, prev = random_batch(d, bsz=2, src_len=6, tgt_len=5)
    with torch.no_grad():
        torch.testing.assert_close(other(src, lengths, prev)[0], model(src, lengths, prev)[0])
