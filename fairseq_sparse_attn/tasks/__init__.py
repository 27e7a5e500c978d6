from . import document_translation  # noqa: F401  (registers the task)
