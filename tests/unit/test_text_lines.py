"""One line convention for every reader and writer (fairseq_sparse_attn/text_lines.py,
issue 30): "\\n" only, CRLF and one trailing blank line tolerated, invalid UTF-8 one line
naming the file and the line."""

import sys
from pathlib import Path

import pytest

from fairseq_sparse_attn.text_lines import TextFileError, read_lines, split_lines

REPO = Path(__file__).resolve().parents[2]
DEP = ["a b\t2 0", "c\t0", "d e f\t0 1 2"]


def test_split_lines_on_newline_only():
    # a lone "\r", "\x0b", "\x1c", "\u2028" inside a sentence stay in it (str.splitlines and
    # Python's universal newlines would split there)
    text = "a\rb\nc\x0bd\x1ce\u2028f\n"
    assert split_lines(text) == ["a\rb", "c\x0bd\x1ce\u2028f"]
    assert split_lines("x\n\ny\n") == ["x", "", "y"]  # a blank line inside is a line
    assert split_lines("x") == ["x"] and split_lines("") == []


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\n\n", "\r\n\r\n"])
def test_crlf_and_a_trailing_blank_line_read_as_the_same_content(tmp_path, ending):
    from fairseq_sparse_attn.data.parse_annotated_dataset import LineIndexedFile

    path = tmp_path / "train.en.dep"
    newline = "\r\n" if "\r" in ending else "\n"
    path.write_bytes((newline.join(DEP) + ending).encode())
    assert read_lines(path) == DEP
    side = LineIndexedFile(path)
    assert [side.line(i) for i in range(len(side))] == DEP


def test_a_gzip_file_reads_as_its_text(tmp_path):
    import gzip

    path = tmp_path / "ref.de.gz"
    path.write_bytes(gzip.compress("ein Satz\r\nzwei\n\n".encode("utf-8")))
    assert read_lines(path) == ["ein Satz", "zwei"]
    path.write_bytes(gzip.compress(b"ok\n\xff\n"))
    with pytest.raises(TextFileError, match=r"ref\.de\.gz, line 2: not valid UTF-8"):
        read_lines(path)


def test_parse_side_file_with_crlf_and_blank_line_loads_in_the_task(tmp_path):
    """The side file's line count is compared with the binarized sentences: with Windows
    line ends and one trailing blank line it has the same 3 lines."""
    from fairseq_sparse_attn.data.parse_annotated_dataset import ParseSideData

    path = tmp_path / "train.en.dep"
    path.write_bytes(("\r\n".join(DEP) + "\r\n\r\n").encode())
    side = ParseSideData(str(path), None)
    assert len(side) == 3
    assert side[2].words == ["d", "e", "f"]


def test_side_file_with_invalid_utf8_names_the_file_and_line(tmp_path):
    from fairseq_sparse_attn.data.parse_annotated_dataset import LineIndexedFile

    path = tmp_path / "train.en.dep"
    path.write_bytes(b"a b\t2 0\nc\xff\t0\n")
    side = LineIndexedFile(path)
    with pytest.raises(TextFileError, match=rf"^{path}, line 2: not valid UTF-8 \(invalid start byte\)$"):
        side.line(1)
    with pytest.raises(TextFileError, match=rf"^{path}, line 2: not valid UTF-8"):
        read_lines(path)


def test_gold_alignment_file_with_invalid_utf8_names_the_file_and_line(tmp_path):
    from fairseq_sparse_attn.analysis.alignment import read_alignments

    path = tmp_path / "gold.talp"
    path.write_bytes(b"1-1 2-2\n1-1\xe9\n")
    with pytest.raises(TextFileError, match=rf"^{path}, line 2: not valid UTF-8"):
        read_alignments(path)
    path.write_bytes(b"1-1 2-2\r\n1-1\r\n\r\n")  # CRLF; a blank line is a sentence without links
    assert [len(a.sure) for a in read_alignments(path, lengths=[(2, 2), (1, 1), (1, 1)])] == [2, 1, 0]


def test_score_accepts_a_reference_data_prep_wrote(tmp_path):
    """data_prep keeps a lone "\\r" inside a sentence; score counted it as a line break and
    refused the reference (3 lines for 2 hypotheses)."""
    sys.path.insert(0, str(REPO))
    from data_prep.common import count_lines, parse_text, write_lines
    from fairseq_sparse_attn.tools.score import score

    lines = parse_text("das ist\rgut\r\nnoch eins\r\n".encode(), "plain", "ref.de")
    assert lines == ["das ist\rgut", "noch eins"]
    ref = tmp_path / "test.de"
    write_lines(ref, lines)
    assert count_lines(ref) == 2
    gen = tmp_path / "gen.txt"
    gen.write_text("H-1\t-0.2\tnoch eins\nD-1\t-0.2\tnoch eins\nH-0\t-0.1\tdas ist gut\nD-0\t-0.1\tdas ist gut\n")
    result = score(str(gen), ref=str(ref), n_resamples=10)
    assert result["sentences"] == 2


def test_fsa_train_with_a_user_dir_that_does_not_exist_is_one_line(monkeypatch, tmp_path):
    from fairseq_sparse_attn import cli

    missing = str(tmp_path / "nonexistent")
    monkeypatch.setattr(sys, "argv", ["fsa-train", "data-bin", "--user-dir", missing, "--arch", "transformer"])
    with pytest.raises(SystemExit) as e:
        cli.train()
    assert str(e.value) == (
        f"fsa-train: error: --user-dir {missing} does not exist; the fsa-* commands add the "
        "installed plugin themselves (leave --user-dir out)"
    )
