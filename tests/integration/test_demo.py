"""scripts/demo.py (`make demo`, `make demo-sweep`) at a tiny size: 1+1 layers, d=32, 12
updates on a 1,000-pair Multi30k slice with 40 validation/test sentences.  Checks the
files a user reads: results.json (BLEU, CI, p-value against sacreBLEU's own CLI on the
written hypotheses, provenance), the learning curves (CSV rows against the validation lines
of the training logs, JSON, PNG), tensorboard event files, and the sweep's table."""

import csv
import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_sparse_attn.provenance import check_provenance

from significance_fixtures import sacrebleu_paired

REPO = Path(__file__).resolve().parents[2]
TINY = ["--max-train-lines", "1000", "--max-eval-lines", "40", "--layers", "1", "--dim", "32", "--heads", "2",
        "--max-tokens", "512", "--warmup", "4", "--max-update", "12", "--validate-interval", "4"]


def run_demo(out, raw, *extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, str(REPO / "scripts" / "demo.py"), "--out", str(out), "--raw-dir", str(raw),
                           *TINY, *extra], capture_output=True, text=True, env=env, timeout=900)


def validations_in(log):
    """(update, loss) of every validation line of a fairseq-train log, read plainly."""
    text = Path(log).read_text()
    return [(int(u), float(loss)) for loss, u in
            re.findall(r"valid on 'valid' subset \| loss ([\d.]+) \|.*?\| num_updates (\d+)", text)]




def is_png(path):
    return Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and Path(path).stat().st_size > 5000


@pytest.fixture(scope="module")
def demo_out(tmp_path_factory, multi30k_raw):
    out = tmp_path_factory.mktemp("demo")
    proc = run_demo(out, multi30k_raw, "--tensorboard-logdir", str(out / "tb"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return out, proc.stdout


def test_demo_reports_bleu_ci_and_p_value(demo_out):
    out, printed = demo_out
    data = json.loads((out / "results.json").read_text())
    record = check_provenance(data, bleu=True)
    assert record["seed"] == 1 and "bs:1000" in data["signature"]
    cli_base, cli_rela = sacrebleu_paired(out / "multi30k" / "raw" / "test.en", out / "test_softmax.hyp",
                                          out / "test_rela_g.hyp")
    soft, rela = data["models"]["softmax"], data["models"]["rela_g"]
    assert soft["bleu"] == pytest.approx(cli_base["score"], abs=0.006)
    assert rela["bleu"] == pytest.approx(cli_rela["score"], abs=0.006)
    assert rela["p_value_vs_softmax"] == pytest.approx(cli_rela["p_value"], abs=1e-4)
    assert soft["p_value_vs_softmax"] is None
    assert rela["bleu_ci95"] == pytest.approx([cli_rela["mean"] - cli_rela["ci"], cli_rela["mean"] + cli_rela["ci"]],
                                              abs=0.006)
    lrs = runpy.run_path(str(REPO / "scripts" / "demo.py"))["DEMO_LR"]  # the defaults docs/demo.md justifies
    assert soft["lr"] == lrs["softmax"] and rela["lr"] == lrs["rela_g"]
    assert "p-value vs softmax" in printed and "95% CI" in printed and "What this shows:" in printed
    assert ("NOT tied" in printed) == (rela["p_value_vs_softmax"] < 0.05 and rela["bleu"] != soft["bleu"])


def test_demo_learning_curves(demo_out):
    out, printed = demo_out
    with open(out / "learning_curves.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for name in ("softmax", "rela_g"):
        expected = validations_in(out / f"train_{name}.log")
        assert [u for u, _ in expected] == [4, 8, 12]
        got = [(int(r["num_updates"]), float(r["valid_loss"])) for r in rows if r["variant"] == name]
        assert got == expected
    data = json.loads((out / "learning_curves.json").read_text())
    check_provenance(data)
    assert [p["loss"] for p in data["variants"]["rela_g"]] == [loss for _, loss in validations_in(out / "train_rela_g.log")]
    assert is_png(out / "learning_curves.png")
    # the printed reading of the curves: the loss gap at the last validation and at the one a
    # quarter of the run earlier (updates 12 and 8 here), as the training logs have them
    m = re.search(r"rela_g's validation loss is ([-+][\d.]+) from softmax's at update (\d+) "
                  r"\(([-+][\d.]+) at update (\d+)\), so the gap is (not )?narrowing", printed)
    assert m, printed[-1500:]
    soft, rela = (dict(validations_in(out / f"train_{n}.log")) for n in ("softmax", "rela_g"))
    assert (int(m.group(2)), int(m.group(4))) == (12, 8)
    g1, g0 = rela[12] - soft[12], rela[8] - soft[8]
    assert float(m.group(1)) == pytest.approx(g1, abs=6e-4) and float(m.group(3)) == pytest.approx(g0, abs=6e-4)
    assert (m.group(5) is None) == (abs(g1) < abs(g0))


def test_demo_tensorboard(demo_out):
    out, _ = demo_out
    for name in ("softmax", "rela_g"):
        events = list((out / "tb" / name).rglob("events.out.tfevents.*"))
        assert events and all(e.stat().st_size > 0 for e in events), name
        assert {e.parent.name for e in events} >= {"train", "valid"}


def test_demo_sweep(demo_out, multi30k_raw):
    out, _ = demo_out
    proc = run_demo(out, multi30k_raw, "--sweep", "1e-3,3e-3", "--models", "rela_g")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    data = json.loads((out / "sweep.json").read_text())
    check_provenance(data, bleu=True)
    rows = data["rows"]
    assert [(r["model"], r["lr"]) for r in rows] == [("rela_g", 1e-3), ("rela_g", 3e-3)]
    for r in rows:  # validation BLEU recomputed from the generate output (D- against T- lines)
        text = (out / f"generate_valid_rela_g_lr{r['lr']:g}.log").read_text()
        hyps = dict(re.findall(r"^D-(\d+)\t[^\t]*\t(.*)$", text, re.M))
        refs = dict(re.findall(r"^T-(\d+)\t(.*)$", text, re.M))
        import sacrebleu

        ids = sorted(refs, key=int)
        assert len(ids) == 40
        assert r["valid_bleu"] == pytest.approx(sacrebleu.corpus_bleu([hyps[i] for i in ids], [[refs[i] for i in ids]]).score,
                                                abs=0.006)
        assert r["valid_loss"] == validations_in(r["log"])[-1][1]
    best = max(rows, key=lambda r: (r["valid_bleu"], -r["valid_loss"]))
    assert data["best_lr"] == {"rela_g": best["lr"]}
    assert "(chosen)" in (out / "sweep.md").read_text()
    with open(out / "sweep_curves.csv", encoding="utf-8") as f:
        variants = {r["variant"] for r in csv.DictReader(f)}
    assert variants == {"rela_g_lr0.001", "rela_g_lr0.003"} and is_png(out / "sweep_curves.png")
    assert not list(out.glob("checkpoints_rela_g_lr*/*.pt"))  # sweep checkpoints are removed
