"""Every option of the plugin in one typed dataclass, :class:`PluginOptions`.

Each field carries its default (what the architecture presets fill in), its help text,
its choices and its flag spelling; from it come

* the argparse flags (:func:`add_plugin_args`, called by ``sparse_transformer.add_args``),
* the preset defaults (:func:`fill_defaults`, called by every architecture),
* the options as set (:func:`plugin_options`: from an argparse Namespace, a fairseq
  ``TransformerConfig``, a DictConfig or any object; missing or None values take the
  defaults),
* the typed configuration of one attention module (:func:`resolve`, called when the
  model builds its layers): an :class:`~.attention.config.AttentionConfig` with one
  frozen dataclass per component (activation, output norm, heads, bias providers and RHE,
  backend).  The components read only their own config, never the namespace.

Adding an option = adding one field here.  Flags have no argparse defaults (fairseq's
convention: the architecture fills them, so a preset can change a default and the
command line still overrides it); switches default to None for the same reason, except
the two that always defaulted to False.
"""

import re
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, FrozenSet, Optional, Sequence, Union

from .attention.config import (
    ATTENTION_KINDS,
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

#: the ``--ffn-type`` variants (implemented in models/ffn.py, which reads them from here)
FFN_TYPES = ("standard", "softmax", "softmax_layernorm")

_KIND_WHAT = {
    "encoder_self": "encoder self-attention",
    "decoder_self": "decoder self-attention",
    "cross": "encoder-decoder (cross) attention",
}


@dataclass(frozen=True)
class Range:
    """The values a numeric option accepts: ``low`` / ``high`` bounds (None = unbounded),
    each inclusive unless ``low_open`` / ``high_open``."""

    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return False
        return True

    def __str__(self):
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.low is None:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"


POSITIVE = Range(0, low_open=True)
NON_NEGATIVE = Range(0)


def option(
    default,
    help: str,
    *,
    choices: Union[Sequence, Callable, None] = None,
    metavar: Optional[str] = None,
    type=None,
    switch: bool = False,
    switch_default=None,
    preset: bool = True,
    valid: Optional[Range] = None,
):
    """A field of :class:`PluginOptions`.

    help: may contain ``{choices}`` (the choices, comma-separated) and other ``{name}``
        fields of :func:`_help_values`
    choices: a sequence, or a function returning one (registries, read when the flags
        are added, so that plugins registered later are listed)
    switch: ``action="store_true"`` with argparse default ``switch_default``
    preset: False = the presets do not write the default into the args (the field's
        default still applies when the option is read)
    valid: the values a numeric option accepts (checked when the model is built,
        ``validation.check_option_ranges``)
    """
    meta = dict(
        help=help,
        choices=choices,
        metavar=metavar,
        type=type,
        switch=switch,
        switch_default=switch_default,
        preset=preset,
        valid=valid,
    )
    return field(default=default, metadata=meta)  # noqa: B008


def _activations():
    from .attention.activations import activation_names

    return activation_names()


def _output_norms():
    from .attention.output_norms import output_norm_names

    return output_norm_names()


def _backends():
    from .attention.core import backend_names

    return backend_names()


def _help_values():
    from .attention.fixed_patterns import PATTERN_SETS, PATTERNS

    return dict(
        pattern_sets=", ".join(f"{k} = {'+'.join(v)}" for k, v in PATTERN_SETS.items()), patterns=", ".join(PATTERNS)
    )


def _kind_fields():
    out = {}
    for kind, what in _KIND_WHAT.items():
        out[f"{kind}_attn_activation"] = option(
            None,
            f"activation of the {what} (overrides --attn-activation)",
            choices=_activations,
            metavar="NAME",
            preset=False,
        )
        out[f"{kind}_attn_output_norm"] = option(
            None,
            f"output norm of the {what} (overrides --attn-output-norm)",
            choices=_output_norms,
            metavar="NAME",
            preset=False,
        )
    return out


@dataclass
class PluginOptions:
    # ---------------------------------------------------------------- attention core
    attn_activation: str = option(
        "softmax", "attention activation for all kinds: {choices}", choices=_activations, metavar="NAME"
    )
    attn_output_norm: str = option(
        "none", "norm on the concatenated heads for all kinds: {choices}", choices=_output_norms, metavar="NAME"
    )
    encoder_self_attn_activation: Optional[str] = _kind_fields()["encoder_self_attn_activation"]
    encoder_self_attn_output_norm: Optional[str] = _kind_fields()["encoder_self_attn_output_norm"]
    decoder_self_attn_activation: Optional[str] = _kind_fields()["decoder_self_attn_activation"]
    decoder_self_attn_output_norm: Optional[str] = _kind_fields()["decoder_self_attn_output_norm"]
    cross_attn_activation: Optional[str] = _kind_fields()["cross_attn_activation"]
    cross_attn_output_norm: Optional[str] = _kind_fields()["cross_attn_output_norm"]
    entmax_alpha: float = option(
        1.5,
        "alpha of entmax_bisect (default 1.5); initial value when learned",
        type=float,
        metavar="A",
        valid=Range(1, low_open=True),
    )
    entmax_alpha_learned: bool = option(
        False,
        "entmax_bisect: learn alpha per head, alpha = 1 + sigmoid(a) (adaptively sparse transformers)",
        switch=True,
        switch_default=False,
    )
    entmax_bisect_iters: int = option(
        50, "bisection iterations of entmax_bisect (default 50)", type=int, metavar="N", valid=Range(1)
    )
    leaky_relu_slope: float = option(
        0.01,
        "negative slope of the leaky_relu activation (default 0.01)",
        type=float,
        metavar="S",
        valid=Range(0, 1, high_open=True),
    )
    attn_norm_eps: float = option(
        1e-8, "epsilon inside RMS of the (gated) RMSNorm (default 1e-8)", type=float, metavar="EPS", valid=POSITIVE
    )
    relu_scale_gamma: float = option(
        1.0,
        "relu_scaled: gamma of the variance reduction factor gamma*sqrt(n/2) (default 1.0)",
        type=float,
        metavar="G",
        valid=POSITIVE,
    )
    attn_key_block_size: int = option(
        0,
        "relu / relu_scaled: memory-bounded attention that streams over blocks of N keys and "
        "recomputes them in backward (0 = off); needs --attention-dropout 0; returns no "
        "attention weights",
        type=int,
        metavar="N",
        preset=False,
        valid=NON_NEGATIVE,
    )
    attn_flex_min_keys: int = option(
        1024,
        "relu / relu_scaled with --attn-backend auto: attention over at least N keys takes a "
        "long-sequence backend: the fused FlexAttention kernel only on devices where a recorded "
        "benchmark measured it faster (none yet), without gradients the query-block path; 0 = neither "
        "unless named by --attn-backend (default 1024)",
        type=int,
        metavar="N",
        preset=False,
        valid=NON_NEGATIVE,
    )
    attn_init: str = option(
        "fairseq",
        "q/k/v initialisation: fairseq (default; xavier gain 1/sqrt(2) wherever q, k, v "
        "have the model's dimension, cross-attention included, biases nn.Linear's) or "
        "rela_official (ReLA's code: cross-attention q/k/v xavier gain 1, all q/k/v biases 0)",
        choices=("fairseq", "rela_official"),
    )
    relu_no_length_scale: bool = option(
        False,
        "relu_scaled: drop the factor gamma*sqrt(n/2) (ReLUFormer Table 5 ablation)",
        switch=True,
        switch_default=False,
    )
    attn_backend: str = option(
        "auto",
        "how attention is computed (docs/architecture.md): auto (default: the first "
        "backend that serves the configuration; stock softmax stays fairseq's) or one of "
        "{choices} (an error when it cannot serve the configuration)",
        choices=_backends,
        metavar="NAME",
        preset=False,
    )
    # ---------------------------------------------------------------- feed-forward
    ffn_type: str = option(
        "standard",
        "feed-forward variant: standard (fairseq, --activation-fn), softmax "
        "(key-value memory), softmax_layernorm (default standard)",
        choices=FFN_TYPES,
        metavar="TYPE",
        preset=False,
    )
    # ---------------------------------------------------------------- encoder heads
    encoder_fixed_patterns: str = option(
        "none",
        "fixed (non-learned) heads of every encoder layer, the first heads of "
        "--encoder-attention-heads: none (default), 7F, 8F ({pattern_sets}), or comma-separated "
        "names from {patterns}; the remaining heads are learned",
        metavar="PATTERNS",
    )
    encoder_fixed_pattern_unit: str = option(
        "token",
        "fixed patterns over tokens (default) or over words (all pieces of a word share their weights)",
        choices=("token", "word"),
    )
    encoder_right_context_reading: str = option(
        "mirrored",
        "fixed pattern right_context: mirrored (mirror image of left_context, largest "
        "weight at i+2; default) or literal (the paper's f over i+2..n, largest weight at the end "
        "of the sentence)",
        choices=("mirrored", "literal"),
    )
    encoder_fixed_patterns_exclude_eos: bool = option(
        False,
        "fixed patterns over the sentence without its EOS: no token gives EOS weight, EOS "
        "attends to itself (default: EOS is a position)",
        switch=True,
    )
    encoder_subword_style: str = option(
        "bpe",
        "how word boundaries are read from the source dictionary for word patterns: bpe "
        "(subword-nmt '@@' continuation, default) or sentencepiece ('\u2581' word start)",
        choices=("bpe", "sentencepiece"),
    )
    encoder_masked_heads: str = option(
        "",
        "comma-separated 0-based encoder self-attention head indices whose output is zeroed "
        "in every encoder layer (test-time ablation; set at generation with fsa-generate "
        "--mask-encoder-heads or --model-overrides \"{{'encoder_masked_heads': '0,7'}}\")",
        metavar="HEADS",
    )
    # ---------------------------------------------------------------- encoder biases, RHE
    encoder_syntax_attention: str = option(
        "none",
        "syntax-enhanced attention in the encoder self-attention of --encoder-bias-layers: "
        "dea (dependency mask, needs src_dep) or lpea (local-phrase bias, needs src_rp); both "
        "from --task parse_annotated_translation (default none)",
        choices=("none", "dea", "lpea"),
    )
    lpea_max_distance: int = option(
        6,
        "LPEA: relative phrasal positions are clipped to [-K, K] (default 6)",
        type=int,
        metavar="K",
        valid=NON_NEGATIVE,
    )
    encoder_rel_pos_k: int = option(
        0,
        "Rel_Pos baseline (Shaw et al. 2018): relative position representations of the keys "
        "with clipping distance K in --encoder-bias-layers (default 0 = off)",
        type=int,
        metavar="K",
        valid=NON_NEGATIVE,
    )
    encoder_rel_pos_values: bool = option(
        False, "Rel_Pos: also relative position representations of the values", switch=True
    )
    encoder_localness: bool = option(
        False, "Localness baseline (Yang et al. 2018): learned Gaussian bias in --encoder-bias-layers", switch=True
    )
    encoder_bias_layers: str = option(
        "0",
        "0-based encoder layers that get the syntax attention / Rel_Pos / Localness: "
        "comma-separated, or 'all' (default 0 = the paper's first encoder layer)",
        metavar="LAYERS",
    )
    rhe: bool = option(
        False,
        "redundant head enlivening: per sentence, only the heads found redundant "
        "(Syn_attn <= Syn_gate) use the biased attention, the others keep standard attention; "
        "needs src_dep",
        switch=True,
    )
    rhe_layers: Optional[str] = option(
        None,
        "0-based encoder layers with redundant head identification (default: "
        "--encoder-bias-layers); a layer without a bias only identifies (logged, and pruned "
        "with --prune-redundant-heads)",
        metavar="LAYERS",
        preset=False,
    )
    rhe_gate: str = option(
        "dynamic", "Syn_gate of RHE: 'dynamic' = sigmoid(h_conf) (default) or a fixed value in (0, 1]", metavar="GATE"
    )
    prune_redundant_heads: bool = option(
        False,
        "zero the output of the heads identified redundant (test-time pruning; at "
        "generation --model-overrides \"{{'prune_redundant_heads': True}}\")",
        switch=True,
    )
    prune_skip_in_training: bool = option(
        False,
        "with --prune-redundant-heads in training: skip the pruned heads' computation as "
        "at test time (same loss and gradients; the bias providers' parameters then get no "
        "gradient instead of zeros, so multi-GPU training needs --find-unused-parameters)",
        switch=True,
    )
    # ---------------------------------------------------------------- resuming
    allow_attention_change: bool = option(
        False,
        "resume a checkpoint (checkpoint_last.pt in --save-dir) even though its "
        "attention options differ from the flags given; without it such a resume is refused, "
        "naming both (fairseq_sparse_attn/validation.py)",
        switch=True,
        switch_default=False,
        preset=False,
    )

    def attention_kind(self, kind: str):
        """(activation, output norm) of one attention kind: the per-kind option, else the
        all-kinds one."""
        if kind not in ATTENTION_KINDS:
            raise ValueError(f"unknown attention kind {kind!r}; valid: {', '.join(ATTENTION_KINDS)}")
        return (
            getattr(self, f"{kind}_attn_activation") or self.attn_activation,
            getattr(self, f"{kind}_attn_output_norm") or self.attn_output_norm,
        )


OPTION_FIELDS = {f.name: f for f in fields(PluginOptions)}


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


# ---------------------------------------------------------------- resolution
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
        raise ValueError(
            f"{flag}: expected 'all' or comma-separated 0-based layer indices such as '0,1', got {value!r}"
        ) from None
    bad = sorted(i for i in layers if not 0 <= i < num_layers)
    if bad:
        raise ValueError(
            f"{flag}: layer {bad[0]} out of range, the encoder has {num_layers} layers (0..{num_layers - 1})"
        )
    return layers


def encoder_biases_config(opts: PluginOptions, num_layers: int, layer_index: Optional[int]) -> BiasesConfig:
    """The bias providers and RHE of the self-attention of encoder layer ``layer_index``
    (docs/rhe.md; layers are 0-based, the paper's "first encoder layer" is layer 0);
    raises ValueError for inconsistent flags."""
    from .attention.rhe import parse_gate

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
    from .attention.fixed_patterns import parse_head_list, parse_pattern_list

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


def add_plugin_args(parser):
    """The plugin's flags, from :class:`PluginOptions` (no argparse defaults, see above)."""
    extra = _help_values()
    for f in fields(PluginOptions):
        meta = f.metadata
        choices = meta["choices"]() if callable(meta["choices"]) else meta["choices"]
        kwargs: Dict[str, Any] = {}
        if meta["switch"]:
            kwargs.update(action="store_true", default=meta["switch_default"])
        else:
            if meta["type"] is not None:
                kwargs["type"] = meta["type"]
            if choices is not None:
                kwargs["choices"] = list(choices)
            if meta["metavar"] is not None:
                kwargs["metavar"] = meta["metavar"]
        help_text = meta["help"].format(choices=", ".join(choices) if choices else "", **extra)
        parser.add_argument("--" + f.name.replace("_", "-"), help=help_text, **kwargs)


def preset_defaults() -> dict:
    return {f.name: f.default for f in fields(PluginOptions) if f.metadata["preset"]}


def fill_defaults(args, **overrides):
    """Architecture helper: set every plugin option missing (None) in ``args``
    (``overrides`` first, then the defaults of :class:`PluginOptions`)."""
    for name in overrides:
        if name not in OPTION_FIELDS:
            raise ValueError(f"unknown plugin option {name!r}")
    for name, value in {**preset_defaults(), **overrides}.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)


