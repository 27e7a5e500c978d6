"""The model's configuration is resolved once (issue 33 item 3): ``resolve_model`` reads the
flags once, at model build, and every part of the model takes its config from the resulting
``ModelConfig`` (attention modules, FFN variant, the encoder's subword style); the result
equals resolving each module on its own from the same flags (the configs the model was built
from before)."""

import importlib

import pytest

import fairseq_sparse_attn.plugin  # noqa: F401  (registers the model)
from fairseq_sparse_attn.attention import SparseMultiheadAttention
from fairseq_sparse_attn.errors import UsageError
from fairseq_sparse_attn.options.resolve import ModelConfig, resolve, resolve_model

from helpers import build_model, model_args

resolution = importlib.import_module("fairseq_sparse_attn.options.resolve")

#: flags that touch every part of the configuration: per-kind activations and norms, masked
#: heads, bias providers in one layer, the FFN variant; fixed patterns (which take no bias
#: in their layer) in the second set
RICH = dict(
    attn_activation="relu",
    attn_output_norm="rmsnorm",
    cross_attn_activation="softmax",
    decoder_self_attn_output_norm="gated_rmsnorm",
    encoder_masked_heads="3",
    encoder_rel_pos_k=2,
    encoder_localness=True,
    encoder_bias_layers="1",
    ffn_type="softmax_layernorm",
)
FIXED = dict(
    attn_activation="relu_scaled",
    encoder_fixed_patterns="current,previous",
    encoder_fixed_pattern_unit="word",
    ffn_type="softmax_layernorm",
)


def test_the_flags_are_read_once_per_model(monkeypatch):
    reads = []
    original = resolution.plugin_options

    def counting(cfg=None):
        reads.append(cfg)
        return original(cfg)

    monkeypatch.setattr(resolution, "plugin_options", counting)
    model, _ = build_model(**RICH)
    assert len(model.attention_modules()) == 2 + 2 * 2  # two encoder and two decoder layers
    assert len(reads) == 1  # resolve_model, once: not per check, not per module


def test_every_part_takes_its_config_from_the_model_config():
    model, _ = build_model(encoder_subword_style="sentencepiece", **RICH)
    config = model.model_config
    assert isinstance(config, ModelConfig)
    assert len(config.encoder_self) == 2
    for i, layer in enumerate(model.encoder.layers):
        assert layer.self_attn.config is config.encoder_self[i]
        assert layer.activation_fn.ffn_type == "softmax_layernorm"
    for layer in model.decoder.layers:
        assert layer.self_attn.config is config.decoder_self
        assert layer.encoder_attn.config is config.cross
        assert layer.activation_fn.ffn_type == "softmax_layernorm"
    assert model.encoder.subword_style == "sentencepiece"
    assert config.encoder_self[1].biases.providers and not config.encoder_self[0].biases.providers


@pytest.mark.parametrize("flags", [RICH, FIXED], ids=["biases", "fixed_patterns"])
def test_the_model_config_equals_resolving_each_module_alone(flags):
    """Bit for bit what the model was built from before: ``resolve(cfg, kind, layer)`` per
    module (kept for modules built in Python)."""
    args = model_args(**flags)
    config = resolve_model(args)
    modules = [m for m in build_model(**flags)[0].modules() if isinstance(m, SparseMultiheadAttention)]
    assert len(modules) == 6
    for module in modules:
        alone = resolve(args, module.config.kind, module.config.layer_index)
        assert module.config == alone
        assert config.attention(module.config.kind, module.config.layer_index) == alone


@pytest.mark.parametrize(
    "flags, message",
    [
        (dict(ffn_type="gelu_memory"), "unknown --ffn-type 'gelu_memory'"),
        (dict(encoder_fixed_patterns="7F"), "7 fixed patterns do not fit in --encoder-attention-heads 4"),
        (dict(encoder_bias_layers="5", encoder_localness=True), "--encoder-bias-layers: layer 5 out of range"),
        (dict(encoder_rel_pos_k=-1), "--encoder-rel-pos-k -1: must be >= 0"),
    ],
)
def test_resolve_model_raises_the_one_line_errors(flags, message):
    with pytest.raises(UsageError, match=message):
        resolve_model(model_args(**flags))


