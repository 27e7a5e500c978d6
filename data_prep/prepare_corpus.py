#!/usr/bin/env python3
"""Prepare one of the papers' corpora (``corpora.py``) for fairseq.

    python data_prep/prepare_corpus.py --corpus wmt14_en_de --out data/wmt14_en_de
    python data_prep/prepare_corpus.py --list

Each ``data_prep/prepare_<corpus>.py`` is this script for one corpus.  Pipeline:

1. files: ``--raw-dir DIR`` holds local copies under the names listed by ``--list``
   (checked against the published checksums with ``--verify-raw``); otherwise they are
   downloaded into ``<out>/downloads`` (resumable; verified against the published sha256 /
   md5 / size; a mismatch removes the partial file; a dead URL fails naming the file and
   where to get it; ``$FSA_DATA_MIRROR`` prefixes are tried first);
2. the corpus's members are read (plain, WMT SGML, IWSLT XML/tags, TSV, TMX), pair counts
   checked; ``--max-train-lines`` / ``--max-eval-lines`` keep the first N pairs;
3. untokenized valid/test text -> ``<out>/raw/{valid,test}.{src,tgt}`` (sacreBLEU refs);
4. Moses tokenization with sacremoses (jieba for Chinese), lowercasing where the paper
   did, training-set cleaning (clean-corpus-n), test pairs removed from training where
   the recipe does -> ``<out>/tok``;
5. BPE with subword-nmt (joint or per language, the paper's merge count) -> ``<out>/bpe``;
6. ``fairseq-preprocess`` -> ``<out>/data-bin`` (joined dictionary with joint BPE);
   gold alignments, if any, -> ``<out>/gold/test.talp``.

The stamp ``<out>/.prepare_corpus.json`` makes a rerun with the same options a no-op; it
is removed when a rebuild starts and written last.  The whole corpus is held in memory
(WMT14 En-Fr, 36M pairs, needs tens of GB: prepare it on a large machine).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    PrepError,
    apply_bpe,
    binarize,
    binarized_files,
    clean_pairs,
    detokenize,
    learn_bpe,
    locate_sources,
    main_wrapper,
    make_logger,
    parse_text,
    read_member_bytes,
    read_stamp,
    tokenize,
    write_lines,
    write_stamp,
)
from corpora import CORPORA, Corpus, Part, Text  # noqa: E402

STAMP_NAME = ".prepare_corpus.json"
STAMP_VERSION = 2  # 2: raw/ lowercased for lowercased corpora, detokenized for tokenized ones (2026-11-27)
SPLITS = ("train", "valid", "test")


def parse_args(corpus: Optional[Corpus], argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=(
            f"Prepare {corpus.title} for fairseq. {corpus.notes}"
            if corpus
            else "Prepare one of the papers' corpora for fairseq."
        ),
        epilog="Files (--raw-dir names): " + (", ".join(s.name for s in corpus.sources) if corpus else "see --list"),
    )
    if corpus is None:
        p.add_argument("--corpus", choices=sorted(CORPORA), help="which corpus")
        p.add_argument("--list", action="store_true", help="list the corpora and their files, then exit")
    p.add_argument("--out", type=Path, help="output directory")
    p.add_argument(
        "--raw-dir",
        type=Path,
        default=None,
        help="directory with local copies of the corpus files (default: download into <out>/downloads)",
    )
    p.add_argument(
        "--verify-raw", action="store_true", help="check the --raw-dir files against the published checksums / sizes"
    )
    p.add_argument("--src", help="source language (default: the corpus's usual direction)")
    p.add_argument("--tgt", help="target language")
    p.add_argument("--bpe-merges", type=int, default=None, help="BPE merges (default: the paper's)")
    p.add_argument("--max-train-lines", type=int, default=None, help="keep the first N training pairs (tests)")
    p.add_argument("--max-eval-lines", type=int, default=None, help="keep the first N valid/test pairs (tests)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default: 2)")
    p.add_argument("--download-only", action="store_true", help="fetch and verify the files, then stop")
    p.add_argument("--force", action="store_true", help="rebuild even if up-to-date outputs exist")
    args = p.parse_args(argv)
    if corpus is None:
        if args.list:
            return args
        if args.corpus is None:
            p.error("--corpus NAME is required (or --list)")
        corpus = CORPORA[args.corpus]
    args.corpus_spec = corpus
    if args.out is None:
        p.error("--out is required")
    langs = corpus.pair
    args.src = args.src or langs[0]
    args.tgt = args.tgt or (langs[1] if args.src == langs[0] else langs[0])
    if {args.src, args.tgt} != set(langs):
        p.error(f"--src/--tgt must be the two languages of {corpus.name}: {langs[0]} and {langs[1]}")
    for name in ("bpe_merges", "max_train_lines", "max_eval_lines", "workers"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def list_corpora() -> None:
    for c in CORPORA.values():
        print(f"{c.name}: {c.title} [{c.pair[0]}-{c.pair[1]}; {c.papers}]")
        for s in c.sources:
            how = "manual download" if s.manual else s.urls[0]
            print(f"    {s.name}  <- {how}  [{s.verification()}]")


def read_part(part: Part, langs: Tuple[str, str], files: Dict[str, Path]) -> Dict[str, List[str]]:
    out = {}
    origins = {}
    for lang in langs:
        t: Text = part.files[lang]
        path = files[t.source]
        origin = f"{path}" + (f" [{t.member}]" if t.member else "")
        data = read_member_bytes(path, t.member)
        out[lang] = parse_text(data, t.fmt, origin, encoding=t.encoding, column=t.column, lang=lang)
        origins[lang] = origin
    a, b = langs
    if len(out[a]) != len(out[b]):
        raise PrepError(
            f"{part.name}: {origins[a]} has {len(out[a])} sentences but {origins[b]} has "
            f"{len(out[b])}; expected line-aligned {a}/{b} texts"
        )
    if not out[a]:
        raise PrepError(f"{part.name}: no sentences in {origins[a]}")
    return out


def drop_blank_lines(lines: List[str]) -> List[str]:
    """The lines that are not empty or whitespace only (sed '/^[[:space:]]*$/d')."""
    return [line for line in lines if line.strip()]


def outputs_complete(out: Path, src: str, tgt: str, corpus: Corpus) -> bool:
    if not all((out / "data-bin" / n).is_file() for n in binarized_files(src, tgt)):
        return False
    if corpus.gold is not None and not (out / "gold" / "test.talp").is_file():
        return False
    return all((out / "raw" / f"test.{lang}").is_file() for lang in (src, tgt))


def stamp_options(args: argparse.Namespace, raw_dir: Optional[Path]) -> dict:
    """What the outputs are made from: a rerun whose options equal the stamp's is a no-op.
    ``raw_dir``: ``--raw-dir`` resolved (its files are recorded by size), or None."""
    corpus: Corpus = args.corpus_spec
    src, tgt = args.src, args.tgt
    options = {
        "version": STAMP_VERSION,
        "corpus": corpus.name,
        "src": src,
        "tgt": tgt,
        "bpe_merges": args.bpe_merges or corpus.bpe_merges,
        "max_train_lines": args.max_train_lines,
        "max_eval_lines": args.max_eval_lines,
        "source": (
            {
                "raw_dir": str(raw_dir),
                "files": {
                    s.name: (raw_dir / s.name).stat().st_size for s in corpus.sources if (raw_dir / s.name).is_file()
                },
            }
            if raw_dir
            else {"download": True}
        ),
    }
    if corpus.recipe > 1:  # a recipe change the options do not show: an older prepared copy rebuilds
        options["recipe"] = corpus.recipe
    if f"{src}-{tgt}" in corpus.test_by_direction:  # (a stamp from before it existed rebuilds)
        options["test_set"] = [
            f"{t.source}:{t.member}" for part in corpus.test_parts(src, tgt) for t in part.files.values()
        ]
    return options


def run(args: argparse.Namespace) -> None:
    corpus: Corpus = args.corpus_spec
    log = make_logger(f"[{corpus.name}]")
    t_start = time.time()
    src, tgt = args.src, args.tgt
    langs = (src, tgt)
    out = args.out.expanduser().resolve()
    raw_dir = args.raw_dir.expanduser().resolve() if args.raw_dir else None
    options = stamp_options(args, raw_dir)
    merges = options["bpe_merges"]  # --bpe-merges, else the paper's
    stamp_path = out / STAMP_NAME
    if not args.force and not args.download_only and outputs_complete(out, src, tgt, corpus):
        old = read_stamp(stamp_path)
        if old is not None and old.get("options") == options:
            log(f"up to date, skipping: {out / 'data-bin'} (use --force to rebuild)")
            return

    files = locate_sources(
        corpus.sources, raw_dir, out / "downloads", log, verify_raw=args.verify_raw, what=corpus.title
    )
    if args.download_only:
        log(f"files ready in {raw_dir or out / 'downloads'}")
        return
    out.mkdir(parents=True, exist_ok=True)
    stamp_path.unlink(missing_ok=True)  # an interrupted rebuild never looks complete

    # ---- read
    text: Dict[str, Dict[str, List[str]]] = {}
    for split in SPLITS:
        parts = corpus.test_parts(src, tgt) if split == "test" else getattr(corpus, split)
        if split == "valid" and not parts:
            continue
        text[split] = {lang: [] for lang in langs}
        for part in parts:
            t0 = time.time()
            got = read_part(part, langs, files)
            for lang in langs:
                text[split][lang].extend(got[lang])
            log(f"read {split} {part.name}: {len(got[src])} pairs ({time.time() - t0:.1f}s)")
    if corpus.drop_blank_test_lines:
        for lang in langs:
            before = len(text["test"][lang])
            text["test"][lang] = drop_blank_lines(text["test"][lang])
            log(f"test.{lang}: dropped {before - len(text['test'][lang])} blank lines")
        if len(text["test"][src]) != len(text["test"][tgt]):
            raise PrepError(
                f"after dropping blank lines the test sides differ: {len(text['test'][src])} "
                f"{src} and {len(text['test'][tgt])} {tgt} sentences; their blank lines are "
                f"not at the same places"
            )
    limits = {"train": args.max_train_lines, "valid": args.max_eval_lines, "test": args.max_eval_lines}
    for split, lim in limits.items():
        if lim is not None and split in text:
            for lang in langs:
                text[split][lang] = text[split][lang][:lim]

    # ---- untokenized evaluation text (sacreBLEU references, against the D- lines that
    # fairseq-generate --tokenizer moses detokenized): lowercased where the corpus is (the
    # model learns lowercased text), and detokenized where the corpus releases it tokenized
    # (IWSLT15 En-Vi); before 2026-11-27 both were compared as released, deflating sacreBLEU
    for split in ("valid", "test"):
        if split in text:
            for lang in langs:
                lines = text[split][lang]
                if not corpus.tokenize or (split == "test" and not corpus.tokenize_test):
                    lines = detokenize(lines, lang)
                write_lines(out / "raw" / f"{split}.{lang}", [x.lower() for x in lines] if corpus.lowercase else lines)

    # ---- tokenize, lowercase
    tok: Dict[str, Dict[str, List[str]]] = {}
    for split, sides in text.items():
        tok[split] = {}
        for lang in langs:
            t0 = time.time()
            lines = sides[lang]
            if corpus.tokenize and (split != "test" or corpus.tokenize_test):
                lines = tokenize(
                    lines,
                    lang,
                    workers=args.workers,
                    escape=corpus.escape,
                    aggressive_dash_splits=corpus.aggressive_dash_splits,
                )
            if corpus.lowercase:
                if split == "test" and corpus.gold is not None:
                    # the gold-aligned sentences as released (cased), for models of cased
                    # data aligned against the same gold (ReLA's WMT14 En-De models:
                    # scripts/rela/analyses.sh)
                    write_lines(out / "tok_cased" / f"test.{lang}", lines)
                lines = [line.lower() for line in lines]
            tok[split][lang] = lines
            log(f"tokenize {split}.{lang}: {len(lines)} lines ({time.time() - t0:.1f}s)")
    del text

    # ---- training-set filtering
    train = tok["train"]
    if corpus.remove_test_from_train:
        test_pairs = set(zip(tok["test"][src], tok["test"][tgt]))
        keep = [i for i, p in enumerate(zip(train[src], train[tgt])) if p not in test_pairs]
        log(f"removed {len(train[src]) - len(keep)} test pairs from the training data")
        train = {lang: [train[lang][i] for i in keep] for lang in langs}
    n_before = len(train[src])
    if corpus.clean is not None:
        lo, hi, ratio = corpus.clean
        s_, t_, dropped = clean_pairs(train[src], train[tgt], lo, hi, ratio)
        train = {src: s_, tgt: t_}
        log(f"clean (tokens {lo}..{hi}, ratio {ratio or 'any'}): dropped {dropped} of {n_before} pairs")
    else:
        keep = [i for i, (a, b) in enumerate(zip(train[src], train[tgt])) if a.strip() and b.strip()]
        log(f"dropped {n_before - len(keep)} pairs with an empty side")
        train = {lang: [train[lang][i] for i in keep] for lang in langs}
    if not train[src]:
        raise PrepError("no training pairs left after cleaning")
    tok["train"] = train
    if corpus.valid_from_train is not None:
        how, n = corpus.valid_from_train
        n_valid = len(train[src]) // n if how == "every" else n
        if 2 * n_valid > len(train[src]):
            raise PrepError(
                f"only {len(train[src])} training pairs: too few to take the validation set "
                f"({'every %d-th pair' % n if how == 'every' else 'the last %d pairs' % n}) from them"
            )
        if how == "every":  # fairseq: line numbers (1-based) divisible by n -> valid
            idx_valid = [i for i in range(len(train[src])) if (i + 1) % n == 0]
        else:  # the last n pairs
            idx_valid = list(range(max(0, len(train[src]) - n), len(train[src])))
        chosen = set(idx_valid)
        tok["valid"] = {lang: [train[lang][i] for i in idx_valid] for lang in langs}
        tok["train"] = {lang: [x for i, x in enumerate(train[lang]) if i not in chosen] for lang in langs}
        if args.max_eval_lines is not None:
            tok["valid"] = {lang: tok["valid"][lang][: args.max_eval_lines] for lang in langs}
        for lang in langs:
            write_lines(out / "raw" / f"valid.{lang}", tok["valid"][lang])
        log(
            f"valid = {'every %d-th training pair' % n if how == 'every' else 'the last %d training pairs' % n}: "
            f"{len(tok['valid'][src])} pairs"
        )
    for split in SPLITS:
        for lang in langs:
            write_lines(out / "tok" / f"{split}.{lang}", tok[split][lang])

    # ---- BPE
    bpe_dir = out / "bpe"
    t0 = time.time()
    if corpus.joint_bpe:
        codes = {lang: bpe_dir / "codes" for lang in langs}
        n = learn_bpe(tok["train"][src] + tok["train"][tgt], codes[src], merges)
        log(f"learn joint bpe: {n} merges ({time.time() - t0:.1f}s)")
    else:
        codes = {lang: bpe_dir / f"codes.{lang}" for lang in langs}
        for lang in langs:
            n = learn_bpe(tok["train"][lang], codes[lang], merges)
            log(f"learn bpe {lang}: {n} merges ({time.time() - t0:.1f}s)")
    for split in SPLITS:
        for lang in langs:
            write_lines(bpe_dir / f"{split}.{lang}", apply_bpe(tok[split][lang], codes[lang], args.workers))

    # ---- gold alignments
    if corpus.gold is not None:
        g = corpus.gold
        data = read_member_bytes(files[g.source], g.member)
        origin = f"{files[g.source]} [{g.member}]"
        lines = parse_text(data, "plain", origin, encoding=g.encoding)
        if corpus.drop_blank_test_lines:
            before = len(lines)
            lines = drop_blank_lines(lines)
            log(f"gold alignments: dropped {before - len(lines)} blank lines")
            if args.max_eval_lines is not None:
                lines = lines[: args.max_eval_lines]
            if len(lines) != len(tok["test"][src]):
                raise PrepError(
                    f"{origin}: {len(lines)} alignment lines but {len(tok['test'][src])} test "
                    f"sentences after dropping blank lines; expected one line per sentence"
                )
        write_lines(out / "gold" / "test.talp", lines)
        log(f"gold alignments: {out / 'gold' / 'test.talp'} ({len(lines)} sentences)")

    # ---- binarize
    t0 = time.time()
    binarize(bpe_dir, out / "data-bin", src, tgt, joined=corpus.joint_bpe, workers=args.workers, log=log)
    log(f"binarized -> {out / 'data-bin'} ({time.time() - t0:.1f}s)")
    counts = {split: len(tok[split][src]) for split in SPLITS}
    write_stamp(
        stamp_path,
        {
            "options": options,
            "pairs": counts,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "seconds": round(time.time() - t_start, 1),
        },
    )
    log(
        f"done: train {counts['train']}, valid {counts['valid']}, test {counts['test']} pairs "
        f"({time.time() - t_start:.1f}s)"
    )


def main(corpus: Optional[Corpus] = None, argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(corpus, argv)
    if corpus is None and args.list:
        list_corpora()
        return 0
    tag = f"[{args.corpus_spec.name}]"
    return main_wrapper(tag, lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
