"""The one line convention of every text file the plugin reads or writes.

A file is split on ``"\\n"`` only (not on ``"\\r"``, ``"\\x0b"``, ``"\\x1c"``, ``"\\u2028"``
and the other separators of ``str.splitlines`` or Python's universal newlines, which
may occur inside a sentence); one ``"\\r"`` before each ``"\\n"`` is dropped (Windows line
ends), the final newline ends the last line, and one trailing blank line is tolerated (an
editor's extra newline) except in formats where a blank line is a record (an alignment
file: a sentence without links; ``blank_tail=True``).  Writers end every line with ``"\\n"``.  Used by data_prep, score,
the side-file and gold-alignment readers and interactive input, so that they all count
the same lines.

Bytes that are not UTF-8 are one line naming the file and the line
(:class:`TextFileError`).
"""

from typing import List

from .errors import TextFileError


def split_lines(text: str, blank_tail: bool = False) -> List[str]:
    """The lines of ``text`` by the convention above; ``blank_tail``: a trailing blank
    line is a line (formats where a blank line is a record)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    if lines and lines[-1] == "" and not blank_tail:
        lines.pop()  # one trailing blank line
    return lines


def decode(data: bytes, path, encoding: str = "utf-8") -> str:
    """``data`` decoded; invalid bytes are a :class:`TextFileError` naming ``path`` and the
    line."""
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise TextFileError(f"{path}, line {line}: not valid {encoding.upper()} ({e.reason})") from None


def read_lines(path, encoding: str = "utf-8", blank_tail: bool = False) -> List[str]:
    """The lines of the file ``path`` (gzip when it ends in ``.gz``)."""
    if str(path).endswith(".gz"):
        import gzip

        with gzip.open(path, "rb") as f:
            data = f.read()
    else:
        with open(path, "rb") as f:
            data = f.read()
    return split_lines(decode(data, path, encoding), blank_tail)
