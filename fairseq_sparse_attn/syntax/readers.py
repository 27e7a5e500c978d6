"""Readers and writers for parses: PTB bracketed trees, CoNLL-U, and the plugin's
line-aligned side files.

Side files (written by ``data_prep/parse_source.py``, one line per source sentence, aligned
line by line with the tokenized source that was binarized):

``<split>.<lang>.dep``
    ``word_1 ... word_n<TAB>head_1 ... head_n[<TAB>rel_1 ... rel_n]`` — the sentence's
    word tokens exactly as in the tokenized text, then each word's head as a 1-based word
    index with 0 for the root (the CoNLL-U HEAD convention), then optionally the relation
    labels.  An empty sentence is a line of tabs only.
``<split>.<lang>.tree``
    one PTB bracketed tree per line, e.g. ``(S (NP (NNP Bush)) (VP (VBD held) ...))``.
    Brackets inside words are escaped as PTB does (``-LRB-``, ``-RRB-``, ``-LCB-``,
    ``-RCB-``, ``-LSB-``, ``-RSB-``); an empty sentence is ``()``.

In Python, heads are 0-based word indices with ``-1`` for a root (``heads_to_conll`` /
``heads_from_conll`` convert).

Every reader raises :class:`ParseFormatError` naming the file, the 1-based line and what
was expected.
"""

from __future__ import annotations

import re
from typing import Iterator, List, Optional, Sequence, Tuple, Union

from ..errors import ParseFormatError


def _where(path, line_no) -> str:
    return f"{path}:{line_no}" if path is not None else f"line {line_no}"


# --------------------------------------------------------------------------- PTB trees

PTB_ESCAPES = (("(", "-LRB-"), (")", "-RRB-"), ("{", "-LCB-"), ("}", "-RCB-"), ("[", "-LSB-"), ("]", "-RSB-"))


def ptb_escape(word: str) -> str:
    """Escape the bracket characters of a word as PTB (and benepar) do."""
    for ch, esc in PTB_ESCAPES:
        word = word.replace(ch, esc)
    return word


def ptb_unescape(leaf: str) -> str:
    """Undo :func:`ptb_escape` (only the bracket escapes; nothing else is touched)."""
    for ch, esc in PTB_ESCAPES:
        leaf = leaf.replace(esc, ch)
    return leaf


def leaf_matches(leaf: str, token: str) -> bool:
    """True when a tree leaf stands for ``token``: equal as written, or after undoing the
    PTB bracket escapes (``-LRB-`` for ``(``)."""
    return leaf == token or ptb_unescape(leaf) == token


class Tree:
    """A constituency tree node: ``label`` and ``children`` (``Tree`` nodes or ``str``
    leaves, the words).  A node whose only child is a leaf is a preterminal (POS tag)."""

    __slots__ = ("label", "children")

    def __init__(self, label: str, children: Sequence[Union["Tree", str]] = ()):
        self.label = label
        self.children = list(children)

    def leaves(self) -> List[str]:
        out: List[str] = []
        stack: List[Union[Tree, str]] = [self]
        while stack:
            node = stack.pop()
            if isinstance(node, str):
                out.append(node)
            else:
                stack.extend(reversed(node.children))
        return out

    def to_ptb(self) -> str:
        """One-line bracketed string; :func:`parse_ptb` reads it back."""
        if not self.children:
            return f"({self.label})" if self.label else "()"
        parts = [c if isinstance(c, str) else c.to_ptb() for c in self.children]
        head = f"({self.label} " if self.label else "( "
        return head + " ".join(parts) + ")"

    def __eq__(self, other) -> bool:
        return isinstance(other, Tree) and self.label == other.label and self.children == other.children

    def __repr__(self) -> str:
        return f"Tree({self.to_ptb()!r})"


