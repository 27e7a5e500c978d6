"""scripts/demo.py (`make demo`, `make demo-sweep`) at a tiny size: 1+1 layers, d=32, 12
updates on a 1,000-pair Multi30k slice with 40 validation/test sentences, the cpu recipe
otherwise.  Checks the files a user reads: results.json (BLEU, CI, p-value against
sacreBLEU's own CLI on the written hypotheses, repetition rate and length ratio recomputed
from the hypotheses, provenance), the learning curves (CSV rows against the validation lines
of the training logs, JSON, PNG), the status lines, tensorboard event files, the sweep's
table; a two-seed run's per-seed pairs and mean; fairseq's tqdm bar through a terminal;
the data folder found as the Makefile finds it; `make check-readme` on the repository."""

import csv
import json
import os
import re
import runpy
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_sparse_attn.provenance import check_provenance

from significance_fixtures import sacrebleu_paired

REPO = Path(__file__).resolve().parents[2]
TINY = [
    "--max-train-lines",
    "1000",
    "--max-eval-lines",
    "40",
    "--layers",
    "1",
    "--dim",
    "32",
    "--heads",
    "2",
    "--ffn-dim",
    "128",
    "--max-tokens",
    "512",
    "--warmup",
    "4",
    "--max-update",
    "12",
    "--validate-interval",
    "4",
    "--recipe",
    "cpu",
    "--status-interval",
    "0.5",
    "--log-interval",
    "2",
]


def run_demo(out, raw, *extra, tiny=TINY):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "demo.py"), "--out", str(out), "--raw-dir", str(raw), *tiny, *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


def validations_in(log):
    """(update, loss) of every validation line of a fairseq-train log, read plainly."""
    text = Path(log).read_text()
    return [
        (int(u), float(loss))
        for loss, u in re.findall(r"valid on 'valid' subset \| loss ([\d.]+) \|.*?\| num_updates (\d+)", text)
    ]


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
    cli_base, cli_rela = sacrebleu_paired(
        out / "multi30k" / "raw" / "test.en", out / "test_softmax.hyp", out / "test_rela_g.hyp"
    )
    assert data["recipe"] == "cpu" and data["seeds"] == [1] and data["changed_settings"]["layers"] == [3, 1]
    soft, rela = data["per_seed"]["1"]["softmax"], data["per_seed"]["1"]["rela_g"]
    assert soft["bleu"] == pytest.approx(cli_base["score"], abs=0.006)
    assert rela["bleu"] == pytest.approx(cli_rela["score"], abs=0.006)
    assert rela["p_value_vs_baseline"] == pytest.approx(cli_rela["p_value"], abs=1e-4)
    assert soft["p_value_vs_baseline"] is None
    assert data["pairs"] == [
        {
            "seed": 1,
            "baseline": "softmax",
            "model": "rela_g",
            "p_value": rela["p_value_vs_baseline"],
            "bleu_difference": round(rela["bleu"] - soft["bleu"], 2),
        }
    ]
    assert data["models"]["rela_g"]["bleu_mean"] == rela["bleu"] and data["models"]["rela_g"]["bleu_std"] is None
    assert rela["bleu_ci95"] == pytest.approx(
        [max(0.0, cli_rela["mean"] - cli_rela["ci"]), min(100.0, cli_rela["mean"] + cli_rela["ci"])], abs=0.006
    )
    lrs = runpy.run_path(str(REPO / "scripts" / "demo.py"))["DEMO_LR"]  # the defaults docs/demo.md justifies
    assert soft["lr"] == lrs["softmax"] and rela["lr"] == lrs["rela_g"]
    assert "p-value vs softmax" in printed and "95% CI" in printed and "What this shows:" in printed
    assert ("NOT tied" in printed) == (rela["p_value_vs_baseline"] < 0.05 and rela["bleu"] != soft["bleu"])


def plain_repetition(sentence):
    """A word or bigram repeated at once, on sacreBLEU's 13a tokens, written out plainly."""
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    w = Tokenizer13a()(sentence.strip()).split()
    return any(w[i] == w[i + 1] for i in range(len(w) - 1)) or any(
        w[i] == w[i + 2] and w[i + 1] == w[i + 3] for i in range(len(w) - 3)
    )


