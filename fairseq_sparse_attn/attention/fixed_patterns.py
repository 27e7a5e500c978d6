"""Fixed encoder self-attention patterns (Raganato, Scherrer & Tiedemann, 2020,
"Fixed Encoder Self-Attention Patterns in Transformer-Based Machine Translation").

Pure tensor computation only: every function returns attention *weights* (each row a
probability distribution), nothing here is an ``nn.Module``.

Positions
---------
A source sentence has ``n`` positions: its real tokens plus the appended EOS, which is
the last position ``n - 1`` (EOS counts as a position).  For query position ``i``
(0-based) each pattern gives a distribution over the key positions ``0 .. n-1``:

1. ``current``            weight 1 at ``i``
2. ``previous``           weight 1 at ``i - 1``
3. ``next``               weight 1 at ``i + 1``
4. ``left_context``       over ``j = 0 .. i-2``:  ``f(j) = (j+1)^3 / sum_{j'=0}^{i-2} (j'+1)^3``
5. ``right_context``      over ``j = i+2 .. n-1``: ``f(j) ∝ (n-j)^3``
6. ``end_of_sentence``    over ``j = 0 .. n-1``:   ``f(j) ∝ (j+1)^3``  (same row for every ``i``)
7. ``start_of_sentence``  over ``j = 0 .. n-1``:   ``f(j) ∝ (n-j)^3``  (same row for every ``i``)
8. ``last_token``         weight 1 at ``n - 1`` (only used by the "8F" configuration)

Choices that the paper leaves open
----------------------------------
* **Direction of ``right_context``.**  The paper only says "a function f over the
  positions i+2 to n" and that "the same function is used for all patterns, changing only
  the respective start and end points".  Read literally as ``(j+1)^3`` over ``i+2..n`` the
  weight would grow toward the *end of the sentence*, which would make pattern 5 nearly
  the same as pattern 6.  We instead take pattern 5 as the mirror image of pattern 4:
  pattern 4 grows toward the query token (its largest weight is on ``i-2``), so pattern 5
  also grows toward the token, i.e. ``f(j) ∝ (n-j)^3`` restricted to ``j >= i+2``, and
  the nearest key ``i+2`` gets the largest weight.  Patterns 6 and 7 are the analogous
  pair over the whole sentence ("0 to n" grows toward the end, "n to 0" toward the start).
* **Rows without support fall back to the current token.**  ``previous`` at ``i = 0``,
  ``next`` at ``i = n-1``, ``left_context`` at ``i < 2`` and ``right_context`` at
  ``i > n-3`` have no key to attend to; those rows put weight 1 on ``i`` itself, so every
  row of every pattern sums to 1.
* Weights are computed in float64 and returned as float32.

Word-based variant
------------------
The paper's second variant "assigns the same attention values to all parts of the same
word".  :func:`word_pattern_matrix` computes the pattern over the ``m`` *words* (with the
rules above, ``m`` playing the role of ``n``), then expands it to the ``n_tok`` subword
tokens: every piece of word ``w`` uses word ``w``'s row as its query row, every key piece
of word ``v`` receives the word-level weight of ``v``, and each row is renormalized to sum
to 1 (so a key word split into ``k`` pieces receives ``k`` times its word weight before the
renormalization).  Word ids follow the subword-nmt convention, see
:func:`word_ids_from_tokens`; the EOS token is always a word of its own.

Batches
-------
:func:`batch_pattern_weights` places each sentence's matrix in a padded
``(max_len, max_len)`` block (the last ``length`` positions when left-padded, else the
first); padding rows and padding columns are exactly zero.
"""

from typing import Dict, List, Optional, Sequence, Tuple

import torch

PATTERNS = (
    "current",
    "previous",
    "next",
    "left_context",
    "right_context",
    "end_of_sentence",
    "start_of_sentence",
    "last_token",
)
SEVEN = PATTERNS[:7]

_EXPONENT = 3


def _check_name(name: str) -> None:
    if name not in PATTERNS:
        raise ValueError(
            f"unknown fixed attention pattern {name!r}; valid names: {', '.join(PATTERNS)}"
        )


def _check_names(names: Sequence[str]) -> List[str]:
    if isinstance(names, str):
        raise TypeError(
            f"names must be a sequence of pattern names, not a single string ({names!r})"
        )
    names = list(names)
    for name in names:
        _check_name(name)
    return names


def _pattern64(name: str, n: int) -> torch.Tensor:
    """(n, n) float64 weights of pattern ``name`` for ``n`` positions (rows sum to 1)."""
    _check_name(name)
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    n = int(n)
    dt = torch.float64
    if n == 0:
        return torch.zeros(0, 0, dtype=dt)
    i = torch.arange(n).unsqueeze(1)  # query positions, (n, 1)
    j = torch.arange(n).unsqueeze(0)  # key positions, (1, n)
    eye = torch.eye(n, dtype=dt)

    if name == "current":
        return eye
    if name == "previous":
        w = (j == i - 1).to(dt)
    elif name == "next":
        w = (j == i + 1).to(dt)
    elif name == "last_token":
        w = (j == n - 1).to(dt).expand(n, n).clone()
    else:
        grow_to_end = (j + 1).to(dt) ** _EXPONENT  # largest at j = n-1
        grow_to_start = (n - j).to(dt) ** _EXPONENT  # largest at j = 0
        if name == "left_context":
            w = torch.where(j <= i - 2, grow_to_end, torch.zeros((), dtype=dt))
        elif name == "right_context":
            w = torch.where(j >= i + 2, grow_to_start, torch.zeros((), dtype=dt))
        elif name == "end_of_sentence":
            w = grow_to_end.expand(n, n).clone()
        else:  # start_of_sentence
            w = grow_to_start.expand(n, n).clone()
    total = w.sum(dim=1, keepdim=True)
    empty = total == 0  # no support -> current token
    w = torch.where(empty, eye, w / torch.where(empty, torch.ones_like(total), total))
    return w


