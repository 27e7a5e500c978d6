"""Flags -> configs: the options as set (:func:`plugin_options`: from an argparse Namespace,
a fairseq ``TransformerConfig``, a DictConfig or any object; missing or None values take
the defaults of :mod:`.schema`), and the typed configuration of one attention module
(:func:`resolve`, called when the model builds its layers): an
:class:`~fairseq_sparse_attn.attention.config.AttentionConfig` with one frozen dataclass per
component (activation, output norm, heads, bias providers and RHE, backend).  The
components read only their own config, never the namespace.
"""

from typing import Callable, Dict, Optional

from ..attention.config import (
    ActivationConfig,
    AttentionConfig,
    BackendConfig,
    BiasesConfig,
    BiasProviderConfig,
    HeadsConfig,
    LocalPhraseConfig,
    OutputNormConfig,
    RelativePositionConfig,
    RHEConfig,
)
from .cli import parse_head_list, parse_layer_list, parse_pattern_list
from .schema import OPTION_FIELDS, PluginOptions


def _read(cfg, name):
    """``cfg.name`` from a Namespace, DictConfig, fairseq TransformerConfig (which raises
    AttributeError for names it does not know) or any object; None when absent."""
    if cfg is None:
        return None
    try:
        return getattr(cfg, name, None)
    except AttributeError:
        return None


def plugin_options(cfg=None) -> PluginOptions:
    """The plugin's options as set in ``cfg`` (None or missing = the default)."""
    if isinstance(cfg, PluginOptions):
        return cfg
    values = {}
    for name in OPTION_FIELDS:
        value = _read(cfg, name)
        if value is not None:
            values[name] = value
    return PluginOptions(**values)


SYNTAX_ATTENTIONS = ("none", "dea", "lpea")


def _relative_position(opts: PluginOptions) -> Optional[RelativePositionConfig]:
    k = int(opts.encoder_rel_pos_k)
    if k < 0:
        raise ValueError(f"--encoder-rel-pos-k must be >= 0, got {opts.encoder_rel_pos_k}")
    if opts.encoder_rel_pos_values and not k:
        raise ValueError("--encoder-rel-pos-values needs --encoder-rel-pos-k K >= 1")
    return RelativePositionConfig(k, bool(opts.encoder_rel_pos_values)) if k else None


def _local_phrase(opts: PluginOptions) -> Optional[LocalPhraseConfig]:
    config = LocalPhraseConfig(int(opts.lpea_max_distance))  # checks the distance
    return config if opts.encoder_syntax_attention == "lpea" else None


#: bias provider name (:mod:`.attention.biases`) -> its config from the options, or None
#: when the options do not select it; every entry runs (and checks its flags) whether
#: selected or not.  The order is the order the biases are added to the scores.
BIAS_PROVIDER_CONFIGS: Dict[str, Callable[[PluginOptions], Optional[BiasProviderConfig]]] = {
    "dea": lambda o: BiasProviderConfig() if o.encoder_syntax_attention == "dea" else None,
    "lpea": _local_phrase,
    "rel_pos": _relative_position,
    "localness": lambda o: BiasProviderConfig() if o.encoder_localness else None,
}


