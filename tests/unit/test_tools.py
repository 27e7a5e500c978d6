"""fairseq_sparse_attn.tools: checkpoint averaging (fairseq's script is not installed) and
the BLEU scorer of the reproduction scripts, against plain computations."""

import json

import pytest
import torch

from fairseq_sparse_attn.tools import average_checkpoints, score


def _ckpt(path, w, step, extra=None):
    state = {"model": {"w": w, "num_batches": torch.tensor(step)}, "cfg": {"tag": path.name}, "extra_state": extra}
    torch.save(state, path)


def test_average_picks_the_newest_update_checkpoints(tmp_path):
    ws = {}
    for epoch, upd in [(1, 5), (1, 10), (2, 15), (2, 20), (3, 100)]:
        ws[upd] = torch.randn(3, 4, generator=torch.Generator().manual_seed(upd))
        _ckpt(tmp_path / f"checkpoint_{epoch}_{upd}.pt", ws[upd], 7)
    (tmp_path / "checkpoint_last.pt").write_bytes(b"not used")
    chosen = average_checkpoints.last_checkpoints(tmp_path, 3)
    assert [p.name for p in chosen] == ["checkpoint_2_15.pt", "checkpoint_2_20.pt", "checkpoint_3_100.pt"]
    out = tmp_path / "avg.pt"
    assert average_checkpoints.main(["--inputs", str(tmp_path), "--num", "3", "--output", str(out)]) == 0
    avg = torch.load(out, weights_only=False)
    expected = (ws[15].double() + ws[20].double() + ws[100].double()) / 3
    assert torch.allclose(avg["model"]["w"].double(), expected, atol=1e-7)
    assert avg["model"]["w"].dtype == torch.float32
    assert avg["model"]["num_batches"].item() == 7
    assert avg["cfg"] == {"tag": "checkpoint_3_100.pt"}  # the newest checkpoint's configuration
    # within one epoch the update count orders them, not the name ("3_105" < "3_90" as text)
    for upd in (90, 95, 105):
        ws[upd] = torch.randn(3, 4, generator=torch.Generator().manual_seed(upd))
        _ckpt(tmp_path / f"checkpoint_3_{upd}.pt", ws[upd], 7)
    chosen = average_checkpoints.last_checkpoints(tmp_path, 2)
    assert [p.name for p in chosen] == ["checkpoint_3_100.pt", "checkpoint_3_105.pt"]


def test_average_epoch_checkpoints_half_precision_and_errors(tmp_path, capsys):
    a, b = torch.tensor([1.0, 2.0], dtype=torch.float16), torch.tensor([2.0, 5.0], dtype=torch.float16)
    _ckpt(tmp_path / "checkpoint9.pt", a, 1)
    _ckpt(tmp_path / "checkpoint10.pt", b, 1)
    assert [p.name for p in average_checkpoints.last_checkpoints(tmp_path, 2)] == ["checkpoint9.pt", "checkpoint10.pt"]
    avg = average_checkpoints.average(average_checkpoints.last_checkpoints(tmp_path, 2))
    assert avg["model"]["w"].dtype == torch.float16 and avg["model"]["w"].tolist() == [1.5, 3.5]

    _ckpt(tmp_path / "checkpoint11.pt", b, 2)
    with pytest.raises(ValueError, match="num_batches: integer tensor differs"):
        average_checkpoints.average(average_checkpoints.last_checkpoints(tmp_path, 2))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert average_checkpoints.main(["--inputs", str(empty), "--output", str(tmp_path / "x.pt")]) == 1
    assert "no checkpoint_<epoch>_<updates>.pt" in capsys.readouterr().err
    assert not (tmp_path / "x.pt").exists()


