"""Bias providers: the "scores += biases" step of the attention core (docs/architecture.md).

A provider is a small ``nn.Module`` that, for one batch of encoder self-attention, returns

* ``bias``: float32 additive scores, broadcastable to ``(bsz, heads, tgt, src)``, or None;
* ``hide``: boolean, broadcastable to the same shape, True = key not visible (the paper's
  −∞ bias), or None.

−∞ is never added as a number: ``hide`` joins the padding mask and every activation
removes hidden keys its own way (−inf before softmax, exact zero after a ReLU), see
:mod:`.activations`.  Rows of padding queries are never hidden by a provider (they keep
seeing the sentence, as in stock fairseq), so no row is left without a visible key.

Rel_Pos also changes the head output (Shaw et al. 2018, Eq. 3): ``value_term(probs, ctx)``
returns ``Σ_j α_ij a^V_ij`` per head, added to ``α·V``.

Registered providers (paper equations in docs/rhe.md):

==============  ===========================================================  =============
name            what                                                        needs
==============  ===========================================================  =============
``dea``         D_ij = 0 if dependency-related or i = j, else −∞            ``src_dep``
``lpea``        P_ij = −|tanh(W_P·w_clip(RP_ij,k) + b_P)·U_P|, −∞ off-phrase ``src_rp``
``rel_pos``     q_i·a^K_clip(j−i,k)/√d_h (+ values term)                     —
``localness``   G_ij = −(j − P_i)² / (2σ_i²), P_i, σ_i from the query         —
==============  ===========================================================  =============

``src_dep`` / ``src_rp`` are the per-batch source annotations of the
``parse_annotated_translation`` task, ``(bsz, T, T)``, padded like ``src_tokens``;
the encoder hands them to the modules (see ``models/sparse_transformer.py``).

Adding a provider = one file in this package with a module ``forward(q, ctx) -> (bias,
hide)`` built from ``(num_heads, head_dim, config)``, decorated with :func:`register_bias`
and imported at the end of this ``__init__``; its options are a
:class:`~..config.BiasProviderConfig` (a subclass when it has some), which
:func:`fairseq_sparse_attn.options.resolve` fills from its flags
(``BIAS_PROVIDER_CONFIGS`` there, + the flags in
:class:`fairseq_sparse_attn.options.PluginOptions` and a line in the table above); see
docs/architecture.md for the worked example (``localness.py``).
"""

from ...syntax import NO_PHRASE  # noqa: F401  (src_rp value for "not in the local phrase")
from .provider import (  # noqa: F401
    BIAS_REGISTRY,
    BiasContext,
    BiasProvider,
    bias_names,
    build_bias,
    check_source_annotations,
    register_bias,
)

# the providers (registration order; options.BIAS_PROVIDER_CONFIGS resolves them in the same order)
# isort: off
from .dea import DependencyMask  # noqa: E402,F401
from .lpea import LocalPhraseBias, relative_label_bias  # noqa: E402,F401
from .rel_pos import RelativePosition, relative_positions  # noqa: E402,F401
from .localness import LOCALNESS_MIN_VARIANCE, GaussianLocalness  # noqa: E402,F401
# isort: on
