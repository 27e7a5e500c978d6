"""Word alignments from cross-attention, and their evaluation (AER).

Papers: Kobayashi et al. (2020), *Attention is Not Only a Weight* §5 and App. E
(Eq. 5 argmax extraction, Eq. 6 "alignment with input", subword merging, ``</s>`` as
"no alignment"); Zhang et al. (2021), *ReLA* §5.2 ("normal" α vs "shifted" α[1:],
Table 5 AoL / AoH); Och & Ney (2000) for AER.

Conventions used throughout:

* a **link** is ``(source_index, target_index)``, 0-based, in *words* once merged;
* one sentence's attention matrix is ``(target rows, source columns)``, weights or norms
  (non-negative);
* the matrix is what a teacher-forced fairseq pass produces: the decoder input is
  ``prev_output_tokens = [</s>, y_0, ..., y_{n-1}]`` and the predicted tokens are
  ``[y_0, ..., y_{n-1}, </s>]``, so it has ``n + 1`` rows for ``n`` target pieces (row r
  reads ``prev[r]`` and predicts ``target[r]``), and the source side is
  ``[x_0, ..., x_{m-1}, </s>]``: ``m + 1`` columns, the last one the source EOS.

Pipeline for one sentence (``sentence_alignment`` does all of it):

1. ``aligned_rows``: pick the n rows that align target pieces 0..n-1 (AWO or AWI);
2. ``merge_subwords``: pieces -> words, summing over source pieces, averaging over
   target pieces (Kobayashi et al. App. E.2, after Li et al. 2019);
3. ``argmax_alignment``: one source word per target word; an argmax on the source EOS
   column, or an all-zero row (ReLA null attention), gives no link.

:class:`AlignmentCollector` is the collector of ``fsa-analyze align``: the alignments of
every layer and head of a corpus, from the weights (:class:`WeightsRecorder`) or the
norms (:class:`.norms.NormRecorder`).
"""

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, Union

import torch

from ..attention.intermediates import Intermediates
from ..subwords import SUBWORD_SCHEMES, word_index  # noqa: F401  (the one grouping; re-exported)
from .norms import NormRecorder
from .recording import AttentionSite, Batch, Collector

Link = Tuple[int, int]  # (source index, target index), 0-based
Links = AbstractSet[Link]

SETTINGS = ("awo", "awi")

# ----------------------------------------------------------------------------- rows


def aligned_rows(attention: torch.Tensor, num_target_pieces: int, setting: str) -> torch.Tensor:
    """The rows of a teacher-forced attention matrix that align target pieces 0..n-1.

    ``attention`` is ``(..., n + 1, src)``: row r has decoder input ``prev[r]`` (``</s>``
    for r = 0, else target piece r-1) and predicts target token r (piece r for r < n,
    ``</s>`` for r = n).  Returns ``(..., n, src)`` whose row k belongs to target piece k:

    * ``"awo"`` (alignment with *output*, Kobayashi et al. Eq. 5; ReLA's "normal
      attention" α): row k, the step that *predicts* piece k -> ``attention[..., :n, :]``.
      The last row, the one predicting the target ``</s>``, is dropped.
    * ``"awi"`` (alignment with *input*, Kobayashi et al. Eq. 6, ``argmax_j α_{i+1,j}``):
      row k + 1, the step whose *input* is piece k -> ``attention[..., 1:, :]``.  The
      first row (input ``</s>``) aligns no target piece.

    ReLA's "shifted attention α[1:]" is exactly the AWI selection: dropping the first
    decoding step of the (n + 1)-row matrix leaves rows 1..n, and row k + 1 is matched to
    target piece k — the same rows as Eq. 6, nothing more and nothing less.
    """
    if setting not in SETTINGS:
        raise ValueError(f"alignment setting must be one of {SETTINGS}, got {setting!r}")
    rows = attention.shape[-2]
    if rows != num_target_pieces + 1:
        raise ValueError(
            f"a teacher-forced attention matrix has one row per decoder step, i.e. "
            f"{num_target_pieces} target pieces + 1 (the step predicting </s>) = "
            f"{num_target_pieces + 1} rows; got {rows} rows"
        )
    if setting == "awo":
        return attention[..., :num_target_pieces, :]
    return attention[..., 1:, :]