def test_demo_repetition_rate_length_ratio_and_status_lines(demo_out):
    import sacrebleu

    out, printed = demo_out
    data = json.loads((out / "results.json").read_text())
    refs = (out / "multi30k" / "raw" / "test.en").read_text().splitlines()
    for name in ("softmax", "rela_g"):
        hyps = (out / f"test_{name}.hyp").read_text().splitlines()
        r = data["per_seed"]["1"][name]
        assert r["repetition_rate"] == pytest.approx(sum(map(plain_repetition, hyps)) / len(hyps), abs=1e-4)
        bleu = sacrebleu.corpus_bleu(hyps, [refs])  # BLEU's own lengths: its brevity-penalty ratio
        assert r["length_ratio"] == pytest.approx(bleu.sys_len / bleu.ref_len, abs=1e-4)
    assert "repetition rate" in printed and "length ratio" in printed
    # status lines (stdout is not a terminal here): training updates of 12 and test sentences of 40
    train_lines = re.findall(
        r"^\[softmax\] training: update (\d+)/12 \(\d+%\), [\d.]+ updates/s, about \S+ left", printed, re.M
    )
    assert train_lines and [int(u) for u in train_lines] == sorted(int(u) for u in train_lines)
    assert re.search(r"^\[rela_g\] translating test: (sentence \d+/40|starting)", printed, re.M)


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
    assert [p["loss"] for p in data["variants"]["rela_g"]] == [
        loss for _, loss in validations_in(out / "train_rela_g.log")
    ]
    results = json.loads((out / "results.json").read_text())["per_seed"]["1"]
    for name in ("softmax", "rela_g"):  # the last validation's loss (update 12), not the first
        assert results[name]["final_valid_loss"] == validations_in(out / f"train_{name}.log")[-1][1]
    assert is_png(out / "learning_curves.png")
    # the printed reading of the curves: the loss gap at the last validation and at the one a
    # quarter of the run earlier (updates 12 and 8 here), as the training logs have them
    m = re.search(
        r"rela_g's validation loss is ([-+][\d.]+) from softmax's at update (\d+) "
        r"\(([-+][\d.]+) at update (\d+)\), so the gap is (not )?narrowing",
        printed,
    )
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
        assert r["valid_bleu"] == pytest.approx(
            sacrebleu.corpus_bleu([hyps[i] for i in ids], [[refs[i] for i in ids]]).score, abs=0.006
        )
        assert r["valid_loss"] == validations_in(r["log"])[-1][1]
    best = max(rows, key=lambda r: (r["valid_bleu"], -r["valid_loss"]))
    assert data["best_lr"] == {"rela_g": best["lr"]}
    assert "(chosen)" in (out / "sweep.md").read_text()
    with open(out / "sweep_curves.csv", encoding="utf-8") as f:
        variants = {r["variant"] for r in csv.DictReader(f)}
    assert variants == {"rela_g_lr0.001", "rela_g_lr0.003"} and is_png(out / "sweep_curves.png")
    assert not list(out.glob("checkpoints_rela_g_lr*/*.pt"))  # sweep checkpoints are removed


