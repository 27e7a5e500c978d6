"""``sparse_transformer``: fairseq's transformer with the plugin's attention core in all
three attention kinds.  With softmax everywhere and no output norm it has exactly the
parameters (names and shapes) of fairseq's ``transformer`` and computes the same thing.
"""

import argparse
from contextlib import nullcontext
from contextvars import ContextVar
from typing import Optional

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model
from fairseq.models.transformer import (
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
)
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)

from ..attention import SparseMultiheadAttention
from ..attention.biases import check_source_annotations
from ..attention.config import AttentionConfig
from ..attention.core import AttentionInputs
from ..attention.fixed_patterns import last_positions, pattern_weights, source_word_ids, word_start_table
from ..attention.intermediates import collect
from ..attention.rhe import log_redundant_fractions
from ..options.cli import add_plugin_args
from ..options.resolve import ModelConfig, resolve_model
from ..validation import validate_model_args
from .checkpointing import checkpoint_layer
from .ffn import FFNActivation, LinearLayerNorm, deliver_ffn_calls_when_wanted

#: the configuration of the model that ``SparseTransformerModel.build_model`` is building
_BUILDING: ContextVar[Optional[ModelConfig]] = ContextVar("fsa_model_config", default=None)


def model_config(cfg) -> ModelConfig:
    """The configuration of the model being built: the one ``build_model`` resolved; an
    encoder or decoder built on its own (outside ``build_model``) resolves its flags."""
    return _BUILDING.get() or resolve_model(cfg)


def build_attention(embed_dim, num_heads, cfg, layer, config: AttentionConfig, **kwargs):
    """An attention module of ``layer`` with its typed configuration (from the model's
    :class:`~fairseq_sparse_attn.options.resolve.ModelConfig`)."""
    return SparseMultiheadAttention(
        embed_dim,
        num_heads,
        dropout=cfg.attention_dropout,
        q_noise=layer.quant_noise,
        qn_block_size=layer.quant_noise_block_size,
        config=config,
        **kwargs,
    )


def wrap_layer(layer, cfg):
    """Activation checkpointing and FSDP wrapping, as fairseq's build_*_layer does
    (checkpointing through :func:`.checkpointing.checkpoint_layer`, which keeps the
    attention intermediates and their gradients)."""
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_layer(layer, offload_to_cpu=cfg.offload_activations)
    min_params_to_wrap = cfg.min_params_to_wrap if not checkpoint else 0
    return fsdp_wrap(layer, min_num_params=min_params_to_wrap)


#: the copies of its weights that fairseq 0.12.2's encoder layer keeps, as parameters, for
#: its fast path (concatenated from the projections when a state dict is loaded)
FAST_PATH_PARAMETERS = (
    "in_proj_weight",
    "in_proj_bias",
    "out_proj_weight",
    "out_proj_bias",
    "fc1_weight",
    "fc1_bias",
    "fc2_weight",
    "fc2_bias",
)


class _NoQueryProjection(torch.nn.Module):
    """The query projection of a layer whose heads are all fixed (it has none) while the
    encoder layer's ``__init__`` runs: fairseq 0.12.2's sizes the fast path's copies from
    it (:class:`_NeverFastPath` drops them, and this, after).  Its empty tensors are plain
    attributes, not parameters or buffers."""

    def __init__(self, embed_dim):
        super().__init__()
        self.weight = torch.empty(0, embed_dim)
        self.bias = torch.empty(0)


class _NeverFastPath:
    """fairseq 0.12.2's encoder layer may run ``torch._transformer_encoder_layer_fwd``
    ("BetterTransformer") in eval mode after a checkpoint load; that bypasses our
    self-attention.  These read-only flags keep the layer on the regular path.

    The path's weight copies (:data:`FAST_PATH_PARAMETERS`) are left out: they would be
    parameters that nothing uses (in the parameter count, the optimizer and every
    checkpoint), and 0.12.2 builds the in-projection's as three times the query
    projection, which a fixed-pattern layer (no query and key projections for its fixed
    heads) does not match, so its checkpoints did not load.  A state dict that has them
    (saved under 0.12.2) loads without them.  fairseq-fixed 0.12.3.1 has none of this."""

    def drop_fast_path_parameters(self):
        for name in FAST_PATH_PARAMETERS:
            self._parameters.pop(name, None)
        if isinstance(self.self_attn.q_proj, _NoQueryProjection):
            self.self_attn.q_proj = None

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # nn.Module's own loading, without 0.12.2's concatenation into the copies
        for name in FAST_PATH_PARAMETERS:
            state_dict.pop(prefix + name, None)
        torch.nn.Module._load_from_state_dict(self, state_dict, prefix, *args, **kwargs)

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


