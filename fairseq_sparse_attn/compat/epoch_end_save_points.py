"""Update checkpoints at epoch ends too, when asked (``FSA_SAVE_POINTS_AT_EPOCH_ENDS=1``;
the reproduction scripts set it).

fairseq names a save of ``--save-interval-updates`` ``checkpoint_<epoch>_<updates>.pt``
only in mid-epoch: when a save point falls on an epoch's last update it writes the epoch
checkpoint ``checkpoint<epoch>.pt`` instead, and with ``--no-epoch-checkpoints`` (the
scripts' flag, so that a long run keeps only ``--keep-interval-updates`` files) that save
point is written nowhere.  "Average the last 5 checkpoints" then averaged another set of
update counts with nothing said, and a smoke run whose save points both fell on epoch ends
had nothing to average (a black-box run of table6_documents.sh, 2026-11-29).

With the variable set, such a save also gets its ``checkpoint_<epoch>_<updates>.pt`` (a
copy of the checkpoint fairseq just wrote, through a temporary file and a rename), and the
update checkpoints are pruned to ``--keep-interval-updates`` as fairseq prunes them.
Without it nothing changes (stock fairseq's files).
"""

import functools
import logging
import os

BEHAVIOUR_CHANGE = True

logger = logging.getLogger(__name__)

SWITCH = "FSA_SAVE_POINTS_AT_EPOCH_ENDS"


def asked(env=None) -> bool:
    return (os.environ if env is None else env).get(SWITCH, "") not in ("", "0")


def missed_save_point(cfg, updates: int, end_of_epoch: bool) -> bool:
    """Whether fairseq's save at ``updates`` is an update save point it names only as an
    epoch checkpoint (or, with ``--no-epoch-checkpoints``, not at all)."""
    interval = getattr(cfg, "save_interval_updates", 0) or 0
    return end_of_epoch and interval > 0 and updates > 0 and updates % interval == 0


def _written(cfg, epoch: int, suffix: str):
    """A checkpoint that fairseq's save at an epoch end just wrote (they hold the same
    state), or None: ``checkpoint_last`` unless ``--no-last-checkpoints``, else the epoch
    checkpoint when fairseq wrote one (a file left from an earlier run is not taken)."""
    names = []
    if not cfg.no_last_checkpoints:
        names.append(f"checkpoint_last{suffix}.pt")
    if not cfg.no_epoch_checkpoints and epoch % cfg.save_interval == 0:
        names.append(f"checkpoint{epoch}{suffix}.pt")
    for name in names:
        path = os.path.join(cfg.save_dir, name)
        if os.path.isfile(path):
            return path
    return None


def prune_update_checkpoints(cfg, suffix: str = ""):
    """fairseq's own pruning of the update checkpoints (``--keep-interval-updates``, and
    ``--keep-interval-updates-pattern``), with its ``checkpoint_paths``, once more: it ran
    before the copy was made."""
    from fairseq.checkpoint_utils import checkpoint_paths

    if cfg.keep_interval_updates <= 0:
        return
    pattern = r"checkpoint_\d+_(\d+){}\.pt".format(suffix)
    found = checkpoint_paths(cfg.save_dir, pattern=pattern, keep_match=True)  # newest first
    if cfg.keep_interval_updates_pattern != -1:
        found = [x for x in found if x[1] % cfg.keep_interval_updates_pattern != 0]
    for old, _ in found[cfg.keep_interval_updates :]:
        os.remove(old)


def install():
    from fairseq import checkpoint_utils

    original = checkpoint_utils.save_checkpoint
    if getattr(original, "_fsa_epoch_end_save_points", False):
        return

    @functools.wraps(original)
    def save_checkpoint(cfg, trainer, epoch_itr, val_loss):
        end_of_epoch = epoch_itr.end_of_epoch()
        result = original(cfg, trainer, epoch_itr, val_loss)
        updates = trainer.get_num_updates()
        if not (asked() and missed_save_point(cfg, updates, end_of_epoch)):
            return result
        if cfg.no_save or not trainer.should_save_checkpoint_on_current_rank or cfg.write_checkpoints_asynchronously:
            return result
        suffix = trainer.checkpoint_suffix or ""
        source = _written(cfg, epoch_itr.epoch, suffix)
        if source is None:  # --no-last-checkpoints and --no-epoch-checkpoints: nothing written to copy
            logger.warning(f"update {updates}: a save point at an epoch end, but no checkpoint was written to name it")
            return result
        from .crash_safe_checkpoints import atomic_copy

        target = os.path.join(cfg.save_dir, f"checkpoint_{epoch_itr.epoch}_{updates}{suffix}.pt")
        atomic_copy(source, target)
        logger.info(
            f"update {updates} ends epoch {epoch_itr.epoch}: also saved as {os.path.basename(target)} ({SWITCH})"
        )
        prune_update_checkpoints(cfg, suffix)
        return result

    save_checkpoint._fsa_epoch_end_save_points = True
    checkpoint_utils.save_checkpoint = save_checkpoint
