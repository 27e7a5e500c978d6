"""The package's import graph, read from the source with ``ast`` (every ``import`` statement,
at module level and inside functions): no two of fairseq_sparse_attn's modules import each
other through any path, and the attention core never reads the options (issue 26: the
namespace is resolved once, by ``options.resolve``, into the configs of
``attention/config.py``).

An edge is what an import statement names: ``import a.b`` and ``from a import b`` (``b`` a
module) -> ``a.b``; ``from a.b import name`` -> ``a.b``.  The packages Python runs on the way
count too (issue 33): importing ``a.b.c`` from outside ``a.b`` runs ``a/__init__`` and
``a/b/__init__`` first, so the importer has an edge to each of them.  A module inside a
package has no such edge to its own enclosing packages (their ``__init__`` has started
before the module runs): a package importing its own modules is how packages are built.
"""

import ast
from pathlib import Path
from typing import Dict, List, Set

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "fairseq_sparse_attn"


def module_files(root: Path, package: str) -> Dict[str, Path]:
    """{dotted module name: file} for every .py file of ``package`` under ``root``."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def enclosing(module: str) -> List[str]:
    """The packages enclosing ``module``, outermost first: ``a.b.c`` -> ``[a, a.b]``."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph(root: Path, package: str) -> Dict[str, Set[str]]:
    """{module: the package's modules it imports} (see the module docstring)."""
    files = module_files(root, package)

    def known(name: str):
        """``name`` or its closest enclosing module of the package (``a.b.attr`` -> ``a.b``)."""
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        here = module if is_package else module.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(known(a.name) for a in node.names if a.name.split(".")[0] == package)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                if base.split(".")[0] != package:
                    continue
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.add(full if full in files else known(base))
        targets.discard(None)
        # the package __init__s the import runs: the target's enclosing packages that do not
        # enclose the importer (those have started already)
        own = set(enclosing(module)) | ({module} if is_package else set())
        targets |= {p for t in list(targets) for p in enclosing(t) if p in files and p not in own}
        targets.discard(module)
        graph[module] = targets
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


@pytest.fixture(scope="module")
def graph():
    return import_graph(REPO, PACKAGE)


def test_the_reader_finds_cycles_through_function_level_and_relative_imports(tmp_path):
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .leaf import f\n")
    (pkg / "sub" / "leaf.py").write_text("def f():\n    from ..top import g\n    return g\n")
    (pkg / "top.py").write_text("from toy.sub import leaf\n\ndef g():\n    pass\n")
    (pkg / "alone.py").write_text("import toy.top\nfrom . import sub\n")
    g = import_graph(tmp_path, "toy")
    assert g["toy.sub"] == {"toy.sub.leaf"}
    assert g["toy.sub.leaf"] == {"toy.top"}  # inside a function; toy/__init__ has run already
    assert g["toy.top"] == {"toy.sub.leaf", "toy.sub"}  # `from package import module` runs sub/__init__
    assert g["toy.alone"] == {"toy.top", "toy.sub"}
    assert cycles(g) == [["toy.sub", "toy.sub.leaf", "toy.top"]]


def test_the_reader_counts_the_imports_a_package_init_runs(tmp_path):
    # issue 33: models/__init__ imported the plugin, and the plugin imported models' modules
    pkg = tmp_path / "toy"
    (pkg / "models").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "models" / "__init__.py").write_text("from .. import plugin\n")
    (pkg / "models" / "model.py").write_text("from ..errors import E\n")
    (pkg / "models" / "uses_sibling.py").write_text("from toy.models import model\n")
    (pkg / "errors.py").write_text("class E(Exception):\n    pass\n")
    (pkg / "plugin.py").write_text("from .models import model\n")
    g = import_graph(tmp_path, "toy")
    assert g["toy.plugin"] == {"toy.models.model", "toy.models"}
    assert g["toy.models.uses_sibling"] == {"toy.models.model"}  # its own package: no edge
    assert cycles(g) == [["toy.models", "toy.plugin"]]
    (pkg / "models" / "__init__.py").write_text("")
    (pkg / "models" / "entry.py").write_text("from .. import plugin\n")  # the way out
    assert cycles(import_graph(tmp_path, "toy")) == []


def test_no_import_cycle_in_the_package(graph):
    assert len(graph) > 50 and "fairseq_sparse_attn.attention.core" in graph
    assert f"{PACKAGE}.models" in graph[f"{PACKAGE}.plugin"]  # package __init__s are counted
    assert cycles(graph) == []


def test_options_and_errors_import_no_part_of_the_model(graph):
    """The options (the flag schema and its resolution) import neither the models nor the
    plugin's fairseq side; errors.py imports nothing of the package (any module may raise)."""
    fairseq_side = ("models", "plugin", "compat", "tasks", "criterions", "validation")
    options = {m: t for m, t in graph.items() if m == f"{PACKAGE}.options" or m.startswith(f"{PACKAGE}.options.")}
    assert options
    for module, targets in options.items():
        assert not {t for t in targets for part in fairseq_side if t.startswith(f"{PACKAGE}.{part}")}, module
    assert graph[f"{PACKAGE}.errors"] == set()


def test_the_attention_core_does_not_read_the_options(graph):
    attention = {m: t for m, t in graph.items() if m.startswith(f"{PACKAGE}.attention")}
    assert len(attention) > 15
    readers = sorted(m for m, targets in attention.items() if f"{PACKAGE}.options" in targets)
    assert readers == []
    # the config module is plain dataclasses: no fairseq, no other module of the package
    tree = ast.parse((REPO / PACKAGE / "attention" / "config.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "." for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"dataclasses", "typing"}


def test_error_types_live_in_errors_py():
    """Every exception class of the package is defined in errors.py (issue 33: a task raising
    DataNotFoundError imported compat for it, and that import closed the knot)."""

    def is_error(base: ast.expr) -> bool:
        name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
        return name.endswith(("Error", "Exception", "Mismatch", "InUse"))

    elsewhere = sorted(
        f"{path.relative_to(REPO)}: {node.name}"
        for module, path in module_files(REPO, PACKAGE).items()
        if module != f"{PACKAGE}.errors"
        for node in ast.parse(path.read_text()).body  # module level (a function's own control flow aside)
        if isinstance(node, ast.ClassDef) and any(is_error(b) for b in node.bases)
    )
    assert elsewhere == []
    errors = ast.parse((REPO / PACKAGE / "errors.py").read_text())
    assert {"UsageError", "DataNotFoundError", "CheckpointError"} <= {
        n.name for n in errors.body if isinstance(n, ast.ClassDef)
    }
