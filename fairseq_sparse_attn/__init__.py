"""fairseq_sparse_attn: sparse and structured attention for fairseq (``--user-dir``).

Importing the package does nothing but define :func:`user_dir`: the attention core
(``fairseq_sparse_attn.attention.core``, ``.activations``) needs torch only.  The fairseq
side -- the models, architectures, tasks and criterion registered with fairseq, and the
version shims of :mod:`fairseq_sparse_attn.compat` -- is :mod:`fairseq_sparse_attn.plugin`,
which runs when fairseq loads this directory as ``--user-dir`` (through
``fairseq_sparse_attn.models``, which fairseq imports), in every ``fsa-*`` command, or on
``import fairseq_sparse_attn.plugin``.
"""

__version__ = "0.1.0"


def user_dir() -> str:
    """The path to pass as ``--user-dir`` (fairseq needs a directory): this package.

    It also registers the plugin (imports :mod:`fairseq_sparse_attn.plugin`): fairseq
    imports a ``--user-dir`` only when its package is not imported yet, and this package
    is (it defines this function)."""
    import os

    from . import plugin  # noqa: F401

    return os.path.dirname(os.path.abspath(__file__))
