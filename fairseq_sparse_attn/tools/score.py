"""BLEU of a ``fairseq-generate`` output, the two ways the papers report it:

- sacreBLEU (detokenized, case-sensitive, 13a) of the ``D-`` lines against the untokenized
  reference file, with its signature (ReLA, fixed patterns);
- tokenized BLEU (multi-bleu.perl style: sacreBLEU with ``tokenize="none"``) of the ``H-``
  lines (BPE removed, still Moses-tokenized) against the tokenized reference (ReLA's
  bracketed numbers, ReLUFormer, RHE).

    python -m fairseq_sparse_attn.tools.score gen.txt --ref raw/test.en --tok-ref tok/test.en --json bleu.json

``--baseline gen_softmax.txt`` adds the 95% confidence interval of both systems' BLEU and
the paired-bootstrap p-value of the difference (sacreBLEU's ``--paired-bs``, 1000
resamples, ``tools/significance.py``) for the first BLEU computed: sacreBLEU with
``--ref``, else tokenized BLEU.  A baseline that is the file itself gives its CI alone.

Hypotheses are ordered by sentence id; a count different from the reference file's is an
error naming both files.  So are, each in one line before any scoring: a ``--json`` that
names one of the inputs or a directory; H- lines that still carry subword-nmt's ``@@ ``
(a generate run without ``--remove-bpe``), where they are scored; and a baseline whose T-
lines (the references fairseq-generate printed) are not the output's, where both have them.
"""

import os
import re
import sys

from ..errors import OneLineErrorParser
from ..provenance import write_json
from .significance import N_RESAMPLES, paired_bootstrap

#: fewer resamples than this give no 95% interval worth reading (--paired-bs-n)
MIN_RESAMPLES = 100

_LINE = re.compile(r"^([HD])-(\d+)\t([^\t]*)\t?(.*)$")
_TARGET = re.compile(r"^T-(\d+)\t(.*)$")


def read_targets(path):
    """{id: T text}: the references fairseq-generate printed."""
    refs = {}
    for line in _read(path):  # split on "\n" only: a "\r" inside a sentence is text
        m = _TARGET.match(line)
        if m:
            refs[int(m.group(1))] = m.group(2)
    return refs


def read_hypotheses(path):
    """({id: H text}, {id: D text}); the first hypothesis of a sentence (nbest order)."""
    hyps, detok = {}, {}
    for lineno, line in enumerate(_read(path), 1):  # split on "\n" only (text_lines)
        if not line.startswith(("H-", "D-")):
            continue
        m = _LINE.match(line)
        if m is None:
            raise ValueError(f"{path}:{lineno}: expected 'H-/D-<id>\\t<score>\\t<text>', got {line[:80]!r}")
        kind, sid, text = m.group(1), int(m.group(2)), m.group(4)
        (detok if kind == "D" else hyps).setdefault(sid, text)
    if not hyps:
        raise ValueError(f"{path}: no H-/D- lines (not a fairseq-generate output?)")
    return hyps, detok


#: ``@@ `` (or ``@@`` at the end of a line): subword-nmt's separator, which
#: ``fairseq-generate --remove-bpe`` takes out of the H- lines
_BPE_SEPARATOR = re.compile(r"@@( |$)")


def _no_bpe_separators(lines, path, what):
    """``lines`` unless they still carry subword-nmt separators: BLEU over BPE pieces is not
    the papers' BLEU and reads several points apart, so it is refused in one line."""
    marked = sum(1 for line in lines if _BPE_SEPARATOR.search(line))
    if marked:
        raise ValueError(
            f"{path}: {marked} of its {len(lines)} {what} still carry BPE separators ('@@ '): "
            "run fairseq-generate with --remove-bpe (BLEU over subword pieces is not comparable)"
        )
    return lines


#: more than this share of sentences with other T- lines (after the normalization of
#: :func:`_normalized_target`) marks two outputs of different test sets
MAX_DIFFERENT_TARGETS = 0.1

_MOSES_ESCAPES = (
    ("&apos;", "'"),
    ("&quot;", '"'),
    ("&lt;", "<"),
    ("&gt;", ">"),
    ("&#91;", "["),
    ("&#93;", "]"),
    ("&#124;", "|"),
    ("&amp;", "&"),
)


def _normalized_target(text):
    """A T- line without what two generate runs of one test set may print differently:
    BPE separators, Moses escapes, whitespace (tokenized or not), case."""
    text = _BPE_SEPARATOR.sub("", text)
    for escaped, char in _MOSES_ESCAPES:
        text = text.replace(escaped, char)
    return "".join(text.split()).lower()


