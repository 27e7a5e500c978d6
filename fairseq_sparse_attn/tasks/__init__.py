from . import document_translation  # noqa: F401  (registers the task)
from . import parse_annotated_translation  # noqa: F401  (registers the task)
