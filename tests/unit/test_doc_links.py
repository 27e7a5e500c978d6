"""Every relative link and anchor in the project's Markdown points somewhere real.

Checked: README.md, CHANGELOG.md and docs/**/*.md.  A link ``[text](path#anchor)`` must name
a file or folder that exists (relative to the file that holds the link), and its anchor must be
the slug of a heading of the target file, computed the way GitHub computes it: the heading's
text as rendered (link targets, emphasis marks and backticks gone), lowercased, every character
that is not a letter, digit, ``_``, ``-`` or space removed, spaces turned into ``-``; a
repeated slug gets ``-1``, ``-2``, ... in order of appearance.  External links (http, https,
mailto) are not checked.  Links inside fenced code blocks and inline code are not links.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`+[^`]*?`+", re.S)
# [text](target) and ![alt](target); the text may span lines; an optional "title" follows.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
ATX_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_files(root):
    files = [root / "README.md", root / "CHANGELOG.md"]
    files += sorted((root / "docs").rglob("*.md"))
    return [f for f in files if f.is_file()]


def prose_lines(text):
    """The lines of ``text`` outside fenced code blocks (fenced lines become empty)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return out


def heading_text(raw):
    """The text GitHub renders for a heading's Markdown source."""
    parts = re.split(r"(`+[^`]*?`+)", raw)
    rendered = []
    for part in parts:
        if part.startswith("`"):
            rendered.append(part.strip("`"))
            continue
        part = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", part)  # links, images -> their text
        part = re.sub(r"<[^>]+>", "", part)  # html tags
        part = re.sub(r"(\*{1,3}|(?<!\w)_{1,3})(\S(?:.*?\S)?)\1(?!\w)", r"\2", part)  # emphasis
        rendered.append(part)
    return "".join(rendered)


def slug(text):
    """GitHub's anchor for a heading whose rendered text is ``text``."""
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    """Every anchor a link may name in ``path``: heading slugs (duplicates numbered) and
    explicit ``<a name=...>`` / ``<a id=...>`` anchors."""
    seen = {}
    found = set()
    text = path.read_text(encoding="utf-8")
    for line in prose_lines(text):
        match = ATX_HEADING.match(line)
        if match:
            base = slug(heading_text(match.group(2)))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(HTML_ANCHOR.findall(line))
    return found


def links(path):
    """(line number, target) of every link in ``path`` in reading order, code excluded."""
    lines = prose_lines(path.read_text(encoding="utf-8"))
    text = "\n".join(lines)
    # Blank out inline code but keep the newlines, so offsets still give line numbers.
    text = INLINE_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    result = []
    for pattern in (INLINE_LINK, REFERENCE_DEF):
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start(1)) + 1
            result.append((match.start(1), line, match.group(1)))
    return [(line, target) for _, line, target in sorted(result)]


def broken_links(files, root):
    """One message per link whose file or anchor does not exist."""
    problems = []
    for path in files:
        for line, target in links(path):
            if not target or EXTERNAL.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}:{line}: ({target})"
            if not dest.exists():
                problems.append(f"{where} no such file {file_part}")
                continue
            if anchor and dest.is_file() and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where} no heading with anchor #{anchor} in {file_part or path.name}")
    return problems


# --- the slug rules, on headings whose GitHub anchors were written down by hand ---------------


@pytest.mark.parametrize(
    "heading, expected",
    [
        ("The inference call", "the-inference-call"),
        ("The inference call (`attention/inference_call.py`)", "the-inference-call-attentioninference_callpy"),
        (
            "Many short paired rounds: what resolves 2% (idle machine, 2026-11-25)",
            "many-short-paired-rounds-what-resolves-2-idle-machine-2026-11-25",
        ),
        ("The clock: `--clock wall` (default) or `--clock cpu`", "the-clock---clock-wall-default-or---clock-cpu"),
        ("`fsa-analyze`: the command line", "fsa-analyze-the-command-line"),
        ("**Bold** and [a link](x.md) and _emphasis_", "bold-and-a-link-and-emphasis"),
        ("Norms ‖αf(x)‖ über alles", "norms-αfx-über-alles"),
    ],
)
def test_slug_follows_github_rules(heading, expected):
    assert slug(heading_text(heading)) == expected


def test_duplicate_headings_are_numbered(tmp_path):
    page = tmp_path / "p.md"
    page.write_text('# Setup\n\n## Setup\n\n```\n# Setup\n```\n\n### Setup\n<a name="here"></a>\n')
    assert anchors(page) == {"setup", "setup-1", "setup-2", "here"}


def test_catches_broken_links(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n\n## Two words\n\nBack to [the top](../README.md#project).\n")
    (tmp_path / "README.md").write_text(
        "# Project\n\n"
        "[good](docs/guide.md#two-words) [good dir](docs/) [self](#project)\n"
        "[missing file](docs/nope.md)\n"
        "[bad anchor](docs/guide.md#three-words) [bad self](#nowhere)\n"
        "[external](https://example.org/x.md#y) `[in code](nope.md)`\n"
        "```\n[in a fence](nope.md)\n```\n"
        "[multi\nline](docs/guide.md#guide)\n"
        "[ref]: docs/missing.md\n"
    )
    problems = broken_links(markdown_files(tmp_path), tmp_path)
    assert problems == [
        "README.md:4: (docs/nope.md) no such file docs/nope.md",
        "README.md:5: (docs/guide.md#three-words) no heading with anchor #three-words in docs/guide.md",
        "README.md:5: (#nowhere) no heading with anchor #nowhere in README.md",
        "README.md:12: (docs/missing.md) no such file docs/missing.md",
    ]


# --- the repository ------------------------------------------------------------------------


def test_repository_docs_have_no_broken_links():
    files = markdown_files(ROOT)
    assert ROOT / "README.md" in files
    problems = broken_links(files, ROOT)
    assert not problems, "broken links:\n" + "\n".join(problems)
