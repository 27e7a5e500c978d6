"""``sparse_transformer``: fairseq's transformer with the plugin's attention core in all
three attention kinds.  With softmax everywhere and no output norm it has exactly the
parameters (names and shapes) of fairseq's ``transformer`` and computes the same thing.
"""

import argparse

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
from ..attention.fixed_patterns import (
    PATTERN_SETS,
    PATTERN_UNITS,
    PATTERNS,
    RIGHT_CONTEXT_READINGS,
    SUBWORD_STYLES,
    last_positions,
    parse_head_list,
    parse_pattern_list,
    pattern_weights,
    source_word_ids,
    word_start_table,
)
from ..attention.biases import check_source_annotations
from ..attention.options import add_attention_args
from .encoder_biases import add_encoder_bias_args, encoder_bias_options
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


def _option(cfg, name, default=None):
    """A plugin option from a Namespace or a fairseq TransformerConfig (which raises
    AttributeError for names it does not know)."""
    try:
        value = getattr(cfg, name, None)
    except AttributeError:
        value = None
    return default if value is None else value


def ffn_type(cfg) -> str:
    return _option(cfg, "ffn_type") or "standard"


def encoder_head_options(cfg) -> dict:
    """Fixed patterns (Raganato et al. 2020) and masked heads of encoder self-attention."""
    return dict(
        fixed_patterns=parse_pattern_list(_option(cfg, "encoder_fixed_patterns", "")),
        fixed_pattern_unit=_option(cfg, "encoder_fixed_pattern_unit", "token"),
        right_context_reading=_option(cfg, "encoder_right_context_reading", "mirrored"),
        fixed_patterns_exclude_eos=bool(_option(cfg, "encoder_fixed_patterns_exclude_eos", False)),
        masked_heads=parse_head_list(_option(cfg, "encoder_masked_heads", "")),
    )


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
    def __init__(self, cfg, return_fc=False, layer_index=None):
        self._layer_index = layer_index  # read by build_self_attention during the base __init__
        super().__init__(cfg, return_fc=return_fc)

    def build_self_attention(self, embed_dim, cfg):
        return build_attention("encoder_self", embed_dim, cfg.encoder.attention_heads, cfg,
                               self, self_attention=True, **encoder_head_options(cfg),
                               **encoder_bias_options(cfg, self._layer_index))


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
    """Hands per-batch source information to the self-attention modules that need it, as
    module attributes set around the forward: fixed-pattern weights (computed once per
    batch for all layers) and the syntax annotations ``src_dep`` / ``src_rp`` (syntax-enhanced attention, RHE), which
    arrive as extra ``net_input`` keys of the parse_annotated_translation task."""

    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False):
        self._layers_built = 0  # layer index for build_encoder_layer
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        self.subword_style = _option(cfg, "encoder_subword_style", "bpe")
        attention = [m for m in self.modules() if isinstance(m, SparseMultiheadAttention)]
        self._fixed_modules = [m for m in attention if m.num_fixed_heads]
        self._word_modules = [m for m in self._fixed_modules if m.fixed_pattern_unit == "word"]
        if self._word_modules:
            # per source symbol: does it continue a word? (derived from the dictionary)
            self.register_buffer("word_continuation",
                                 word_start_table(dictionary, self.subword_style), persistent=False)
        self._context_modules = [m for m in attention if m.source_needs]
        if (self._context_modules or self._word_modules) and cfg.checkpoint_activations:
            # the recomputation in backward runs after forward has cleared the annotations
            raise ValueError("--checkpoint-activations is not supported with word-based fixed "
                             "patterns, syntax-enhanced attention or RHE (the encoder hands "
                             "word ids / src_dep / src_rp to the layers only during its forward)")

    def build_encoder_layer(self, cfg):
        index, self._layers_built = self._layers_built, self._layers_built + 1
        return wrap_layer(SparseTransformerEncoderLayer(cfg, return_fc=self.return_fc,
                                                        layer_index=index), cfg)

    def forward(self, src_tokens, src_lengths=None, return_all_hiddens: bool = False,
                token_embeddings=None, src_dep=None, src_rp=None):
        settings = []
        if self._fixed_modules:
            # fixed-pattern weights, computed once per batch for every layer that shares them
            valid = src_tokens.ne(self.padding_idx)
            ids = {"token": valid.long().cumsum(dim=1) - 1}
            if self._word_modules:  # word ids of this batch, from the source dictionary
                ids["word"] = source_word_ids(src_tokens, self.word_continuation,
                                              self.subword_style, self.padding_idx,
                                              self.dictionary.eos())
            if any(m.fixed_patterns_exclude_eos for m in self._fixed_modules):
                last = last_positions(valid)
                if not bool(src_tokens[last].eq(self.dictionary.eos()).all()):
                    raise ValueError("--encoder-fixed-patterns-exclude-eos: every source sentence "
                                     "must end in EOS (</s>), but a batch has one that does not")
            shared = {}
            for module in self._fixed_modules:
                key = (module.fixed_patterns, module.fixed_pattern_unit,
                       module.right_context_reading, module.fixed_patterns_exclude_eos)
                if key not in shared:
                    shared[key] = pattern_weights(module.fixed_patterns, ids[key[1]], valid,
                                                  key[2], key[3])
                settings.append(([module], "given_fixed_weights", shared[key]))
        if self._context_modules:
            valid = src_tokens.ne(self.padding_idx)
            check_source_annotations(valid, src_dep, src_rp)
            settings.append((self._context_modules, "source_context",
                             {"src_dep": src_dep, "src_rp": src_rp}))
        for modules, name, value in settings:
            for module in modules:
                setattr(module, name, value)
        try:
            return super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        finally:
            for modules, name, _ in settings:
                for module in modules:
                    setattr(module, name, None)


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
        add_fixed_pattern_args(parser)
        add_encoder_bias_args(parser)

    @classmethod
    def build_model(cls, args, task):
        # fairseq-hydra-train (configs/*.yaml) hands a legacy model a DictConfig, and
        # TransformerConfig.from_namespace copies keys it does not declare (every plugin
        # option: attention activation and norm, fixed patterns, FFN type) only from a
        # Namespace -- vars() of a DictConfig is its internals -- so they would be dropped
        # silently and a softmax model trained.  The CLI path passes a Namespace already.
        from omegaconf import OmegaConf

        if OmegaConf.is_config(args):
            args = argparse.Namespace(**OmegaConf.to_container(args, resolve=True))
        return super().build_model(args, task)

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

    def forward(self, src_tokens, src_lengths, prev_output_tokens, return_all_hiddens: bool = True,
                features_only: bool = False, alignment_layer=None, alignment_heads=None,
                src_dep=None, src_rp=None):
        """fairseq's encoder-decoder forward, plus the source syntax annotations of the
        parse_annotated_translation task (net_input keys ``src_dep``, ``src_rp``), which go
        to the encoder."""
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths,
                                   return_all_hiddens=return_all_hiddens,
                                   src_dep=src_dep, src_rp=src_rp)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out,
                            features_only=features_only, alignment_layer=alignment_layer,
                            alignment_heads=alignment_heads, src_lengths=src_lengths,
                            return_all_hiddens=return_all_hiddens)

    def attention_modules(self):
        """All :class:`SparseMultiheadAttention` modules, in registration order."""
        return [m for m in self.modules() if isinstance(m, SparseMultiheadAttention)]


