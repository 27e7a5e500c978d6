"""Crash-safe checkpoints.

fairseq writes ``checkpoint_E_U.pt`` through a temporary file and a rename, but then
*copies* it to ``checkpoint_last.pt`` / ``checkpoint_best.pt`` in place
(``PathManager.copy``): a process killed during that copy leaves a truncated
``checkpoint_last.pt`` (3 of 3 SIGKILLs in issue 14: 0.2-2.7 MB of 3.7 MB), and the restart
dies in ``PytorchStreamReader`` while an intact checkpoint sits beside it.

- Every checkpoint file fairseq writes or copies goes to ``NAME.tmp``, is flushed to disk
  (fsync) and renamed over ``NAME`` (atomic on a POSIX file system): a reader sees the old
  file or the new one, never a part.
- On restart, a ``*.pt.tmp`` left by a killed save is removed (logged).  When the
  checkpoint to resume from (``checkpoint_last.pt``) does not load, one WARNING line says
  so and why, and training resumes from the newest checkpoint in ``--save-dir`` that does
  (naming it); if none does, or an explicit ``--restore-file`` does not load, a one-line
  :class:`CheckpointError` names the file.
- Any other load of a damaged checkpoint (``fsa-generate --path``, ``fairseq-validate``,
  ``checkpoint_utils.load_model_ensemble``) fails with that one line instead of torch's
  ``PytorchStreamReader`` traceback (checked only after the load failed: no cost otherwise).
"""

import functools
import glob
import logging
import os
import shutil
import zipfile

from ..errors import UsageError

BEHAVIOUR_CHANGE = True

logger = logging.getLogger(__name__)


class CheckpointError(UsageError):
    """A checkpoint that cannot be read; the message names the file."""


def checkpoint_problem(path):
    """None when ``path`` is a complete torch checkpoint, else why it is not (one phrase).
    Reads the whole file (zip CRCs), not the pickled objects."""
    try:
        size = os.path.getsize(path)
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if size == 0:
        return "is empty (0 bytes)"
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
    except zipfile.BadZipFile:
        with open(path, "rb") as f:
            head = f.read(4)
        if head[:2] == b"\x80\x02":  # torch's legacy (pre-1.6) format: not checked here
            return None
        return f"is truncated or not a torch checkpoint ({size} bytes, no zip directory)"
    except (OSError, EOFError, ValueError) as e:
        return f"is damaged ({type(e).__name__}: {e})"
    if bad is not None:
        return f"is damaged (member {bad} fails its CRC check)"
    return None


def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _is_local(path):
    return "://" not in str(path)


def atomic_copy(src, dst):
    tmp = dst + ".tmp"
    shutil.copyfile(src, tmp)
    _fsync(tmp)
    os.replace(tmp, dst)
    return True


def _newest_loadable(save_dir, suffix, skip):
    candidates = [p for p in glob.glob(os.path.join(save_dir, f"checkpoint*{suffix}.pt"))
                  if os.path.abspath(p) != os.path.abspath(skip)]
    for path in sorted(candidates, key=os.path.getmtime, reverse=True):
        if checkpoint_problem(path) is None:
            return path
    return None


def _remove_stale_tmp(save_dir):
    for tmp in glob.glob(os.path.join(save_dir, "*.pt.tmp")):
        os.remove(tmp)
        logger.warning(f"removed {tmp}: a checkpoint save that was interrupted")


def install():
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    if getattr(checkpoint_utils.load_checkpoint, "_fsa_crash_safe", False):
        return

    class AtomicCopyPathManager(PathManager):
        @staticmethod
        def copy(src_path, dst_path, overwrite=False):
            if _is_local(src_path) and _is_local(dst_path):
                return atomic_copy(src_path, dst_path)
            return PathManager.copy(src_path, dst_path, overwrite=overwrite)

    checkpoint_utils.PathManager = AtomicCopyPathManager

    original_save = checkpoint_utils.torch_persistent_save

    @functools.wraps(original_save)
    def torch_persistent_save(obj, filename, async_write=False):
        if async_write or not isinstance(filename, str) or not _is_local(filename):
            return original_save(obj, filename, async_write=async_write)
        tmp = filename + ".tmp"
        with open(tmp, "wb") as f:
            checkpoint_utils._torch_persistent_save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, filename)

    checkpoint_utils.torch_persistent_save = torch_persistent_save

    original_load = checkpoint_utils.load_checkpoint

    @functools.wraps(original_load)
    def load_checkpoint(cfg, trainer, **passthrough_args):
        suffix = trainer.checkpoint_suffix or ""
        if _is_local(cfg.save_dir) and os.path.isdir(cfg.save_dir):
            _remove_stale_tmp(cfg.save_dir)
        if cfg.restore_file == "checkpoint_last.pt":
            path = os.path.join(cfg.save_dir, f"checkpoint_last{suffix}.pt")
        else:
            path = cfg.restore_file.replace(".pt", suffix + ".pt") if suffix else cfg.restore_file
        problem = checkpoint_problem(path) if _is_local(path) and os.path.exists(path) else None
        if problem is None:
            return original_load(cfg, trainer, **passthrough_args)
        if cfg.restore_file != "checkpoint_last.pt":
            raise CheckpointError(f"--restore-file {path} {problem}")
        fallback = _newest_loadable(cfg.save_dir, suffix, skip=path)
        if fallback is None:
            raise CheckpointError(
                f"{path} {problem}, and no other checkpoint in {cfg.save_dir} loads: move it "
                "away to train from scratch, or pass --restore-file FILE")
        logger.warning(f"{path} {problem}; resuming from {fallback}, the newest checkpoint "
                       f"in {cfg.save_dir} that loads")
        cfg.restore_file = fallback[: -len(suffix + ".pt")] + ".pt" if suffix else fallback
        try:
            return original_load(cfg, trainer, **passthrough_args)
        finally:
            cfg.restore_file = "checkpoint_last.pt"

    load_checkpoint._fsa_crash_safe = True
    checkpoint_utils.load_checkpoint = load_checkpoint

    original_to_cpu = checkpoint_utils.load_checkpoint_to_cpu

    @functools.wraps(original_to_cpu)
    def load_checkpoint_to_cpu(path, arg_overrides=None, load_on_all_ranks=False):
        try:
            return original_to_cpu(path, arg_overrides, load_on_all_ranks)
        except Exception:
            problem = checkpoint_problem(path) if _is_local(path) and os.path.isfile(path) else None
            if problem is None:
                raise
            raise CheckpointError(f"{path} {problem}") from None

    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
