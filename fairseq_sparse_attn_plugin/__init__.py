"""The directory to pass to fairseq's ``--user-dir`` (``fsa-user-dir`` prints it).

fairseq imports a ``--user-dir`` by its folder name, and skips it when a package of that
name is imported already.  Nothing but fairseq imports this package, so fairseq always
runs it, in every process (``fairseq-train`` workers and ``fairseq-hydra-train``
included), and it registers the plugin: :mod:`fairseq_sparse_attn.plugin`.
``--user-dir`` naming the ``fairseq_sparse_attn`` folder itself also works where fairseq
imports that package first (a plain ``fairseq-train``; older commands and checkpoints).
"""

import fairseq_sparse_attn.plugin  # noqa: F401
