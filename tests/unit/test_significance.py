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
