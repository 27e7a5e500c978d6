"""Fixed encoder patterns end to end (Raganato et al. 2020), real runs on a Multi30k slice:
a tiny 7F+1L model trained with fairseq-train, fairseq-generate, head masking at test time
(fsa-generate --mask-encoder-heads and the ablation script), BLEU by reference length, and
contrastive scoring of the shared subject-verb agreement pairs with an English->German
7F+1L model."""

import json
import re
import sys

import pytest

from fairseq_sparse_attn.provenance import check_provenance

from test_end_to_end import REPO, UPDATES, generate_and_score, run, train

FIXED = ["--arch", "fixed_pattern_transformer_wmt_en_de", "--encoder-attention-heads", "8", "--dropout", "0.1"]


@pytest.fixture(scope="module")
def fixed_checkpoint(data, tmp_path_factory):
    save = tmp_path_factory.mktemp("fixed_7f1l")
    proc = train(data, "fixed", save, extra=FIXED)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    valid_loss = float(re.findall(r"valid on 'valid' subset \| loss ([\d.]+)", log)[-1])
    assert valid_loss < 9.0, f"7F+1L: validation loss {valid_loss} after {UPDATES} updates"
    return save / "checkpoint_best.pt"


def fsa(tool, *args, **kw):
    code = f"import sys; from fairseq_sparse_attn.cli import {tool}; sys.argv[0] = 'fsa'; {tool}()"
    return run([sys.executable, "-c", code, *args], **kw)


def hypotheses(stdout):
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^D-(\d+)\t\S+\t(.*)$", stdout, re.M)}


