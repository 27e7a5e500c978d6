"""The one attention module every paper composes.

Pipeline (see ../shared/DESIGN.md and docs/rela.md)::

    q, k, v = q_proj(x), k_proj(y), v_proj(y)        stock names and cache format
    scores  = q k^T / sqrt(d_h)                      float32
    mask    = key padding | attention mask           boolean, True = not visible
    weights = activation(scores, mask)               masked positions exactly 0
    weights = dropout(weights)
    heads   = weights v                              per head
    z       = output_norm([head_1; ...; head_H])     on the concatenated heads
    out     = out_proj(z)

Heads are "learned" or "given their weights": with ``fixed_patterns`` the first F heads
attend with fixed, non-learned patterns (Raganato et al. 2020, :mod:`.fixed_patterns`) and
only the remaining ``num_heads - F`` heads have query/key projections; every head has its
value projection.  ``masked_heads`` zeroes the output of chosen heads (test-time ablation).

Encoder self-attention may add bias providers (:mod:`.biases`: syntax-enhanced attention
DEA/LPEA, Rel_Pos, Localness) to the scores: ``scores += bias`` and their hidden keys join
the mask.  With ``rhe`` (:mod:`.rhe`) the biased attention replaces, per sentence, only the
heads identified as redundant on their standard attention; the other heads keep it.
``prune_redundant_heads`` zeroes the output of the redundant heads instead.

With ``activation="softmax"`` and ``output_norm="none"`` (and no fixed or masked heads)
the module *is* stock fairseq:
it delegates to :class:`fairseq.modules.MultiheadAttention` (including its fused fast
path) unless a recorder is attached, per-head weights are asked for (the fused path
silently averages them) or ``force_pipeline`` is set.  Every other
configuration runs the pipeline above and never takes the fused softmax path.
"""

from typing import Callable, Dict, Optional, Sequence, Tuple

import torch
from fairseq.modules import MultiheadAttention
from torch import Tensor

from .activations import build_activation
from .biases import BiasContext, build_bias
from .fixed_patterns import (PATTERN_UNITS, check_pattern_names, check_right_context_reading,
                             pattern_weights)
from .options import ATTN_INITS, _lookup as _option_value
from .output_norms import build_output_norm
from .rhe import RedundantHeadIdentifier

# Additive float masks use -inf (decoder future mask) or -1e8/-1e4 (fairseq's encoder
# conversion of boolean masks).  Anything at or below this is "not visible".
ADDITIVE_MASK_THRESHOLD = -1e4


