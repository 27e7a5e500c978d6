"""Helpers of the significance tests: the ``systems`` fixture of tests/conftest.py (three
fairseq-generate outputs of the first 300 Multi30k test_2016 references, made by dropping
every 9th (baseline), 8th (close) or 3rd (weaker) word) is built from them, and
:func:`sacrebleu_paired` runs sacreBLEU's own command line."""

import gzip
import json
import subprocess
import sys
from pathlib import Path


def _refs(multi30k_raw, n=300):
    with gzip.open(multi30k_raw / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


def _degrade(refs, every):
    """Drop every ``every``-th word of each reference (a weaker system)."""
    out = []
    for i, r in enumerate(refs):
        words = r.split()
        out.append(" ".join(w for j, w in enumerate(words) if (j + i) % every != every - 1) or words[0])
    return out


def write_gen(path, hyps):
    with open(path, "w", encoding="utf-8") as f:
        for i, h in enumerate(hyps):
            f.write(f"S-{i}\tquelle\nH-{i}\t-0.5\t{h}\nD-{i}\t-0.5\t{h}\n")
    return str(path)


def make_systems(tmp_path, multi30k_raw):
    """(reference file, {name: (generate output, plain hypotheses file)}) for base,
    weaker and close, written under ``tmp_path``."""
    refs = _refs(multi30k_raw)
    ref = tmp_path / "ref.en"
    ref.write_text("\n".join(refs) + "\n", encoding="utf-8")
    base, weaker, close = _degrade(refs, 9), _degrade(refs, 3), _degrade(refs, 8)
    files = {}
    for name, hyps in (("base", base), ("weaker", weaker), ("close", close)):
        (tmp_path / f"{name}.txt").write_text("\n".join(hyps) + "\n", encoding="utf-8")
        files[name] = (write_gen(tmp_path / f"gen_{name}.txt", hyps), str(tmp_path / f"{name}.txt"))
    return str(ref), files


def sacrebleu_paired(ref, base, system):
    """sacreBLEU's own command line on the files (``sacrebleu REF -i BASE SYS --paired-bs -f
    json``, a subprocess): [baseline's BLEU record, system's BLEU record] (score, mean, ci,
    p_value)."""
    proc = subprocess.run(
        [sys.executable, "-m", "sacrebleu", str(ref), "-i", str(base), str(system), "--paired-bs", "-f", "json"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    records = [row["BLEU"] for row in json.loads(proc.stdout)]
    if Path(base).read_text(encoding="utf-8") == Path(system).read_text(encoding="utf-8"):
        # identical outputs: the package reports p = 1.0 where sacreBLEU reports its smallest
        # p, 1/(n+1) (tools/significance.py; test_identical_outputs_are_no_evidence_of_a_difference)
        records[1]["p_value"] = 1.0
    elif _exact_bleu(ref, base) == _exact_bleu(ref, system):
        # the same BLEU from other hypotheses (two tiny runs at 0.0): an observed difference of
        # 0, p = 1.0 in the package (test_different_outputs_of_the_same_bleu_are_no_evidence_either)
        records[1]["p_value"] = 1.0
    return records


def _exact_bleu(ref, hyp):
    """sacreBLEU's corpus BLEU of the files, unrounded (the CLI's JSON rounds it)."""
    from sacrebleu.metrics import BLEU

    def lines(path):
        return Path(path).read_text(encoding="utf-8").splitlines()

    return BLEU().corpus_score(lines(hyp), [lines(ref)]).score
