#!/usr/bin/env python3
"""Prepare Multi30k task-1 (German<->English) for fairseq.

Pipeline
--------
1. Locate the raw text: ``--raw-dir DIR``, else the ``MULTI30K_DIR``
   environment variable, else ``<out>/raw/`` (files downloaded earlier), else
   download the six files from the public Multi30k repository into
   ``<out>/raw/``.  Each file may be gzipped (``train.de.gz``) or plain
   (``train.de``).
2. Tokenize with sacremoses (case kept, no escaping) -> ``<out>/tok/``.
3. Learn a joint BPE (subword-nmt) on tokenized train src+tgt and apply it to
   all splits -> ``<out>/bpe/{train,valid,test}.{src,tgt}`` and
   ``<out>/bpe/codes``.
4. Binarize with ``fairseq-preprocess --joined-dictionary`` ->
   ``<out>/data-bin/``.
5. Keep the untokenized test reference at ``<out>/raw/test.<tgt>`` for
   sacreBLEU.

The run is idempotent: a stamp file ``<out>/.prepare_multi30k.json`` records
the options; a later run with the same options and complete outputs is a
no-op (``--force`` rebuilds).  The stamp is removed before a rebuild starts and
written only after everything else succeeded, so an interrupted run never
leaves a stamp behind.

Example::

    python data_prep/prepare_multi30k.py --raw-dir /path/to/multi30k --out data/multi30k
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from multiprocessing import Pool
from pathlib import Path
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

TAG = "[multi30k]"
STAMP_NAME = ".prepare_multi30k.json"
STAMP_VERSION = 1

DEFAULT_URL_BASE = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
# Hidden override (used by the tests to simulate a network failure).
URL_BASE_ENV = "MULTI30K_URL_BASE"
RAW_DIR_ENV = "MULTI30K_DIR"

# raw file stem -> fairseq split name
SPLITS: Tuple[Tuple[str, str], ...] = (
    ("train", "train"),
    ("val", "valid"),
    ("test_2016_flickr", "test"),
)
LANGS = ("de", "en")
CHUNK_LINES = 500
DOWNLOAD_TIMEOUT_S = 60


class PrepError(Exception):
    """A user-facing error: printed without a traceback, exit status 1."""


def log(msg: str) -> None:
    print(f"{TAG} {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- raw files


def expected_names(compressed: bool = True) -> List[str]:
    suffix = ".gz" if compressed else ""
    return [f"{stem}.{lang}{suffix}" for stem, _ in SPLITS for lang in LANGS]


def find_raw_file(raw_dir: Path, stem: str, lang: str) -> Optional[Path]:
    """``<stem>.<lang>.gz`` if present, else plain ``<stem>.<lang>``, else None."""
    for name in (f"{stem}.{lang}.gz", f"{stem}.{lang}"):
        p = raw_dir / name
        if p.is_file():
            return p
    return None


def expected_files_msg() -> str:
    return (
        "expected files: "
        + ", ".join(expected_names())
        + " (gzipped, or the same names without .gz)"
    )


def validate_raw_dir(raw_dir: Path, langs: Sequence[str]) -> dict:
    """Return {(stem, lang): path}; raise PrepError if the dir or a file is missing."""
    if not raw_dir.is_dir():
        raise PrepError(f"raw data directory not found: {raw_dir}\n  {expected_files_msg()}")
    found = {}
    missing = []
    for stem, _ in SPLITS:
        for lang in langs:
            p = find_raw_file(raw_dir, stem, lang)
            if p is None:
                missing.append(str(raw_dir / f"{stem}.{lang}.gz"))
            else:
                found[(stem, lang)] = p
    if missing:
        raise PrepError(
            f"missing raw file(s) in {raw_dir}: "
            + ", ".join(missing)
            + f"\n  {expected_files_msg()}"
        )
    return found


def read_lines(path: Path) -> List[str]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        return [line.rstrip("\r\n") for line in f]


def download_raw(raw_dir: Path, url_base: str) -> None:
    """Download the six gz files into raw_dir (skipping ones already there)."""
    raw_dir.mkdir(parents=True, exist_ok=True)
    if not url_base.endswith("/"):
        url_base += "/"
    for name in expected_names():
        dest = raw_dir / name
        if dest.is_file():
            continue
        url = url_base + name
        part = dest.with_name(dest.name + ".part")
        t0 = time.time()
        try:
            with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as resp, open(part, "wb") as out:
                shutil.copyfileobj(resp, out)
            # sanity check: must be a readable gzip file
            with gzip.open(part, "rb") as g:
                while g.read(1 << 20):
                    pass
            os.replace(part, dest)
        except (urllib.error.URLError, OSError, EOFError) as e:
            part.unlink(missing_ok=True)
            raise PrepError(
                f"download of {url} failed: {e}\n"
                f"  no network? pass --raw-dir DIR or set {RAW_DIR_ENV}=DIR to a local copy of "
                f"Multi30k task1 raw data ({expected_files_msg()})"
            ) from None
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        log(f"download {name}: {dest.stat().st_size} bytes ({time.time() - t0:.1f}s)")


# --------------------------------------------------------------------------- workers

_TOKENIZERS: dict = {}
_BPE = None


def _tokenize_chunk(job: Tuple[str, List[str]]) -> List[str]:
    lang, lines = job
    tok = _TOKENIZERS.get(lang)
    if tok is None:
        from sacremoses import MosesTokenizer

        tok = _TOKENIZERS[lang] = MosesTokenizer(lang=lang)
    return [
        tok.tokenize(line, aggressive_dash_splits=False, escape=False, return_str=True)
        for line in lines
    ]


def _init_bpe(codes_path: str) -> None:
    global _BPE
    from subword_nmt.apply_bpe import BPE

    with open(codes_path, encoding="utf-8") as f:
        _BPE = BPE(f)


def _bpe_chunk(lines: List[str]) -> List[str]:
    return [_BPE.process_line(line) for line in lines]


def _chunks(lines: Sequence, n: int = CHUNK_LINES) -> Iterator[list]:
    for i in range(0, len(lines), n):
        yield list(lines[i : i + n])


def _pmap(pool, fn: Callable, jobs: Iterable) -> List[str]:
    """Order-preserving chunked map; ``pool=None`` runs inline."""
    out: List[str] = []
    it = pool.imap(fn, jobs) if pool is not None else map(fn, jobs)
    for part in it:
        out.extend(part)
    return out


# --------------------------------------------------------------------------- outputs


def write_lines(path: Path, lines: Iterable[str]) -> None:
    """Write atomically (tmp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line)
            f.write("\n")
    os.replace(tmp, path)