def test_train_generate_mask_heads_and_length_bleu(data, fixed_checkpoint, tmp_path):
    import torch

    state = torch.load(fixed_checkpoint, map_location="cpu", weights_only=False)
    q = [k for k in state["model"] if k.startswith("encoder.layers.0.self_attn.q_proj.weight")]
    assert state["model"][q[0]].shape == (64 // 8, 64)  # one learned head of dimension 8

    bleu, out = generate_and_score(data, fixed_checkpoint)
    print(f"7F+1L: {bleu}")
    assert bleu.score > 0
    gen = tmp_path / "gen.txt"
    gen.write_text(out)

    # BLEU by reference length: every sentence in exactly one bin, "all" = corpus BLEU
    proc = run(
        [sys.executable, "-m", "fairseq_sparse_attn.analysis.length_bleu", gen, "--json", tmp_path / "bins.json"]
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "bins.json").read_text())
    check_provenance(result, bleu=True)  # {bins, tokenize, provenance}
    rows = result["bins"]
    assert [r["bin"] for r in rows] == ["<10", "[10,20)", "[20,30)", "[30,40)", "[40,50)", ">=50", "all"]
    assert sum(r["sentences"] for r in rows[:-1]) == rows[-1]["sentences"] == 1000
    assert abs(rows[-1]["bleu"] - bleu.score) < 1e-6
    assert "reference length" in proc.stdout

    # head masking at test time: disabling the "previous token" head changes translations;
    # the same flag through fsa-validate changes the loss
    common = [
        data / "data-bin",
        "--path",
        fixed_checkpoint,
        "--gen-subset",
        "test",
        "--beam",
        "2",
        "--batch-size",
        "128",
        "--remove-bpe",
        "--tokenizer",
        "moses",
        "--source-lang",
        "de",
        "--target-lang",
        "en",
    ]
    masked = fsa("generate", *common, "--mask-encoder-heads", "1")
    assert masked.returncode == 0, masked.stderr[-3000:]
    full_hyps, masked_hyps = hypotheses(out), hypotheses(masked.stdout)
    assert len(masked_hyps) == 1000
    changed = sum(full_hyps[i] != masked_hyps[i] for i in full_hyps)
    assert changed > 50, f"masking head 1 changed only {changed} translations"

    losses = {}
    for heads in (None, "1"):
        extra = ["--mask-encoder-heads", heads] if heads else []
        proc = fsa(
            "validate",
            data / "data-bin",
            "--path",
            fixed_checkpoint,
            "--task",
            "translation",
            "--valid-subset",
            "valid",
            "--max-tokens",
            "4096",
            *extra,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        losses[heads] = float(re.findall(r"valid on 'valid' subset \| loss ([\d.]+)", proc.stdout + proc.stderr)[-1])
    assert losses["1"] > losses[None]


def test_head_ablation_script(data, fixed_checkpoint, tmp_path):
    proc = run(
        [
            sys.executable,
            REPO / "scripts" / "fixed_patterns" / "head_ablation.py",
            data / "data-bin",
            "--path",
            fixed_checkpoint,
            "--out",
            tmp_path,
            "--heads",
            "1,7",
            "--",
            "--gen-subset",
            "valid",
            "--beam",
            "1",
            "--batch-size",
            "256",
            "--remove-bpe",
            "--max-len-b",
            "20",
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (tmp_path / "ablation.tsv").read_text().splitlines()
    assert lines[0] == "masked_head\tpattern\tbleu\tdelta\tci95\tp_vs_all_heads"
    rows = [line.split("\t") for line in lines[1:]]
    assert [r[:2] for r in rows] == [["-", "all heads"], ["1", "previous (token)"], ["7", "learned"]]
    full = float(rows[0][2])
    for r in rows[1:]:
        assert abs(float(r[3]) - (float(r[2]) - full)) < 1e-3
    # BLEU, CI and p against sacreBLEU's own paired bootstrap on the same D-/T- lines
    import sacrebleu
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    from fairseq_sparse_attn.analysis.length_bleu import read_generate_output

    refs, full_hyps = read_generate_output(tmp_path / "gen.full.txt")
    systems = [("all", full_hyps)] + [(h, read_generate_output(tmp_path / f"gen.mask{h}.txt")[1]) for h in "17"]
    _, res = PairedTest(systems, {"BLEU": BLEU()}, references=[refs], test_type="bs", n_samples=1000)()
    for row, result, (_, hyps) in zip(rows, res["BLEU"], systems):
        assert abs(float(row[2]) - sacrebleu.corpus_bleu(hyps, [refs]).score) < 1e-3
        lo, hi = map(float, row[4].split("-"))
        assert abs(lo - (result.mean - result.ci)) < 0.011 and abs(hi - (result.mean + result.ci)) < 0.011
        same_bleu = result.p_value is not None and result.score == res["BLEU"][0].score  # p = 1.0 then
        assert row[5] == ("-" if result.p_value is None else "1.0000" if same_bleu else f"{result.p_value:.4f}")
    assert "previous (token)" in proc.stdout


def test_head_ablation_needs_the_languages_for_moses_before_any_run(data, fixed_checkpoint, tmp_path):
    """fairseq-generate's multi-line hydra traceback (tokenizer.source_lang=null) came after
    the model loaded; now one line, before any output."""
    args = [sys.executable, REPO / "scripts" / "fixed_patterns" / "head_ablation.py", data / "data-bin"]
    args += ["--path", fixed_checkpoint, "--out", tmp_path / "ablation", "--", "--tokenizer", "moses"]
    proc = run(args)
    assert proc.returncode == 1 and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "head_ablation.py: error: --tokenizer moses needs -s/--source-lang and -t/--target-lang" in proc.stderr
    assert not (tmp_path / "ablation").exists()


@pytest.fixture(scope="module")
def en_de_checkpoint(data, tmp_path_factory):
    save = tmp_path_factory.mktemp("fixed_en_de")
    proc = train(data, "fixed_en_de", save, extra=FIXED + ["--source-lang", "en", "--target-lang", "de"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return save / "checkpoint_best.pt"


def test_contrastive_subject_verb_agreement(data, en_de_checkpoint, tmp_path):
    from conftest import require_shared_data, shared_data_dir

    pairs = shared_data_dir() / "contrastive" / "subj_verb_agreement"
    require_shared_data(pairs / "src.en.gz", "contrastive pairs")
    out_json = tmp_path / "acc.json"
    proc = run(
        [
            sys.executable,
            "-m",
            "fairseq_sparse_attn.analysis.contrastive",
            data / "data-bin",
            pairs / "src.en.gz",
            pairs / "tgt.correct.de.gz",
            pairs / "tgt.incorrect.de.gz",
            "--format",
            "plain",
            "--path",
            en_de_checkpoint,
            "--source-lang",
            "en",
            "--target-lang",
            "de",
            "--bpe-codes",
            data / "bpe" / "codes",
            "--tokenizer",
            "moses",
            "--max-items",
            "400",
            "--batch-size",
            "64",
            "--no-progress",
            "--output-json",
            out_json,
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out_json.read_text())
    print("subject-verb agreement:", report["overall"])
    overall = report["overall"]
    assert overall["total"] == 400
    assert overall["accuracy"] == pytest.approx(overall["correct"] / 400)
    # the same model with its learned encoder head disabled scores the pairs too (Table 5's
    # "7F_token (H8 disabled)" row)
    proc = run(
        [
            sys.executable,
            "-m",
            "fairseq_sparse_attn.analysis.contrastive",
            data / "data-bin",
            pairs / "src.en.gz",
            pairs / "tgt.correct.de.gz",
            pairs / "tgt.incorrect.de.gz",
            "--path",
            en_de_checkpoint,
            "-s",
            "en",
            "-t",
            "de",
            "--bpe-codes",
            data / "bpe" / "codes",
            "--tokenizer",
            "moses",
            "--max-items",
            "400",
            "--no-progress",
            "--model-overrides",
            "{'encoder_masked_heads': '7'}",
            "--output-json",
            tmp_path / "masked.json",
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    masked = json.loads((tmp_path / "masked.json").read_text())["overall"]
    assert masked["total"] == 400