class _FFNVariant:
    """The FFN of the layer as ``--ffn-type`` says (see models/ffn.py)."""

    def __init__(self, cfg, *args, model_config: ModelConfig, **kwargs):
        self._model_config = model_config  # read by build_fc2 and build_*_attention during the base __init__
        self._ffn_type = model_config.ffn_type
        super().__init__(cfg, *args, **kwargs)
        self.activation_fn = FFNActivation(self._ffn_type, cfg.activation_fn)

    def forward(self, *args, **kwargs):
        """fairseq's layer forward; inside a ``collect("ffn")`` scope the layer's FFN calls
        are delivered to it (analysis: :func:`~.ffn.deliver_ffn_calls_when_wanted`)."""
        deliver_ffn_calls_when_wanted(self)
        return super().forward(*args, **kwargs)

    def build_fc2(self, input_dim, output_dim, q_noise, qn_block_size):
        if self._ffn_type == "softmax_layernorm":
            if q_noise:
                raise ValueError("--ffn-type softmax_layernorm does not support quant-noise")
            return LinearLayerNorm(input_dim, output_dim)
        return super().build_fc2(input_dim, output_dim, q_noise, qn_block_size)


class SparseTransformerEncoderLayer(_NeverFastPath, _FFNVariant, TransformerEncoderLayerBase):
    def __init__(self, cfg, return_fc=False, *, layer_index: int, model_config: ModelConfig):
        self._layer_index = layer_index  # read by build_self_attention during the base __init__
        super().__init__(cfg, return_fc=return_fc, model_config=model_config)
        self.drop_fast_path_parameters()

    def forward(
        self,
        x,
        encoder_padding_mask: Optional[torch.Tensor],
        attn_mask: Optional[torch.Tensor] = None,
        attn_inputs: Optional[AttentionInputs] = None,
    ):
        """fairseq's encoder layer forward (TransformerEncoderLayerBase), with the batch's
        ``attn_inputs`` (fixed-pattern weights, word ids, syntax annotations) passed to
        the self-attention as an argument."""
        deliver_ffn_calls_when_wanted(self)
        if attn_mask is not None:
            attn_mask = attn_mask.masked_fill(attn_mask.to(torch.bool), -1e8 if x.dtype == torch.float32 else -1e4)
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, _ = self.self_attn(
            query=x,
            key=x,
            value=x,
            key_padding_mask=encoder_padding_mask,
            need_weights=False,
            attn_mask=attn_mask,
            attn_inputs=attn_inputs,
        )
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)

        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.activation_fn(self.fc1(x))
        x = self.activation_dropout_module(x)
        x = self.fc2(x)
        fc_result = x
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        if self.return_fc and not torch.jit.is_scripting():
            return x, fc_result
        return x

    def build_self_attention(self, embed_dim, cfg):
        attention = build_attention(
            embed_dim,
            cfg.encoder.attention_heads,
            cfg,
            self,
            self._model_config.attention("encoder_self", self._layer_index),
            self_attention=True,
        )
        if attention.q_proj is None:  # every head fixed: until __init__ ends (_NoQueryProjection)
            attention.q_proj = _NoQueryProjection(embed_dim)
        return attention


class SparseTransformerDecoderLayer(_FFNVariant, TransformerDecoderLayerBase):
    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return build_attention(
            embed_dim,
            cfg.decoder.attention_heads,
            cfg,
            self,
            self._model_config.decoder_self,
            add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn,
            self_attention=not cfg.cross_self_attention,
        )

    def build_encoder_attention(self, embed_dim, cfg):
        return build_attention(
            embed_dim,
            cfg.decoder.attention_heads,
            cfg,
            self,
            self._model_config.cross,
            kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim,
            encoder_decoder_attention=True,
        )


