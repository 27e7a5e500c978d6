# the model is registered before its architecture presets
# isort: skip_file
from .sparse_transformer import SparseTransformerModel  # noqa: F401  (registers the model)
from . import architectures  # noqa: F401  (registers the presets)
from .. import plugin  # noqa: E402,F401  (fairseq imports this package from --user-dir: the plugin registers itself and installs the compat shims)
