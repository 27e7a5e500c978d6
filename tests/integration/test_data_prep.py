"""Tests for data_prep/prepare_multi30k.py: run as a subprocess, like a user would, and its
argument, source and download checks in-process."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require_shared_data, shared_data_dir

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "data_prep" / "prepare_multi30k.py"
sys.path.insert(0, str(REPO / "data_prep"))

import prepare_multi30k  # noqa: E402
from common import learn_bpe  # noqa: E402

# ../shared/data beside the checkout (or $FSA_SHARED_DATA), where every other test finds
# it: until 2026-11-28 this file looked inside the checkout, so its Multi30k tests skipped
# in CI
MULTI30K = shared_data_dir() / "multi30k"


def _clean_env(**extra: str) -> dict:
    env = dict(os.environ)
    for k in ("MULTI30K_DIR", "MULTI30K_URL_BASE"):
        env.pop(k, None)
    env.update(extra)
    return env


def run_prep(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        env=env if env is not None else _clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _count_lines(path: Path) -> int:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return sum(1 for _ in f)


def _write_gz(path: Path, lines: list[str]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    require_shared_data(MULTI30K / "train.de.gz", "Multi30k raw data")
    for mod in ("sacremoses", "subword_nmt", "fairseq_cli"):
        if importlib.util.find_spec(mod) is None:
            pytest.skip(f"{mod} not installed")
    out = tmp_path_factory.mktemp("m30k") / "out"
    args = ("--raw-dir", str(MULTI30K), "--out", str(out), "--max-train-lines", "2000", "--bpe-merges", "500")
    proc = run_prep(*args)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out, args, proc


def test_end_to_end(prepared):
    out, _, proc = prepared
    databin = out / "data-bin"
    assert (databin / "dict.de.txt").is_file()
    assert (databin / "dict.en.txt").is_file()
    # joined dictionary: identical source and target dictionaries
    assert (databin / "dict.de.txt").read_text() == (databin / "dict.en.txt").read_text()
    for split in ("train", "valid", "test"):
        for lang in ("de", "en"):
            for ext in ("bin", "idx"):
                f = databin / f"{split}.de-en.{lang}.{ext}"
                assert f.is_file() and f.stat().st_size > 0, f

    bpe = out / "bpe"
    assert (bpe / "codes").is_file()
    assert "@@ " in (bpe / "train.de").read_text(encoding="utf-8")
    assert "@@ " in (bpe / "train.en").read_text(encoding="utf-8")

    expected = {"train": 2000, "valid": 1014, "test": 1000}
    raw_src = {"valid": "val", "test": "test_2016_flickr"}
    for split, n in expected.items():
        for lang in ("de", "en"):
            assert _count_lines(bpe / f"{split}.{lang}") == n, (split, lang)
            assert _count_lines(out / "tok" / f"{split}.{lang}") == n, (split, lang)
            if split in raw_src:
                assert _count_lines(MULTI30K / f"{raw_src[split]}.{lang}.gz") == n

    # untokenized reference kept for sacreBLEU
    with gzip.open(MULTI30K / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        ref = [line.rstrip("\n") for line in f]
    assert (out / "raw" / "test.en").read_text(encoding="utf-8").splitlines() == ref

    # progress lines on stderr, nothing on stdout
    assert "[multi30k] tokenize train.de: 2000 lines" in proc.stderr
    assert (out / ".prepare_multi30k.json").is_file()
    assert not (out / "data-bin.tmp").exists()


def test_rerun_is_skipped(prepared):
    out, args, _ = prepared
    before = (out / "data-bin" / "train.de-en.de.bin").stat().st_mtime_ns
    proc = run_prep(*args)
    assert proc.returncode == 0, proc.stderr
    assert "skipping" in proc.stderr
    assert (out / "data-bin" / "train.de-en.de.bin").stat().st_mtime_ns == before


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("via", ["flag", "env"])
def test_missing_raw_dir(tmp_path, via):
    missing = tmp_path / "does-not-exist"
    if via == "flag":
        proc = run_prep("--raw-dir", str(missing), "--out", str(tmp_path / "out"))
    else:
        proc = run_prep("--out", str(tmp_path / "out"), env=_clean_env(MULTI30K_DIR=str(missing)))
    assert proc.returncode != 0
    assert str(missing) in proc.stderr
    assert "train.de.gz" in proc.stderr  # tells which files are expected
    assert not (tmp_path / "out" / ".prepare_multi30k.json").exists()


def test_missing_raw_file(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for stem in ("train", "val"):  # test_2016_flickr.* missing
        for lang in ("de", "en"):
            _write_gz(raw / f"{stem}.{lang}.gz", ["a b c"])
    proc = run_prep("--raw-dir", str(raw), "--out", str(tmp_path / "out"))
    assert proc.returncode != 0
    assert str(raw / "test_2016_flickr.de.gz") in proc.stderr


def test_line_count_mismatch(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    lines = [f"Satz Nummer {i} ." for i in range(5)]
    _write_gz(raw / "train.de.gz", lines)
    _write_gz(raw / "train.en.gz", lines[:-1])  # one line fewer
    # plain (uncompressed) files must be accepted too
    for stem in ("val", "test_2016_flickr"):
        for lang in ("de", "en"):
            (raw / f"{stem}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    proc = run_prep("--raw-dir", str(raw), "--out", str(tmp_path / "out"))
    assert proc.returncode != 0
    assert str(raw / "train.de.gz") in proc.stderr
    assert str(raw / "train.en.gz") in proc.stderr
    assert "5" in proc.stderr and "4" in proc.stderr
    assert not (tmp_path / "out" / ".prepare_multi30k.json").exists()


def test_download_failure(tmp_path):
    out = tmp_path / "out"
    base = "http://127.0.0.1:9/multi30k/"
    proc = run_prep("--out", str(out), env=_clean_env(MULTI30K_URL_BASE=base), timeout=120)
    assert proc.returncode != 0
    assert base + "train.de.gz" in proc.stderr
    assert "--raw-dir" in proc.stderr and "MULTI30K_DIR" in proc.stderr
    assert list(out.rglob("*.part")) == []
    assert not (out / ".prepare_multi30k.json").exists()


def _serve(directory):
    import threading
    from functools import partial
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(directory)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/"


def test_download_checks_sizes(tmp_path):
    """The download path on a local server: the release files pass the size check (the
    pipeline then runs on them); a file of another size is rejected and removed."""
    require_shared_data(MULTI30K / "train.de.gz", "Multi30k raw data")
    served = tmp_path / "served"
    served.mkdir()
    for name in ("train", "val", "test_2016_flickr"):
        for lang in ("de", "en"):
            (served / f"{name}.{lang}.gz").write_bytes((MULTI30K / f"{name}.{lang}.gz").read_bytes())
    srv, base = _serve(served)
    try:
        out = tmp_path / "ok"
        proc = run_prep(
            "--out",
            str(out),
            "--max-train-lines",
            "300",
            "--max-eval-lines",
            "50",
            "--bpe-merges",
            "100",
            env=_clean_env(MULTI30K_URL_BASE=base),
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "downloaded train.de.gz: 637044 bytes" in proc.stderr and "verified by size" in proc.stderr
        assert _count_lines(out / "bpe" / "test.en") == 50 and _count_lines(out / "raw" / "test.de") == 50

        _write_gz(served / "val.en.gz", ["not the release"])
        out = tmp_path / "bad"
        proc = run_prep("--out", str(out), env=_clean_env(MULTI30K_URL_BASE=base))
        assert proc.returncode == 1
        assert "checksum mismatch for val.en.gz" in proc.stderr and "expected 21650 bytes" in proc.stderr
        assert not (out / "raw" / "val.en.gz").exists() and list(out.rglob("*.part")) == []
        assert (out / "raw" / "train.de.gz").is_file()  # the files before it stay for the next run
    finally:
        srv.shutdown()
        srv.server_close()


# --------------------------------------------------------------------------- a tiny corpus


def _tiny_raw(raw: Path, n_train: int = 40, n_eval: int = 8) -> Path:
    """Multi30k's six files, made up: English with apostrophes, which Moses splits one way
    for English ("dog 's") and another for German ("dog ' s")."""
    raw.mkdir(parents=True, exist_ok=True)
    for stem, n in (("train", n_train), ("val", n_eval), ("test_2016_flickr", n_eval)):
        _write_gz(raw / f"{stem}.de.gz", [f"Ein Hund läuft im Park , Nummer {i} ." for i in range(n)])
        _write_gz(raw / f"{stem}.en.gz", [f"It's a dog's walk in park number {i} ." for i in range(n)])
    return raw


def _stamp_options(out: Path) -> dict:
    return json.loads((out / ".prepare_multi30k.json").read_text())["options"]


def test_tiny_corpus_is_tokenized_per_language_with_a_joint_bpe(tmp_path):
    from sacremoses import MosesTokenizer

    raw = _tiny_raw(tmp_path / "raw")
    out = tmp_path / "out"
    proc = run_prep("--raw-dir", str(raw), "--out", str(out), "--bpe-merges", "30", "--workers", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for lang in ("de", "en"):
        with gzip.open(raw / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
            raw_train = f.read().splitlines()
        tok = MosesTokenizer(lang=lang)
        expected = [tok.tokenize(line, escape=False, return_str=True) for line in raw_train]
        assert (out / "tok" / f"train.{lang}").read_text(encoding="utf-8").splitlines() == expected
    assert "It 's a dog 's walk" in (out / "tok" / "train.en").read_text(encoding="utf-8")
    # the codes are those learned on both tokenized training sides
    joint = tmp_path / "joint_codes"
    learn_bpe(
        (out / "tok" / "train.de").read_text(encoding="utf-8").splitlines()
        + (out / "tok" / "train.en").read_text(encoding="utf-8").splitlines(),
        joint,
        30,
    )
    assert (out / "bpe" / "codes").read_text(encoding="utf-8") == joint.read_text(encoding="utf-8")


def test_each_changed_option_or_input_rebuilds(tmp_path):
    raw = _tiny_raw(tmp_path / "raw")
    out = tmp_path / "out"
    base = ("--raw-dir", str(raw), "--out", str(out), "--workers", "1", "--max-train-lines", "30")

    def prep(*extra):
        proc = run_prep(*base, *extra)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return "up to date, skipping" in proc.stderr

    assert not prep("--bpe-merges", "20", "--max-eval-lines", "5")
    assert _count_lines(out / "bpe" / "train.de") == 30
    assert _count_lines(out / "bpe" / "valid.en") == _count_lines(out / "raw" / "test.en") == 5
    assert prep("--bpe-merges", "20", "--max-eval-lines", "5")
    assert not prep("--bpe-merges", "20", "--max-eval-lines", "6")
    assert _count_lines(out / "bpe" / "test.de") == 6
    assert not prep("--bpe-merges", "25", "--max-eval-lines", "6")
    assert _stamp_options(out)["bpe_merges"] == 25
    assert not prep("--bpe-merges", "25", "--max-eval-lines", "6", "--force")
    # a raw file that changed in place (another size)
    _write_gz(raw / "val.en.gz", [f"It's another walk {i} ." for i in range(8)])
    assert not prep("--bpe-merges", "25", "--max-eval-lines", "6")
    # an output that went missing
    for missing in ("raw/test.en", "bpe/codes", "bpe/valid.de", "data-bin/dict.de.txt"):
        (out / missing).unlink()
        assert not prep("--bpe-merges", "25", "--max-eval-lines", "6"), missing
        assert (out / missing).is_file()


def test_a_failed_rebuild_leaves_no_stamp(tmp_path):
    raw = _tiny_raw(tmp_path / "raw")
    out = tmp_path / "out"
    args = ("--raw-dir", str(raw), "--out", str(out), "--workers", "1", "--bpe-merges", "20")
    assert run_prep(*args).returncode == 0
    # a rebuild with other merges that fails at binarization, after the text outputs were
    # rewritten (fairseq-preprocess cannot create its directory where a file stands)
    (out / "data-bin.tmp").write_text("in the way")
    proc = run_prep(*args[:-1], "25")
    assert proc.returncode == 1 and "fairseq-preprocess failed" in proc.stderr
    assert not (out / ".prepare_multi30k.json").exists()
    (out / "data-bin.tmp").unlink()
    proc = run_prep(*args)  # the first options again: rebuilt, not taken as up to date
    assert proc.returncode == 0 and "skipping" not in proc.stderr
    assert _stamp_options(out)["bpe_merges"] == 20


def test_an_empty_split_is_refused(tmp_path):
    raw = _tiny_raw(tmp_path / "raw")
    for lang in ("de", "en"):
        _write_gz(raw / f"test_2016_flickr.{lang}.gz", [])
    proc = run_prep("--raw-dir", str(raw), "--out", str(tmp_path / "out"), "--workers", "1")
    assert proc.returncode == 1
    assert "split 'test_2016_flickr' is empty" in proc.stderr


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--bpe-merges", "0"], "--bpe-merges must be >= 1"),
        (["--max-train-lines", "0"], "--max-train-lines must be >= 1"),
        (["--max-eval-lines", "0"], "--max-eval-lines must be >= 1"),
        (["--workers", "0"], "--workers must be >= 1"),
        (["--src", "en", "--tgt", "en"], "--src and --tgt must differ"),
    ],
)
def test_bad_arguments_are_refused(tmp_path, capsys, argv, flag):
    with pytest.raises(SystemExit) as e:
        prepare_multi30k.parse_args(["--out", str(tmp_path), *argv])
    assert e.value.code == 2 and flag in capsys.readouterr().err


def test_raw_dir_flag_comes_before_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MULTI30K_DIR", str(tmp_path / "from_env"))
    args = prepare_multi30k.parse_args(["--out", str(tmp_path / "out"), "--raw-dir", str(tmp_path / "from_flag")])
    assert prepare_multi30k.resolve_raw_source(args) == ((tmp_path / "from_flag").resolve(), None)
    args = prepare_multi30k.parse_args(["--out", str(tmp_path / "out")])
    assert prepare_multi30k.resolve_raw_source(args) == ((tmp_path / "from_env").resolve(), None)
    monkeypatch.delenv("MULTI30K_DIR")
    monkeypatch.setenv("MULTI30K_URL_BASE", "http://mirror/m30k")
    assert prepare_multi30k.resolve_raw_source(args) == ((tmp_path / "out" / "raw").resolve(), "http://mirror/m30k")
    assert prepare_multi30k.source_for("val.de.gz", "http://mirror/m30k").urls == ("http://mirror/m30k/val.de.gz",)


def test_a_downloaded_file_that_is_not_gzip_is_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(prepare_multi30k, "SIZES", {})  # no size to check: the gzip check must catch it
    served = tmp_path / "served"
    served.mkdir()
    for name in prepare_multi30k.expected_names():
        (served / name).write_bytes(b"not gzip")
    srv, base = _serve(served)
    try:
        with pytest.raises(prepare_multi30k.PrepError, match="train.de.gz is not a readable gzip file"):
            prepare_multi30k.download_raw(tmp_path / "raw", base)
    finally:
        srv.shutdown()
        srv.server_close()
    assert not (tmp_path / "raw" / "train.de.gz").exists()
