"""The plugin's entry where ``--user-dir`` names the ``fairseq_sparse_attn`` folder itself
(a plain ``fairseq-train``; older commands and checkpoints): fairseq then imports the
package, every module of its ``tasks/`` and every module of ``models/``, this one
included, which registers the plugin (:mod:`fairseq_sparse_attn.plugin`).

A module of its own, imported by nothing in the package: were the import in
``models/__init__``, the plugin (which imports the models) and the models package would
import each other (tests/unit/test_import_graph.py).
"""

from .. import plugin  # noqa: F401  (registers the plugin, installs the compat patches)
