"""`tools.score --baseline` without a second program: a baseline that is the file itself,
outputs of different test sets.  The comparison with sacreBLEU's command line is in
tests/integration/test_significance_cli.py (it runs the CLI as a subprocess)."""

import json

from fairseq_sparse_attn.tools import score

from significance_fixtures import write_gen


def test_baseline_is_the_file_itself_gives_its_ci_only(systems, tmp_path):
    ref, files = systems
    out = tmp_path / "bleu.json"
    assert score.main([files["base"][0], "--ref", ref, "--baseline", files["base"][0], "--json", str(out)]) == 0
    sig = json.loads(out.read_text())["significance"]
    assert sig["p_value"] is None and sig["ci95"] == sig["baseline_ci95"] and sig["bleu"] == sig["baseline_bleu"]


def test_baseline_of_another_test_set_is_an_error(systems, tmp_path, capsys):
    ref, files = systems
    short = write_gen(tmp_path / "short.txt", ["a b c"] * 10)
    assert score.main([files["close"][0], "--ref", ref, "--baseline", short]) == 1
    err = capsys.readouterr().err
    assert "short.txt has hypotheses for 10 sentences" in err and not (tmp_path / "bleu.json").exists()


def test_identical_outputs_are_no_evidence_of_a_difference(systems, tmp_path):
    """Two files with the same hypotheses (a run against its copy, two backends that
    translate alike): p = 1.0, marked identical.  sacreBLEU itself says p = 1/(n+1) there,
    its smallest value (it counts only resamples whose difference exceeds the observed 0),
    which read as a significant difference."""
    import shutil

    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    ref, files = systems
    copy = tmp_path / "copy.txt"
    shutil.copy(files["base"][0], copy)
    out = tmp_path / "bleu.json"
    assert score.main([str(copy), "--ref", ref, "--baseline", files["base"][0], "--json", str(out)]) == 0
    sig = json.loads(out.read_text())["significance"]
    assert sig["p_value"] == 1.0 and sig["identical_to_baseline"] and sig["bleu"] == sig["baseline_bleu"]
    hyps = [line.rstrip("\n") for line in open(ref, encoding="utf-8")]  # any identical pair shows it
    _, scores = PairedTest(
        [("a", hyps), ("b", list(hyps))], {"BLEU": BLEU()}, references=[hyps], test_type="bs", n_samples=1000
    )()
    assert scores["BLEU"][1].p_value == 1 / 1001  # sacreBLEU's own value, for the record
    # a different system keeps sacreBLEU's p-value
    assert score.main([files["close"][0], "--ref", ref, "--baseline", files["base"][0], "--json", str(out)]) == 0
    assert json.loads(out.read_text())["significance"]["p_value"] < 1.0


