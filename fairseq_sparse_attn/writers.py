"""Which process writes a file, and whether it still runs.

A file that is being written goes to a temporary name that carries its writer,
``NAME.<pid>@<host>.tmp`` (:func:`temporary_name`), and is renamed over ``NAME`` when it is
complete.  A later start may remove such a file only when its writer is gone
(:func:`writer_gone`): a process on this host that no longer runs.  A file written on
another host, or whose writer still runs, is never touched (issue 24: a second start
deleted every ``*.tmp``, including the checkpoint a running job was still writing).

The same record (pid, host) names the holder of a save-dir lock
(:mod:`fairseq_sparse_attn.compat.save_dir_lock`).
"""

import builtins
import contextlib
import os
import re
import socket

_TMP = re.compile(r"^(?P<target>.+)\.(?P<pid>\d+)@(?P<host>[^/@]+)\.tmp$")


def this_host():
    return socket.gethostname()


def temporary_name(path, pid=None, host=None):
    """``path.<pid>@<host>.tmp`` (this process by default), in the same directory."""
    return f"{path}.{os.getpid() if pid is None else pid}@{host or this_host()}.tmp"


def writer_of(tmp):
    """(target path, pid, host) of a :func:`temporary_name`; None for another name."""
    m = _TMP.match(os.fspath(tmp))
    if m is None:
        return None
    return m.group("target"), int(m.group("pid")), m.group("host")


def process_running(pid):
    """True when process ``pid`` of this host runs (a zombie does not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return True


def writer_running(pid, host):
    """True / False for a writer on this host; None when it runs elsewhere (unknown)."""
    if host != this_host():
        return None
    return process_running(pid)


def open_by_a_process(path):
    """True when a process of this host (that this user may inspect) has ``path`` open;
    None when that cannot be known (no /proc)."""
    if not os.path.isdir("/proc/self/fd"):
        return None
    target = os.path.realpath(path)
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") == target:
                    return True
            except OSError:
                continue
    return False


def writer_gone(tmp):
    """True when nothing can still be writing the temporary file ``tmp``: its recorded
    writer (pid on this host) no longer runs, or, for a name without a writer (stock
    fairseq's ``NAME.tmp``), no process of this host has it open.  False when a writer
    runs or may run (another host, nothing to check with)."""
    writer = writer_of(tmp)
    if writer is not None:
        return writer_running(writer[1], writer[2]) is False
    return open_by_a_process(tmp) is False


def unwritable_file(path, flag):
    """None when a file can be written at ``path`` (its missing parent folders created),
    else the reason in one line naming ``flag``: checked before any work, so that a command
    does not fail at its last write, after the model, or with some outputs written."""
    target = os.path.abspath(os.fspath(path))
    if os.path.isdir(target):
        return f"{flag} {path} is a directory, not a file"
    parent = os.path.dirname(target)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"{flag} {path}: {parent} is a file, not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{flag} {path}: {parent} is not writable"
    return None


def same_file(path, flag, other, what):
    """None unless ``path`` (given as ``flag``) names the file ``other`` (``what``: how the
    message calls it) names, when writing it would destroy that input; else that, in one
    line."""
    a, b = os.path.realpath(os.fspath(path)), os.path.realpath(os.fspath(other))
    if a == b or (os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)):
        return f"{flag} {path} is {what} ({other}): writing it would replace that"
    return None


def output_over_input(outputs, inputs):
    """The first reason, in one line, that one of ``outputs`` ((flag, path), ...) would
    replace one of ``inputs`` ((path, what), ...) or another output; None when none would."""
    for i, (flag, path) in enumerate(outputs):
        for other, what in list(inputs) + [(p, f) for f, p in outputs[i + 1 :]]:
            reason = same_file(path, flag, other, what)
            if reason:
                return reason
    return None


def write_text(path, text):
    """``text`` into ``path`` (UTF-8; missing parent folders created) by a rename: a
    reader, or a run that is killed, never leaves a part of it."""
    parent = os.path.dirname(os.path.abspath(os.fspath(path)))
    os.makedirs(parent, exist_ok=True)
    tmp = temporary_name(os.fspath(path))
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextlib.contextmanager
def replaced_when_complete(path, mode="r", *args, **kwargs):
    """``open(path, mode, ...)``, except that a file opened for writing (``"w"``) is written
    under :func:`temporary_name` and renamed over ``path`` only when the ``with`` block ends
    without an exception: an error or a Ctrl-C leaves an earlier ``path`` as it was and no
    part of the new one.  Other modes open ``path`` itself."""
    if "w" not in mode:
        with builtins.open(path, mode, *args, **kwargs) as f:
            yield f
        return
    tmp = temporary_name(os.fspath(path))
    try:
        with builtins.open(tmp, mode, *args, **kwargs) as f:
            yield f
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
