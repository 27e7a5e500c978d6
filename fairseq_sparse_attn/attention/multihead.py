"""The fairseq attention module every paper composes: a thin façade over
:func:`~.core.attend`.

It owns the parameters (stock names ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``; the
activation, output norm and bias-provider submodules), the projections, fairseq's cache
format (``prev_key``, ``prev_value``, ``prev_key_padding_mask``), beam reordering and
the return shapes; the attention itself (scores, biases, mask, activation, dropout, head
policies, value mix) is :func:`~.core.attend`, which returns the head outputs and
:class:`~.intermediates.Intermediates`.  Then ``out = out_proj(output_norm(heads))``.

Per-batch data that is not a fairseq argument (fixed-pattern weights, word ids, syntax
annotations) arrives in ``forward(..., attn_inputs=AttentionInputs(...))`` from the
encoder layer; nothing is set on the module during forward.  Intermediates go to the
callers that asked for them (:func:`~.intermediates.collect`).

Everything beyond fairseq's own arguments comes in one typed
:class:`~.config.AttentionConfig` (resolved from the flags once, when the model is built:
:func:`fairseq_sparse_attn.options.resolve`).  Heads are "learned" or "given their weights"
(:mod:`.heads`): with ``config.heads.fixed_patterns`` the first F heads attend with fixed
patterns (Raganato et al. 2020) and only the remaining heads have query/key projections;
``masked_heads`` zeroes chosen heads; ``config.biases`` (:mod:`.biases`) add to the scores
of every head, or with RHE (:mod:`.rhe`) only of the heads found redundant per sentence.

The projections and fairseq's incremental cache belong to the module's
:class:`~.call_plan.CallPlan` (built once, kept with the spec): every non-stock call is
``plan.project(...)`` and then either :func:`~.core.attend` or, for a call without
gradients, dropout or analysis on a module with a plain pipeline (learned heads, no biases,
not softmax), the plan's inference call, which does the same operations without describing
the call or choosing a backend (decoding one sentence at a time is mostly such calls on tiny
tensors).

With the softmax activation, no output norm and learned heads only the module
*is* stock fairseq: it delegates to :class:`fairseq.modules.MultiheadAttention`
(including its fused fast path) unless per-head weights are asked for (the fused path
averages them), an analysis collects weights, or a backend is forced
(``backend = "materialized"``).  See docs/architecture.md.
"""

import dataclasses
from typing import Dict, Optional, Sequence, Tuple, cast

import torch
from fairseq.modules import MultiheadAttention
from torch import Tensor

from . import mask_cache
from .activations import build_activation
from .biases import BiasProvider, build_bias
from .call_plan import CallPlan, build_plan, hiding_mask_only
from .config import AttentionConfig, BiasesConfig
from .core import AttendSpec, AttentionInputs, _scores, attend, backend_names, is_stock
from .heads import FixedPatternHeads, HeadPlan, MaskedHeads, RedundantHeads
from .intermediates import deliver, wanted
from .output_norms import build_output_norm
from .rhe import RHE_NEEDS, RedundantHeadIdentifier

# q/k/v initialisation: fairseq's MultiheadAttention.reset_parameters, or ReLA's official
# code (bzhangGo/zero); see SparseMultiheadAttention.apply_rela_official_init, docs/rela.md
ATTN_INITS = ("fairseq", "rela_official")

# Additive float masks use -inf (decoder future mask) or -1e8/-1e4 (fairseq's encoder
# conversion of boolean masks).  Anything at or below this is "not visible".
ADDITIVE_MASK_THRESHOLD = -1e4


