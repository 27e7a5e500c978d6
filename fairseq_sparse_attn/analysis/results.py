"""Writing results: JSON (with provenance), TSV, and the list of what was written.

Every JSON result of ``fsa-analyze`` goes through :meth:`Output.json`, i.e.
:func:`fairseq_sparse_attn.provenance.write_json` (a ``"provenance"`` object beside the
result's own keys, written atomically) after :func:`clean` (``nan``/``inf`` -> ``null``,
tuples -> lists, keys -> strings).  Each file written is announced on stdout, one line
per file (``wrote PATH``); a directory of many files (the alignment files) is one line.
"""

import json
import math
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

from ..provenance import write_json as write_with_provenance

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


class Output:
    """An output directory (created) and the files written into it, announced on
    ``stream`` as they are written."""

    def __init__(self, directory: Union[str, Path], stream=None, argv: Optional[Sequence[str]] = None):
        """``argv``: the command line recorded in the provenance (default ``sys.argv``)."""
        self.dir = Path(directory)
        self.argv = None if argv is None else list(argv)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.stream = stream
        self.files: List[Path] = []

    def __truediv__(self, name: str) -> Path:
        return self.dir / name

    def wrote(self, path: Union[str, Path], note: Optional[str] = None) -> Path:
        path = Path(path)
        self.files.append(path)
        print(f"wrote {path}" + (f" ({note})" if note else ""), file=self.stream or sys.stdout)
        return path

    def json(self, name: str, data: Dict, **provenance) -> Path:
        """``data`` + provenance (``seed=...`` etc., see :mod:`fairseq_sparse_attn.provenance`)."""
        if self.argv is not None:
            provenance.setdefault("argv", self.argv)
        return self.wrote(write_with_provenance(self.dir / name, clean(data), **provenance))

    def tsv(self, name: str, header: Sequence[str], rows: Sequence[Sequence]) -> Path:
        write_tsv(self.dir / name, header, rows)
        return self.wrote(self.dir / name)