def test_encoder_layers_to_keep_gives_one_config_per_kept_layer():
    """fairseq builds as many encoder layers as ``--encoder-layers-to-keep`` names."""
    assert len(resolve_model(model_args(encoder_layers=3, encoder_layers_to_keep="0,2")).encoder_self) == 2
    model, _ = build_model(
        encoder_layers=3, encoder_layers_to_keep="0,2", encoder_localness=True, encoder_bias_layers="1"
    )
    assert len(model.encoder.layers) == len(model.model_config.encoder_self) == 2
    assert model.encoder.layers[1].self_attn.config.biases.providers


@pytest.mark.kernels
def test_a_named_backend_that_can_serve_no_call_is_refused_when_the_model_is_built():
    """A named --attn-backend against what the configuration fixes (activation, head dim,
    bias providers, fixed or masked heads) is one UsageError naming the module, at resolve
    time: before any data is read (it was the first step's refusal, with the same reasons).
    What only a call shows (dropout in training, weights, the mask, the dtype) stays with
    the call; auto and materialized serve everything."""
    size = dict(encoder_embed_dim=64, decoder_embed_dim=64, encoder_attention_heads=2, decoder_attention_heads=2)
    relu = dict(attn_activation="relu", **size)

    def refusal(**flags):
        with pytest.raises(UsageError) as e:
            resolve_model(model_args(**flags))
        return str(e.value)

    message = refusal(attn_backend="triton", attn_activation="softmax", **size)
    assert message.startswith("attention backend 'triton' (--attn-backend) cannot serve the decoder self-attention: ")
    assert "activation softmax" in message and message.endswith("--model-overrides \"{'attn_backend': 'auto'}\")")
    assert "head dim 4 (the kernels serve 32, 64, 128, 256)" in refusal(attn_backend="triton", attn_activation="relu")
    assert "encoder layer 1 self-attention: attention bias providers" in refusal(
        attn_backend="triton", encoder_rel_pos_k=2, encoder_bias_layers="1", **relu
    )
    assert "masked heads / RHE" in refusal(attn_backend="triton", encoder_masked_heads="1", **relu)
    assert "fixed-pattern heads" in refusal(attn_backend="triton", encoder_fixed_patterns="previous", **relu)
    assert "activation relu" in refusal(attn_backend="sdpa", **relu)
    # served by what the configuration fixes: built (dropout is the call's to refuse)
    resolve_model(model_args(attn_backend="triton", attention_dropout=0.1, **relu))

    for backend in ("auto", "materialized"):
        resolve_model(model_args(attn_backend=backend, attn_activation="softmax", encoder_rel_pos_k=2))
    # cross-attention has the decoder's heads (fairseq's build_encoder_attention): 512 / 8 =
    # 64, served, where the encoder's 1 head would make it 512 (refused until 2026-11-28)
    asymmetric = dict(encoder_embed_dim=32, encoder_attention_heads=1, decoder_embed_dim=512, decoder_attention_heads=8)
    resolve_model(model_args(attn_backend="triton", attn_activation="relu", **asymmetric))
    built = build_model("rela_transformer_wmt_en_de", attn_backend="triton", **asymmetric)[0]
    cross = built.decoder.layers[0].encoder_attn
    assert (cross.num_heads, cross.head_dim) == (8, 64)
    # and the other way: the cross-attention's head dim 512 / 1 is refused, whatever the encoder's
    asymmetric.update(encoder_embed_dim=512, encoder_attention_heads=8, decoder_attention_heads=1)
    assert "self-attention: head dim 512" in refusal(attn_backend="triton", attn_activation="relu", **asymmetric)


def test_a_named_triton_backend_under_a_triton_it_does_not_run_with_is_refused_when_built(monkeypatch):
    """``--attn-backend triton`` under a Triton version the kernels do not run with (a
    cluster's torch 2.8 brings 3.4): one line naming the version, when the model is built
    (under 3.4 it was an ImportError from inside the kernels)."""
    from fairseq_sparse_attn.kernels import served

    monkeypatch.setattr(served, "_installed_triton_unserved", lambda: served.triton_unserved("3.4.0"))
    size = dict(encoder_embed_dim=64, decoder_embed_dim=64, encoder_attention_heads=2, decoder_attention_heads=2)
    with pytest.raises(UsageError) as e:
        resolve_model(model_args(attn_backend="triton", attn_activation="relu", **size))
    assert str(e.value).startswith(
        "attention backend 'triton' (--attn-backend) cannot serve the decoder self-attention: "
        "Triton 3.4.0 is installed; the kernels run with Triton 3.6 or 3.7"
    ), str(e.value)
    resolve_model(model_args(attn_backend="auto", attn_activation="relu", **size))
