"""Named architecture presets of ``sparse_transformer``.

Sizes follow fairseq: ``*_wmt_en_de`` = Transformer base (d=512, 8 heads, 6+6 layers,
FFN 2048); ``*_iwslt_de_en`` = fairseq's IWSLT size (d=512, 4 heads, 6+6, FFN 1024).
"""

from fairseq.models import register_model_architecture
from fairseq.models.transformer.transformer_legacy import (
    base_architecture,
    transformer_iwslt_de_en,
)

from ..attention.options import fill_attention_defaults

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
    fill_attention_defaults(args)
    base_architecture(args)


def _name(prefix, size):
    return f"{prefix}_{size}" if prefix == "reluformer" else f"{prefix}_transformer_{size}"


def _register(prefix, size):
    attention = ATTENTION_PRESETS[prefix]
    size_fn = SIZES[size]
    name = _name(prefix, size)

    def arch(args):
        fill_attention_defaults(args, **attention)
        size_fn(args)

    arch.__name__ = name
    arch.__doc__ = f"{name}: {attention} at fairseq's transformer_{size} size"
    register_model_architecture(MODEL, name)(arch)
    return arch


PRESET_NAMES = [_register(p, s).__name__ for p in ATTENTION_PRESETS for s in SIZES]
