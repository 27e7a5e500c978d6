"""The configuration of one attention module, typed and frozen, one dataclass per component.

The fairseq namespace (flags, a checkpoint's saved args) is read once, when the model is
built: :func:`fairseq_sparse_attn.options.resolve` turns it into an :class:`AttentionConfig`
per attention module (kind and layer), and each component is built from its own part::

    namespace --resolve(cfg, kind, layer)--> AttentionConfig
        .activation   ActivationConfig   -> build_activation      (activations.py)
        .output_norm  OutputNormConfig   -> build_output_norm     (output_norms.py)
        .heads        HeadsConfig        -> FixedPatternHeads, MaskedHeads (heads.py)
        .biases       BiasesConfig       -> build_bias per provider (biases/), RHE (rhe.py)
        .backend      BackendConfig      -> AttendSpec.backend, key blocks (core.py)

Nothing in :mod:`fairseq_sparse_attn.attention` reads the namespace; this module imports
neither fairseq nor the options (``tests/unit/test_import_graph.py``).  Defaults are the
ones of :class:`fairseq_sparse_attn.options.PluginOptions` (a test holds them equal), so a
module built in Python without flags computes what the flags' defaults compute.
"""

from dataclasses import dataclass, field
from typing import Optional, Tuple, Union

ATTENTION_KINDS = ("encoder_self", "decoder_self", "cross")


@dataclass(frozen=True)
class ActivationConfig:
    """The attention activation (``--attn-activation`` / ``--KIND-attn-activation``) and
    the hyper-parameters of the activations that have some."""

    name: str = "softmax"
    entmax_alpha: float = 1.5
    entmax_alpha_learned: bool = False
    entmax_bisect_iters: int = 50
    leaky_relu_slope: float = 0.01
    relu_scale_gamma: float = 1.0
    relu_no_length_scale: bool = False


@dataclass(frozen=True)
class OutputNormConfig:
    """The norm on the concatenated heads (``--attn-output-norm``), ``--attn-norm-eps``."""

    name: str = "none"
    eps: float = 1e-8


@dataclass(frozen=True)
class BiasProviderConfig:
    """The options of a bias provider without any (DEA, Localness); providers with options
    take a subclass."""


@dataclass(frozen=True)
class LocalPhraseConfig(BiasProviderConfig):
    """LPEA: relative phrasal positions clipped to [-max_distance, max_distance]."""

    max_distance: int = 6

    def __post_init__(self):
        if self.max_distance < 0:
            raise ValueError(f"--lpea-max-distance must be >= 0, got {self.max_distance}")


@dataclass(frozen=True)
class RelativePositionConfig(BiasProviderConfig):
    """Rel_Pos: clipping distance (>= 1 when the provider is built) and the values term."""

    max_distance: int = 1
    values: bool = False

    def __post_init__(self):
        if self.max_distance < 1:
            raise ValueError(f"rel_pos needs a clipping distance --encoder-rel-pos-k >= 1, got {self.max_distance}")


@dataclass(frozen=True)
class RHEConfig:
    """Redundant head enlivening in this layer: the gate (``"dynamic"`` or a value in
    (0, 1]) and test-time pruning of the redundant heads."""

    gate: Union[str, float] = "dynamic"
    prune: bool = False
    prune_skip_in_training: bool = False


@dataclass(frozen=True)
class BiasesConfig:
    """The bias providers of this module, ``(name, config)`` in the order they are added to
    the scores, and RHE (None = off)."""

    providers: Tuple[Tuple[str, BiasProviderConfig], ...] = ()
    rhe: Optional[RHEConfig] = None

    @property
    def names(self) -> Tuple[str, ...]:
        return tuple(name for name, _ in self.providers)


@dataclass(frozen=True)
class HeadsConfig:
    """Fixed-pattern heads (the first ``len(fixed_patterns)`` heads) and masked heads."""

    fixed_patterns: Tuple[str, ...] = ()
    fixed_pattern_unit: str = "token"
    right_context_reading: str = "mirrored"
    fixed_patterns_exclude_eos: bool = False
    masked_heads: Tuple[int, ...] = ()


@dataclass(frozen=True)
class BackendConfig:
    """How attention is computed (``--attn-backend``), the key-block size of the memory-
    bounded ReLU path (0 = off) and the key count from which ``auto`` takes a long-sequence
    backend."""

    name: str = "auto"
    key_block_size: int = 0
    flex_min_keys: int = 1024


@dataclass(frozen=True)
class AttentionConfig:
    """Everything an attention module is built from beyond fairseq's own arguments."""

    kind: Optional[str] = None
    layer_index: Optional[int] = None
    activation: ActivationConfig = field(default_factory=ActivationConfig)
    output_norm: OutputNormConfig = field(default_factory=OutputNormConfig)
    heads: HeadsConfig = field(default_factory=HeadsConfig)
    biases: BiasesConfig = field(default_factory=BiasesConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    #: q/k/v initialisation: "fairseq" or "rela_official" (``--attn-init``)
    init: str = "fairseq"


def config_of(module) -> AttentionConfig:
    """The configuration of an attention module: its ``config`` (a
    :class:`~.multihead.SparseMultiheadAttention`), or the stock one (softmax, no output
    norm) for fairseq's own ``MultiheadAttention``."""
    config = getattr(module, "config", None)
    return config if isinstance(config, AttentionConfig) else AttentionConfig()