# ---------------------------------------------------------------- --help
HELP_GROUP = "sparse attention"


def _shown(value) -> str:
    if value is None:
        return "not set"
    if value == "":
        return "''"
    return str(value)


def help_text(name: str, default=None) -> str:
    """The help of ``--NAME`` for ``--help``: the field's help, then its choices (when the
    help does not list them) and ``default``."""
    f = OPTION_FIELDS[name]
    meta = f.metadata
    choices = meta["choices"]() if callable(meta["choices"]) else meta["choices"]
    text = meta["help"].format(choices=", ".join(choices) if choices else "", **_help_values())
    text = re.sub(r" \(default [^();]*\)", "", text)  # the default is said once, below
    notes = []
    if choices is not None and not all(re.search(rf"\b{re.escape(str(c))}\b", text) for c in choices):
        notes.append("choices: " + ", ".join(map(str, choices)))
    notes.append("default: " + _shown(default))
    return f"{text} [{'; '.join(notes)}]"


def _takes_plugin_flags(model_class) -> bool:
    """The model adds the plugin's flags (a plugin architecture's model; read from its own
    ``add_args``, so this module needs no import of the models)."""
    import argparse

    probe = argparse.ArgumentParser(add_help=False)
    model_class.add_args(probe)
    return any(action.dest in OPTION_FIELDS for action in probe._actions)


