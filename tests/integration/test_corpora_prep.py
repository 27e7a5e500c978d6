"""The per-corpus entry points (data_prep/prepare_<corpus>.py) on small local raw files laid
out like the real archives (tar/zip members, SGML, IWSLT tags/XML, latin-1 gold files),
run as subprocesses like a user would; plus the corpus table's consistency."""

import gzip
import io
import os
import re
import subprocess
import sys
import tarfile
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA_PREP = REPO / "data_prep"
sys.path.insert(0, str(DATA_PREP))

import common  # noqa: E402
import prepare_corpus  # noqa: E402
from common import apply_bpe, binarized_files, learn_bpe, parse_text  # noqa: E402
from corpora import CORPORA, Part, Text  # noqa: E402

from conftest import require_shared_data, shared_data_dir  # noqa: E402


def _sentences(n):
    """n real sentence pairs (Multi30k) of similar length (no pair trips the length-ratio
    filter), else skip."""
    d = shared_data_dir() / "multi30k"
    require_shared_data(d / "train.de.gz", "Multi30k raw data")
    with gzip.open(d / "train.de.gz", "rt", encoding="utf-8") as f_de, gzip.open(
        d / "train.en.gz", "rt", encoding="utf-8"
    ) as f_en:
        out = {"de": [], "en": []}
        for de, en in zip(f_de, f_en):
            a, b = len(de.split()), len(en.split())
            if max(a, b) <= 1.2 * min(a, b):
                out["de"].append(de.rstrip("\n"))
                out["en"].append(en.rstrip("\n"))
                if len(out["de"]) == n:
                    return out
    raise AssertionError("not enough similar-length pairs")


def _tar(path, members):
    with tarfile.open(path, "w:gz") as t:
        for name, data in members.items():
            if isinstance(data, str):
                data = data.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def _europarl_training_archive(raw, de, en):
    """``raw``/europarl-v7.de-en.tgz holding the line-aligned ``de`` and ``en`` sentences."""
    raw.mkdir()
    _tar(
        raw / "europarl-v7.de-en.tgz",
        {"europarl-v7.de-en.de": "\n".join(de) + "\n", "europarl-v7.de-en.en": "\n".join(en) + "\n"},
    )
    return raw


def _sgm(lines, lang):
    body = "".join(f'<seg id="{i + 1}">{s}</seg>\n' for i, s in enumerate(lines))
    return f'<srcset setid="x" srclang="any">\n<doc docid="d" genre="news" origlang="{lang}">\n<p>\n{body}</p>\n</doc>\n</srcset>\n'


def run_prep(corpus, *args, env=None):
    e = dict(os.environ)
    e.pop("FSA_DATA_MIRROR", None)
    e.update(env or {})
    return subprocess.run(
        [sys.executable, str(DATA_PREP / f"prepare_{corpus}.py"), *map(str, args)],
        capture_output=True,
        text=True,
        env=e,
        timeout=300,
    )


def lines(path):
    return path.read_text(encoding="utf-8").splitlines()


# ------------------------------------------------------------------------ the table


def test_every_corpus_has_an_entry_point_and_consistent_parts():
    for name, c in CORPORA.items():
        assert (DATA_PREP / f"prepare_{name}.py").is_file(), name
        names = {s.name for s in c.sources}
        assert len(names) == len(c.sources), name
        for part in c.train + c.valid + c.test + ((c.gold and (c.gold,)) or ()):
            texts = part.files.values() if hasattr(part, "files") else [part]
            if hasattr(part, "files"):
                assert set(part.files) == set(c.pair), (name, part.name)
            for t in texts:
                assert t.source in names, (name, t.source)
        assert c.valid or c.valid_from_train, name
        for s in c.sources:
            assert s.urls or s.manual, s.name
            assert s.homepage, s.name
            if s.sha256:
                assert re.fullmatch(r"[0-9a-f]{64}", s.sha256), s.name
            if s.md5:
                assert re.fullmatch(r"[0-9a-f]{32}", s.md5), s.name
            if s.sha256 or s.md5 or s.size:
                assert s.checksum_from, s.name


