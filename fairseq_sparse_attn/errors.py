"""The plugin's error for bad input a user can fix.

Raised with a one-line message that names the file / line / flag and what was expected;
the ``fsa-*`` commands print it as ``fsa-train: error: <message>`` (exit status 1) instead
of a traceback (``FSA_TRACEBACK=1`` shows the traceback).  Under ``fairseq-train
--user-dir`` it is the last line of fairseq's traceback.
"""


class UsageError(ValueError):
    """Bad input (data, checkpoint, flags) with a one-line explanation."""