# ------------------------------------------------------------------ subword merging


def _group_matrix(groups: Sequence[int], average: bool) -> torch.Tensor:
    """(words, pieces) 0/1 matrix, or rows dividing by the group size when averaging."""
    n_words = (max(groups) + 1) if len(groups) else 0
    g = torch.zeros(n_words, len(groups), dtype=torch.float64)
    for piece, word in enumerate(groups):
        g[word, piece] = 1.0
    if average and n_words:
        g = g / g.sum(dim=1, keepdim=True)
    return g


def merge_subwords(
    attention: torch.Tensor,
    source_pieces: Sequence[str],
    target_pieces: Sequence[str],
    scheme: str,
    source_eos: bool = True,
) -> torch.Tensor:
    """Piece-level ``(target pieces, source pieces [+ </s>])`` -> word-level matrix.

    ``W[t, s] = mean_{k in target word t} sum_{j in source word s} A[k, j]``
    (Kobayashi et al. App. E.2: average over target pieces, sum over source pieces).
    With ``source_eos`` the last column is the source ``</s>``; it stays a column of its
    own (last), averaged over target pieces like the others.  ``target_pieces`` exclude
    the target ``</s>`` (its row is already gone, see :func:`aligned_rows`).
    ``source_pieces`` and ``target_pieces`` use the same ``scheme``.
    """
    if attention.dim() != 2:
        raise ValueError(f"merge_subwords takes one sentence's 2-d matrix, got shape {tuple(attention.shape)}")
    cols = len(source_pieces) + int(source_eos)
    if attention.shape != (len(target_pieces), cols):
        raise ValueError(
            f"attention has shape {tuple(attention.shape)}, expected ({len(target_pieces)} "
            f"target pieces, {len(source_pieces)} source pieces"
            f"{' + 1 source </s>' if source_eos else ''} = {cols})"
        )
    src_groups = word_index(source_pieces, scheme)
    if source_eos:
        src_groups = src_groups + [(src_groups[-1] + 1) if src_groups else 0]
    src = _group_matrix(src_groups, average=False)  # (src words, src pieces)
    tgt = _group_matrix(word_index(target_pieces, scheme), average=True)
    merged = tgt @ attention.to(torch.float64) @ src.t()
    return merged.to(attention.dtype)


# ------------------------------------------------------------------------ extraction


def argmax_alignment(attention: torch.Tensor, null_column: Optional[int] = None) -> Set[Link]:
    """Kobayashi et al. Eq. 5: for each target row t, link ``(argmax_j A[t, j], t)``.

    ``attention`` is ``(target, source)`` non-negative weights or norms.  No link is made
    for a row whose argmax is ``null_column`` (the source ``</s>``: "the model decides that
    the word is not aligned to any word", App. E.2) or whose entries are all 0 (ReLA null
    attention attends to nothing).  Ties go to the lowest source index.
    """
    if attention.dim() != 2:
        raise ValueError(f"argmax_alignment takes a 2-d (target, source) matrix, got shape {tuple(attention.shape)}")
    if torch.isnan(attention).any():
        raise ValueError("attention matrix contains NaN")
    if (attention < 0).any():
        raise ValueError(
            f"alignment scores must be non-negative attention weights or norms; minimum is {attention.min().item()}"
        )
    links: Set[Link] = set()
    if attention.shape[-1] == 0:
        return links
    best = attention.max(dim=-1)
    # torch.max does not promise the first index on ties; take it explicitly
    for t in range(attention.shape[0]):
        if best.values[t] <= 0:
            continue
        j = int((attention[t] == best.values[t]).nonzero()[0, 0])
        if j != null_column:
            links.add((j, t))
    return links


