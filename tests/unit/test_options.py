"""The plugin's options dataclass: the flags users type (names, preset defaults) are the
ones listed here by hand, the per-kind resolution, and reading from every config type."""

import argparse

import pytest

import fairseq_sparse_attn.plugin  # noqa: F401  (registers everything)
from fairseq_sparse_attn.options import PluginOptions, add_plugin_args, fill_defaults, plugin_options

# flag -> the default a preset fills in (None: left unset, the reader's default applies)
EXPECTED = {
    "--attn-activation": "softmax",
    "--attn-output-norm": "none",
    "--encoder-self-attn-activation": None,
    "--encoder-self-attn-output-norm": None,
    "--decoder-self-attn-activation": None,
    "--decoder-self-attn-output-norm": None,
    "--cross-attn-activation": None,
    "--cross-attn-output-norm": None,
    "--entmax-alpha": 1.5,
    "--entmax-alpha-learned": False,
    "--entmax-bisect-iters": 50,
    "--leaky-relu-slope": 0.01,
    "--attn-norm-eps": 1e-8,
    "--relu-scale-gamma": 1.0,
    "--attn-key-block-size": None,
    "--attn-init": "fairseq",
    "--relu-no-length-scale": False,
    "--attn-backend": None,
    "--attn-flex-min-keys": None,
    "--ffn-type": None,
    "--encoder-fixed-patterns": "none",
    "--encoder-fixed-pattern-unit": "token",
    "--encoder-right-context-reading": "mirrored",
    "--encoder-fixed-patterns-exclude-eos": False,
    "--encoder-subword-style": "bpe",
    "--encoder-masked-heads": "",
    "--encoder-syntax-attention": "none",
    "--lpea-max-distance": 6,
    "--encoder-rel-pos-k": 0,
    "--encoder-rel-pos-values": False,
    "--encoder-localness": False,
    "--encoder-bias-layers": "0",
    "--rhe": False,
    "--rhe-layers": None,
    "--rhe-gate": "dynamic",
    "--prune-redundant-heads": False,
    "--prune-skip-in-training": False,
    "--allow-attention-change": False,
}


def parser():
    p = argparse.ArgumentParser()
    add_plugin_args(p)
    return p


def test_flags_and_preset_defaults_are_the_documented_ones():
    flags = {s for a in parser()._actions for s in a.option_strings if s != "-h" and s != "--help"}
    assert flags == set(EXPECTED)
    args = parser().parse_args([])
    fill_defaults(args)
    for flag, default in EXPECTED.items():
        assert getattr(args, flag[2:].replace("-", "_")) == default, flag
    # a preset value wins over the default, a command-line value over the preset
    args = parser().parse_args(["--rhe-gate", "0.3"])
    fill_defaults(args, encoder_syntax_attention="lpea", rhe_gate="dynamic")
    assert (args.encoder_syntax_attention, args.rhe_gate) == ("lpea", "0.3")
    with pytest.raises(ValueError, match="unknown plugin option 'rhe_gates'"):
        fill_defaults(args, rhe_gates="dynamic")


def test_choices_come_from_the_registries():
    p = parser()
    with pytest.raises(SystemExit):
        p.parse_args(["--attn-activation", "tanh"])
    assert p.parse_args(["--attn-activation", "entmax_bisect"]).attn_activation == "entmax_bisect"
    assert p.parse_args(["--attn-backend", "key_block"]).attn_backend == "key_block"
    helps = {a.dest: a.help for a in p._actions}
    assert "relu_scaled" in helps["attn_activation"] and "gated_rmsnorm" in helps["attn_output_norm"]
    assert "7F = current+previous" in helps["encoder_fixed_patterns"]
    assert "{'encoder_masked_heads': '0,7'}" in helps["encoder_masked_heads"]


def test_reading_and_per_kind_resolution():
    ns = argparse.Namespace(
        attn_activation="relu",
        cross_attn_activation="softmax",
        decoder_self_attn_output_norm="rmsnorm",
        encoder_rel_pos_k=None,
    )
    opts = plugin_options(ns)
    assert opts.attention_kind("encoder_self") == ("relu", "none")
    assert opts.attention_kind("cross") == ("softmax", "none")
    assert opts.attention_kind("decoder_self") == ("relu", "rmsnorm")
    assert opts.encoder_rel_pos_k == 0 and opts.attn_key_block_size == 0  # None -> default
    assert plugin_options(None) == PluginOptions()
    with pytest.raises(ValueError, match="unknown attention kind"):
        opts.attention_kind("self")

    class Strict:  # fairseq's TransformerConfig raises AttributeError for unknown names
        attn_activation = "sparsemax"

        def __getattr__(self, name):
            raise AttributeError(name)

    assert plugin_options(Strict()).attention_kind("cross") == ("sparsemax", "none")


# ---------------------------------------------------------------- resolve(): namespace -> configs