def binarized_files(src: str, tgt: str) -> List[str]:
    names = [f"dict.{src}.txt", f"dict.{tgt}.txt"]
    for _, split in SPLITS:
        for lang in (src, tgt):
            for ext in ("bin", "idx"):
                names.append(f"{split}.{src}-{tgt}.{lang}.{ext}")
    return names


def outputs_complete(out: Path, src: str, tgt: str) -> bool:
    databin = out / "data-bin"
    if not all((databin / n).is_file() for n in binarized_files(src, tgt)):
        return False
    bpe = out / "bpe"
    if not (bpe / "codes").is_file():
        return False
    if not all((bpe / f"{split}.{lang}").is_file() for _, split in SPLITS for lang in (src, tgt)):
        return False
    return (out / "raw" / f"test.{tgt}").is_file()


def read_stamp(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_stamp(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- main


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Prepare Multi30k task-1 (de<->en) for fairseq: Moses tokenization, "
        "joint BPE (subword-nmt), fairseq-preprocess binarization."
    )
    p.add_argument(
        "--raw-dir",
        type=Path,
        default=None,
        help=f"directory with train/val/test_2016_flickr.{{de,en}}[.gz]; default: ${RAW_DIR_ENV}, "
        "else <out>/raw (downloaded from the Multi30k GitHub repository if absent)",
    )
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--src", default="de", choices=LANGS, help="source language (default: de)")
    p.add_argument("--tgt", default="en", choices=LANGS, help="target language (default: en)")
    p.add_argument("--bpe-merges", type=int, default=10000, help="number of joint BPE merges (default: 10000)")
    p.add_argument(
        "--max-train-lines",
        type=int,
        default=None,
        help="use only the first N training sentence pairs (for tests/CI)",
    )
    p.add_argument("--workers", type=int, default=2, help="worker processes (default: 2)")
    p.add_argument("--force", action="store_true", help="rebuild even if up-to-date outputs exist")
    args = p.parse_args(argv)
    if args.src == args.tgt:
        p.error("--src and --tgt must differ")
    if args.bpe_merges < 1:
        p.error("--bpe-merges must be >= 1")
    if args.max_train_lines is not None and args.max_train_lines < 1:
        p.error("--max-train-lines must be >= 1")
    if args.workers < 1:
        p.error("--workers must be >= 1")
    return args


def resolve_raw_source(args: argparse.Namespace) -> Tuple[Path, Optional[str]]:
    """Return (raw_dir, url_base_or_None).  url_base is set when a download may be needed."""
    if args.raw_dir is not None:
        return args.raw_dir.expanduser().resolve(), None
    env = os.environ.get(RAW_DIR_ENV)
    if env:
        return Path(env).expanduser().resolve(), None
    return (args.out / "raw").resolve(), os.environ.get(URL_BASE_ENV) or DEFAULT_URL_BASE


def run(args: argparse.Namespace) -> None:
    t_start = time.time()
    src, tgt = args.src, args.tgt
    out: Path = args.out.expanduser().resolve()
    args.out = out
    raw_dir, url_base = resolve_raw_source(args)

    if url_base is None:
        raw_files = validate_raw_dir(raw_dir, (src, tgt))
        source_desc = {
            "raw_dir": str(raw_dir),
            "files": {p.name: p.stat().st_size for p in raw_files.values()},
        }
    else:
        raw_files = None
        source_desc = {"download": url_base}

    options = {
        "version": STAMP_VERSION,
        "src": src,
        "tgt": tgt,
        "bpe_merges": args.bpe_merges,
        "max_train_lines": args.max_train_lines,
        "source": source_desc,
    }
    stamp_path = out / STAMP_NAME
    if not args.force and outputs_complete(out, src, tgt):
        old = read_stamp(stamp_path)
        if old is not None and old.get("options") == options:
            log(f"up to date, skipping: {out / 'data-bin'} (use --force to rebuild)")
            return

    out.mkdir(parents=True, exist_ok=True)
    # From here on the outputs are being rewritten: drop the stamp first so an
    # interrupted run can never look complete.
    stamp_path.unlink(missing_ok=True)

    if raw_files is None:
        if all(find_raw_file(raw_dir, stem, lang) for stem, _ in SPLITS for lang in (src, tgt)):
            log(f"using previously downloaded raw files in {raw_dir}")
        else:
            log(f"no --raw-dir / {RAW_DIR_ENV} given: downloading Multi30k raw files to {raw_dir}")
            download_raw(raw_dir, url_base)
        raw_files = validate_raw_dir(raw_dir, (src, tgt))
    log(f"raw data: {raw_dir}")

    # ---- read + validate line counts
    raw_text = {}
    for stem, split in SPLITS:
        ps, pt = raw_files[(stem, src)], raw_files[(stem, tgt)]
        ls, lt = read_lines(ps), read_lines(pt)
        if len(ls) != len(lt):
            raise PrepError(
                f"line count mismatch in split '{stem}': {ps} has {len(ls)} lines, "
                f"{pt} has {len(lt)} lines"
            )
        if not ls:
            raise PrepError(f"split '{stem}' is empty: {ps}, {pt}")
        if split == "train" and args.max_train_lines is not None:
            ls, lt = ls[: args.max_train_lines], lt[: args.max_train_lines]
        raw_text[(split, src)] = ls
        raw_text[(split, tgt)] = lt

    # untokenized reference for sacreBLEU
    raw_ref = out / "raw" / f"test.{tgt}"
    write_lines(raw_ref, raw_text[("test", tgt)])
    log(f"reference {raw_ref}: {len(raw_text[('test', tgt)])} lines")

    tok_dir, bpe_dir, databin = out / "tok", out / "bpe", out / "data-bin"
    workers = args.workers

    # ---- tokenize
    tokenized = {}
    pool = Pool(workers) if workers > 1 else None
    try:
        for stem, split in SPLITS:
            for lang in (src, tgt):
                t0 = time.time()
                lines = raw_text[(split, lang)]
                tok = _pmap(pool, _tokenize_chunk, ((lang, c) for c in _chunks(lines)))
                write_lines(tok_dir / f"{split}.{lang}", tok)
                tokenized[(split, lang)] = tok
                log(f"tokenize {stem}.{lang}: {len(tok)} lines ({time.time() - t0:.1f}s)")
    finally:
        if pool is not None:
            pool.close()
            pool.join()

    # ---- learn joint BPE
    import subword_nmt.learn_bpe as _learn_bpe_mod

    if not sys.stderr.isatty():  # no tqdm progress bar in logs / CI output
        _learn_bpe_mod.tqdm = lambda iterable, *a, **k: iterable
    learn_bpe = _learn_bpe_mod.learn_bpe

    t0 = time.time()
    codes = bpe_dir / "codes"
    bpe_dir.mkdir(parents=True, exist_ok=True)
    codes_tmp = codes.with_name("codes.tmp")
    train_joint = tokenized[("train", src)] + tokenized[("train", tgt)]
    with open(codes_tmp, "w", encoding="utf-8") as f:
        learn_bpe(train_joint, f, args.bpe_merges)
    os.replace(codes_tmp, codes)
    n_codes = sum(1 for line in codes.read_text(encoding="utf-8").splitlines() if not line.startswith("#version"))
    log(f"learn bpe on {len(train_joint)} lines: {n_codes} merges ({time.time() - t0:.1f}s)")
    del train_joint

    # ---- apply BPE
    pool = Pool(workers, initializer=_init_bpe, initargs=(str(codes),)) if workers > 1 else None
    if pool is None:
        _init_bpe(str(codes))
    try:
        for _, split in SPLITS:
            for lang in (src, tgt):
                t0 = time.time()
                seg = _pmap(pool, _bpe_chunk, _chunks(tokenized[(split, lang)]))
                write_lines(bpe_dir / f"{split}.{lang}", seg)
                log(f"apply bpe {split}.{lang}: {len(seg)} lines ({time.time() - t0:.1f}s)")
    finally:
        if pool is not None:
            pool.close()
            pool.join()

    # ---- binarize (into a temp dir, then swap in)
    t0 = time.time()
    tmp_databin = out / "data-bin.tmp"
    shutil.rmtree(tmp_databin, ignore_errors=True)
    cmd = [
        sys.executable, "-m", "fairseq_cli.preprocess",
        "--source-lang", src, "--target-lang", tgt,
        "--trainpref", str(bpe_dir / "train"),
        "--validpref", str(bpe_dir / "valid"),
        "--testpref", str(bpe_dir / "test"),
        "--destdir", str(tmp_databin),
        "--joined-dictionary",
        "--workers", str(workers),
    ]  # fmt: skip
    log("binarize: " + " ".join(cmd))
    # fairseq logs to stderr; send its stdout there too so our stdout stays clean
    proc = subprocess.run(cmd, stdout=sys.stderr, stderr=None)
    if proc.returncode != 0:
        shutil.rmtree(tmp_databin, ignore_errors=True)
        raise PrepError(f"fairseq-preprocess failed with exit status {proc.returncode}: {' '.join(cmd)}")
    missing = [n for n in binarized_files(src, tgt) if not (tmp_databin / n).is_file()]
    if missing:
        raise PrepError(f"fairseq-preprocess did not produce: {', '.join(missing)} in {tmp_databin}")
    shutil.rmtree(databin, ignore_errors=True)
    os.replace(tmp_databin, databin)
    with open(databin / f"dict.{src}.txt", encoding="utf-8") as f:
        vocab = sum(1 for _ in f)
    log(f"binarize -> {databin}: joined dictionary {vocab} types ({time.time() - t0:.1f}s)")

    write_stamp(
        stamp_path,
        {"options": options, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "seconds": round(time.time() - t_start, 1)},
    )
    log(f"done: {databin} ({time.time() - t_start:.1f}s total)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        run(args)
    except PrepError as e:
        print(f"{TAG} error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{TAG} interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
