"""Word-level syntax -> the token-level matrices the encoder reads (DEA and LPEA).

Interface with the attention side
---------------------------------
``--task parse_annotated_translation`` adds two tensors to ``sample["net_input"]``; the
encoder receives them as keyword arguments of ``forward`` (fairseq's SequenceGenerator
passes every ``net_input`` key to ``forward_encoder``):

``src_dep``: ``torch.bool``, ``(bsz, T, T)``, ``T = src_tokens.size(1)``, padded exactly
    like ``src_tokens`` (left by default, right with ``--left-pad-source False``).
    ``True`` where token i and token j are dependency-related: their words are head and
    dependent (either direction), or they are pieces of the same word, or i == j.
    EOS is related only to itself.  Padding rows and columns are all ``False``.
``src_rp``: ``torch.int16``, ``(bsz, T, T)``: the relative phrasal position
    ``RP_ij = layer(word(j)) - layer(word(i))`` where word(j) is in the local phrase of
    word(i); pieces of one word share the word's values and have RP 0 to each other.
    :data:`NO_PHRASE` (-32768) where masked, on the EOS row and column except
    ``RP[EOS, EOS] = 0``, and on padding.  Clipping to [-k, k] is the attention side's.

For one sentence, :func:`dependency_matrix` and :func:`phrase_rp_matrix` build both from
a heads list / a tree and ``word_ids`` (the word index of each BPE piece);
:func:`sentence_structure` does it from word tokens, BPE tokens, heads and tree.  With
``with_eos=True`` (the default) the matrices have one more row and column for the
source's final EOS token.

Definitions (docs/rhe.md "Parsing and data")
--------------------------------------------
* Heads: 0-based word indices, -1 for a root (a forest is allowed).
* DEA relation: ``D_ij = heads[i] == j or heads[j] == i or i == j``.
* layer(x): depth of the word's leaf in the constituency tree, the root node at 0, the
  POS preterminal counted — the paper's Fig. 3 puts "Bush" in (S (NP (NNP Bush))) at
  layer 3.  Every word of a PTB tree has exactly one preterminal, so counting it or not
  shifts all layers by one and leaves every RP unchanged; it matters only for trees with
  words directly under phrase nodes, where the leaf's actual depth is used.
* Local phrase, Rule 1: the words under the lowest ancestor of x_i that has more than one
  word below it (unary chains are skipped; in a one-word sentence the phrase is the word
  itself).  Rule 2 (default ``"symmetric"``): symmetric closure, so j is in LP(i) iff j
  is under i's Rule-1 node or i is under j's; ``"literal"`` (the paper's "if x_i in
  LP(x_j), j < i, then x_j in LP(x_i)"): j is in LP(i) iff j is under i's Rule-1 node, or
  j < i and i is under j's.  Every Rule-1 phrase is a contiguous span, so a sentence's local
  phrases are stored as (layer, span start, span end) per word (:class:`LocalPhrases`).
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..errors import AlignmentError
from .readers import Tree, check_heads, first_difference, leaf_matches, parse_ptb

RULE2_READINGS = ("symmetric", "literal")
"""Readings of LPEA's Rule 2 (docs/rhe.md), flag ``--local-phrase-rule2``."""

NO_PHRASE = -32768
"""``src_rp`` value where j is not in the local phrase of i, at EOS and at padding."""


# --------------------------------------------------------------------------- local phrases


class LocalPhrases(NamedTuple):
    """Per word: ``layers`` (leaf depth, root = 0) and its Rule-1 span ``[starts, ends)``."""

    layers: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    def __len__(self):
        return len(self.layers)


def local_phrases(tree: Union[Tree, str]) -> LocalPhrases:
    """Layers and Rule-1 local-phrase spans of the tree's words (in leaf order)."""
    if isinstance(tree, str):
        tree = parse_ptb(tree)
    layers: List[int] = []
    spans: List[Optional[Tuple[int, int]]] = []
    # iterative DFS; a frame is (node, depth, closing); closing frames pop the node's start
    stack: List[Tuple[object, int, bool]] = [(tree, 0, False)]
    starts_of: List[int] = []
    while stack:
        node, depth, closing = stack.pop()
        if isinstance(node, str):
            layers.append(depth)
            spans.append(None)
            continue
        if closing:
            start = starts_of.pop()
            end = len(layers)
            if end - start > 1:
                for w in range(start, end):
                    if spans[w] is None:
                        spans[w] = (start, end)
            continue
        starts_of.append(len(layers))
        stack.append((node, depth, True))
        for child in reversed(node.children):
            stack.append((child, depth + 1, False))
    n = len(layers)
    starts = np.array([s[0] if s else i for i, s in enumerate(spans)], dtype=np.int64)
    ends = np.array([s[1] if s else i + 1 for i, s in enumerate(spans)], dtype=np.int64)
    return LocalPhrases(np.array(layers, dtype=np.int64).reshape(n), starts.reshape(n), ends.reshape(n))


