"""data_prep/common.py beyond its downloads (tests/unit/test_data_download.py): text files,
checksums, archive members, the corpora's text formats, tokenization, cleaning, BPE,
stamps and the entry points' exit statuses, each against a hand-built example."""

import gzip
import hashlib
import io
import json
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "data_prep"))

import common  # noqa: E402
from common import PrepError, Source  # noqa: E402

# ------------------------------------------------------------------------ text files


def test_read_lines_drops_one_carriage_return_and_one_trailing_blank_line(tmp_path):
    p = tmp_path / "a.txt"
    p.write_bytes(b"eins\r\nzwei\r\r\n\n")
    assert common.read_lines(p) == ["eins", "zwei\r"]
    g = tmp_path / "a.txt.gz"
    g.write_bytes(gzip.compress(b"eins\r\n\n\n"))
    assert common.read_lines(g) == ["eins", ""]  # only the last blank line goes
    assert common.count_lines(g) == 2


def test_read_lines_names_the_line_that_is_not_valid_text(tmp_path):
    p = tmp_path / "a.txt"
    p.write_bytes(b"gut\n\xff\n")
    with pytest.raises(PrepError, match=rf"^{p}, line 2: not valid utf-8 \(invalid start byte at byte 0\)$"):
        common.read_lines(p)


# ------------------------------------------------------------------------ checksums


def test_verify_file_checks_size_either_way_and_published_upper_case_checksums(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"abcd")
    with pytest.raises(PrepError, match="size 4 bytes, expected 3 bytes"):
        common.verify_file(p, Source("f", (), "x", size=3))
    sha, md5 = hashlib.sha256(b"abcd").hexdigest(), hashlib.md5(b"abcd").hexdigest()
    common.verify_file(p, Source("f", (), "x", sha256=sha.upper(), md5=md5.upper(), size=4))
    with pytest.raises(PrepError, match=rf"md5 {md5}, expected {'0' * 32}"):
        common.verify_file(p, Source("f", (), "x", sha256=sha, md5="0" * 32))


def test_a_mirror_with_or_without_a_trailing_slash(monkeypatch):
    src = Source("corpus.tgz", ("https://example.org/corpus.tgz",), "x")
    monkeypatch.setenv(common.MIRROR_ENV, "http://m1/data/ http://m2/data")
    assert common.candidate_urls(src) == [
        "http://m1/data/corpus.tgz",
        "http://m2/data/corpus.tgz",
        "https://example.org/corpus.tgz",
    ]


def test_raw_files_are_verified_only_when_asked(tmp_path):
    (tmp_path / "corpus.tgz").write_bytes(b"not the release")
    src = Source("corpus.tgz", ("https://example.org/corpus.tgz",), "x", size=3, checksum_from="doc")
    logs = []
    found = common.locate_sources([src], tmp_path, tmp_path / "dl", logs.append)
    assert found == {"corpus.tgz": tmp_path / "corpus.tgz"} and "not verified" in logs[-1]
    with pytest.raises(PrepError, match="size 15 bytes, expected 3 bytes"):
        common.locate_sources([src], tmp_path, tmp_path / "dl", logs.append, verify_raw=True)


# ------------------------------------------------------------------------ archives


def _tar(path, members, dirs=()):
    with tarfile.open(path, "w:gz") as t:
        for name in dirs:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            t.addfile(info)
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def test_tar_members_by_name_and_by_pattern(tmp_path):
    arc = tmp_path / "c.tgz"
    # archive order b, a: a pattern concatenates in sorted order; a member without a final
    # newline is not glued to the next one; "./" prefixes are not part of the name
    _tar(
        arc,
        {"./train/b.de": b"b1\nb2\n", "./train/a.de": b"a1\na2", "train/c.de.gz": gzip.compress(b"c1\n")},
        dirs=["train/d.de"],
    )
    assert common.read_member_bytes(arc, "train/b.de") == b"b1\nb2\n"
    assert common.read_member_bytes(arc, "train/*.de") == b"a1\na2\nb1\nb2\n"
    assert common.read_member_bytes(arc, "train/c.de.gz") == b"c1\n"  # unzipped
    assert common.read_member_bytes(arc, "train/[ab].de") == b"a1\na2\nb1\nb2\n"
    with pytest.raises(PrepError, match=r"no member 'train/d.de'"):  # a directory is no text
        common.read_member_bytes(arc, "train/d.de")


