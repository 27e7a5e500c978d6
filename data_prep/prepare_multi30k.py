#!/usr/bin/env python3
"""Prepare Multi30k task-1 (German<->English) for fairseq.

Pipeline
--------
1. Locate the raw text: ``--raw-dir DIR``, else the ``MULTI30K_DIR``
   environment variable, else ``<out>/raw/`` (files downloaded earlier), else
   download the six files from the public Multi30k repository into
   ``<out>/raw/`` (resumable, checked by size and as gzip; ``data_prep/common.py``).
   Each file may be gzipped (``train.de.gz``) or plain (``train.de``).
2. Tokenize with sacremoses (case kept, no escaping) -> ``<out>/tok/``.
3. Learn a joint BPE (subword-nmt) on tokenized train src+tgt and apply it to
   all splits -> ``<out>/bpe/{train,valid,test}.{src,tgt}`` and
   ``<out>/bpe/codes``.
4. Binarize with ``fairseq-preprocess --joined-dictionary`` ->
   ``<out>/data-bin/``.
5. Keep the untokenized test source and reference at ``<out>/raw/test.{src,tgt}``
   for sacreBLEU.  ``--max-train-lines`` / ``--max-eval-lines`` keep the first N pairs
   (smoke runs).

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
import os
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    PrepError,
    Source,
    apply_bpe,
    binarize,
    binarized_files,
    download,
    learn_bpe,
    main_wrapper,
    make_logger,
    read_lines,
    read_stamp,
    tokenize,
    write_lines,
    write_stamp,
)

TAG = "[multi30k]"
STAMP_NAME = ".prepare_multi30k.json"
STAMP_VERSION = 2

DEFAULT_URL_BASE = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
# Hidden override (used by the tests to simulate a network failure).
URL_BASE_ENV = "MULTI30K_URL_BASE"
RAW_DIR_ENV = "MULTI30K_DIR"
HOMEPAGE = f"https://github.com/multi30k/dataset (data/task1/raw), or set {RAW_DIR_ENV}=DIR to a local copy"

# raw file stem -> fairseq split name
SPLITS: Tuple[Tuple[str, str], ...] = (
    ("train", "train"),
    ("val", "valid"),
    ("test_2016_flickr", "test"),
)
LANGS = ("de", "en")
# No published checksums.  Sizes of the repository's gzip files (gzip headers dated
# 2017-12-21, the release), measured on the copies in ../shared/data/multi30k.
SIZES = {
    "train.de.gz": 637044,
    "train.en.gz": 568929,
    "val.de.gz": 24681,
    "val.en.gz": 21650,
    "test_2016_flickr.de.gz": 22890,
    "test_2016_flickr.en.gz": 21077,
}
SIZE_NOTE = "no published checksum; verified by size (the 2017 release files)"

log = make_logger(TAG)


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
    return "expected files: " + ", ".join(expected_names()) + " (gzipped, or the same names without .gz)"


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
        raise PrepError(f"missing raw file(s) in {raw_dir}: " + ", ".join(missing) + f"\n  {expected_files_msg()}")
    return found


def source_for(name: str, url_base: str) -> Source:
    if not url_base.endswith("/"):
        url_base += "/"
    return Source(name=name, urls=(url_base + name,), homepage=HOMEPAGE, size=SIZES.get(name), checksum_from=SIZE_NOTE)


def download_raw(raw_dir: Path, url_base: str) -> None:
    """Download the six gz files into raw_dir (skipping ones already there), each checked
    by size and as a readable gzip file (a broken one is removed)."""
    for name in expected_names():
        path = download(source_for(name, url_base), raw_dir, log, what="Multi30k")
        try:
            with gzip.open(path, "rb") as g:
                while g.read(1 << 20):
                    pass
        except (OSError, EOFError) as e:
            path.unlink(missing_ok=True)
            raise PrepError(
                f"{path} is not a readable gzip file ({e}); it was removed: run again or get it from {HOMEPAGE}"
            ) from None


# --------------------------------------------------------------------------- outputs


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
    p.add_argument(
        "--max-eval-lines",
        type=int,
        default=None,
        help="use only the first N pairs of the validation and test sets (smoke runs)",
    )
    p.add_argument("--workers", type=int, default=2, help="worker processes (default: 2)")
    p.add_argument("--force", action="store_true", help="rebuild even if up-to-date outputs exist")
    args = p.parse_args(argv)
    if args.src == args.tgt:
        p.error("--src and --tgt must differ")
    if args.bpe_merges < 1:
        p.error("--bpe-merges must be >= 1")
    for name in ("max_train_lines", "max_eval_lines"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
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
        "max_eval_lines": args.max_eval_lines,
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
                f"line count mismatch in split '{stem}': {ps} has {len(ls)} lines, {pt} has {len(lt)} lines"
            )
        if not ls:
            raise PrepError(f"split '{stem}' is empty: {ps}, {pt}")
        limit = args.max_train_lines if split == "train" else args.max_eval_lines
        if limit is not None:
            ls, lt = ls[:limit], lt[:limit]
        raw_text[(split, src)] = ls
        raw_text[(split, tgt)] = lt

    # untokenized references for sacreBLEU
    for lang in (src, tgt):
        write_lines(out / "raw" / f"test.{lang}", raw_text[("test", lang)])
    log(f"reference {out / 'raw' / f'test.{tgt}'}: {len(raw_text[('test', tgt)])} lines")

    tok_dir, bpe_dir, databin = out / "tok", out / "bpe", out / "data-bin"
    workers = args.workers

    # ---- tokenize
    tokenized = {}
    for stem, split in SPLITS:
        for lang in (src, tgt):
            t0 = time.time()
            tok = tokenize(raw_text[(split, lang)], lang, workers=workers)
            write_lines(tok_dir / f"{split}.{lang}", tok)
            tokenized[(split, lang)] = tok
            log(f"tokenize {stem}.{lang}: {len(tok)} lines ({time.time() - t0:.1f}s)")

    # ---- learn joint BPE
    t0 = time.time()
    codes = bpe_dir / "codes"
    train_joint = tokenized[("train", src)] + tokenized[("train", tgt)]
    n_codes = learn_bpe(train_joint, codes, args.bpe_merges)
    log(f"learn bpe on {len(train_joint)} lines: {n_codes} merges ({time.time() - t0:.1f}s)")
    del train_joint

    # ---- apply BPE
    for _, split in SPLITS:
        for lang in (src, tgt):
            t0 = time.time()
            seg = apply_bpe(tokenized[(split, lang)], codes, workers=workers)
            write_lines(bpe_dir / f"{split}.{lang}", seg)
            log(f"apply bpe {split}.{lang}: {len(seg)} lines ({time.time() - t0:.1f}s)")

    # ---- binarize (into a temp dir, then swap in)
    t0 = time.time()
    binarize(bpe_dir, databin, src, tgt, joined=True, workers=workers, log=log)
    with open(databin / f"dict.{src}.txt", encoding="utf-8") as f:
        vocab = sum(1 for _ in f)
    log(f"binarize -> {databin}: joined dictionary {vocab} types ({time.time() - t0:.1f}s)")

    write_stamp(
        stamp_path,
        {
            "options": options,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "seconds": round(time.time() - t_start, 1),
        },
    )
    log(f"done: {databin} ({time.time() - t_start:.1f}s total)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    return main_wrapper(TAG, lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
