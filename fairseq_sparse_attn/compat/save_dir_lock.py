"""One training per save dir.

Two trainings started on the same ``--save-dir`` both ran (issue 24): the second resumed
from the first one's half-finished checkpoint and the two overwrote each other's files.
Now the first takes ``<save-dir>/.fsa-train.lock`` before any work (when fairseq checks
the save dir, on the master rank only: one lock per distributed run), and a second start
on that save dir stops with one line naming the holder:

    fsa-train: error: --save-dir ckpt is in use by another training: pid 4242 on host
    gpu3, started 2026-11-25 13:02:11 (lock file ckpt/.fsa-train.lock) ...

A run with ``--no-save`` writes nothing there and takes no lock (as in stock fairseq,
benchmarks and sweeps may share a save dir): fairseq_cli.train's ``main``, which asks for
the lock, holds the run's config (found as the preemption patch finds its training loop).

The lock is an exclusive ``flock`` on the file, which also records the holder (pid, host,
start time, command).  It is released when the run ends (normal end, error, SIGINT,
SIGTERM: the file is removed) and by the kernel when the process dies (SIGKILL, OOM:
the file stays).  A lock file whose holder is gone (its pid no longer runs on this host)
is taken over with one WARNING line.  Whether a holder on another host runs cannot be
checked from here, so the holder refreshes the file's time every :data:`HEARTBEAT_S`
seconds: a lock file of another host that was not refreshed for :data:`STALE_AFTER_S`
seconds is taken over with one WARNING line (a job requeued onto another node after its
node died: until 2026-11-28 it was refused until the file was removed by hand); a fresher
one is refused, the error giving its age.  A lock file without the refresh (plugin versions
before it) is not taken over from another host.  On a file system without ``flock`` the
recorded pid decides.
"""

import atexit
import errno
import fcntl
import json
import logging
import os
import signal
import sys
import threading
import time

from ..errors import SaveDirInUse, UsageError
from ..writers import process_running, this_host
from .training_main import training_main_frame

BEHAVIOUR_CHANGE = True
LOCK_NAME = ".fsa-train.lock"
#: the holder refreshes the lock file's time this often (seconds)
HEARTBEAT_S = 30
#: a lock file of another host not refreshed for this long has no live holder (seconds;
#: room for the hosts' clocks to differ and a busy file system)
STALE_AFTER_S = 180

logger = logging.getLogger(__name__)


def lock_path(save_dir):
    return os.path.join(save_dir, LOCK_NAME)


def describe(holder):
    if not holder:
        return "a process that has not written its name yet"
    started = holder.get("started")
    when = (
        f", started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}"
        if isinstance(started, (int, float))
        else ""
    )
    return f"pid {holder.get('pid')} on host {holder.get('host')}{when}"


def _read_holder(fd):
    os.lseek(fd, 0, os.SEEK_SET)
    data = b""
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    try:
        holder = json.loads(data.decode("utf-8"))
        return holder if isinstance(holder, dict) else None
    except (UnicodeDecodeError, ValueError):
        return None


class SaveDirLock:
    """The lock of one save dir, held by this process until :meth:`release`."""

    def __init__(self, save_dir):
        self.save_dir = save_dir
        self.path = lock_path(save_dir)
        self.fd = None
        self.owner = None

    def _busy(self, holder, why=""):
        return SaveDirInUse(
            f"--save-dir {self.save_dir} is in use by another training: {describe(holder)} "
            f"(lock file {self.path}){why}; wait for it to end or use another --save-dir"
        )

    def _open_locked(self):
        """(fd, flock worked) on the file now at ``self.path``."""
        for _ in range(20):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                flocked = True
            except BlockingIOError:
                holder = None
                for _ in range(10):  # the holder writes its name right after it locks
                    holder = _read_holder(fd)
                    if holder:
                        break
                    time.sleep(0.05)
                os.close(fd)
                raise self._busy(holder) from None
            except OSError as e:
                if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    os.close(fd)
                    raise
                flocked = False
            try:  # the holder before us may have removed the file after we opened it
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                return fd, flocked
            os.close(fd)
        raise self._busy(None, ", which keeps changing")

    def acquire(self):
        fd, flocked = self._open_locked()
        try:
            holder = _read_holder(fd)
            me = {"pid": os.getpid(), "host": this_host()}
            if holder and {k: holder.get(k) for k in me} != me:
                if holder.get("host") != me["host"]:
                    age = time.time() - os.fstat(fd).st_mtime
                    if not holder.get("heartbeat_s"):
                        raise self._busy(
                            holder,
                            ": it was written on another host by a plugin version that does not "
                            "refresh it, so whether that job runs cannot be checked from here; "
                            "remove the file if it has ended",
                        )
                    if age < STALE_AFTER_S:
                        raise self._busy(
                            holder,
                            f": it was written on another host and refreshed {age:.0f} s ago (a running "
                            f"training refreshes it every {HEARTBEAT_S} s); if that job has ended, start "
                            f"again after {STALE_AFTER_S - age:.0f} s, or remove the file",
                        )
                    logger.warning(
                        f"{self.path}: the training that held {self.save_dir} ({describe(holder)}) "
                        f"has not refreshed it for {age:.0f} s; taking the lock over"
                    )
                else:
                    pid = holder.get("pid")
                    if not flocked and isinstance(pid, int) and process_running(pid):
                        raise self._busy(holder)
                    logger.warning(
                        f"{self.path}: the training that held {self.save_dir} "
                        f"({describe(holder)}) no longer runs; taking the lock over"
                    )
            record = {
                **me,
                "started": time.time(),
                "heartbeat_s": HEARTBEAT_S,
                "command": " ".join(sys.argv)[:500],
            }
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, (json.dumps(record) + "\n").encode("utf-8"))
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        self.fd, self.owner = fd, os.getpid()
        self._refreshing = threading.Event()
        threading.Thread(target=self._refresh, args=(self.path, self._refreshing), daemon=True, name="fsa-lock").start()
        return self

    def _refresh(self, path, stop):
        """Touch the lock file every HEARTBEAT_S seconds until released (by its path: the
        descriptor may be closed and its number reused by then).  A job suspended (SIGSTOP)
        for longer than STALE_AFTER_S stops refreshing too, and may lose the lock to another
        host: documented in docs/distributed.md."""
        while not stop.wait(HEARTBEAT_S):
            try:
                os.utime(path)
            except OSError:  # removed, or a file system that refuses it: the lock holds on this host
                return

    def release(self):
        """Remove the lock file and unlock (only in the process that took it)."""
        if self.fd is None or self.owner != os.getpid():
            return
        self._refreshing.set()
        try:
            os.remove(self.path)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


