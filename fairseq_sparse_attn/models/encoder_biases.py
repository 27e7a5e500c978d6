"""Flags of the encoder self-attention biases and of redundant head enlivening (RHE), and
their resolution per encoder layer.  See docs/rhe.md.

    --encoder-syntax-attention {none,dea,lpea}   syntax-enhanced attention (SEA)
    --lpea-max-distance K                        LPEA clipping distance k (default 6)
    --encoder-rel-pos-k K                        Rel_Pos (Shaw et al.) with clipping k (0 = off)
    --encoder-rel-pos-values                     Rel_Pos also on the values
    --encoder-localness                          Gaussian localness bias (Yang et al.)
    --encoder-bias-layers LAYERS                 encoder layers that get the above (default 0)
    --rhe                                        in those layers, only redundant heads get it
    --rhe-layers LAYERS                          layers with RHE (default: the bias layers)
    --rhe-gate {dynamic,G}                       Syn_gate: sigmoid(h_conf) or a constant
    --prune-redundant-heads                      zero the redundant heads' output (test time)
    --prune-skip-in-training                     skip the pruned heads also in training

Layers are 0-based: the paper's "first encoder layer" is layer 0.
"""

from typing import FrozenSet, Optional

from ..attention.biases import BIAS_REGISTRY
from ..attention.rhe import parse_gate
from ..options import plugin_options

SYNTAX_ATTENTIONS = ("none", "dea", "lpea")


def parse_layer_list(value, num_layers: int, flag: str) -> FrozenSet[int]:
    """``"all"``, ``""``/``"none"`` or comma-separated 0-based layer indices."""
    if value is None:
        return frozenset()
    if not isinstance(value, str):
        value = ",".join(str(v) for v in value)
    value = value.strip()
    if value.lower() == "all":
        return frozenset(range(num_layers))
    if value.lower() in ("", "none"):
        return frozenset()
    try:
        layers = frozenset(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"{flag}: expected 'all' or comma-separated 0-based layer indices "
                         f"such as '0,1', got {value!r}") from None
    bad = sorted(i for i in layers if not 0 <= i < num_layers)
    if bad:
        raise ValueError(f"{flag}: layer {bad[0]} out of range, the encoder has {num_layers} "
                         f"layers (0..{num_layers - 1})")
    return layers


def encoder_bias_options(cfg, layer_index: Optional[int]) -> dict:
    """Keyword arguments of :class:`SparseMultiheadAttention` for the self-attention of
    encoder layer ``layer_index``; raises ValueError for inconsistent flags."""
    opts = plugin_options(cfg)
    syntax = opts.encoder_syntax_attention
    if syntax not in SYNTAX_ATTENTIONS:
        raise ValueError(f"--encoder-syntax-attention must be one of {', '.join(SYNTAX_ATTENTIONS)}, "
                         f"got {syntax!r}")
    # every registered provider checks its options and says whether they select it
    # (registration order: dea, lpea, rel_pos, localness, then plugins')
    for provider in BIAS_REGISTRY.values():
        provider.check_options(opts)
    names = [name for name, provider in BIAS_REGISTRY.items() if provider.selected(opts)]

    num_layers = int(cfg.encoder_layers)
    bias_layers = parse_layer_list(opts.encoder_bias_layers, num_layers, "--encoder-bias-layers")
    rhe = bool(opts.rhe)
    rhe_spec = opts.rhe_layers
    if rhe_spec is not None and not rhe:
        raise ValueError("--rhe-layers needs --rhe")
    rhe_layers = (parse_layer_list(rhe_spec, num_layers, "--rhe-layers") if rhe_spec is not None
                  else bias_layers if rhe else frozenset())
    prune = bool(opts.prune_redundant_heads)
    if prune and not rhe:
        raise ValueError("--prune-redundant-heads needs --rhe (the heads to prune are the ones "
                         "RHE identifies as redundant)")
    skip_in_training = bool(opts.prune_skip_in_training)
    if skip_in_training and not prune:
        raise ValueError("--prune-skip-in-training needs --prune-redundant-heads")
    gate = parse_gate(opts.rhe_gate)

    layer_biases = tuple(names) if layer_index in bias_layers else ()
    layer_rhe = layer_index in rhe_layers
    if layer_index is None and (names or rhe):
        raise ValueError("attention biases / RHE need the encoder layer index (build the layer "
                         "through SparseTransformerEncoder)")
    return dict(biases=layer_biases, rhe=layer_rhe, rhe_gate=gate,
                prune_redundant_heads=prune and layer_rhe,
                prune_skip_in_training=skip_in_training and layer_rhe, layer_index=layer_index)
