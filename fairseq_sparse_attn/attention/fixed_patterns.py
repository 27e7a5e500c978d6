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
  ``--encoder-right-context-reading literal`` gives the literal reading instead:
  ``f(j) ∝ (j+1)^3`` restricted to ``j >= i+2`` (largest weight on the last key).
* **EOS** counts as a position by default; with ``exclude_eos`` (flag
  ``--encoder-fixed-patterns-exclude-eos``) the patterns are computed over the sentence
  without its EOS (the paper's toolkit, OpenNMT-py, appends none to the source), no row of
  a real token gives EOS any weight, and EOS's own row puts weight 1 on EOS.
* **Rows without support fall back to the current token.**  ``previous`` at ``i = 0``,
  ``next`` at ``i = n-1``, ``left_context`` at ``i < 2`` and ``right_context`` at
  ``i > n-3`` have no key to attend to; those rows put weight 1 on ``i`` itself, so every
  row of every pattern sums to 1.
* Weights are computed in float64 on the CPU (float32 on accelerators, with the cubes
  scaled by ``1/m^3`` so they stay in range) and returned as float32.

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

Because the word row is renormalized over the tokens anyway, the word-level
normalization constant cancels: the token weights are the *unnormalized* word weights
``u(w_query, w_key)`` renormalized per token row.  That is how :func:`pattern_weights`
computes both variants at once (the token-based variant is the word-based one with one
word per token), vectorized over a padded batch, without Python loops over sentences.

Batches
-------
:func:`pattern_weights` takes per-position word ids and a validity mask, so left and
right padding (and any mix) are handled alike; padding rows and padding columns are
exactly zero.  :func:`batch_pattern_weights` is the same from lengths and a padding side.
:func:`source_word_ids` derives word ids from binarized ``src_tokens`` and the source
dictionary (subword-nmt ``@@`` or SentencePiece ``▁`` markers), so the word-based
variant needs no extra input.
"""

from typing import List, Optional, Sequence

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
# configuration shorthands of the paper: 7F = the seven patterns, 8F = 7F + last token
PATTERN_SETS = {"7F": SEVEN, "8F": PATTERNS}
PATTERN_UNITS = ("token", "word")
# right_context: "mirrored" (default) = mirror image of left_context, largest weight at
# i+2; "literal" = the paper's f = (j+1)^3 over i+2..n-1, largest weight at the last key
RIGHT_CONTEXT_READINGS = ("mirrored", "literal")

_EXPONENT = 3


def _check_name(name: str) -> None:
    if name not in PATTERNS:
        raise ValueError(f"unknown fixed attention pattern {name!r}; valid names: {', '.join(PATTERNS)}")


def check_pattern_names(names: Sequence[str]) -> List[str]:
    """The names as a list; ``ValueError`` naming the valid ones for an unknown name."""
    if isinstance(names, str):
        raise TypeError(f"names must be a sequence of pattern names, not a single string ({names!r})")
    names = list(names)
    for name in names:
        _check_name(name)
    return names


def check_right_context_reading(reading: str) -> str:
    if reading not in RIGHT_CONTEXT_READINGS:
        raise ValueError(
            f"unknown right_context reading {reading!r}; valid: "
            f"{', '.join(RIGHT_CONTEXT_READINGS)} (--encoder-right-context-reading)"
        )
    return reading


def _unnormalized(
    name: str, i: torch.Tensor, j: torch.Tensor, m: torch.Tensor, dtype, right_context: str = "mirrored"
) -> torch.Tensor:
    """Unnormalized weight of key word ``j`` for query word ``i`` in a sentence of ``m``
    words (broadcasting tensors).  The cubes are divided by ``m^3`` (a per-sentence
    constant that the row normalization removes) to keep float32 in range."""
    if name == "current":
        return (j == i).to(dtype)
    if name == "previous":
        return (j == i - 1).to(dtype)
    if name == "next":
        return (j == i + 1).to(dtype)
    if name == "last_token":
        return (j == m - 1).to(dtype)
    mf = m.to(dtype)
    grow_to_end = ((j + 1).to(dtype) / mf) ** _EXPONENT  # largest at j = m-1
    grow_to_start = ((m - j).to(dtype) / mf) ** _EXPONENT  # largest at j = 0
    if name == "left_context":
        return grow_to_end * (j <= i - 2).to(dtype)
    if name == "right_context":
        grow = grow_to_end if right_context == "literal" else grow_to_start
        return grow * (j >= i + 2).to(dtype)
    if name == "end_of_sentence":
        return grow_to_end
    return grow_to_start  # start_of_sentence


def last_positions(valid: torch.Tensor) -> torch.Tensor:
    """``(bsz, T)`` bool, True at the last valid position of each row (the source's EOS:
    fairseq appends it to every source sentence; valid positions are contiguous)."""
    following = torch.nn.functional.pad(valid[:, 1:], (0, 1), value=False)
    return valid & ~following


def pattern_weights(
    names: Sequence[str],
    word_ids: torch.Tensor,
    valid: torch.Tensor,
    right_context: str = "mirrored",
    exclude_eos: bool = False,
) -> torch.Tensor:
    """Fixed-pattern attention weights for a padded batch (token- or word-based).

    Args:
        names: pattern names (see :data:`PATTERNS`), one output head each.
        word_ids: ``(bsz, T)`` integer word index of every position, 0-based within its
            sentence, non-decreasing by steps of 0 or 1 over the valid positions (token
            based: ``0, 1, 2, ...``).  Values at padding positions are ignored.
        valid: ``(bsz, T)`` boolean, True at real positions (tokens and EOS).
        right_context: reading of ``right_context`` (:data:`RIGHT_CONTEXT_READINGS`).
        exclude_eos: the last valid position of each sentence (EOS) is not a position of
            the patterns: they are computed over the other positions as if EOS were absent
            (no weight on EOS), and EOS's own row puts weight 1 on EOS.

    Returns ``(bsz, len(names), T, T)`` float32 on ``word_ids.device``: row = query, column
    = key; every valid row sums to 1; padding rows and columns are exactly 0.
    """
    names = check_pattern_names(names)
    check_right_context_reading(right_context)
    if word_ids.dim() != 2 or tuple(valid.shape) != tuple(word_ids.shape):
        raise ValueError(
            f"word_ids and valid must both be (bsz, T), got {tuple(word_ids.shape)} and {tuple(valid.shape)}"
        )
    bsz, T = word_ids.shape
    if T == 0 or not names:
        return torch.zeros(bsz, len(names), T, T, device=word_ids.device)
    dtype = torch.float64 if word_ids.device.type == "cpu" else torch.float32
    valid = valid.to(torch.bool)
    eos_self = None
    if exclude_eos:
        eos = last_positions(valid)
        valid = valid & ~eos
        diagonal = torch.eye(T, dtype=torch.bool, device=valid.device)
        eos_self = (diagonal & eos.unsqueeze(2)).to(dtype)  # EOS row: weight 1 on EOS
    ids = torch.where(valid, word_ids.long(), torch.zeros_like(word_ids, dtype=torch.long))
    m = (ids.amax(dim=1) + 1).view(-1, 1, 1)  # words per sentence
    i = ids.unsqueeze(2)  # (bsz, T, 1) query word
    j = ids.unsqueeze(1)  # (bsz, 1, T) key word
    pair = (valid.unsqueeze(2) & valid.unsqueeze(1)).to(dtype)  # real query x real key
    current = (j == i).to(dtype) * pair
    heads = []
    for name in names:
        w = _unnormalized(name, i, j, m, dtype, right_context) * pair
        total = w.sum(dim=2, keepdim=True)
        w = torch.where(total > 0, w, current)  # no support -> the current word
        total = w.sum(dim=2, keepdim=True)
        w = w / total.clamp(min=torch.finfo(dtype).tiny)
        heads.append(w if eos_self is None else w + eos_self)
    return torch.stack(heads, dim=1).float()


def pattern_matrix(name: str, n: int, right_context: str = "mirrored", exclude_eos: bool = False) -> torch.Tensor:
    """Token-based weights of pattern ``name`` for one unpadded sentence of ``n`` positions
    (EOS included).  Returns an ``(n, n)`` float32 tensor, row = query, column = key, every
    row summing to 1.  Raises ``ValueError`` for an unknown name."""
    _check_name(name)
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    positions = torch.arange(int(n)).unsqueeze(0)
    return pattern_weights([name], positions, torch.ones_like(positions, dtype=torch.bool), right_context, exclude_eos)[
        0, 0
    ]


def word_ids_from_tokens(tokens: List[str], continuation: str = "@@", eos: str = "</s>") -> List[int]:
    """Word index (0-based) of every token, subword-nmt convention: a token ending in
    ``continuation`` continues into the next token.  ``eos`` is always its own word.  The
    grouping is the project's one subword->word grouping,
    :func:`fairseq_sparse_attn.subwords.word_index` (a trailing marker is an error).

    >>> word_ids_from_tokens("a master of science fic@@ tion .".split())
    [0, 1, 2, 3, 4, 4, 5]
    """
    from ..subwords import word_index

    return word_index(tokens, "subword-nmt", eos=eos, continuation=continuation)


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


def word_pattern_matrix(
    name: str, word_ids: Sequence[int], right_context: str = "mirrored", exclude_eos: bool = False
) -> torch.Tensor:
    """Word-based weights of pattern ``name`` for one unpadded sentence whose token ``t``
    belongs to word ``word_ids[t]`` (0-based, non-decreasing by steps of 0 or 1, EOS its own
    word).  The pattern is computed over the words and expanded to the pieces, then each
    row is renormalized (see the module docstring).  Returns ``(n_tok, n_tok)`` float32."""
    _check_name(name)
    ids = _check_word_ids(word_ids).unsqueeze(0)
    return pattern_weights([name], ids, torch.ones_like(ids, dtype=torch.bool), right_context, exclude_eos)[0, 0]


def batch_pattern_weights(
    names: Sequence[str],
    lengths: torch.Tensor,
    max_len: int,
    left_pad: bool,
    word_ids: Optional[torch.Tensor] = None,
    right_context: str = "mirrored",
    exclude_eos: bool = False,
) -> torch.Tensor:
    """Weights of the patterns ``names`` for a padded batch given by its lengths.

    ``lengths`` (bsz,) holds each sentence's number of positions (EOS included); sentence
    ``b`` occupies the last ``lengths[b]`` positions of ``max_len`` when ``left_pad`` else
    the first.  With ``word_ids`` (bsz, max_len) (values at padding positions are ignored)
    the word-based variant is used.  Returns ``(bsz, len(names), max_len, max_len)`` float32
    on ``lengths.device``; padding query rows and padding key columns are exactly zero.
    """
    names = check_pattern_names(names)
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1:
        raise ValueError(f"lengths must be 1-D (bsz,), got shape {tuple(lengths.shape)}")
    bsz, max_len = lengths.numel(), int(max_len)
    if bool(((lengths < 0) | (lengths > max_len)).any()):
        raise ValueError(f"every length must be in [0, max_len={max_len}], got {lengths.tolist()}")
    pos = torch.arange(max_len, device=lengths.device).unsqueeze(0)
    start = (max_len - lengths).unsqueeze(1) if left_pad else torch.zeros_like(lengths).unsqueeze(1)
    valid = (pos >= start) & (pos < start + lengths.unsqueeze(1))
    if word_ids is None:
        ids = pos - start
    else:
        ids = torch.as_tensor(word_ids, device=lengths.device)
        if tuple(ids.shape) != (bsz, max_len):
            raise ValueError(f"word_ids must have shape (bsz, max_len) = {(bsz, max_len)}, got {tuple(ids.shape)}")
        for b in range(bsz):  # validate each sentence's ids (they come from the caller)
            _check_word_ids(ids[b][valid[b]].tolist())
    return pattern_weights(names, ids.expand(bsz, max_len), valid, right_context, exclude_eos)


# ---------------------------------------------------------------------------- source words

SUBWORD_STYLES = ("bpe", "sentencepiece")


def word_start_table(dictionary, style: str = "bpe") -> torch.Tensor:
    """Per dictionary symbol, how it relates to word boundaries, as an int8 table:

    * ``bpe`` (subword-nmt): 1 where the symbol ends in ``@@`` (it continues into the
      next token), else 0;
    * ``sentencepiece``: 1 where the symbol does *not* start with ``▁`` (it continues
      the previous token's word), else 0.

    Special symbols (``<s>``, ``<pad>``, ``</s>``, ``<unk>``) are 0.
    """
    from ..subwords import marker_flag

    if style not in SUBWORD_STYLES:
        raise ValueError(f"unknown subword style {style!r}; valid: {', '.join(SUBWORD_STYLES)}")
    table = torch.zeros(len(dictionary), dtype=torch.int8)
    for idx, sym in enumerate(dictionary.symbols):
        if idx >= dictionary.nspecial:
            table[idx] = int(marker_flag(sym, style))  # the rule of fairseq_sparse_attn.subwords
    return table


def source_word_ids(src_tokens: torch.Tensor, table: torch.Tensor, style: str, pad: int, eos: int) -> torch.Tensor:
    """``(bsz, T)`` 0-based word index of every source token (padding: ignored values).

    ``table`` comes from :func:`word_start_table` for the same ``style``.  A new word starts
    at the first real token, at EOS (always a word of its own), after EOS, and — ``bpe`` —
    after a token that does not end in ``@@``, or — ``sentencepiece`` — at a token that
    starts with ``▁``.  Works for left- and right-padded batches."""
    valid = src_tokens.ne(pad)
    flag = table.to(src_tokens.device)[src_tokens].bool() & valid
    is_eos = src_tokens.eq(eos)
    prev_valid = torch.nn.functional.pad(valid, (1, 0), value=False)[:, :-1]
    prev_eos = torch.nn.functional.pad(is_eos, (1, 0), value=False)[:, :-1]
    if style == "bpe":
        prev_continues = torch.nn.functional.pad(flag, (1, 0), value=False)[:, :-1]
        starts = ~prev_continues
    else:
        starts = ~flag
    starts = (starts | ~prev_valid | is_eos | prev_eos) & valid
    return (starts.long().cumsum(dim=1) - 1).clamp(min=0)
