"""docs/code_layout.md follows the tree: its package listing names every file of
``fairseq_sparse_attn`` and no file or folder that does not exist (issue 33.8).

The listing is the first code block of the section "The package": an entry line is indented
by two spaces per folder level and begins with one or more names (``x.py`` or ``folder/``);
what follows the names on the line, and the deeper-indented lines, describe them.  A
package's ``__init__.py`` is covered by its folder's entry, except the top-level one (the
``--user-dir`` entry point), which is listed.
"""

import re
from pathlib import Path
from typing import Set, Tuple

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "fairseq_sparse_attn"
DOC = REPO / "docs" / "code_layout.md"
NAME = re.compile(r"^[A-Za-z_][\w]*(\.py|/)$")
#: entries begin at most this far in; descriptions continue further in
MAX_ENTRY_INDENT = 16


def listing(text: str):
    """The lines of the package listing (the first code block after "## The package")."""
    section = text.split("## The package", 1)[1]
    block = section.split("```", 2)[1]
    return block.splitlines()[1:]  # (the language tag line)


def documented(text: str) -> Tuple[Set[str], Set[str]]:
    """(files, folders) the listing names, as paths relative to the repository."""
    files: Set[str] = set()
    folders: Set[str] = set()
    stack = []  # (indent, folder path)
    root_seen = False
    for line in listing(text):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if not root_seen:
            assert line.strip().split()[0] == f"{PACKAGE}/", "the listing begins with the package folder"
            root_seen = True
            stack = [(-1, PACKAGE)]
            continue
        if indent == 0:
            break  # the package ends: the rest of the block is outside it
        if indent > MAX_ENTRY_INDENT:
            continue  # a description line
        names = []
        for token in line.split():
            if not NAME.match(token):
                break
            names.append(token)
        if not names:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        for name in names:
            path = f"{parent}/{name.rstrip('/')}"
            if name.endswith("/"):
                folders.add(path)
                if len(names) == 1:
                    stack.append((indent, path))
            else:
                files.add(path)
    return files, folders


def package_files() -> Tuple[Set[str], Set[str]]:
    files, folders = set(), set()
    for path in (REPO / PACKAGE).rglob("*.py"):
        rel = path.relative_to(REPO)
        if "__pycache__" in rel.parts:
            continue
        if rel.name == "__init__.py" and len(rel.parts) > 2:
            folders.add(str(rel.parent))
            continue
        files.add(str(rel))
    return files, folders


def test_the_layout_doc_lists_every_package_file_and_nothing_else():
    doc_files, doc_folders = documented(DOC.read_text())
    files, folders = package_files()
    assert sorted(files - doc_files) == [], "files missing from docs/code_layout.md"
    assert sorted(doc_files - files) == [], "docs/code_layout.md lists files that do not exist"
    assert sorted(folders - doc_folders) == [], "packages missing from docs/code_layout.md"
    assert sorted(doc_folders - folders) == [], "docs/code_layout.md lists folders that do not exist"


def test_the_parser_reads_nested_entries_and_several_names_per_line():
    text = (
        "## The package\n\n```\n"
        "fairseq_sparse_attn/\n"
        "  __init__.py   the entry\n"
        "  attention/\n"
        "    core.py     attend(); a description that runs on\n"
        "                         onto a second line naming notes.py/\n"
        "    biases/     registry\n"
        "      dea.py  lpea.py   one file each\n"
        "  cli.py        commands\n"
        "scripts/lib.sh\n"
        "```\n"
    )
    files, folders = documented(text)
    p = PACKAGE
    assert files == {
        f"{p}/__init__.py",
        f"{p}/attention/core.py",
        f"{p}/attention/biases/dea.py",
        f"{p}/attention/biases/lpea.py",
        f"{p}/cli.py",
    }
    assert folders == {f"{p}/attention", f"{p}/attention/biases"}


def test_no_two_test_files_share_a_name():
    """tests/ has no __init__.py: pytest imports test files by their base name, so two of one
    name in unit/ and integration/ stop `make test` at collection ("import file mismatch"),
    which `make test-fast` (unit only) never sees (a CI rehearsal, 2026-11-28)."""
    from collections import Counter

    names = Counter(p.name for p in (REPO / "tests").rglob("test_*.py"))
    assert [name for name, n in names.items() if n > 1] == []
