"""softmax everywhere + no output norm == stock fairseq ``transformer``."""

import pytest
import torch
from fairseq.models.transformer import TransformerModel

from helpers import build_model, random_batch


@pytest.mark.parametrize("backend", ["auto", "materialized"])
def test_loads_stock_state_dict_and_gives_same_outputs(backend):
    stock, d = build_model(arch="transformer", seed=3)
    ours, _ = build_model(
        arch="softmax_transformer_wmt_en_de", seed=4, dictionary=d, encoder_embed_dim=16, decoder_embed_dim=16
    )
    assert type(stock) is TransformerModel
    assert set(ours.state_dict()) == set(stock.state_dict())
    ours.load_state_dict(stock.state_dict(), strict=True)  # unchanged
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
    for (k, v), (k2, v2) in zip(stock.state_dict().items(), ours.state_dict().items()):
        assert k == k2 and torch.equal(v, v2), k


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
