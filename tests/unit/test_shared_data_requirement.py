"""tests/conftest.py's require_shared_data: a missing shared corpus skips a test here and
fails it in CI ($FSA_REQUIRE_SHARED_DATA=1, set by .ci/run)."""

import pytest

from conftest import REQUIRE_SHARED_DATA_ENV, require_shared_data, shared_data_dir


def test_a_present_file_is_returned(tmp_path, monkeypatch):
    monkeypatch.setenv(REQUIRE_SHARED_DATA_ENV, "1")
    f = tmp_path / "train.de.gz"
    f.write_bytes(b"")
    assert require_shared_data(f, "Multi30k raw data") == f


def test_a_missing_file_skips_outside_ci(tmp_path, monkeypatch):
    monkeypatch.setenv(REQUIRE_SHARED_DATA_ENV, "0")
    with pytest.raises(pytest.skip.Exception, match="Multi30k raw data not found at"):
        require_shared_data(tmp_path / "train.de.gz", "Multi30k raw data")


def test_a_missing_file_fails_in_ci(tmp_path, monkeypatch):
    monkeypatch.setenv(REQUIRE_SHARED_DATA_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="FSA_REQUIRE_SHARED_DATA=1 requires it"):
        require_shared_data(tmp_path / "train.de.gz", "Multi30k raw data")


def test_ci_requires_the_shared_data_and_finds_it_beside_the_checkout(monkeypatch):
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    assert f"export {REQUIRE_SHARED_DATA_ENV}=1" in (repo / ".ci" / "run").read_text()
    monkeypatch.delenv("FSA_SHARED_DATA", raising=False)
    assert shared_data_dir() == repo.parent / "shared" / "data"