class SparseMultiheadAttention(MultiheadAttention):
    """fairseq ``MultiheadAttention`` with a pluggable activation and output norm.

    Args (beyond the stock ones):
        activation: name in :mod:`.activations` (softmax, relu, sparsemax, ...)
        output_norm: name in :mod:`.output_norms` (none, rmsnorm, gated_rmsnorm, ...)
        options: object carrying activation/norm hyper-parameters (entmax alpha, ...)
        kind: ``"encoder_self"``, ``"decoder_self"`` or ``"cross"`` (for logs/analysis)
        fixed_patterns: names of fixed patterns (self-attention only): heads ``0..F-1``
        fixed_pattern_unit: ``"token"`` or ``"word"`` (word ids come from the encoder,
            see :attr:`source_word_ids`)
        right_context_reading: ``"mirrored"`` or ``"literal"`` (:mod:`.fixed_patterns`)
        fixed_patterns_exclude_eos: fixed patterns computed without the source's EOS
        masked_heads: head indices whose output is zeroed (heads disabled)
        biases: names of bias providers (:mod:`.biases`) added to the scores of every
            head, or with ``rhe`` only of the heads found redundant (self-attention only;
            per-batch inputs such as ``src_dep`` come from the encoder, see
            :attr:`source_context`)
        rhe: identify redundant heads per sentence (:mod:`.rhe`)
        rhe_gate: ``"dynamic"`` (sigmoid(h_conf)) or a fixed gate value in (0, 1]
        prune_redundant_heads: zero the output of the heads found redundant
        layer_index: 0-based layer (names the logged redundant fraction)
    """

    def __init__(
        self,
        embed_dim,
        num_heads,
        kdim=None,
        vdim=None,
        dropout=0.0,
        bias=True,
        add_bias_kv=False,
        add_zero_attn=False,
        self_attention=False,
        encoder_decoder_attention=False,
        q_noise=0.0,
        qn_block_size=8,
        activation: str = "softmax",
        output_norm: str = "none",
        options=None,
        kind: Optional[str] = None,
        fixed_patterns: Sequence[str] = (),
        fixed_pattern_unit: str = "token",
        right_context_reading: str = "mirrored",
        fixed_patterns_exclude_eos: bool = False,
        masked_heads: Sequence[int] = (),
        biases: Sequence[str] = (),
        rhe: bool = False,
        rhe_gate="dynamic",
        prune_redundant_heads: bool = False,
        layer_index: Optional[int] = None,
    ):
        super().__init__(
            embed_dim,
            num_heads,
            kdim=kdim,
            vdim=vdim,
            dropout=dropout,
            bias=bias,
            add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn,
            self_attention=self_attention,
            encoder_decoder_attention=encoder_decoder_attention,
            q_noise=q_noise,
            qn_block_size=qn_block_size,
        )
        self.fixed_patterns = tuple(check_pattern_names(fixed_patterns))
        self.num_fixed_heads = len(self.fixed_patterns)
        self.num_learned_heads = num_heads - self.num_fixed_heads
        if self.num_fixed_heads:
            self._build_learned_projections(num_heads, q_noise, qn_block_size, bias)
        if fixed_pattern_unit not in PATTERN_UNITS:
            raise ValueError(f"fixed_pattern_unit must be one of {PATTERN_UNITS}, got {fixed_pattern_unit!r}")
        self.fixed_pattern_unit = fixed_pattern_unit
        self.right_context_reading = check_right_context_reading(right_context_reading)
        self.fixed_patterns_exclude_eos = bool(fixed_patterns_exclude_eos)
        # Set by the encoder for word-based patterns: (bsz, src_len) word index per token.
        self.source_word_ids: Optional[Tensor] = None
        # Set by the encoder: (bsz, F, src_len, src_len) weights it computed once for every
        # layer with the same patterns (otherwise computed here, token-based from the mask).
        self.given_fixed_weights: Optional[Tensor] = None
        self.masked_heads = tuple(sorted(set(int(h) for h in masked_heads)))
        for h in self.masked_heads:
            if not 0 <= h < num_heads:
                raise ValueError(f"masked head index {h} out of range: this attention has "
                                 f"{num_heads} heads (0..{num_heads - 1})")
        self._build_biases(biases, rhe, rhe_gate, prune_redundant_heads, layer_index, options)
        self.activation = build_activation(activation, max(self.num_learned_heads, 1), options)
        self.output_norm = build_output_norm(output_norm, embed_dim, self.head_dim, options)
        self.activation_name = activation
        self.output_norm_name = output_norm
        self.kind = kind
        self.is_stock = (activation == "softmax" and output_norm == "none"
                         and not self.num_fixed_heads and not self.masked_heads
                         and not self.biases and self.rhe is None)
        # Run the explicit pipeline even for stock softmax (tests, analysis).
        self.force_pipeline = False
        # > 0: ReLU-family activations stream over blocks of this many keys (long inputs)
        self.key_block_size = int(getattr(options, "attn_key_block_size", 0) or 0) if options is not None else 0
        # Analysis hook, see fairseq_sparse_attn.analysis.recording: when set, called as
        # recorder(module, weights=(bsz, heads, tgt, src) float32, values=(bsz*heads, src,
        # head_dim), mask=bool broadcastable to weights, True = key not visible, or None).
        self.recorder: Optional[Callable] = None
        self._mask_cache: Dict[str, tuple] = {}
        init = _option_value(options, "attn_init") or "fairseq"
        if init not in ATTN_INITS:
            raise ValueError(f"--attn-init must be one of {', '.join(ATTN_INITS)}, got {init!r}")
        if init == "rela_official":
            self.apply_rela_official_init()

    def extra_repr(self):
        fixed = ""
        if self.num_fixed_heads:
            fixed = f", fixed={list(self.fixed_patterns)} ({self.fixed_pattern_unit}"
            fixed += ", right_context literal" if self.right_context_reading == "literal" else ""
            fixed += ", without EOS)" if self.fixed_patterns_exclude_eos else ")"
        masked = f", masked_heads={list(self.masked_heads)}" if self.masked_heads else ""
        return f"kind={self.kind}, embed_dim={self.embed_dim}, heads={self.num_heads}{fixed}{masked}"

    # ------------------------------------------------------------------ biases, RHE
    def _build_biases(self, biases, rhe, rhe_gate, prune, layer_index, options):
        self.layer_index = layer_index
        self.biases = torch.nn.ModuleDict(
            (name, build_bias(name, self.num_heads, self.head_dim, options)) for name in biases)
        if prune and not rhe:
            raise ValueError("pruning redundant heads needs redundant head identification (--rhe)")
        name = None if layer_index is None else f"l{layer_index}"
        self.rhe = RedundantHeadIdentifier(rhe_gate, prune, name) if rhe else None
        if (self.biases or self.rhe is not None) and (
                not self.self_attention or self.num_fixed_heads or self.bias_k is not None
                or self.add_zero_attn):
            raise ValueError("attention biases and RHE are for (encoder) self-attention without "
                             "fixed-pattern heads, bias_kv or zero attention")
        # per-batch source annotations (src_dep, src_rp), set by the encoder around forward
        self.source_context: Optional[Dict[str, Tensor]] = None
        needs = {n for provider in self.biases.values() for n in provider.needs}
        if self.rhe is not None:
            needs.add("src_dep")
        self.source_needs = tuple(sorted(needs))

    def _biased_weights(self, q, scores, mask, key_padding_mask, bsz, length):
        """Weights of every head with the bias providers and RHE, plus the per-sentence
        heads to keep (pruning) and the providers' value terms (or None)."""
        heads = self.num_heads
        ctx = BiasContext.build(self._real_keys(key_padding_mask, bsz, length, scores.device),
                                self.source_context, self.source_needs)
        enhanced = None
        if self.biases:
            q4 = q.view(bsz, heads, length, self.head_dim)
            biased, hidden = scores, mask
            for provider in self.biases.values():
                bias, hide = provider(q4, ctx)
                if bias is not None:
                    biased = biased + bias
                if hide is not None:
                    hidden = hide if hidden is None else hidden | hide
            enhanced = self.activation(biased, hidden)
        enlivened = keep = None
        if self.rhe is None:
            weights = enhanced
        else:
            weights = self.activation(scores, mask)
            redundant = self.rhe(weights, ctx.src_dep, ctx.valid)
            enlivened = redundant.view(bsz, heads, 1, 1)
            if enhanced is not None:
                weights = torch.where(enlivened, enhanced, weights)
            if self.rhe.prune:
                keep = ~redundant

        value_term = None
        with_values = [p for p in self.biases.values() if p.has_value_term]
        if with_values:
            def value_term(probs):
                extra = sum(p.value_term(probs, ctx) for p in with_values)
                return extra if enlivened is None else extra * enlivened.to(extra.dtype)
        return weights, keep, value_term

    # ------------------------------------------------------------------ fixed heads
    def _build_learned_projections(self, num_heads, q_noise, qn_block_size, bias):
        """Query/key projections for the learned heads only (fixed heads have none)."""
        from fairseq.modules.quant_noise import quant_noise

        if not self.self_attention:
            raise ValueError("fixed attention patterns are defined for self-attention only")
        if self.num_learned_heads < 0:
            raise ValueError(f"{self.num_fixed_heads} fixed patterns do not fit in {num_heads} heads")
        if self.num_learned_heads == 0:
            self.q_proj = self.k_proj = None
        else:
            width = self.num_learned_heads * self.head_dim
            self.q_proj = quant_noise(torch.nn.Linear(self.embed_dim, width, bias=bias), q_noise, qn_block_size)
            self.k_proj = quant_noise(torch.nn.Linear(self.kdim, width, bias=bias), q_noise, qn_block_size)
        self.reset_parameters()

    def reset_parameters(self):
        if getattr(self, "q_proj", None) is not None:
            return super().reset_parameters()
        # no learned heads (e.g. 8F): stock initialisation of v_proj and out_proj only
        torch.nn.init.xavier_uniform_(self.v_proj.weight, gain=1 / 2 ** 0.5)
        torch.nn.init.xavier_uniform_(self.out_proj.weight)
        if self.out_proj.bias is not None:
            torch.nn.init.constant_(self.out_proj.bias, 0.0)

    def apply_rela_official_init(self):
        """q/k/v as ReLA's official code (bzhangGo/zero, ``modules/rela.py`` + ``func.linear``)
        initialises them: every weight by TF's variance scaling (fan_avg, uniform, scale 1) =
        xavier_uniform of the matrix the code creates, every bias 0.  Self-attention there
        is one (d, 3d) ``qkv_map``: bound sqrt(6/(d+3d)), fairseq's gain 1/sqrt(2) on each
        (d, d) block, so those weights are left as fairseq drew them.  Cross-attention has
        separate ``q_map``, ``k_map``, ``v_map``: xavier_uniform with gain 1 (fairseq: 1/sqrt(2)
        when key/value dims equal the model's).  ``out_proj`` is xavier gain 1 with bias 0
        in both."""
        if not self.self_attention:
            for proj in (self.q_proj, self.k_proj, self.v_proj):
                if proj is not None:
                    torch.nn.init.xavier_uniform_(proj.weight)
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            if proj is not None and proj.bias is not None:
                torch.nn.init.zeros_(proj.bias)

    @staticmethod
    def _real_keys(key_padding_mask: Optional[Tensor], bsz: int, src_len: int, device) -> Tensor:
        """(bsz, src_len) bool, True = real key position (not padding)."""
        if key_padding_mask is None:
            return torch.ones(bsz, src_len, dtype=torch.bool, device=device)
        return ~key_padding_mask.to(torch.bool)

    def _fixed_weights(self, valid: Tensor, bsz: int, src_len: int) -> Tensor:
        """(bsz, F, src_len, src_len) weights of the fixed heads for this batch; ``valid``
        from :meth:`_real_keys`."""
        given = self.given_fixed_weights
        if given is not None:
            expected = (bsz, self.num_fixed_heads, src_len, src_len)
            if tuple(given.shape) != expected:
                raise ValueError(f"given fixed-pattern weights have shape {tuple(given.shape)}, "
                                 f"expected {expected}")
            return given
        if self.fixed_pattern_unit == "word":
            ids = self.source_word_ids
            if ids is None or tuple(ids.shape) != (bsz, src_len):
                raise ValueError(
                    "word-based fixed patterns need the source word ids of this batch "
                    f"(bsz={bsz}, len={src_len}); they are set by the plugin's encoder "
                    "(sparse_transformer) before each forward"
                )
        else:
            ids = valid.long().cumsum(dim=1) - 1
        return pattern_weights(self.fixed_patterns, ids, valid, self.right_context_reading,
                               self.fixed_patterns_exclude_eos)

    # ------------------------------------------------------------------ projections
    def _project(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor],
        incremental_state,
        static_kv: bool,
        attn_mask: Optional[Tensor],
    ):
        """q, k, v in (batch*heads, len, head_dim) + updated masks; maintains the cache
        exactly as stock fairseq (``prev_key``, ``prev_value``, ``prev_key_padding_mask``)."""
        tgt_len, bsz, _ = query.size()
        if incremental_state is not None:
            saved_state = self._get_input_buffer(incremental_state)
            if saved_state is not None and "prev_key" in saved_state and static_kv:
                # static (encoder) keys/values are cached: do not recompute
                key = value = None
        else:
            saved_state = None

        q = self.q_proj(query) if self.q_proj is not None else None
        if self.self_attention:
            k = self.k_proj(query) if self.k_proj is not None else None
            v = self.v_proj(query)
        elif key is None:
            k = v = None
        else:
            beam_size = getattr(self, "beam_size", 1)
            if self.encoder_decoder_attention and beam_size > 1 and bsz == key.size(1):
                # key is [T, bsz*beam, C]: keep one copy per sentence (stock optimisation)
                key = key.view(key.size(0), -1, beam_size, key.size(2))[:, :, 0, :]
                value = key
                if key_padding_mask is not None:
                    key_padding_mask = key_padding_mask.view(
                        -1, beam_size, key_padding_mask.size(1)
                    )[:, 0, :]
            k = self.k_proj(key)
            v = self.v_proj(key if self.encoder_decoder_attention else value)
        if q is not None:
            q = q * self.scaling

        if self.bias_k is not None:
            k, v, attn_mask, key_padding_mask = self._add_bias(
                k, v, attn_mask, key_padding_mask, bsz
            )

        qk_heads = self.num_learned_heads  # = num_heads unless some heads are fixed
        if q is not None:
            q = q.contiguous().view(tgt_len, bsz * qk_heads, self.head_dim).transpose(0, 1)
        kv_bsz = bsz
        if v is not None:
            kv_bsz = v.size(1)
        if k is not None:
            k = k.contiguous().view(-1, kv_bsz * qk_heads, self.head_dim).transpose(0, 1)
        if v is not None:
            v = v.contiguous().view(-1, kv_bsz * self.num_heads, self.head_dim).transpose(0, 1)

        if saved_state is not None:
            if "prev_key" in saved_state:
                prev_key = saved_state["prev_key"]
                kv_bsz = prev_key.size(0)
                prev_key = prev_key.view(kv_bsz * qk_heads, -1, self.head_dim)
                k = prev_key if static_kv else torch.cat([prev_key, k], dim=1)
            if "prev_value" in saved_state:
                prev_value = saved_state["prev_value"].view(
                    kv_bsz * self.num_heads, -1, self.head_dim
                )
                v = prev_value if static_kv else torch.cat([prev_value, v], dim=1)
            key_padding_mask = MultiheadAttention._append_prev_key_padding_mask(
                key_padding_mask=key_padding_mask,
                prev_key_padding_mask=saved_state.get("prev_key_padding_mask"),
                batch_size=kv_bsz,
                src_len=v.size(1),
                static_kv=static_kv,
            )
            if k is not None:
                saved_state["prev_key"] = k.view(kv_bsz, qk_heads, -1, self.head_dim)
            saved_state["prev_value"] = v.view(kv_bsz, self.num_heads, -1, self.head_dim)
            saved_state["prev_key_padding_mask"] = key_padding_mask
            self._set_input_buffer(incremental_state, saved_state)

        if key_padding_mask is not None and key_padding_mask.dim() == 0:
            key_padding_mask = None
        if self.add_zero_attn:
            k, v, key_padding_mask, attn_mask = self._append_zero_attn(
                k=k, v=v, key_padding_mask=key_padding_mask, attn_mask=attn_mask
            )
        return q, k, v, key_padding_mask, attn_mask, kv_bsz

    # ------------------------------------------------------------------ masks
    def _cached(self, slot: str, tensor: Tensor, extra, compute):
        """``compute(tensor)``, remembered for the last tensor seen in ``slot``.

        fairseq hands the same masks again and again (the cached future mask, sliced
        each step; the encoder padding mask at every decoding step).  The key is the
        storage, layout and version counter; the cache keeps a reference to the tensor so
        that an equal key means that same, unmodified tensor, never a new one that
        reuses a freed address.
        """
        key = (tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype, tensor.device,
               getattr(tensor, "_version", None), extra)
        cached = self._mask_cache.get(slot)
        if cached is not None and cached[0] == key:
            return cached[2]
        value = compute(tensor)
        self._mask_cache[slot] = (key, tensor, value)
        return value

    @staticmethod
    def _split_attn_mask(attn_mask: Tensor) -> Tuple[Optional[Tensor], Tensor]:
        """(additive bias or None, boolean mask) from a float fairseq attention mask.
        fairseq's own masks only hide (-inf future mask, -1e8 converted boolean masks):
        then the bias is None and nothing is added to the scores."""
        hidden = attn_mask <= ADDITIVE_MASK_THRESHOLD
        bias = attn_mask.float().masked_fill(hidden, 0.0)
        return (bias if bool(bias.ne(0).any()) else None), hidden

    def _visibility_mask(self, attn_mask, key_padding_mask, bsz, tgt_len, src_len):
        """Boolean mask broadcastable to (bsz, heads, tgt, src), True = hidden, or None;
        plus the additive bias of a float attn_mask (or None)."""
        bias, mask = None, None
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                mask = attn_mask
            else:
                bias, mask = self._cached("attn_mask", attn_mask, None, self._split_attn_mask)
            mask = mask.view(1, 1, tgt_len, src_len)
        if key_padding_mask is not None:

            def expand(kpm):
                pad = kpm.to(torch.bool)
                if pad.size(0) != bsz:  # one key copy per beam group
                    pad = pad.repeat_interleave(bsz // pad.size(0), dim=0)
                return pad.view(bsz, 1, 1, src_len)

            pad = self._cached("key_padding", key_padding_mask, bsz, expand)
            mask = pad if mask is None else (mask | pad)
        return bias, mask

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        if (self.is_stock and not self.force_pipeline and self.recorder is None
                and not need_head_weights):  # the fused stock path cannot return per-head weights
            return super().forward(
                query, key, value, key_padding_mask=key_padding_mask,
                incremental_state=incremental_state, need_weights=need_weights,
                static_kv=static_kv, attn_mask=attn_mask, before_softmax=before_softmax,
                need_head_weights=need_head_weights,
            )
        if need_head_weights:
            need_weights = True
        tgt_len, bsz, embed_dim = query.size()
        assert embed_dim == self.embed_dim, f"query dim {embed_dim} != {self.embed_dim}"

        if self.num_fixed_heads and (incremental_state is not None or before_softmax):
            raise ValueError("fixed attention patterns are for encoder self-attention: no "
                             "incremental decoding, no before_softmax scores")
        biased = bool(self.biases) or self.rhe is not None
        if biased and (incremental_state is not None or before_softmax):
            raise ValueError("attention biases and RHE are for encoder self-attention: no "
                             "incremental decoding, no before_softmax scores")
        q, k, v, key_padding_mask, attn_mask, kv_bsz = self._project(
            query, key, value, key_padding_mask, incremental_state, static_kv, attn_mask
        )
        src_len = v.size(1)
        heads = self.num_heads
        bias, mask = self._visibility_mask(attn_mask, key_padding_mask, bsz, tgt_len, src_len)

        if (self.key_block_size and self.activation.supports_chunking and not before_softmax
                and not need_head_weights and self.recorder is None and not self.num_fixed_heads
                and not self.masked_heads and not biased):
            return self._chunked_forward(q, k, v, mask, bias, bsz, kv_bsz, tgt_len), None

        if self.num_fixed_heads:
            fixed = self._fixed_weights(self._real_keys(key_padding_mask, bsz, src_len, v.device),
                                        bsz, src_len)
            learned = None
            if self.num_learned_heads:
                scores = torch.bmm(q, k.transpose(1, 2)).view(bsz, self.num_learned_heads, tgt_len, src_len)
                scores = scores.float()
                if bias is not None:
                    scores = scores + bias
                learned = self.activation(scores, mask)
            weights = fixed if learned is None else torch.cat([fixed, learned], dim=1)
            if self.recorder is not None:
                self.recorder(self, weights=weights.detach(), values=v.detach(), mask=mask)
            # attention dropout regularizes learned attention only; fixed heads stay exact
            probs = fixed.type_as(v)
            if learned is not None:
                probs = torch.cat([probs, self.dropout_module(learned.type_as(v))], dim=1)
            return self._attend(probs, weights, v, bsz, kv_bsz, tgt_len, src_len,
                                need_weights, need_head_weights)

        if bsz != kv_bsz:  # cross-attention with one key copy per beam group
            scores = torch.einsum(
                "bxhtd,bhsd->bxhts",
                q.view(kv_bsz, -1, heads, tgt_len, self.head_dim),
                k.view(kv_bsz, heads, src_len, self.head_dim),
            )
        else:
            scores = torch.bmm(q, k.transpose(1, 2))
        scores = scores.reshape(bsz, heads, tgt_len, src_len).float()
        if bias is not None:
            scores = scores + bias

        if before_softmax:
            if mask is not None:
                scores = scores.masked_fill(mask, float("-inf"))
            return scores.view(bsz * heads, tgt_len, src_len).type_as(q), v

        head_keep = value_term = None
        if biased:  # float32, (bsz, heads, tgt, src), see _biased_weights
            weights, head_keep, value_term = self._biased_weights(q, scores, mask, key_padding_mask,
                                                                  bsz, src_len)
        else:
            weights = self.activation(scores, mask)  # float32, (bsz, heads, tgt, src)
        if self.recorder is not None:
            self.recorder(self, weights=weights.detach(), values=v.detach(), mask=mask)
        probs = self.dropout_module(weights.type_as(q))
        return self._attend(probs, weights, v, bsz, kv_bsz, tgt_len, src_len,
                            need_weights, need_head_weights, head_keep, value_term)

    def _attend(self, probs, weights, v, bsz, kv_bsz, tgt_len, src_len, need_weights,
                need_head_weights, head_keep=None, value_term=None):
        """heads = probs · v (+ value_term(probs)), masked heads and heads not in
        ``head_keep`` (bsz, heads) zeroed, output norm, out_proj; the weights returned as
        stock fairseq does ((heads, bsz, tgt, src) or their head mean)."""
        heads = self.num_heads
        if self.masked_heads:
            keep = torch.ones(heads, dtype=probs.dtype, device=probs.device)
            keep[list(self.masked_heads)] = 0
            probs = probs * keep.view(1, heads, 1, 1)
        if head_keep is not None:
            probs = probs * head_keep.view(bsz, heads, 1, 1).to(probs.dtype)
        if bsz != kv_bsz:
            attn = torch.einsum(
                "bxhts,bhsd->bxhtd",
                probs.view(kv_bsz, -1, heads, tgt_len, src_len),
                v.view(kv_bsz, heads, src_len, self.head_dim),
            ).reshape(bsz * heads, tgt_len, self.head_dim)
        else:
            attn = torch.bmm(probs.view(bsz * heads, tgt_len, src_len), v)
        if value_term is not None:
            extra = value_term(probs.view(bsz, heads, tgt_len, src_len))
            attn = attn + extra.reshape(bsz * heads, tgt_len, self.head_dim).to(attn.dtype)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, self.embed_dim)
        attn = self.out_proj(self.output_norm(attn))

        out_weights: Optional[Tensor] = None
        if need_weights:
            out_weights = weights.transpose(1, 0)  # (heads, bsz, tgt, src) as stock
            if not need_head_weights:
                out_weights = out_weights.mean(dim=0)
        return attn, out_weights

    def _chunked_forward(self, q, k, v, mask, bias, bsz, kv_bsz, tgt_len):
        """Memory-bounded path (attention/chunked_relu.py): weights are never materialized;
        returns the attention output only (no weights)."""
        from .chunked_relu import chunked_relu_attention
        from .scaled_relu import visible_key_counts

        if bias is not None:
            raise ValueError("the key-block (chunked) ReLU path does not support additive attention biases")
        if self.training and self.dropout_module.p > 0:
            raise ValueError("--attn-key-block-size needs --attention-dropout 0 "
                             "(the chunked path cannot replay a dropout mask)")
        heads, d = self.num_heads, self.head_dim
        src_len = k.size(1)
        q4 = q.view(bsz, heads, tgt_len, d)
        k4 = k.view(kv_bsz, heads, src_len, d)
        v4 = v.view(kv_bsz, heads, src_len, d)
        if bsz != kv_bsz:
            k4 = k4.repeat_interleave(bsz // kv_bsz, dim=0)
            v4 = v4.repeat_interleave(bsz // kv_bsz, dim=0)
        n = visible_key_counts(q4.new_empty(1, 1, 1, src_len), mask).float()
        scale = self.activation.row_scale(n)
        regularizer = getattr(self.activation, "regularizer", None)
        out, wsum, wlogw = chunked_relu_attention(q4.float(), k4.float(), v4.float(), mask, scale,
                                                  block=self.key_block_size,
                                                  with_sums=regularizer is not None)
        if regularizer is not None:
            regularizer.add_sums(wsum, wlogw, n)
        attn = out.type_as(q).permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim)
        return self.out_proj(self.output_norm(attn))
