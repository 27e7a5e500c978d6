"""Norm-based analysis of attention (Kobayashi et al. 2020, *Attention is Not Only a
Weight: Analyzing Transformers with Vector Norms*).

Multi-head attention without an output norm is a sum of weighted vectors (Eqs. 3, 4 and
App. A, Eqs. 7-10)::

    y_i = Σ_j Σ_h α^h_{i,j} f^h(x_j) + b^O,    f^h(x) = (x W^{V,h} + b^{V,h}) W^{O,h}

where ``W^{O,h}`` is the block of ``out_proj``'s *input* columns that head h's output
occupies (``out_proj.weight[:, h·d_h:(h+1)·d_h]``, fairseq's ``nn.Linear`` stores
``(out, in)``), and ``b^O`` (``out_proj.bias``) is left out as the paper does (App. A: a
fixed vector says nothing about token-to-token interaction).

* :mod:`.maths` — the formulas: :func:`~.maths.value_transforms`, ``f^h(x_j)`` from the
  recorded value vectors ``v = x W^V + b^V`` (Eq. 9), ``(bsz, heads, src, embed)``;
  :func:`~.maths.norm_statistics`, ``‖f^h(x_j)‖`` (§4.1), ``‖α^h_{i,j} f^h(x_j)‖ =
  |α^h_{i,j}|·‖f^h(x_j)‖`` per head (§3, Eq. 5) and the layer-level
  ``‖Σ_h α^h_{i,j} f^h(x_j)‖`` (App. A Eq. 10; §5.1's layer alignment);
  :func:`~.maths.check_decomposable`;
* :mod:`.recording` — :class:`~.recording.NormRecorder`, the analysis' collector
  (:class:`..recording.Collector`), keeps per (kind, layer) each sentence's matrices
  cropped to its real tokens;
* :mod:`.statistics` — :func:`~.statistics.spearman`,
  :func:`~.statistics.category_spearman` (§4.2 / Table 2: Spearman's ρ between α and
  ‖f(x)‖ per category of the key token, :func:`~.statistics.token_category`) and
  :class:`~.statistics.NormSummary`, the corpus summary of ``fsa-analyze norms``.

The decomposition is exact only when nothing non-linear sits between the weighted sum of
the heads and ``out_proj``.  ReLA's RMSNorm / LayerNorm (and their gates) on the
concatenated heads break it: :func:`check_decomposable` refuses such modules unless
``allow_output_norm=True``, and then every norm here is that of a *pre-norm* vector (what
the heads hand to the output norm, mapped by ``out_proj``), not of a summand of the
module's output.

Heads.  Every head has a value projection, fixed-pattern heads included, so ``f^h`` is
computed for all heads.  A head listed in the module's ``masked_heads`` (test-time
ablation) is zeroed by the module *after* the recorder sees its weights: its ``f`` and
per-head ``‖αf‖`` are still computed (what it would contribute), but it is left out of
the layer-level sum, which therefore stays the module's actual output.  Heads pruned per
sentence by RHE (``--prune-redundant-heads``) are left out of that sentence's layer-level
sum the same way.  A Rel_Pos value term (``--encoder-rel-pos-values``) makes the vector a
key contributes depend on the query: :func:`check_decomposable` refuses it.
"""

from .maths import (
    NormStatistics,
    check_decomposable,
    head_output_blocks,
    model_decomposition,
    norm_statistics,
    pruned_per_sentence,
    value_term_providers,
    value_transforms,
)
from .recording import NormRecorder, SentenceNorms, collect_norms
from .statistics import (
    SPEARMAN_UNITS,
    CategoryCorrelation,
    NormSummary,
    average_ranks,
    category_spearman,
    category_values,
    dictionary_categorizer,
    spearman,
    token_category,
)

__all__ = [
    "NormStatistics",
    "check_decomposable",
    "head_output_blocks",
    "model_decomposition",
    "norm_statistics",
    "pruned_per_sentence",
    "value_term_providers",
    "value_transforms",
    "NormRecorder",
    "SentenceNorms",
    "collect_norms",
    "SPEARMAN_UNITS",
    "CategoryCorrelation",
    "NormSummary",
    "average_ranks",
    "category_spearman",
    "category_values",
    "dictionary_categorizer",
    "spearman",
    "token_category",
]