def combine_heads(attention: torch.Tensor) -> torch.Tensor:
    """Layer attention from ``(heads, target, source)`` weights: ``sum_h α^h`` (Kobayashi
    et al. §5.1, after Li et al. 2019).  The argmax equals that of the head mean, ReLA's
    "layer attention".  (The norm-based layer version ``||sum_h α^h f^h(x)||`` needs the
    value vectors and is not this function.)"""
    if attention.dim() != 3:
        raise ValueError(f"combine_heads takes (heads, target, source), got shape {tuple(attention.shape)}")
    return attention.sum(dim=0)


def sentence_alignment(
    attention: torch.Tensor,
    source_pieces: Sequence[str],
    target_pieces: Sequence[str],
    setting: str = "awi",
    scheme: str = "subword-nmt",
) -> Set[Link]:
    """Word links ``(source word, target word)`` of one sentence.

    ``attention`` is the teacher-forced ``(len(target_pieces) + 1, len(source_pieces) + 1)``
    matrix of one head or one layer (see the module docstring); ``setting`` picks the rows
    (:func:`aligned_rows`), pieces are merged into words (:func:`merge_subwords`) and the
    argmax taken with the source ``</s>`` column meaning "no link"
    (:func:`argmax_alignment`).  The target ``</s>`` gets no link by construction.
    """
    rows = aligned_rows(attention, len(target_pieces), setting)
    words = merge_subwords(rows, source_pieces, target_pieces, scheme, source_eos=True)
    return argmax_alignment(words, null_column=words.shape[-1] - 1)


# ------------------------------------------------------------------ Pharaoh / talp I/O


@dataclass(frozen=True)
class SentenceAlignment:
    """Gold links of one sentence; ``possible`` always contains ``sure`` (P ⊇ S)."""

    sure: FrozenSet[Link] = frozenset()
    possible: FrozenSet[Link] = frozenset()

    def __post_init__(self):
        object.__setattr__(self, "sure", frozenset(self.sure))
        object.__setattr__(self, "possible", frozenset(self.possible) | self.sure)


_LINK = re.compile(r"^(\d+)([-p])(\d+)$")


def parse_alignment_line(
    line: str,
    where: str = "<string>",
    one_indexed: bool = True,
    reverse: bool = False,
    lengths: Optional[Tuple[int, int]] = None,
) -> SentenceAlignment:
    """One line of links ``i-j`` (sure) and ``ipj`` (possible), blank-separated.

    ``i`` is the source and ``j`` the target index (``reverse``: the other way round),
    counted from 1 (``one_indexed``, as the RWTH Europarl gold) or from 0.  ``lengths``
    ``(source words, target words)`` checks the range.  ``where`` ("file:line") starts every
    error message.  Returns 0-based ``(source, target)`` links.
    """
    base = 1 if one_indexed else 0
    sure: Set[Link] = set()
    possible: Set[Link] = set()
    for token in line.split():
        match = _LINK.match(token)
        if match is None:
            raise ValueError(
                f"{where}: bad alignment link {token!r}; expected 'i-j' (sure) or 'ipj' "
                f"(possible) with non-negative integers i, j"
            )
        a, kind, b = int(match.group(1)), match.group(2), int(match.group(3))
        source, target = (b, a) if reverse else (a, b)
        for side, value, size in (
            ("source", source, None if lengths is None else lengths[0]),
            ("target", target, None if lengths is None else lengths[1]),
        ):
            if value < base:
                raise ValueError(
                    f"{where}: {side} index {value} in link {token!r} is below {base}; the "
                    f"file is read as {base}-indexed"
                )
            if size is not None and value - base >= size:
                raise ValueError(
                    f"{where}: {side} index {value} in link {token!r} is out of range for "
                    f"a {side} sentence of {size} words ({base}-indexed: valid "
                    f"{base}..{size - 1 + base})"
                )
        (sure if kind == "-" else possible).add((source - base, target - base))
    return SentenceAlignment(frozenset(sure), frozenset(possible))


