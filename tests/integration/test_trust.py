"""Runs you can trust, round 2 (issue 24): checkpoints, concurrency, disk, interrupts and
analysis outputs, with the real commands (``fsa-train`` / ``fsa-generate`` /
``fsa-validate`` / ``fsa-analyze`` of this checkout, stock ``fairseq-train``) on tiny
models: the 300-pair Multi30k slice (2 updates) and the fixture checkpoints of
tests/fixtures/checkpoints.  The table is docs/errors.md; the same mechanisms in this
process: tests/unit/test_trust_writes.py."""

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fairseq_sparse_attn.writers import writer_of

from helpers import TINY_TRAIN_ARGS  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "checkpoints"
HOST = socket.gethostname()
LOCK = ".fsa-train.lock"
TINY = list(TINY_TRAIN_ARGS)


def env():
    out = {k: v for k, v in os.environ.items() if k not in ("FSA_COMPAT_OFF", "FSA_TRACEBACK")}
    out.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return out


def fsa_code(command, before=""):
    return (
        f"import sys; sys.argv[0] = 'fsa-{command}'\n{before}\n"
        f"from fairseq_sparse_attn.cli import {command}; {command}()"
    )


def fsa(command, *args, before=""):
    """``fsa-<command> args`` as the console script runs it (``before``: Python run first,
    to simulate a full disk or a kill)."""
    return subprocess.run(
        [sys.executable, "-c", fsa_code(command, before), *map(str, args)],
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


def analyze(*args, before=""):
    code = f"{before}\nimport sys\nfrom fairseq_sparse_attn.analysis.cli import main\nsys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], env=env(), capture_output=True, text=True, timeout=600
    )


