"""Issue 24 in this process: temporary files that name their writer, the save-dir lock, a
full disk during a save, the checkpoint record (dictionary hash) and the stock-checkpoint
rule of the resume guard, atomic ``fsa-analyze`` outputs.  The real commands:
tests/integration/test_trust.py; the table: docs/errors.md."""

import errno
import hashlib
import io
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from argparse import Namespace
from pathlib import Path

import pytest
import torch
from fairseq.data import Dictionary

import fairseq_sparse_attn.plugin  # noqa: F401  (installs the patches)
from fairseq_sparse_attn import writers
from fairseq_sparse_attn.analysis import results
from fairseq_sparse_attn.compat import crash_safe_checkpoints as safe
from fairseq_sparse_attn.compat import save_dir_lock
from fairseq_sparse_attn.compat.checkpoint_record import DictionaryMismatch, check_dictionaries, dictionary_digest
from fairseq_sparse_attn.compat.resume_config_check import check_against_checkpoint
from fairseq_sparse_attn.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
HOST = socket.gethostname()


def dead_pid():
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


# --- temporary files that name their writer --------------------------------------------


def test_temporary_name_names_its_writer(tmp_path):
    name = writers.temporary_name(str(tmp_path / "checkpoint_last.pt"))
    assert name == f"{tmp_path}/checkpoint_last.pt.{os.getpid()}@{HOST}.tmp"
    assert writers.writer_of(name) == (str(tmp_path / "checkpoint_last.pt"), os.getpid(), HOST)
    assert writers.writer_of(str(tmp_path / "checkpoint_last.pt.tmp")) is None


def test_writer_gone_only_when_its_process_ended(tmp_path, sleeper):
    live = writers.temporary_name(str(tmp_path / "a.pt"), pid=sleeper.pid)
    dead = writers.temporary_name(str(tmp_path / "b.pt"), pid=dead_pid())
    remote = writers.temporary_name(str(tmp_path / "c.pt"), pid=dead_pid(), host="elsewhere")
    assert writers.writer_gone(live) is False
    assert writers.writer_gone(dead) is True
    assert writers.writer_gone(remote) is False  # cannot be checked from here: kept
    sleeper.kill()
    sleeper.wait()
    assert writers.writer_gone(live) is True
    # stock fairseq's NAME.tmp (no writer in the name): gone when no process has it open
    legacy = tmp_path / "d.pt.tmp"
    with open(legacy, "wb") as f:
        f.write(b"x")
        assert writers.writer_gone(str(legacy)) is False
    assert writers.writer_gone(str(legacy)) is True


def test_restart_removes_only_temporary_files_whose_writer_is_gone(tmp_path, sleeper, caplog):
    """Issue 24: a second start deleted every *.tmp, including a running job's."""
    files = {
        "live": writers.temporary_name(str(tmp_path / "checkpoint_last.pt"), pid=sleeper.pid),
        "dead": writers.temporary_name(str(tmp_path / "checkpoint_best.pt"), pid=dead_pid()),
        "remote": writers.temporary_name(str(tmp_path / "checkpoint_3_25.pt"), host="node7"),
        "stock_open": str(tmp_path / "checkpoint_2_10.pt.tmp"),
        "stock_closed": str(tmp_path / "checkpoint_1_5.pt.tmp"),
        "not_a_checkpoint": writers.temporary_name(str(tmp_path / "notes.txt"), pid=dead_pid()),
    }
    for path in files.values():
        Path(path).write_bytes(b"partial")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; f = open(sys.argv[1], 'ab'); print('open', flush=True); time.sleep(120)",
            files["stock_open"],
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        with caplog.at_level(logging.WARNING):
            removed = safe.remove_stale_tmp(str(tmp_path))
    finally:
        holder.kill()
        holder.wait()
    assert sorted(removed) == sorted([files["dead"], files["stock_closed"]])
    left = {p.name for p in tmp_path.iterdir()}
    assert left == {Path(files[k]).name for k in ("live", "remote", "stock_open", "not_a_checkpoint")}
    assert f"removed {files['dead']}: a checkpoint save that was interrupted" in caplog.text
    assert f"kept {files['live']}: a running process may still be writing it" in caplog.text


# --- a full disk during a save -----------------------------------------------------------


