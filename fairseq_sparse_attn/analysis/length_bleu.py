"""BLEU by reference length (Raganato et al. 2020, Fig. 2) from a ``fairseq-generate`` output.

    fsa-length-bleu gen.out [--json bins.json] [--tsv bins.tsv]

``--json`` writes ``{"bins": [rows], "tokenize": ..., "provenance": {...}}`` (the
provenance carries sacreBLEU's signature, :mod:`fairseq_sparse_attn.provenance`).

Reads the ``T-<id>`` (reference) and ``D-<id>`` (detokenized hypothesis; ``H-<id>`` when a
sentence has no D line) lines of a generate log, bins the sentences by the number of
whitespace-separated words of the reference — ``<10, [10,20), [20,30), [30,40), [40,50),
>=50`` — and scores every bin with sacreBLEU's corpus BLEU (default tokenizer 13a, as
sacreBLEU's own default).  Run generate with ``--remove-bpe`` (and ``--tokenizer moses``
when the data was Moses-tokenized) so that both sides are plain text.
"""

import re
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import OneLineErrorParser
from ..subwords import word_count
from ..text_lines import read_lines

BINS: Tuple[Tuple[int, Optional[int]], ...] = (
    (0, 10),
    (10, 20),
    (20, 30),
    (30, 40),
    (40, 50),
    (50, None),
)
_LINE = re.compile(r"^([THD])-(\d+)\t(.*)$")


def bin_label(lo: int, hi: Optional[int]) -> str:
    if hi is None:
        return f">={lo}"
    return f"<{hi}" if lo == 0 else f"[{lo},{hi})"