def one_line_error(proc, prefix, *fragments, status=1):
    assert proc.returncode == status, (proc.stdout + proc.stderr)[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(prefix), last
    for fragment in fragments:
        assert fragment in last, last
    return last


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def snapshot(directory):
    """{name: sha256} of the files in a directory (hidden ones too)."""
    return {p.name: sha(p) for p in sorted(Path(directory).iterdir()) if p.is_file()}


def dict_digest(path):
    """sha256 of fairseq's four specials and the dictionary file's symbols, in id order,
    computed without fairseq."""
    symbols = ["<s>", "<pad>", "</s>", "<unk>"] + [
        line.rsplit(" ", 1)[0] for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    return hashlib.sha256("".join(s + "\n" for s in symbols).encode()).hexdigest(), len(symbols)


@pytest.fixture(scope="module")
def rela_run(small_data, tmp_path_factory):
    """A ReLA model trained for 2 updates: checkpoint_last.pt / checkpoint_best.pt."""
    save = tmp_path_factory.mktemp("rela") / "ckpt"
    proc = fsa("train", small_data / "data-bin", "--arch", "rela_transformer_wmt_en_de", *TINY, "--save-dir", save)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return save


# --- checkpoints ---------------------------------------------------------------------------


def test_checkpoints_record_their_dictionaries_and_attention(small_data, rela_run):
    """The record of a checkpoint fsa-train wrote: the dictionaries' sha256 (computed here
    from the data-bin's files) and the attention options; the lock is gone after a normal
    end."""
    state = torch.load(rela_run / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    record = state["fsa_record"]
    for side, lang in (("source", "de"), ("target", "en")):
        digest, size = dict_digest(small_data / "data-bin" / f"dict.{lang}.txt")
        assert record["dictionaries"][side] == {"lang": lang, "size": size, "sha256": digest}
    assert record["attention"]["attn_activation"] == "relu"
    assert record["attention"]["attn_output_norm"] == "gated_rmsnorm"
    assert sorted(p.name for p in rela_run.iterdir()) == ["checkpoint_best.pt", "checkpoint_last.pt"]


def test_stock_transformer_save_dir_restarted_with_plugin_attention(small_data, tmp_path):
    """A save dir of stock fairseq-train (no plugin) restarted with ReLA flags is refused
    (it loaded and trained on as ReLA); the plugin's softmax preset resumes it."""
    save = tmp_path / "ckpt"
    stock = subprocess.run(
        [
            sys.executable,
            "-c",
            "from fairseq_cli.train import cli_main; cli_main()",
            small_data / "data-bin",
            "--arch",
            "transformer",
            *TINY,
            "--save-dir",
            save,
        ],
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert stock.returncode == 0, stock.stderr[-3000:]
    assert "fsa_record" not in torch.load(save / "checkpoint_last.pt", weights_only=False)
    before = snapshot(save)
    args = [small_data / "data-bin", *TINY, "--save-dir", save]
    args[args.index("--max-update") + 1] = "3"
    proc = fsa("train", *args, "--arch", "rela_transformer_wmt_en_de")
    one_line_error(
        proc,
        "fsa-train: error: ",
        f"{save / 'checkpoint_last.pt'} (a stock fairseq "
        "transformer checkpoint: softmax attention) was trained with other attention "
        "options than the flags given (--attn-activation: checkpoint 'softmax', given "
        "'relu'; --attn-output-norm: checkpoint 'none', given 'gated_rmsnorm')",
    )
    assert "begin training" not in proc.stdout
    assert snapshot(save) == before  # untouched; no lock, no crash.pt, no temporary file
    proc = fsa("train", *args, "--arch", "softmax_transformer_wmt_en_de")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "(epoch 1 @ 2 updates)" in proc.stdout and "num_updates 3" in proc.stdout


def test_restart_with_a_data_bin_of_other_dictionaries(small_data, rela_run, tmp_path):
    """Resuming a save dir on a data-bin whose (joined) dictionary has two ids swapped."""
    data = tmp_path / "data-bin"
    shutil.copytree(small_data / "data-bin", data)
    for lang in ("de", "en"):
        lines = (data / f"dict.{lang}.txt").read_text().splitlines()
        lines[5], lines[6] = lines[6], lines[5]
        (data / f"dict.{lang}.txt").write_text("\n".join(lines) + "\n")
    save = tmp_path / "ckpt"
    shutil.copytree(rela_run, save)
    before = snapshot(save)
    args = [data, "--arch", "rela_transformer_wmt_en_de", *TINY, "--save-dir", save]
    args[args.index("--max-update") + 1] = "3"
    proc = fsa("train", *args)
    one_line_error(
        proc,
        "fsa-train: error: ",
        f"{data / 'dict.de.txt'} is not the source dictionary "
        f"{save / 'checkpoint_last.pt'} was trained with: both have ",
    )
    assert "begin training" not in proc.stdout
    assert snapshot(save) == before


@pytest.fixture
def recorded_fixture(tmp_path):
    """The ReLA-g fixture checkpoint (saved before checkpoints had a record) with the record
    of its data-bin's dictionaries added, and a copy of the data-bin whose dict.de.txt has
    the same size and two ids swapped."""
    state = torch.load(FIXTURES / "rela_g.pt", map_location="cpu", weights_only=False)
    dictionaries = {}
    for side, lang in (("source", "en"), ("target", "de")):
        digest, size = dict_digest(FIXTURES / "data-bin" / f"dict.{lang}.txt")
        dictionaries[side] = {"lang": lang, "size": size, "sha256": digest}
    state["fsa_record"] = {"version": 1, "dictionaries": dictionaries}
    path = tmp_path / "model.pt"
    torch.save(state, path)
    swapped = tmp_path / "other-bin"
    shutil.copytree(FIXTURES / "data-bin", swapped)
    lines = (swapped / "dict.de.txt").read_text().splitlines()
    lines[0], lines[1] = lines[1], lines[0]
    (swapped / "dict.de.txt").write_text("\n".join(lines) + "\n")
    return path, swapped


GEN = [
    "-s",
    "en",
    "-t",
    "de",
    "--gen-subset",
    "test",
    "--batch-size",
    "6",
    "--beam",
    "2",
    "--max-len-b",
    "12",
    "--seed",
    "1",
]


def hypotheses(text):
    return {f[0]: f[2] for f in (line.split("\t") for line in text.splitlines()) if f[0].startswith("H-")}


def test_generate_and_validate_refuse_other_dictionaries(recorded_fixture):
    path, swapped = recorded_fixture
    # the data-bin it was trained on: translates as before the record existed
    proc = fsa("generate", FIXTURES / "data-bin", "--path", path, *GEN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = hypotheses((FIXTURES / "rela_g.generate.txt").read_text())
    assert hypotheses(proc.stdout) == expected and len(expected) == 6
    message = (
        f"{swapped / 'dict.de.txt'} is not the target dictionary {path} was trained with: "
        "both have 32 entries, but other symbols or another order"
    )
    proc = fsa("generate", swapped, "--path", path, *GEN)
    one_line_error(proc, "fsa-generate: error: ", message)
    assert "H-" not in proc.stdout
    proc = fsa(
        "validate",
        swapped,
        "--path",
        path,
        "--task",
        "translation",
        "-s",
        "en",
        "-t",
        "de",
        "--valid-subset",
        "test",
        "--batch-size",
        "6",
    )
    one_line_error(proc, "fsa-validate: error: ", message)
    assert "valid on 'test' subset" not in proc.stdout + proc.stderr


def test_files_that_are_not_what_the_flag_needs(small_data, rela_run, tmp_path):
    """A bare state_dict as checkpoint_last.pt, a --restore-file that does not exist (stock
    fairseq trained from scratch), --save-dir that is a file, --path that is a directory or
    does not exist: one line each, naming the path, nothing written."""
    save = tmp_path / "ckpt"
    save.mkdir()
    model = torch.load(rela_run / "checkpoint_last.pt", weights_only=False)["model"]
    torch.save(model, save / "checkpoint_last.pt")
    before = snapshot(save)
    proc = fsa("train", small_data / "data-bin", "--arch", "rela_transformer_wmt_en_de", *TINY, "--save-dir", save)
    one_line_error(
        proc,
        "fsa-train: error: ",
        f"{save / 'checkpoint_last.pt'}: not a fairseq "
        "checkpoint (no 'model' state dict and no 'cfg'/'args' configuration; keys: "
        "encoder.version, encoder.embed_tokens.weight",
    )
    assert snapshot(save) == before

    proc = fsa(
        "train",
        small_data / "data-bin",
        "--arch",
        "rela_transformer_wmt_en_de",
        *TINY,
        "--save-dir",
        tmp_path / "new",
        "--restore-file",
        "checkpoint_best.pt",
    )
    one_line_error(
        proc,
        "fsa-train: error: ",
        "--restore-file checkpoint_best.pt does not exist "
        "(a relative path is taken from the current directory, not --save-dir)",
    )
    assert "begin training" not in proc.stdout

    as_file = tmp_path / "ckpt.txt"
    as_file.write_text("notes\n")
    proc = fsa("train", small_data / "data-bin", "--arch", "rela_transformer_wmt_en_de", *TINY, "--save-dir", as_file)
    one_line_error(proc, "fsa-train: error: ", f"--save-dir {as_file} is a file, not a directory")
    assert as_file.read_text() == "notes\n"

    proc = fsa("generate", small_data / "data-bin", "--path", rela_run, "--max-tokens", "2000")
    one_line_error(
        proc,
        "fsa-generate: error: ",
        f"{rela_run} is a directory, not a checkpoint file: pass a file in it, e.g. {rela_run / 'checkpoint_best.pt'}",
    )
    proc = fsa(
        "validate",
        small_data / "data-bin",
        "--path",
        rela_run / "checkpoint_9.pt",
        "--task",
        "translation",
        "--max-tokens",
        "2000",
    )
    one_line_error(
        proc,
        "fsa-validate: error: ",
        f"{rela_run / 'checkpoint_9.pt'} does not exist: "
        "expected a checkpoint file written by fsa-train / fairseq-train",
    )


# --- concurrency ---------------------------------------------------------------------------


def wait_for(path, proc, timeout=300):
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_one_training_per_save_dir(small_data, tmp_path):
    """A second fsa-train on a save dir in use is refused in one line naming the holder;
    once the first is killed (SIGKILL: its lock file stays), the next start takes the lock
    over with one notice and trains; the lock is gone when it ends."""
    save = tmp_path / "ckpt"
    args = [small_data / "data-bin", "--arch", "rela_transformer_wmt_en_de", *TINY, "--save-dir", save]
    args[args.index("--max-update") + 1] = "100000"
    first = subprocess.Popen(
        [sys.executable, "-c", fsa_code("train"), *map(str, args)],
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(save / LOCK, first)
        holder = json.loads((save / LOCK).read_text())
        assert (holder["pid"], holder["host"]) == (first.pid, HOST)
        second = fsa("train", *args[:-1], save)
        one_line_error(
            second,
            "fsa-train: error: ",
            f"--save-dir {save} is in use by another training: pid {first.pid} on host {HOST}, started ",
            f"(lock file {save / LOCK})",
        )
        assert "begin training" not in second.stdout
        first.kill()
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert json.loads((save / LOCK).read_text())["pid"] == first.pid  # left by SIGKILL
    args[args.index("--max-update") + 1] = "2"
    third = fsa("train", *args)
    assert third.returncode == 0, third.stderr[-3000:]
    notices = [line for line in (third.stdout + third.stderr).splitlines() if "taking the lock over" in line]
    assert len(notices) == 1 and f"pid {first.pid} on host {HOST}" in notices[0], notices
    assert not (save / LOCK).exists()


def paused_after_update_1(paused, resume):
    """Python run before fsa-train: after update 1 it creates ``paused`` and waits (at most
    300 s) for ``resume`` to exist, then trains on."""
    return f"""
import time
from pathlib import Path
from fairseq.trainer import Trainer
_train_step = Trainer.train_step
def train_step(self, samples, raise_oom=False):
    out = _train_step(self, samples, raise_oom=raise_oom)
    if self.get_num_updates() == 1:
        Path({str(paused)!r}).touch()
        deadline = time.monotonic() + 300
        while not Path({str(resume)!r}).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    return out
Trainer.train_step = train_step
"""


def test_no_save_trainings_share_a_save_dir(small_data, tmp_path):
    """Two --no-save trainings (benchmarks, sweeps) in one save dir, the second started
    while the first trains: both run to the end, as in stock fairseq; neither writes a
    lock or anything else there."""
    save = tmp_path / "ckpt"
    args = [small_data / "data-bin", "--arch", "rela_transformer_wmt_en_de", *TINY, "--save-dir", save, "--no-save"]
    paused, resume = tmp_path / "paused", tmp_path / "resume"
    first = subprocess.Popen(
        [sys.executable, "-c", fsa_code("train", paused_after_update_1(paused, resume)), *map(str, args)],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(paused, first)
        second = fsa("train", *args)
        assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
        assert "done training" in second.stdout
        assert first.poll() is None  # still in its first epoch while the second ran
        resume.touch()
        out, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, (out + err)[-3000:]
    assert "done training" in out
    assert sorted(save.iterdir()) == []


HOLD = """
import sys, time
from fairseq_sparse_attn.compat.save_dir_lock import lock_save_dir
lock_save_dir(sys.argv[1])
print("locked", flush=True)
time.sleep(120)
"""


def test_lock_is_released_by_sigterm(tmp_path):
    """scancel / kill: the lock file goes, and the process still dies of SIGTERM."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], env=env(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert json.loads((tmp_path / LOCK).read_text())["pid"] == holder.pid
        holder.send_signal(signal.SIGTERM)
        assert holder.wait(60) == -signal.SIGTERM
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert not (tmp_path / LOCK).exists()


HOLD_WITH_WORKER = """
import sys, time, multiprocessing
from fairseq_sparse_attn.compat import save_dir_lock
if sys.argv[2] == "without-hook":
    save_dir_lock._FORK_HOOK.append(True)  # the hook not registered: how it was
save_dir_lock.lock_save_dir(sys.argv[1])
child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,), daemon=True)
child.start()
print(child.pid, flush=True)
time.sleep(120)
"""


def test_a_restart_right_after_sigkill_is_not_held_up_by_the_workers(tmp_path):
    """A SIGKILLed trainer's DataLoader workers shared its lock file and kept the flock for
    seconds: an immediate restart was refused.  The forked child closes its copy."""
    from fairseq_sparse_attn.compat import save_dir_lock

    outcomes = {}
    for mode in ("with-hook", "without-hook"):
        save = tmp_path / mode
        save.mkdir()
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_WITH_WORKER, str(save), mode], env=env(), stdout=subprocess.PIPE, text=True
        )
        worker = int(holder.stdout.readline())
        try:
            holder.kill()
            holder.wait()
            assert os.path.exists(f"/proc/{worker}")  # the worker outlives its trainer
            try:
                save_dir_lock.SaveDirLock(str(save)).acquire().release()
                outcomes[mode] = "taken over"
            except save_dir_lock.SaveDirInUse:
                outcomes[mode] = "refused"
        finally:
            os.kill(worker, signal.SIGKILL)
    assert outcomes == {"with-hook": "taken over", "without-hook": "refused"}


# --- disk --------------------------------------------------------------------------------------

FULL_DISK = """
import errno, io, os
from fairseq_sparse_attn.compat import crash_safe_checkpoints

class FullDisk(io.FileIO):
    def write(self, data):
        if self.tell() + len(data) > 50000:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(data)

crash_safe_checkpoints.open_for_writing = lambda path: FullDisk(path, "wb")
"""


def test_full_disk_during_a_save(small_data, rela_run, tmp_path):
    """The disk fills while the checkpoint of update 3 is written: one line naming it, the
    partial file removed, the checkpoints of update 2 intact, no lock, no crash.pt."""
    save = tmp_path / "ckpt"
    shutil.copytree(rela_run, save)
    before = snapshot(save)
    args = [small_data / "data-bin", "--arch", "rela_transformer_wmt_en_de", *TINY, "--save-dir", save]
    args[args.index("--max-update") + 1] = "3"
    proc = fsa("train", *args, before=FULL_DISK)
    line = one_line_error(
        proc,
        "fsa-train: error: cannot write checkpoint ",
        "No space left on device (ENOSPC); the partial file was removed and",
    )
    assert "done training" not in proc.stdout, line
    assert snapshot(save) == before


# --- analysis outputs ---------------------------------------------------------------------------

ALIGN = ["align", FIXTURES / "data-bin", "-s", "en", "-t", "de", "--split", "test", "--no-progress", "--device", "cpu"]

KILL_IN_ALIGNMENTS = """
import builtins, os, signal
_open = builtins.open
def open_(file, mode="r", *args, **kwargs):
    f = _open(file, mode, *args, **kwargs)
    if "w" in mode and os.path.basename(str(file)) == "weights.awo.layer1.txt":
        f.write("0-0 1-")
        f.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    return f
builtins.open = open_
"""


def test_analysis_outputs_are_atomic(tmp_path):
    """fsa-analyze checks its inputs before anything is created; a run killed while it
    writes the alignment files leaves the previous outputs intact and no truncated file
    beside them; the next run replaces them whole and removes the killed run's folder."""
    out = tmp_path / "analysis" / "rela_g"
    proc = analyze(*ALIGN, "--path", tmp_path / "nope.pt", "--output-dir", out)
    one_line_error(proc, "fsa-analyze align: error: ", str(tmp_path / "nope.pt"), status=2)
    assert not (tmp_path / "analysis").exists()
    (tmp_path / "results.json").write_text("{}")
    proc = analyze(*ALIGN, "--path", tmp_path / "nope.pt", "--output-dir", tmp_path / "results.json")
    one_line_error(
        proc,
        "fsa-analyze align: error: ",
        f"--output-dir {tmp_path / 'results.json'} is a file, not a directory",
        status=2,
    )  # checked before the checkpoint

    ok = analyze(*ALIGN, "--path", FIXTURES / "rela_g.pt", "--output-dir", out)
    assert ok.returncode == 0, ok.stderr[-3000:]
    files = {p.relative_to(out): sha(p) for p in out.rglob("*") if p.is_file()}
    assert Path("align.json") in files and Path("alignments/weights.awo.layer1.txt") in files

    killed = analyze(*ALIGN, "--path", FIXTURES / "rela_i.pt", "--output-dir", out, before=KILL_IN_ALIGNMENTS)
    assert killed.returncode == -signal.SIGKILL
    assert {p.relative_to(out): sha(p) for p in out.rglob("*") if p.is_file()} == files
    left = [p for p in out.parent.iterdir() if p.name != "rela_g"]  # the killed run's staging
    assert len(left) == 1 and writer_of(left[0]) == (str(out.parent / ".rela_g"), writer_of(left[0])[1], HOST)
    assert (left[0] / "alignments" / "weights.awo.layer1.txt").read_text() == "0-0 1-"

    again = analyze(*ALIGN, "--path", FIXTURES / "rela_i.pt", "--output-dir", out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert [p.name for p in out.parent.iterdir()] == ["rela_g"]
    report = json.loads((out / "align.json").read_text())
    assert report["model"]["checkpoint"].endswith("rela_i.pt")
    assert sha(out / "align.json") != files[Path("align.json")]