class FullDisk(io.FileIO):
    """A file that takes ``room`` bytes, then fails as a full disk does."""

    room = 2000

    def write(self, data):
        if self.tell() + len(data) > self.room:
            super().write(bytes(data)[: max(0, self.room - self.tell())])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(data)


def test_full_disk_during_save_removes_the_partial_file(tmp_path, monkeypatch):
    from fairseq import checkpoint_utils

    last = tmp_path / "checkpoint_last.pt"
    checkpoint_utils.torch_persistent_save({"w": torch.zeros(10)}, str(last))
    before = last.read_bytes()
    monkeypatch.setattr(safe, "open_for_writing", lambda path: FullDisk(path, "wb"))
    with pytest.raises(safe.CheckpointError) as e:
        checkpoint_utils.torch_persistent_save({"w": torch.ones(100000)}, str(last))
    assert str(e.value) == (
        f"cannot write checkpoint {last}: No space left on device (ENOSPC); "
        "the partial file was removed and checkpoint_last.pt is unchanged"
    )
    assert isinstance(e.value, UsageError)  # the fsa-* commands print it as one line
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint_last.pt"]
    assert last.read_bytes() == before
    # a first save that fails leaves nothing
    with pytest.raises(safe.CheckpointError, match="checkpoint_1_5.pt was not written"):
        checkpoint_utils.torch_persistent_save({"w": torch.ones(100000)}, str(tmp_path / "checkpoint_1_5.pt"))
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint_last.pt"]