def read_generate_output(path: str) -> Tuple[List[str], List[str]]:
    """(references, hypotheses) ordered by sentence id, from a fairseq-generate log.

    Lines other than T-/H-/D- are ignored.  Raises ``ValueError`` naming the file and line
    for a malformed T/H/D line or a second reference of one sentence (two runs in one
    file), and naming the sentence ids that lack a reference or a hypothesis."""
    refs: Dict[int, str] = {}
    hyps: Dict[int, str] = {}
    detok: Dict[int, str] = {}
    ref_line: Dict[int, int] = {}
    for lineno, line in enumerate(read_lines(path), 1):  # split on "\n" only (text_lines)
        if line[:2] not in ("T-", "H-", "D-"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise ValueError(
                f"{path}:{lineno}: expected 'T-<id>\\t<text>' or 'H-/D-<id>\\t<score>\\t<text>', got {line[:80]!r}"
            )
        kind, sid, rest = m.group(1), int(m.group(2)), m.group(3)
        if kind == "T":
            if sid in ref_line:  # a second run appended (>>): its hypotheses would pair with the first's
                raise ValueError(
                    f"{path}:{lineno}: a second 'T-{sid}' line (the first is line {ref_line[sid]}): "
                    "the output of more than one fairseq-generate run? score each run's output alone"
                )
            refs[sid], ref_line[sid] = rest, lineno
            continue
        parts = rest.split("\t", 1)
        try:
            float(parts[0])
        except ValueError:
            raise ValueError(f"{path}:{lineno}: expected a score after '{kind}-{sid}', got {parts[0][:40]!r}") from None
        text = parts[1] if len(parts) > 1 else ""
        # the first hypothesis of a sentence is the best one (--nbest > 1 prints more)
        (detok if kind == "D" else hyps).setdefault(sid, text)
    hyps.update(detok)
    if not refs:
        raise ValueError(
            f"{path}: no 'T-<id>' reference lines: was it written by fairseq-generate on a split with targets?"
        )
    missing_hyp = sorted(set(refs) - set(hyps))
    missing_ref = sorted(set(hyps) - set(refs))
    if missing_hyp or missing_ref:
        raise ValueError(
            f"{path}: sentences without a hypothesis {missing_hyp[:10]} / without a reference {missing_ref[:10]}"
        )
    ids = sorted(refs)
    return [refs[i] for i in ids], [hyps[i] for i in ids]


def reference_words(text: str) -> int:
    """Words of a plain-text reference: its whitespace-separated tokens (the ``"word"``
    scheme of :mod:`fairseq_sparse_attn.subwords`)."""
    return word_count(text.split(), "word")


def sacrebleu_signature(references: Sequence[str], hypotheses: Sequence[str], tokenize: str = "13a") -> str:
    """sacreBLEU's signature of the corpus BLEU these rows use (one reference)."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU(tokenize=tokenize)
    bleu.corpus_score(list(hypotheses), [list(references)])
    return str(bleu.get_signature())


def bleu_by_length(
    references: Sequence[str], hypotheses: Sequence[str], bins=BINS, tokenize: str = "13a"
) -> List[dict]:
    """One row per bin (and a final "all" row): label, sentences, reference words, BLEU
    (None for an empty bin)."""
    import sacrebleu

    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses")
    rows = []
    lengths = [reference_words(r) for r in references]
    groups = [
        (bin_label(lo, hi), [i for i, n in enumerate(lengths) if n >= lo and (hi is None or n < hi)]) for lo, hi in bins
    ]
    groups.append(("all", list(range(len(references)))))
    for label, idx in groups:
        bleu = None
        if idx:
            bleu = sacrebleu.corpus_bleu(
                [hypotheses[i] for i in idx], [[references[i] for i in idx]], tokenize=tokenize
            ).score
        rows.append(dict(bin=label, sentences=len(idx), reference_words=sum(lengths[i] for i in idx), bleu=bleu))
    return rows


def format_table(rows: List[dict]) -> str:
    lines = [f"{'reference length':<18}{'sentences':>10}{'BLEU':>8}"]
    for r in rows:
        bleu = "-" if r["bleu"] is None else f"{r['bleu']:.2f}"
        lines.append(f"{r['bin']:<18}{r['sentences']:>10}{bleu:>8}")
    return "\n".join(lines)


def cli_main(argv=None):
    """Runs ``fsa-length-bleu``; returns the rows (library use: :func:`main` is the command)."""
    from sacrebleu.metrics import BLEU

    from ..writers import output_over_input, unwritable_file, write_text

    parser = OneLineErrorParser(prog="fsa-length-bleu", description=__doc__.split("\n\n")[0])
    parser.add_argument("generate_output", help="stdout of fairseq-generate (T-/H-/D- lines)")
    parser.add_argument("--tokenize", default="13a", help="sacreBLEU tokenizer (default 13a)")
    parser.add_argument("--json", help="write the rows as JSON here")
    parser.add_argument("--tsv", help="write the rows as TSV here")
    args = parser.parse_args(argv)
    try:
        BLEU(tokenize=args.tokenize)
    except Exception as e:  # sacreBLEU's KeyError or its own message for a tokenizer it lacks
        parser.error(f"--tokenize {args.tokenize}: not a sacreBLEU tokenizer ({type(e).__name__}: {e})")
    outputs = [(flag, path) for flag, path in (("--json", args.json), ("--tsv", args.tsv)) if path]
    reasons = [unwritable_file(path, flag) for flag, path in outputs]
    reasons.append(output_over_input(outputs, [(args.generate_output, "the generate output")]))
    for reason in filter(None, reasons):
        sys.exit(f"fsa-length-bleu: error: {reason}")
    try:
        refs, hyps = read_generate_output(args.generate_output)
    except OSError as e:
        sys.exit(f"fsa-length-bleu: error: {args.generate_output}: {e.strerror or e}")
    except ValueError as e:
        sys.exit(f"fsa-length-bleu: error: {e}")
    rows = bleu_by_length(refs, hyps, tokenize=args.tokenize)
    print(format_table(rows))
    if args.tsv:  # first: the JSON (with provenance) is the record that the run finished
        lines = ["bin\tsentences\treference_words\tbleu"]
        for r in rows:
            bleu = "" if r["bleu"] is None else round(r["bleu"], 4)
            lines.append(f"{r['bin']}\t{r['sentences']}\t{r['reference_words']}\t{bleu}")
        write_text(args.tsv, "\n".join(lines) + "\n")
    if args.json:
        from ..provenance import write_json

        write_json(
            args.json,
            {"bins": rows, "tokenize": args.tokenize},
            sacrebleu_signature=sacrebleu_signature(refs, hyps, args.tokenize),
            argv=None if argv is None else ["fsa-length-bleu", *map(str, argv)],
        )
    for path in (args.json, args.tsv):
        if path:
            print(f"wrote {path}")
    return rows


def main(argv=None) -> None:
    """The ``fsa-length-bleu`` command: exit status 0 on success (a console script passes
    what its function returns to ``sys.exit``, so :func:`cli_main`'s rows would read as a
    failure)."""
    cli_main(argv)


if __name__ == "__main__":
    main()
