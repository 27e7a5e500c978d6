"""Command-line helpers of the reproduction scripts (``scripts/``): checkpoint averaging
and BLEU scoring.  Not imported by the plugin package itself."""
