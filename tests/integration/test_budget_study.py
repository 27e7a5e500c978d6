"""scripts/rela/budget_study.py at a tiny size: a softmax baseline and a ReLA-g variant with
its own flag (attention dropout 0.1), 12 updates with a checkpoint every 4, reported at 8
and 12 updates with 2-checkpoint averaging.  Checks its numbers against independent
computations: sacreBLEU's own CLI (BLEU, paired bootstrap) on the written hypotheses, the
length ratio counted plainly, the cross-attention null rate of analysis.attention_stats,
the validation losses of the training logs, and that the run's flag reached fairseq."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fairseq_sparse_attn.provenance import check_provenance

from significance_fixtures import sacrebleu_paired

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "rela" / "budget_study.py"
DATA = ["--max-train-lines", "1000", "--max-eval-lines", "40"]
TINY = [
    "--layers",
    "1",
    "--dim",
    "32",
    "--heads",
    "2",
    "--max-tokens",
    "512",
    "--warmup",
    "4",
    "--max-update",
    "12",
    "--save-every",
    "4",
    "--validate-interval",
    "4",
]


def study(*args):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=env, timeout=900
    )
    return proc


@pytest.fixture(scope="module")
def study_out(tmp_path_factory, multi30k_raw):
    out = tmp_path_factory.mktemp("study")
    proc = study(
        "train",
        "--out",
        out,
        "--raw-dir",
        multi30k_raw,
        *DATA,
        *TINY,
        "--run",
        "softmax=softmax",
        "--run",
        "rela_g_adrop=rela_g:--attention-dropout 0.1",
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    proc = study(
        "report",
        "--out",
        out,
        "--raw-dir",
        multi30k_raw,
        *DATA,
        "--baseline",
        "softmax",
        "--budgets",
        "8,12",
        "--average",
        "2",
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    # training the same runs again skips them (their logs and checkpoints are kept)
    log = (out / "softmax" / "train.log").read_text()
    again = study("train", "--out", out, "--raw-dir", multi30k_raw, *DATA, *TINY, "--run", "softmax=softmax")
    assert again.returncode == 0 and "softmax is already trained" in again.stdout, again.stderr[-2000:]
    assert (out / "softmax" / "train.log").read_text() == log
    # another command under a trained run's name is refused
    other = study("train", "--out", out, "--raw-dir", multi30k_raw, *DATA, *TINY, "--run", "softmax=softmax:--lr 5e-4")
    assert other.returncode != 0 and "trained with another command" in other.stderr
    assert (out / "softmax" / "train.log").read_text() == log
    # a second report of the same folder, another baseline and prefix (translations cached)
    second = study(
        "report",
        "--out",
        out,
        "--raw-dir",
        multi30k_raw,
        *DATA,
        "--baseline",
        "rela_g_adrop",
        "--budgets",
        "12",
        "--average",
        "1",
        "--name",
        "vs_adrop",
    )
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    return out, proc.stdout


def test_rows_bleu_and_significance(study_out):
    out, stdout = study_out
    data = json.loads((out / "study.json").read_text())
    check_provenance(data, bleu=True)
    rows = {(r["run"], r["updates"]): r for r in data["rows"]}
    assert set(rows) == {(n, u) for n in ("softmax", "rela_g_adrop") for u in (8, 12)}
    ref = out / "multi30k" / "raw" / "test.en"
    for budget in (8, 12):
        for avg, key in (("", "test"), ("_avg2", "test_avg2")):
            base = out / "softmax" / "eval" / f"test_u{budget}{avg}.hyp"
            system = out / "rela_g_adrop" / "eval" / f"test_u{budget}{avg}.hyp"
            cli_base, cli_system = sacrebleu_paired(ref, base, system)
            row, base_row = rows[("rela_g_adrop", budget)], rows[("softmax", budget)]
            assert base_row[f"{key}_bleu"] == pytest.approx(cli_base["score"], abs=0.006)
            assert row[f"{key}_bleu"] == pytest.approx(cli_system["score"], abs=0.006)
            assert base_row[f"{key}_p_vs_baseline"] is None
            assert row[f"{key}_p_vs_baseline"] == pytest.approx(cli_system["p_value"], abs=1e-4)
            assert row[f"{key}_ci95"] == pytest.approx(
                [max(0.0, cli_system["mean"] - cli_system["ci"]), min(100.0, cli_system["mean"] + cli_system["ci"])],
                abs=0.006,
            )
    assert "| rela_g_adrop (--attention-dropout 0.1) | 12 |" in (out / "study.md").read_text()
    assert "| rela_g_adrop (--attention-dropout 0.1) | 12 |" in stdout
    assert not list(out.glob("*/checkpoints/.avg*")), "averaged checkpoints are temporary"


def test_second_report_with_its_own_baseline_and_name(study_out):
    out, _ = study_out
    first = {(r["run"], r["updates"]): r for r in json.loads((out / "study.json").read_text())["rows"]}
    data = json.loads((out / "vs_adrop.json").read_text())
    check_provenance(data, bleu=True)
    assert data["baseline"] == "rela_g_adrop" and data["budgets"] == [12]
    rows = {(r["run"], r["updates"]): r for r in data["rows"]}
    assert set(rows) == {("softmax", 12), ("rela_g_adrop", 12)}
    assert rows[("rela_g_adrop", 12)]["test_p_vs_baseline"] is None
    assert rows[("softmax", 12)]["test_p_vs_baseline"] is not None
    for key in rows:  # the same cached translations: the same BLEU as in the first report
        assert rows[key]["test_bleu"] == first[key]["test_bleu"]
    assert (out / "vs_adrop.md").exists() and (out / "vs_adrop_curves.png").exists()
    assert (out / "study.md").exists()  # the first report is kept


def test_translation_statistics(study_out):
    out, _ = study_out
    rows = {(r["run"], r["updates"]): r for r in json.loads((out / "study.json").read_text())["rows"]}
    refs = (out / "multi30k" / "raw" / "test.en").read_text().splitlines()
    for (name, budget), row in rows.items():
        hyps = (out / name / "eval" / f"test_u{budget}.hyp").read_text().splitlines()
        assert len(hyps) == len(refs) == row["sentences"] == 40
        ratio = sum(len(h.split()) for h in hyps) / sum(len(r.split()) for r in refs)
        assert row["length_ratio"] == pytest.approx(ratio, abs=1e-3)
        assert row["distinct"] == len(set(hyps))
        assert 0 <= row["repeats"] <= 1


def test_cross_attention_null_rates(study_out):
    """'all' is the null rate analysis.attention_stats gives for the cross-attention; the
    thirds bracket it; softmax has none."""
    sys.path.insert(0, str(REPO / "scripts"))
    import demo

    out, _ = study_out
    rows = {(r["run"], r["updates"]): r for r in json.loads((out / "study.json").read_text())["rows"]}
    for name in ("softmax", "rela_g_adrop"):
        ckpt = next((out / name / "checkpoints").glob("checkpoint_*_12.pt"))
        model, task = demo.load(ckpt, out / "multi30k" / "data-bin")
        expected = demo.attention_statistics(model, task)["cross"]["null_rate"]
        null = rows[(name, 12)]["cross_null"]
        assert null["all"] == pytest.approx(expected, abs=1e-4)
        thirds = [null[t] for t in ("first", "middle", "last")]
        assert min(thirds) - 1e-4 <= null["all"] <= max(thirds) + 1e-4
        if name == "softmax":
            assert null["all"] == 0


def test_run_flags_and_curves(study_out):
    out, _ = study_out
    run = json.loads((out / "rela_g_adrop" / "run.json").read_text())
    check_provenance(run)
    assert run["train_command"][-2:] == ["--attention-dropout", "0.1"]
    ckpt = next((out / "rela_g_adrop" / "checkpoints").glob("checkpoint_*_12.pt"))
    cfg = torch.load(ckpt, map_location="cpu", weights_only=False)["cfg"]
    assert cfg["model"].attention_dropout == 0.1
    base_cfg = torch.load(
        next((out / "softmax" / "checkpoints").glob("checkpoint_*_12.pt")), map_location="cpu", weights_only=False
    )["cfg"]
    assert base_cfg["model"].attention_dropout == 0.0
    rows = {(r["run"], r["updates"]): r for r in json.loads((out / "study.json").read_text())["rows"]}
    with open(out / "study_curves.csv") as f:
        curve = {(r["variant"], int(r["num_updates"])): r for r in csv.DictReader(f)}
    for (name, budget), row in rows.items():
        point = curve[(name, budget)]
        assert float(point["valid_bleu"]) == pytest.approx(row["valid_bleu"])
        assert float(point["valid_loss"]) == pytest.approx(row["valid_loss"])
    assert curve[("softmax", 4)]["valid_bleu"] == ""  # BLEU only at the reported budgets
    assert (out / "study_curves.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_run_spec_is_a_clear_error(tmp_path):
    proc = study("train", "--out", tmp_path, "--run", "x=transformer")
    assert proc.returncode == 2
    assert "NAME=MODEL[:FAIRSEQ FLAGS]" in proc.stderr and "'x=transformer'" in proc.stderr
    proc = study("report", "--out", tmp_path, "--baseline", "softmax")
    assert proc.returncode != 0 and "no run named 'softmax'" in proc.stderr
