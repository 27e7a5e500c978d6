"""The package's import graph, read from the source with ``ast`` (every ``import`` statement,
at module level and inside functions): no cycle among fairseq_sparse_attn's modules, and
the attention core never reads the options (issue 26: the namespace is resolved once, by
``options.resolve``, into the configs of ``attention/config.py``).

An edge is what an import statement names: ``import a.b`` and ``from a import b`` (``b`` a
module) -> ``a.b``; ``from a.b import name`` -> ``a.b``.  The packages Python runs on the way
(``a/__init__``) are not edges: a package importing its own modules is how packages are
built, and every module of it would otherwise be in a cycle with its ``__init__``.
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
    assert g["toy.sub.leaf"] == {"toy.top"}  # inside a function
    assert g["toy.top"] == {"toy.sub.leaf"}  # `from package import module`
    assert g["toy.alone"] == {"toy.top", "toy.sub"}
    assert cycles(g) == [["toy.sub.leaf", "toy.top"]]


def test_no_import_cycle_in_the_package(graph):
    assert len(graph) > 50 and "fairseq_sparse_attn.attention.core" in graph
    assert cycles(graph) == []


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
