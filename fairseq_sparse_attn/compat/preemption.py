"""Preemption-safe training: SIGUSR1 or SIGTERM end training at an update boundary with a
checkpoint, and under SLURM a SIGUSR1 requeues the job (docs/distributed.md, "Faults").

Stock fairseq dies of either signal at once: whatever was trained since the last
checkpoint is lost.  A cluster sends one before it ends a job: SLURM sends SIGTERM at the
time limit, on ``scancel`` and on preemption (then SIGKILL after ``KillWait``), and a
warning signal before the limit when asked (``sbatch --signal=B:USR1@120``, as
``scripts/slurm/train.sbatch`` does; the script forwards it to its tasks).

While fairseq's training loop runs (from the first epoch it starts), the two signals only
set a flag.  At every update boundary (``fairseq_cli.train.validate_and_save``) the ranks
agree on it (one all-reduce of one number, MAX; nothing with a single process), so all of
them stop after the same update.  Then, skipping validation:

1. ``checkpoint_utils.save_checkpoint`` saves ``checkpoint_last.pt`` (written through a
   temporary file and renamed by the crash_safe_checkpoints patch);
2. the master rank releases the save-dir lock, the ranks wait for each other (the
   checkpoint is on disk before any rank exits);
3. on SIGUSR1 inside a SLURM batch job that may be requeued (not ``--no-requeue``), the
   master rank runs ``scontrol requeue $SLURM_JOB_ID``: SLURM ends this run and starts the
   job again, which resumes from that checkpoint exactly (exact_resume).  SLURM ends the
   run at once (SIGTERM to every task): from the signal on, every rank lets SIGTERM and
   SIGUSR1 pass, and the ranks wait for each other again after the requeue (under
   ``srun --kill-on-bad-exit`` the first rank to exit has the others killed);
4. every rank exits with status 128 + the signal (138 for SIGUSR1, 143 for SIGTERM), the
   status a killed process would have had, so that no script takes it for a finished run.

Log lines (master rank)::

    preemption | SIGUSR1 received: training stops after the current update and saves checkpoint_last.pt
    preemption | SIGUSR1: stopping after update 17 (epoch 2), the same update on all 2 ranks; saving checkpoints
    preemption | SIGUSR1: saved checkpoints/checkpoint_last.pt (epoch 2 @ 17 updates)
    preemption | SIGUSR1: requeued SLURM job 42; it resumes from checkpoints/checkpoint_last.pt when SLURM starts it again
    preemption | SIGUSR1: exiting with status 138

Without a signal nothing changes but one all-reduce of one number per update in a
multi-process run.  ``FSA_COMPAT_OFF=preemption`` restores fairseq's behaviour.
"""

import functools
import logging
import math
import os
import signal
import subprocess
import sys

from .training_main import training_main_frame

BEHAVIOUR_CHANGE = True
SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
REQUEUE_SIGNAL = signal.SIGUSR1
SCONTROL_TIMEOUT_S = 60

logger = logging.getLogger("fairseq_sparse_attn.preemption")


class _State:
    signum = 0  # the first signal received, 0 for none
    previous = None  # {signum: handler} while ours are installed
    forked = False  # a process was forked while training (its signals blocked: _forked_child)
    trained = False  # this process's training loop has started (train() was entered)

    def __init__(self):
        self.late_signals = []  # signals let pass while exiting after a SIGUSR1 (_while_exiting)


_STATE = _State()


def _name(signum):
    return signal.Signals(signum).name


def _on_signal(signum, frame):
    if not _STATE.signum:
        _STATE.signum = signum
        logger.info(f"{_name(signum)} received: training stops after the current update and saves checkpoint_last.pt")


def install_handlers():
    """Our handler for SIGUSR1 and SIGTERM (main thread only); the previous ones kept."""
    if _STATE.previous is not None:
        return True
    try:
        previous = {s: signal.getsignal(s) for s in SIGNALS}
        for s in SIGNALS:
            signal.signal(s, _on_signal)
    except ValueError:  # not the main thread: fairseq's behaviour
        return False
    _STATE.previous = previous
    return True


