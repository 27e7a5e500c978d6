"""Subword pieces -> words: the project's one grouping (alignments and AER, the text
``fsa-analyze filter`` writes, norms' token categories, word counts of BLEU by length, and
the word-based fixed encoder patterns: ``attention/fixed_patterns.py`` reads its per-piece
flags from :func:`marker_flag` and its list version is :func:`word_index`).

Schemes (the ``--subword-scheme`` vocabulary of ``fsa-analyze``):

* ``"subword-nmt"`` (alias ``"bpe"``): a piece ending in ``@@`` continues into the next
  piece; a trailing ``@@`` on the last piece is an error (the last word would be cut off);
* ``"sentencepiece"``: a piece starting with ``▁`` (U+2581) starts a word; the first
  piece always does;
* ``"word"``: every piece is a word (whitespace-tokenized text).

``eos`` (optional) is a symbol that is always a word of its own and ends the word before
it, the convention of the word-based fixed encoder patterns
(``attention/fixed_patterns.py``).

Unknown pieces.  In a binarized (fairseq-preprocess) split a piece missing from the
dictionary is stored as ``<unk>`` and loses its marker (``@@`` / ``▁``), so the word
boundaries around it cannot be recovered: :func:`uncertain_boundaries` says whether a
sentence has such a piece.
"""

from typing import List, Optional, Sequence

SUBWORD_SCHEMES = ("subword-nmt", "sentencepiece", "word")
ALIASES = {"bpe": "subword-nmt"}
SENTENCEPIECE_WORD_START = "\u2581"
CONTINUATION = "@@"


def canonical_scheme(scheme: str) -> str:
    """The scheme's name in :data:`SUBWORD_SCHEMES` (``"bpe"`` -> ``"subword-nmt"``)."""
    name = ALIASES.get(scheme, scheme)
    if name not in SUBWORD_SCHEMES:
        raise ValueError(f"subword scheme must be one of {SUBWORD_SCHEMES}, got {scheme!r}")
    return name


def word_index(
    pieces: Sequence[str], scheme: str, eos: Optional[str] = None, continuation: str = CONTINUATION
) -> List[int]:
    """The 0-based word each piece belongs to (see the module docstring for the schemes);
    ``continuation``: the subword-nmt marker (``@@`` unless a corpus used another).

    >>> word_index("a master of science fic@@ tion .".split(), "subword-nmt")
    [0, 1, 2, 3, 4, 4, 5]
    """
    scheme = canonical_scheme(scheme)
    if not continuation:
        raise ValueError("continuation marker must be a non-empty string")
    out: List[int] = []
    word = -1
    continues = False  # the previous piece says the word goes on
    for i, piece in enumerate(pieces):
        if eos is not None and piece == eos:
            word += 1
            continues = False
        elif scheme == "word":
            word += 1
        elif scheme == "subword-nmt":
            if not continues:
                word += 1
            continues = piece.endswith(continuation)
        else:
            after_eos = eos is not None and i > 0 and pieces[i - 1] == eos
            if i == 0 or after_eos or piece.startswith(SENTENCEPIECE_WORD_START):
                word += 1
        out.append(word)
    if scheme == "subword-nmt" and continues:
        raise ValueError(
            f"subword-nmt pieces end with a continuation piece {pieces[-1]!r} (trailing "
            f"'@@'): the last word is cut off; pieces: {' '.join(pieces)}"
        )
    return out


def marker_flag(piece: str, scheme: str) -> bool:
    """The per-piece flag a vectorized grouping reads (fixed patterns' batched word ids,
    ``attention/fixed_patterns.py``): subword-nmt: the piece ends in ``@@`` (its word goes
    on after it); sentencepiece: the piece does not start with ``▁`` (it goes on from the
    piece before); word: never."""
    scheme = canonical_scheme(scheme)
    if scheme == "subword-nmt":
        return piece.endswith(CONTINUATION)
    if scheme == "sentencepiece":
        return not piece.startswith(SENTENCEPIECE_WORD_START)
    return False


def word_count(pieces: Sequence[str], scheme: str) -> int:
    """Number of words the pieces form."""
    groups = word_index(pieces, scheme)
    return (groups[-1] + 1) if groups else 0


def words(pieces: Sequence[str], scheme: str) -> List[str]:
    """The words, markers removed (``"fic@@ tion"`` -> ``"fiction"``; ``"▁new ▁york"``
    -> ``"new york"``), as fairseq's ``--post-process`` does."""
    groups = word_index(pieces, scheme)
    scheme = canonical_scheme(scheme)
    out: List[str] = []
    for piece, group in zip(pieces, groups):
        if scheme == "subword-nmt" and piece.endswith(CONTINUATION):
            piece = piece[: -len(CONTINUATION)]
        elif scheme == "sentencepiece":
            piece = piece.replace(SENTENCEPIECE_WORD_START, "")
        if group == len(out):
            out.append(piece)
        else:
            out[group] += piece
    return out


def strip_markers(piece: str) -> str:
    """The piece without its subword markers (a trailing ``@@``, leading ``▁``), whichever
    scheme it comes from (token categories of the norm analysis)."""
    if piece.endswith(CONTINUATION):
        piece = piece[: -len(CONTINUATION)]
    return piece.lstrip(SENTENCEPIECE_WORD_START)


def join_words(pieces: Sequence[str], scheme: str) -> str:
    """The text with subword markers removed, words separated by one blank."""
    return " ".join(w for w in words(pieces, scheme) if w)


def uncertain_boundaries(pieces: Sequence[str], scheme: str, unk: str = "<unk>") -> bool:
    """True when a piece is the unknown symbol of a binarized split, whose subword marker
    was lost, so the words of the sentence cannot be told apart reliably (always False
    for ``"word"``: every piece is a word anyway)."""
    return canonical_scheme(scheme) != "word" and unk in pieces
