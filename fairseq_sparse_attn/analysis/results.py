"""Writing results: JSON (with provenance), TSV, and the list of what was written.

Every JSON result of ``fsa-analyze`` goes through :meth:`Output.json`, i.e.
:func:`fairseq_sparse_attn.provenance.write_json` (a ``"provenance"`` object beside the
result's own keys, written atomically) after :func:`clean` (``nan``/``inf`` -> ``null``,
tuples -> lists, keys -> strings).  Each file written is announced on stdout, one line
per file (``wrote PATH``); a directory of many files (the alignment files) is one line.

Outputs are atomic (issue 24: after a SIGKILL a truncated alignment file sat beside the
previous run's ``align.json``).  A command writes into a staging folder beside the target,
``.<name>.<pid>@<host>.tmp`` (created on the first write: a command that fails on its
inputs creates nothing), and :func:`committed_outputs` (around every ``fsa-analyze``
command) moves it into place when the command has succeeded: a target that does not exist
yet is the staging folder renamed, whole; into an existing directory (which may hold the
results of other commands) each file or folder written replaces its previous version by a
rename, so a reader sees the old or the new file, never a part.  A failed command removes
its staging folder; one left by a killed run is removed by the next run for that target
once its writer is gone (:mod:`fairseq_sparse_attn.writers`).  ``wrote PATH`` lines are
printed when the files are in place.  (A subcommand's ``run`` called from Python outside
:func:`committed_outputs` writes in place, as before.)
"""

import contextlib
import json
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

from ..provenance import write_json as write_with_provenance
from ..writers import temporary_name, writer_gone, writer_of

SCHEMA_VERSION = 1


def number_key(x: float) -> str:
    """The JSON key of a temperature or fraction: ``0.5 -> "0.5"``, ``1.0 -> "1"``."""
    return format(float(x), "g")


def clean(value):
    """JSON-safe: nan/inf -> None, tuples -> lists, keys -> str."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def write_json(data: Dict, path: Union[str, Path]) -> None:
    """``data`` as it is (cleaned), without provenance: for callers that embed it in
    something else.  Result files use :meth:`Output.json`."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(clean(data), f, indent=2, ensure_ascii=False, allow_nan=False)
        f.write("\n")


def cell(value) -> str:
    if value is None:
        return "nan"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else format(value, ".6g")
    return str(value).replace("\t", " ").replace("\n", " ")


def write_tsv(path: Union[str, Path], header: Sequence[str], rows: Sequence[Sequence]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("\t".join(header) + "\n")
        for row in rows:
            f.write("\t".join(cell(v) for v in row) + "\n")


def check_output_dir(directory: Union[str, Path]) -> None:
    """ValueError (one line) when ``directory`` cannot be an output directory."""
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--output-dir {path} is a file, not a directory")
    parent = next((p for p in (path.absolute(), *path.absolute().parents) if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ValueError(f"--output-dir {path}: {parent} is a file, not a directory")
    if parent is not None and not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"--output-dir {path}: {parent} is not writable")


def staging_dirs(target: Path) -> List[Path]:
    """Staging folders of ``target`` (this and earlier runs)."""
    parent = target.absolute().parent
    if not parent.is_dir():
        return []
    prefix = f".{target.name}."
    return sorted(
        p
        for p in parent.iterdir()
        if p.name.startswith(prefix) and writer_of(p) is not None and Path(writer_of(p)[0]).name == f".{target.name}"
    )


_COLLECTING: List[List["Output"]] = []


class Output:
    """An output directory and the files written into it: staged in a folder beside it
    and put in place by :meth:`commit` (see the module's docstring)."""

    def __init__(self, directory: Union[str, Path], stream=None, argv: Optional[Sequence[str]] = None):
        """``argv``: the command line recorded in the provenance (default ``sys.argv``)."""
        self.target = Path(directory)
        check_output_dir(self.target)
        self.staging = Path(temporary_name(self.target.absolute().parent / f".{self.target.name}"))
        self.argv = None if argv is None else list(argv)
        self.stream = stream
        self.files: List[Path] = []
        self._notes: List[Optional[str]] = []
        # outside committed_outputs (a subcommand's run() called from Python) the files are
        # written in place, as they are announced
        self.committed = not _COLLECTING
        if _COLLECTING:
            _COLLECTING[-1].append(self)

    @property
    def dir(self) -> Path:
        """Where the files are written now (the staging folder, created on first use)."""
        if self.committed:
            self.target.mkdir(parents=True, exist_ok=True)
            return self.target
        if not self.staging.is_dir():
            for stale in staging_dirs(self.target):
                if writer_gone(stale):
                    shutil.rmtree(stale, ignore_errors=True)
            self.staging.mkdir(parents=True)
        return self.staging

    def __truediv__(self, name: str) -> Path:
        return self.dir / name

    def final_path(self, path: Union[str, Path]) -> Path:
        path = Path(path)
        try:
            return self.target / path.absolute().relative_to(self.staging)
        except ValueError:
            return path

    def wrote(self, path: Union[str, Path], note: Optional[str] = None) -> Path:
        """Record ``path`` (announced as its final path when it is in place)."""
        path = self.final_path(path)
        self.files.append(path)
        self._notes.append(note)
        if self.committed:
            self._announce(path, note)
        return path

    def _announce(self, path, note):
        print(f"wrote {path}" + (f" ({note})" if note else ""), file=self.stream or sys.stdout)

    def json(self, name: str, data: Dict, **provenance) -> Path:
        """``data`` + provenance (``seed=...`` etc., see :mod:`fairseq_sparse_attn.provenance`)."""
        if self.argv is not None:
            provenance.setdefault("argv", self.argv)
        return self.wrote(write_with_provenance(self.dir / name, clean(data), **provenance))

    def tsv(self, name: str, header: Sequence[str], rows: Sequence[Sequence]) -> Path:
        write_tsv(self.dir / name, header, rows)
        return self.wrote(self.dir / name)

    def commit(self) -> None:
        """Put the staged files in place (see the module's docstring)."""
        if self.committed:
            return
        self.committed = True
        if self.staging.is_dir():
            if not self.target.exists():
                self.target.parent.mkdir(parents=True, exist_ok=True)
                os.rename(self.staging, self.target)
            else:
                for entry in sorted(self.staging.iterdir()):
                    _replace(entry, self.target / entry.name, self.staging)
                shutil.rmtree(self.staging, ignore_errors=True)
        for path, note in zip(self.files, self._notes):
            self._announce(path, note)

    def discard(self) -> None:
        if not self.committed:
            shutil.rmtree(self.staging, ignore_errors=True)


def _replace(new: Path, old: Path, staging: Path) -> None:
    """``new`` in place of ``old`` by renames (a folder: the old one moved aside first)."""
    if new.is_dir() and old.is_dir():
        aside = staging / f".replaced.{old.name}"
        os.rename(old, aside)
        os.rename(new, old)
    else:
        if old.is_dir():
            shutil.rmtree(old)
        os.replace(new, old)


@contextlib.contextmanager
def committed_outputs():
    """Every :class:`Output` made inside the block is committed when the block succeeds
    and discarded when it raises."""
    outputs: List[Output] = []
    _COLLECTING.append(outputs)
    try:
        yield outputs
    except BaseException:
        for out in outputs:
            out.discard()
        raise
    finally:
        _COLLECTING.remove(outputs)
    for out in outputs:
        out.commit()
