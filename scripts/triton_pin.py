"""Print the Triton version the installed torch pins, as ``triton==X.Y.Z`` (make install).

torch's CUDA wheels declare it (``Requires-Dist: triton==...; platform_system == "Linux"
...``); its CPU wheels do not, yet the fused kernels (fairseq_sparse_attn/kernels) run on a
CPU through Triton's interpreter in CI, so the version is then taken from
:data:`TORCH_TRITON` (torch minor version -> the Triton its CUDA wheels pin).  The
``TRITON_VERSION`` environment variable overrides both.  Exit status 3 with one line on
stderr when the version is unknown.

Usage: ``python scripts/triton_pin.py`` (the installed torch), or
``python scripts/triton_pin.py TORCH_VERSION [REQUIRES-DIST ...]`` (tests).
"""

import os
import re
import sys
from typing import Dict, Iterable, List, Optional

#: torch minor version -> the Triton version its CUDA wheels pin
TORCH_TRITON = {"2.10": "3.6.0", "2.11": "3.6.0", "2.12": "3.7.0", "2.13": "3.7.1"}


def kernel_check_versions(installed: str) -> List[str]:
    """The other Triton versions ``make check-kernels`` compiles every kernel configuration
    under (scripts/check_kernels.sh): the newest patch of each minor version in
    :data:`TORCH_TRITON`, but the installed one's minor version (3.7.0 beside an installed
    3.7.1 cost ~10 minutes of compiling in CI, for a toolchain the same but for fixes)."""

    def minor(v: str) -> str:
        return ".".join(v.split(".")[:2])

    newest: Dict[str, str] = {}
    for v in sorted(set(TORCH_TRITON.values()), key=lambda v: tuple(int(x) for x in v.split("."))):
        newest[minor(v)] = v
    return [v for m, v in newest.items() if m != minor(installed)]


def _applies(requirement: str) -> bool:
    """The requirement's environment marker holds here (True without a marker, or when
    ``packaging`` is not installed to evaluate it)."""
    if ";" not in requirement:
        return True
    try:
        from packaging.markers import Marker
    except ImportError:
        return True
    return Marker(requirement.split(";", 1)[1]).evaluate({"extra": ""})


def pinned_triton(torch_version: str, requires: Iterable[str]) -> Optional[str]:
    """The Triton version for ``torch_version`` whose metadata lists ``requires``."""
    for r in requires:
        m = re.match(r"\s*triton\s*==\s*([0-9][\w.]*)", r)
        if m and _applies(r):
            return m.group(1)
    minor = ".".join(torch_version.split("+")[0].split(".")[:2])
    return TORCH_TRITON.get(minor)


def main(argv) -> int:
    if os.environ.get("TRITON_VERSION"):
        print(f"triton=={os.environ['TRITON_VERSION']}")
        return 0
    if argv:
        torch_version, requires = argv[0], argv[1:]
    else:
        import importlib.metadata as md

        torch_version = md.version("torch")
        requires = md.requires("torch") or []
    version = pinned_triton(torch_version, requires)
    if version is None:
        known = ", ".join(f"{k} -> {v}" for k, v in TORCH_TRITON.items())
        print(
            f"make install: no Triton version known for torch {torch_version} (its metadata pins none; "
            f"known: {known}); set TRITON_VERSION=X.Y.Z",
            file=sys.stderr,
        )
        return 3
    print(f"triton=={version}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
