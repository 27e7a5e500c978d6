"""Command-line flags of the attention core and their per-kind resolution (defined in
:class:`fairseq_sparse_attn.options.PluginOptions`; this module keeps the old names).

Three attention kinds, each configurable separately; a per-kind flag overrides the
all-kinds flag:

    --attn-activation / --attn-output-norm                  all three kinds
    --encoder-self-attn-{activation,output-norm}            encoder self-attention
    --decoder-self-attn-{activation,output-norm}            decoder self-attention
    --cross-attn-{activation,output-norm}                   encoder-decoder attention
"""

from dataclasses import dataclass

from ..options import ATTENTION_KINDS, OPTION_FIELDS, add_plugin_args, fill_defaults, plugin_options

# q/k/v initialisation: fairseq's MultiheadAttention.reset_parameters, or ReLA's official
# code (bzhangGo/zero); see SparseMultiheadAttention.apply_rela_official_init, docs/rela.md
ATTN_INITS = ("fairseq", "rela_official")

# the attention group's preset defaults (from fairseq_sparse_attn.options.PluginOptions)
DEFAULTS = {name: OPTION_FIELDS[name].default for name in (
    "attn_activation", "attn_output_norm", "entmax_alpha", "entmax_alpha_learned",
    "entmax_bisect_iters", "leaky_relu_slope", "attn_norm_eps", "relu_scale_gamma",
    "relu_no_length_scale", "attn_init")}


def add_attention_args(parser):
    """The attention flags (a subset of :func:`fairseq_sparse_attn.options.add_plugin_args`)."""
    add_plugin_args(parser, groups=("attention",))


def fill_attention_defaults(args, **overrides):
    """Architecture helper (kept for old imports): :func:`fairseq_sparse_attn.options.fill_defaults`."""
    fill_defaults(args, **overrides)


@dataclass(frozen=True)
class AttentionSpec:
    activation: str
    output_norm: str


def attention_spec(cfg, kind: str) -> AttentionSpec:
    """Resolve activation and output norm of one attention kind from a namespace or a
    fairseq ``TransformerConfig`` (see :meth:`~fairseq_sparse_attn.options.PluginOptions.attention_kind`)."""
    return AttentionSpec(*plugin_options(cfg).attention_kind(kind))


__all__ = ["ATTENTION_KINDS", "ATTN_INITS", "DEFAULTS", "AttentionSpec", "add_attention_args",
           "attention_spec", "fill_attention_defaults"]