def pattern_matrix(name: str, n: int) -> torch.Tensor:
    """Token-based weights of pattern ``name`` for one unpadded sentence of ``n`` positions
    (EOS included).  Returns an ``(n, n)`` float32 tensor, row = query, column = key, every
    row summing to 1.  Raises ``ValueError`` for an unknown name."""
    return _pattern64(name, n).to(torch.float32)


def word_ids_from_tokens(
    tokens: List[str], continuation: str = "@@", eos: str = "</s>"
) -> List[int]:
    """Word index (0-based) of every token, subword-nmt convention: a token ending in
    ``continuation`` continues into the next token.  ``eos`` is always its own word.

    >>> word_ids_from_tokens("a master of science fic@@ tion .".split())
    [0, 1, 2, 3, 4, 4, 5]
    """
    if not continuation:
        raise ValueError("continuation marker must be a non-empty string")
    ids: List[int] = []
    word = -1
    continues = False
    for tok in tokens:
        if tok == eos:
            word += 1
            ids.append(word)
            continues = False
            continue
        if not continues:
            word += 1
        ids.append(word)
        continues = tok.endswith(continuation)
    return ids


def _check_word_ids(word_ids: Sequence[int]) -> torch.Tensor:
    ids = torch.as_tensor(list(word_ids), dtype=torch.long)
    if ids.dim() != 1:
        raise ValueError("word_ids must be a flat sequence of integers")
    if ids.numel() > 0:
        steps = ids[1:] - ids[:-1]
        if ids[0].item() != 0 or bool(((steps != 0) & (steps != 1)).any()):
            raise ValueError(
                "word_ids must start at 0 and increase by 0 (same word) or 1 (next word) "
                f"from one token to the next, got {ids.tolist()}"
            )
    return ids


def _word_pattern64(name: str, ids: torch.Tensor) -> torch.Tensor:
    n_tok = ids.numel()
    if n_tok == 0:
        _check_name(name)
        return torch.zeros(0, 0, dtype=torch.float64)
    m = int(ids[-1].item()) + 1
    word = _pattern64(name, m)  # (m, m)
    tok = word[ids][:, ids]  # query piece -> its word's row; key piece -> its word's weight
    return tok / tok.sum(dim=1, keepdim=True)


def word_pattern_matrix(name: str, word_ids: Sequence[int]) -> torch.Tensor:
    """Word-based weights of pattern ``name`` for one unpadded sentence whose token ``t``
    belongs to word ``word_ids[t]`` (0-based, non-decreasing by steps of 0 or 1, EOS its own
    word).  The pattern is computed over the words and expanded to the pieces, then each
    row is renormalized (see the module docstring).  Returns ``(n_tok, n_tok)`` float32."""
    _check_name(name)
    return _word_pattern64(name, _check_word_ids(word_ids)).to(torch.float32)


def batch_pattern_weights(
    names: Sequence[str],
    lengths: torch.Tensor,
    max_len: int,
    left_pad: bool,
    word_ids: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Weights of the patterns ``names`` for a padded batch.

    ``lengths`` (bsz,) holds each sentence's number of positions (EOS included); sentence
    ``b`` occupies the last ``lengths[b]`` positions of ``max_len`` when ``left_pad`` else
    the first.  With ``word_ids`` (bsz, max_len) (values at padding positions are ignored)
    the word-based variant is used.  Returns ``(bsz, len(names), max_len, max_len)`` float32
    on ``lengths.device``; padding query rows and padding key columns are exactly zero.
    """
    names = _check_names(names)
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (bsz,), got shape {tuple(lengths.shape)}")
    bsz = lengths.numel()
    max_len = int(max_len)
    lens = [int(v) for v in lengths.tolist()]
    for l in lens:
        if l < 0 or l > max_len:
            raise ValueError(f"every length must be in [0, max_len={max_len}], got {lens}")
    if word_ids is not None:
        word_ids = torch.as_tensor(word_ids)
        if tuple(word_ids.shape) != (bsz, max_len):
            raise ValueError(
                f"word_ids must have shape (bsz, max_len) = {(bsz, max_len)}, "
                f"got {tuple(word_ids.shape)}"
            )
        word_ids = word_ids.detach().cpu().long()

    out = torch.zeros(bsz, len(names), max_len, max_len, dtype=torch.float32)
    cache: Dict[Tuple[int, ...], torch.Tensor] = {}  # token-based blocks by length
    for b, l in enumerate(lens):
        if l == 0:
            continue
        start = max_len - l if left_pad else 0
        if word_ids is None:
            key: Tuple[int, ...] = (l,)
            if key not in cache:
                cache[key] = torch.stack([_pattern64(nm, l) for nm in names]).float()
            block = cache[key]
        else:
            ids = _check_word_ids(word_ids[b, start : start + l].tolist())
            block = torch.stack([_word_pattern64(nm, ids) for nm in names]).float()
        out[b, :, start : start + l, start : start + l] = block
    return out.to(lengths.device)