def test_demo_two_seeds_pairs_and_mean(tmp_path, multi30k_raw):
    """Two seeds (as the cuda recipe runs): one run per model and seed, each seed pair
    compared on the same seed, the mean over seeds; the four runs two at a time (--jobs 2,
    as the cuda recipe runs them side by side), each with its own logs and results."""
    out = tmp_path / "two"
    tiny = [
        "--max-train-lines",
        "200",
        "--max-eval-lines",
        "20",
        "--layers",
        "1",
        "--dim",
        "32",
        "--heads",
        "2",
        "--ffn-dim",
        "64",
        "--max-tokens",
        "512",
        "--warmup",
        "2",
        "--max-update",
        "3",
        "--validate-interval",
        "3",
        "--recipe",
        "cpu",
        "--seeds",
        "1,2",
        "--jobs",
        "2",
    ]
    proc = run_demo(out, multi30k_raw, tiny=tiny)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    check_provenance(data, bleu=True)
    assert data["seeds"] == [1, 2] and [p["seed"] for p in data["pairs"]] == [1, 2]
    refs = out / "multi30k" / "raw" / "test.en"
    for seed in (1, 2):
        cli_base, cli_rela = sacrebleu_paired(
            refs, out / f"test_softmax_seed{seed}.hyp", out / f"test_rela_g_seed{seed}.hyp"
        )
        run = data["per_seed"][str(seed)]
        assert run["softmax"]["bleu"] == pytest.approx(cli_base["score"], abs=0.006)
        assert run["rela_g"]["p_value_vs_baseline"] == pytest.approx(cli_rela["p_value"], abs=1e-4)
        assert f"'seed': {seed}," in (out / f"train_rela_g_seed{seed}.log").read_text()
    for name in ("softmax", "rela_g"):
        per = [data["per_seed"][s][name]["bleu"] for s in ("1", "2")]
        assert data["models"][name]["bleu_per_seed"] == per
        assert data["models"][name]["bleu_mean"] == pytest.approx(sum(per) / 2, abs=0.006)
    assert "seed 1 (" in proc.stdout and "seed 2 (" in proc.stdout and "mean over seeds 1, 2:" in proc.stdout
    assert "seed 2: rela_g" in proc.stdout  # the reading names every seed pair
    assert "4 runs, 2 at a time (--jobs)" in proc.stdout and data["settings"]["jobs"] == 2
    # the heatmap shows the first seed's models, one row each (2 heads): its size in pixels
    # is demo.heatmap's figure size at its 110 dpi, (3.4 x 2 + 1.6) x (3.6 x 2 rows + 0.8)
    png = (out / "cross_attention_heatmap.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (round(8.4 * 110), round(8.0 * 110))
    # make publish-demo on this result: a two-seed table (the cuda recipe's shape) with its
    # mean rows, rendered from the fields demo.py writes, and checked figure by figure
    readme = tmp_path / "README.md"
    readme.write_text(
        "".join(f"<!-- BEGIN {b} -->\n<!-- END {b} -->\n" for b in ("demo-cpu", "demo-cuda", "bench-gpu"))
    )
    check_readme = runpy.run_path(str(REPO / "scripts" / "check_readme.py"))
    argv = ["--readme", str(readme), "--results", str(tmp_path / "results")]
    assert check_readme["main"](["--publish", str(out / "results.json"), *argv]) == 0
    table = readme.read_text().split("<!-- END demo-cpu -->")[0]
    assert table.count("| 1 | ") == 2 and table.count("| 2 | ") == 2 and table.count("| mean | ") == 2
    assert f"| mean | rela_g | {data['models']['rela_g']['bleu_mean']:.2f} |" in table
    assert check_readme["main"](argv) == 0


FAKE_FAIRSEQ = """
import os, sys, time
print("stdout line; stderr is a terminal:", os.isatty(2), "args:", " ".join(sys.argv[1:]), flush=True)
for i in range(1, 4):
    sys.stderr.write(f"\\repoch 001:  {i * 33}%|###| {i}/3 [00:0{i}<00:00]")
    sys.stderr.flush()
    time.sleep(0.05)
sys.stderr.write("\\r\\x1b[2K| valid | epoch 001 | valid on 'valid' subset | loss 7.1 | num_updates 3\\n")
"""


def test_fairseq_progress_bar_on_a_terminal(tmp_path):
    """--progress bar (what a terminal gets): the command gets --log-format tqdm and a
    terminal on stderr; our stderr shows the bar; the log keeps stdout, and the bar's output
    without its redraws goes to LOG.err; the demo reads both."""
    fake = tmp_path / "fake_fairseq.py"
    fake.write_text(FAKE_FAIRSEQ)
    code = (
        f"import runpy, types; d = runpy.run_path({str(REPO / 'scripts' / 'demo.py')!r}); "
        f"text = d['run']([{sys.executable!r}, {str(fake)!r}], {str(tmp_path / 'x.log')!r}, "
        f"args=types.SimpleNamespace(progress='bar', status_interval=20), progress=('train', 'x', 3, '')); "
        f"print('RETURNED', repr(text))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO))
    )
    stdout, stderr = proc.stdout.decode(), proc.stderr.decode()  # bytes: keep the bar's carriage returns
    assert proc.returncode == 0, stderr[-2000:]
    log = (tmp_path / "x.log").read_text()
    assert "stderr is a terminal: True" in log and "args: --log-format tqdm" in log
    assert (
        tmp_path / "x.log.err"
    ).read_text() == "| valid | epoch 001 | valid on 'valid' subset | loss 7.1 | num_updates 3\n"
    assert "\repoch 001:  99%|###| 3/3" in stderr  # the bar as the terminal shows it
    assert "num_updates 3" in stdout.split("RETURNED", 1)[1]


def make_value(repo_dir, variable, env):
    """What `make` in ``repo_dir`` sets ``variable`` to (the repository's Makefile)."""
    proc = subprocess.run(
        [
            "make",
            "-s",
            "--no-print-directory",
            "-f",
            str(repo_dir / "Makefile"),
            "--eval",
            f"print-var: ; @echo '$({variable})'",
            "print-var",
        ],
        cwd=repo_dir,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_demo_finds_the_data_the_makefile_finds(tmp_path, monkeypatch):
    """`python scripts/demo.py` and `make demo` resolve Multi30k the same way, in a checkout
    with and without ../shared/data/multi30k and with $MULTI30K_DIR."""
    import runpy

    shipped = runpy.run_path(str(REPO / "scripts" / "demo.py"))["shipped_multi30k"]
    repo = tmp_path / "checkout"
    repo.mkdir()
    shutil.copy(REPO / "Makefile", repo / "Makefile")
    env = {k: v for k, v in os.environ.items() if k != "MULTI30K_DIR"}
    for present in (False, True):
        if present:
            (tmp_path / "shared" / "data" / "multi30k").mkdir(parents=True)
        made = make_value(repo, "MULTI30K_DIR", env)
        expected = (repo / made).resolve() if made else None
        assert shipped(repo, env) == expected, (present, made)
        assert (expected is not None) == present
        # make exports it (relative to the root, where make runs demo.py): what demo.py then sees
        monkeypatch.chdir(repo)
        assert shipped(repo, dict(env, MULTI30K_DIR=made)) == expected
        monkeypatch.chdir(tmp_path)
    assert make_value(repo, "MULTI30K_DIR", dict(env, MULTI30K_DIR="/data/m30k")) == "/data/m30k"
    assert shipped(repo, dict(env, MULTI30K_DIR="/data/m30k")) == Path("/data/m30k")


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_check_readme_passes_on_the_repository():
    proc = subprocess.run(
        ["make", "-s", "check-readme", f"PYTHON={sys.executable}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