def test_paper_settings():
    assert CORPORA["iwslt14_de_en"].bpe_merges == 10000 and CORPORA["iwslt14_de_en"].lowercase
    assert CORPORA["wmt14_en_de"].bpe_merges == 32000
    assert CORPORA["wmt19_de_en"].bpe_merges == 35000
    assert CORPORA["iwslt15_en_vi"].bpe_merges == 30000 and not CORPORA["korean_en"].joint_bpe
    assert CORPORA["europarl_de_en_align"].bpe_merges == 10000
    assert [p.name for p in CORPORA["iwslt14_de_en"].test] == [
        "TED.dev2010",
        "TEDX.dev2012",
        "TED.tst2010",
        "TED.tst2011",
        "TED.tst2012",
    ]


@pytest.mark.parametrize("src, tgt", [("de", "en"), ("en", "de")])
def test_wmt19_each_direction_is_scored_on_its_own_newstest2019(src, tgt):
    """From WMT19 on, each direction's test set is source-original text of its own:
    English->German (Raganato et al.'s other direction, Table 5) reads the en-de files, not
    the de-en set with its sides swapped.  The files are sacreBLEU's for that pair."""
    from sacrebleu.dataset import DATASETS

    (part,) = CORPORA["wmt19_de_en"].test_parts(src, tgt)
    src_file, ref_file = DATASETS["wmt19"].langpairs[f"{src}-{tgt}"]
    assert (part.files[src].member, part.files[tgt].member) == (src_file, ref_file)
    assert CORPORA["wmt14_en_de"].test_parts("en", "de") == CORPORA["wmt14_en_de"].test  # before 2019: one set


def test_korean_english_keeps_pairs_whose_token_counts_differ_by_nature():
    """A Korean sentence has about 1.5 times fewer whitespace tokens than its English
    translation: clean-corpus-n's ratio 1.5 dropped 41-43% of the corpus's pairs (measured
    on its dev and test files), so korean_en filters lengths only; the other corpora keep
    the ratio."""
    from common import clean_pairs

    ko = ["한국어 문장 입니다 .", "짧다"]
    en = ["this is a sentence in the Korean language .", "it is short"]
    assert clean_pairs(ko, en, 1, 250, 1.5)[2] == 2  # both dropped by the ratio
    lo, hi, ratio = CORPORA["korean_en"].clean
    assert ratio is None and clean_pairs(ko, en, lo, hi, ratio) == (ko, en, 0)
    assert clean_pairs(ko, ["x " * 300], lo, hi, ratio)[2] == 1  # lengths still bounded
    assert CORPORA["wmt14_en_de"].clean == (1, 250, 1.5) and CORPORA["korean_en"].recipe == 2


def test_text_formats():
    tmx = (
        b'<?xml version="1.0"?><tmx><body><tu><tuv xml:lang="en"><seg>Hello</seg></tuv>'
        b'<tuv xml:lang="ro"><seg>Salut</seg></tuv></tu><tu><tuv xml:lang="EN"><seg>Two</seg></tuv>'
        b'<tuv xml:lang="ro-RO"><seg>Doi</seg></tuv></tu></body></tmx>'
    )
    assert parse_text(tmx, "tmx", "x", lang="ro") == ["Salut", "Doi"]
    sgm = b'<doc docid="a">\n<seg id="1">one</seg>\n<SEG id="2">two</SEG>\n</doc>\n'
    assert parse_text(sgm, "sgm", "x") == ["one", "two"]  # an upper-case <SEG> line is a segment
    assert parse_text(tmx, "tmx", "x", lang="en") == ["Hello", "Two"]
    assert parse_text(b"a\tb\nc\n", "tsv", "x", column=1) == ["b", ""]
    assert parse_text(b"Helsinki ||| Helsinki city\n", "bars", "x", column=1) == ["Helsinki city"]
    assert parse_text(b"<url>u</url>\n<title>T</title>\nSatz\n", "iwslt_tags", "x") == ["T", "Satz"]
    assert parse_text('<seg id="1"> It\u2019s </seg>\n'.encode(), "iwslt_xml", "x") == ["It's"]
    with pytest.raises(Exception, match=r"f.xml: no <seg> lines"):
        parse_text(b"nothing\n", "sgm", "f.xml")
    with pytest.raises(Exception, match=r"f.txt, line 2: not valid utf-8"):
        parse_text(b"ok\n\xff\n", "plain", "f.txt")


# ------------------------------------------------------------------------ IWSLT14


