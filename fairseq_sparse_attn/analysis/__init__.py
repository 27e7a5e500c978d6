"""Analyses of trained models.  Recording is in :mod:`.recording`; sparsity and null rate
in :mod:`.attention_stats`; word alignments and AER in :mod:`.alignment`; entropy, head
diversity and top-p% score sums in :mod:`.head_stats`; the norm-based analysis of
Kobayashi et al. (2020) (‖f(x)‖, ‖αf(x)‖, layer norms, Spearman per token category) in
:mod:`.norms`; ReLUFormer's FFN statistics in :mod:`.ffn_stats`.  The ``fsa-analyze``
command line (:mod:`.cli`) runs them over a data set: checkpoints and data in
:mod:`.loading`, corpus collectors in :mod:`.collect`, PNG plots in :mod:`.plots`."""