def check_same_targets(gen, baseline):
    """Refuse (ValueError, one line) two generate outputs whose T- lines show different test
    sets: more than ``MAX_DIFFERENT_TARGETS`` of the sentences both print differ after
    :func:`_normalized_target`.  Outputs without T- lines (``fairseq-interactive``, a
    generate run on raw text) are not compared."""
    ours, theirs = read_targets(gen), read_targets(baseline)
    common = sorted(set(ours) & set(theirs))
    if not common:
        return
    differ = [i for i in common if _normalized_target(ours[i]) != _normalized_target(theirs[i])]
    if len(differ) > MAX_DIFFERENT_TARGETS * len(common):
        i = differ[0]
        raise ValueError(
            f"{baseline} and {gen} are not outputs of the same test set: their T- lines differ in "
            f"{len(differ)} of {len(common)} sentences (T-{i}: {theirs[i][:40]!r} against {ours[i][:40]!r})"
        )


def _ordered(table, n, path, ref):
    ids = sorted(table)
    if ids != list(range(n)):
        raise ValueError(f"{path} has hypotheses for {len(ids)} sentences (ids {ids[:3]}...), but {ref} has {n} lines")
    return [table[i] for i in ids]


def _read(path):
    from ..text_lines import read_lines

    return read_lines(path)


def score(gen, ref=None, tok_ref=None, lowercase=False, t_lines=False, baseline=None, n_resamples=N_RESAMPLES):
    import sacrebleu

    hyps, detok = read_hypotheses(gen)
    result = {"generate_output": gen, "sentences": len(hyps)}
    if t_lines:  # tokenized BLEU of H against the T lines (generate run without --tokenizer)
        refs_by_id = read_targets(gen)
        ids = sorted(hyps)
        if sorted(refs_by_id) != ids:
            raise ValueError(f"{gen}: T- lines for {len(refs_by_id)} sentences, H- lines for {len(ids)}")
        bleu = sacrebleu.metrics.BLEU(tokenize="none", lowercase=lowercase, force=True)
        s = bleu.corpus_score(
            _no_bpe_separators([hyps[i] for i in ids], gen, "H- lines"), [[refs_by_id[i] for i in ids]]
        )
        result.update(tok_bleu=round(s.score, 2), tok_reference="T- lines", signature=str(bleu.get_signature()))
    if ref:
        refs = _read(ref)
        sys_out = _ordered(detok or hyps, len(refs), gen, ref)
        if not detok:
            _no_bpe_separators(sys_out, gen, "H- lines")
        bleu = sacrebleu.metrics.BLEU(lowercase=lowercase)
        s = bleu.corpus_score(sys_out, [refs])
        result.update(sacrebleu=round(s.score, 2), signature=str(bleu.get_signature()), reference=ref)
    if tok_ref:
        refs = _read(tok_ref)
        sys_out = _no_bpe_separators(_ordered(hyps, len(refs), gen, tok_ref), gen, "H- lines")
        bleu = sacrebleu.metrics.BLEU(tokenize="none", lowercase=lowercase, force=True)
        result.update(tok_bleu=round(bleu.corpus_score(sys_out, [refs]).score, 2), tok_reference=tok_ref)
    if baseline:
        check_same_targets(gen, baseline)
        result["significance"] = compare_with_baseline(gen, baseline, ref, tok_ref, lowercase, t_lines, n_resamples)
    return result


def _systems_for(gen, ref, tok_ref, t_lines):
    """(metric name, hypotheses, references, BLEU options) of the first BLEU ``score`` reports."""
    hyps, detok = read_hypotheses(gen)
    if ref:
        refs = _read(ref)
        out = _ordered(detok or hyps, len(refs), gen, ref)
        return "sacrebleu", out if detok else _no_bpe_separators(out, gen, "H- lines"), refs, {}
    if t_lines:
        by_id = read_targets(gen)
        ids = sorted(hyps)
        if sorted(by_id) != ids:
            raise ValueError(f"{gen}: T- lines for {len(by_id)} sentences, H- lines for {len(ids)} (--t-lines)")
        out, refs = [hyps[i] for i in ids], [by_id[i] for i in ids]
    else:
        refs = _read(tok_ref)
        out = _ordered(hyps, len(refs), gen, tok_ref)
    return "tok_bleu", _no_bpe_separators(out, gen, "H- lines"), refs, {"tokenize": "none", "force": True}


