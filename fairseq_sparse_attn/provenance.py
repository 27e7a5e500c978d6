"""Provenance of every result file the project writes.

One helper, used by every JSON writer (demo, benchmarks, per-paper tables, ``fsa-analyze``,
``tools.score``, ``fsa-length-bleu``, ``fsa-contrastive``):

    from fairseq_sparse_attn.provenance import write_json
    write_json(path, result, seed=1, sacrebleu_signature=sig)

writes ``result`` with a ``"provenance"`` object beside its own keys:

==========================  ==============================================================
field                       what
==========================  ==============================================================
``plugin_version``          ``fairseq_sparse_attn.__version__``
``git_commit``              commit of the checkout the plugin was imported from (or None)
``git_dirty``               True when that checkout has uncommitted changes (None: no git)
``versions``                python, torch, fairseq, sacrebleu, entmax, numpy (None: missing);
                            triton, where installed (what auto's decisions are measured under)
``device``                  ``cpu`` or the CUDA device name(s); ``cuda_available``
``threads``                 ``torch.get_num_threads()``; ``cpu_count``
``command``                 the full command line (``sys.argv``, shell-quoted)
``seed``                    the seed the caller names (None when not given)
``date``                    UTC, ISO 8601
``hostname``                the machine
``sacrebleu_signature``     where BLEU is reported (None otherwise)
==========================  ==============================================================

The file is written atomically (temporary file + rename): a stopped run never leaves a
half-written result.  :func:`check_provenance` is what the tests use to check a file.
"""

import datetime
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Optional

PROVENANCE_KEY = "provenance"
REQUIRED_FIELDS = (
    "plugin_version",
    "git_commit",
    "git_dirty",
    "versions",
    "device",
    "cuda_available",
    "threads",
    "cpu_count",
    "command",
    "seed",
    "date",
    "hostname",
    "sacrebleu_signature",
)
VERSIONED_PACKAGES = ("torch", "fairseq", "sacrebleu", "entmax", "numpy")
#: recorded where installed, not required of a record (results made before 2026-11-29 lack
#: it): the Triton version a ``make bench-gpu`` result ran with, which auto's decisions hold
#: for (``attention/backends/triton.py: measured_faster``)
OPTIONAL_VERSIONED_PACKAGES = ("triton",)

_REPO = Path(__file__).resolve().parents[1]


def _git(*args) -> Optional[str]:
    try:
        out = subprocess.run(["git", "-C", str(_REPO), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state():
    """(commit, dirty) of the checkout the plugin runs from; (None, None) outside git."""
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return None, None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return commit, (None if status is None else bool(status))


def package_versions() -> Dict[str, Optional[str]]:
    from importlib import metadata

    versions = {"python": platform.python_version()}
    for name in VERSIONED_PACKAGES + OPTIONAL_VERSIONED_PACKAGES:
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None) if module is not None else None
        if version is None:
            for dist in (name, "fairseq-fixed") if name == "fairseq" else (name,):
                try:
                    version = metadata.version(dist)
                    break
                except metadata.PackageNotFoundError:
                    continue
        if version is not None or name in VERSIONED_PACKAGES:
            versions[name] = None if version is None else str(version)
    return versions


def device_info() -> Dict[str, Any]:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is always there in practice
        return {"device": "cpu", "cuda_available": False, "threads": None}
    cuda = torch.cuda.is_available()
    device = "cpu"
    if cuda:
        device = ", ".join(sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())}))
    return {"device": device, "cuda_available": cuda, "threads": torch.get_num_threads()}


def provenance(
    seed: Optional[int] = None, sacrebleu_signature: Optional[str] = None, argv=None, **extra
) -> Dict[str, Any]:
    """The provenance record of a result computed by this process now."""
    from . import __version__

    commit, dirty = git_state()
    record = {
        "plugin_version": __version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "versions": package_versions(),
        **device_info(),
        "cpu_count": os.cpu_count(),
        "command": shlex.join(str(a) for a in (sys.argv if argv is None else argv)),
        "seed": seed,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "sacrebleu_signature": sacrebleu_signature,
    }
    record.update(extra)
    return record


def with_provenance(result: Dict[str, Any], **kwargs) -> Dict[str, Any]:
    """``result`` plus its ``provenance`` (a given one is kept and completed)."""
    if not isinstance(result, dict):
        raise TypeError(f"a result file holds a JSON object, got {type(result).__name__}")
    record = provenance(**kwargs)
    record.update(result.get(PROVENANCE_KEY) or {})
    return {**result, PROVENANCE_KEY: record}


def write_json(path, result: Dict[str, Any], *, indent: int = 2, **kwargs) -> Path:
    """Write ``result`` + provenance to ``path`` atomically; returns the path.
    ``kwargs``: ``seed``, ``sacrebleu_signature``, ``argv`` and extra fields."""
    path = Path(path)
    data = with_provenance(result, **kwargs)
    text = json.dumps(data, indent=indent, ensure_ascii=False, allow_nan=False)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text + "\n", encoding="utf-8")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def check_provenance(data: Dict[str, Any], bleu: bool = False) -> Dict[str, Any]:
    """Raise ValueError naming the first missing field; returns the provenance record.
    ``bleu``: the file reports BLEU, so the sacreBLEU signature must be set."""
    record = data.get(PROVENANCE_KEY) if isinstance(data, dict) else None
    if not isinstance(record, dict):
        raise ValueError(f"no '{PROVENANCE_KEY}' object in the result")
    missing = [f for f in REQUIRED_FIELDS if f not in record]
    if missing:
        raise ValueError(f"provenance lacks {', '.join(missing)}")
    for name in VERSIONED_PACKAGES + ("python",):
        if name not in record["versions"]:
            raise ValueError(f"provenance versions lack {name}")
    if not record["command"]:
        raise ValueError("provenance has an empty command line")
    if bleu and not record.get("sacrebleu_signature"):
        raise ValueError("the result reports BLEU but its provenance has no sacreBLEU signature")
    return record


def finite(value):
    """``value`` with every NaN / infinite float (nested in dicts, lists, tuples) replaced
    by None, for results where "not measured" is a NaN (``write_json`` refuses NaN: JSON
    has none)."""
    import math

    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
