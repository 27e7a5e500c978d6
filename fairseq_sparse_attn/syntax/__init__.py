"""Syntax for the encoder: parsing (spaCy, benepar), readers (CoNLL-U, PTB, side files),
and the word -> BPE-token matrices (``src_dep``, ``src_rp``) of
``--task parse_annotated_translation``.  See :mod:`.structure` for the interface.

Importing this package does not import spaCy or benepar (:mod:`.parsing` does, lazily).
"""

from .readers import ParseFormatError, Tree, parse_ptb  # noqa: F401
from .structure import (  # noqa: F401
    NO_PHRASE,
    AlignmentError,
    LocalPhrases,
    align_pieces,
    dependency_matrix,
    local_phrases,
    phrase_rp_matrix,
    sentence_structure,
    tree_from_dependencies,
)