def _forked_child():
    """In a process forked while training (a DataLoader worker, ``--num-workers`` >= 1:
    fairseq's default is 1), SIGUSR1 and SIGTERM are blocked.  A cluster signals every
    process of the job (SLURM's ``scancel``, its time limit, ``srun``), and torch's worker
    dies of a SIGTERM that its parent did not send; the trainer then failed in the middle
    of its update (``DataLoader worker ... exited unexpectedly``, ``ConnectionResetError``)
    and saved nothing.  Blocked, the signal is the trainer's alone; the worker ends when the
    trainer shuts its loader down or exits."""
    if _STATE.previous is not None:
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)


def _forked_parent():
    if _STATE.previous is not None:
        _STATE.forked = True


def end_forked_children():
    """At exit, SIGKILL the daemon processes (DataLoader workers) of this process: those
    forked while training cannot receive the SIGTERM with which ``multiprocessing`` ends
    them at exit before it joins them (it would wait for ever); a worker holds nothing to
    save.  Registered after ``multiprocessing``'s own exit function, so it runs first."""
    if not _STATE.forked:
        return
    import multiprocessing

    for child in multiprocessing.active_children():
        if child.daemon and _sigterm_blocked(child.pid) is not False:  # None (no /proc): it may block it
            child.kill()
            child.join(5)


def _sigterm_blocked(pid):
    """Whether process ``pid`` blocks SIGTERM (Linux's /proc), or None when it cannot be read:
    only the children forked while training are SIGKILLed, others (a logger's process) are
    left to ``multiprocessing``'s SIGTERM."""
    try:
        with open(f"/proc/{pid}/status") as f:
            blocked = next(int(line.split()[1], 16) for line in f if line.startswith("SigBlk:"))
    except (OSError, StopIteration, ValueError):
        return None
    return bool(blocked >> (signal.SIGTERM - 1) & 1)


def restore_handlers():
    if _STATE.previous is None:
        return
    for s, handler in _STATE.previous.items():
        signal.signal(s, handler if handler is not None else signal.SIG_DFL)
    _STATE.previous = None


def agreed_signal(trainer):
    """The signal every rank stops for (the largest one any rank received), 0 for none."""
    world = trainer.data_parallel_world_size
    if world <= 1 or getattr(trainer, "tpu", False):
        return _STATE.signum
    import torch
    from fairseq.distributed import utils as distributed_utils

    flag = torch.tensor([float(_STATE.signum)], device=trainer.device)
    distributed_utils.all_reduce(flag, group=trainer.data_parallel_process_group, op="max")
    return int(flag.item())


def _barrier(trainer):
    if trainer.data_parallel_world_size > 1 and not getattr(trainer, "tpu", False):
        import torch
        from fairseq.distributed import utils as distributed_utils

        distributed_utils.all_reduce(
            torch.zeros(1, device=trainer.device), group=trainer.data_parallel_process_group, op="sum"
        )


def slurm_requeue(env=None, run=subprocess.run):
    """Requeue this SLURM job (``scontrol requeue``); returns the line to log."""
    env = os.environ if env is None else env
    job = env.get("SLURM_JOB_ID")
    if not job:
        return "not a SLURM job, not requeued: start the same command again to resume"
    try:
        shown = run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S)
        if shown.returncode == 0 and " Requeue=0 " in f" {shown.stdout} ":
            return (
                f"SLURM job {job} may not be requeued (--no-requeue), not requeued: "
                "submit it again with the same SAVE_DIR to resume"
            )
        done = run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"scontrol requeue {job} failed ({e}): submit the job again with the same SAVE_DIR to resume"
    if done.returncode != 0:
        why = " ".join((done.stderr or done.stdout).split())[:300]
        return f"scontrol requeue {job} failed ({why}): submit the job again with the same SAVE_DIR to resume"
    return None