def add_help_group(parser, arch: Optional[str] = None):
    """Gather the plugin's flags in ``parser`` into one argument group, "sparse attention",
    each with its choices and default, for ``fsa-train --help``.

    fairseq adds a model's flags only after parsing ``--arch``, into its
    "Model-specific configuration" group, and its ``--help`` exits before that.  With a
    plugin ``arch`` whose flags ``parser`` already holds, they move to the group (display
    only: parsing is unchanged) and the defaults shown are the ones the preset fills in;
    without ``arch`` they are added with the defaults of :class:`PluginOptions`.  A
    stock fairseq ``arch`` takes none of them: nothing is added.
    """
    import argparse

    defaults = {f.name: f.default for f in fields(PluginOptions)}
    if arch is not None:
        from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

        model = ARCH_MODEL_REGISTRY.get(arch)
        if model is None or not _takes_plugin_flags(model):
            return None
        filled = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[arch](filled)
        defaults.update({k: v for k, v in vars(filled).items() if k in OPTION_FIELDS and v is not None})
    group = parser.add_argument_group(
        HELP_GROUP,
        "the plugin's options (fairseq_sparse_attn), for every plugin architecture"
        + (
            f"; defaults as --arch {arch} sets them"
            if arch
            else " (sparse_transformer and its presets); defaults as sparse_transformer sets them, "
            "a preset may change them: `fsa-train --arch NAME --help` shows its own"
        ),
    )
    flags = {"--" + name.replace("_", "-"): name for name in OPTION_FIELDS}
    present = [a for a in parser._actions if any(o in flags for o in a.option_strings)]
    if not present:
        add_plugin_args(group)
        present = [a for a in parser._actions if any(o in flags for o in a.option_strings)]
    else:
        for other in parser._action_groups:
            if other is not group:
                other._group_actions[:] = [a for a in other._group_actions if a not in present]
        group._group_actions.extend(present)
    for action in present:
        name = flags[next(o for o in action.option_strings if o in flags)]
        action.help = help_text(name, defaults[name])
    return group
