#!/usr/bin/env python3
"""Prepare Europarl v7 En-De *documents* for --task document_translation (ReLUFormer).

Input: the document-level Europarl7 set of Maruf et al. (2019): per split, line-aligned
``<split>.en`` / ``<split>.de`` (optionally .gz) where a line ``<d>`` starts a document,
already tokenized as released.  ``--raw-dir DIR`` (or $EUROPARL_DOC_DIR) points to them;
without it the dev and test files are downloaded from the selective-attn repository into
<out>/raw (``data/Europarl7/concatenated_en2de_<split>_<lang>.txt``, the same format).  The
training split is not published there (its readme: the author sends it on request, being
over 500 MB), so a run without ``--raw-dir`` needs ``--train-split dev`` (a small run) and
is refused otherwise, before anything is downloaded.

For every L in ``--max-doc-length`` (e.g. 128 256 512 1024 2048):
1. learn a joint BPE (subword-nmt) on the training sentences (once, shared by all L);
2. apply it sentence by sentence;
3. pack each document (Appendix B, fairseq_sparse_attn/data/documents.py): the longest
   run of consecutive sentences with <= L BPE tokens on *both* sides;
4. write one packed document per line to <out>/L<L>/bpe/{train,valid,test}.{src,tgt} and
   binarize with fairseq-preprocess into <out>/L<L>/data-bin, plus doc_info.json.

Splits: ``--train-split`` / ``--valid-split`` / ``--test-split`` name the raw files (the
local copy has only dev and test; a real run uses train).  ``--max-docs N`` keeps the
first N documents of every split (tests).

    python data_prep/prepare_europarl_docs.py --raw-dir ../shared/data/europarl7_doc \\
        --out data/europarl_docs --train-split dev --valid-split test --test-split test \\
        --max-doc-length 256
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    SPECIAL_SYMBOLS,
    PrepError,
    Source,
    binarize,
    download,
    learn_bpe,
    main_wrapper,
    make_logger,
)

from fairseq_sparse_attn.data.documents import (  # noqa: E402
    DocumentFormatError,
    documents_from_marked_files,
    pack_documents,
)

URL_BASE = os.environ.get(
    "EUROPARL_DOC_URL_BASE", "https://raw.githubusercontent.com/sameenmaruf/selective-attn/master/data/Europarl7/"
)
HOMEPAGE = "https://github.com/sameenmaruf/selective-attn (data/Europarl7); pass --raw-dir DIR or set EUROPARL_DOC_DIR"
#: the splits the repository publishes (data/Europarl7: dev and test; no training split)
PUBLISHED_SPLITS = ("dev", "test")
TAG = "[europarl-docs]"
say = make_logger(TAG)


def find_raw(raw_dir: Path, split: str, lang: str) -> Path:
    for name in (f"{split}.{lang}.gz", f"{split}.{lang}"):
        if (raw_dir / name).exists():
            return raw_dir / name
    raise PrepError(
        f"{raw_dir}: no {split}.{lang}(.gz); expected line-aligned files with '<d>' document "
        f"starts, e.g. {split}.en and {split}.de"
    )


def fetch(out_raw: Path, split: str, lang: str) -> Path:
    """Download the repository's ``concatenated_en2de_<split>_<lang>.txt`` (dev, test; no
    published checksum or size: not verified)."""
    name = f"concatenated_en2de_{split}_{lang}.txt"
    return download(
        Source(name=name, urls=(URL_BASE + name,), homepage=HOMEPAGE), out_raw, say, what="Europarl7 documents"
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--raw-dir", default=os.environ.get("EUROPARL_DOC_DIR"))
    p.add_argument("--out", required=True)
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--train-split", default="train")
    p.add_argument("--valid-split", default="dev")
    p.add_argument("--test-split", default="test")
    p.add_argument("--max-doc-length", type=int, nargs="+", required=True, metavar="L")
    p.add_argument(
        "--separator", default=None, help="token inserted between sentences of a packed document (default: none)"
    )
    p.add_argument("--bpe-merges", type=int, default=16000)
    p.add_argument("--max-docs", type=int, default=None, help="first N documents per split")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    return main_wrapper(TAG, lambda: run(args))


def run(args):
    from subword_nmt.apply_bpe import BPE

    if args.separator in SPECIAL_SYMBOLS:
        raise PrepError(
            f"--separator {args.separator}: fairseq's special symbol would be binarized "
            "to its id (a </s> in mid-document ends generation there); choose a plain "
            "token such as <sep>"
        )

    splits = {"train": args.train_split, "valid": args.valid_split, "test": args.test_split}
    unpublished = {n: s for n, s in splits.items() if s not in PUBLISHED_SPLITS}
    if not args.raw_dir and unpublished:
        flags = ", ".join(f"--{n}-split {s}" for n, s in unpublished.items())
        files = " and ".join(sorted({f"{s}.{args.src} / {s}.{args.tgt}" for s in unpublished.values()}))
        small = "" if "train" not in unpublished else ", or --train-split dev for a small run"
        raise PrepError(
            f"{flags}: the document-level Europarl7 set publishes only {' and '.join(PUBLISHED_SPLITS)} "
            "(github.com/sameenmaruf/selective-attn, data/Europarl7: the training set, over 500 MB, "
            f"comes from the author on request); pass --raw-dir DIR with {files} ('<d>' starts each "
            f"document){small}"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    docs = {}
    for name, split in splits.items():
        if args.raw_dir:
            raw = Path(args.raw_dir)
            if not raw.is_dir():
                raise PrepError(f"raw directory {raw} does not exist")
            src_path, tgt_path = find_raw(raw, split, args.src), find_raw(raw, split, args.tgt)
        else:
            src_path = fetch(out / "raw", split, args.src)
            tgt_path = fetch(out / "raw", split, args.tgt)
        try:
            docs[name] = documents_from_marked_files(src_path, tgt_path)[: args.max_docs]
        except (DocumentFormatError, FileNotFoundError) as e:
            raise PrepError(str(e)) from None
        say(f"{name} ({split}): {len(docs[name])} documents, {sum(len(d.src) for d in docs[name])} sentences")

    t0 = time.time()
    codes = out / "bpe.codes"
    lines = [s for d in docs["train"] for s in d.src + d.tgt]
    learn_bpe(lines, codes, args.bpe_merges)
    say(f"learned {args.bpe_merges} BPE merges on {len(lines)} training sentences ({time.time() - t0:.1f}s)")
    with open(codes, encoding="utf-8") as f:
        bpe = BPE(f)
    for d in (d for ds in docs.values() for d in ds):
        d.src = [bpe.process_line(s) for s in d.src]
        d.tgt = [bpe.process_line(t) for t in d.tgt]

    for L in args.max_doc_length:
        root = out / f"L{L}"
        text = root / "bpe"
        text.mkdir(parents=True, exist_ok=True)
        info = {
            "max_doc_length": L,
            "separator": args.separator,
            "src": args.src,
            "tgt": args.tgt,
            "splits": {},
            "longest_document": 0,
        }
        for name, ds in docs.items():
            packed, report = pack_documents(ds, L, separator=args.separator)
            (text / f"{name}.{args.src}").write_text("\n".join(s for s, _, _ in packed) + "\n", encoding="utf-8")
            (text / f"{name}.{args.tgt}").write_text("\n".join(t for _, t, _ in packed) + "\n", encoding="utf-8")
            (text / f"{name}.lines").write_text("\n".join(str(n) for _, _, n in packed) + "\n")
            longest = max(max(len(s.split()), len(t.split())) for s, t, _ in packed)
            info["longest_document"] = max(info["longest_document"], longest)
            info["splits"][name] = dict(report.__dict__, longest=longest)
            say(
                f"L={L} {name}: {report.documents_in} documents -> {report.packed} packed "
                f"({report.overlong_sentences} sentences longer than L kept whole)"
            )
        bin_dir = root / "data-bin"
        binarize(
            text,
            bin_dir,
            args.src,
            args.tgt,
            joined=True,
            workers=args.workers,
            log=say,
            extra_files={"doc_info.json": json.dumps(info, indent=2)},
        )
        say(f"L={L}: {bin_dir}")


if __name__ == "__main__":
    sys.exit(main())
