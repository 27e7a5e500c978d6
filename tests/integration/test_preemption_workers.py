"""Preemption with fairseq's default ``--num-workers 1`` (real runs, one process).

A cluster signals every process of a job: SLURM's ``scancel``, its time limit and
``--signal`` reach the DataLoader workers too.  torch's worker dies of a SIGTERM that its
parent did not send, and the trainer then failed inside its update (``DataLoader worker
... exited unexpectedly``, ``ConnectionResetError``) without saving: 4 of 4 tries on
2026-11-28.  The cluster tests run ``--num-workers 0``, which hid it.  Also: a signal that
came while the run was starting (data, model) killed it; and the workers, whose signals
are now blocked, must not keep a finished run from exiting.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from helpers import model_size_flags

REPO = Path(__file__).resolve().parents[2]
PROBE = str(REPO / "tests" / "fsa_train_probe.py")
TINY = [
    "--arch",
    "softmax_transformer_wmt_en_de",
    *model_size_flags(layers=1, dim=32, ffn=64, heads=2),
    "--share-all-embeddings",
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--batch-size",
    "4",
    "--num-workers",
    "1",  # fairseq's default
    "--log-format",
    "simple",
    "--log-interval",
    "1",
    "--no-epoch-checkpoints",
    "--validate-interval-updates",
    "3",  # validations (the dry run's persistent loader) between the updates
]


def start(data, run_dir, save_dir, max_update, **env):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("FSA_PROBE", "FSA_COMPAT_OFF", "RANK"))}
    full_env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", FSA_PROBE_DIR=str(run_dir), **env)
    args = [sys.executable, PROBE, str(data / "data-bin"), *TINY, "--max-update", str(max_update)]
    return subprocess.Popen(
        args + ["--save-dir", str(save_dir)],
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the trainer and its workers
    )


def updates_of(path):
    return torch.load(path, map_location="cpu", weights_only=False)["optimizer_history"][-1]["num_updates"]


def test_sigterm_to_the_whole_group_saves_despite_the_data_loader_workers(small_data, tmp_path):
    proc = start(small_data, tmp_path / "run", tmp_path / "ckpt", 1000, FSA_PROBE_WAIT_AT="7")
    waiting = tmp_path / "run" / "waiting.rank0"
    deadline = time.time() + 300
    while not waiting.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert waiting.exists(), proc.communicate()[0][-3000:]
    workers = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert len(workers) >= 2, workers  # the trainer and at least one DataLoader worker
    os.killpg(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)  # and no hang at exit (the workers' SIGTERM is blocked)
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert "SIGTERM: saved" in out and "exited unexpectedly" not in out and "ConnectionResetError" not in out
    assert updates_of(tmp_path / "ckpt" / "checkpoint_last.pt") == 7
    time.sleep(1)
    left = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert left == [], left  # no worker outlives the trainer


def test_a_signal_while_the_run_starts_ends_it_without_a_checkpoint(small_data, tmp_path):
    """SIGUSR1 before the first update (sbatch --signal while the data loads): one line,
    status 138, nothing saved (nothing was trained); it killed the run before."""
    proc = start(small_data, tmp_path / "run", tmp_path / "ckpt", 1000)
    deadline = time.time() + 120
    log = []
    while proc.poll() is None and time.time() < deadline:  # the task is set up once the log names it
        line = proc.stdout.readline()
        log.append(line)
        if "| task:" in line or "fairseq.tasks.translation | [" in line:
            os.killpg(proc.pid, signal.SIGUSR1)
            break
    out = "".join(log) + proc.communicate(timeout=120)[0]
    assert proc.returncode == 128 + signal.SIGUSR1, out[-3000:]
    assert "SIGUSR1: received before the first update of this run: nothing trained since the start" in out
    assert not (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


def test_a_run_that_ends_mid_epoch_with_workers_exits(small_data, tmp_path):
    """--max-update inside an epoch leaves the loader's workers alive at exit; their
    blocked SIGTERM must not hold the exit (multiprocessing joins them)."""
    proc = start(small_data, tmp_path / "run", tmp_path / "ckpt", 5)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out[-3000:]
    assert updates_of(tmp_path / "ckpt" / "checkpoint_last.pt") == 5
