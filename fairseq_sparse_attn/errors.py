"""The plugin's error types, in one module that imports nothing of the package (so any
module may raise them without an import of the module that detects the problem: a task
raises :class:`DataNotFoundError` without importing :mod:`.compat`).

:class:`UsageError` and its subclasses are bad input a user can fix, raised with a
one-line message that names the file / line / flag and what was expected; the ``fsa-*``
commands print it as ``fsa-train: error: <message>`` (exit status 1) instead of a
traceback (``FSA_TRACEBACK=1`` shows the traceback).  Under ``fairseq-train --user-dir``
it is the last line of fairseq's traceback.  docs/errors.md lists them with their tests.
The modules that raise them re-export their names (``compat.data_checks.DataError``).
"""

import argparse


class UsageError(ValueError):
    """Bad input (data, checkpoint, flags) with a one-line explanation."""


# ---------------------------------------------------------------- data
class DataError(UsageError):
    """Binarized data that fairseq would misread; the message names the file."""


class DataNotFoundError(DataError, FileNotFoundError):
    """A data directory or file that is not there."""


class TextFileError(UsageError):
    """A text file that is not UTF-8."""


class DocumentFormatError(UsageError):
    """A document-marked corpus that does not line up; the message names file and line."""


class ParseFormatError(ValueError):
    """Malformed parse input; the message names the file, the line and what was expected."""


class AlignmentError(ValueError):
    """BPE pieces that do not spell the parse's words."""


class ParsingError(RuntimeError):
    """A user-facing problem (missing model, missing package); the message says what to do."""


# ---------------------------------------------------------------- checkpoints, save dirs
class CheckpointError(UsageError):
    """A checkpoint that cannot be read; the message names the file."""


class DictionaryMismatch(UsageError):
    """The data-bin's dictionary is not the one the checkpoint was trained with."""


class SaveDirInUse(UsageError):
    """Another training holds the save dir."""


# ---------------------------------------------------------------- training runs
class DistributedSetupError(RuntimeError):
    """A multi-process CPU run whose world cannot be formed as configured."""


class TrainingDivergedError(FloatingPointError):
    """Raised when training produces NaN/inf; nothing is saved from that state."""


# ---------------------------------------------------------------- command lines


def usage_error_line(prog: str, message: str, help_command: str = None) -> str:
    """A bad flag of the command ``prog`` as one line, without argparse's usage block (the
    ``fsa-*`` commands' form; printed with exit status 2).  ``help_command``: how the user
    runs it, where that is not ``prog`` (``python -m fairseq_sparse_attn.tools.score``)."""
    return f"{prog}: error: {message} (`{help_command or prog} --help` lists the flags)\n"


class OneLineErrorParser(argparse.ArgumentParser):
    """An ``argparse`` parser whose errors are :func:`usage_error_line`, exit status 2 (as the
    ``fsa-train`` family's wrappers report theirs); its subcommands' parsers are of this
    class too."""

    def __init__(self, *args, help_command=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.help_command = help_command

    def error(self, message):
        self.exit(2, usage_error_line(self.prog, message, self.help_command))