def encoder_biases_config(opts: PluginOptions, num_layers: int, layer_index: Optional[int]) -> BiasesConfig:
    """The bias providers and RHE of the self-attention of encoder layer ``layer_index``
    (docs/rhe.md; layers are 0-based, the paper's "first encoder layer" is layer 0);
    raises ValueError for inconsistent flags."""
    from ..attention.rhe import parse_gate

    syntax = opts.encoder_syntax_attention
    if syntax not in SYNTAX_ATTENTIONS:
        raise ValueError(f"--encoder-syntax-attention must be one of {', '.join(SYNTAX_ATTENTIONS)}, got {syntax!r}")
    providers = []
    for name, resolve_provider in BIAS_PROVIDER_CONFIGS.items():
        config = resolve_provider(opts)
        if config is not None:
            providers.append((name, config))
    bias_layers = parse_layer_list(opts.encoder_bias_layers, num_layers, "--encoder-bias-layers")
    rhe = bool(opts.rhe)
    rhe_spec = opts.rhe_layers
    if rhe_spec is not None and not rhe:
        raise ValueError("--rhe-layers needs --rhe")
    rhe_layers = (
        parse_layer_list(rhe_spec, num_layers, "--rhe-layers")
        if rhe_spec is not None
        else bias_layers
        if rhe
        else frozenset()
    )
    prune = bool(opts.prune_redundant_heads)
    if prune and not rhe:
        raise ValueError(
            "--prune-redundant-heads needs --rhe (the heads to prune are the ones RHE identifies as redundant)"
        )
    skip_in_training = bool(opts.prune_skip_in_training)
    if skip_in_training and not prune:
        raise ValueError("--prune-skip-in-training needs --prune-redundant-heads")
    gate = parse_gate(opts.rhe_gate)
    if layer_index is None and (providers or rhe):
        raise ValueError(
            "attention biases / RHE need the encoder layer index (build the layer through SparseTransformerEncoder)"
        )
    layer_rhe = RHEConfig(gate, prune, skip_in_training) if layer_index in rhe_layers else None
    return BiasesConfig(providers=tuple(providers) if layer_index in bias_layers else (), rhe=layer_rhe)


def encoder_heads_config(opts: PluginOptions) -> HeadsConfig:
    """Fixed patterns (Raganato et al. 2020) and masked heads of encoder self-attention."""
    return HeadsConfig(
        fixed_patterns=parse_pattern_list(opts.encoder_fixed_patterns),
        fixed_pattern_unit=opts.encoder_fixed_pattern_unit,
        right_context_reading=opts.encoder_right_context_reading,
        fixed_patterns_exclude_eos=bool(opts.encoder_fixed_patterns_exclude_eos),
        masked_heads=parse_head_list(opts.encoder_masked_heads),
    )


def activation_config(opts: PluginOptions, kind: str) -> ActivationConfig:
    return ActivationConfig(
        name=opts.attention_kind(kind)[0],
        entmax_alpha=float(opts.entmax_alpha),
        entmax_alpha_learned=bool(opts.entmax_alpha_learned),
        entmax_bisect_iters=int(opts.entmax_bisect_iters),
        leaky_relu_slope=float(opts.leaky_relu_slope),
        relu_scale_gamma=float(opts.relu_scale_gamma),
        relu_no_length_scale=bool(opts.relu_no_length_scale),
    )


def output_norm_config(opts: PluginOptions, kind: str) -> OutputNormConfig:
    return OutputNormConfig(name=opts.attention_kind(kind)[1], eps=float(opts.attn_norm_eps))


def backend_config(opts: PluginOptions) -> BackendConfig:
    return BackendConfig(
        name=opts.attn_backend,
        key_block_size=int(opts.attn_key_block_size or 0),
        flex_min_keys=int(opts.attn_flex_min_keys or 0),
    )


def resolve(cfg, kind: str, layer_index: Optional[int] = None) -> AttentionConfig:
    """The configuration of the ``kind`` attention of layer ``layer_index`` (0-based) from
    ``cfg`` (a Namespace, fairseq ``TransformerConfig``, DictConfig, :class:`PluginOptions`
    or None = the defaults).  Fixed patterns, masked heads, bias providers and RHE are
    encoder self-attention's (without ``cfg.encoder_layers`` the layer lists are read as
    if ``layer_index`` were the last layer); raises ValueError for inconsistent flags."""
    opts = plugin_options(cfg)
    heads, biases = HeadsConfig(), BiasesConfig()
    if kind == "encoder_self":
        heads = encoder_heads_config(opts)
        num_layers = _read(cfg, "encoder_layers")
        num_layers = int(num_layers) if num_layers is not None else (layer_index or 0) + 1
        biases = encoder_biases_config(opts, num_layers, layer_index)
    return AttentionConfig(
        kind=kind,
        layer_index=layer_index,
        activation=activation_config(opts, kind),
        output_norm=output_norm_config(opts, kind),
        heads=heads,
        biases=biases,
        backend=backend_config(opts),
        init=opts.attn_init,
    )
