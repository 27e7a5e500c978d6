"""BLEU by reference length (fsa-length-bleu) and the --mask-encoder-heads wrapper flag."""

import json
from pathlib import Path

import pytest
import sacrebleu

from fairseq_sparse_attn.analysis.length_bleu import (
    bleu_by_length,
    cli_main,
    read_generate_output,
)
from fairseq_sparse_attn.cli import with_head_masking


def words(n, w="x"):
    return " ".join(f"{w}{i}" for i in range(n))


def write_log(path, pairs):
    """A fairseq-generate style log (ids printed out of order, as generate does)."""
    lines = ["2026-11-22 | INFO | fairseq_cli.generate | something"]
    for i in reversed(range(len(pairs))):
        ref, hyp = pairs[i]
        lines += [
            f"S-{i}\tsrc",
            f"T-{i}\t{ref}",
            f"H-{i}\t-0.5\t{hyp}@@ bpe",
            f"D-{i}\t-0.5\t{hyp}",
            f"P-{i}\t-0.1 -0.2",
        ]
    lines.append("Generate test with beam=2: BLEU4 = 1.0")
    path.write_text("\n".join(lines) + "\n")


def test_read_prefers_detokenized_lines(tmp_path):
    log = tmp_path / "gen.out"
    write_log(log, [("a b c", "a b"), ("d e", "d e")])
    refs, hyps = read_generate_output(log)
    assert refs == ["a b c", "d e"] and hyps == ["a b", "d e"]


def test_bins_against_sacrebleu_per_bin(tmp_path):
    pairs = [
        (words(5), words(5)),
        (words(9), words(7)),
        (words(10), words(10, "y")),
        (words(19), words(19)),
        (words(25), words(20)),
        (words(55), words(50)),
    ]
    rows = bleu_by_length([r for r, _ in pairs], [h for _, h in pairs])
    by = {r["bin"]: r for r in rows}
    assert [r["bin"] for r in rows] == ["<10", "[10,20)", "[20,30)", "[30,40)", "[40,50)", ">=50", "all"]
    assert [by[b]["sentences"] for b in ("<10", "[10,20)", "[20,30)", "[30,40)", "[40,50)", ">=50")] == [
        2,
        2,
        1,
        0,
        0,
        1,
    ]
    assert by["[30,40)"]["bleu"] is None
    expected_lt10 = sacrebleu.corpus_bleu([pairs[0][1], pairs[1][1]], [[pairs[0][0], pairs[1][0]]]).score
    assert by["<10"]["bleu"] == pytest.approx(expected_lt10)
    assert by[">=50"]["reference_words"] == 55
    assert by["all"]["sentences"] == 6


def test_cli_writes_json_and_tsv(tmp_path, capsys):
    log = tmp_path / "gen.out"
    write_log(log, [(words(12), words(12)), (words(3), words(2))])
    cli_main([str(log), "--json", str(tmp_path / "b.json"), "--tsv", str(tmp_path / "b.tsv")])
    result = json.loads((tmp_path / "b.json").read_text())
    rows = result["bins"]
    assert rows[1]["bin"] == "[10,20)" and rows[1]["bleu"] == pytest.approx(100.0)
    tsv = (tmp_path / "b.tsv").read_text().splitlines()
    assert tsv[0] == "bin\tsentences\treference_words\tbleu" and len(tsv) == 8
    out = capsys.readouterr().out
    assert "reference length" in out
    assert f"wrote {tmp_path / 'b.json'}" in out and f"wrote {tmp_path / 'b.tsv'}" in out
    # provenance, with the signature of the BLEU it reports (sacreBLEU's own, written plainly)
    from sacrebleu.metrics import BLEU

    from fairseq_sparse_attn.provenance import check_provenance

    record = check_provenance(result, bleu=True)
    bleu = BLEU(tokenize="13a")
    bleu.corpus_score([words(12), words(2)], [[words(12), words(3)]])
    assert record["sacrebleu_signature"] == str(bleu.get_signature()) and "tok:13a" in record["sacrebleu_signature"]


def test_bad_logs_name_file_and_line(tmp_path):
    log = tmp_path / "bad.out"
    log.write_text("T-0\tok\nH-0\tnot-a-score\thyp\n")
    with pytest.raises(ValueError, match=r"bad.out:2: expected a score"):
        read_generate_output(log)
    log.write_text("H-0\t-1.0\thyp\n")
    with pytest.raises(ValueError, match="no 'T-<id>' reference lines"):
        read_generate_output(log)
    log.write_text("T-0\ta\nT-1\tb\nH-0\t-1\ta\n")
    with pytest.raises(ValueError, match=r"without a hypothesis \[1\]"):
        read_generate_output(log)
    with pytest.raises(SystemExit):
        cli_main([str(tmp_path / "missing.out")])


