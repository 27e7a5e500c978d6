"""The plugin's options dataclass: the flags users type (names, preset defaults) are the
ones listed here by hand, the per-kind resolution, and reading from every config type."""

import argparse

import pytest

import fairseq_sparse_attn.plugin  # noqa: F401  (registers everything)
from fairseq_sparse_attn.options import PluginOptions, add_plugin_args, fill_defaults, plugin_options

# flag -> the default a preset fills in (None: left unset, the reader's default applies)
EXPECTED = {
    "--attn-activation": "softmax", "--attn-output-norm": "none",
    "--encoder-self-attn-activation": None, "--encoder-self-attn-output-norm": None,
    "--decoder-self-attn-activation": None, "--decoder-self-attn-output-norm": None,
    "--cross-attn-activation": None, "--cross-attn-output-norm": None,
    "--entmax-alpha": 1.5, "--entmax-alpha-learned": False, "--entmax-bisect-iters": 50,
    "--leaky-relu-slope": 0.01, "--attn-norm-eps": 1e-8, "--relu-scale-gamma": 1.0,
    "--attn-key-block-size": None, "--attn-init": "fairseq", "--relu-no-length-scale": False,
    "--attn-backend": None, "--attn-flex-min-keys": None, "--ffn-type": None,
    "--encoder-fixed-patterns": "none", "--encoder-fixed-pattern-unit": "token",
    "--encoder-right-context-reading": "mirrored", "--encoder-fixed-patterns-exclude-eos": False,
    "--encoder-subword-style": "bpe", "--encoder-masked-heads": "",
    "--encoder-syntax-attention": "none", "--lpea-max-distance": 6, "--encoder-rel-pos-k": 0,
    "--encoder-rel-pos-values": False, "--encoder-localness": False, "--encoder-bias-layers": "0",
    "--rhe": False, "--rhe-layers": None, "--rhe-gate": "dynamic", "--prune-redundant-heads": False,
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
    ns = argparse.Namespace(attn_activation="relu", cross_attn_activation="softmax",
                            decoder_self_attn_output_norm="rmsnorm", encoder_rel_pos_k=None)
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