@pytest.fixture(scope="module")
def iwslt_raw(tmp_path_factory):
    s = _sentences(92 + 5 * 4)
    raw = tmp_path_factory.mktemp("iwslt_raw")
    members = {}
    for lang in ("de", "en"):
        train = s[lang][:92]
        body = []
        for i, line in enumerate(train):
            if i % 30 == 0:
                body += [
                    "<url>http://www.ted.com/talks/x.html</url>",
                    "<keywords>talks</keywords>",
                    "<talkid>1</talkid>",
                    "<title>Ein Titel</title>" if lang == "de" else "<title>A Title</title>",
                ]
            body.append(line)
        # a pair the length-ratio filter drops (1 token vs 6)
        body.append("Ja" if lang == "de" else "Yes , yes , yes .")
        members[f"de-en/train.tags.de-en.{lang}"] = "\n".join(body) + "\n"
        for k, name in enumerate(("TED.dev2010", "TEDX.dev2012", "TED.tst2010", "TED.tst2011", "TED.tst2012")):
            segs = s[lang][92 + 4 * k : 96 + 4 * k]
            if k == 0:
                segs = [segs[0] + " It\u2019s"] + segs[1:]
            members[f"de-en/IWSLT14.{name}.de-en.{lang}.xml"] = _sgm(segs, lang)
    _tar(raw / "de-en.tgz", members)
    return raw, s


def test_iwslt14_from_raw_dir(iwslt_raw, tmp_path):
    raw, s = iwslt_raw
    out = tmp_path / "iwslt"
    proc = run_prep("iwslt14_de_en", "--raw-dir", raw, "--out", out, "--bpe-merges", "60")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # 92 sentences + 4 titles per language; the ratio filter drops 1 pair
    assert "dropped 1 of 97 pairs" in proc.stderr
    tok_train, tok_valid = lines(out / "tok" / "train.de"), lines(out / "tok" / "valid.de")
    assert len(tok_valid) == 96 // 23 and len(tok_train) == 96 - 96 // 23
    assert all(t == t.lower() for t in tok_train + tok_valid)
    assert not any("<url>" in t or "<title>" in t for t in tok_train)
    assert "ein titel" in tok_train
    # test = dev2010, dev2012, tst2010, tst2011, tst2012 in that order, untokenized in raw/,
    # lowercased as the corpus is (sacreBLEU's reference: a cased one deflated it)
    raw_test = lines(out / "raw" / "test.en")
    assert raw_test[0] == (s["en"][92] + " It's").lower() and len(raw_test) == 20
    assert raw_test[4:8] == [x.lower() for x in s["en"][96:100]] and raw_test != [x for x in s["en"][92:112]]
    assert lines(out / "tok" / "test.en")[0].endswith("it &apos;s")  # Moses escaping, as fairseq's recipe
    for split in ("train", "valid", "test"):
        assert (out / "data-bin" / f"{split}.de-en.de.bin").stat().st_size > 0
    assert (out / "data-bin" / "dict.de.txt").read_text() == (out / "data-bin" / "dict.en.txt").read_text()
    assert "@@ " in (out / "bpe" / "train.de").read_text()
    # the joint codes are those learned on both tokenized training sides
    learn_bpe(lines(out / "tok" / "train.de") + lines(out / "tok" / "train.en"), tmp_path / "joint", 60)
    assert (out / "bpe" / "codes").read_text() == (tmp_path / "joint").read_text()
    # rerun: skipped
    proc = run_prep("iwslt14_de_en", "--raw-dir", raw, "--out", out, "--bpe-merges", "60")
    assert proc.returncode == 0 and "up to date, skipping" in proc.stderr
    proc = run_prep("iwslt14_de_en", "--raw-dir", raw, "--out", out, "--bpe-merges", "60", "--force")
    assert proc.returncode == 0 and "skipping" not in proc.stderr and "done: train 92" in proc.stderr


