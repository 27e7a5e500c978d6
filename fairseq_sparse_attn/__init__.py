"""fairseq_sparse_attn: sparse and structured attention for fairseq (``--user-dir``).

Importing the package registers everything (models, architectures) and installs the
version shims of :mod:`fairseq_sparse_attn.compat`.
"""

__version__ = "0.1.0"

import logging as _logging

if not _logging.root.handlers:
    # before fairseq is imported: its wav2vec2_classification module would set the root
    # logger to DEBUG without timestamps; this is fairseq_cli's format
    _logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
                         datefmt="%Y-%m-%d %H:%M:%S", level=_logging.INFO)

from . import compat  # noqa: E402

compat.install()

from . import attention, criterions, models, tasks  # noqa: E402,F401


def user_dir() -> str:
    """The path to pass as ``--user-dir`` (fairseq needs a directory)."""
    import os

    return os.path.dirname(os.path.abspath(__file__))
