"""The flag schema: every option of the plugin in one typed dataclass,
:class:`PluginOptions`.

Each field carries its default (what the architecture presets fill in), its help text, its
choices, its flag spelling, its range (``valid=``) and whether it is part of the model's
configuration; :data:`TRANSFORMER_RANGES` declares the ranges of the fairseq transformer
flags the plugin checks.  Every bound is declared here, once; :mod:`.resolve` checks them
and turns the flags into configs, :mod:`.cli` makes the argparse flags and ``--help``.

Adding an option = adding one field here.  Flags have no argparse defaults (fairseq's
convention: the architecture fills them, so a preset can change a default and the
command line still overrides it); switches default to None for the same reason, except
the two that always defaulted to False.  Nothing here imports the models.
"""

from dataclasses import dataclass, field, fields
from typing import Callable, Optional, Sequence, Union

from ..attention.config import ATTENTION_KINDS

#: the ``--ffn-type`` variants (implemented in models/ffn.py; checked by resolve.resolve_model)
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
    configuration: bool = True,
):
    """A field of :class:`PluginOptions`.

    help: may contain ``{choices}`` (the choices, comma-separated) and other ``{name}``
        fields of :func:`help_values`
    choices: a sequence, or a function returning one (registries, read when the flags
        are added, so that plugins registered later are listed)
    switch: ``action="store_true"`` with argparse default ``switch_default``
    preset: False = the presets do not write the default into the args (the field's
        default still applies when the option is read)
    valid: the values a numeric option accepts (checked once, when the model's
        configuration is resolved: :func:`.resolve.check_ranges`)
    configuration: False = the option does not change what the model computes (how it
        is computed, or how a run goes): a resume may change it
        (``--allow-attention-change`` is not needed)
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
        configuration=configuration,
    )
    return field(default=default, metadata=meta)  # noqa: B008


def _activations():
    from ..attention.activations import activation_names

    return activation_names()


def _output_norms():
    from ..attention.output_norms import output_norm_names

    return output_norm_names()


def _backends():
    from ..attention.core import backend_names

    return backend_names()


def help_values():
    from ..attention.fixed_patterns import PATTERN_SETS, PATTERNS

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
        50,
        "bisection iterations of entmax_bisect (default 50)",
        type=int,
        metavar="N",
        valid=Range(1),
        configuration=False,
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
        "recomputes them in backward (0 = off); needs --attention-dropout 0 and --attn-backend "
        "auto or key_block; returns no attention weights",
        type=int,
        metavar="N",
        preset=False,
        valid=NON_NEGATIVE,
        configuration=False,
    )
    attn_flex_min_keys: int = option(
        1024,
        "relu / relu_scaled with --attn-backend auto: attention over at least N keys without "
        "gradients (generation, analysis) takes the query-block path (bounded memory); 0 = only "
        "when named by --attn-backend query_block (default 1024; the name is kept from the removed "
        "flex backend)",
        type=int,
        metavar="N",
        preset=False,
        valid=NON_NEGATIVE,
        configuration=False,
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
        # how, not what: every backend computes the configured attention (to rounding), so
        # a resume may move to another (a run started on auto continued on triton)
        configuration=False,
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
        configuration=False,
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
        configuration=False,
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


#: fairseq transformer options whose bad values only failed inside the first forward
#: (dropouts: torch's "dropout probability has to be between 0 and 1") or as a
#: ZeroDivisionError / AssertionError while the model was built (sizes)
TRANSFORMER_RANGES = {
    "dropout": Range(0, 1),
    "attention_dropout": Range(0, 1),
    "activation_dropout": Range(0, 1),
    "relu_dropout": Range(0, 1),
    "encoder_attention_heads": Range(1),
    "decoder_attention_heads": Range(1),
    "encoder_embed_dim": Range(1),
    "decoder_embed_dim": Range(1),
    "encoder_ffn_embed_dim": Range(1),
    "decoder_ffn_embed_dim": Range(1),
    "encoder_layers": Range(0),
    "decoder_layers": Range(0),
    "max_source_positions": Range(1),
    "max_target_positions": Range(1),
}

#: every declared range: the plugin's options (``valid=``) and :data:`TRANSFORMER_RANGES`
RANGES = {
    **{name: f.metadata["valid"] for name, f in OPTION_FIELDS.items() if f.metadata["valid"] is not None},
    **TRANSFORMER_RANGES,
}

#: the plugin options that are part of the model's configuration (compared on resume)
CONFIGURATION_OPTIONS = tuple(name for name, f in OPTION_FIELDS.items() if f.metadata["configuration"])


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