def read_alignments(
    path: Union[str, Path],
    one_indexed: bool = True,
    reverse: bool = False,
    lengths: Optional[Sequence[Tuple[int, int]]] = None,
) -> List[SentenceAlignment]:
    """Read a talp/Pharaoh file, one sentence per line (an empty line = no links).

    Defaults match the RWTH Europarl De-En gold: 1-indexed, source-target order.  With
    ``lengths`` (one ``(source words, target words)`` per sentence) the file must have
    exactly that many lines and every index must fit its sentence.  Sure links are added
    to the possible set (P ⊇ S).  Errors name the file, the line and the bad token.
    """
    path = Path(path)
    from ..text_lines import read_lines

    lines = read_lines(path, blank_tail=True)  # a blank line: a sentence without links
    if lengths is not None and len(lines) != len(lengths):
        raise ValueError(f"{path}: {len(lines)} lines, expected {len(lengths)} (one per sentence)")
    return [
        parse_alignment_line(
            line, f"{path}:{number}", one_indexed, reverse, None if lengths is None else tuple(lengths[number - 1])
        )
        for number, line in enumerate(lines, start=1)
    ]


def format_alignment(
    alignment: Union[SentenceAlignment, Links], one_indexed: bool = True, reverse: bool = False
) -> str:
    """One line: sure links as ``i-j``, possible-only links as ``ipj``, sorted by source
    then target index (by the printed order when ``reverse``)."""
    if isinstance(alignment, SentenceAlignment):
        sure, possible = alignment.sure, alignment.possible
    else:
        sure = possible = frozenset(alignment)
    base = 1 if one_indexed else 0
    items = []
    for s, t in possible:
        a, b = (t, s) if reverse else (s, t)
        items.append((a, b, "-" if (s, t) in sure else "p"))
    return " ".join(f"{a + base}{kind}{b + base}" for a, b, kind in sorted(items))


def write_alignments(
    path: Union[str, Path],
    alignments: Iterable[Union[SentenceAlignment, Links]],
    one_indexed: bool = True,
    reverse: bool = False,
) -> None:
    """Write one line per sentence (see :func:`format_alignment`)."""
    text = "".join(format_alignment(a, one_indexed, reverse) + "\n" for a in alignments)
    Path(path).write_text(text, encoding="utf-8")


# ------------------------------------------------------------------------ AER


@dataclass(frozen=True)
class AlignmentCounts:
    """Corpus counts |A|, |S|, |A∩S|, |A∩P| and the metrics they define (Och & Ney 2000):

    precision = |A∩P| / |A|,  recall = |A∩S| / |S|,
    AER = 1 − (|A∩S| + |A∩P|) / (|A| + |S|).

    A ratio whose denominator is 0 is ``nan`` (precision with no predicted link, recall
    with no sure gold link, AER with neither).
    """

    predicted: int = 0
    sure: int = 0
    predicted_sure: int = 0
    predicted_possible: int = 0

    def __add__(self, other: "AlignmentCounts") -> "AlignmentCounts":
        return AlignmentCounts(
            self.predicted + other.predicted,
            self.sure + other.sure,
            self.predicted_sure + other.predicted_sure,
            self.predicted_possible + other.predicted_possible,
        )

    @property
    def precision(self) -> float:
        return self.predicted_possible / self.predicted if self.predicted else math.nan

    @property
    def recall(self) -> float:
        return self.predicted_sure / self.sure if self.sure else math.nan

    @property
    def aer(self) -> float:
        total = self.predicted + self.sure
        if not total:
            return math.nan
        return 1.0 - (self.predicted_sure + self.predicted_possible) / total


def _links(alignment: Union[SentenceAlignment, Links]) -> FrozenSet[Link]:
    # a predicted file read with read_alignments: every link is a predicted link
    if isinstance(alignment, SentenceAlignment):
        return alignment.possible
    return frozenset(alignment)