def test_mask_encoder_heads_becomes_model_overrides():
    import ast

    argv = with_head_masking(["data", "--path", "c.pt", "--mask-encoder-heads", "0,7"])
    assert argv[:3] == ["data", "--path", "c.pt"]
    assert argv[3] == "--model-overrides"
    assert ast.literal_eval(argv[4]) == {"encoder_masked_heads": "0,7"}
    argv = with_head_masking(["d", "--model-overrides", "{'beam': 2}", "--mask-encoder-heads=3"])
    assert ast.literal_eval(argv[argv.index("--model-overrides") + 1]) == {"beam": 2, "encoder_masked_heads": "3"}
    assert with_head_masking(["d", "--beam", "4"]) == ["d", "--beam", "4"]
    with pytest.raises(SystemExit, match=r"^fsa-validate: error: --mask-encoder-heads first: .*head indices"):
        with_head_masking(["d", "--mask-encoder-heads", "first"], "fsa-validate")
    with pytest.raises(SystemExit, match=r"^fsa-generate: error: --model-overrides must be a Python dict"):
        with_head_masking(["d", "--model-overrides", "[1]", "--mask-encoder-heads", "0"])
    with pytest.raises(SystemExit, match=r"^fsa-generate: error: --model-overrides must be a Python dict"):
        with_head_masking(["d", "--model-overrides", "{'beam': ", "--mask-encoder-heads", "0"])


def test_the_command_exits_0_and_checks_its_outputs_before_reading(tmp_path, capsys):
    """The console script is ``main`` (``sys.exit`` of cli_main's rows was status 1 after
    every run); a bad --tokenize or an output that cannot be written is one line before
    any reading, and nothing is written."""
    import shutil
    import subprocess

    from fairseq_sparse_attn.analysis.length_bleu import main

    repo = Path(__file__).resolve().parents[2]
    assert '"fsa-length-bleu = fairseq_sparse_attn.analysis.length_bleu:main"' in (repo / "setup.py").read_text()
    log = tmp_path / "gen.out"
    write_log(log, [(words(12), words(12))])
    if shutil.which("fsa-length-bleu"):  # the installed command (make install)
        proc = subprocess.run(["fsa-length-bleu", str(log)], capture_output=True, text=True)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert main([str(log), "--tsv", str(tmp_path / "out" / "b.tsv")]) is None
    assert (tmp_path / "out" / "b.tsv").read_text().startswith("bin\tsentences")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["b.tsv"]  # no temporary file left

    with pytest.raises(SystemExit):
        main([str(log), "--tokenize", "bogus"])
    assert "error: --tokenize bogus: not a sacreBLEU tokenizer" in capsys.readouterr().err
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for flags in (["--json", str(tmp_path / "j.json"), "--tsv", str(blocker / "t.tsv")], ["--json", str(tmp_path)]):
        with pytest.raises(SystemExit) as e:
            main([str(tmp_path / "missing.out"), *flags])  # checked before the input is read
        assert "is a file, not a directory" in str(e.value) or "is a directory, not a file" in str(e.value)
    assert not (tmp_path / "j.json").exists()


def test_two_runs_in_one_log_are_refused_naming_the_line(tmp_path):
    """``fairseq-generate ... >> gen.out`` twice: the first run's hypotheses were paired
    with the second run's references (the first H/D line of an id was kept, the last T
    line), a score of neither run with exit status 0."""
    log = tmp_path / "gen.out"
    log.write_text("T-0\ta b\nH-0\t-1\ta b\nT-1\tc\nH-1\t-1\tc\nT-0\ta b\nH-0\t-1\tx y\n")
    with pytest.raises(ValueError, match=r"gen.out:5: a second 'T-0' line \(the first is line 1\)"):
        read_generate_output(log)
    log.write_text("T-0\ta b\nH-0\t-1\ta b\nH-0\t-2\ta c\nD-0\t-1\ta b\nD-0\t-2\ta c\n")  # --nbest 2
    assert read_generate_output(log) == (["a b"], ["a b"])


def test_an_output_naming_the_input_or_the_other_output_is_refused(tmp_path, capsys):
    log = tmp_path / "gen.out"
    write_log(log, [(words(12), words(12))])
    before = log.read_bytes()
    for argv, message in (
        ([str(log), "--json", str(log)], f"--json {log} is the generate output"),
        ([str(log), "--tsv", str(tmp_path / "." / "gen.out")], "--tsv"),
        ([str(log), "--json", str(tmp_path / "a"), "--tsv", str(tmp_path / "a")], "is --tsv"),
    ):
        with pytest.raises(SystemExit) as e:
            cli_main(argv)
        assert str(e.value).startswith("fsa-length-bleu: error: ") and message in str(e.value), str(e.value)
    assert log.read_bytes() == before and not (tmp_path / "a").exists()
    with pytest.raises(SystemExit, match=r"^fsa-length-bleu: error: \S+missing.out: No such file or directory$"):
        cli_main([str(tmp_path / "missing.out")])