def test_zip_members_and_unsafe_member_paths(tmp_path):
    arc = tmp_path / "c.zip"
    with zipfile.ZipFile(arc, "w") as z:
        z.writestr("x/b.txt", "b\n")
        z.writestr("x/a.txt", "a")
    assert common.read_member_bytes(arc, "x/*.txt") == b"a\nb\n"
    for bad in ("../x/a.txt", "x/../../etc/passwd", "/etc/passwd"):
        with pytest.raises(PrepError, match="refusing member path"):
            common.read_member_bytes(arc, bad)


# ------------------------------------------------------------------------ text formats


def test_segments_and_columns_are_stripped():
    assert common.parse_text(b'<seg id="1">  eins </seg>\n', "sgm", "x") == ["eins"]
    assert common.parse_text(b" a \t  b \n", "tsv", "x", column=0) == ["a"]
    assert common.parse_text(b" a \t  b \n", "tsv", "x", column=1) == ["b"]
    assert common.parse_text(b" a  |||  b \n", "bars", "x", column=0) == ["a"]


def test_iwslt_tags_drop_every_metadata_line_and_keep_title_text():
    data = (
        b"<url>http://ted.com/x</url>\n<keywords>talks, art</keywords>\n<talkid>1</talkid>\n"
        b"<title>Ein Titel</title>\n<description>Eine Beschreibung</description>\nEin Satz .\n"
    )
    assert common.parse_text(data, "iwslt_tags", "x") == ["Ein Titel", "Eine Beschreibung", "Ein Satz ."]


def test_a_tmx_unit_without_the_language_keeps_the_pairs_aligned():
    tmx = (
        b'<?xml version="1.0"?><tmx><body>'
        b'<tu><tuv xml:lang="en"><seg>One</seg></tuv><tuv xml:lang="ro"><seg>Unu</seg></tuv></tu>'
        b'<tu><tuv xml:lang="en"><seg>Two</seg></tuv></tu>'
        b'<tu><tuv xml:lang="en_GB"><seg>Three</seg></tuv><tuv xml:lang="Ro"><seg>Trei</seg></tuv></tu>'
        b"</body></tmx>"
    )
    assert common.parse_text(tmx, "tmx", "x", lang="en") == ["One", "Two", "Three"]
    assert common.parse_text(tmx, "tmx", "x", lang="ro") == ["Unu", "", "Trei"]


# ------------------------------------------------------------------------ tokenization


def test_tokenize_passes_escaping_and_dash_splitting_to_moses():
    line = ["Tom & Jerry's well-known <show>"]
    assert common.tokenize(line, "en") == ["Tom & Jerry 's well-known < show >"]
    assert common.tokenize(line, "en", escape=True) == ["Tom &amp; Jerry &apos;s well-known &lt; show &gt;"]
    assert common.tokenize(line, "en", aggressive_dash_splits=True) == ["Tom & Jerry 's well @-@ known < show >"]


def test_tokenize_in_worker_processes_keeps_the_order():
    # a slow first chunk (long lines) and fast later ones: the chunks come back in order
    lines = [" ".join(["Ein sehr langer Satz, mit Kommas."] * 40)] * common.CHUNK_LINES
    lines += [f"Satz {i}." for i in range(3 * common.CHUNK_LINES)]
    expected = common.tokenize(lines, "de")
    assert common.tokenize(lines, "de", workers=2) == expected
    assert expected[-1] == f"Satz {3 * common.CHUNK_LINES - 1} ."


# ------------------------------------------------------------------------ cleaning, BPE