def check_rule2(rule2: str) -> str:
    if rule2 not in RULE2_READINGS:
        raise ValueError(f"unknown Rule 2 reading {rule2!r}; valid: {', '.join(RULE2_READINGS)} (--local-phrase-rule2)")
    return rule2


def word_phrase_mask(phrases: LocalPhrases, rule2: str = "symmetric") -> np.ndarray:
    """``M[i, j]``: j in the local phrase of i (Rules 1 and 2), ``(n, n)`` bool.
    ``rule2``: ``"symmetric"`` closure or the paper's ``"literal"`` one-directional rule
    (only an earlier word j < i is added to LP(i) when i is in j's Rule-1 phrase)."""
    check_rule2(rule2)
    n = len(phrases)
    idx = np.arange(n)
    rule1 = (phrases.starts[:, None] <= idx[None, :]) & (idx[None, :] < phrases.ends[:, None])
    if rule2 == "literal":
        return rule1 | (rule1.T & (idx[None, :] < idx[:, None]))
    return rule1 | rule1.T


def word_rp_matrix(phrases: LocalPhrases, rule2: str = "symmetric") -> np.ndarray:
    """Word-level ``RP_ij = layer(j) - layer(i)`` inside local phrases, else NO_PHRASE."""
    if len(phrases) and phrases.layers.max() > 32767:  # |RP| <= the deepest layer
        raise ValueError("tree too deep for int16 relative phrasal positions")
    rp = phrases.layers[None, :] - phrases.layers[:, None]
    return np.where(word_phrase_mask(phrases, rule2), rp, NO_PHRASE).astype(np.int16)


def word_dependency_matrix(heads: Sequence[int]) -> np.ndarray:
    """Word-level DEA relation ``(n, n)`` bool from 0-based heads (-1 = root)."""
    heads = [int(h) for h in heads]
    check_heads(heads)
    n = len(heads)
    d = np.eye(n, dtype=bool)
    for i, h in enumerate(heads):
        if h >= 0:
            d[i, h] = d[h, i] = True
    return d


# --------------------------------------------------------------------------- word -> tokens


def _check_word_ids(word_ids: Sequence[int], n_words: int) -> np.ndarray:
    ids = np.asarray(list(word_ids), dtype=np.int64)
    if ids.ndim != 1:
        raise ValueError("word_ids must be a flat sequence (the word index of each BPE piece)")
    if len(ids):
        steps = np.diff(ids)
        if ids[0] != 0 or (steps < 0).any() or (steps > 1).any():
            raise ValueError(
                f"word_ids {ids.tolist()} must start at 0 and step by 0 (next piece of the same word) or 1 (next word)"
            )
        if ids[-1] >= n_words:
            raise ValueError(f"word_ids refer to word {ids[-1]} but the parse has {n_words} words")
    return ids


def _expand(word_matrix: np.ndarray, word_ids, with_eos: bool, fill, eos_diag) -> np.ndarray:
    n_words = word_matrix.shape[0]
    ids = np.arange(n_words) if word_ids is None else _check_word_ids(word_ids, n_words)
    tok = word_matrix[np.ix_(ids, ids)]
    if not with_eos:
        return tok
    n = len(ids)
    out = np.full((n + 1, n + 1), fill, dtype=word_matrix.dtype)
    out[:n, :n] = tok
    out[n, n] = eos_diag
    return out


def dependency_matrix(
    heads: Sequence[int], word_ids: Optional[Sequence[int]] = None, with_eos: bool = True
) -> torch.Tensor:
    """Token-level DEA relation (``torch.bool``).

    ``heads``: 0-based head word of each word, -1 for a root.  ``word_ids``: the word index
    of each BPE piece (``None``: one piece per word).  ``with_eos``: add the EOS row and
    column (EOS related only to itself)."""
    return torch.from_numpy(_expand(word_dependency_matrix(heads), word_ids, with_eos, False, True))


