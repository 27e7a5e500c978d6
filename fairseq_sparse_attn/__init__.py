"""fairseq_sparse_attn: sparse and structured attention for fairseq (``--user-dir``).

Importing the package registers everything (models, architectures) and installs the
version shims of :mod:`fairseq_sparse_attn.compat`.
"""

__version__ = "0.1.0"

from . import compat

compat.install()

from . import attention, criterions, models, tasks  # noqa: E402,F401


def user_dir() -> str:
    """The path to pass as ``--user-dir`` (fairseq needs a directory)."""
    import os

    return os.path.dirname(os.path.abspath(__file__))