def stop(cfg, trainer, epoch_itr, signum):
    """Save, agree, requeue (SIGUSR1 under SLURM), exit with 128 + signum."""
    from fairseq import checkpoint_utils
    from fairseq.distributed import utils as distributed_utils

    name = _name(signum)
    updates = trainer.get_num_updates()
    world = trainer.data_parallel_world_size
    ranks = f"the same update on all {world} ranks" if world > 1 else "one process"
    logger.info(f"{name}: stopping after update {updates} (epoch {epoch_itr.epoch}), {ranks}; saving checkpoints")
    checkpoint_utils.save_checkpoint(cfg.checkpoint, trainer, epoch_itr, None)
    master = distributed_utils.is_master(cfg.distributed_training)
    last = os.path.join(cfg.checkpoint.save_dir, f"checkpoint_last{trainer.checkpoint_suffix or ''}.pt")
    if master:
        if cfg.checkpoint.no_save or cfg.checkpoint.no_last_checkpoints:
            logger.warning(f"{name}: --no-save / --no-last-checkpoints: no checkpoint_last.pt to resume from")
        else:
            logger.info(f"{name}: saved {last} (epoch {epoch_itr.epoch} @ {updates} updates)")
        from . import save_dir_lock

        save_dir_lock.release_all()  # a requeued job may start on another node
    _barrier(trainer)  # no rank leaves before the checkpoint is on disk
    _exit(cfg, signum, master, last, trainer)


def stop_before_training(cfg, trainer, signum):
    """A signal that came before the run's first update: nothing was trained since the
    checkpoint it loaded (or since nothing), so nothing is saved; then as :func:`stop`."""
    from fairseq.distributed import utils as distributed_utils

    name = _name(signum)
    updates = trainer.get_num_updates()
    logger.info(
        f"{name}: received before the first update of this run: nothing trained since "
        + (f"update {updates} (the checkpoint it loaded)" if updates else "the start")
        + ", nothing to save"
    )
    master = distributed_utils.is_master(cfg.distributed_training)
    if master:
        from . import save_dir_lock

        save_dir_lock.release_all()
    _barrier(trainer)
    _exit(cfg, signum, master, os.path.join(cfg.checkpoint.save_dir, "checkpoint_last.pt"), trainer)


def _while_exiting(signum, frame):
    """SIGTERM or SIGUSR1 while this rank ends after a SIGUSR1: the requeue itself ends the
    run (SLURM signals every task with SIGTERM, SIGKILL ``KillWait`` later); the rank is
    already on its way out and leaves with its own status.  It stays installed until the
    process ends (the interpreter's shutdown included), since the SIGTERM may come late;
    a caller that catches the SystemExit in-process gets it with it."""
    _STATE.late_signals.append(signum)


def _exit(cfg, signum, master, last, trainer):
    """Requeue (SIGUSR1 under SLURM, master rank) and exit with 128 + signum.

    On SIGUSR1, no rank exits before the master rank has requeued and logged it: under
    ``srun --kill-on-bad-exit`` (train.sbatch) the first task that exits, with 138, has the
    others killed, and the requeue sends SIGTERM to every task as soon as ``scontrol``
    returns.  Both cut the master rank's requeue or its log lines short on a loaded machine
    (a CI run, 2026-11-29: the job requeued, its log did not say so).  So every rank lets
    those signals pass (:func:`_while_exiting`) and waits for the others after the requeue."""
    name = _name(signum)
    restore_handlers()
    if signum == REQUEUE_SIGNAL:
        try:
            for s in SIGNALS:
                signal.signal(s, _while_exiting)
        except ValueError:  # not the main thread: the default handlers stay
            pass
        if master:
            problem = slurm_requeue()
            if problem is None:
                logger.info(
                    f"{name}: requeued SLURM job {os.environ['SLURM_JOB_ID']}; it resumes from {last} "
                    "when SLURM starts it again"
                )
            else:
                logger.warning(f"{name}: {problem}")
        _barrier(trainer)  # no rank exits before the requeue
    logger.info(f"{name}: exiting with status {128 + signum}")
    _flush_log_handlers()
    sys.exit(128 + signum)


