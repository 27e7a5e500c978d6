"""BLEU with its 95% confidence interval and the paired-bootstrap p-value against a
baseline: sacreBLEU's own implementation (``sacrebleu.significance.PairedTest``, the code
behind ``sacrebleu --paired-bs``; Koehn 2004), 1000 resamples, seed 12345 (sacreBLEU's
default, ``$SACREBLEU_SEED``), so the numbers equal the CLI's on the same files.

The CI is sacreBLEU's: the 2.5th-97.5th percentile half-width of the resampled scores
around their mean (``mean ± ci``), with its ends kept inside BLEU's range [0, 100] (``ci95``;
near 0 BLEU, as a smoke run scores, ``mean - ci`` is below 0, and a table's ``-0.00-0.02``
read as two negative numbers).  The p-value is sacreBLEU's two-sided paired test of
"the two systems' BLEU differ only by chance": small p (< 0.05) means the difference is
unlikely to come from which test sentences were drawn; a large p means the test set cannot
tell the two apart (a tie *on this test set*, not a proof of equality).

A system whose hypotheses equal the baseline's, line for line, gets p = 1.0 and
``identical_to_baseline``: sacreBLEU counts only resamples whose difference *exceeds* the
observed one (multeval's rule), so with every difference 0 it reports its smallest p,
1/(n+1) = 0.001, and two identical outputs (a run against its own copy, two backends with
the same translations) read as a significant difference.  The same holds for different
hypotheses of exactly the same BLEU (two systems at 0.0, as small smoke runs are): an
observed difference of 0 is no evidence either, so p = 1.0 there too.
"""

from typing import Dict, List, Sequence, Tuple

N_RESAMPLES = 1000


def paired_bootstrap(
    baseline: Tuple[str, Sequence[str]],
    systems: List[Tuple[str, Sequence[str]]],
    references: Sequence[str],
    n: int = N_RESAMPLES,
    **bleu_args,
) -> Tuple[Dict[str, dict], str]:
    """({name: {bleu, mean, ci, ci95, p_value}}, signature) for the baseline and every
    system.  The baseline's p_value is None.  ``bleu_args``: sacrebleu.metrics.BLEU options
    (``tokenize="none"``, ``lowercase=True``, ...)."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    names = [baseline[0]] + [s[0] for s in systems]
    if len(set(names)) != len(names):
        raise ValueError(f"system names must differ, got {names}")
    for name, hyps in [baseline] + list(systems):
        if len(hyps) != len(references):
            raise ValueError(f"{name}: {len(hyps)} hypotheses for {len(references)} references")
    metric = BLEU(**bleu_args)
    test = PairedTest(
        [baseline] + list(systems), {"BLEU": metric}, references=[list(references)], test_type="bs", n_samples=n
    )
    signatures, scores = test()
    out, exact = {}, {}
    for name, result in zip(scores["System"], scores["BLEU"]):
        exact[name] = result.score
        out[name] = {
            "bleu": round(result.score, 2),
            "mean": round(float(result.mean), 2),
            "ci": round(float(result.ci), 2),
            "ci95": [
                round(max(0.0, float(result.mean - result.ci)), 2),
                round(min(100.0, float(result.mean + result.ci)), 2),
            ],
            "p_value": None if result.p_value is None else round(float(result.p_value), 4),
        }
    for name, hyps in systems:
        if list(hyps) == list(baseline[1]):  # nothing differs: no evidence of a difference
            out[name].update(p_value=1.0, identical_to_baseline=True)
        elif exact[name] == exact[baseline[0]]:  # the same BLEU: an observed difference of 0
            out[name].update(p_value=1.0)
    return out, str(signatures["BLEU"])