_PTB_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def parse_ptb(text: str, path=None, line_no: int = 1) -> Tree:
    """Parse one PTB bracketed tree, e.g. ``(S (NP (NNP Bush)) (VP (VBD held)))``.

    A node is ``(`` [label] children ``)``; a child is a node or a word.  The label may be
    empty (``( (S ...))``, the Penn Treebank's outer wrapper).  ``()`` is the empty tree of
    an empty sentence.  Anything after the closing bracket of the root is an error."""
    tokens = _PTB_TOKEN.findall(text)
    where = _where(path, line_no)
    if not tokens:
        raise ParseFormatError(
            f"{where}: empty line, expected a PTB bracketed tree such as "
            "'(S (NP (NNP Bush)) (VP (VBD held)))' ('()' for an empty sentence)"
        )
    if tokens == ["(", ")"]:
        return Tree("", [])
    if tokens[0] != "(":
        raise ParseFormatError(f"{where}: expected '(' at the start of a PTB tree, found {tokens[0]!r}")
    stack: List[Tree] = []
    root: Optional[Tree] = None
    i = 0
    # the stack is never empty inside the loop: tokens[0] is "(" and the loop stops being
    # valid once the root is closed
    while i < len(tokens):
        tok = tokens[i]
        if root is not None:
            raise ParseFormatError(
                f"{where}: text after the end of the tree: {' '.join(tokens[i : i + 5])!r} (expected one tree per line)"
            )
        if tok == "(":
            label = ""
            if i + 1 < len(tokens) and tokens[i + 1] not in ("(", ")"):
                label = tokens[i + 1]
                i += 1
            node = Tree(label, [])
            if stack:
                stack[-1].children.append(node)
            stack.append(node)
        elif tok == ")":
            node = stack.pop()
            if not node.children:
                raise ParseFormatError(
                    f"{where}: node ({node.label}) has no children; expected (LABEL word) or (LABEL (child) ...)"
                )
            if not stack:
                root = node
        else:
            stack[-1].children.append(tok)
        i += 1
    if stack:
        raise ParseFormatError(f"{where}: unbalanced PTB tree: {len(stack)} '(' not closed")
    return root


def read_ptb(path) -> Iterator[Tuple[int, Tree]]:
    """Yield ``(line_no, tree)`` for a file with one bracketed tree per line."""
    from ..text_lines import read_lines

    for line_no, line in enumerate(read_lines(path), 1):
        yield line_no, parse_ptb(line, path, line_no)


# --------------------------------------------------------------------------- CoNLL-U


def heads_from_conll(heads: Sequence[int]) -> List[int]:
    """1-based heads with 0 = root -> 0-based heads with -1 = root."""
    return [h - 1 for h in heads]


def heads_to_conll(heads: Sequence[int]) -> List[int]:
    """0-based heads with -1 = root -> 1-based heads with 0 = root."""
    return [h + 1 for h in heads]


def check_heads(heads: Sequence[int], where: str = "") -> None:
    """0-based heads (-1 = root): every head in range, no word its own head, no cycle."""
    n = len(heads)
    prefix = f"{where}: " if where else ""
    for i, h in enumerate(heads):
        if not isinstance(h, (int,)) and not hasattr(h, "__index__"):
            raise ValueError(f"{prefix}head of word {i + 1} is {h!r}, expected an integer")
        if h < -1 or h >= n:
            raise ValueError(f"{prefix}head of word {i + 1} is {h + 1} (1-based), expected 0 (root) to {n}")
        if h == i:
            raise ValueError(f"{prefix}word {i + 1} is its own head")
    # cycles: every chain must reach a root within n steps
    state = [0] * n  # 0 unvisited, 1 on the current path, 2 reaches a root
    for start in range(n):
        path = []
        i = start
        while i != -1 and state[i] == 0:
            state[i] = 1
            path.append(i)
            i = heads[i]
        if i != -1 and state[i] == 1:
            raise ValueError(f"{prefix}the heads form a cycle through word {i + 1}")
        for j in path:
            state[j] = 2


