"""`tools.score --baseline`: BLEU, 95% CI and paired-bootstrap p-value, checked against
sacreBLEU's own command line (`sacrebleu REF -i BASE SYS --paired-bs -f json`, a subprocess)
on the same files, and the provenance of the JSON it writes."""

import json

import pytest

from fairseq_sparse_attn.provenance import check_provenance
from fairseq_sparse_attn.tools import score

from significance_fixtures import sacrebleu_paired as _sacrebleu_cli


@pytest.mark.parametrize("system", ["weaker", "close"])
def test_baseline_comparison_equals_the_sacrebleu_cli(systems, system, tmp_path, capsys):
    ref, files = systems
    out = tmp_path / "bleu.json"
    assert (
        score.main([files[system][0], "--ref", ref, "--baseline", files["base"][0], "--json", str(out), "--seed", "3"])
        == 0
    )
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    sig = data["significance"]
    cli_base, cli_sys = _sacrebleu_cli(ref, files["base"][1], files[system][1])
    assert sig["metric"] == "sacrebleu" and sig["n_resamples"] == 1000
    assert sig["bleu"] == pytest.approx(cli_sys["score"], abs=0.006) == data["sacrebleu"]
    assert sig["baseline_bleu"] == pytest.approx(cli_base["score"], abs=0.006)
    assert sig["p_value"] == pytest.approx(cli_sys["p_value"], abs=1e-4)
    assert sig["ci95"] == pytest.approx([cli_sys["mean"] - cli_sys["ci"], cli_sys["mean"] + cli_sys["ci"]], abs=0.006)
    assert sig["baseline_ci95"] == pytest.approx(
        [cli_base["mean"] - cli_base["ci"], cli_base["mean"] + cli_base["ci"]], abs=0.006
    )
    assert sig["ci95"][0] < sig["bleu"] < sig["ci95"][1]
    assert "bs:1000" in sig["signature"] and f"p={sig['p_value']:.4f}" in printed
    record = check_provenance(data, bleu=True)
    assert record["seed"] == 3 and record["sacrebleu_signature"] == data["signature"]
    if system == "weaker":  # a third of the words missing vs a ninth: not chance
        assert sig["p_value"] < 0.01
