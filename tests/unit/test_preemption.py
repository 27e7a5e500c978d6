"""compat/preemption.py without training: the signal flag, the handlers it installs and
gives back, the SLURM requeue decision (scontrol stood in for), finding fairseq's training
loop.  The real runs (a SLURM job preempted and requeued, scancel, torchrun restarts) are
in tests/integration/test_cluster.py."""

import os
import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest

from fairseq_sparse_attn.compat import patches_off, preemption


@pytest.fixture
def fresh_state(monkeypatch):
    monkeypatch.setattr(preemption, "_STATE", preemption._State())
    yield preemption._STATE
    preemption.restore_handlers()


def test_a_signal_only_sets_the_flag_and_the_handlers_are_given_back(fresh_state):
    before = {s: signal.getsignal(s) for s in preemption.SIGNALS}
    assert preemption.install_handlers()
    os.kill(os.getpid(), signal.SIGUSR1)  # would end the process without the handler
    os.kill(os.getpid(), signal.SIGTERM)  # a second signal keeps the first
    assert fresh_state.signum == signal.SIGUSR1
    trainer = SimpleNamespace(data_parallel_world_size=1)
    assert preemption.agreed_signal(trainer) == signal.SIGUSR1
    preemption.restore_handlers()
    assert {s: signal.getsignal(s) for s in preemption.SIGNALS} == before


def test_no_signal_no_stop(fresh_state):
    assert preemption.agreed_signal(SimpleNamespace(data_parallel_world_size=1)) == 0


class FakeScontrol:
    def __init__(self, show="JobId=42 Requeue=1 Restarts=0", requeue_rc=0, requeue_err=""):
        self.show, self.requeue_rc, self.requeue_err, self.calls = show, requeue_rc, requeue_err, []

    def __call__(self, cmd, **kwargs):
        self.calls.append(cmd)
        if cmd[1] == "show":
            return subprocess.CompletedProcess(cmd, 0, self.show + "\n", "")
        return subprocess.CompletedProcess(cmd, self.requeue_rc, "", self.requeue_err)


def test_requeue_asks_scontrol_for_this_job():
    run = FakeScontrol()
    assert preemption.slurm_requeue({"SLURM_JOB_ID": "42"}, run=run) is None
    assert run.calls[-1] == ["scontrol", "requeue", "42"]


def test_no_requeue_outside_slurm_or_with_no_requeue():
    run = FakeScontrol(show="JobId=42 Requeue=0 Restarts=0")
    assert "not a SLURM job" in preemption.slurm_requeue({}, run=run)
    assert run.calls == []
    line = preemption.slurm_requeue({"SLURM_JOB_ID": "42"}, run=run)
    assert "--no-requeue" in line and "same SAVE_DIR" in line
    assert ["scontrol", "requeue", "42"] not in run.calls


def test_a_failed_requeue_is_one_line_with_scontrol_s_reason():
    run = FakeScontrol(requeue_rc=1, requeue_err="scontrol: error: Only batch jobs are accepted or processed\n")
    line = preemption.slurm_requeue({"SLURM_JOB_ID": "7"}, run=run)
    assert line.startswith("scontrol requeue 7 failed (scontrol: error: Only batch jobs")
    assert "\n" not in line


def test_after_a_sigusr1_no_rank_exits_before_the_requeue_and_the_requeue_s_sigterm_passes(fresh_state, monkeypatch):
    """SLURM sends SIGTERM to every task as soon as `scontrol requeue` returns: the master
    rank still logs the requeue and exits with 138; every rank waits for the others after
    the requeue (srun --kill-on-bad-exit kills the rest when the first rank exits)."""
    events = []

    def requeue():
        events.append("requeue")
        # without the exit's handler, the SIGTERM below would end this test's process: a clear
        # failure first
        assert signal.getsignal(signal.SIGTERM) is preemption._while_exiting
        os.kill(os.getpid(), signal.SIGTERM)  # SLURM ending the run
        return None

    monkeypatch.setattr(preemption, "slurm_requeue", requeue)
    monkeypatch.setattr(preemption, "_barrier", lambda trainer: events.append("barrier"))
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    before = {s: signal.getsignal(s) for s in preemption.SIGNALS}
    assert preemption.install_handlers()
    with pytest.raises(SystemExit) as ended:
        preemption._exit(None, signal.SIGUSR1, True, "ckpt/checkpoint_last.pt", trainer=None)
    assert ended.value.code == 138
    assert events == ["requeue", "barrier"]
    assert fresh_state.late_signals == [signal.SIGTERM]
    events.clear()
    with pytest.raises(SystemExit) as ended:  # another rank: no requeue, the same wait
        preemption._exit(None, signal.SIGUSR1, False, "ckpt/checkpoint_last.pt", trainer=None)
    assert ended.value.code == 138 and events == ["barrier"]
    for s, handler in before.items():
        signal.signal(s, handler)