def test_config_defaults_are_the_option_defaults():
    """A module built in Python with the configs' defaults computes what the flags' defaults
    compute: resolving an empty namespace gives the dataclass defaults, for every kind."""
    from fairseq_sparse_attn.attention.config import ATTENTION_KINDS, AttentionConfig
    from fairseq_sparse_attn.options.resolve import resolve

    for kind in ATTENTION_KINDS:
        assert resolve(None, kind) == AttentionConfig(kind=kind)
        assert resolve(argparse.Namespace(), kind, 1) == AttentionConfig(kind=kind, layer_index=1)


def test_every_flag_reaches_its_component_config():
    from fairseq_sparse_attn.attention.config import (
        ActivationConfig,
        BackendConfig,
        BiasProviderConfig,
        HeadsConfig,
        LocalPhraseConfig,
        OutputNormConfig,
        RelativePositionConfig,
        RHEConfig,
    )
    from fairseq_sparse_attn.options.resolve import resolve

    ns = argparse.Namespace(
        attn_activation="entmax_bisect",
        cross_attn_activation="leaky_relu",
        attn_output_norm="rmsnorm",
        decoder_self_attn_output_norm="gated_rmsnorm",
        entmax_alpha=1.7,
        entmax_alpha_learned=True,
        entmax_bisect_iters=9,
        leaky_relu_slope=0.2,
        relu_scale_gamma=3.0,
        relu_no_length_scale=True,
        attn_norm_eps=1e-5,
        attn_backend="materialized",
        attn_key_block_size=64,
        attn_flex_min_keys=7,
        attn_init="rela_official",
        encoder_fixed_patterns="current,next",
        encoder_fixed_pattern_unit="word",
        encoder_right_context_reading="literal",
        encoder_fixed_patterns_exclude_eos=True,
        encoder_masked_heads="3,1",
        encoder_syntax_attention="lpea",
        lpea_max_distance=4,
        encoder_rel_pos_k=5,
        encoder_rel_pos_values=True,
        encoder_localness=True,
        encoder_bias_layers="1,2",
        rhe=True,
        rhe_gate="0.25",
        prune_redundant_heads=True,
        encoder_layers=3,
    )
    enc, dec, cross = (resolve(ns, "encoder_self", 1), resolve(ns, "decoder_self", 1), resolve(ns, "cross", 1))
    common = dict(
        entmax_alpha=1.7,
        entmax_alpha_learned=True,
        entmax_bisect_iters=9,
        leaky_relu_slope=0.2,
        relu_scale_gamma=3.0,
        relu_no_length_scale=True,
    )
    assert enc.activation == dec.activation == ActivationConfig("entmax_bisect", **common)
    assert cross.activation == ActivationConfig("leaky_relu", **common)
    assert enc.output_norm == cross.output_norm == OutputNormConfig("rmsnorm", 1e-5)
    assert dec.output_norm == OutputNormConfig("gated_rmsnorm", 1e-5)
    assert enc.backend == dec.backend == BackendConfig("materialized", 64, 7)
    assert enc.init == cross.init == "rela_official"
    assert enc.heads == HeadsConfig(("current", "next"), "word", "literal", True, (3, 1))
    assert enc.biases.providers == (
        ("lpea", LocalPhraseConfig(4)),
        ("rel_pos", RelativePositionConfig(5, True)),
        ("localness", BiasProviderConfig()),
    )
    assert enc.biases.rhe == RHEConfig(0.25, True, False)
    assert (enc.kind, enc.layer_index) == ("encoder_self", 1)
    # heads and biases are encoder self-attention's; layer 0 is not in --encoder-bias-layers
    assert dec.heads == cross.heads == HeadsConfig() and not dec.biases.providers and dec.biases.rhe is None
    layer0 = resolve(ns, "encoder_self", 0)
    assert layer0.biases.providers == () and layer0.biases.rhe is None and layer0.heads == enc.heads


def test_the_built_model_is_built_from_the_resolved_configs():
    from helpers import build_model

    model, _ = build_model(
        attn_activation="entmax_bisect",
        entmax_bisect_iters=9,
        attn_output_norm="rmsnorm",
        attn_norm_eps=1e-5,
        cross_attn_activation="leaky_relu",
        leaky_relu_slope=0.2,
        attn_key_block_size=64,
        encoder_masked_heads="1",
        encoder_localness=True,
    )
    modules = model.attention_modules()
    assert len(modules) == 2 + 2 * 2  # 2 encoder layers, 2 decoder layers (self + cross)
    for m in modules:
        assert m.output_norm.eps == 1e-5 and m.key_block_size == 64 and m.backend == "auto"
        if m.kind == "cross":
            assert m.activation.slope == 0.2 and m.masked_heads == ()
        else:
            assert m.activation.n_iter == 9
    encoder = [m for m in modules if m.kind == "encoder_self"]
    assert [m.layer_index for m in encoder] == [0, 1] and all(m.masked_heads == (1,) for m in encoder)
    assert list(encoder[0].biases) == ["localness"] and not encoder[1].biases  # --encoder-bias-layers 0
