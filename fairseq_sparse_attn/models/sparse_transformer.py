"""``sparse_transformer``: fairseq's transformer with the plugin's attention core in all
three attention kinds.  With softmax everywhere and no output norm it has exactly the
parameters (names and shapes) of fairseq's ``transformer`` and computes the same thing.
"""

from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model
from fairseq.models.transformer import (
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
)
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)

from ..attention import SparseMultiheadAttention, attention_spec
from ..attention.options import add_attention_args
from .ffn import FFN_TYPES, FFNActivation, LinearLayerNorm


def build_attention(kind, embed_dim, num_heads, cfg, layer, **kwargs):
    spec = attention_spec(cfg, kind)
    return SparseMultiheadAttention(
        embed_dim,
        num_heads,
        dropout=cfg.attention_dropout,
        q_noise=layer.quant_noise,
        qn_block_size=layer.quant_noise_block_size,
        activation=spec.activation,
        output_norm=spec.output_norm,
        options=cfg,
        kind=kind,
        **kwargs,
    )


def wrap_layer(layer, cfg):
    """Activation checkpointing and FSDP wrapping, as fairseq's build_*_layer does."""
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    min_params_to_wrap = cfg.min_params_to_wrap if not checkpoint else 0
    return fsdp_wrap(layer, min_num_params=min_params_to_wrap)


class _NeverFastPath:
    """fairseq 0.12.2's encoder layer may run ``torch._transformer_encoder_layer_fwd``
    ("BetterTransformer") in eval mode after a checkpoint load; that bypasses our
    self-attention.  These read-only flags keep the layer on the regular path."""

    @property
    def BT_version(self):
        return False

    @BT_version.setter
    def BT_version(self, value):
        pass

    @property
    def can_use_fastpath(self):
        return False

    @can_use_fastpath.setter
    def can_use_fastpath(self, value):
        pass


def ffn_type(cfg) -> str:
    try:
        value = getattr(cfg, "ffn_type", None)
    except AttributeError:
        value = None
    return value or "standard"


class _FFNVariant:
    """The FFN of the layer as ``--ffn-type`` says (see models/ffn.py)."""

    def __init__(self, cfg, *args, **kwargs):
        self._ffn_type = ffn_type(cfg)  # read by build_fc2 during the base __init__
        super().__init__(cfg, *args, **kwargs)
        self.activation_fn = FFNActivation(self._ffn_type, cfg.activation_fn)

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        if self._ffn_type == "softmax_layernorm":
            if q_noise:
                raise ValueError("--ffn-type softmax_layernorm does not support quant-noise")
            return LinearLayerNorm(input_dim, output_dim)
        return super().build_fc2(input_dim, output_dim, q_noise, qn_block_size)


class SparseTransformerEncoderLayer(_NeverFastPath, _FFNVariant, TransformerEncoderLayerBase):
    def build_self_attention(self, embed_dim, cfg):
        return build_attention("encoder_self", embed_dim, cfg.encoder.attention_heads, cfg,
                               self, self_attention=True)


class SparseTransformerDecoderLayer(_FFNVariant, TransformerDecoderLayerBase):
    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return build_attention("decoder_self", embed_dim, cfg.decoder.attention_heads, cfg,
                               self, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn,
                               self_attention=not cfg.cross_self_attention)

    def build_encoder_attention(self, embed_dim, cfg):
        return build_attention("cross", embed_dim, cfg.decoder.attention_heads, cfg, self,
                               kdim=cfg.encoder.embed_dim, vdim=cfg.encoder.embed_dim,
                               encoder_decoder_attention=True)


class SparseTransformerEncoder(TransformerEncoderBase):
    def build_encoder_layer(self, cfg):
        return wrap_layer(SparseTransformerEncoderLayer(cfg, return_fc=self.return_fc), cfg)


class SparseTransformerDecoder(TransformerDecoderBase):
    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return wrap_layer(SparseTransformerDecoderLayer(cfg, no_encoder_attn), cfg)


@register_model("sparse_transformer")
class SparseTransformerModel(TransformerModel):
    """Transformer whose attention activation and output norm are chosen per kind
    (encoder self, decoder self, cross): softmax, ReLA, sparsemax, entmax, ..."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_attention_args(parser)
        parser.add_argument("--ffn-type", choices=FFN_TYPES, metavar="TYPE",
                            help="feed-forward variant: standard (fairseq, --activation-fn), "
                                 "softmax (key-value memory), softmax_layernorm (default standard)")

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        from fairseq.models.transformer import TransformerConfig

        return SparseTransformerEncoder(TransformerConfig.from_namespace(cfg), src_dict,
                                        embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        from fairseq.models.transformer import TransformerConfig

        cfg = TransformerConfig.from_namespace(cfg)
        return SparseTransformerDecoder(cfg, tgt_dict, embed_tokens,
                                        no_encoder_attn=cfg.no_cross_attention)

    def attention_modules(self):
        """All :class:`SparseMultiheadAttention` modules, in registration order."""
        return [m for m in self.modules() if isinstance(m, SparseMultiheadAttention)]