def test_full_disk_during_the_copy_to_checkpoint_last(tmp_path, monkeypatch):
    from fairseq import checkpoint_utils

    src, last = tmp_path / "checkpoint_1_5.pt", tmp_path / "checkpoint_last.pt"
    src.write_bytes(b"new" * 10000)
    last.write_bytes(b"old")

    def copyfile(a, b):
        with open(a, "rb") as f, open(b, "wb") as g:
            g.write(f.read()[:100])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(shutil, "copyfile", copyfile)
    with pytest.raises(
        safe.CheckpointError,
        match=r"cannot write checkpoint .*checkpoint_last\.pt: "
        r"No space left on device \(ENOSPC\)",
    ):
        checkpoint_utils.PathManager.copy(str(src), str(last), overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_1_5.pt", "checkpoint_last.pt"]
    assert last.read_bytes() == b"old"


# --- checkpoint paths that are not checkpoints -------------------------------------------


def test_damaged_last_checkpoint_resumes_from_the_newest_intact_one(tmp_path, caplog):
    """checkpoint_last.pt damaged (a crash during a copy by another tool, a full disk):
    the resume takes the newest checkpoint that loads, named in a warning, never an older
    one (that would lose epochs) nor a newer damaged one."""
    from types import SimpleNamespace

    from fairseq import checkpoint_utils

    class LoadCalled(Exception):
        pass

    loaded = []

    def load(path, *args, **kwargs):
        loaded.append(path)
        raise LoadCalled

    for age, name in enumerate(["checkpoint2.pt", "checkpoint1.pt", "checkpoint3.pt", "checkpoint4.pt"]):
        if name == "checkpoint4.pt":
            (tmp_path / name).write_bytes(b"PK\x03\x04 cut short")
        else:
            torch.save({"model": {}, "args": None}, tmp_path / name)
        os.utime(tmp_path / name, (1000 + age, 1000 + age))  # 2, 1, 3, 4: mtime order, not the names'
    (tmp_path / "checkpoint_last.pt").write_bytes(b"PK\x03\x04 cut short")
    cfg = SimpleNamespace(
        save_dir=str(tmp_path),
        restore_file="checkpoint_last.pt",
        finetune_from_model=None,
        reset_optimizer=False,
        reset_lr_scheduler=False,
        reset_meters=False,
        reset_dataloader=False,
        optimizer_overrides="{}",
    )
    with caplog.at_level(logging.WARNING), pytest.raises(LoadCalled):
        checkpoint_utils.load_checkpoint(cfg, SimpleNamespace(checkpoint_suffix="", load_checkpoint=load))
    assert loaded == [str(tmp_path / "checkpoint3.pt")]
    assert f"resuming from {tmp_path}/checkpoint3.pt, the newest checkpoint" in caplog.text
    assert cfg.restore_file == "checkpoint_last.pt"  # the flag as given, for the next load


def test_paths_that_are_not_checkpoint_files(tmp_path):
    (tmp_path / "checkpoint_best.pt").write_bytes(b"")
    with pytest.raises(
        safe.CheckpointError,
        match=f"{tmp_path} is a directory, not a checkpoint "
        f"file: pass a file in it, e.g. {tmp_path}/checkpoint_best.pt",
    ):
        safe.check_checkpoint_path(str(tmp_path))
    with pytest.raises(safe.CheckpointError, match="nope.pt does not exist"):
        safe.check_checkpoint_path(str(tmp_path / "nope.pt"))
    assert safe.checkpoint_problem(str(tmp_path)) == "is a directory, not a checkpoint file"
    assert safe.not_a_checkpoint(torch.zeros(3)) == "torch reads a Tensor, not a dict"
    assert safe.not_a_checkpoint({"encoder.w": 1}) == (
        "no 'model' state dict and no 'cfg'/'args' configuration; keys: encoder.w"
    )
    assert safe.not_a_checkpoint({"model": {}, "cfg": {"model": None}}) is None


# --- the save-dir lock ---------------------------------------------------------------------


def test_lock_refuses_a_second_writer(tmp_path):
    """flock conflicts between two opens of the lock file, even in one process."""
    first = save_dir_lock.SaveDirLock(str(tmp_path)).acquire()
    record = json.loads((tmp_path / ".fsa-train.lock").read_text())
    assert (record["pid"], record["host"]) == (os.getpid(), HOST)
    with pytest.raises(save_dir_lock.SaveDirInUse) as e:
        save_dir_lock.SaveDirLock(str(tmp_path)).acquire()
    message = str(e.value)
    assert message.startswith(
        f"--save-dir {tmp_path} is in use by another training: pid {os.getpid()} on host {HOST}, started "
    )
    assert f"(lock file {tmp_path}/.fsa-train.lock)" in message and "\n" not in message
    first.release()
    assert not (tmp_path / ".fsa-train.lock").exists()
    save_dir_lock.SaveDirLock(str(tmp_path)).acquire().release()
    assert not (tmp_path / ".fsa-train.lock").exists()


def test_lock_of_a_gone_training_is_taken_over_with_a_notice(tmp_path, caplog):
    """The file a SIGKILLed training leaves (its flock went with it)."""
    gone = dead_pid()
    (tmp_path / ".fsa-train.lock").write_text(json.dumps({"pid": gone, "host": HOST, "started": 0}))
    with caplog.at_level(logging.WARNING):
        lock = save_dir_lock.SaveDirLock(str(tmp_path)).acquire()
    try:
        notices = [r.getMessage() for r in caplog.records if "taking the lock over" in r.getMessage()]
        assert len(notices) == 1 and f"pid {gone} on host {HOST}" in notices[0]
        assert json.loads((tmp_path / ".fsa-train.lock").read_text())["pid"] == os.getpid()
    finally:
        lock.release()


def test_lock_written_on_another_host_is_not_taken_over(tmp_path):
    (tmp_path / ".fsa-train.lock").write_text(json.dumps({"pid": 1234, "host": "gpu-node-3"}))
    with pytest.raises(
        save_dir_lock.SaveDirInUse,
        match="pid 1234 on host gpu-node-3 .*written on another host by a plugin version that does not refresh "
        "it.*remove the file if it has ended",
    ):
        save_dir_lock.SaveDirLock(str(tmp_path)).acquire()


def test_lock_of_another_host_is_taken_over_once_it_is_no_longer_refreshed(tmp_path, caplog, monkeypatch):
    """A job requeued onto another node after its node died was refused until the file was
    removed by hand: a holder refreshes the file's time; one that stopped is gone."""
    lock_file = tmp_path / ".fsa-train.lock"
    lock_file.write_text(json.dumps({"pid": 1234, "host": "gpu-node-3", "heartbeat_s": 30}))
    fresh = time.time() - 60
    os.utime(lock_file, (fresh, fresh))
    with pytest.raises(save_dir_lock.SaveDirInUse, match=r"refreshed 6\d s ago .*start again after 1[12]\d s"):
        save_dir_lock.SaveDirLock(str(tmp_path)).acquire()
    stale = time.time() - save_dir_lock.STALE_AFTER_S - 5
    os.utime(lock_file, (stale, stale))
    with caplog.at_level(logging.WARNING):
        lock = save_dir_lock.SaveDirLock(str(tmp_path)).acquire()
    try:
        notices = [r.getMessage() for r in caplog.records if "taking the lock over" in r.getMessage()]
        assert (
            len(notices) == 1 and "pid 1234 on host gpu-node-3" in notices[0] and "has not refreshed it" in notices[0]
        )
        record = json.loads(lock_file.read_text())
        assert record["pid"] == os.getpid() and record["heartbeat_s"] == save_dir_lock.HEARTBEAT_S
        # the holder refreshes it (HEARTBEAT_S shortened for the test)
        old = time.time() - 1000
        os.utime(lock_file, (old, old))
        lock._refreshing.set()
        monkeypatch.setattr(save_dir_lock, "HEARTBEAT_S", 0.05)
        lock._refreshing = threading.Event()
        threading.Thread(target=lock._refresh, args=(lock.path, lock._refreshing), daemon=True).start()
        time.sleep(0.3)
        assert time.time() - lock_file.stat().st_mtime < 5
    finally:
        lock.release()
    assert not lock_file.exists()


def test_lock_without_flock_decides_by_the_recorded_pid(tmp_path, sleeper, monkeypatch):
    """A file system without flock (ENOLCK): a live recorded pid holds, a dead one not."""
    import fcntl

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    lock_file = tmp_path / ".fsa-train.lock"
    lock_file.write_text(json.dumps({"pid": sleeper.pid, "host": HOST}))
    with pytest.raises(save_dir_lock.SaveDirInUse, match=f"pid {sleeper.pid} on host {HOST}"):
        save_dir_lock.SaveDirLock(str(tmp_path)).acquire()
    lock_file.write_text(json.dumps({"pid": dead_pid(), "host": HOST}))
    save_dir_lock.SaveDirLock(str(tmp_path)).acquire().release()


TRAIN_MAIN = """
def main(cfg):
    checkpoint_utils.verify_checkpoint_directory(cfg.checkpoint.save_dir)
"""


def test_forked_worker_does_not_keep_the_save_dir_locked(tmp_path):
    """A DataLoader worker is a fork of the trainer and would inherit the lock's open file,
    keeping the flock after a SIGKILL of the trainer (a restart was refused for seconds).
    The child closes its copy; the parent still holds the lock."""
    import signal

    sigterm = signal.getsignal(signal.SIGTERM)  # the lock installs its SIGTERM release: put back after
    lock = save_dir_lock.lock_save_dir(str(tmp_path))
    try:
        pid = os.fork()
        if pid == 0:  # the child: its copy closed, and the flock is the parent's alone
            os._exit(0 if lock.fd is None else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert lock.fd is not None
        with pytest.raises(save_dir_lock.SaveDirInUse):
            save_dir_lock.SaveDirLock(str(tmp_path)).acquire()
    finally:
        save_dir_lock.release_all()
        signal.signal(signal.SIGTERM, sigterm)
    assert not (tmp_path / ".fsa-train.lock").exists()


@pytest.mark.parametrize("no_save", [False, True])
def test_lock_only_for_a_training_that_saves(tmp_path, monkeypatch, no_save):
    """fairseq_cli.train's main asks for the save dir's lock: taken unless its config says
    --no-save (nothing is written there; stock fairseq lets such runs share the dir); a
    call from anywhere else locks as before."""
    from types import SimpleNamespace

    from fairseq import checkpoint_utils

    taken = []
    monkeypatch.setattr(save_dir_lock, "lock_save_dir", taken.append)
    fairseq_cli_train = {"checkpoint_utils": checkpoint_utils, "train": print, "validate_and_save": print}
    exec(TRAIN_MAIN, fairseq_cli_train)
    cfg = SimpleNamespace(checkpoint=SimpleNamespace(save_dir=str(tmp_path / "ckpt"), no_save=no_save))
    fairseq_cli_train["main"](cfg)
    assert taken == ([] if no_save else [str(tmp_path / "ckpt")])
    assert (tmp_path / "ckpt").is_dir()  # fairseq's own check still ran
    checkpoint_utils.verify_checkpoint_directory(str(tmp_path / "other"))  # not from a training
    assert taken[-1] == str(tmp_path / "other")


def test_save_dir_that_is_a_file(tmp_path):
    path = tmp_path / "ckpt"
    path.write_text("x")
    with pytest.raises(UsageError, match=f"--save-dir {path} is a file, not a directory"):
        save_dir_lock.check_save_dir(str(path))
    save_dir_lock.check_save_dir(str(tmp_path / "new"))  # missing: fairseq creates it


# --- the checkpoint record -------------------------------------------------------------


def digest_of_dict_file(path):
    """sha256 over fairseq's four specials and the file's symbols, one per line, written out
    independently of fairseq's Dictionary."""
    symbols = ["<s>", "<pad>", "</s>", "<unk>"]
    symbols += [line.rsplit(" ", 1)[0] for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    return hashlib.sha256("".join(s + "\n" for s in symbols).encode("utf-8")).hexdigest(), len(symbols)


class Task:
    def __init__(self, data, src, tgt):
        from types import SimpleNamespace

        self.cfg = SimpleNamespace(data=str(data), source_lang=src, target_lang=tgt)
        self.source_dictionary = Dictionary.load(str(Path(data) / f"dict.{src}.txt"))
        self.target_dictionary = Dictionary.load(str(Path(data) / f"dict.{tgt}.txt"))


def test_dictionary_record_and_check(tmp_path):
    data = tmp_path / "data-bin"
    shutil.copytree(REPO / "tests" / "fixtures" / "checkpoints" / "data-bin", data)
    task = Task(data, "en", "de")
    want, size = digest_of_dict_file(data / "dict.de.txt")
    assert dictionary_digest(task.target_dictionary) == want and len(task.target_dictionary) == size
    state = {
        "fsa_record": {
            "dictionaries": {
                "source": {
                    "lang": "en",
                    "size": len(task.source_dictionary),
                    "sha256": dictionary_digest(task.source_dictionary),
                },
                "target": {"lang": "de", "size": size, "sha256": want},
            }
        }
    }
    check_dictionaries("model.pt", state, task)  # the same data-bin
    check_dictionaries("old.pt", {"model": {}}, task)  # no record: nothing to check
    lines = (data / "dict.de.txt").read_text().splitlines()
    lines[0], lines[1] = lines[1], lines[0]  # same size, two ids swapped
    (data / "dict.de.txt").write_text("\n".join(lines) + "\n")
    with pytest.raises(DictionaryMismatch) as e:
        check_dictionaries("model.pt", state, Task(data, "en", "de"))
    assert str(e.value).startswith(
        f"{data}/dict.de.txt is not the target dictionary model.pt was "
        f"trained with: both have {size} entries, but other symbols"
    )
    (data / "dict.de.txt").write_text("\n".join(lines + ["extra 1"]) + "\n")
    with pytest.raises(DictionaryMismatch, match=f"it has {size + 1} entries, the checkpoint's had {size}"):
        check_dictionaries("model.pt", state, Task(data, "en", "de"))


def test_a_swapped_direction_is_refused_even_where_the_dictionaries_match(tmp_path):
    """With a joined dictionary a de->en task reads an en->de model's ids as its own: the
    record's languages, swapped, are one line naming -s/-t; other names are allowed."""
    data = tmp_path / "joined"
    data.mkdir()
    joined = (REPO / "tests" / "fixtures" / "checkpoints" / "data-bin" / "dict.en.txt").read_text()
    for lang in ("en", "de", "eng", "deu"):
        (data / f"dict.{lang}.txt").write_text(joined)
    task = Task(data, "en", "de")
    digest = dictionary_digest(task.source_dictionary)
    entry = {"size": len(task.source_dictionary), "sha256": digest}
    state = {"fsa_record": {"dictionaries": {"source": {"lang": "en", **entry}, "target": {"lang": "de", **entry}}}}
    check_dictionaries("model.pt", state, task)
    check_dictionaries("model.pt", state, Task(data, "eng", "deu"))  # renamed, not swapped
    for src, tgt in (("de", "en"), ("de", "deu"), ("eng", "en")):
        with pytest.raises(DictionaryMismatch) as e:
            check_dictionaries("model.pt", state, Task(data, src, tgt))
        assert str(e.value).startswith(
            f"-s {src} -t {tgt}: model.pt was trained en->de (its recorded source language is en)"
        )


def test_the_analysis_loader_refuses_a_swapped_direction_of_a_checkpoint_without_a_record():
    """fsa-analyze / fsa-contrastive wrote -s/-t into the saved task before the direction
    check read it, so an en->de checkpoint without a record (a stock fairseq one, an older
    plugin one) was analysed as de->en with nothing said, where fsa-generate refused."""
    from fairseq_sparse_attn.analysis.loading import load_checkpoint

    fixtures = REPO / "tests" / "fixtures" / "checkpoints"
    path, data = str(fixtures / "rela_g.pt"), str(fixtures / "data-bin")
    with pytest.raises(DictionaryMismatch) as e:
        load_checkpoint(path, data, "de", "en")
    assert str(e.value).startswith(f"-s de -t en: {path} was trained en->de (its saved task's source language is en)")
    loaded = load_checkpoint(path, data, "en", "de")
    assert (loaded.task.cfg.source_lang, loaded.task.cfg.target_lang) == ("en", "de")


def test_stock_checkpoint_counts_as_softmax_for_the_resume_guard():
    """Issue 24: a stock transformer save dir restarted with ReLA flags trained on as ReLA."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    from tests.helpers import model_args

    stock = Namespace(arch="transformer", encoder_embed_dim=16, dropout=0.1)
    rela = model_args("rela_transformer_wmt_en_de")
    plugin = ARCH_MODEL_REGISTRY["rela_transformer_wmt_en_de"]
    with pytest.raises(UsageError) as e:
        check_against_checkpoint("ckpt/checkpoint_last.pt", stock, rela, plugin)
    message = str(e.value)
    assert message.startswith(
        "ckpt/checkpoint_last.pt (a stock fairseq transformer checkpoint: "
        "softmax attention) was trained with other attention options"
    )
    assert "--attn-activation: checkpoint 'softmax', given 'relu'" in message
    assert "--attn-output-norm: checkpoint 'none', given 'gated_rmsnorm'" in message
    # the plugin's softmax preset computes what the stock model computes: resumed
    check_against_checkpoint("c.pt", stock, model_args("softmax_transformer_wmt_en_de"), plugin)
    # stock on stock: not the plugin's business
    check_against_checkpoint("c.pt", stock, Namespace(arch="transformer"), ARCH_MODEL_REGISTRY["transformer"])
    # the converse: a ReLA checkpoint restarted with a stock --arch
    with pytest.raises(UsageError, match="--attn-activation: checkpoint 'relu', given 'softmax'"):
        check_against_checkpoint("c.pt", rela, Namespace(arch="transformer"), ARCH_MODEL_REGISTRY["transformer"])
    # --allow-attention-change resumes anyway, with a plugin --arch or a stock one
    stock_class = ARCH_MODEL_REGISTRY["transformer"]
    check_against_checkpoint("c.pt", rela, Namespace(arch="transformer", allow_attention_change=True), stock_class)
    rela.allow_attention_change = True
    check_against_checkpoint("c.pt", stock, rela, plugin)


def test_resume_guard_runs_before_a_resume_and_not_for_a_fresh_optimizer(tmp_path):
    """Trainer.load_checkpoint compares the attention options before fairseq loads anything
    when the optimizer state is kept (a resume); --reset-optimizer starts a new training
    from the weights, where a changed attention is the point."""
    from fairseq.trainer import Trainer

    from tests.helpers import model_args

    class FairseqLoadBegan(Exception):
        pass

    rela = model_args("rela_transformer_wmt_en_de")
    rela.arch = "rela_transformer_wmt_en_de"

    class TrainerStub:
        cfg = Namespace(model=rela)
        task = None

        @property
        def data_parallel_world_size(self):  # the first thing fairseq's own load reads
            raise FairseqLoadBegan

    path = tmp_path / "checkpoint_last.pt"
    torch.save({"args": Namespace(arch="transformer", encoder_embed_dim=16)}, path)
    with pytest.raises(UsageError, match="a stock fairseq transformer checkpoint: softmax attention"):
        Trainer.load_checkpoint(TrainerStub(), str(path), False)
    with pytest.raises(FairseqLoadBegan):
        Trainer.load_checkpoint(TrainerStub(), str(path), True)


# --- atomic fsa-analyze outputs ----------------------------------------------------------


def write_some(out, text):
    out.json("a.json", {"v": text})
    (out / "alignments").mkdir()
    (out / "alignments" / f"{text}.txt").write_text(text)
    out.wrote(out / "alignments", "1 alignment file")


def test_outputs_appear_whole_and_only_on_success(tmp_path, capsys):
    target = tmp_path / "results" / "run"
    with results.committed_outputs():
        out = results.Output(target)
        write_some(out, "first")
        assert not target.exists()  # staged beside it until the command succeeded
        staging = out.staging
        assert staging.parent == target.parent and staging.is_dir()
        assert capsys.readouterr().out == ""
    assert not staging.exists()
    assert sorted(p.name for p in target.iterdir()) == ["a.json", "alignments"]
    assert capsys.readouterr().out == f"wrote {target}/a.json\nwrote {target}/alignments (1 alignment file)\n"
    # a second run into the same directory: its files replace the old ones whole, files of
    # other commands stay, a stale alignment file of the first run goes with its folder
    (target / "stats.json").write_text("other command")
    with results.committed_outputs():
        write_some(results.Output(target), "second")
    assert sorted(p.name for p in target.iterdir()) == ["a.json", "alignments", "stats.json"]
    assert [p.name for p in (target / "alignments").iterdir()] == ["second.txt"]
    assert json.loads((target / "a.json").read_text())["v"] == "second"
    assert sorted(p.name for p in target.parent.iterdir()) == ["run"]
    # a failing command leaves the previous outputs as they were and no staging folder
    before = {p: p.read_bytes() for p in target.rglob("*") if p.is_file()}
    with pytest.raises(ValueError):
        with results.committed_outputs():
            write_some(results.Output(target), "third")
            raise ValueError("bad gold file")
    assert {p: p.read_bytes() for p in target.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in target.parent.iterdir()) == ["run"]


def test_nothing_is_created_for_a_command_that_fails_on_its_inputs(tmp_path):
    target = tmp_path / "new" / "out"
    with pytest.raises(ValueError):
        with results.committed_outputs():
            results.Output(target)
            raise ValueError("--path nope.pt: checkpoint not found")
    assert not (tmp_path / "new").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=f"--output-dir {tmp_path}/file is a file, not a directory"):
        results.Output(tmp_path / "file")
    with pytest.raises(ValueError, match=f"--output-dir {tmp_path}/file/out: {tmp_path}/file is a file"):
        results.Output(tmp_path / "file" / "out")


def test_staging_folder_of_a_killed_run_is_removed_once_its_writer_is_gone(tmp_path, sleeper):
    target = tmp_path / "out"
    dead = Path(writers.temporary_name(tmp_path / ".out", pid=dead_pid()))
    live = Path(writers.temporary_name(tmp_path / ".out", pid=sleeper.pid))
    other = Path(writers.temporary_name(tmp_path / ".outer", pid=dead_pid()))
    for d in (dead, live, other):
        d.mkdir()
        (d / "align.json").write_text("{")
    with results.committed_outputs():
        results.Output(target).json("a.json", {})
    assert not dead.exists()
    assert live.exists() and other.exists()  # a running writer's; another target's


def recorded_fixture_and_swapped_data(tmp_path):
    """The rela_g fixture checkpoint with its dictionary record, and a copy of its data-bin
    whose source dictionary has two symbols swapped (same size)."""
    fixtures = REPO / "tests" / "fixtures" / "checkpoints"
    state = torch.load(fixtures / "rela_g.pt", map_location="cpu", weights_only=False)
    state["fsa_record"] = {
        "version": 1,
        "dictionaries": {
            side: dict(
                zip(("sha256", "size"), digest_of_dict_file(fixtures / "data-bin" / f"dict.{lang}.txt")), lang=lang
            )
            for side, lang in (("source", "en"), ("target", "de"))
        },
    }
    path = tmp_path / "model.pt"
    torch.save(state, path)
    data = tmp_path / "data-bin"
    shutil.copytree(fixtures / "data-bin", data)
    lines = (data / "dict.en.txt").read_text().splitlines()
    lines[2], lines[3] = lines[3], lines[2]
    (data / "dict.en.txt").write_text("\n".join(lines) + "\n")
    return path, fixtures / "data-bin", data


def test_fsa_analyze_refuses_other_dictionaries(tmp_path):
    """fsa-analyze loads checkpoints its own way: the same check applies."""
    from fairseq_sparse_attn.analysis.loading import load_checkpoint

    path, own, data = recorded_fixture_and_swapped_data(tmp_path)
    assert load_checkpoint(str(path), str(own), "en", "de").model is not None
    with pytest.raises(
        DictionaryMismatch, match=f"{data}/dict.en.txt is not the source dictionary {path} was trained with: both have"
    ):
        load_checkpoint(str(path), str(data), "en", "de")


def test_a_task_set_up_from_the_checkpoint_is_checked_too(tmp_path):
    """fairseq-validate lets load_model_ensemble_and_task set the task up from the
    checkpoint (task=None) with --data as an override: the dictionaries it reads are checked."""
    from fairseq import checkpoint_utils

    path, own, data = recorded_fixture_and_swapped_data(tmp_path)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides={"data": str(own)})
    assert len(models) == 1 and len(task.source_dictionary) == 32
    with pytest.raises(DictionaryMismatch, match=f"{data}/dict.en.txt is not the source dictionary {path}"):
        checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides={"data": str(data)})


def test_outputs_outside_a_command_are_written_in_place(tmp_path, capsys):
    out = results.Output(tmp_path / "direct")
    out.json("a.json", {"v": 1})
    assert (tmp_path / "direct" / "a.json").is_file()
    assert capsys.readouterr().out == f"wrote {tmp_path}/direct/a.json\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["direct"]


def test_restore_file_and_pretrained_model_that_do_not_exist(tmp_path):
    """Stock fairseq trained from scratch ("No existing checkpoint found") for a
    --restore-file that is not there, and raised a bare ValueError for a missing
    --finetune-from-model; both are one line now, before the trainer is touched."""
    from types import SimpleNamespace

    from fairseq import checkpoint_utils

    trainer = SimpleNamespace(checkpoint_suffix="")  # nothing else of it may be used
    cfg = SimpleNamespace(save_dir=str(tmp_path), restore_file=str(tmp_path / "best.pt"), finetune_from_model=None)
    with pytest.raises(safe.CheckpointError, match=f"--restore-file {tmp_path}/best.pt does not exist"):
        checkpoint_utils.load_checkpoint(cfg, trainer)
    cfg = SimpleNamespace(
        save_dir=str(tmp_path), restore_file="checkpoint_last.pt", finetune_from_model=str(tmp_path / "pretrained.pt")
    )
    with pytest.raises(safe.CheckpointError, match=f"--finetune-from-model {tmp_path}/pretrained.pt does not exist"):
        checkpoint_utils.load_checkpoint(cfg, trainer)


@pytest.mark.parametrize("save_dir", [None, "tmp"])
@pytest.mark.parametrize("reset", ["reset_optimizer", "reset_lr_scheduler", "reset_meters", "reset_dataloader"])
def test_finetune_with_a_reset_flag_gets_fairseqs_own_error(tmp_path, save_dir, reset):
    """--finetune-from-model with a reset flag: fairseq's own "can not be set together"
    ValueError, whether or not the model exists and also without a save dir (fairseq's
    test_train::TestLoadCheckpoint passes save_dir=None; the wrapper once raised
    TypeError there)."""
    from types import SimpleNamespace

    from fairseq import checkpoint_utils

    cfg = SimpleNamespace(
        save_dir=str(tmp_path) if save_dir else None,
        restore_file="checkpoint_last.pt",
        finetune_from_model=str(tmp_path / "missing.pt"),
        reset_optimizer=False,
        reset_lr_scheduler=False,
        reset_meters=False,
        reset_dataloader=False,
        optimizer_overrides="{}",
    )
    setattr(cfg, reset, True)
    with pytest.raises(ValueError, match="--finetune-from-model can not be set together with either --reset-optimizer"):
        checkpoint_utils.load_checkpoint(cfg, SimpleNamespace(checkpoint_suffix=""))