def _flush_log_handlers():
    """Flush the root logger's handlers before the exit.  A handler whose stream is already
    closed (a log file gone with its file system, a pipe whose reader left) must not turn
    the exit with 128 + signum into a ValueError traceback: logging itself reports such a
    write and goes on, and so does this."""
    for handler in logging.getLogger().handlers:
        try:
            handler.flush()
        except (OSError, ValueError):
            pass


def _patch_training_loop(module_globals):
    """Wrap ``train`` (one epoch) and ``validate_and_save`` (after every update) of the
    module whose ``main`` is running (fairseq_cli.train, also when run as __main__)."""
    original_train = module_globals["train"]
    if getattr(original_train, "_fsa_preemption", False):
        return
    original_validate_and_save = module_globals["validate_and_save"]

    @functools.wraps(original_train)
    def train(cfg, trainer, task, epoch_itr, *args, **kwargs):
        install_handlers()
        if not _STATE.trained:  # a signal while the run started (data, model, checkpoint)
            _STATE.trained = True
            signum = agreed_signal(trainer)
            if signum:
                stop_before_training(cfg, trainer, signum)
        try:
            valid_losses, should_stop = original_train(cfg, trainer, task, epoch_itr, *args, **kwargs)
        except BaseException:
            restore_handlers()
            raise
        max_epoch = cfg.optimization.max_epoch or math.inf
        if should_stop or epoch_itr.next_epoch_idx > max_epoch:  # fairseq's loop ends
            if _STATE.signum:
                logger.info(f"{_name(_STATE.signum)} received after the last update: training has ended")
            restore_handlers()
        return valid_losses, should_stop

    @functools.wraps(original_validate_and_save)
    def validate_and_save(cfg, trainer, task, epoch_itr, valid_subsets, end_of_epoch):
        signum = agreed_signal(trainer)
        if signum:
            stop(cfg, trainer, epoch_itr, signum)
        return original_validate_and_save(cfg, trainer, task, epoch_itr, valid_subsets, end_of_epoch)

    train._fsa_preemption = True
    module_globals["train"] = train
    module_globals["validate_and_save"] = validate_and_save


def _training_main_globals(frame, depth=40):
    """The globals of the ``main`` frame of fairseq_cli.train up the stack, or None."""
    found = training_main_frame(frame, depth)
    return None if found is None else found.f_globals


def install():
    from fairseq import checkpoint_utils

    original = checkpoint_utils.load_checkpoint
    if getattr(original, "_fsa_preemption", False):
        return
    import atexit
    import multiprocessing.util  # noqa: F401  (its exit function first, so ours runs before it)

    os.register_at_fork(after_in_child=_forked_child, after_in_parent=_forked_parent)
    atexit.register(end_forked_children)

    from fairseq import tasks

    setup_task = tasks.setup_task

    @functools.wraps(setup_task)
    def setup_task_with_handlers(*args, **kwargs):
        """fairseq_cli.train's main calls this on every rank before the data and the model:
        from here a signal is held until the first update boundary (or the loop's start)."""
        if training_main_frame(sys._getframe(1)) is not None:
            install_handlers()
        return setup_task(*args, **kwargs)

    tasks.setup_task = setup_task_with_handlers

    @functools.wraps(original)
    def load_checkpoint(*args, **kwargs):
        """fairseq_cli.train's main calls this once, before its training loop."""
        result = original(*args, **kwargs)
        found = _training_main_globals(sys._getframe(1))
        if found is not None:
            _patch_training_loop(found)
        return result

    load_checkpoint._fsa_preemption = True
    checkpoint_utils.load_checkpoint = load_checkpoint