class SparseTransformerEncoder(TransformerEncoderBase):
    """Hands per-batch source information to its layers as an argument
    (:class:`~..attention.core.AttentionInputs`): fixed-pattern weights (computed once
    per batch for all layers with the same patterns), word ids, and the syntax
    annotations ``src_dep`` / ``src_rp`` (syntax-enhanced attention, RHE), which arrive as
    extra ``net_input`` keys of the parse_annotated_translation task.  Nothing is set on
    a module, so activation checkpointing can re-run any layer."""

    def __init__(self, cfg, dictionary, embed_tokens, return_fc=False, model_config: Optional[ModelConfig] = None):
        self._layers_built = 0  # layer index for build_encoder_layer
        self._model_config = model_config or resolve_model(cfg)  # read by build_encoder_layer
        super().__init__(cfg, dictionary, embed_tokens, return_fc=return_fc)
        self.subword_style = self._model_config.subword_style
        attention = [m for m in self.modules() if isinstance(m, SparseMultiheadAttention)]
        self._pattern_sets = sorted({m.heads.fixed.key for m in attention if m.heads.fixed is not None})
        self._needs_word_ids = any(key[1] == "word" for key in self._pattern_sets)
        if self._needs_word_ids:
            # per source symbol: does it continue a word? (derived from the dictionary)
            self.register_buffer(
                "word_continuation", word_start_table(dictionary, self.subword_style), persistent=False
            )
        self._needs_annotations = any(m.source_needs for m in attention)

    def build_encoder_layer(self, cfg):
        index, self._layers_built = self._layers_built, self._layers_built + 1
        layer = SparseTransformerEncoderLayer(
            cfg, return_fc=self.return_fc, layer_index=index, model_config=self._model_config
        )
        return wrap_layer(layer, cfg)

    def attention_inputs(self, src_tokens, src_dep=None, src_rp=None) -> AttentionInputs:
        """The per-batch inputs of the encoder's self-attention calls."""
        by_set, word_ids = {}, None
        if self._pattern_sets:
            valid = src_tokens.ne(self.padding_idx)
            ids = {"token": valid.long().cumsum(dim=1) - 1}
            if self._needs_word_ids:  # word ids of this batch, from the source dictionary
                word_ids = ids["word"] = source_word_ids(
                    src_tokens, self.word_continuation, self.subword_style, self.padding_idx, self.dictionary.eos()
                )
            if any(key[3] for key in self._pattern_sets):  # --encoder-fixed-patterns-exclude-eos
                last = last_positions(valid)
                if not bool(src_tokens[last].eq(self.dictionary.eos()).all()):
                    raise ValueError(
                        "--encoder-fixed-patterns-exclude-eos: every source sentence "
                        "must end in EOS (</s>), but a batch has one that does not"
                    )
            for key in self._pattern_sets:
                patterns, unit, reading, exclude_eos = key
                by_set[key] = pattern_weights(patterns, ids[unit], valid, reading, exclude_eos)
        if self._needs_annotations:
            check_source_annotations(src_tokens.ne(self.padding_idx), src_dep, src_rp)
        return AttentionInputs(pattern_weights=by_set, word_ids=word_ids, src_dep=src_dep, src_rp=src_rp)

    def forward(
        self,
        src_tokens,
        src_lengths=None,
        return_all_hiddens: bool = False,
        token_embeddings=None,
        src_dep=None,
        src_rp=None,
    ):
        return self.forward_scriptable(
            src_tokens, src_lengths, return_all_hiddens, token_embeddings, src_dep=src_dep, src_rp=src_rp
        )

    def forward_scriptable(
        self,
        src_tokens,
        src_lengths: Optional[torch.Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[torch.Tensor] = None,
        src_dep=None,
        src_rp=None,
    ):
        """fairseq's TransformerEncoderBase.forward_scriptable, with the batch's
        attention inputs passed to every layer."""
        attn_inputs = self.attention_inputs(src_tokens, src_dep, src_rp)
        encoder_padding_mask = src_tokens.eq(self.padding_idx)
        has_pads = torch.tensor(src_tokens.device.type == "xla") or encoder_padding_mask.any()
        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings)
        x = x * (1 - encoder_padding_mask.unsqueeze(-1).type_as(x) * has_pads.type_as(x))
        x = x.transpose(0, 1)  # B x T x C -> T x B x C

        encoder_states, fc_results = [], []
        if return_all_hiddens:
            encoder_states.append(x)
        for layer in self.layers:
            lr = layer(x, encoder_padding_mask=encoder_padding_mask if has_pads else None, attn_inputs=attn_inputs)
            if isinstance(lr, tuple) and len(lr) == 2:
                x, fc_result = lr
            else:
                x, fc_result = lr, None
            if return_all_hiddens:
                encoder_states.append(x)
                fc_results.append(fc_result)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        src_lengths = src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1).contiguous()
        return {
            "encoder_out": [x],  # T x B x C
            "encoder_padding_mask": [encoder_padding_mask],  # B x T
            "encoder_embedding": [encoder_embedding],  # B x T x C
            "encoder_states": encoder_states,  # List[T x B x C]
            "fc_results": fc_results,  # List[T x B x C]
            "src_tokens": [],
            "src_lengths": [src_lengths],
        }