class SparseMultiheadAttention(MultiheadAttention):
    """fairseq ``MultiheadAttention`` with a pluggable activation and output norm.

    Args (beyond the stock ones):
        config: :class:`~.config.AttentionConfig` (default: stock softmax attention):
            kind (``"encoder_self"``, ``"decoder_self"``, ``"cross"``; for logs and
            analysis), layer_index (0-based; names the logged redundant fraction), the
            activation (:mod:`.activations`), output norm (:mod:`.output_norms`), heads
            (fixed-pattern heads ``0..F-1`` and masked heads, :mod:`.heads`), biases (bias
            providers added to the scores of every head, or with RHE only of the heads
            found redundant; self-attention only; per-batch inputs such as ``src_dep``
            come from the encoder in ``attn_inputs``), backend and q/k/v initialisation.
    """

    biases: torch.nn.ModuleDict  # bias providers by name (set in _build_biases)

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
        config: AttentionConfig = AttentionConfig(),
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
        head_cfg = config.heads
        fixed = FixedPatternHeads(
            head_cfg.fixed_patterns,
            head_cfg.fixed_pattern_unit,
            head_cfg.right_context_reading,
            head_cfg.fixed_patterns_exclude_eos,
        )
        self.fixed_patterns = fixed.patterns
        self.fixed_pattern_unit = fixed.unit
        self.right_context_reading = fixed.right_context_reading
        self.fixed_patterns_exclude_eos = fixed.exclude_eos
        fixed_heads = fixed if fixed.patterns else None
        self.num_fixed_heads = len(self.fixed_patterns)
        self.num_learned_heads = num_heads - self.num_fixed_heads
        if self.num_fixed_heads:
            self._build_learned_projections(num_heads, q_noise, qn_block_size, bias)
        masked = MaskedHeads(head_cfg.masked_heads, num_heads) if head_cfg.masked_heads else None
        self._build_biases(config.biases, config.layer_index)
        self.activation = build_activation(config.activation, max(self.num_learned_heads, 1))
        self.output_norm = build_output_norm(config.output_norm, embed_dim, self.head_dim)
        self.activation_name = config.activation.name
        self.output_norm_name = config.output_norm.name
        self.kind = config.kind
        rhe = config.biases.rhe
        self.heads = HeadPlan(
            num_heads,
            fixed=fixed_heads,
            masked=masked,
            rhe=(
                RedundantHeads(self.rhe, rhe.prune_skip_in_training)
                if self.rhe is not None and rhe is not None
                else None
            ),
        )
        # "auto" or a backend name of attention/core.py (--attn-backend)
        backend = config.backend.name
        if backend not in backend_names():
            raise ValueError(f"--attn-backend must be one of {', '.join(backend_names())}, got {backend!r}")
        self.backend = backend
        # > 0: ReLU-family activations stream over blocks of this many keys (long inputs)
        self.key_block_size = config.backend.key_block_size
        # > 0: in "auto", the fused flex backend serves calls with at least this many keys
        self.flex_min_keys = config.backend.flex_min_keys
        init = config.init
        if init not in ATTN_INITS:
            raise ValueError(f"--attn-init must be one of {', '.join(ATTN_INITS)}, got {init!r}")
        if init == "rela_official":
            self.apply_rela_official_init()

    #: attributes that :meth:`spec`, :attr:`is_stock` and the call plan read: setting one
    #: drops the cached spec and plan (a bias provider added to ``biases`` in place is not
    #: seen: rebuild the module)
    SPEC_ATTRIBUTES = frozenset(
        {
            "activation",
            "dropout_module",
            "heads",
            "biases",
            "backend",
            "key_block_size",
            "flex_min_keys",
            "activation_name",
            "output_norm_name",
            "rhe",
            "q_proj",
            "k_proj",
            "v_proj",
            "out_proj",
            "output_norm",
            "bias_k",
            "add_zero_attn",
            "_incremental_state_id",  # the plan's cache key
        }
    )

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name in SparseMultiheadAttention.SPEC_ATTRIBUTES:
            self.__dict__["_spec_cache"] = None

    def _spec_and_stock(self) -> Tuple[AttendSpec, bool, CallPlan]:
        """(spec, is_stock, the call plan), built once and kept until an
        attribute they read is set (a decoding step calls every attention module per
        token; rebuilding them each call was a visible share of a batch-1 step)."""
        cached = self.__dict__.get("_spec_cache")
        if cached is None:
            spec = AttendSpec(
                activation=self.activation,
                dropout=self.dropout_module,
                heads=self.heads,
                biases=tuple(self.biases.values()),
                backend=self.backend,
                key_block_size=self.key_block_size,
                flex_min_keys=self.flex_min_keys,
            )
            stock = is_stock(self.activation_name, self.output_norm_name, self.heads, self.biases)
            cached = self.__dict__["_spec_cache"] = (spec, stock, build_plan(self))
        return cached

    @property
    def is_stock(self) -> bool:
        """Exactly fairseq's MultiheadAttention (softmax, no norm, learned heads, no biases)."""
        return self._spec_and_stock()[1]

    @property
    def masked_heads(self) -> Tuple[int, ...]:
        return self.heads.masked.heads if self.heads.masked is not None else ()

    @masked_heads.setter
    def masked_heads(self, heads: Sequence[int]):
        """Change the masked heads of a built module (test-time ablation)."""
        masked = MaskedHeads(tuple(heads), self.num_heads) if heads else None
        self.heads = dataclasses.replace(self.heads, masked=masked)

    def spec(self) -> AttendSpec:
        """What :func:`~.core.attend` needs from this module (no copy of parameters; the
        dropout module's ``p`` and ``training`` are read at each call)."""
        return self._spec_and_stock()[0]

    def extra_repr(self):
        fixed = ""
        if self.num_fixed_heads:
            fixed = f", fixed={list(self.fixed_patterns)} ({self.fixed_pattern_unit}"
            fixed += ", right_context literal" if self.right_context_reading == "literal" else ""
            fixed += ", without EOS)" if self.fixed_patterns_exclude_eos else ")"
        masked = f", masked_heads={list(self.masked_heads)}" if self.masked_heads else ""
        return f"kind={self.kind}, embed_dim={self.embed_dim}, heads={self.num_heads}{fixed}{masked}"

    # ------------------------------------------------------------------ biases, RHE
    def _build_biases(self, config: BiasesConfig, layer_index: Optional[int]):
        self.layer_index = layer_index
        self.biases = torch.nn.ModuleDict(
            {name: build_bias(name, self.num_heads, self.head_dim, provider) for name, provider in config.providers}
        )
        name = None if layer_index is None else f"l{layer_index}"
        rhe = config.rhe
        self.rhe = RedundantHeadIdentifier(rhe.gate, rhe.prune, name) if rhe is not None else None
        if (self.biases or self.rhe is not None) and (
            not self.self_attention or self.num_fixed_heads or self.bias_k is not None or self.add_zero_attn
        ):
            raise ValueError(
                "attention biases and RHE are for (encoder) self-attention without "
                "fixed-pattern heads, bias_kv or zero attention"
            )
        needs = {n for provider in self.biases.values() for n in cast(BiasProvider, provider).needs}
        if self.rhe is not None:
            needs.update(RHE_NEEDS)
        self.source_needs = tuple(sorted(needs))

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
        torch.nn.init.xavier_uniform_(self.v_proj.weight, gain=1 / 2**0.5)
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

    # ------------------------------------------------------------------ masks
    def _cached(self, slot: str, tensor: Tensor, extra, compute):
        """``compute(tensor)``, remembered for that tensor (unmodified) in ``slot``.

        fairseq hands the same masks again and again (the cached future mask, sliced
        each step; the encoder padding mask to every layer and at every decoding step):
        the derived masks are shared by all modules (:mod:`.mask_cache`), computed once
        per mask, not once per module."""
        return mask_cache.cached(slot, (tensor,), extra, compute)

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
                if pad.device.type == "cpu" and not bool(pad.any()):
                    # fairseq's encoder hands an all-False mask for a batch without padding
                    # (every batch-1 decoding step): nothing to hide, no masking pass (on a
                    # GPU the check would stop the stream, once per batch and module)
                    return None
                if pad.size(0) != bsz:  # one key copy per beam group
                    pad = pad.repeat_interleave(bsz // pad.size(0), dim=0)
                return pad.view(bsz, 1, 1, src_len)

            pad = self._cached("key_padding", key_padding_mask, bsz, expand)
            if pad is not None:
                # decoder self-attention: causal | padding, once for all layers
                mask = pad if mask is None else mask_cache.cached("hidden", (mask, pad), None, torch.bitwise_or)
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
        attn_inputs: Optional[AttentionInputs] = None,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """fairseq's ``MultiheadAttention.forward`` plus ``attn_inputs``: the per-batch
        inputs of :func:`~.core.attend` that fairseq does not pass (fixed-pattern
        weights, word ids, syntax annotations), from the plugin's encoder layer."""
        collect = wanted()
        _, stock, plan = self._spec_and_stock()
        if plan.serves_inline(before_softmax, collect) and hiding_mask_only(self, attn_mask):
            # inference without analysis: the materialized backend's operations without the
            # per-call bookkeeping (attention/call_plan.py)
            return plan.inline_call(
                self,
                query,
                key,
                key_padding_mask,
                incremental_state,
                need_weights,
                static_kv,
                attn_mask,
                need_head_weights,
            )
        if (
            stock and self.backend == "auto" and "weights" not in collect and not need_head_weights
        ):  # the fused stock path cannot return per-head weights
            return super().forward(
                query,
                key,
                value,
                key_padding_mask=key_padding_mask,
                incremental_state=incremental_state,
                need_weights=need_weights,
                static_kv=static_kv,
                attn_mask=attn_mask,
                before_softmax=before_softmax,
                need_head_weights=need_head_weights,
            )
        if need_head_weights:
            need_weights = True
        tgt_len, bsz, embed_dim = query.size()
        assert embed_dim == self.embed_dim, f"query dim {embed_dim} != {self.embed_dim}"

        if self.num_fixed_heads and (incremental_state is not None or before_softmax):
            raise ValueError(
                "fixed attention patterns are for encoder self-attention: no "
                "incremental decoding, no before_softmax scores"
            )
        if (self.biases or self.rhe is not None) and (incremental_state is not None or before_softmax):
            raise ValueError(
                "attention biases and RHE are for encoder self-attention: no "
                "incremental decoding, no before_softmax scores"
            )
        q, k, v, key_padding_mask, attn_mask, kv_bsz = plan.project(
            self, query, key, value, key_padding_mask, incremental_state, static_kv, attn_mask
        )
        src_len = v.size(1)
        heads, d = self.num_heads, self.head_dim
        bias, mask = self._visibility_mask(attn_mask, key_padding_mask, bsz, tgt_len, src_len)
        qk_heads = self.num_learned_heads
        q4 = q.view(bsz, qk_heads, tgt_len, d) if q is not None else None
        k4 = k.view(kv_bsz, qk_heads, src_len, d) if k is not None else None
        v4 = v.view(kv_bsz, heads, src_len, d)

        if before_softmax:
            scores = _scores(q4, k4, bsz // kv_bsz)  # type: ignore[arg-type]  # no fixed heads here
            if bias is not None:
                scores = scores + bias
            if mask is not None:
                scores = scores.masked_fill(mask, float("-inf"))
            return scores.view(bsz * heads, tgt_len, src_len).type_as(q), v  # type: ignore[arg-type]

        # a forced fused kernel (flex) returns no weights unless an analysis collector asks
        # for them (then the forced backend's error says why): fairseq's own requests (the
        # alignment layer's need_head_weights, need_weights by default) get None.  With
        # --attn-key-block-size, head-averaged weights are returned only when the call ran
        # materialized (the key-block path returns none)
        if self.backend != "flex" and (need_head_weights or (need_weights and not self.key_block_size)):
            collect = collect | {"weights"}
        if attn_inputs is None:  # the usual call (decoder, cross-attention): no copy of defaults
            inputs = AttentionInputs(
                hidden=mask, score_bias=bias, key_padding=key_padding_mask, kv_groups=bsz // kv_bsz, collect=collect
            )
        else:
            inputs = dataclasses.replace(
                attn_inputs,
                hidden=mask,
                score_bias=bias,
                key_padding=key_padding_mask,
                kv_groups=bsz // kv_bsz,
                collect=collect,
            )
        out, inter = attend(q4, k4, v4, inputs, self.spec())
        if collect:
            deliver(self, inter)

        # (bsz, H, tgt, d) -> (tgt, bsz, H*d); one query (a decoding step): a view, no copy
        attn = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim)
        attn = self.out_proj(self.output_norm(attn))
        out_weights: Optional[Tensor] = None
        if need_weights and inter.weights is not None:
            out_weights = inter.weights.transpose(1, 0)  # (heads, bsz, tgt, src) as stock
            if not need_head_weights:
                out_weights = out_weights.mean(dim=0)
        return attn, out_weights