def alignment_counts(
    predicted: Sequence[Union[SentenceAlignment, Links]], gold: Sequence[SentenceAlignment]
) -> AlignmentCounts:
    """Corpus-level counts: sums over sentences of |A|, |S|, |A∩S|, |A∩P|."""
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predicted sentences but {len(gold)} gold sentences")
    total = AlignmentCounts()
    for a, g in zip(predicted, gold):
        a = _links(a)
        total = total + AlignmentCounts(len(a), len(g.sure), len(a & g.sure), len(a & g.possible))
    return total


# ---------------------------------------------------------------- best layer / head

HeadKey = Tuple[int, Optional[int]]  # (layer, head); head None = layer attention


@dataclass
class LayerHeadReport:
    """AER per (layer, head) and the summaries of ReLA Table 5 / Kobayashi Table 3.

    * ``counts[key]``: corpus counts (``.aer``, ``.precision``, ``.recall``);
    * ``best``: the key with the lowest AER overall;
    * ``best_layer``: lowest AER among layer attentions (head ``None``), or ``None``;
    * ``best_head_per_layer``: layer -> head with the lowest AER among that layer's heads;
    * ``layer_mean_aer``: mean over layers of the layer-attention AER (Kobayashi "layer
      mean", ReLA "AoL");
    * ``best_head_mean_aer``: mean over layers of the best head's AER (ReLA "AoH").

    Ties go to the smaller layer, then the smaller head.  Keys whose AER is ``nan`` (no
    predicted and no sure link) are never chosen and make a mean ``nan``.
    """

    counts: Dict[HeadKey, AlignmentCounts]
    best: HeadKey
    best_layer: Optional[int]
    best_head_per_layer: Dict[int, int]
    layer_mean_aer: Optional[float]
    best_head_mean_aer: Optional[float]

    def aer(self, layer: int, head: Optional[int] = None) -> float:
        return self.counts[(layer, head)].aer


def _order(key: HeadKey) -> Tuple[int, int]:
    return key[0], -1 if key[1] is None else key[1]


def _argmin(keys: Iterable[HeadKey], counts: Mapping[HeadKey, AlignmentCounts]) -> Optional[HeadKey]:
    scored = [k for k in sorted(keys, key=_order) if not math.isnan(counts[k].aer)]
    return min(scored, key=lambda k: counts[k].aer) if scored else None


def layer_head_report(
    predictions: Mapping[HeadKey, Sequence[Union[SentenceAlignment, Links]]], gold: Sequence[SentenceAlignment]
) -> LayerHeadReport:
    """Score every ``(layer, head)`` prediction against ``gold`` and pick the best ones."""
    if not predictions:
        raise ValueError("no (layer, head) predictions to report on")
    counts = {key: alignment_counts(pred, gold) for key, pred in predictions.items()}
    best = _argmin(counts, counts)
    if best is None:
        raise ValueError("AER is undefined for every (layer, head): no predicted links and no sure gold links")
    layers = sorted({layer for layer, head in counts if head is None})
    layer_best = _argmin([(layer, None) for layer in layers], counts)
    head_best: Dict[int, int] = {}
    for layer in sorted({layer for layer, head in counts if head is not None}):
        key = _argmin([k for k in counts if k[0] == layer and k[1] is not None], counts)
        if key is not None:
            head_best[layer] = key[1]
    head_layers = sorted({layer for layer, head in counts if head is not None})

    def mean(values: List[float]) -> Optional[float]:
        return sum(values) / len(values) if values else None

    return LayerHeadReport(
        counts=counts,
        best=best,
        best_layer=None if layer_best is None else layer_best[0],
        best_head_per_layer=head_best,
        layer_mean_aer=mean([counts[(layer, None)].aer for layer in layers]),
        best_head_mean_aer=mean(
            [counts[(layer, head_best[layer])].aer if layer in head_best else math.nan for layer in head_layers]
        ),
    )


