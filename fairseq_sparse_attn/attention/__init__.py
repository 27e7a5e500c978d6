"""The attention core: ``attend()`` and its backends, activations, output norms, bias
providers, head policies (:class:`~.heads.HeadPlan`), and the fairseq module that is a façade over them (see
docs/architecture.md)."""

from . import backends, scaled_relu  # noqa: F401  (register the backends, relu_scaled)
from .activations import ACTIVATION_REGISTRY, activation_names, build_activation, register_activation
from .biases import BIAS_REGISTRY, bias_names, build_bias, register_bias
from .config import AttentionConfig
from .core import AttendSpec, AttentionInputs, Backend, Capabilities, attend, backend_names, register_backend
from .intermediates import Intermediates, collect
from .output_norms import OUTPUT_NORM_REGISTRY, build_output_norm, output_norm_names, register_output_norm


def __getattr__(name):
    # the fairseq module is imported on first use: the core (attend, activations, output
    # norms, biases) needs torch only, so `import fairseq_sparse_attn.attention.core`
    # works without fairseq
    if name == "SparseMultiheadAttention":
        from .multihead import SparseMultiheadAttention

        return SparseMultiheadAttention
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AttendSpec",
    "AttentionConfig",
    "AttentionInputs",
    "Backend",
    "Capabilities",
    "Intermediates",
    "attend",
    "backend_names",
    "collect",
    "register_backend",
    "ACTIVATION_REGISTRY",
    "BIAS_REGISTRY",
    "OUTPUT_NORM_REGISTRY",
    "SparseMultiheadAttention",
    "activation_names",
    "bias_names",
    "build_activation",
    "build_bias",
    "build_output_norm",
    "output_norm_names",
    "register_activation",
    "register_bias",
    "register_output_norm",
]
