"""Named architecture presets of ``sparse_transformer``.

Sizes follow fairseq: ``*_wmt_en_de`` = Transformer base (d=512, 8 heads, 6+6 layers,
FFN 2048); ``*_iwslt_de_en`` = fairseq's IWSLT size (d=512, 4 heads, 6+6, FFN 1024).
"""

from fairseq.models import register_model_architecture
from fairseq.models.transformer.transformer_legacy import (
    base_architecture,
    transformer_iwslt_de_en,
)

from ..options.schema import fill_defaults

MODEL = "sparse_transformer"

# preset prefix -> attention settings for all three kinds
ATTENTION_PRESETS = {
    "softmax": dict(attn_activation="softmax", attn_output_norm="none"),
    # ReLA-g is the ReLA default; ReLA-i is `--attn-output-norm rmsnorm_i`
    "rela": dict(attn_activation="relu", attn_output_norm="gated_rmsnorm"),
    "sparsemax": dict(attn_activation="sparsemax", attn_output_norm="none"),
    "entmax15": dict(attn_activation="entmax15", attn_output_norm="none"),
    # ReLUFormer (Shen et al. 2023): scaled ReLU in all three kinds, no output norm;
    # train with --criterion relu_regularized_label_smoothed_cross_entropy
    "reluformer": dict(attn_activation="relu_scaled", attn_output_norm="none"),
}

SIZES = {"wmt_en_de": base_architecture, "iwslt_de_en": transformer_iwslt_de_en}


@register_model_architecture(MODEL, MODEL)
def sparse_transformer(args):
    fill_defaults(args)
    base_architecture(args)


def _name(prefix, size):
    return f"{prefix}_{size}" if prefix == "reluformer" else f"{prefix}_transformer_{size}"


def _register(prefix, size):
    attention = ATTENTION_PRESETS[prefix]
    size_fn = SIZES[size]
    name = _name(prefix, size)

    def arch(args):
        fill_defaults(args, **attention)
        size_fn(args)

    arch.__name__ = name
    arch.__doc__ = f"{name}: {attention} at fairseq's transformer_{size} size"
    register_model_architecture(MODEL, name)(arch)
    return arch


PRESET_NAMES = [_register(p, s).__name__ for p in ATTENTION_PRESETS for s in SIZES]


# ---------------------------------------------------------------------------------------
# Fixed encoder self-attention patterns (Raganato, Scherrer & Tiedemann 2020): softmax
# attention everywhere, the first 7 heads of every encoder layer fixed (7F+1L).
# Change the configuration with flags: --encoder-fixed-patterns 8F / none,
# --encoder-fixed-pattern-unit word, --encoder-layers N, --decoder-layers 1..6.


def _fixed_pattern_base(args, unit, dropout):
    fill_defaults(args, encoder_fixed_patterns="7F", encoder_fixed_pattern_unit=unit)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 8)
    args.dropout = getattr(args, "dropout", dropout)
    base_architecture(args)


def _fixed_pattern_low_resource(args, unit):
    """The paper's low-resource setting (Sec. 4.2): Transformer base with dropout 0.3 and
    tied embeddings (one shared BPE vocabulary: preprocess with --joined-dictionary).
    Train with --max-tokens 1000 (the paper's 1k-token batches)."""
    args.share_all_embeddings = getattr(args, "share_all_embeddings", True)
    _fixed_pattern_base(args, unit, dropout=0.3)


FIXED_PATTERN_PRESETS = {
    "fixed_pattern_transformer_wmt_en_de": lambda a: _fixed_pattern_base(a, "token", 0.1),
    "fixed_pattern_word_transformer_wmt_en_de": lambda a: _fixed_pattern_base(a, "word", 0.1),
    "fixed_pattern_transformer_iwslt_de_en": lambda a: _fixed_pattern_low_resource(a, "token"),
    "fixed_pattern_word_transformer_iwslt_de_en": lambda a: _fixed_pattern_low_resource(a, "word"),
}

for _name_, _fn_ in FIXED_PATTERN_PRESETS.items():

    def _arch(args, _fn=_fn_):
        _fn(args)

    _arch.__name__ = _name_
    register_model_architecture(MODEL, _name_)(_arch)
    PRESET_NAMES.append(_name_)


# ---------------------------------------------------------------------------------------
# Redundant head enlivening (RHE) with syntax-enhanced attention: softmax attention
# everywhere; in the first encoder layer (0-based layer 0) the heads identified as
# redundant per sentence use LPEA (k = 6) with the dynamic gate.  One flag away:
# --encoder-syntax-attention dea, --rhe-gate 0.3, --lpea-max-distance K, --rhe-layers /
# --encoder-bias-layers, --prune-redundant-heads (test time).  SEA on all heads of the
# layer (the paper's +DEA / +LPEA rows) is `--arch sparse_transformer
# --encoder-syntax-attention lpea` (or any other preset with that flag), without --rhe.
# Train and generate with --task parse_annotated_translation (src_dep / src_rp).


def _rhe_base(args, size_fn):
    fill_defaults(args, encoder_syntax_attention="lpea", rhe=True)
    size_fn(args)


RHE_PRESETS = {f"rhe_transformer_{size}": size_fn for size, size_fn in SIZES.items()}

for _name_, _size_ in RHE_PRESETS.items():

    def _arch(args, _size=_size_):
        _rhe_base(args, _size)

    _arch.__name__ = _name_
    _arch.__doc__ = f"{_name_}: LPEA + RHE in encoder layer 0 at fairseq's transformer size"
    register_model_architecture(MODEL, _name_)(_arch)
    PRESET_NAMES.append(_name_)
