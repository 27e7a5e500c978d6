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

Layers are 0-based: the paper's "first encoder layer" is layer 0.
"""

from typing import FrozenSet, Optional

from ..attention.options import _lookup
from ..attention.rhe import parse_gate

SYNTAX_ATTENTIONS = ("none", "dea", "lpea")

BIAS_DEFAULTS = dict(
    encoder_syntax_attention="none",
    lpea_max_distance=6,
    encoder_rel_pos_k=0,
    encoder_rel_pos_values=False,
    encoder_localness=False,
    encoder_bias_layers="0",
    rhe=False,
    rhe_gate="dynamic",
    prune_redundant_heads=False,
)


def fill_bias_defaults(args, **overrides):
    """Architecture helper: set missing bias/RHE args (``overrides`` first, then defaults);
    ``rhe_layers`` stays unset (= the bias layers)."""
    for name, value in {**BIAS_DEFAULTS, **overrides}.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)


def add_encoder_bias_args(parser):
    """Switches default to None (not False) so that presets can turn them on."""
    parser.add_argument("--encoder-syntax-attention", choices=SYNTAX_ATTENTIONS,
                        help="syntax-enhanced attention in the encoder self-attention of "
                             "--encoder-bias-layers: dea (dependency mask, needs src_dep) or lpea "
                             "(local-phrase bias, needs src_rp); both from --task "
                             "parse_annotated_translation (default none)")
    parser.add_argument("--lpea-max-distance", type=int, metavar="K",
                        help="LPEA: relative phrasal positions are clipped to [-K, K] (default 6)")
    parser.add_argument("--encoder-rel-pos-k", type=int, metavar="K",
                        help="Rel_Pos baseline (Shaw et al. 2018): relative position "
                             "representations of the keys with clipping distance K in "
                             "--encoder-bias-layers (default 0 = off)")
    parser.add_argument("--encoder-rel-pos-values", action="store_true", default=None,
                        help="Rel_Pos: also relative position representations of the values")
    parser.add_argument("--encoder-localness", action="store_true", default=None,
                        help="Localness baseline (Yang et al. 2018): learned Gaussian bias "
                             "in --encoder-bias-layers")
    parser.add_argument("--encoder-bias-layers", metavar="LAYERS",
                        help="0-based encoder layers that get the syntax attention / Rel_Pos / "
                             "Localness: comma-separated, or 'all' (default 0 = the paper's "
                             "first encoder layer)")
    parser.add_argument("--rhe", action="store_true", default=None,
                        help="redundant head enlivening: per sentence, only the heads found "
                             "redundant (Syn_attn <= Syn_gate) use the biased attention, the "
                             "others keep standard attention; needs src_dep")
    parser.add_argument("--rhe-layers", metavar="LAYERS",
                        help="0-based encoder layers with redundant head identification "
                             "(default: --encoder-bias-layers); a layer without a bias only "
                             "identifies (logged, and pruned with --prune-redundant-heads)")
    parser.add_argument("--rhe-gate", metavar="GATE",
                        help="Syn_gate of RHE: 'dynamic' = sigmoid(h_conf) (default) or a fixed "
                             "value in (0, 1]")
    parser.add_argument("--prune-redundant-heads", action="store_true", default=None,
                        help="zero the output of the heads identified redundant (test-time "
                             "pruning; at generation --model-overrides "
                             "\"{'prune_redundant_heads': True}\")")


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


def _get(cfg, name):
    value = _lookup(cfg, name)
    return BIAS_DEFAULTS.get(name) if value is None else value


def encoder_bias_options(cfg, layer_index: Optional[int]) -> dict:
    """Keyword arguments of :class:`SparseMultiheadAttention` for the self-attention of
    encoder layer ``layer_index``; raises ValueError for inconsistent flags."""
    syntax = _get(cfg, "encoder_syntax_attention")
    if syntax not in SYNTAX_ATTENTIONS:
        raise ValueError(f"--encoder-syntax-attention must be one of {', '.join(SYNTAX_ATTENTIONS)}, "
                         f"got {syntax!r}")
    rel_k = int(_get(cfg, "encoder_rel_pos_k"))
    if rel_k < 0:
        raise ValueError(f"--encoder-rel-pos-k must be >= 0, got {rel_k}")
    if _get(cfg, "encoder_rel_pos_values") and not rel_k:
        raise ValueError("--encoder-rel-pos-values needs --encoder-rel-pos-k K >= 1")
    if int(_get(cfg, "lpea_max_distance")) < 0:
        raise ValueError(f"--lpea-max-distance must be >= 0, got {_get(cfg, 'lpea_max_distance')}")
    names = ([syntax] if syntax != "none" else []) + (["rel_pos"] if rel_k else []) \
        + (["localness"] if _get(cfg, "encoder_localness") else [])

    num_layers = int(_lookup(cfg, "encoder_layers"))
    bias_layers = parse_layer_list(_get(cfg, "encoder_bias_layers"), num_layers, "--encoder-bias-layers")
    rhe = bool(_get(cfg, "rhe"))
    rhe_spec = _lookup(cfg, "rhe_layers")
    if rhe_spec is not None and not rhe:
        raise ValueError("--rhe-layers needs --rhe")
    rhe_layers = (parse_layer_list(rhe_spec, num_layers, "--rhe-layers") if rhe_spec is not None
                  else bias_layers if rhe else frozenset())
    prune = bool(_get(cfg, "prune_redundant_heads"))
    if prune and not rhe:
        raise ValueError("--prune-redundant-heads needs --rhe (the heads to prune are the ones "
                         "RHE identifies as redundant)")
    gate = parse_gate(_get(cfg, "rhe_gate"))

    layer_biases = tuple(names) if layer_index in bias_layers else ()
    layer_rhe = layer_index in rhe_layers
    if layer_index is None and (names or rhe):
        raise ValueError("attention biases / RHE need the encoder layer index (build the layer "
                         "through SparseTransformerEncoder)")
    return dict(biases=layer_biases, rhe=layer_rhe, rhe_gate=gate,
                prune_redundant_heads=prune and layer_rhe, layer_index=layer_index)
