from . import relu_regularized  # noqa: F401  (registers the criterion)
