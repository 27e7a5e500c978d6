"""docs/errors.md: every table row names at least one test, and every test it names exists
in tests/ (a ``def test_...`` in some test file), so the table cannot claim a check that
is not there.  A name ending in ``...`` (earlier rows) stands for the tests it begins."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TABLE_HEADER = "| command | what the user gets | test |"


def table_rows(text):
    """[(section, cells)] of every table row (header and separator lines left out)."""
    rows, section, header = [], None, None
    for line in text.splitlines():
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        if not line.startswith("|"):
            header = None
            continue
        if header is None:
            header = line.strip()
            continue
        if re.fullmatch(r"\|[\s\-|]+\|", line.strip()):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        rows.append((section, header, cells))
    return rows


def named_tests(cell):
    return [name.split("[")[0] for name in re.findall(r"`(test_[\w.\[\]-]*)`", cell)]


def defined_tests():
    names = set()
    for path in (REPO / "tests").rglob("*.py"):
        names |= set(re.findall(r"^\s*def (test_\w+)\(", path.read_text(), re.M))
    return names


def exists(name, defined):
    if name.endswith("..."):
        return any(d.startswith(name[:-3]) for d in defined)
    return name in defined


def test_every_named_test_exists():
    rows = table_rows((REPO / "docs" / "errors.md").read_text())
    defined = defined_tests()
    missing = [
        (section, name) for section, _, cells in rows for name in named_tests(cells[-1]) if not exists(name, defined)
    ]
    assert missing == []


def test_rows_in_the_command_table_format_each_name_a_test():
    rows = [r for r in table_rows((REPO / "docs" / "errors.md").read_text()) if r[1] == TABLE_HEADER]
    assert len(rows) >= 22
    untested = [cells[0] for _, _, cells in rows if len(cells) != 3 or not named_tests(cells[2])]
    assert untested == []


def test_the_parser_finds_a_missing_name(tmp_path):
    """The check above can fail: a row naming a test that does not exist is reported."""
    text = f"## Flags\n\n{TABLE_HEADER}\n| --- | --- | --- |\n| `x` | y \\| z | `test_not_there` |\n"
    ((section, header, cells),) = table_rows(text)
    assert (section, header) == ("Flags", TABLE_HEADER)
    assert cells[1] == "y \\| z"
    assert named_tests(cells[2]) == ["test_not_there"]
    assert not exists("test_not_there", defined_tests())
    assert exists("test_every_named_...", defined_tests())
