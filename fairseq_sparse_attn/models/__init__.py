# the model is registered before its architecture presets
# isort: skip_file
from .sparse_transformer import SparseTransformerModel  # noqa: F401  (registers the model)
from . import architectures  # noqa: F401  (registers the presets)
