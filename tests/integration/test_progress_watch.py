"""Status lines of long runs (scripts/lib.sh fsa_watched, tools/progress.py) on a fake
slow process that writes fairseq's progress lines: the lines come at the set interval,
their counts follow the process, the command's output and exit status are kept, and the
watcher ends with the command."""

import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# a fake fairseq-train: logs max_update 12, then an update line every 0.1 s, then exits 3
FAKE_TRAIN = textwrap.dedent("""
    import sys, time
    print("{'optimization': {'max_update': 12}}", flush=True)
    for u in range(1, 13):
        time.sleep(0.1)
        print(f"| train_inner | epoch 001: {u} / 99 loss=1.0, num_updates={u}, lr=0.001", flush=True)
    print("done on stderr", file=sys.stderr)
    sys.exit(3)
""")


def watched(tmp_path, kind, out, err, *cmd, interval="0.25"):
    script = (
        f'source "{REPO}/scripts/lib.sh"; fsa_watched {kind} fake "{out}" "{err}" "$@" && echo rc=0 || echo "rc=$?"'
    )
    return subprocess.run(
        ["bash", "-c", script, "x", *cmd],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "FSA_STATUS_INTERVAL": interval},
    )


def test_fsa_watched_prints_status_lines_and_keeps_output(tmp_path):
    fake = tmp_path / "fake_train.py"
    fake.write_text(FAKE_TRAIN)
    log = tmp_path / "train.log"
    t0 = time.monotonic()
    proc = watched(tmp_path, "train", log, log, sys.executable, str(fake))
    took = time.monotonic() - t0
    assert proc.stdout.strip().endswith("rc=3")  # the command's exit status
    text = log.read_text()
    assert "num_updates=12" in text and "done on stderr" in text  # 2>&1 into the one log
    lines = re.findall(r"^\[fake\] training: (.*)$", proc.stderr, re.M)
    assert len(lines) >= 2, proc.stderr
    counts = [int(m) for m in re.findall(r"update (\d+)/12", " ".join(lines))]
    assert counts == sorted(counts) and counts and max(counts) <= 12
    assert all("updates/s" in l and "elapsed" in l for l in lines if "starting" not in l)
    assert any("left" in l for l in lines)
    assert took < 20  # the watcher ended with the command


def test_generate_status_counts_sentences(tmp_path):
    fake = tmp_path / "fake_generate.py"
    fake.write_text(
        textwrap.dedent("""
        import sys, time
        print("INFO:fairseq.data.data_utils:loaded 6 examples from: x.de", file=sys.stderr, flush=True)
        for i in range(6):
            time.sleep(0.15)
            print(f"H-{i}\\t-0.1\\thyp {i}")
            print(f"D-{i}\\t-0.1\\thyp {i}", flush=True)
    """)
    )
    out, err = tmp_path / "gen.txt", tmp_path / "gen.log"
    proc = watched(tmp_path, "generate", out, err, sys.executable, str(fake), interval="0.2")
    assert proc.stdout.strip().endswith("rc=0")
    assert out.read_text().count("D-") == 6 and "loaded 6" in err.read_text()
    counts = [int(m) for m in re.findall(r"^\[fake\] translating: sentence (\d)/6", proc.stderr, re.M)]
    assert counts and counts == sorted(counts), proc.stderr


def test_watcher_ends_with_its_process(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.6)"])
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "fairseq_sparse_attn" / "tools" / "progress.py"),
            "--pid",
            str(sleeper.pid),
            "--kind",
            "train",
            "--label",
            "s",
            "--interval",
            "0.2",
            str(log),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    sleeper.wait()
    assert proc.returncode == 0 and time.monotonic() - t0 < 10
    assert "[s] training: starting" in proc.stderr
