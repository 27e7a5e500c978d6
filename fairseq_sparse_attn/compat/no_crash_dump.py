"""No ``crash.pt`` for bad input.  fairseq's trainer saves the whole training state as
``<save-dir>/crash.pt`` for any exception inside a training step (a debugging dump); for a
:class:`~fairseq_sparse_attn.errors.UsageError` (a flag that a backend can only refuse at
the first forward, e.g. ``--attn-backend triton`` with a mask other than padding and causal) the state is the freshly built
model, so the dump is a large useless file beside the user's checkpoints.  The flags
themselves are checked before any work (``fairseq_sparse_attn.validation``); this patch is
the net under the checks that can only happen at the first forward.
"""

import functools
import logging
import os
import sys

BEHAVIOUR_CHANGE = False  # no training result changes: only the debug dump is skipped
CRASH_DUMP = "crash.pt"

logger = logging.getLogger(__name__)


def is_usage_error_dump(filename, exc=None) -> bool:
    """True when ``filename`` is fairseq's crash dump and the exception being handled
    (``exc``, else ``sys.exc_info()``) is a UsageError."""
    from ..errors import UsageError

    exc = exc if exc is not None else sys.exc_info()[1]
    return os.path.basename(str(filename)) == CRASH_DUMP and isinstance(exc, UsageError)


def install():
    from fairseq.trainer import Trainer

    original = Trainer.save_checkpoint
    if getattr(original, "_fsa_no_crash_dump", False):
        return

    @functools.wraps(original)
    def save_checkpoint(self, filename, extra_state):
        if is_usage_error_dump(filename):
            logger.info("not writing %s: the error is bad input, not a crash", filename)
            return None
        return original(self, filename, extra_state)

    save_checkpoint._fsa_no_crash_dump = True
    Trainer.save_checkpoint = save_checkpoint