def read_conllu(path) -> Iterator[Tuple[int, List[str], List[int], List[str]]]:
    """Yield ``(line_no, words, heads, rels)`` per sentence of a CoNLL-U file.

    ``line_no`` is the sentence's first token line; ``heads`` are 0-based (-1 = root).
    Comment lines (``#``), multiword-token ranges (``1-2``) and empty nodes (``1.1``) are
    skipped: the words are the syntactic words (ID lines), which must equal the tokenized
    source's tokens."""
    words: List[str] = []
    heads: List[int] = []
    rels: List[str] = []
    first = 0

    def finish():
        where = f"{path}:{first}"
        try:
            check_heads(heads_from_conll(heads), where)
        except ValueError as e:
            raise ParseFormatError(str(e)) from None
        return first, list(words), heads_from_conll(heads), list(rels)

    from ..text_lines import read_lines

    line_no = 0
    for line_no, line in enumerate(read_lines(path), 1):
        if not line.strip():
            if words:
                yield finish()
                words, heads, rels = [], [], []
            continue
        if line.startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise ParseFormatError(
                f"{path}:{line_no}: expected 10 tab-separated CoNLL-U columns "
                f"(ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC), "
                f"found {len(cols)}"
            )
        tid = cols[0]
        if "-" in tid or "." in tid:
            continue
        if not tid.isdigit():
            raise ParseFormatError(f"{path}:{line_no}: ID {tid!r} is not an integer")
        if int(tid) != len(words) + 1:
            raise ParseFormatError(
                f"{path}:{line_no}: ID {tid} out of sequence, expected "
                f"{len(words) + 1} (a blank line must end each sentence)"
            )
        if not cols[6].isdigit():
            raise ParseFormatError(
                f"{path}:{line_no}: HEAD {cols[6]!r} is not an integer; dependency heads are required"
            )
        if not words:
            first = line_no
        words.append(cols[1])
        heads.append(int(cols[6]))
        rels.append(cols[7])
    if words:
        yield finish()


# --------------------------------------------------------------------------- side files


def format_dep_line(words: Sequence[str], heads: Sequence[int], rels: Optional[Sequence[str]] = None) -> str:
    """One ``.dep`` line (no newline) from 0-based heads (-1 = root)."""
    for w in words:
        if not w or any(c.isspace() for c in w):
            raise ValueError(f"word {w!r} is empty or contains whitespace; words must be whitespace-separated tokens")
    if len(heads) != len(words):
        raise ValueError(f"{len(words)} words but {len(heads)} heads")
    cols = [" ".join(words), " ".join(str(h) for h in heads_to_conll(heads))]
    if rels is not None:
        if len(rels) != len(words):
            raise ValueError(f"{len(words)} words but {len(rels)} relation labels")
        cols.append(" ".join(r if r and not any(c.isspace() for c in r) else "_" for r in rels))
    return "\t".join(cols)


def parse_dep_line(line: str, path=None, line_no: int = 1) -> Tuple[List[str], List[int]]:
    """``(words, heads)`` of one ``.dep`` line; heads 0-based with -1 = root."""
    where = _where(path, line_no)
    cols = line.rstrip("\r\n").split("\t")
    if len(cols) not in (2, 3):
        raise ParseFormatError(
            f"{where}: expected 'words<TAB>heads[<TAB>relations]' "
            f"(2 or 3 tab-separated columns), found {len(cols)} column(s)"
        )
    words = cols[0].split()
    try:
        heads = [int(h) for h in cols[1].split()]
    except ValueError:
        raise ParseFormatError(
            f"{where}: heads column {cols[1][:60]!r} must be integers (1-based head word indices, 0 for the root)"
        ) from None
    if len(heads) != len(words):
        raise ParseFormatError(f"{where}: {len(words)} words but {len(heads)} heads")
    if len(cols) == 3 and len(cols[2].split()) != len(words):
        raise ParseFormatError(f"{where}: {len(words)} words but {len(cols[2].split())} relation labels")
    heads = heads_from_conll(heads)
    try:
        check_heads(heads, where)
    except ValueError as e:
        raise ParseFormatError(str(e)) from None
    return words, heads


def first_difference(found: Sequence[str], expected: Sequence[str], match=None) -> str:
    """Describe the first position where two token sequences differ (for error messages)."""
    match = match or (lambda a, b: a == b)
    for i, (a, b) in enumerate(zip(found, expected)):
        if not match(a, b):
            return f"token {i + 1}: parse has {a!r}, sentence has {b!r}"
    if len(found) > len(expected):
        return (
            f"the parse has {len(found)} words, the sentence {len(expected)}: extra word "
            f"{found[len(expected)]!r} at position {len(expected) + 1}"
        )
    return (
        f"the parse has {len(found)} words, the sentence {len(expected)}: missing word "
        f"{expected[len(found)]!r} at position {len(found) + 1}"
    )
