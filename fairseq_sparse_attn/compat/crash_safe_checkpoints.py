"""Crash-safe checkpoints.

fairseq writes ``checkpoint_E_U.pt`` through a temporary file and a rename, but then
*copies* it to ``checkpoint_last.pt`` / ``checkpoint_best.pt`` in place
(``PathManager.copy``): a process killed during that copy leaves a truncated
``checkpoint_last.pt`` (3 of 3 SIGKILLs in issue 14: 0.2-2.7 MB of 3.7 MB), and the restart
dies in ``PytorchStreamReader`` while an intact checkpoint sits beside it.

- Every checkpoint file fairseq writes or copies goes to a temporary file that names its
  writer, ``NAME.<pid>@<host>.tmp`` (:mod:`fairseq_sparse_attn.writers`), is flushed to
  disk (fsync) and renamed over ``NAME`` (atomic on a POSIX file system): a reader sees the
  old file or the new one, never a part.
- A write that fails (a full disk, a quota, an I/O error) removes its temporary file and
  stops the run with one line naming the checkpoint and the reason (:class:`CheckpointError`);
  the previous ``NAME`` is untouched.  (Stock fairseq retried the save three times, logged
  a traceback and left the partial ``NAME.tmp``.)
- On restart, a temporary file whose writer is gone (its pid no longer runs on this host;
  for stock fairseq's ``NAME.tmp``: no process of this host has it open) is removed
  (logged); one that a running process may still be writing is left alone.  When the
  checkpoint to resume from (``checkpoint_last.pt``) does not load, one WARNING line says
  so and why, and training resumes from the newest checkpoint in ``--save-dir`` that does
  (naming it); if none does, or an explicit ``--restore-file`` does not load, a one-line
  :class:`CheckpointError` names the file.
- Any other load of a damaged checkpoint (``fsa-generate --path``, ``fairseq-validate``,
  ``checkpoint_utils.load_model_ensemble``) fails with that one line instead of torch's
  ``PytorchStreamReader`` traceback (checked only after the load failed: no cost otherwise);
  so do a ``--path`` that is a directory or does not exist, and a file that torch reads but
  that is not a fairseq checkpoint (e.g. a bare ``state_dict``).  A ``--restore-file`` that
  does not exist is an error (stock fairseq trained from scratch without a word).
"""

import errno
import functools
import glob
import logging
import os
import shutil
import zipfile

from ..errors import CheckpointError
from ..writers import temporary_name, writer_gone, writer_of

BEHAVIOUR_CHANGE = True

logger = logging.getLogger(__name__)


def checkpoint_problem(path):
    """None when ``path`` is a complete torch checkpoint, else why it is not (one phrase).
    Reads the whole file (zip CRCs), not the pickled objects."""
    if os.path.isdir(path):
        return "is a directory, not a checkpoint file"
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


def check_checkpoint_path(path):
    """A missing file or a directory where a checkpoint file is expected: one line."""
    if os.path.isdir(path):
        found = sorted(glob.glob(os.path.join(path, "*.pt")))
        best = os.path.join(path, "checkpoint_best.pt")
        example = best if best in found else (found[0] if found else None)
        hint = f", e.g. {example}" if example else " (it holds no .pt file)"
        raise CheckpointError(f"{path} is a directory, not a checkpoint file: pass a file in it{hint}")
    if not os.path.exists(path):
        raise CheckpointError(f"{path} does not exist: expected a checkpoint file written by fsa-train / fairseq-train")


def not_a_checkpoint(state):
    """Why a torch-readable object is not a fairseq checkpoint (one phrase), or None."""
    if not isinstance(state, dict):
        return f"torch reads a {type(state).__name__}, not a dict"
    missing = []
    if "model" not in state:
        missing.append("no 'model' state dict")
    if state.get("cfg") is None and state.get("args") is None:
        missing.append("no 'cfg'/'args' configuration")
    if not missing:
        return None
    keys = ", ".join(map(str, list(state)[:6])) or "none"
    return f"{' and '.join(missing)}; keys: {keys}"


def check_checkpoint_state(path, state):
    """A file torch loads but that fairseq cannot use (a bare state_dict, a tensor)."""
    why = not_a_checkpoint(state)
    if why is not None:
        raise CheckpointError(
            f"{path}: not a fairseq checkpoint ({why}); expected a file written by fsa-train / fairseq-train"
        )


def _torch_object(path):
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except Exception:
        return None


def _is_local(path):
    return "://" not in str(path)


def _remove_quietly(path):
    try:
        os.remove(path)
    except OSError:
        pass


def _write_failed(dst, tmp, error):
    """The one-line error of a failed checkpoint write (``tmp`` is removed)."""
    _remove_quietly(tmp)
    os_error = error if isinstance(error, OSError) else error.__context__
    if isinstance(os_error, OSError) and os_error.strerror:
        reason = f"{os_error.strerror} ({errno.errorcode.get(os_error.errno, os_error.errno)})"
    else:
        reason = f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"
    keeps = "is unchanged" if os.path.exists(dst) else "was not written"
    return CheckpointError(
        f"cannot write checkpoint {dst}: {reason}; the partial file was removed and {os.path.basename(dst)} {keeps}"
    )


def open_for_writing(path):
    """The file a checkpoint is written to (a seam for tests that simulate a full disk)."""
    return open(path, "wb")


def atomic_write(obj, filename):
    """torch.save ``obj`` to a temporary file, fsync, rename over ``filename``."""
    import torch

    tmp = temporary_name(filename)
    try:
        with open_for_writing(tmp) as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
    except (OSError, RuntimeError) as e:
        raise _write_failed(filename, tmp, e) from None
    except BaseException:
        _remove_quietly(tmp)
        raise
    os.replace(tmp, filename)