_HELD = {}


def release_all():
    for lock in list(_HELD.values()):
        lock.release()
    _HELD.clear()


def _install_sigterm_release():
    """SIGTERM (scancel, kill, a scheduler's preemption) ends the process without atexit:
    release first, then do what SIGTERM did before (the previous handler, or die of it)."""
    try:
        previous = signal.getsignal(signal.SIGTERM)
        if previous == signal.SIG_IGN or getattr(previous, "_fsa_release", False):
            return

        def on_sigterm(signum, frame):
            release_all()
            if callable(previous):
                return previous(signum, frame)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

        on_sigterm._fsa_release = True
        signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread: the kernel still drops the flock at exit
        pass


def _close_in_forked_child():
    """A forked child (a DataLoader worker) shares the lock's open file, and the flock holds
    while any process has it open: after a SIGKILL of the trainer its workers kept the save
    dir locked for seconds, and an immediate restart was refused.  The child closes its copy
    (the parent's lock is unchanged; only the parent removes the file)."""
    for lock in _HELD.values():
        if lock.fd is not None:
            try:
                os.close(lock.fd)
            except OSError:
                pass
            lock.fd = None


def lock_save_dir(save_dir):
    """Take the lock of ``save_dir`` for this process (once; SaveDirInUse when held)."""
    key = os.path.realpath(save_dir)
    if key in _HELD and _HELD[key].owner == os.getpid():
        return _HELD[key]
    lock = SaveDirLock(save_dir).acquire()
    if not _HELD:
        atexit.register(release_all)
        _install_sigterm_release()
        if not _FORK_HOOK:
            os.register_at_fork(after_in_child=_close_in_forked_child)
            _FORK_HOOK.append(True)
    _HELD[key] = lock
    return lock


_FORK_HOOK: list = []  # the at-fork hook is registered once per process


def check_save_dir(save_dir):
    """--save-dir must be a directory (or not exist yet)."""
    if os.path.exists(save_dir) and not os.path.isdir(save_dir):
        raise UsageError(
            f"--save-dir {save_dir} is a file, not a directory: pass a directory "
            "(created when missing) for the checkpoints"
        )


def saves_checkpoints(frame):
    """Whether the training calling from ``frame`` writes checkpoints: False only when the
    config of fairseq_cli.train's ``main`` up the stack says ``--no-save``."""
    main = training_main_frame(frame)
    checkpoint = getattr(main.f_locals.get("cfg"), "checkpoint", None) if main is not None else None
    return not getattr(checkpoint, "no_save", False)


def install():
    from fairseq import checkpoint_utils

    original = checkpoint_utils.verify_checkpoint_directory
    if getattr(original, "_fsa_lock", False):
        return

    def verify_checkpoint_directory(save_dir):
        """fairseq_cli.train calls this on the master rank before any work."""
        local = "://" not in str(save_dir)
        if local:
            check_save_dir(save_dir)
        try:
            original(save_dir)
        except OSError as e:
            raise UsageError(f"--save-dir {save_dir} cannot be written: {e.strerror}") from None
        if local and saves_checkpoints(sys._getframe(1)):
            lock_save_dir(save_dir)

    verify_checkpoint_directory._fsa_lock = True
    checkpoint_utils.verify_checkpoint_directory = verify_checkpoint_directory
