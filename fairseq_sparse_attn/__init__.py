"""fairseq_sparse_attn: sparse and structured attention for fairseq (``--user-dir``).

Importing the package does nothing but define :func:`user_dir`: the attention core
(``fairseq_sparse_attn.attention.core``, ``.activations``) needs torch only.  The fairseq
side -- the models, architectures, tasks and criterion registered with fairseq, and the
version shims of :mod:`fairseq_sparse_attn.compat` -- is :mod:`fairseq_sparse_attn.plugin`,
which runs when fairseq loads :func:`user_dir` (``fsa-user-dir``) as ``--user-dir``, in
every ``fsa-*`` command, or on ``import fairseq_sparse_attn.plugin``.
"""

__version__ = "0.1.0"


def user_dir() -> str:
    """The path to pass as ``--user-dir``: the ``fairseq_sparse_attn_plugin`` folder beside
    this package (fairseq imports it, which registers the plugin; see that package)."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("fairseq_sparse_attn_plugin")  # found, not imported
    if spec is None or not spec.submodule_search_locations:
        return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fairseq_sparse_attn_plugin")
    return os.path.abspath(list(spec.submodule_search_locations)[0])
