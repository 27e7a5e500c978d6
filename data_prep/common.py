"""Shared pieces of the data_prep/ entry points.

- ``PrepError``: user-facing errors (printed without a traceback, exit status 1), each
  naming the file / line / what was expected;
- reading and atomic writing of text files (plain or .gz, any encoding);
- ``download``: HTTP(S) download with resume (HTTP Range), checksum / size verification,
  partial-file cleanup, mirrors, and a message naming the file and where to get it when
  every URL is dead;
- archive members (tar, tgz, zip, gz) and the text formats the corpora ship in (plain,
  WMT SGML, IWSLT tags/XML, TSV, TMX);
- Moses tokenization with sacremoses, corpus cleaning (clean-corpus-n), BPE with
  subword-nmt (joint or per language), ``fairseq-preprocess`` into a temporary directory
  that replaces the old one only when complete, and a stamp file for idempotent reruns.

Nothing here downloads by itself; ``prepare_multi30k.py``, ``prepare_europarl_docs.py``
and ``prepare_corpus.py`` (the WMT / IWSLT / Europarl corpora of ``corpora.py``) use it.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import http.client
import io
import json
import multiprocessing
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from fairseq_sparse_attn.text_lines import split_lines

CHUNK_LINES = 500
DOWNLOAD_TIMEOUT_S = 60
# extra URL prefixes tried before the official URLs (institutional mirrors; the tests'
# local HTTP server): space-separated, each followed by the file name
MIRROR_ENV = "FSA_DATA_MIRROR"


class PrepError(Exception):
    """A user-facing error: printed without a traceback, exit status 1."""


def make_logger(tag: str) -> Callable[[str], None]:
    def log(msg: str) -> None:
        print(f"{tag} {msg}", file=sys.stderr, flush=True)

    return log


# --------------------------------------------------------------------------- text files


def open_text(path: Path, encoding: str = "utf-8"):
    opener = gzip.open if str(path).endswith(".gz") else open
    return opener(path, "rt", encoding=encoding, newline="")


def read_lines(path: Path, encoding: str = "utf-8") -> List[str]:
    """All lines of ``path`` (gzipped or plain) without line ends, split as every reader
    of the plugin splits them (fairseq_sparse_attn/text_lines.py: on "\n", one "\r" before
    it dropped, one trailing blank line tolerated); a decoding error names the file and the
    line."""
    lines: List[str] = []
    compressed = str(path).endswith(".gz")
    opener = gzip.open if compressed else open
    try:
        with opener(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                try:
                    line = raw.decode(encoding)
                    line = line[:-1] if line.endswith("\n") else line
                    lines.append(line[:-1] if line.endswith("\r") else line)
                except UnicodeDecodeError as e:
                    raise PrepError(f"{path}, line {n}: not valid {encoding} ({e.reason} at byte {e.start})") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        # a truncated download / copy: gzip raises EOFError after the last complete line
        raise PrepError(
            f"{path} is truncated or not a gzip file (read {len(lines)} lines, then: "
            f"{e or type(e).__name__}); download or copy it again"
        ) from None
    if lines and lines[-1] == "":
        lines.pop()  # one trailing blank line
    return lines


def write_lines(path: Path, lines: Iterable[str]) -> None:
    """Write atomically (tmp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            for line in lines:
                f.write(line)
                f.write("\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def count_lines(path: Path) -> int:
    """The number of lines :func:`read_lines` gives (the same count score and the readers
    of the plugin get)."""
    return len(read_lines(path))


# --------------------------------------------------------------------------- downloads


@dataclass(frozen=True)
class Source:
    """One file a corpus needs.

    ``sha256`` / ``md5`` / ``size`` are the published values (``checksum_from`` says where
    they are documented); a file without any is accepted as downloaded and says so.
    ``manual``: cannot be fetched automatically (licence form); the user puts it into
    ``--raw-dir``.  ``homepage``: where a user gets it by hand when the URLs are dead."""

    name: str
    urls: Tuple[str, ...]
    homepage: str
    sha256: Optional[str] = None
    md5: Optional[str] = None
    size: Optional[int] = None
    checksum_from: str = ""
    manual: bool = False

    def verification(self) -> str:
        parts = []
        if self.sha256:
            parts.append("sha256")
        if self.md5:
            parts.append("md5")
        if self.size is not None:
            parts.append("size")
        if not parts:
            return "no published checksum or size: not verified"
        if parts == ["size"]:
            return f"no published checksum; verified by size ({self.checksum_from})"
        return " + ".join(parts) + f" ({self.checksum_from})"


def _hashes(path: Path) -> Tuple[str, str]:
    sha, md5 = hashlib.sha256(), hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
            md5.update(block)
    return sha.hexdigest(), md5.hexdigest()


def verify_file(path: Path, source: Source) -> None:
    """Raise PrepError when ``path`` does not have the published size / checksum."""
    size = path.stat().st_size
    if source.size is not None and size != source.size:
        raise PrepError(f"{path}: size {size} bytes, expected {source.size} bytes ({source.checksum_from})")
    if source.sha256 or source.md5:
        sha, md5 = _hashes(path)
        if source.sha256 and sha != source.sha256.lower():
            raise PrepError(f"{path}: sha256 {sha}, expected {source.sha256} ({source.checksum_from})")
        if source.md5 and md5 != source.md5.lower():
            raise PrepError(f"{path}: md5 {md5}, expected {source.md5} ({source.checksum_from})")


def candidate_urls(source: Source) -> List[str]:
    mirrors = [m for m in os.environ.get(MIRROR_ENV, "").split() if m]
    return [m.rstrip("/") + "/" + source.name for m in mirrors] + list(source.urls)


def _fetch(url: str, part: Path, log: Callable[[str], None]) -> None:
    """Download ``url`` into ``part``, resuming from its current size with an HTTP Range
    request; a server that ignores the range restarts the file from byte 0."""
    have = part.stat().st_size if part.exists() else 0
    req = urllib.request.Request(url, headers={"User-Agent": "fairseq_sparse_attn-data_prep"})
    if have:
        req.add_header("Range", f"bytes={have}-")
    try:
        resp = urllib.request.urlopen(req, timeout=DOWNLOAD_TIMEOUT_S)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # nothing left to send: the part is complete
            return
        raise
    with resp:
        status = getattr(resp, "status", 200)
        if have and status == 206:
            mode = "ab"
            log(f"resuming {part.name} at byte {have}")
        else:
            mode = "wb"
        total = resp.headers.get("Content-Length")
        with open(part, mode) as out:
            got = 0
            while True:
                block = resp.read(1 << 20)
                if not block:
                    break
                out.write(block)
                got += len(block)
        if total is not None and got < int(total):
            raise ConnectionError(f"connection closed after {got} of {total} bytes")


def download(source: Source, dest_dir: Path, log: Callable[[str], None], what: str = "") -> Path:
    """``dest_dir/source.name``, downloaded when absent.

    A partial download is kept as ``<name>.part`` and resumed on the next run.  The
    finished file is checked against the published size / checksum; on a mismatch the
    partial file is removed and the error names the file, the URL and both values.  When
    every URL fails the error names the file, each URL with its error, the page where it
    can be had, and ``--raw-dir``."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / source.name
    if dest.is_file():
        return dest
    where = f"{what}: " if what else ""
    if source.manual:
        raise PrepError(
            f"{where}{source.name} cannot be downloaded automatically; get it from {source.homepage} "
            f"and put it into --raw-dir DIR (or into {dest_dir})"
        )
    part = dest.with_name(dest.name + ".part")
    errors = []
    for url in candidate_urls(source):
        t0 = time.time()
        try:
            _fetch(url, part, log)
        except (urllib.error.URLError, http.client.HTTPException, OSError, socket.timeout, ValueError) as e:
            reason = getattr(e, "reason", None) or e
            errors.append(f"{url}: {reason}")
            if part.exists() and part.stat().st_size == 0:
                part.unlink()
            continue
        try:
            verify_file(part, source)
        except PrepError as e:
            part.unlink(missing_ok=True)
            raise PrepError(
                f"{where}checksum mismatch for {source.name} downloaded from {url}: {e}; the partial "
                f"file was removed. The file on the server differs from the published one; get it "
                f"from {source.homepage} and check it, then pass --raw-dir DIR"
            ) from None
        os.replace(part, dest)
        log(
            f"downloaded {source.name}: {dest.stat().st_size} bytes in {time.time() - t0:.1f}s "
            f"[{source.verification()}]"
        )
        return dest
    kept = ""
    if part.exists():
        kept = f"\n  {part.stat().st_size} bytes are kept in {part}; run again to resume"
    raise PrepError(
        f"{where}could not download {source.name}:\n  "
        + "\n  ".join(errors)
        + f"\n  get {source.name} from {source.homepage} and put it into --raw-dir DIR (or {dest_dir})"
        + kept
    )


def locate_sources(
    sources: Sequence[Source],
    raw_dir: Optional[Path],
    download_dir: Path,
    log: Callable[[str], None],
    verify_raw: bool = False,
    what: str = "",
) -> Dict[str, Path]:
    """{source name: path}: from ``raw_dir`` when given (missing files are an error naming
    them; verified only with ``verify_raw``), else downloaded into ``download_dir``."""
    found: Dict[str, Path] = {}
    if raw_dir is not None:
        if not raw_dir.is_dir():
            raise PrepError(
                f"raw data directory not found: {raw_dir}\n  expected files: " + ", ".join(s.name for s in sources)
            )
        missing = [s for s in sources if not (raw_dir / s.name).is_file()]
        if missing:
            raise PrepError(
                f"missing file(s) in {raw_dir}:\n  "
                + "\n  ".join(f"{s.name} (from {s.urls[0] if s.urls else s.homepage})" for s in missing)
            )
        for s in sources:
            p = raw_dir / s.name
            if verify_raw:
                verify_file(p, s)
            found[s.name] = p
        log(
            f"raw files from {raw_dir} ({'verified' if verify_raw else 'local copies, not verified: --verify-raw checks them'})"
        )
        return found
    for s in sources:
        found[s.name] = download(s, download_dir, log, what=what)
    return found


# --------------------------------------------------------------------------- archives


def _safe_member(name: str) -> bool:
    p = Path(name)
    return not p.is_absolute() and ".." not in p.parts


def read_member_bytes(archive: Path, member: Optional[str]) -> bytes:
    """The bytes of ``member`` inside ``archive`` (tar / tgz / zip), or of a .gz / plain
    file itself when ``member`` is None.  A member pattern with ``*`` / ``[..]`` gives the
    matching members concatenated in sorted order; a member ending in .gz is unzipped."""
    name = archive.name
    if member is None:
        if name.endswith(".gz") and not name.endswith((".tar.gz", ".tgz")):
            try:
                with gzip.open(archive, "rb") as f:
                    return f.read()
            except (OSError, EOFError) as e:
                raise PrepError(f"{archive}: not a readable gzip file ({e})") from None
        return archive.read_bytes()
    if not _safe_member(member):
        raise PrepError(f"{archive}: refusing member path {member!r}")
    pattern = any(c in member for c in "*?[")
    found: Dict[str, bytes] = {}
    names: List[str] = []
    if name.endswith(".zip"):
        try:
            with zipfile.ZipFile(archive) as z:
                names = z.namelist()
                for n in names:
                    if fnmatch.fnmatchcase(n, member) if pattern else n == member:
                        found[n] = z.read(n)
        except zipfile.BadZipFile as e:
            raise PrepError(f"{archive}: not a readable zip file ({e})") from None
    else:
        try:
            with tarfile.open(archive, "r:*") as t:
                for info in t:
                    n = info.name[2:] if info.name.startswith("./") else info.name
                    names.append(n)
                    if info.isfile() and (fnmatch.fnmatchcase(n, member) if pattern else n == member):
                        f = t.extractfile(info)
                        found[n] = f.read() if f is not None else b""
                        if not pattern:
                            break
        except (tarfile.TarError, EOFError, OSError) as e:
            raise PrepError(f"{archive}: not a readable tar archive ({e})") from None
    if not found:
        similar = [n for n in names if Path(n).name == Path(member).name][:3] or names[:5]
        raise PrepError(f"{archive}: no member {member!r} (the archive has e.g. {', '.join(similar) or 'no files'})")
    parts = []
    for n in sorted(found):
        data = found[n]
        if n.endswith(".gz"):
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError) as e:
                raise PrepError(f"{archive}: member {n} is not a readable gzip file ({e})") from None
        if parts and parts[-1] and not parts[-1].endswith(b"\n"):
            parts.append(b"\n")
        parts.append(data)
    return b"".join(parts)


# --------------------------------------------------------------------------- text formats

_SEG = re.compile(r"<seg[^>]*>(.*)</seg>", re.IGNORECASE)
_IWSLT_DROP = ("<url>", "<talkid>", "<keywords>")
_IWSLT_STRIP = re.compile(r"</?(title|description)>")


def parse_text(
    data: bytes, fmt: str, origin: str, encoding: str = "utf-8", column: int = 0, lang: str = ""
) -> List[str]:
    """Sentences of one file.  ``fmt``: ``plain`` (one per line), ``sgm`` (WMT SGML:
    the ``<seg>`` contents), ``iwslt_xml`` (as sgm, with ’ → ' like fairseq's recipe),
    ``iwslt_tags`` (IWSLT train.tags: metadata lines dropped, title/description tags
    removed), ``tsv`` / ``bars`` (column ``column`` of tab / ``|||`` separated lines),
    ``tmx`` (the ``<seg>`` of the ``<tuv>`` whose xml:lang is ``lang``)."""
    if fmt == "tmx":
        return _parse_tmx(data, origin, lang)
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise PrepError(f"{origin}, line {line}: not valid {encoding} ({e.reason})") from None
    lines = split_lines(text)  # the one line convention (fairseq_sparse_attn/text_lines.py)
    if fmt == "plain":
        return lines
    if fmt in ("sgm", "iwslt_xml"):
        out = []
        for line in lines:
            if "<seg" not in line.lower():  # (as _SEG: any case, <SEG ...> too)
                continue
            m = _SEG.search(line)
            if m is None:
                raise PrepError(f"{origin}: a <seg> line without </seg>: {line[:80]!r}")
            s = m.group(1).strip()
            out.append(s.replace("\u2019", "'") if fmt == "iwslt_xml" else s)
        if not out:
            raise PrepError(f"{origin}: no <seg> lines (expected SGML/XML with <seg id=...>...</seg>)")
        return out
    if fmt == "iwslt_tags":
        return [_IWSLT_STRIP.sub("", line) for line in lines if not any(t in line for t in _IWSLT_DROP)]
    if fmt == "tsv":
        # a line with fewer columns gives "" (the pair is then dropped as empty in training)
        out = []
        for line in lines:
            cols = line.split("\t")
            out.append(cols[column].strip() if len(cols) > column else "")
        return out
    if fmt == "bars":  # "source ||| target" (WMT wiki headlines)
        out = []
        for line in lines:
            cols = line.split("|||")
            out.append(cols[column].strip() if len(cols) > column else "")
        return out
    raise ValueError(f"unknown text format {fmt!r}")


def _parse_tmx(data: bytes, origin: str, lang: str) -> List[str]:
    import xml.etree.ElementTree as ET

    xml_lang = "{http://www.w3.org/XML/1998/namespace}lang"
    out = []
    try:
        for _, elem in ET.iterparse(io.BytesIO(data), events=("end",)):
            if elem.tag != "tu":
                continue
            seg = None
            for tuv in elem.iter("tuv"):
                code = (tuv.get(xml_lang) or tuv.get("lang") or "").lower()
                if code.split("-")[0].split("_")[0] == lang:
                    s = tuv.find("seg")
                    seg = "".join(s.itertext()).strip() if s is not None else ""
            out.append(seg if seg is not None else "")
            elem.clear()
    except ET.ParseError as e:
        raise PrepError(f"{origin}: not valid TMX ({e})") from None
    return out


# --------------------------------------------------------------------------- tokenization

_TOKENIZERS: dict = {}
_BPE = None


def _tokenize_chunk(job: Tuple[str, dict, List[str]]) -> List[str]:
    lang, opts, lines = job
    key = (lang, tuple(sorted(opts.items())))
    tok = _TOKENIZERS.get(key)
    if tok is None:
        from sacremoses import MosesTokenizer

        tok = _TOKENIZERS[key] = MosesTokenizer(lang=lang)
    return [
        tok.tokenize(
            line,
            aggressive_dash_splits=opts.get("aggressive_dash_splits", False),
            escape=opts.get("escape", False),
            return_str=True,
        )
        for line in lines
    ]


def _segment_chinese_chunk(lines: List[str]) -> List[str]:
    import jieba

    jieba.setLogLevel(60)
    return [" ".join(w for w in jieba.cut(line) if w.strip()) for line in lines]


def _init_bpe(codes_path: str) -> None:
    global _BPE
    from subword_nmt.apply_bpe import BPE

    with open(codes_path, encoding="utf-8") as f:
        _BPE = BPE(f)


def _bpe_chunk(lines: List[str]) -> List[str]:
    return [_BPE.process_line(line) for line in lines]


def chunks(lines: Sequence, n: int = CHUNK_LINES) -> Iterator[list]:
    for i in range(0, len(lines), n):
        yield list(lines[i : i + n])


#: the worker pools' processes are spawned, not forked: a fork copies the parent's threads'
#: locks as they are at that moment (a pytest worker's, a logger's, torch's), and a worker
#: that starts with one held can never run, nor die of a SIGTERM a handler it inherited
#: catches.  The likely cause, not reproduced alone, of CI's hang of 2026-11-29
#: (test_tokenize_in_worker_processes_keeps_the_order timed out in the pool's join)
POOL_CONTEXT = multiprocessing.get_context("spawn")


def pmap(pool, fn: Callable, jobs: Iterable) -> List[str]:
    """Order-preserving chunked map; ``pool=None`` runs inline."""
    out: List[str] = []
    it = pool.imap(fn, jobs) if pool is not None else map(fn, jobs)
    for part in it:
        out.extend(part)
    return out


def tokenize(
    lines: Sequence[str], lang: str, workers: int = 1, escape: bool = False, aggressive_dash_splits: bool = False
) -> List[str]:
    """Moses tokenization (sacremoses); Chinese is segmented into words with jieba."""
    if lang == "zh":
        try:
            import jieba  # noqa: F401
        except ImportError:
            raise PrepError("Chinese word segmentation needs jieba: pip install jieba") from None
        fn, jobs = _segment_chinese_chunk, chunks(lines)
    else:
        opts = {"escape": escape, "aggressive_dash_splits": aggressive_dash_splits}
        fn, jobs = _tokenize_chunk, ((lang, opts, c) for c in chunks(lines))
    if workers > 1 and len(lines) > CHUNK_LINES:
        with POOL_CONTEXT.Pool(workers) as pool:
            return pmap(pool, fn, jobs)
    return pmap(None, fn, jobs)


def detokenize(lines: Sequence[str], lang: str) -> List[str]:
    """Moses detokenization (sacremoses, entities unescaped): what fairseq-generate's
    ``--tokenizer moses`` does to a hypothesis, so a reference released tokenized and a
    hypothesis compare in one form."""
    from sacremoses import MosesDetokenizer

    detok = MosesDetokenizer(lang=lang)
    return [detok.detokenize(line.split()) for line in lines]


def clean_pairs(
    src: Sequence[str], tgt: Sequence[str], min_len: int, max_len: int, ratio: Optional[float]
) -> Tuple[List[str], List[str], int]:
    """Moses clean-corpus-n: keep pairs whose token counts lie in [min_len, max_len] on
    both sides and whose length ratio (either way) is at most ``ratio`` (None: no ratio
    filter, for a language pair whose token counts differ by nature)."""
    out_s, out_t, dropped = [], [], 0
    for s, t in zip(src, tgt):
        ns, nt = len(s.split()), len(t.split())
        ratio_ok = ratio is None or (ns <= ratio * nt and nt <= ratio * ns)
        if min_len <= ns <= max_len and min_len <= nt <= max_len and ratio_ok:
            out_s.append(s)
            out_t.append(t)
        else:
            dropped += 1
    return out_s, out_t, dropped


# --------------------------------------------------------------------------- BPE


def quiet_learn_bpe():
    import subword_nmt.learn_bpe as learn_bpe_module

    if not sys.stderr.isatty():  # no tqdm progress bar in logs / CI output
        learn_bpe_module.tqdm = lambda iterable, *a, **k: iterable
    return learn_bpe_module.learn_bpe


def learn_bpe(lines: Sequence[str], codes: Path, merges: int) -> int:
    """Learn ``merges`` BPE merges (subword-nmt) on ``lines`` into ``codes`` (atomically);
    returns the number of merges written (fewer when the data runs out of pairs)."""
    learn = quiet_learn_bpe()
    codes.parent.mkdir(parents=True, exist_ok=True)
    tmp = codes.with_name(codes.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            learn(list(lines), f, merges)
        os.replace(tmp, codes)
    finally:
        tmp.unlink(missing_ok=True)
    return sum(1 for line in codes.read_text(encoding="utf-8").splitlines() if not line.startswith("#version"))


def apply_bpe(lines: Sequence[str], codes: Path, workers: int = 1) -> List[str]:
    if workers > 1 and len(lines) > CHUNK_LINES:
        with POOL_CONTEXT.Pool(workers, initializer=_init_bpe, initargs=(str(codes),)) as pool:
            return pmap(pool, _bpe_chunk, chunks(lines))
    _init_bpe(str(codes))
    return pmap(None, _bpe_chunk, chunks(lines))


# --------------------------------------------------------------------------- binarize


def binarized_files(src: str, tgt: str, splits: Sequence[str] = ("train", "valid", "test")) -> List[str]:
    names = [f"dict.{src}.txt", f"dict.{tgt}.txt"]
    for split in splits:
        for lang in (src, tgt):
            for ext in ("bin", "idx"):
                names.append(f"{split}.{src}-{tgt}.{lang}.{ext}")
    return names


#: fairseq's special symbols: a word spelled like one is binarized to its id (<s> and <pad>
#: inside a sentence, </s> in mid-sentence), which fairseq then trains on silently
SPECIAL_SYMBOLS = ("<s>", "<pad>", "</s>")


def check_special_symbols(path: Path) -> None:
    """PrepError naming the file and line when a word of ``path`` is a fairseq special
    symbol (``<unk>`` is fine: it means what it says)."""
    if not path.is_file():
        return
    with open(path, encoding="utf-8", newline="\n") as f:
        for number, line in enumerate(f, 1):
            words = set(line.split())
            found = [s for s in SPECIAL_SYMBOLS if s in words]
            if found:
                raise PrepError(
                    f"{path}:{number}: the word {found[0]!r} is fairseq's special "
                    "symbol and would be binarized to its id; remove it from the "
                    "corpus or tokenize with escaping (&lt; &gt;)"
                )


def binarize(
    text_dir: Path,
    databin: Path,
    src: str,
    tgt: str,
    joined: bool,
    workers: int,
    log: Callable[[str], None],
    extra_files: Optional[Dict[str, str]] = None,
) -> None:
    """``fairseq-preprocess`` of ``text_dir/{train,valid,test}.{src,tgt}`` into a temporary
    directory that replaces ``databin`` only when complete (``extra_files``: name → text
    written into it before the swap)."""
    for split in ("train", "valid", "test"):
        for lang in (src, tgt):
            check_special_symbols(text_dir / f"{split}.{lang}")
    tmp = databin.with_name(databin.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "fairseq_cli.preprocess",
        "--source-lang",
        src,
        "--target-lang",
        tgt,
        "--trainpref",
        str(text_dir / "train"),
        "--validpref",
        str(text_dir / "valid"),
        "--testpref",
        str(text_dir / "test"),
        "--destdir",
        str(tmp),
        "--workers",
        str(workers),
    ]
    if joined:
        cmd.append("--joined-dictionary")
    log("binarize: " + " ".join(cmd))
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PrepError(
            f"fairseq-preprocess failed with exit status {proc.returncode}: {' '.join(cmd)}\n" + proc.stderr[-2000:]
        )
    missing = [n for n in binarized_files(src, tgt) if not (tmp / n).is_file()]
    if missing:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PrepError(f"fairseq-preprocess did not produce: {', '.join(missing)} in {tmp}")
    for name, text in (extra_files or {}).items():
        (tmp / name).write_text(text, encoding="utf-8")
    shutil.rmtree(databin, ignore_errors=True)
    os.replace(tmp, databin)


# --------------------------------------------------------------------------- stamps


def read_stamp(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_stamp(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def main_wrapper(tag: str, run: Callable[[], None]) -> int:
    """Run ``run`` and turn PrepError / Ctrl-C, and a file the system refuses (an ``--out``
    under a file, a folder without write permission, a full disk), into one line and an
    exit status."""
    try:
        run()
    except PrepError as e:
        print(f"{tag} error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        if not e.filename or not e.strerror:
            raise
        print(f"{tag} error: {e.filename}: {e.strerror}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{tag} interrupted", file=sys.stderr)
        return 130
    return 0


@dataclass
class Timer:
    t0: float = field(default_factory=time.time)

    def __str__(self) -> str:
        return f"{time.time() - self.t0:.1f}s"