def test_clean_pairs_keeps_bounds_inclusive_and_checks_the_ratio_both_ways():
    src = ["a", "a b c", "a b c d", "a", "a b c d e f g"]
    tgt = ["x", "x y z", "x", "x y z w", "x y z w v u t"]
    kept_s, kept_t, dropped = common.clean_pairs(src, tgt, 1, 6, 1.5)
    # 4:1 and 1:4 fail the ratio either way; 7 tokens are over the maximum of 6
    assert (kept_s, kept_t, dropped) == (["a", "a b c"], ["x", "x y z"], 3)
    assert common.clean_pairs(["a b"], ["x"], 2, 2, None) == ([], [], 1)  # target below the minimum
    assert common.clean_pairs(["a b"], ["x y"], 2, 2, None) == (["a b"], ["x y"], 0)
    assert common.clean_pairs(["a b c d"], ["x"], 1, 9, None) == (["a b c d"], ["x"], 0)  # no ratio


def test_learn_bpe_counts_the_merges_it_wrote(tmp_path):
    codes = tmp_path / "codes"
    n = common.learn_bpe(["lower lowest newer newest"] * 5, codes, 4)
    lines = codes.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("#version") and n == len(lines) - 1 == 4
    assert common.apply_bpe(["lowest"], codes) != ["lowest"]


# ------------------------------------------------------------------------ stamps, exits


def test_a_damaged_stamp_reads_as_no_stamp(tmp_path):
    stamp = tmp_path / ".stamp.json"
    assert common.read_stamp(stamp) is None
    stamp.write_text('{"options": ', encoding="utf-8")  # an interrupted write
    assert common.read_stamp(stamp) is None
    common.write_stamp(stamp, {"options": {"a": 1}})
    assert common.read_stamp(stamp) == {"options": {"a": 1}}
    assert json.loads(stamp.read_text()) == {"options": {"a": 1}} and list(tmp_path.iterdir()) == [stamp]


def test_main_wrapper_exit_statuses(capsys):
    def fail():
        raise PrepError("bad input")

    def interrupted():
        raise KeyboardInterrupt

    assert common.main_wrapper("[x]", lambda: None) == 0
    assert common.main_wrapper("[x]", fail) == 1
    assert capsys.readouterr().err == "[x] error: bad input\n"
    assert common.main_wrapper("[x]", interrupted) == 130
    assert capsys.readouterr().err == "[x] interrupted\n"


def test_a_file_the_system_refuses_is_one_line(tmp_path, capsys):
    """--out under a file was a NotADirectoryError traceback; an OSError without a file
    (a bug, not the user's input) keeps its traceback."""
    import pytest

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert common.main_wrapper("[x]", lambda: (blocker / "out").mkdir(parents=True)) == 1
    assert capsys.readouterr().err == f"[x] error: {blocker / 'out'}: Not a directory\n"

    def bare():
        raise OSError("no file named")

    with pytest.raises(OSError):
        common.main_wrapper("[x]", bare)


def test_the_worker_pools_spawn_their_processes():
    """Not forked: a fork copies the parent's threads' locks as they are (CI, 2026-11-29: a
    forked tokenize worker never ran, and the pool's join waited for ever); spawned workers
    start clean, and give the same tokens (the order test above runs through them)."""
    assert common.POOL_CONTEXT.get_start_method() == "spawn"


def test_tokenize_and_bpe_take_their_pools_from_the_spawn_context(monkeypatch, tmp_path):
    """Both pools come from ``POOL_CONTEXT`` (a plain ``multiprocessing.Pool`` would fork)."""
    made = []
    context = common.POOL_CONTEXT

    class Recording:
        def Pool(self, *args, **kwargs):
            made.append(kwargs.get("initializer"))
            return context.Pool(*args, **kwargs)

    monkeypatch.setattr(common, "POOL_CONTEXT", Recording())
    lines = [f"Satz {i}." for i in range(2 * common.CHUNK_LINES)]
    tokens = common.tokenize(lines, "de", workers=2)
    codes = tmp_path / "codes"
    common.learn_bpe(tokens, codes, 20)
    common.apply_bpe(tokens, codes, workers=2)
    assert made == [None, common._init_bpe]