def test_after_a_sigterm_no_requeue_and_no_second_wait(fresh_state, monkeypatch):
    events = []
    monkeypatch.setattr(preemption, "slurm_requeue", lambda: events.append("requeue"))
    monkeypatch.setattr(preemption, "_barrier", lambda trainer: events.append("barrier"))
    before = {s: signal.getsignal(s) for s in preemption.SIGNALS}
    assert preemption.install_handlers()
    with pytest.raises(SystemExit) as ended:
        preemption._exit(None, signal.SIGTERM, True, "ckpt/checkpoint_last.pt", trainer=None)
    assert ended.value.code == 143 and events == []
    assert {s: signal.getsignal(s) for s in preemption.SIGNALS} == before


def test_the_exit_s_status_stands_when_a_log_handler_s_stream_is_closed(fresh_state, monkeypatch):
    """A root handler whose stream is closed (its log file or pipe gone) made the exit's
    flush raise ValueError in place of the exit with 128 + signum."""
    import io
    import logging

    monkeypatch.setattr(preemption, "slurm_requeue", lambda: None)
    monkeypatch.setattr(preemption, "_barrier", lambda trainer: None)
    stream = io.TextIOWrapper(io.BytesIO())  # as pytest's captured stderr
    handler = logging.StreamHandler(stream)
    stream.close()
    with pytest.raises(ValueError):  # what the exit met
        handler.flush()
    root = logging.getLogger()
    root.addHandler(handler)
    monkeypatch.setattr(logging, "raiseExceptions", False)  # logging's own report of the write: not this test's
    before = {s: signal.getsignal(s) for s in preemption.SIGNALS}
    try:
        with pytest.raises(SystemExit) as ended:
            preemption._exit(None, signal.SIGTERM, True, "ckpt/checkpoint_last.pt", trainer=None)
    finally:
        root.removeHandler(handler)
        for s, previous in before.items():
            signal.signal(s, previous)
    assert ended.value.code == 143


MAIN = "def main():\n    return probe()\n"


def test_the_training_loop_is_found_from_inside_a_main_frame():
    """load_checkpoint is called from fairseq_cli.train's main (or __main__'s, with
    python -m): the frame named main whose globals hold train and validate_and_save."""

    def probe():
        return preemption._training_main_globals(sys._getframe(1))

    training = {"validate_and_save": print, "train": print, "probe": probe}
    exec(MAIN, training)
    assert training["main"]() is training
    other = {"probe": probe}
    exec(MAIN, other)
    assert other["main"]() is None


def test_validate_and_save_stops_only_when_a_signal_came(fresh_state, monkeypatch):
    calls = []
    module = {
        "train": lambda cfg, trainer, task, epoch_itr: calls.append("train") or ([None], False),
        "validate_and_save": lambda *args: calls.append("validate_and_save") or ([None], False),
    }
    preemption._patch_training_loop(module)
    preemption._patch_training_loop(module)  # once
    monkeypatch.setattr(preemption, "stop", lambda cfg, trainer, epoch_itr, signum: calls.append(("stop", signum)))
    trainer = SimpleNamespace(data_parallel_world_size=1)
    cfg = SimpleNamespace(optimization=SimpleNamespace(max_epoch=0))
    epoch_itr = SimpleNamespace(next_epoch_idx=2)
    module["train"](cfg, trainer, None, epoch_itr)
    assert signal.getsignal(signal.SIGUSR1) is preemption._on_signal  # installed while training
    module["validate_and_save"](cfg, trainer, None, epoch_itr, ["valid"], False)
    assert calls == ["train", "validate_and_save"]
    os.kill(os.getpid(), signal.SIGTERM)
    module["validate_and_save"](cfg, trainer, None, epoch_itr, ["valid"], False)
    assert calls[2] == ("stop", signal.SIGTERM)