def add_fixed_pattern_args(parser):
    """Fixed encoder self-attention patterns (Raganato et al. 2020) and head masking."""
    sets = ", ".join(f"{k} = {'+'.join(v)}" for k, v in PATTERN_SETS.items())
    parser.add_argument("--encoder-fixed-patterns", metavar="PATTERNS",
                        help="fixed (non-learned) heads of every encoder layer, the first heads "
                             f"of --encoder-attention-heads: none (default), 7F, 8F ({sets}), or "
                             f"comma-separated names from {', '.join(PATTERNS)}; the remaining "
                             "heads are learned")
    parser.add_argument("--encoder-fixed-pattern-unit", choices=PATTERN_UNITS,
                        help="fixed patterns over tokens (default) or over words (all pieces of "
                             "a word share their weights)")
    parser.add_argument("--encoder-right-context-reading", choices=RIGHT_CONTEXT_READINGS,
                        help="fixed pattern right_context: mirrored (mirror image of "
                             "left_context, largest weight at i+2; default) or literal (the "
                             "paper's f over i+2..n, largest weight at the end of the sentence)")
    parser.add_argument("--encoder-fixed-patterns-exclude-eos", action="store_true", default=None,
                        help="fixed patterns over the sentence without its EOS: no token gives "
                             "EOS weight, EOS attends to itself (default: EOS is a position)")
    parser.add_argument("--encoder-subword-style", choices=SUBWORD_STYLES,
                        help="how word boundaries are read from the source dictionary for word "
                             "patterns: bpe (subword-nmt '@@' continuation, default) or "
                             "sentencepiece ('\u2581' word start)")
    parser.add_argument("--encoder-masked-heads", metavar="HEADS",
                        help="comma-separated 0-based encoder self-attention head indices whose "
                             "output is zeroed in every encoder layer (test-time ablation; set at "
                             "generation with fsa-generate --mask-encoder-heads or "
                             "--model-overrides \"{'encoder_masked_heads': '0,7'}\")")