def test_download_through_mirror_then_checksum_mismatch(iwslt_raw, tmp_path):
    """IWSLT14 has no published checksum: a mirror download runs the whole pipeline.  A
    corpus with one (News Commentary v11) rejects a file that differs, removing it."""
    raw, _ = iwslt_raw
    served = tmp_path / "served"
    served.mkdir()
    (served / "de-en.tgz").write_bytes((raw / "de-en.tgz").read_bytes())
    (served / "training-parallel-nc-v11.tgz").write_bytes((raw / "de-en.tgz").read_bytes())
    srv = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(served)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    mirror = {"FSA_DATA_MIRROR": f"http://127.0.0.1:{srv.server_address[1]}/"}
    try:
        out = tmp_path / "dl"
        proc = run_prep("iwslt14_de_en", "--out", out, "--bpe-merges", "60", env=mirror)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "downloaded de-en.tgz" in proc.stderr and "not verified" in proc.stderr
        assert (out / "downloads" / "de-en.tgz").is_file() and (out / "data-bin" / "test.de-en.en.bin").is_file()

        out = tmp_path / "nc"
        proc = run_prep("nc11_en_de", "--out", out, env=mirror)
        assert proc.returncode == 1
        size = (raw / "de-en.tgz").stat().st_size
        assert "checksum mismatch for training-parallel-nc-v11.tgz" in proc.stderr
        assert f"size {size} bytes, expected 75178032 bytes (tensorflow/datasets" in proc.stderr
        assert "the partial file was removed" in proc.stderr
        assert list((out / "downloads").iterdir()) == []
        assert not (out / ".prepare_corpus.json").exists()
    finally:
        srv.shutdown()
        srv.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


# ------------------------------------------------------------------------ WMT14 En-De


def test_wmt14_en_de_from_raw_dir(tmp_path):
    s = _sentences(60)
    raw = tmp_path / "raw"
    raw.mkdir()
    de, en = s["de"], s["en"]
    en = [en[0] + " state-of-the-art"] + en[1:]
    _tar(
        raw / "training-parallel-europarl-v7.tgz",
        {
            "training/europarl-v7.de-en.de": "\n".join(de[:20]) + "\n",
            "training/europarl-v7.de-en.en": "\n".join(en[:20]) + "\n",
            "training/europarl-v7.fr-en.fr": "x\n",
        },
    )
    _tar(
        raw / "training-parallel-commoncrawl.tgz",
        {"commoncrawl.de-en.de": "\n".join(de[20:35]) + "\n", "commoncrawl.de-en.en": "\n".join(en[20:35]) + "\n"},
    )
    _tar(
        raw / "training-parallel-nc-v9.tgz",
        {
            "training/news-commentary-v9.de-en.de": "\n".join(de[35:45]) + "\n",
            "training/news-commentary-v9.de-en.en": "\n".join(en[35:45]) + "\n",
        },
    )
    _tar(
        raw / "wmt19-dev.tgz",
        {
            "dev/newstest2013.de": "\n".join(de[45:50]) + "\n",
            "dev/newstest2013.en": "\n".join(en[45:50]) + "\n",
            "dev/newstest2014-deen-src.de.sgm": _sgm(de[50:60], "de"),
            "dev/newstest2014-deen-ref.en.sgm": _sgm(en[50:60], "en"),
        },
    )
    out = tmp_path / "out"
    proc = run_prep("wmt14_en_de", "--raw-dir", raw, "--out", out, "--bpe-merges", "80", "--max-eval-lines", "8")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(lines(out / "tok" / "train.en")) == 45
    assert "state @-@ of @-@ the @-@ art" in lines(out / "tok" / "train.en")[0]  # -a as fairseq's recipe
    assert lines(out / "raw" / "valid.de") == de[45:50]
    assert lines(out / "raw" / "test.de") == de[50:58] and lines(out / "raw" / "test.en") == en[50:58]
    assert (out / "data-bin" / "test.en-de.de.bin").is_file()  # default direction en -> de

    # the other direction: de -> en
    proc = run_prep(
        "wmt14_en_de",
        "--raw-dir",
        raw,
        "--out",
        tmp_path / "deen",
        "--src",
        "de",
        "--tgt",
        "en",
        "--bpe-merges",
        "80",
        "--max-eval-lines",
        "3",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "deen" / "data-bin" / "train.de-en.de.bin").is_file()
    # --max-eval-lines cuts the validation set too, and not the training set
    assert lines(tmp_path / "deen" / "raw" / "test.en") == en[50:53]
    assert lines(tmp_path / "deen" / "raw" / "valid.en") == en[45:48]
    assert len(lines(tmp_path / "deen" / "tok" / "train.en")) == 45

    # a member with a different number of lines is named with both counts
    _tar(
        raw / "training-parallel-nc-v9.tgz",
        {
            "training/news-commentary-v9.de-en.de": "\n".join(de[35:45]) + "\n",
            "training/news-commentary-v9.de-en.en": "\n".join(en[35:44]) + "\n",
        },
    )
    proc = run_prep("wmt14_en_de", "--raw-dir", raw, "--out", tmp_path / "bad")
    assert proc.returncode == 1
    assert re.search(
        r"news-commentary-v9: .*training-parallel-nc-v9.tgz \[training/news-commentary-v9.de-en.en\] "
        r"has 9 sentences but .*\[training/news-commentary-v9.de-en.de\] has 10",
        proc.stderr,
    ), proc.stderr
    assert not (tmp_path / "bad" / "data-bin").exists()

    # a missing file is named with its URL; a missing member with the archive's names
    (raw / "wmt19-dev.tgz").unlink()
    proc = run_prep("wmt14_en_de", "--raw-dir", raw, "--out", tmp_path / "bad")
    assert proc.returncode == 1
    assert "wmt19-dev.tgz (from http://data.statmt.org/wmt19/translation-task/dev.tgz)" in proc.stderr