def test_the_patch_can_be_turned_off():
    assert "preemption" in patches_off({"FSA_COMPAT_OFF": "preemption"})
    assert "preemption" in patches_off({"FSA_COMPAT_OFF": "behaviour"})


def test_a_mid_epoch_checkpoint_resumed_by_another_number_of_processes_is_refused(tmp_path):
    """fairseq counts the epoch's position in batches per process: 2 -> 1 processes trained
    488 examples twice and 32 never in that epoch (2026-11-28), with nothing said."""
    from types import SimpleNamespace

    import pytest
    import torch

    from fairseq_sparse_attn.compat.resume_config_check import check_epoch_position
    from fairseq_sparse_attn.errors import UsageError

    path = tmp_path / "checkpoint_last.pt"
    torch.save({"cfg": {"distributed_training": {"distributed_world_size": 2}}}, path)

    def trainer(world, reset=False):
        return SimpleNamespace(
            cfg=SimpleNamespace(
                checkpoint=SimpleNamespace(reset_dataloader=reset, finetune_from_model=None),
                distributed_training=SimpleNamespace(distributed_world_size=world),
            ),
            data_parallel_world_size=world,
        )

    inside = {"train_iterator": {"epoch": 3, "iterations_in_epoch": 17}}
    with pytest.raises(UsageError) as e:
        check_epoch_position(str(path), inside, trainer(1))
    assert str(e.value).startswith(
        f"{path} was saved inside epoch 3 (after 17 batches of each of 2 processes); resumed by 1"
    )
    assert "--reset-dataloader" in str(e.value)
    check_epoch_position(str(path), inside, trainer(2))  # the same world
    check_epoch_position(str(path), inside, trainer(1, reset=True))  # the epoch starts over
    check_epoch_position(str(path), {"train_iterator": {"epoch": 4, "iterations_in_epoch": 0}}, trainer(1))
    # a fine-tuning starts at epoch 1 (fairseq resets the loader itself); a rank without
    # the file (loaded on rank 0 and broadcast) leaves the decision to rank 0
    finetuning = trainer(1)
    finetuning.cfg.checkpoint.finetune_from_model = str(path)
    check_epoch_position(str(path), inside, finetuning)
    check_epoch_position(str(tmp_path / "on_rank_0_only.pt"), inside, trainer(1))
    # and the other way: saved by 1 process, resumed by 2
    torch.save({"cfg": {"distributed_training": {"distributed_world_size": 1}}}, path)
    with pytest.raises(UsageError, match="after 17 batches of each of 1 processes\\); resumed by 2 process"):
        check_epoch_position(str(path), inside, trainer(2))
    check_epoch_position(str(path), inside, trainer(1))


def test_only_children_that_block_sigterm_are_killed_at_exit():
    """end_forked_children SIGKILLs the DataLoader workers forked while training (their
    SIGTERM is blocked, so multiprocessing's exit would wait for ever) and leaves others."""
    import multiprocessing
    import signal
    import time

    from fairseq_sparse_attn.compat import preemption

    context = multiprocessing.get_context("fork")
    plain = context.Process(target=time.sleep, args=(30,), daemon=True)
    plain.start()
    blocked = context.Process(target=_sleep_blocked, daemon=True)
    blocked.start()
    try:
        deadline = time.time() + 10
        while preemption._sigterm_blocked(blocked.pid) is not True and time.time() < deadline:
            time.sleep(0.05)
        assert preemption._sigterm_blocked(blocked.pid) is True
        assert preemption._sigterm_blocked(plain.pid) is False
        preemption._STATE.forked = True
        preemption.end_forked_children()
        assert not blocked.is_alive() and blocked.exitcode == -signal.SIGKILL
        assert plain.is_alive()
    finally:
        preemption._STATE.forked = False
        for p in (plain, blocked):
            if p.is_alive():
                p.kill()
                p.join()


def _sleep_blocked():
    import signal
    import time

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    time.sleep(30)