def phrase_rp_matrix(
    tree: Union[Tree, str, LocalPhrases],
    word_ids: Optional[Sequence[int]] = None,
    with_eos: bool = True,
    rule2: str = "symmetric",
) -> torch.Tensor:
    """Token-level relative phrasal positions (``torch.int16``), NO_PHRASE where masked.

    ``tree``: a :class:`Tree`, a PTB bracketed string, or :class:`LocalPhrases`.
    ``word_ids`` and ``with_eos`` as in :func:`dependency_matrix`; the EOS row and column
    are NO_PHRASE except ``RP[EOS, EOS] = 0``.  ``rule2``: see :func:`word_phrase_mask`."""
    phrases = tree if isinstance(tree, LocalPhrases) else local_phrases(tree)
    return torch.from_numpy(_expand(word_rp_matrix(phrases, rule2), word_ids, with_eos, NO_PHRASE, 0))


# --------------------------------------------------------------------------- BPE alignment


def align_pieces(
    pieces: Sequence[str],
    words: Sequence[str],
    continuation: str = "@@",
    unk: Optional[str] = "<unk>",
    allow_truncated: bool = False,
) -> List[int]:
    """The word index of each subword-nmt BPE piece, checking that the pieces spell the words.

    A piece ending in ``continuation`` continues into the next piece of the same word.
    ``unk`` (the dictionary's unknown symbol, which has lost its text and its ``@@``) matches
    any non-empty part of a word.  With ``allow_truncated`` the pieces may stop inside the
    sentence (``--truncate-source``).  Raises :class:`AlignmentError` describing the first
    piece that cannot continue the words."""
    k = len(continuation)
    n_words = len(words)
    # states after each piece: {(word, offset): previous state}; deterministic without <unk>
    states = {(0, 0): None}
    history = []
    for p, piece in enumerate(pieces):
        nxt = {}
        is_unk = unk is not None and piece == unk
        cont = (not is_unk) and k > 0 and piece.endswith(continuation) and len(piece) > k
        text = piece[:-k] if cont else piece
        for w, off in states:
            if w >= n_words:
                continue
            word = words[w]
            if is_unk:
                for end in range(off + 1, len(word) + 1):
                    key = (w + 1, 0) if end == len(word) else (w, end)
                    nxt.setdefault(key, (w, off))
                continue
            end = off + len(text)
            if word[off:end] != text:
                continue
            if cont and end < len(word):
                nxt.setdefault((w, end), (w, off))
            elif not cont and end == len(word):
                nxt.setdefault((w + 1, 0), (w, off))
        if not nxt:
            best_w, best_off = max(states)
            if best_w >= n_words:
                raise AlignmentError(
                    f"BPE piece {p + 1} {piece!r} comes after the last word of the parse ({n_words} words)"
                )
            word = words[best_w]
            raise AlignmentError(
                f"BPE piece {p + 1} {piece!r} does not continue word {best_w + 1} {word!r} of the "
                f"parse (after {word[:best_off]!r}); pieces so far spell "
                f"{_spell(pieces[: p + 1], continuation)!r}"
            )
        history.append(nxt)
        states = nxt
    if allow_truncated:
        final = max(states)
    else:
        final = (n_words, 0)
        if final not in states:
            w, off = max(states)  # w < n_words: the pieces stop before the parse's end
            if off:
                where = f"inside word {w + 1} {words[w]!r} of {n_words} (after {words[w][:off]!r})"
            else:
                where = f"after word {w} of {n_words} (next parse word {words[w]!r})"
            raise AlignmentError(f"the BPE pieces end {where}: the sentence has fewer words than its parse")
    ids = [0] * len(pieces)
    state = final
    for p in range(len(pieces) - 1, -1, -1):
        prev = history[p][state]
        ids[p] = prev[0]
        state = prev
    return ids


def _spell(pieces: Sequence[str], continuation: str) -> str:
    return " ".join(pieces).replace(continuation + " ", "")


