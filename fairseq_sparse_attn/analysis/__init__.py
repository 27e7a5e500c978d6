"""Analyses of trained models.  Recording is in :mod:`.recording`; statistics in
:mod:`.attention_stats`."""
