"""The model (``sparse_transformer``) and its architecture presets, registered with
fairseq on import.  The plugin's other parts (compat patches, tasks, criterion) are
:mod:`fairseq_sparse_attn.plugin`; with ``--user-dir`` naming the package folder, fairseq
imports every module of this folder, and :mod:`.folder_entry` imports the plugin."""

# the model is registered before its architecture presets
# isort: skip_file
from .sparse_transformer import SparseTransformerModel  # noqa: F401  (registers the model)
from . import architectures  # noqa: F401  (registers the presets)