def sentence_structure(
    words: Sequence[str],
    bpe_tokens: Sequence[str],
    heads: Optional[Sequence[int]],
    tree: Union[Tree, str, LocalPhrases, None],
    with_eos: bool = True,
    continuation: str = "@@",
    unk: Optional[str] = "<unk>",
    allow_truncated: bool = False,
):
    """``(src_dep, src_rp)`` for one sentence (either may be ``None`` when its input is).

    ``words``: the word tokens the parse is of; ``bpe_tokens``: the source's BPE pieces
    without EOS; ``heads``: 0-based, -1 = root; ``tree``: a :class:`Tree` / PTB string whose
    leaves are the words (PTB bracket escapes allowed), or :class:`LocalPhrases`."""
    n = len(words)
    if heads is not None and len(heads) != n:
        raise ValueError(f"{n} words but {len(heads)} heads")
    phrases = None
    if tree is not None:
        if isinstance(tree, LocalPhrases):
            phrases = tree
        else:
            if isinstance(tree, str):
                tree = parse_ptb(tree)
            leaves = tree.leaves()
            if len(leaves) != n or not all(leaf_matches(a, b) for a, b in zip(leaves, words)):
                raise ValueError(
                    "the tree's leaves are not the words: " + first_difference(leaves, words, leaf_matches)
                )
            phrases = local_phrases(tree)
        if len(phrases) != n:
            raise ValueError(f"{n} words but the tree has {len(phrases)} leaves")
    ids = align_pieces(bpe_tokens, words, continuation, unk, allow_truncated)
    dep = dependency_matrix(heads, ids, with_eos) if heads is not None else None
    rp = phrase_rp_matrix(phrases, ids, with_eos) if phrases is not None else None
    return dep, rp


# --------------------------------------------------------------------------- dependency -> tree


def projectivize(heads: Sequence[int]) -> List[int]:
    """Lift non-projective arcs (a dependent moves to its head's head, shortest arc first)
    until every arc is projective; 0-based heads, -1 = root.  An arc h -> d is projective
    when every word strictly between h and d descends from h."""
    heads = [int(h) for h in heads]
    check_heads(heads)
    n = len(heads)
    while True:
        ancestors = []
        for k in range(n):
            seen = set()
            a = heads[k]
            while a != -1:
                seen.add(a)
                a = heads[a]
            ancestors.append(seen)
        bad = []
        for d, h in enumerate(heads):
            if h < 0:
                continue
            lo, hi = min(d, h), max(d, h)
            if any(h not in ancestors[k] for k in range(lo + 1, hi)):
                bad.append((hi - lo, d))
        if not bad:
            return heads
        _, d = min(bad)
        heads[d] = heads[heads[d]]


def tree_from_dependencies(
    words: Sequence[str], heads: Sequence[int], tags: Optional[Sequence[str]] = None, phrase_label: str = "XP"
) -> Tree:
    """A constituency tree from a dependency parse: each head with its dependents forms a
    phrase (label ``phrase_label``), every word under a preterminal (its tag, or ``X``).

    Non-projective arcs are lifted first (:func:`projectivize`); several roots are joined
    under a ``TOP`` node; no words give the empty tree ``()``.  A test/fallback conversion
    for when no constituency parser is available, not a substitute for benepar's trees:
    ``data_prep/parse_source.py`` uses it only with ``--trees-from-dependencies``."""
    n = len(words)
    if len(heads) != n:
        raise ValueError(f"{n} words but {len(heads)} heads")
    if tags is not None and len(tags) != n:
        raise ValueError(f"{n} words but {len(tags)} tags")
    heads = projectivize(heads)
    if n == 0:
        return Tree("", [])
    deps: List[List[int]] = [[] for _ in range(n)]
    roots = []
    for d, h in enumerate(heads):
        (roots if h < 0 else deps[h]).append(d)
    built: List[Optional[Tree]] = [None] * n
    # post-order without recursion: a word is built after all its dependents
    stack = [(r, False) for r in reversed(roots)]
    while stack:
        h, ready = stack.pop()
        if not ready:
            stack.append((h, True))
            stack.extend((d, False) for d in reversed(deps[h]))
            continue
        pre = Tree(tags[h] if tags is not None and tags[h] else "X", [words[h]])
        if not deps[h]:
            built[h] = pre
        else:
            built[h] = Tree(
                phrase_label, [built[d] for d in deps[h] if d < h] + [pre] + [built[d] for d in deps[h] if d > h]
            )
    tops = [built[r] for r in roots]
    return tops[0] if len(tops) == 1 else Tree("TOP", tops)


__all__ = [
    "NO_PHRASE",
    "AlignmentError",
    "LocalPhrases",
    "local_phrases",
    "word_phrase_mask",
    "word_rp_matrix",
    "word_dependency_matrix",
    "dependency_matrix",
    "phrase_rp_matrix",
    "align_pieces",
    "sentence_structure",
    "projectivize",
    "tree_from_dependencies",
]
