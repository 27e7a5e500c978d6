"""Analyses of trained models.  Recording is in :mod:`.recording`: the collector protocol
(each analysis owns a collector that gets every attention call as ``(site,
intermediates)``) and ``record_attention``; sparsity and null rate
in :mod:`.attention_stats`; word alignments and AER in :mod:`.alignment` (pieces -> words:
:mod:`fairseq_sparse_attn.subwords`); entropy, head diversity and top-p% score sums in
:mod:`.head_stats`; the norm-based analysis of Kobayashi et al. (2020) (‖f(x)‖, ‖αf(x)‖,
layer norms, Spearman per token category) in :mod:`.norms`; ReLUFormer's FFN statistics in
:mod:`.ffn_stats`.  The ``fsa-analyze`` command line (:mod:`.cli`, one module per
subcommand in :mod:`.commands`) runs them over a data set: checkpoints, text and batches in
:mod:`.loading`, the teacher-forced passes in :mod:`.collect`, result files in :mod:`.results`,
PNG plots in :mod:`.plots`."""