def atomic_copy(src, dst):
    tmp = temporary_name(dst)
    try:
        shutil.copyfile(src, tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise _write_failed(dst, tmp, e) from None
    except BaseException:
        _remove_quietly(tmp)
        raise
    os.replace(tmp, dst)
    return True


def _newest_loadable(save_dir, suffix, skip):
    candidates = [
        p
        for p in glob.glob(os.path.join(save_dir, f"checkpoint*{suffix}.pt"))
        if os.path.abspath(p) != os.path.abspath(skip)
    ]
    for path in sorted(candidates, key=os.path.getmtime, reverse=True):
        if checkpoint_problem(path) is None:
            return path
    return None


def _checkpoint_tmp_files(save_dir):
    """Temporary checkpoint files in ``save_dir``: ours (``NAME.pt.<pid>@<host>.tmp``) and
    stock fairseq's (``NAME.pt.tmp``)."""
    out = []
    for path in glob.glob(os.path.join(save_dir, "*.tmp")):
        writer = writer_of(path)
        target = writer[0] if writer is not None else path[: -len(".tmp")]
        if target.endswith(".pt"):
            out.append(path)
    return sorted(out)


def remove_stale_tmp(save_dir):
    """Remove the temporary checkpoint files whose writer is gone; keep (and name) the
    others.  Returns the removed paths."""
    removed = []
    for tmp in _checkpoint_tmp_files(save_dir):
        if writer_gone(tmp):
            _remove_quietly(tmp)
            removed.append(tmp)
            logger.warning(f"removed {tmp}: a checkpoint save that was interrupted")
        else:
            logger.warning(f"kept {tmp}: a running process may still be writing it")
    return removed


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
        atomic_write(obj, filename)

    checkpoint_utils.torch_persistent_save = torch_persistent_save

    original_load = checkpoint_utils.load_checkpoint

    @functools.wraps(original_load)
    def load_checkpoint(cfg, trainer, **passthrough_args):
        pretrained = getattr(cfg, "finetune_from_model", None)
        resets = ("reset_optimizer", "reset_lr_scheduler", "reset_meters", "reset_dataloader")
        if (
            not isinstance(cfg.save_dir, str)  # nothing on disk to check (fairseq's own tests)
            or (pretrained is not None and any(getattr(cfg, r, False) for r in resets))
            or (pretrained and cfg.restore_file != "checkpoint_last.pt")
        ):  # fairseq's own checks and messages ("can not be set together")
            return original_load(cfg, trainer, **passthrough_args)
        suffix = trainer.checkpoint_suffix or ""
        if _is_local(cfg.save_dir) and os.path.isdir(cfg.save_dir):
            remove_stale_tmp(cfg.save_dir)
        if cfg.restore_file == "checkpoint_last.pt":
            path = os.path.join(cfg.save_dir, f"checkpoint_last{suffix}.pt")
        else:
            path = cfg.restore_file.replace(".pt", suffix + ".pt") if suffix else cfg.restore_file
        if (
            cfg.restore_file != "checkpoint_last.pt" and _is_local(path) and not os.path.exists(path)
        ):  # fairseq: "No existing checkpoint", from scratch
            raise CheckpointError(
                f"--restore-file {path} does not exist (a relative path is "
                "taken from the current directory, not --save-dir)"
            )
        if (
            pretrained
            and cfg.restore_file == "checkpoint_last.pt"
            and _is_local(pretrained)
            and not os.path.exists(path)
            and not os.path.exists(pretrained)
        ):
            raise CheckpointError(f"--finetune-from-model {pretrained} does not exist")  # (a ValueError)
        problem = checkpoint_problem(path) if _is_local(path) and os.path.exists(path) else None
        if problem is None:
            return original_load(cfg, trainer, **passthrough_args)
        if cfg.restore_file != "checkpoint_last.pt":
            raise CheckpointError(f"--restore-file {path} {problem}")
        fallback = _newest_loadable(cfg.save_dir, suffix, skip=path)
        if fallback is None:
            raise CheckpointError(
                f"{path} {problem}, and no other checkpoint in {cfg.save_dir} loads: move it "
                "away to train from scratch, or pass --restore-file FILE"
            )
        logger.warning(
            f"{path} {problem}; resuming from {fallback}, the newest checkpoint in {cfg.save_dir} that loads"
        )
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
        local = _is_local(path)
        if local:
            check_checkpoint_path(path)
        try:
            state = original_to_cpu(path, arg_overrides, load_on_all_ranks)
        except Exception:
            problem = checkpoint_problem(path) if local and os.path.isfile(path) else None
            if problem is None:
                if local:  # torch reads it, fairseq's upgrade fails: e.g. a bare state_dict
                    check_checkpoint_state(path, _torch_object(path))
                raise
            raise CheckpointError(f"{path} {problem}") from None
        if local:
            check_checkpoint_state(path, state)
        return state

    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu

    original_ensemble = checkpoint_utils.load_model_ensemble_and_task

    @functools.wraps(original_ensemble)
    def load_model_ensemble_and_task(
        filenames, arg_overrides=None, task=None, strict=True, suffix="", num_shards=1, state=None
    ):
        if state is None and not suffix and num_shards == 1:  # (fairseq: "Model file not found")
            for filename in filenames:
                if _is_local(filename):
                    check_checkpoint_path(filename)
        return original_ensemble(filenames, arg_overrides, task, strict, suffix, num_shards, state)

    checkpoint_utils.load_model_ensemble_and_task = load_model_ensemble_and_task
