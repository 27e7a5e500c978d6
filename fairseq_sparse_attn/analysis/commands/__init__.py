"""The ``fsa-analyze`` subcommands, one module each (see :mod:`.base` for what a module
provides).  A new subcommand is a new module here plus its name in :data:`MODULES`."""

import importlib
from types import ModuleType
from typing import Dict

MODULES = ("stats", "norms", "align", "hallucination", "filter", "heatmap", "curves", "aer_table", "explore")


def load() -> Dict[str, ModuleType]:
    """``{subcommand name: module}`` in :data:`MODULES` order."""
    out = {}
    for name in MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        out[module.NAME] = module
    return out