# ------------------------------------------------------------------------ Europarl + gold


def test_europarl_alignment_corpus(tmp_path):
    s = _sentences(2130)
    gold_de = ["Das ist schön .", "Über die Tagesordnung,ja ."]  # released tokenized: kept as is
    gold_en = ["That is nice .", "On the agenda ."]
    train_de = s["de"][:1100] + ["", "Das ist schön .", "Nur eine Seite"] + s["de"][1100:]
    train_en = s["en"][:1100] + ["Only one side", "That is nice .", " "] + s["en"][1100:]
    raw = _europarl_training_archive(tmp_path / "raw", train_de, train_en)
    _tar(
        raw / "DeEnGoldAlignment.tar.gz",
        {
            "DeEn/de": ("\n".join(gold_de) + "\n").encode("latin-1"),
            "DeEn/en": ("\n".join(gold_en) + "\n").encode("latin-1"),
            "DeEn/alignmentDeEn.talp": "1-1 2-2 3-3 4-4\n1-2 2-3 3-3 4-4\n",
        },
    )
    out = tmp_path / "out"
    proc = run_prep("europarl_de_en_align", "--raw-dir", raw, "--out", out, "--bpe-merges", "100")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "removed 1 test pairs from the training data" in proc.stderr
    assert "dropped 2 pairs with an empty side" in proc.stderr  # either side
    # latin-1 -> utf-8, lowercased, not re-tokenized (the gold alignments index its tokens)
    assert lines(out / "tok" / "test.de") == ["das ist schön .", "über die tagesordnung,ja ."]
    # raw/ (sacreBLEU's references, against Moses-detokenized hypotheses): the test side as
    # released, detokenized as fairseq-generate --tokenizer moses detokenizes, lowercased
    assert lines(out / "raw" / "test.de") == ["das ist schön.", "über die tagesordnung,ja."]
    assert lines(out / "raw" / "test.en") == ["that is nice.", "on the agenda."]
    train, valid = lines(out / "tok" / "train.de"), lines(out / "tok" / "valid.de")
    assert len(valid) == 1000 and len(train) == 2130 - 1000
    assert valid[-1].replace(" ", "") == s["de"][-1].lower().replace(" ", "")  # the last pair
    assert all(t == t.lower() for t in train) and "das ist schön ." not in train
    assert lines(out / "gold" / "test.talp") == ["1-1 2-2 3-3 4-4", "1-2 2-3 3-3 4-4"]
    # separate BPE per language: two dictionaries
    assert (out / "bpe" / "codes.de").is_file() and (out / "bpe" / "codes.en").is_file()
    assert (out / "data-bin" / "dict.de.txt").read_text() != (out / "data-bin" / "dict.en.txt").read_text()
    for lang in ("de", "en"):  # each side segmented with its own codes
        assert lines(out / "bpe" / f"train.{lang}") == apply_bpe(
            lines(out / "tok" / f"train.{lang}"), out / "bpe" / f"codes.{lang}"
        )

    (raw / "DeEnGoldAlignment.tar.gz").unlink()
    proc = run_prep("europarl_de_en_align", "--out", tmp_path / "dl")
    assert proc.returncode == 1
    assert (
        "DeEnGoldAlignment.tar.gz cannot be downloaded automatically" in proc.stderr
        or "could not download europarl-v7.de-en.tgz" in proc.stderr
    )


def test_bad_arguments(tmp_path):
    proc = run_prep("wmt14_en_de", "--out", tmp_path, "--src", "fr")
    assert proc.returncode == 2 and "--src/--tgt must be the two languages of wmt14_en_de: en and de" in proc.stderr
    proc = run_prep("wmt14_en_de", "--out", tmp_path, "--raw-dir", tmp_path / "nope")
    assert proc.returncode == 1 and "raw data directory not found" in proc.stderr
    assert "training-parallel-europarl-v7.tgz" in proc.stderr


