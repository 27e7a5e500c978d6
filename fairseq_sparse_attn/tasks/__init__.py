# one import per registered task, each with its comment
# isort: skip_file
from . import document_translation  # noqa: F401  (registers the task)
from . import parse_annotated_translation  # noqa: F401  (registers the task)
