"""Exit 0 when the installed plugin's commands are the ones ``setup.py`` names, else 1.

``make install`` (scripts/install.sh) keeps an installed plugin; its command wrappers
(``fsa-length-bleu`` ...) call the function they were installed with, so a command added to
``setup.py`` or pointed at another function since needs the plugin installed again.  Run as
a script (the repository root is then not on ``sys.path``, so a stale
``fairseq_sparse_attn.egg-info`` there is not read as the installed metadata)."""

import re
import sys
from importlib import metadata
from pathlib import Path


def declared(setup_py: Path) -> set:
    """``name = module:function`` of every console script in ``setup.py``."""
    return set(re.findall(r'"(fsa-[\w-]+ = [\w.:]+)"', setup_py.read_text()))


def installed(distribution: str = "fairseq_sparse_attn") -> set:
    try:
        points = metadata.distribution(distribution).entry_points
    except metadata.PackageNotFoundError:
        return set()
    return {f"{e.name} = {e.value}" for e in points if e.group == "console_scripts"}


def main(argv=None) -> int:
    setup_py = Path(argv[0] if argv else Path(__file__).resolve().parents[1] / "setup.py")
    want = declared(setup_py)
    return 0 if want and want <= installed() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
