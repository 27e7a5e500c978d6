"""The plugin's fairseq side, in one import: ``import fairseq_sparse_attn.plugin``
installs the version shims of :mod:`fairseq_sparse_attn.compat` and registers the models,
architectures, tasks and criterion with fairseq.

It runs when fairseq loads ``--user-dir "$(fsa-user-dir)"`` (the package
``fairseq_sparse_attn_plugin``, which imports this module), or ``--user-dir`` naming the
``fairseq_sparse_attn`` folder (fairseq then imports every module of ``models/``, among
them ``models/folder_entry.py``, which imports this module), in every ``fsa-*`` command,
and wherever code needs the plugin registered (the analysis tools, tests).  A plain ``import fairseq_sparse_attn`` or
``import fairseq_sparse_attn.attention.core`` does not: the core needs torch only.
Importing it twice does nothing more (Python's module cache; ``compat.install`` is
idempotent).
"""

import logging

# Importing fairseq.models runs `logging.basicConfig(level=DEBUG)` (in
# wav2vec2_classification), which would turn a Python session's root logger to DEBUG.
# While the plugin imports fairseq, a placeholder handler makes that call a no-op; the
# logging set-up is then as it was (a CLI configures its own).
_placeholder = None
if not logging.root.handlers:
    _placeholder = logging.NullHandler()
    logging.root.addHandler(_placeholder)
try:
    from . import compat

    compat.install()  # before the others import fairseq: quiet_logs filters its import noise

    from . import attention, criterions, models, tasks  # noqa: F401  (registration)
finally:
    if _placeholder is not None:
        logging.root.removeHandler(_placeholder)