def test_average_refuses_fewer_checkpoints_than_asked(tmp_path, capsys):
    """fairseq's script raises when the directory has fewer than --num checkpoints; an
    "avg5" of 3 checkpoints would be misnamed.  --allow-fewer (the scripts' smoke runs)
    averages those there are and says so; --num below 1 is refused."""
    for upd in (10, 20, 30):
        _ckpt(tmp_path / f"checkpoint_1_{upd}.pt", torch.full((2,), float(upd)), 1)
    out = tmp_path / "avg5.pt"
    assert average_checkpoints.main(["--inputs", str(tmp_path), "--num", "5", "--output", str(out)]) == 1
    assert "--num 5 but it has 3 update checkpoints" in capsys.readouterr().err and not out.exists()
    argv = ["--inputs", str(tmp_path), "--num", "5", "--output", str(out), "--allow-fewer"]
    assert average_checkpoints.main(argv) == 0
    assert "averaged 3 checkpoints (of --num 5: the directory has no more)" in capsys.readouterr().out
    assert torch.load(out, weights_only=False)["model"]["w"].tolist() == [20.0, 20.0]
    for n in ("0", "-2"):
        assert average_checkpoints.main(["--inputs", str(tmp_path), "--num", n, "--output", str(out)]) == 1
        assert f"--num {n}: average at least 1 checkpoint" in capsys.readouterr().err
    files = [str(tmp_path / "checkpoint_1_10.pt"), str(tmp_path / "checkpoint_1_20.pt")]  # files: --num applies not
    assert average_checkpoints.main(["--inputs", *files, "--output", str(out), "--allow-fewer"]) == 0
    assert "averaged 2 checkpoints: checkpoint_1_10.pt" in capsys.readouterr().out


