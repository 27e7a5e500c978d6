"""Noise that says nothing about the run, dropped precisely (nothing else is hidden):

- ``Please install tensorboardX: pip install tensorboardX``, logged at INFO by
  ``fairseq.tasks.text_to_speech`` when fairseq registers its tasks (every command, even
  ``--help``).  A filter on that one logger drops that one message; it has to be installed
  before fairseq is imported, which the plugin's ``fsa-*`` commands and
  ``import fairseq_sparse_attn`` do (``fairseq-train --user-dir`` imports fairseq first, so
  the line still appears there).  ``--tensorboard-logdir`` needs the ``tensorboard``
  package, not tensorboardX.
- hydra's deprecation ``UserWarning``s raised while fairseq turns its argparse namespace
  into a config (``hydra.experimental.initialize``/``compose``, ``version_base``, the
  ``# @package _group_`` header, automatic schema matching, ``strict``): fairseq 0.12 uses
  that API; nothing a user can change.
- torch's ``FutureWarning`` that ``torch.cuda.amp.autocast(args...)`` is deprecated, raised
  where fairseq's own code calls it (``fairseq_task.train_step``, at the first update of
  every training, CPU runs too): two lines on stderr that are not log lines, printed
  before anything the run says (a refusal at the first step among it).  Only that message,
  and only from fairseq's modules.
"""

import logging
import warnings

BEHAVIOUR_CHANGE = False

TENSORBOARDX_LOGGERS = (
    "fairseq.tasks.text_to_speech",
    "fairseq.tasks.speech_to_text",
    "fairseq.tasks.frm_text_to_speech",
)
HYDRA_DEPRECATIONS = (
    r"\s*hydra\.experimental\.(initialize|compose)\(\) is no longer experimental",
    r"\s*The version_base parameter is not specified",
    r"\s*In '[^']*': Usage of deprecated keyword in package header",
    r"\s*'[^']*' is validated against ConfigStore schema with the same name",
    r"\s*The strict flag in the compose API is deprecated",
)

#: torch's deprecation of ``torch.cuda.amp.autocast``, which fairseq 0.12 calls
AUTOCAST_DEPRECATION = r"`torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated"


class _DropMessage(logging.Filter):
    def __init__(self, prefix):
        super().__init__()
        self.prefix = prefix

    def filter(self, record):
        return not str(record.msg).startswith(self.prefix)


def install():
    for name in TENSORBOARDX_LOGGERS:
        log = logging.getLogger(name)
        if not any(isinstance(f, _DropMessage) for f in log.filters):
            log.addFilter(_DropMessage("Please install tensorboardX"))
    for message in HYDRA_DEPRECATIONS:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
    warnings.filterwarnings("ignore", message=AUTOCAST_DEPRECATION, category=FutureWarning, module=r"fairseq\.")
