"""Documents for document-level translation (ReLUFormer, Appendix B).

Reading: parallel sentence files where a line ``<d>`` starts a document (as the
Europarl7 document set of Maruf et al. 2019), or plain sentence files plus a doc-id file
(one id per sentence line; a new document starts where the id changes).

Packing (Appendix B): within each document, take the longest run of consecutive
sentences whose token count stays <= L, and start the next packed document at the
following sentence.  Choices (docs/reluformer.md):

* lengths are model tokens (after BPE), without the EOS fairseq appends;
* *neither* side may exceed L: a run is extended only while both the source and the
  target token counts stay <= L;
* an optional separator token between sentences counts as one token;
* a single sentence longer than L becomes a document of its own, untruncated (cutting it
  would break the sentence alignment); such documents are counted and reported;
* packed documents never cross an original document boundary.
"""

import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

from ..errors import DocumentFormatError

DOC_MARK = "<d>"


def read_lines(path) -> List[str]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: file not found")
    lines = []
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        for raw in f:  # binary: lines end at \n only (a lone CR stays inside its line)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DocumentFormatError(
                    f"{path}:{len(lines) + 1}: not valid UTF-8 ({e.reason} at byte {e.start})"
                ) from None
            lines.append(line.rstrip("\n").rstrip("\r"))
    return lines


@dataclass
class Document:
    first_line: int  # 1-based line number (in the source file) of the first sentence
    src: List[str]
    tgt: List[str]


def documents_from_marked_files(src_path, tgt_path) -> List[Document]:
    """Parallel files with ``<d>`` lines; the marks must sit on the same lines."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DocumentFormatError(
            f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: expected line-aligned parallel files"
        )
    docs: List[Document] = []
    current: Optional[Document] = None
    for i, (s, t) in enumerate(zip(src, tgt), start=1):
        s_mark, t_mark = s.strip() == DOC_MARK, t.strip() == DOC_MARK
        if s_mark != t_mark:
            marked, other = (src_path, tgt_path) if s_mark else (tgt_path, src_path)
            raise DocumentFormatError(
                f"{marked}:{i}: document boundary '{DOC_MARK}' but {other}:{i} is a sentence: "
                "source and target document boundaries disagree"
            )
        if s_mark:
            current = Document(first_line=i + 1, src=[], tgt=[])
            docs.append(current)
            continue
        if current is None:
            raise DocumentFormatError(f"{src_path}:{i}: expected '{DOC_MARK}' on the first line (a document start)")
        current.src.append(s)
        current.tgt.append(t)
    return [d for d in docs if d.src]


def documents_from_doc_ids(src_path, tgt_path, doc_id_path) -> List[Document]:
    """Plain parallel sentence files plus one document id per line."""
    src, tgt, ids = read_lines(src_path), read_lines(tgt_path), read_lines(doc_id_path)
    for path, lines in ((tgt_path, tgt), (doc_id_path, ids)):
        if len(lines) != len(src):
            raise DocumentFormatError(
                f"{path} has {len(lines)} lines but {src_path} has {len(src)}: expected one per sentence"
            )
    docs: List[Document] = []
    previous = None
    for i, (s, t, d) in enumerate(zip(src, tgt, ids), start=1):
        d = d.strip()
        if not d:
            raise DocumentFormatError(f"{doc_id_path}:{i}: empty document id")
        if d != previous:
            docs.append(Document(first_line=i, src=[], tgt=[]))
            previous = d
        docs[-1].src.append(s)
        docs[-1].tgt.append(t)
    return docs


@dataclass
class PackingReport:
    documents_in: int = 0
    sentences: int = 0
    packed: int = 0
    overlong_sentences: int = 0  # sentences longer than L, kept alone and untruncated


def pack_lengths(
    src_lengths: Sequence[int], tgt_lengths: Sequence[int], max_len: int, separator: bool = False
) -> List[range]:
    """Greedy Appendix-B packing of one document; returns ranges of sentence indices."""
    if max_len <= 0:
        raise ValueError(f"max_len must be positive, got {max_len}")
    sep = 1 if separator else 0
    groups, start, n = [], 0, len(src_lengths)
    while start < n:
        end, s_total, t_total = start + 1, src_lengths[start], tgt_lengths[start]
        while end < n:
            s_next = s_total + sep + src_lengths[end]
            t_next = t_total + sep + tgt_lengths[end]
            if s_next > max_len or t_next > max_len:
                break
            s_total, t_total, end = s_next, t_next, end + 1
        groups.append(range(start, end))
        start = end
    return groups


def pack_documents(
    docs: Sequence[Document],
    max_len: int,
    separator: Optional[str] = None,
    length=lambda sentence: len(sentence.split()),
):
    """Pack every document; returns (list of (src_text, tgt_text, first_line), report)."""
    report = PackingReport(documents_in=len(docs))
    packed = []
    joiner = f" {separator} " if separator else " "
    for doc in docs:
        s_len = [length(s) for s in doc.src]
        t_len = [length(t) for t in doc.tgt]
        report.sentences += len(doc.src)
        report.overlong_sentences += sum(1 for a, b in zip(s_len, t_len) if a > max_len or b > max_len)
        for group in pack_lengths(s_len, t_len, max_len, separator=separator is not None):
            packed.append(
                (
                    joiner.join(doc.src[i] for i in group),
                    joiner.join(doc.tgt[i] for i in group),
                    doc.first_line + group.start,
                )
            )
    report.packed = len(packed)
    return packed, report
