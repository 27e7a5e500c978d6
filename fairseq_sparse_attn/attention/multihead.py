"""The fairseq attention module every paper composes: a thin façade.

It owns the parameters (stock names ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``; the
activation, output norm and bias-provider submodules), its
:class:`~.config.AttentionConfig` (``module.config``: resolved from the flags once, when the
model is built, :func:`fairseq_sparse_attn.options.resolve`; no setting is copied onto the
module, the ``kind``, ``backend``, ... properties are views of it) and fairseq's return
shapes.  ``forward`` is "stock fairseq, else the plan": the module's
:class:`~.call_plan.CallPlan`, built once from the config and the parameters, owns the
projections, fairseq's cache format (``prev_key``, ``prev_value``,
``prev_key_padding_mask``), ``bias_kv`` / zero attention, the masks (through
:mod:`.masks`), the call of :func:`~.core.attend` (scores, biases, mask, activation,
dropout, head policies, value mix; returns the head outputs and
:class:`~.intermediates.Intermediates`) or its own inference call, and the output ending
``out = out_proj(output_norm(heads))``.

Per-batch data that is not a fairseq argument (fixed-pattern weights, word ids, syntax
annotations) arrives in ``forward(..., attn_inputs=AttentionInputs(...))`` from the
encoder layer; nothing is set on the module during forward.  Intermediates go to the
callers that asked for them (:func:`~.intermediates.collect`).

Heads are "learned" or "given their weights" (:mod:`.heads`): with
``config.heads.fixed_patterns`` the first F heads attend with fixed patterns (Raganato et al.
2020) and only the remaining heads have query/key projections; ``masked_heads`` zeroes chosen
heads; ``config.biases`` (:mod:`.biases`) add to the scores of every head, or with RHE
(:mod:`.rhe`) only of the heads found redundant per sentence.

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

from ..errors import UsageError
from .activations import build_activation
from .biases import BiasProvider, build_bias
from .call_plan import CallPlan, build_plan
from .config import AttentionConfig, BiasesConfig
from .core import REMOVED_BACKENDS, AttendSpec, AttentionInputs, backend_names, unknown_backend_message
from .heads import FixedPatternHeads, HeadPlan, MaskedHeads, RedundantHeads
from .intermediates import attention_wanted, deliver
from .output_norms import build_output_norm
from .rhe import RHE_NEEDS, RedundantHeadIdentifier

# q/k/v initialisation: fairseq's MultiheadAttention.reset_parameters, or ReLA's official
# code (bzhangGo/zero); see SparseMultiheadAttention.apply_rela_official_init, docs/rela.md
ATTN_INITS = ("fairseq", "rela_official")


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
        # the module's settings: read through ``self.config`` (the properties below are views
        # of it), never copied onto the module
        self.config = config
        head_cfg = config.heads
        fixed = FixedPatternHeads(
            head_cfg.fixed_patterns,
            head_cfg.fixed_pattern_unit,
            head_cfg.right_context_reading,
            head_cfg.fixed_patterns_exclude_eos,
        )
        fixed_heads = fixed if fixed.patterns else None
        self.num_fixed_heads = len(fixed.patterns)
        self.num_learned_heads = num_heads - self.num_fixed_heads
        if self.num_fixed_heads:
            self._build_learned_projections(num_heads, q_noise, qn_block_size, bias)
        masked = MaskedHeads(head_cfg.masked_heads, num_heads) if head_cfg.masked_heads else None
        self._build_biases(config.biases, config.layer_index)
        self.activation = build_activation(config.activation, max(self.num_learned_heads, 1))
        # the fused norm kernel: the user chose the fused path (decided here, once)
        fused_norm = config.backend.name == "triton"
        self.output_norm = build_output_norm(config.output_norm, embed_dim, self.head_dim, fused=fused_norm)
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
        # "auto" or a backend name of attention/backends (--attn-backend)
        if config.backend.name not in backend_names():
            error = UsageError if config.backend.name in REMOVED_BACKENDS else ValueError
            raise error(unknown_backend_message(config.backend.name))
        if config.init not in ATTN_INITS:
            raise ValueError(f"--attn-init must be one of {', '.join(ATTN_INITS)}, got {config.init!r}")
        if config.init == "rela_official":
            self.apply_rela_official_init()

    # ------------------------------------------------------------------ views of the config
    def _set_config(self, **parts):
        self.config = dataclasses.replace(self.config, **parts)

    @property
    def kind(self) -> Optional[str]:
        return self.config.kind

    @property
    def layer_index(self) -> Optional[int]:
        return self.config.layer_index

    @property
    def activation_name(self) -> str:
        return self.config.activation.name

    @activation_name.setter
    def activation_name(self, name: str):
        """(With a new ``activation`` module: the config names it.)"""
        self._set_config(activation=dataclasses.replace(self.config.activation, name=name))

    @property
    def output_norm_name(self) -> str:
        return self.config.output_norm.name

    @property
    def backend(self) -> str:
        """``"auto"`` or a backend name (``config.backend.name``); setting it replaces the
        config (and drops the cached plan)."""
        return self.config.backend.name

    @backend.setter
    def backend(self, name: str):
        self._set_config(backend=dataclasses.replace(self.config.backend, name=name))

    @property
    def key_block_size(self) -> int:
        """> 0: ReLU-family activations stream over blocks of this many keys (long inputs)."""
        return self.config.backend.key_block_size

    @key_block_size.setter
    def key_block_size(self, size: int):
        self._set_config(backend=dataclasses.replace(self.config.backend, key_block_size=size))

    @property
    def flex_min_keys(self) -> int:
        """> 0: in "auto", the ``query_block`` backend serves calls without gradients with at
        least this many keys (``--attn-flex-min-keys``)."""
        return self.config.backend.flex_min_keys

    @flex_min_keys.setter
    def flex_min_keys(self, keys: int):
        self._set_config(backend=dataclasses.replace(self.config.backend, flex_min_keys=keys))

    @property
    def fixed_patterns(self) -> Tuple[str, ...]:
        return self.heads.fixed.patterns if self.heads.fixed is not None else ()

    @property
    def fixed_pattern_unit(self) -> str:
        return self.config.heads.fixed_pattern_unit

    @property
    def right_context_reading(self) -> str:
        return self.config.heads.right_context_reading

    @property
    def fixed_patterns_exclude_eos(self) -> bool:
        return self.config.heads.fixed_patterns_exclude_eos

    #: attributes that the call plan (and with it :meth:`spec` and :attr:`is_stock`) is
    #: built from: setting one drops the cached plan (a bias provider added to ``biases`` in
    #: place is not seen: rebuild the module)
    SPEC_ATTRIBUTES = frozenset(
        {
            "config",
            "activation",
            "dropout_module",
            "heads",
            "biases",
            "rhe",
            "q_proj",
            "k_proj",
            "v_proj",
            "out_proj",
            "output_norm",
            "bias_k",
            "bias_v",
            "add_zero_attn",
            "beam_size",  # fairseq's set_beam_size
            "_incremental_state_id",  # the plan's cache key
            # fairseq's sizes and flags, copied by the plan (scaling: the fixture test's probe)
            "scaling",
            "num_heads",
            "num_learned_heads",
            "head_dim",
            "embed_dim",
            "self_attention",
            "encoder_decoder_attention",
        }
    )

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name in SparseMultiheadAttention.SPEC_ATTRIBUTES:
            self.__dict__["_spec_cache"] = None

    def plan(self) -> CallPlan:
        """The module's :class:`~.call_plan.CallPlan`, built once from ``self.config`` and
        the parameters, kept until an attribute it was built from is set (a decoding step
        calls every attention module per token; rebuilding it each call was a visible share
        of a batch-1 step)."""
        plan = self.__dict__.get("_spec_cache")
        if plan is None:
            plan = self.__dict__["_spec_cache"] = build_plan(self.config, self)
        return plan

    def _spec_and_stock(self) -> Tuple[AttendSpec, bool, CallPlan]:
        """(spec, is_stock, the call plan): the plan and two of its fields."""
        plan = self.plan()
        return plan.spec, plan.stock, plan

    @property
    def is_stock(self) -> bool:
        """Exactly fairseq's MultiheadAttention (softmax, no norm, learned heads, no biases)."""
        return self.plan().stock

    @property
    def masked_heads(self) -> Tuple[int, ...]:
        return self.heads.masked.heads if self.heads.masked is not None else ()

    @masked_heads.setter
    def masked_heads(self, heads: Sequence[int]):
        """Change the masked heads of a built module (test-time ablation); the config says so."""
        masked = MaskedHeads(tuple(heads), self.num_heads) if heads else None
        self._set_config(heads=dataclasses.replace(self.config.heads, masked_heads=tuple(heads)))
        self.heads = dataclasses.replace(self.heads, masked=masked)

    def spec(self) -> AttendSpec:
        """What :func:`~.core.attend` needs from this module (no copy of parameters; the
        dropout module's ``p`` and ``training`` are read at each call)."""
        return self.plan().spec

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
        collect = attention_wanted()
        plan = self.plan()
        if plan.delegates_to_stock(collect, need_head_weights):
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
        out, weights, inter = plan.forward(
            query,
            key,
            value,
            key_padding_mask,
            incremental_state,
            need_weights,
            static_kv,
            attn_mask,
            before_softmax,
            need_head_weights,
            attn_inputs,
            collect,
        )
        if collect and inter is not None:
            deliver(self, inter)
        return out, weights