def test_too_few_resamples_are_refused_before_scoring(systems, tmp_path, capsys):
    """--paired-bs-n 0 or -5 recorded its value while sacreBLEU fell back to 1000; 1 gave a
    "95% CI" of 0.00-0.00."""
    import pytest

    ref, files = systems
    out = tmp_path / "bleu.json"
    for n in ("-5", "0", "1", "99"):
        with pytest.raises(SystemExit):
            score.main(
                [files["base"][0], "--ref", ref, "--baseline", files["base"][0], "--paired-bs-n", n, "--json", str(out)]
            )
        assert f"--paired-bs-n {n}: give at least 100" in capsys.readouterr().err
    assert not out.exists()
    assert (
        score.main(
            [
                files["base"][0],
                "--ref",
                ref,
                "--baseline",
                files["close"][0],
                "--paired-bs-n",
                "100",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())["significance"]["n_resamples"] == 100
    assert "bs:100|" in json.loads(out.read_text())["significance"]["signature"]


def test_different_outputs_of_the_same_bleu_are_no_evidence_either():
    """Two smoke runs at BLEU 0.0 with different hypotheses read p = 0.001 (every resampled
    difference 0, none exceeding the observed 0): a zero difference now gives p = 1.0,
    without the identical mark; a real difference keeps sacreBLEU's p."""
    from fairseq_sparse_attn.tools.significance import paired_bootstrap

    refs = [f"the cat number {i} sat on the mat today" for i in range(30)]
    a = [f"x{i} y{i}" for i in range(30)]
    b = [f"z{i} w{i} v{i}" for i in range(30)]
    out, _ = paired_bootstrap(("a", a), [("b", b), ("good", refs)], refs)
    assert out["a"]["bleu"] == out["b"]["bleu"] == 0.0
    assert out["b"]["p_value"] == 1.0 and not out["b"].get("identical_to_baseline")
    assert out["good"]["p_value"] < 0.01


def test_bleus_equal_only_when_rounded_keep_sacrebleu_s_p_value():
    """The p = 1.0 of a zero difference is for exactly equal BLEU: two systems 0.002 BLEU
    apart that print alike (40.92) keep sacreBLEU's own p-value."""
    import random

    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    from fairseq_sparse_attn.tools.significance import paired_bootstrap

    rng = random.Random(0)
    words = [f"w{i}" for i in range(300)]
    refs = [" ".join(rng.choice(words) for _ in range(12)) for _ in range(600)]
    base = [" ".join(rng.choice(words) if rng.random() < 0.3 else w for w in r.split()) for r in refs]
    system = list(base)
    system[171] = "zzz " + base[171].split(" ", 1)[1]  # one word of one sentence
    exact = [BLEU().corpus_score(h, [refs]).score for h in (base, system)]
    assert exact[0] != exact[1] and round(exact[0], 2) == round(exact[1], 2)  # the case under test
    out, _ = paired_bootstrap(("base", base), [("system", system)], refs, n=200)
    assert out["base"]["bleu"] == out["system"]["bleu"]
    _, scores = PairedTest(
        [("base", base), ("system", system)], {"BLEU": BLEU()}, references=[refs], test_type="bs", n_samples=200
    )()
    assert out["system"]["p_value"] == round(float(scores["BLEU"][1].p_value), 4) < 1.0


def test_the_interval_stays_inside_bleu_s_range(tmp_path):
    """A system near BLEU 0 (a smoke run): mean - ci is below 0, a CI end BLEU cannot take
    (table6 printed it as "-0.00-0.02")."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    from fairseq_sparse_attn.tools.significance import paired_bootstrap

    refs = [f"the cat sat on the mat number {i} today" for i in range(40)]
    hyps = ["the cat sat on the mat number 0 today"] + ["x"] * 39  # one good sentence in 40
    _, scores = PairedTest(
        [("base", refs), ("sys", hyps)], {"BLEU": BLEU()}, references=[refs], test_type="bs", n_samples=1000
    )()
    low = scores["BLEU"][1]
    assert low.mean - low.ci < 0  # sacreBLEU's own interval leaves BLEU's range here
    out, _ = paired_bootstrap(("base", refs), [("sys", hyps)], refs)
    assert out["sys"]["ci95"] == [0.0, round(low.mean + low.ci, 2)]
    assert out["base"]["ci95"][1] <= 100.0


def _gen_with_targets(path, hyps, targets):
    with open(path, "w", encoding="utf-8") as f:
        for i, (h, t) in enumerate(zip(hyps, targets)):
            f.write(f"S-{i}\tquelle\nT-{i}\t{t}\nH-{i}\t-0.5\t{h}\nD-{i}\t-0.5\t{h}\n")
    return str(path)


def test_a_json_over_an_input_or_a_directory_is_refused_before_scoring(systems, tmp_path, capsys):
    """--json gen.txt replaced the generate output with the result and exited 0; --json .
    scored, then failed with a traceback."""
    import pytest

    ref, files = systems
    gen, base = files["close"][0], files["base"][0]
    before = {p: open(p, encoding="utf-8").read() for p in (gen, ref, base)}
    for target, what in ((gen, "the generate output"), (ref, "the reference"), (base, "the baseline")):
        with pytest.raises(SystemExit) as e:
            score.main([gen, "--ref", ref, "--baseline", base, "--json", target])
        assert e.value.code == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and f"--json {target} is {what}" in err[0]
    with pytest.raises(SystemExit):
        score.main([gen, "--ref", ref, "--json", str(tmp_path)])
    assert f"--json {tmp_path} is a directory, not a file" in capsys.readouterr().err
    assert {p: open(p, encoding="utf-8").read() for p in (gen, ref, base)} == before


def test_hypotheses_that_still_carry_bpe_are_refused_where_they_are_scored(tmp_path, capsys):
    """A generate run without --remove-bpe: its H- lines are subword pieces, and tokenized
    BLEU over them read as a BLEU; the D- lines (decoded by --bpe) stay scorable."""
    refs = ["a dog runs on the grass", "two cats sit here"]
    tok_ref = tmp_path / "ref.tok"
    tok_ref.write_text("\n".join(refs) + "\n", encoding="utf-8")
    gen = tmp_path / "gen.txt"
    with open(gen, "w", encoding="utf-8") as f:
        for i, (pieces, text) in enumerate(
            (("a dog ru@@ ns on the gra@@ ss", refs[0]), ("two c@@ ats sit here", refs[1]))
        ):
            f.write(f"S-{i}\tx\nT-{i}\t{text}\nH-{i}\t-0.5\t{pieces}\nD-{i}\t-0.5\t{text}\n")
    for argv in (["--tok-ref", str(tok_ref)], ["--t-lines"]):
        assert score.main([str(gen), *argv]) == 1
        err = capsys.readouterr().err
        assert f"{gen}: 2 of its 2 H- lines still carry BPE separators" in err and "--remove-bpe" in err
    # sacreBLEU scores the D- lines, which the generate run decoded
    out = tmp_path / "bleu.json"
    assert score.main([str(gen), "--ref", str(tok_ref), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["sacrebleu"] == 100.0


def test_a_baseline_whose_t_lines_show_another_test_set_is_refused(tmp_path, capsys):
    """Both outputs carry the references fairseq-generate printed: a baseline of another test
    set of the same size gave a significant-looking p-value.  The same test set printed
    another way (tokenized or not, Moses escapes, BPE) is the same test set."""
    targets = [f"sentence number {i} , it's here ." for i in range(20)]
    other = [f"another line {i} entirely" for i in range(20)]
    hyps = [t.replace("here", "there") for t in targets]
    ref = tmp_path / "ref.txt"
    ref.write_text("\n".join(targets) + "\n", encoding="utf-8")
    gen = _gen_with_targets(tmp_path / "gen.txt", hyps, targets)
    wrong = _gen_with_targets(tmp_path / "wrong.txt", targets, other)
    assert score.main([gen, "--ref", str(ref), "--baseline", wrong]) == 1
    err = capsys.readouterr().err
    assert f"{wrong} and {gen} are not outputs of the same test set: their T- lines differ in 20 of 20" in err
    printed_otherwise = [t.replace("'", "&apos;").replace("number", "num@@ ber").replace(" ,", ",") for t in targets]
    same = _gen_with_targets(tmp_path / "same.txt", targets, printed_otherwise)
    assert score.main([gen, "--ref", str(ref), "--baseline", same]) == 0
    assert "vs baseline" in capsys.readouterr().out
