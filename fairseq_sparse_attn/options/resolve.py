"""Flags -> configs: the options as set (:func:`plugin_options`: from an argparse Namespace,
a fairseq ``TransformerConfig``, a DictConfig or any object; missing or None values take
the defaults of :mod:`.schema`), and the typed configuration of one attention module
(:func:`resolve`, called when the model builds its layers): an
:class:`~fairseq_sparse_attn.attention.config.AttentionConfig` with one frozen dataclass per
component (activation, output norm, heads, bias providers and RHE, backend).  The
components read only their own config, never the namespace.
"""

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

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
from ..errors import UsageError
from .cli import parse_head_list, parse_layer_list, parse_pattern_list
from .schema import ATTENTION_KINDS, FFN_TYPES, OPTION_FIELDS, RANGES, PluginOptions


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


#: the choices of --encoder-syntax-attention, as the schema declares them
SYNTAX_ATTENTIONS = tuple(OPTION_FIELDS["encoder_syntax_attention"].metadata["choices"])


def _relative_position(opts: PluginOptions) -> Optional[RelativePositionConfig]:
    k = int(opts.encoder_rel_pos_k)  # >= 0: its range, checked by check_ranges
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


def encoder_heads_config(opts: PluginOptions, num_heads: Optional[int] = None) -> HeadsConfig:
    """Fixed patterns (Raganato et al. 2020) and masked heads of encoder self-attention;
    with ``num_heads`` (the encoder's heads per layer) the patterns must fit and the masked
    heads exist.  Raises ValueError naming the flag."""
    value = opts.encoder_fixed_patterns
    try:
        patterns = parse_pattern_list(value)
    except (ValueError, TypeError) as e:
        raise ValueError(f"--encoder-fixed-patterns {value}: {e}") from None
    if num_heads and len(patterns) > num_heads:
        raise ValueError(
            f"--encoder-fixed-patterns {value}: {len(patterns)} fixed patterns do not "
            f"fit in --encoder-attention-heads {num_heads}"
        )
    value = opts.encoder_masked_heads
    try:
        masked = parse_head_list(value)
    except ValueError as e:
        raise ValueError(f"--mask-encoder-heads / encoder_masked_heads: {e}") from None
    bad = [h for h in masked if not 0 <= h < (num_heads or 0)]
    if num_heads and bad:
        raise ValueError(
            f"--mask-encoder-heads {value}: head {bad[0]} is out of range, the "
            f"encoder has {num_heads} heads per layer (0..{num_heads - 1})"
        )
    return HeadsConfig(
        fixed_patterns=patterns,
        fixed_pattern_unit=opts.encoder_fixed_pattern_unit,
        right_context_reading=opts.encoder_right_context_reading,
        fixed_patterns_exclude_eos=bool(opts.encoder_fixed_patterns_exclude_eos),
        masked_heads=masked,
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


# ---------------------------------------------------------------- the whole model, once
@dataclass(frozen=True)
class ModelConfig:
    """The model's whole configuration, resolved once from the flags when the model is
    built (:func:`resolve_model`): the typed config of every attention module, the FFN
    variant and how the encoder reads words.  The model's parts take theirs from here and
    never read the flags."""

    #: encoder self-attention, one config per encoder layer (biases and RHE are per layer)
    encoder_self: Tuple[AttentionConfig, ...]
    decoder_self: AttentionConfig
    cross: AttentionConfig
    #: fixed patterns and masked heads of every encoder layer (also with no encoder layer)
    encoder_heads: HeadsConfig
    #: the bias providers the flags select (:data:`BIAS_PROVIDER_CONFIGS` order), whichever
    #: layers they are in, and the flags that selected the syntax ones
    bias_providers: Tuple[str, ...]
    syntax_attention: str
    rhe: bool
    ffn_type: str
    subword_style: str

    def attention(self, kind: str, layer_index: Optional[int] = None) -> AttentionConfig:
        """The config of the ``kind`` attention (of encoder layer ``layer_index``)."""
        if kind == "encoder_self":
            if layer_index is None:
                raise ValueError("encoder self-attention is configured per layer: give its layer_index")
            return self.encoder_self[layer_index]
        return self.decoder_self if kind == "decoder_self" else self.cross


def _divisor_near(dim, heads):
    return min((h for h in range(1, dim + 1) if dim % h == 0), key=lambda h: (abs(h - heads), h))


def check_ranges(cfg) -> None:
    """Every numeric option with a declared range (:data:`.schema.RANGES`: the plugin's
    options and fairseq's transformer sizes and dropouts), then embed dims divisible by
    their heads; UsageError naming the flag."""
    for name, valid in RANGES.items():
        value = _read(cfg, name)
        if value is None or isinstance(value, bool):
            continue
        if not isinstance(value, (int, float)) or value != value or value not in valid:
            raise UsageError(f"--{name.replace('_', '-')} {value}: must be {valid}")
    for side in ("encoder", "decoder"):
        dim = _read(cfg, f"{side}_embed_dim")
        heads = _read(cfg, f"{side}_attention_heads")
        if dim and heads and dim % heads:
            raise UsageError(
                f"--{side}-embed-dim {dim} is not divisible by --{side}-attention-"
                f"heads {heads}: each head gets embed_dim / heads dimensions (e.g. "
                f"--{side}-attention-heads {_divisor_near(dim, heads)})"
            )


def _number(cfg, name, default):
    value = _read(cfg, name)
    return default if value is None else value


def encoder_layer_count(cfg) -> int:
    """The encoder layers the model builds: ``--encoder-layers``, or as many as
    ``--encoder-layers-to-keep`` names (fairseq's build_model does the same)."""
    keep = _read(cfg, "encoder_layers_to_keep")
    if keep:
        return len(str(keep).split(","))
    return int(_number(cfg, "encoder_layers", 0))


def resolve_model(cfg) -> ModelConfig:
    """The model's configuration from ``cfg`` (the model's flags: a Namespace, fairseq
    ``TransformerConfig`` or any object), resolved once, at model build, before any module
    is built.  Every check of the flags is here, and each bound is the one declared with the
    option; raises :class:`~fairseq_sparse_attn.errors.UsageError` (one line naming the
    flag) for the first problem."""
    from ..attention.activations import ACTIVATION_REGISTRY, build_activation

    check_ranges(cfg)
    opts = plugin_options(cfg)
    if opts.ffn_type not in FFN_TYPES:
        raise UsageError(f"unknown --ffn-type {opts.ffn_type!r}; valid values: {', '.join(FFN_TYPES)}")
    heads = {  # cross-attention is the decoder's: fairseq builds it with the decoder's heads
        kind: int(_number(cfg, f"{'encoder' if kind == 'encoder_self' else 'decoder'}_attention_heads", 1))
        for kind in ATTENTION_KINDS
    }
    activations = {kind: activation_config(opts, kind) for kind in ATTENTION_KINDS}
    built = {}
    for kind, activation in activations.items():  # conditional ranges: a learned entmax alpha in (1, 2)
        built[kind] = _usage(build_activation, activation, heads[kind])
    num_layers = encoder_layer_count(cfg)
    biases = [_usage(encoder_biases_config, opts, num_layers, i) for i in range(num_layers)]
    encoder_heads = _usage(encoder_heads_config, opts, int(_number(cfg, "encoder_attention_heads", 0)))
    backend = backend_config(opts)
    dropout = _number(cfg, "attention_dropout", 0.0)
    chunked = [k for k, a in activations.items() if ACTIVATION_REGISTRY.get_or_raise(a.name).supports_chunking]
    if backend.key_block_size and backend.name not in ("auto", "key_block"):
        raise UsageError(
            f"--attn-key-block-size {backend.key_block_size} takes effect with --attn-backend auto or key_block, "
            f"not {backend.name} (which would ignore it): drop one of the two flags (for a trained checkpoint: "
            "--model-overrides \"{'attn_key_block_size': 0}\")"
        )
    if backend.key_block_size and dropout > 0 and chunked:
        raise UsageError(
            f"--attn-key-block-size {backend.key_block_size} needs --attention-dropout 0 (got "
            f"{dropout}): the key-block path cannot replay a dropout mask"
        )

    if backend.name != "auto":
        check_named_backend(cfg, backend.name, built, heads, encoder_heads, biases)

    def attention(kind, layer_index=None, heads=HeadsConfig(), biases=BiasesConfig()):  # noqa: B008
        return AttentionConfig(
            kind=kind,
            layer_index=layer_index,
            activation=activations[kind],
            output_norm=output_norm_config(opts, kind),
            heads=heads,
            biases=biases,
            backend=backend,
            init=opts.attn_init,
        )

    return ModelConfig(
        encoder_self=tuple(attention("encoder_self", i, encoder_heads, biases[i]) for i in range(num_layers)),
        decoder_self=attention("decoder_self"),
        cross=attention("cross"),
        encoder_heads=encoder_heads,
        bias_providers=tuple(name for name, select in BIAS_PROVIDER_CONFIGS.items() if select(opts) is not None),
        syntax_attention=opts.encoder_syntax_attention,
        rhe=bool(opts.rhe),
        ffn_type=opts.ffn_type,
        subword_style=opts.encoder_subword_style,
    )


def check_named_backend(cfg, name, activations, heads, encoder_heads, biases) -> None:
    """UsageError, when the model is built, for a named ``--attn-backend`` that can serve no
    call of some attention module for what its configuration fixes (the activation, the
    head dim, fixed or masked heads, RHE, bias providers): the same reasons its first call
    would give, before any data is read (``attention.core.static_refusals``)."""
    from ..attention import backends  # noqa: F401  (registers them)
    from ..attention.core import auto_remedy, backend_names, static_refusals

    if name not in backend_names():
        return  # refused with the list of names where the modules are built
    dims = {
        "encoder_self": _number(cfg, "encoder_embed_dim", 0),
        "decoder_self": _number(cfg, "decoder_embed_dim", 0),
        "cross": _number(cfg, "decoder_embed_dim", 0),
    }
    modules = [("decoder self-attention", "decoder_self", HeadsConfig(), BiasesConfig())]
    modules.append(("cross-attention", "cross", HeadsConfig(), BiasesConfig()))
    modules += [(f"encoder layer {i} self-attention", "encoder_self", encoder_heads, b) for i, b in enumerate(biases)]
    for what, kind, module_heads, module_biases in modules:
        dim, count = int(dims[kind] or 0), heads[kind]
        reasons = static_refusals(
            name,
            activations[kind],
            dim // count if dim and count and dim % count == 0 else None,
            given_heads=bool(module_heads.fixed_patterns),
            head_selection=bool(module_heads.masked_heads) or module_biases.rhe is not None,
            bias_providers=bool(module_biases.providers),
        )
        if reasons:
            raise UsageError(
                f"attention backend {name!r} (--attn-backend) cannot serve the {what}: {', '.join(reasons)}; "
                f"{auto_remedy(True)}"
            )


def _usage(function, *args):
    """``function(*args)``, its ValueError as a UsageError (the message names the flag)."""
    try:
        return function(*args)
    except ValueError as e:
        if isinstance(e, UsageError):
            raise
        raise UsageError(str(e)) from None