# ------------------------------------------------------------------ the collector


@dataclass
class SentenceWeights:
    sentence: int
    weights: torch.Tensor  # (heads, tgt, src), cropped to real tokens


class WeightsRecorder(Collector):
    """Each sentence's weights cropped to its real queries and keys, for ``kinds``
    (the weights-only counterpart of :class:`.norms.NormRecorder`; no output-norm
    restriction).  ``records[(kind, layer)]`` lists the sentences until :meth:`clear`."""

    def __init__(self, kinds: Sequence[str] = ("cross",)):
        self.kinds = tuple(kinds)
        self.records: Dict[Tuple[str, int], List[SentenceWeights]] = {}

    def collect(self, site: AttentionSite, inter: Intermediates) -> None:
        if site.kind not in self.kinds:
            return
        weights = inter.weights
        q = ~self.batch.query_padding(site.kind).cpu()
        k = ~self.batch.key_padding(site.kind).cpu()
        w = weights.detach().float().cpu()
        out = self.records.setdefault((site.kind, site.layer), [])
        for b in range(w.shape[0]):
            qi, ki = q[b].nonzero().squeeze(1), k[b].nonzero().squeeze(1)
            out.append(SentenceWeights(b, w[b][:, qi][:, :, ki]))

    def clear(self):
        self.records = {}


METHODS = ("weights", "norms")


class AlignmentCollector(Collector):
    """Word alignments from cross attention for every (method, setting, layer, head):
    ``method`` ``"weights"`` (α per head, Σ_h α_h per layer) or ``"norms"`` (‖α f(x)‖
    per head, ‖Σ_h α_h f_h(x)‖ per layer); ``setting`` ``"awo"`` / ``"awi"``; words by
    :func:`sentence_alignment` (``scheme``).  ``links[(method, setting, layer,
    head)][position]`` is a set of (source word, target word) links; head ``None`` = the
    layer."""

    def __init__(
        self,
        model,
        examples,
        methods=("weights",),
        settings=("awo", "awi"),
        scheme: str = "subword-nmt",
        allow_output_norm: bool = False,
    ):
        bad = [m for m in methods if m not in METHODS]
        if bad or not methods:
            raise ValueError(f"alignment methods must be a non-empty subset of {METHODS}, got {methods}")
        self.examples = examples
        self.methods, self.settings, self.scheme = tuple(methods), tuple(settings), scheme
        # the norms' per-sentence records hold the weights too
        self.recorder = (
            NormRecorder(model, ("cross",), allow_output_norm) if "norms" in methods else WeightsRecorder(("cross",))
        )
        self.links: Dict[Tuple[str, str, int, Optional[int]], Dict[int, set]] = {}

    def set_batch(self, batch: Batch) -> None:
        super().set_batch(batch)
        self.recorder.clear()
        self.recorder.set_batch(batch)

    def collect(self, site: AttentionSite, inter: Intermediates) -> None:
        self.recorder.collect(site, inter)

    def end_batch(self) -> None:
        for (_kind, layer), recs in self.recorder.records.items():
            for rec in recs:
                ex = self.examples[self.batch.ids[rec.sentence]]
                matrices = {}
                if "weights" in self.methods:
                    w = rec.weights
                    matrices["weights"] = [(None, combine_heads(w))] + [(h, w[h]) for h in range(w.shape[0])]
                if "norms" in self.methods:
                    matrices["norms"] = [(None, rec.layer)] + [(h, rec.head[h]) for h in range(rec.head.shape[0])]
                for method, items in matrices.items():
                    for setting in self.settings:
                        for head, matrix in items:
                            links = sentence_alignment(matrix, ex.source_pieces, ex.target_pieces, setting, self.scheme)
                            self.links.setdefault((method, setting, layer, head), {})[ex.index] = links
        self.recorder.clear()