def compare_with_baseline(
    gen, baseline, ref=None, tok_ref=None, lowercase=False, t_lines=False, n_resamples=N_RESAMPLES
):
    """BLEU, 95% CI and paired-bootstrap p-value of ``gen`` against ``baseline`` (two
    fairseq-generate outputs of the same test set)."""
    metric, sys_hyps, refs, opts = _systems_for(gen, ref, tok_ref, t_lines)
    _, base_hyps, base_refs, _ = _systems_for(baseline, ref, tok_ref, t_lines)
    if base_refs != refs:
        raise ValueError(f"{baseline} and {gen} are not outputs of the same test set (references differ)")
    same = os.path.realpath(gen) == os.path.realpath(baseline)
    results, signature = paired_bootstrap(
        ("baseline", base_hyps),
        [] if same else [("system", sys_hyps)],
        refs,
        n=n_resamples,
        lowercase=lowercase,
        **opts,
    )
    sys_result = results["baseline" if same else "system"]
    return {
        "metric": metric,
        "baseline": baseline,
        "baseline_bleu": results["baseline"]["bleu"],
        "baseline_ci95": results["baseline"]["ci95"],
        "bleu": sys_result["bleu"],
        "ci95": sys_result["ci95"],
        "p_value": sys_result["p_value"],
        "identical_to_baseline": bool(sys_result.get("identical_to_baseline")),
        "n_resamples": n_resamples,
        "test": "paired bootstrap resampling (sacrebleu.significance.PairedTest, --paired-bs)",
        "signature": signature,
    }


def main(argv=None):
    p = OneLineErrorParser(
        prog="score", help_command="python -m fairseq_sparse_attn.tools.score", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("gen", help="fairseq-generate output")
    p.add_argument("--ref", help="untokenized reference (sacreBLEU)")
    p.add_argument("--tok-ref", help="tokenized reference (tokenized BLEU)")
    p.add_argument(
        "--t-lines",
        action="store_true",
        help="tokenized BLEU of the H- lines against the T- lines of the output itself",
    )
    p.add_argument("--lowercase", action="store_true", help="case-insensitive")
    p.add_argument(
        "--baseline",
        help="fairseq-generate output of the baseline system on the same test set: "
        "adds 95%% CIs and the paired-bootstrap p-value",
    )
    p.add_argument("--paired-bs-n", type=int, default=N_RESAMPLES, help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, help="training seed of the system, recorded in the JSON's provenance")
    p.add_argument("--json", help="write the result here")
    args = p.parse_args(argv)
    if not args.ref and not args.tok_ref and not args.t_lines:
        p.error("give --ref and/or --tok-ref, or --t-lines")
    if args.paired_bs_n < MIN_RESAMPLES:
        p.error(
            f"--paired-bs-n {args.paired_bs_n}: give at least {MIN_RESAMPLES} (default {N_RESAMPLES}; the 95% "
            "interval and the p-value are read off the resamples)"
        )
    inputs = [
        (args.gen, "the generate output"),
        (args.ref, "the reference"),
        (args.tok_ref, "the tokenized reference"),
        (args.baseline, "the baseline"),
    ]
    if args.json:
        from ..writers import output_over_input, unwritable_file

        reason = unwritable_file(args.json, "--json") or output_over_input(
            [("--json", args.json)], [(path, what) for path, what in inputs if path]
        )
        if reason:
            p.error(reason)
    try:
        result = score(args.gen, args.ref, args.tok_ref, args.lowercase, args.t_lines, args.baseline, args.paired_bs_n)
    except (ValueError, OSError) as e:
        print(f"score: error: {e}", file=sys.stderr)
        return 1
    if args.json:
        write_json(args.json, result, seed=args.seed, sacrebleu_signature=result.get("signature"))
    line = " ".join(f"{k}={result[k]}" for k in ("sacrebleu", "tok_bleu", "signature") if k in result)
    sig = result.get("significance")
    if sig:
        ci = "-".join(f"{x:.2f}" for x in sig["ci95"])
        p = "-" if sig["p_value"] is None else f"{sig['p_value']:.4f}"
        line += (
            f" | {sig['metric']} {sig['bleu']:.2f} (95% CI {ci}) vs baseline {sig['baseline_bleu']:.2f}"
            f" p={p} ({sig['n_resamples']} paired-bootstrap resamples)"
        )
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
