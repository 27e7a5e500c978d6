"""Parse side data for a LanguagePairDataset and the collater that adds ``src_dep`` /
``src_rp`` to ``net_input`` (interface: :mod:`fairseq_sparse_attn.syntax.structure`).

The side files (``<split>.<src>.dep`` / ``.tree``, word level, one line per example) are
not loaded into memory: :class:`LineIndexedFile` keeps a newline index and reads a line
when its example is fetched, so the memory cost is two int64 per sentence whatever the
corpus size.  Each example's parse is checked against its binarized source when it is
fetched: the BPE pieces (from the source dictionary, ``@@`` marking a piece that continues
into the next) must spell the parse's words, ``<unk>`` matching any part of a word;
otherwise the error names the side file, its line and the first piece that does not fit.
"""

from __future__ import annotations

import mmap
import os
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset

from ..syntax.readers import ParseFormatError, first_difference, leaf_matches, parse_dep_line, parse_ptb, ptb_unescape
from ..syntax.structure import (
    NO_PHRASE,
    AlignmentError,
    align_pieces,
    check_rule2,
    dependency_matrix,
    local_phrases,
    phrase_rp_matrix,
)
from ..text_lines import TextFileError

FEATURES = ("dep", "rp")


class LineIndexedFile:
    """Random access to the lines of a UTF-8 text file (``\\n``-terminated; the last line
    may lack its newline).  Holds only the line offsets; the file is memory-mapped lazily
    (again in each DataLoader worker: the map is not pickled)."""

    CHUNK = 1 << 26

    def __init__(self, path: str):
        self.path = str(path)
        size = os.path.getsize(self.path)
        newlines = []
        with open(self.path, "rb") as f:
            pos = 0
            while True:
                block = f.read(self.CHUNK)
                if not block:
                    break
                nl = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
                newlines.append(nl.astype(np.int64) + pos)
                pos += len(block)
            f.seek(max(size - 1, 0))
            last = f.read(1)
        nl = np.concatenate(newlines) if newlines else np.zeros(0, dtype=np.int64)
        ends = nl
        if size > 0 and last != b"\n":
            ends = np.concatenate([nl, np.array([size], dtype=np.int64)])
        starts = np.concatenate([np.zeros(1, dtype=np.int64), nl + 1])[: len(ends)]
        if len(ends) and ends[-1] - starts[-1] <= 1:  # one trailing blank line ("" or "\r")
            with open(self.path, "rb") as f:
                f.seek(int(starts[-1]))
                if f.read(int(ends[-1] - starts[-1])) in (b"", b"\r"):
                    ends, starts = ends[:-1], starts[:-1]
        self.ends = ends
        self.starts = starts
        self._map = None

    def __len__(self) -> int:
        return len(self.ends)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_map"] = None
        return state

    def line(self, i: int) -> str:
        if self._map is None:
            with open(self.path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        raw = self._map[int(self.starts[i]) : int(self.ends[i])]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TextFileError(f"{self.path}, line {i + 1}: not valid UTF-8 ({e.reason})") from None
        return text[:-1] if text.endswith("\r") else text


class SentenceParse:
    """The parse of one example: its words, heads (0-based, -1 = root; ``None`` without a
    .dep file), local phrases (``None`` without a .tree file) and where it was read."""

    __slots__ = ("words", "heads", "phrases", "where")

    def __init__(self, words, heads, phrases, where):
        self.words, self.heads, self.phrases, self.where = words, heads, phrases, where


class ParseSideData:
    """One shard's side files, indexable by example: ``data[i] -> SentenceParse``."""

    def __init__(self, dep_path: Optional[str], tree_path: Optional[str]):
        if dep_path is None and tree_path is None:
            raise ValueError("ParseSideData needs a .dep or a .tree file")
        self.dep = LineIndexedFile(dep_path) if dep_path else None
        self.tree = LineIndexedFile(tree_path) if tree_path else None
        if self.dep is not None and self.tree is not None and len(self.dep) != len(self.tree):
            raise ValueError(
                f"{dep_path} has {len(self.dep)} lines but {tree_path} has "
                f"{len(self.tree)}: the side files must be aligned line by line"
            )

    def __len__(self) -> int:
        return len(self.dep if self.dep is not None else self.tree)

    def __getitem__(self, i: int) -> SentenceParse:
        line_no = int(i) + 1
        words = heads = phrases = None
        where = []
        if self.dep is not None:
            words, heads = parse_dep_line(self.dep.line(i), self.dep.path, line_no)
            where.append(f"{self.dep.path}:{line_no}")
        if self.tree is not None:
            tree = parse_ptb(self.tree.line(i), self.tree.path, line_no)
            leaves = tree.leaves()
            where.append(f"{self.tree.path}:{line_no}")
            if words is None:
                words = [ptb_unescape(leaf) for leaf in leaves]
            elif len(leaves) != len(words) or not all(map(leaf_matches, leaves, words)):
                raise ParseFormatError(
                    f"{self.tree.path}:{line_no}: the tree's words differ from "
                    f"{self.dep.path}:{line_no}: {first_difference(leaves, words, leaf_matches)}"
                )
            phrases = local_phrases(tree)
        return SentenceParse(words, heads, phrases, " and ".join(where))


class ParseAnnotatedDataset(BaseWrapperDataset):
    """A LanguagePairDataset whose examples carry ``src_dep`` / ``src_rp`` and whose
    collater adds them to ``net_input``, padded like ``src_tokens``.

    ``side[i]`` must be the parse of example ``i`` (a :class:`ParseSideData`, or fairseq's
    ``ConcatDataset`` of them mirroring a combined split).  ``features``: which of
    ``dep`` / ``rp`` to build.  ``truncated_length``: with ``--truncate-source``, the
    length (tokens, EOS included: ``--max-source-positions``) of the sources it cut; those
    may stop inside their parsed sentence, and every other source must spell its whole
    parse (None: every source must).  ``rule2``: LPEA Rule 2 reading of ``src_rp``
    (``symmetric`` or ``literal``, see :func:`..syntax.structure.word_phrase_mask`)."""

    def __init__(
        self,
        dataset,
        side,
        src_dict,
        features: Sequence[str] = FEATURES,
        truncated_length: Optional[int] = None,
        source_desc: str = "",
        rule2: str = "symmetric",
    ):
        super().__init__(dataset)
        if len(side) != len(dataset):
            raise ValueError(f"{len(side)} parses for {len(dataset)} examples")
        bad = [f for f in features if f not in FEATURES]
        if bad or not features:
            raise ValueError(f"unknown syntax inputs {bad}; valid: {', '.join(FEATURES)}")
        self.side = side
        self.src_dict = src_dict
        self.features = tuple(features)
        self.truncated_length = truncated_length
        self.rule2 = check_rule2(rule2)
        self.source_desc = source_desc
        self.eos = getattr(dataset, "eos", src_dict.eos())

    def __getattr__(self, name):
        # LanguagePairDataset attributes (src, tgt, left_pad_source, ...) for fairseq's tools
        if name == "dataset" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def num_tokens_vec(self, indices):
        return self.dataset.num_tokens_vec(indices)

    @property
    def supports_fetch_outside_dataloader(self):
        return getattr(self.dataset, "supports_fetch_outside_dataloader", True)

    def aligned_parse(self, index: int, source: torch.Tensor):
        """``(parse, word_ids, with_eos)`` of example ``index``: its side-file line(s) read and
        aligned with the (unpadded) source tokens; ``ParseFormatError`` naming file:line at
        the first mismatch.  The task runs this for every example at load time."""
        parse = self.side[index]
        tokens = source[source != self.src_dict.pad()].tolist()
        truncated = self.truncated_length is not None and len(tokens) >= self.truncated_length
        with_eos = bool(tokens) and tokens[-1] == self.eos
        if with_eos:
            tokens = tokens[:-1]
        symbols = self.src_dict.symbols
        pieces = [symbols[t] for t in tokens]
        try:
            word_ids = align_pieces(pieces, parse.words, "@@", self.src_dict.unk_word, truncated)
        except AlignmentError as e:
            src = f" ({self.source_desc}, example {index})" if self.source_desc else f" (example {index})"
            raise ParseFormatError(f"{parse.where}: the parse does not match the binarized source{src}: {e}") from None
        return parse, word_ids, with_eos

    def structure(self, index: int, source: torch.Tensor) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """``(src_dep, src_rp)`` of example ``index`` with (unpadded) source tokens ``source``."""
        parse, word_ids, with_eos = self.aligned_parse(index, source)
        dep = rp = None
        if "dep" in self.features:
            if parse.heads is None:
                raise ValueError(f"{parse.where}: no dependencies (.dep file) for src_dep")
            dep = dependency_matrix(parse.heads, word_ids, with_eos)
        if "rp" in self.features:
            if parse.phrases is None:
                raise ValueError(f"{parse.where}: no tree (.tree file) for src_rp")
            rp = phrase_rp_matrix(parse.phrases, word_ids, with_eos, self.rule2)
        return dep, rp

    def __getitem__(self, index):
        item = self.dataset[index]
        dep, rp = self.structure(index, item["source"])
        if dep is not None:
            item["src_dep"] = dep
        if rp is not None:
            item["src_rp"] = rp
        return item

    def collater(self, samples, **kwargs):
        res = self.dataset.collater(samples, **kwargs)
        if not res or "net_input" not in res:
            return res
        res["net_input"].update(
            collate_structure(samples, res["id"], res["net_input"]["src_tokens"], self.src_dict.pad(), self.features)
        )
        return res


def collate_structure(
    samples: List[dict], ids: torch.Tensor, src_tokens: torch.Tensor, pad: int, features: Sequence[str] = FEATURES
) -> dict:
    """Place each example's matrices at the non-padding positions of its row of
    ``src_tokens`` (the batch order is ``ids``, which fairseq's collate sorts by length)."""
    bsz, T = src_tokens.shape
    out = {}
    if "dep" in features:
        out["src_dep"] = torch.zeros(bsz, T, T, dtype=torch.bool)
    if "rp" in features:
        out["src_rp"] = torch.full((bsz, T, T), NO_PHRASE, dtype=torch.int16)
    by_id = {int(s["id"]): s for s in samples}
    for b, sid in enumerate(ids.tolist()):
        sample = by_id[sid]
        positions = (src_tokens[b] != pad).nonzero().squeeze(1)
        n = positions.numel()
        start = int(positions[0]) if n else 0
        if n and int(positions[-1]) - start + 1 != n:
            raise RuntimeError(f"example {sid}: padding inside the source row; cannot place src_dep/src_rp")
        for key in out:
            m = sample[key]
            if m.shape != (n, n):
                raise RuntimeError(
                    f"example {sid}: {key} is {tuple(m.shape)} but the source has {n} non-padding tokens"
                )
            out[key][b, start : start + n, start : start + n] = m
    return out