def test_score_orders_by_id_and_reports_both_bleus(tmp_path):
    import sacrebleu

    refs = ["The cat sits on the mat.", "A dog runs in the park.", "Two men play football."]
    tok_refs = ["The cat sits on the mat .", "A dog runs in the park .", "Two men play football ."]
    hyps_tok = ["The cat sits on a mat .", "A dog runs in the park .", "Two men play soccer ."]
    hyps = ["The cat sits on a mat.", "A dog runs in the park.", "Two men play soccer."]
    gen = tmp_path / "gen.txt"
    lines = []
    for i in (2, 0, 1):  # fairseq prints in batch order
        lines += [
            f"S-{i}\tsrc",
            f"T-{i}\t{refs[i]}",
            f"H-{i}\t-0.5\t{hyps_tok[i]}",
            f"D-{i}\t-0.5\t{hyps[i]}",
            f"P-{i}\t-0.1 -0.2",
        ]
    gen.write_text("\n".join(lines) + "\n")
    (tmp_path / "ref").write_text("\n".join(refs) + "\n")
    (tmp_path / "tok").write_text("\n".join(tok_refs) + "\n")
    out = tmp_path / "bleu.json"
    assert (
        score.main([str(gen), "--ref", str(tmp_path / "ref"), "--tok-ref", str(tmp_path / "tok"), "--json", str(out)])
        == 0
    )
    r = json.loads(out.read_text())
    assert r["sacrebleu"] == round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
    assert r["tok_bleu"] == round(sacrebleu.corpus_bleu(hyps_tok, [tok_refs], tokenize="none").score, 2)
    assert r["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    # tokenized BLEU against the T- lines (document-level scripts)
    r = score.score(str(gen), t_lines=True)
    assert r["tok_bleu"] == round(sacrebleu.corpus_bleu(hyps_tok, [refs], tokenize="none").score, 2)


def test_score_count_mismatch_names_both_files(tmp_path, capsys):
    gen = tmp_path / "gen.txt"
    gen.write_text("H-0\t-1\ta b\nD-0\t-1\ta b\n")
    ref = tmp_path / "ref"
    ref.write_text("a b\nc d\n")
    assert score.main([str(gen), "--ref", str(ref)]) == 1
    err = capsys.readouterr().err
    assert str(gen) in err and str(ref) in err and "2 lines" in err
    (tmp_path / "empty").write_text("nothing\n")
    assert score.main([str(tmp_path / "empty"), "--ref", str(ref)]) == 1
    assert "no H-/D- lines" in capsys.readouterr().err


def test_generate_output_is_split_on_newlines_only(tmp_path):
    """A "\\r" inside a hypothesis is text, as the references' reader (text_lines) reads
    it: Python's universal newlines cut the hypothesis there and scored 0 BLEU."""
    from fairseq_sparse_attn.analysis.length_bleu import read_generate_output

    gen = tmp_path / "gen.txt"
    gen.write_bytes(b"T-0\ta cat\rsits here\nH-0\t-0.5\ta cat\rsits here\nT-1\ta dog\nH-1\t-0.5\ta dog\n")
    assert score.read_hypotheses(str(gen))[0] == {0: "a cat\rsits here", 1: "a dog"}
    assert score.read_targets(str(gen)) == {0: "a cat\rsits here", 1: "a dog"}
    assert read_generate_output(str(gen)) == (["a cat\rsits here", "a dog"], ["a cat\rsits here", "a dog"])
    ref = tmp_path / "ref"
    ref.write_bytes(b"a cat\rsits here\na dog\n")
    assert score.score(str(gen), ref=str(ref), tok_ref=str(ref))["tok_bleu"] == 100.0


def test_t_lines_baseline_without_targets_is_one_error(tmp_path, capsys):
    gen, base = tmp_path / "gen.txt", tmp_path / "base.txt"
    gen.write_text("T-0\ta b c d\nH-0\t-1\ta b c d\n")
    base.write_text("H-0\t-1\ta b c\n")  # generated without T- lines
    assert score.main([str(gen), "--t-lines", "--baseline", str(base)]) == 1
    assert f"{base}: T- lines for 0 sentences, H- lines for 1 (--t-lines)" in capsys.readouterr().err


def test_average_checks_its_output_first_and_names_an_unreadable_input(tmp_path, capsys):
    """--output a directory gave a traceback after every input was averaged and left a whole
    checkpoint in DIR.tmp; a truncated input gave torch's OSError without a file name."""
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    _ckpt(a, torch.ones(2), 1)
    _ckpt(b, torch.zeros(2), 1)
    assert average_checkpoints.main(["--inputs", str(a), str(b), "--output", str(tmp_path)]) == 1
    assert f"--output {tmp_path} is a directory, not a file" in capsys.readouterr().err
    assert average_checkpoints.main(["--inputs", str(a), str(b), "--output", str(a / "avg.pt")]) == 1
    assert "is a file, not a directory" in capsys.readouterr().err
    truncated = tmp_path / "cut.pt"
    truncated.write_bytes(a.read_bytes()[:100])
    assert average_checkpoints.main(["--inputs", str(a), str(truncated), "--output", str(tmp_path / "avg.pt")]) == 1
    assert f"{truncated}: not a readable checkpoint" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt", "b.pt", "cut.pt"]  # nothing else written
    assert average_checkpoints.main(["--inputs", str(a), str(b), "--output", str(tmp_path / "out" / "avg.pt")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["avg.pt"]


def test_with_nbest_the_first_hypothesis_of_a_sentence_is_scored(tmp_path):
    """``--nbest 2`` prints each sentence's hypotheses best first: score.py and
    fsa-length-bleu score the first one (H and D alike), not the last."""
    from fairseq_sparse_attn.analysis.length_bleu import main as length_bleu
    from fairseq_sparse_attn.analysis.length_bleu import read_generate_output

    gen = tmp_path / "gen.txt"
    gen.write_text(
        "S-0\tdie Katze saß auf der Matte\nT-0\tthe cat sat on the mat\n"
        "H-0\t-0.2\tthe cat sat on the mat\nD-0\t-0.2\tthe cat sat on the mat\nP-0\t-0.1 -0.1\n"
        "H-0\t-1.5\ta dog ran\nD-0\t-1.5\ta dog ran\nP-0\t-0.7 -0.8\n"
    )
    hyps, detok = score.read_hypotheses(str(gen))
    assert hyps == {0: "the cat sat on the mat"} and detok == {0: "the cat sat on the mat"}
    assert read_generate_output(str(gen)) == (["the cat sat on the mat"], ["the cat sat on the mat"])
    ref = tmp_path / "ref"
    ref.write_text("the cat sat on the mat\n")
    assert score.score(str(gen), ref=str(ref), tok_ref=str(ref))["sacrebleu"] == 100.0
    out = tmp_path / "rows.json"
    length_bleu([str(gen), "--json", str(out)])
    rows = json.loads(out.read_text())["bins"]
    assert (
        rows[0]["bleu"] == pytest.approx(100.0)
        and rows[-1]["bin"] == "all"
        and rows[-1]["bleu"] == pytest.approx(100.0)
    )