class SparseTransformerDecoder(TransformerDecoderBase):
    def __init__(
        self, cfg, dictionary, embed_tokens, no_encoder_attn=False, model_config: Optional[ModelConfig] = None, **kwargs
    ):
        self._model_config = model_config or resolve_model(cfg)  # read by build_decoder_layer
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn, **kwargs)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        layer = SparseTransformerDecoderLayer(cfg, no_encoder_attn, model_config=self._model_config)
        return wrap_layer(layer, cfg)


@register_model("sparse_transformer")
class SparseTransformerModel(TransformerModel):
    """Transformer whose attention activation and output norm are chosen per kind
    (encoder self, decoder self, cross): softmax, ReLA, sparsemax, entmax, ..."""

    def __init__(self, args, encoder, decoder):
        super().__init__(args, encoder, decoder)
        self.has_rhe = any(m.rhe is not None for m in self.attention_modules())

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_plugin_args(parser)  # every plugin flag, from fairseq_sparse_attn.options.PluginOptions

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
        # the model's configuration, resolved once (issue 33), and the task's data checks:
        # flag errors before any data is read or any module built (issue 14)
        config = validate_model_args(args, task)
        building = _BUILDING.set(config)
        try:
            model = super().build_model(args, task)
        finally:
            _BUILDING.reset(building)
        model.model_config = config
        return model

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        from fairseq.models.transformer import TransformerConfig

        return SparseTransformerEncoder(
            TransformerConfig.from_namespace(cfg), src_dict, embed_tokens, model_config=model_config(cfg)
        )

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        from fairseq.models.transformer import TransformerConfig

        cfg = TransformerConfig.from_namespace(cfg)
        return SparseTransformerDecoder(
            cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention, model_config=model_config(cfg)
        )

    def forward(
        self,
        src_tokens,
        src_lengths,
        prev_output_tokens,
        return_all_hiddens: bool = True,
        features_only: bool = False,
        alignment_layer=None,
        alignment_heads=None,
        src_dep=None,
        src_rp=None,
    ):
        """fairseq's encoder-decoder forward, plus the source syntax annotations of the
        parse_annotated_translation task (net_input keys ``src_dep``, ``src_rp``), which go
        to the encoder."""
        # RHE decisions come back as intermediates and are logged here, once per forward
        # (a layer re-run by activation checkpointing does not log again)
        scope = collect("redundant") if self.has_rhe else nullcontext(())
        with scope as records:
            encoder_out = self.encoder(
                src_tokens,
                src_lengths=src_lengths,
                return_all_hiddens=return_all_hiddens,
                src_dep=src_dep,
                src_rp=src_rp,
            )
        log_redundant_fractions(records)
        return self.decoder(
            prev_output_tokens,
            encoder_out=encoder_out,
            features_only=features_only,
            alignment_layer=alignment_layer,
            alignment_heads=alignment_heads,
            src_lengths=src_lengths,
            return_all_hiddens=return_all_hiddens,
        )

    def attention_modules(self):
        """All :class:`SparseMultiheadAttention` modules, in registration order."""
        return [m for m in self.modules() if isinstance(m, SparseMultiheadAttention)]