def test_europarl_docs_dead_url(tmp_path):
    """The published dev/test files under the repository's names
    (data/Europarl7/concatenated_en2de_<split>_<lang>.txt); a dead URL is one line naming it."""
    env = {"EUROPARL_DOC_URL_BASE": "http://127.0.0.1:9/europarl/"}
    e = dict(os.environ, **env)
    proc = subprocess.run(
        [
            sys.executable,
            str(DATA_PREP / "prepare_europarl_docs.py"),
            "--out",
            str(tmp_path),
            "--max-doc-length",
            "128",
            "--train-split",
            "dev",
        ],
        capture_output=True,
        text=True,
        env=e,
        timeout=120,
    )
    assert proc.returncode == 1
    name = "concatenated_en2de_dev_en.txt"
    assert f"could not download {name}" in proc.stderr and f"http://127.0.0.1:9/europarl/{name}" in proc.stderr
    assert "github.com/sameenmaruf/selective-attn" in proc.stderr and "--raw-dir" in proc.stderr
    assert list(tmp_path.rglob("*.part")) == []


def test_europarl_docs_training_split_is_not_published(tmp_path):
    """The repository has no training split (its readme: from the author on request): the
    default --train-split train without --raw-dir is refused in one line before anything is
    downloaded (it requested a file that does not exist)."""
    env = dict(os.environ, EUROPARL_DOC_URL_BASE="http://127.0.0.1:9/europarl/")
    proc = subprocess.run(
        [sys.executable, str(DATA_PREP / "prepare_europarl_docs.py"), "--out", str(tmp_path / "o"),
         "--max-doc-length", "128"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "--train-split train: the document-level Europarl7 set publishes only dev and test" in proc.stderr
    assert "--raw-dir DIR with train.en / train.de" in proc.stderr and "could not download" not in proc.stderr
    assert not (tmp_path / "o").exists()
    proc = subprocess.run(
        [sys.executable, str(DATA_PREP / "prepare_europarl_docs.py"), "--out", str(tmp_path / "o"),
         "--max-doc-length", "128", "--train-split", "dev", "--valid-split", "train"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1 and "--valid-split train:" in proc.stderr
    assert "--raw-dir DIR with train.en / train.de ('<d>' starts each document)" in proc.stderr
    assert "--train-split dev for a small run" not in proc.stderr


def test_europarl_gold_blank_lines_are_dropped_as_lilt_alignment_scripts_do(tmp_path):
    """lilt/alignment-scripts preprocess/deen-test.sh: sed '/^[[:space:]]*$/d' on the talp
    file and on both text files, each on its own; the sentences and links stay paired."""
    s = _sentences(2010)
    raw = _europarl_training_archive(tmp_path / "raw", s["de"], s["en"])

    def gold_archive(de, en, talp):
        _tar(
            raw / "DeEnGoldAlignment.tar.gz",
            {"DeEn/de": de.encode("latin-1"), "DeEn/en": en.encode("latin-1"), "DeEn/alignmentDeEn.talp": talp},
        )

    gold_archive("Das ist schön .\n\nJa .\n \n", "That is nice .\n\nYes .\n\t\n", "1-1 2-2\n\n1-1\n   \n")
    out = tmp_path / "out"
    proc = run_prep("europarl_de_en_align", "--raw-dir", raw, "--out", out, "--bpe-merges", "50")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert lines(out / "tok" / "test.de") == ["das ist schön .", "ja ."]
    assert lines(out / "tok" / "test.en") == ["that is nice .", "yes ."]
    # and as released (cased), for cased models aligned against the same gold (ReLA's analyses)
    assert lines(out / "tok_cased" / "test.de") == ["Das ist schön .", "Ja ."]
    assert lines(out / "gold" / "test.talp") == ["1-1 2-2", "1-1"]
    assert "test.de: dropped 2 blank lines" in proc.stderr and "gold alignments: dropped 2 blank lines" in proc.stderr

    # --max-eval-lines cuts the validation pairs taken from training, the test set and the gold
    # alignments alike
    small = tmp_path / "small"
    proc = run_prep(
        "europarl_de_en_align", "--raw-dir", raw, "--out", small, "--bpe-merges", "50", "--max-eval-lines", "1"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(lines(small / "tok" / "valid.de")) == len(lines(small / "raw" / "valid.en")) == 1
    assert lines(small / "raw" / "valid.en") == lines(small / "tok" / "valid.en")
    assert lines(small / "tok" / "test.en") == ["that is nice ."] and lines(small / "gold" / "test.talp") == ["1-1 2-2"]
    assert len(lines(small / "tok" / "train.de")) == 2010 - 1000

    gold_archive("Das ist schön .\nJa .\n", "That is nice .\nYes .\n", "1-1 2-2\n")  # a line short
    proc = run_prep("europarl_de_en_align", "--raw-dir", raw, "--out", tmp_path / "bad", "--bpe-merges", "50")
    assert proc.returncode == 1
    assert "1 alignment lines but 2 test sentences after dropping blank lines" in proc.stderr

    gold_archive("Das ist schön .\n\nJa .\n", "That is nice .\nYes .\nNo .\n", "1-1 2-2\n1-1\n")
    proc = run_prep("europarl_de_en_align", "--raw-dir", raw, "--out", tmp_path / "bad", "--bpe-merges", "50")
    assert proc.returncode == 1
    assert "after dropping blank lines the test sides differ: 2 de and 3 en sentences" in proc.stderr


# ------------------------------------------------------------------------ binarize


def test_binarize_checks_every_split_and_swaps_in_only_a_complete_directory(tmp_path, monkeypatch):
    text = tmp_path / "bpe"
    text.mkdir()
    for split in ("train", "valid", "test"):
        (text / f"{split}.de").write_text("ein Hund\nzwei Hunde\n", encoding="utf-8")
        (text / f"{split}.en").write_text("one dog\ntwo dogs\n", encoding="utf-8")
    databin = tmp_path / "data-bin"
    logs = []
    common.binarize(text, databin, "de", "en", True, 1, logs.append, extra_files={"info.json": '{"a": 1}'})
    assert sorted(p.name for p in databin.iterdir()) == sorted(
        common.binarized_files("de", "en") + ["info.json", "preprocess.log"]
    )
    assert (databin / "info.json").read_text() == '{"a": 1}'
    assert (databin / "dict.de.txt").read_text() == (databin / "dict.en.txt").read_text()  # joined
    common.binarize(text, tmp_path / "sep", "de", "en", False, 1, logs.append)
    assert (tmp_path / "sep" / "dict.de.txt").read_text() != (tmp_path / "sep" / "dict.en.txt").read_text()
    complete = {p.name: p.read_bytes() for p in databin.iterdir()}

    def unchanged():
        return {p.name: p.read_bytes() for p in databin.iterdir()} == complete and not (
            tmp_path / "data-bin.tmp"
        ).exists()

    # a special symbol in the test split is named before fairseq-preprocess runs
    (text / "test.en").write_text("one dog\ntwo </s> dogs\n", encoding="utf-8")
    with pytest.raises(common.PrepError, match=r"test.en:2: the word '</s>' is fairseq's special symbol"):
        common.binarize(text, databin, "de", "en", True, 1, logs.append)
    assert unchanged()
    (text / "test.en").write_text("one dog\ntwo dogs\n", encoding="utf-8")
    # fairseq-preprocess fails: the previous directory stays, no temporary one is left
    (text / "valid.en").unlink()
    with pytest.raises(common.PrepError, match="fairseq-preprocess failed with exit status"):
        common.binarize(text, databin, "de", "en", True, 1, logs.append)
    assert unchanged()

    # fairseq-preprocess exits 0 without writing every file
    def partial_preprocess(cmd, **kw):
        out = Path(cmd[cmd.index("--destdir") + 1])
        out.mkdir()
        (out / "dict.de.txt").write_text("x 1\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(common.subprocess, "run", partial_preprocess)
    with pytest.raises(common.PrepError, match=r"fairseq-preprocess did not produce: dict.en.txt, train.de-en.de.bin"):
        common.binarize(text, databin, "de", "en", True, 1, logs.append)
    assert unchanged()


# ------------------------------------------------------------------------ prepare_corpus in-process


def test_arguments_default_the_target_to_the_other_language_and_refuse_zero(tmp_path, capsys):
    corpus = CORPORA["wmt14_en_de"]  # pair (en, de)
    args = prepare_corpus.parse_args(corpus, ["--out", str(tmp_path), "--src", "de"])
    assert (args.src, args.tgt) == ("de", "en")
    args = prepare_corpus.parse_args(corpus, ["--out", str(tmp_path)])
    assert (args.src, args.tgt) == ("en", "de")
    for flag in ("--bpe-merges", "--max-train-lines", "--max-eval-lines", "--workers"):
        with pytest.raises(SystemExit) as e:
            prepare_corpus.parse_args(corpus, ["--out", str(tmp_path), flag, "0"])
        assert e.value.code == 2 and f"{flag} must be >= 1" in capsys.readouterr().err


def test_a_part_without_sentences_is_refused(tmp_path):
    _tar(tmp_path / "c.tgz", {"x.de": "", "x.en": ""})
    part = Part("empty-part", {lang: Text("c.tgz", f"x.{lang}") for lang in ("de", "en")})
    with pytest.raises(prepare_corpus.PrepError, match=r"empty-part: no sentences in .*c.tgz \[x.de\]"):
        prepare_corpus.read_part(part, ("de", "en"), {"c.tgz": tmp_path / "c.tgz"})


def test_stamp_options_record_what_the_outputs_are_made_from(tmp_path):
    def options(name, *argv, raw_dir=None):
        args = prepare_corpus.parse_args(CORPORA[name], ["--out", str(tmp_path / "out"), *argv])
        return prepare_corpus.stamp_options(args, raw_dir)

    plain = options("wmt14_en_de")
    assert plain["bpe_merges"] == 32000 and plain["source"] == {"download": True}
    assert "recipe" not in plain and "test_set" not in plain
    assert options("wmt14_en_de", "--bpe-merges", "500")["bpe_merges"] == 500
    assert options("korean_en")["recipe"] == 2  # a recipe change rebuilds an older copy
    # en->de is scored on its own newstest2019 (a stamp from before that rebuilds)
    assert "test_set" not in options("wmt19_de_en")
    assert sorted(options("wmt19_de_en", "--src", "en")["test_set"]) == [
        "wmt19-test.tgz:sgm/newstest2019-ende-ref.de.sgm",
        "wmt19-test.tgz:sgm/newstest2019-ende-src.en.sgm",
    ]
    (tmp_path / "training-parallel-nc-v9.tgz").write_bytes(b"12345")
    raw = options("wmt14_en_de", raw_dir=tmp_path)["source"]
    assert raw == {"raw_dir": str(tmp_path), "files": {"training-parallel-nc-v9.tgz": 5}}


def test_outputs_are_complete_only_with_the_gold_alignments_a_corpus_has(tmp_path):
    (tmp_path / "data-bin").mkdir()
    for name in binarized_files("de", "en"):
        (tmp_path / "data-bin" / name).write_text("x")
    (tmp_path / "raw").mkdir()
    for lang in ("de", "en"):
        (tmp_path / "raw" / f"test.{lang}").write_text("x")
    assert prepare_corpus.outputs_complete(tmp_path, "de", "en", CORPORA["wmt14_en_de"])
    assert not prepare_corpus.outputs_complete(tmp_path, "de", "en", CORPORA["europarl_de_en_align"])
    (tmp_path / "gold").mkdir()
    (tmp_path / "gold" / "test.talp").write_text("1-1\n")
    assert prepare_corpus.outputs_complete(tmp_path, "de", "en", CORPORA["europarl_de_en_align"])
    (tmp_path / "raw" / "test.en").unlink()
    assert not prepare_corpus.outputs_complete(tmp_path, "de", "en", CORPORA["europarl_de_en_align"])


def test_too_few_training_pairs_for_the_validation_set_are_refused(tmp_path):
    """europarl_de_en_align takes its validation set from the last 1,000 training pairs:
    a corpus of fewer than 2,000 pairs is refused, naming the count."""
    s = _sentences(50)
    raw = _europarl_training_archive(tmp_path / "raw", s["de"], s["en"])
    _tar(
        raw / "DeEnGoldAlignment.tar.gz",
        {"DeEn/de": b"Ja .\n", "DeEn/en": b"Yes .\n", "DeEn/alignmentDeEn.talp": "1-1\n"},
    )
    proc = run_prep("europarl_de_en_align", "--raw-dir", raw, "--out", tmp_path / "out", "--bpe-merges", "50")
    assert proc.returncode == 1
    assert "only 50 training pairs: too few to take the validation set (the last 1000 pairs)" in proc.stderr
