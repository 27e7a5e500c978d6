"""The provenance every result file carries (fairseq_sparse_attn/provenance.py): what it
records, what its check refuses, and that a write is whole or absent.  The files the
benchmarks and tools write: tests/integration/test_bench_provenance.py."""

import json
import math
import subprocess

import pytest

from fairseq_sparse_attn import provenance
from fairseq_sparse_attn.provenance import check_provenance, finite, with_provenance, write_json


def test_a_given_record_is_kept_and_completed():
    data = with_provenance({"bleu": 1.0, "provenance": {"seed": 5, "run": "a"}}, seed=1, argv=["x", "--y z"])
    record = check_provenance(data)
    assert (record["seed"], record["run"], record["command"]) == (5, "a", "x '--y z'")
    assert data["bleu"] == 1.0


def test_the_check_refuses_what_a_reader_could_not_trust():
    good = with_provenance({}, argv=["x"])
    check_provenance(good)
    with pytest.raises(ValueError, match="no 'provenance' object"):
        check_provenance({})
    with pytest.raises(ValueError, match="provenance lacks git_commit"):
        check_provenance({"provenance": {k: v for k, v in good["provenance"].items() if k != "git_commit"}})
    with pytest.raises(ValueError, match="empty command line"):
        check_provenance({"provenance": {**good["provenance"], "command": ""}})
    with pytest.raises(ValueError, match="reports BLEU but its provenance has no sacreBLEU signature"):
        check_provenance(good, bleu=True)
    check_provenance(with_provenance({}, argv=["x"], sacrebleu_signature="nrefs:1|..."), bleu=True)


def test_not_measured_floats_become_null():
    value = {"a": [1.0, math.nan, (math.inf, -math.inf)], "b": 2, "c": "x"}
    assert finite(value) == {"a": [1.0, None, [None, None]], "b": 2, "c": "x"}


def test_a_write_is_whole_or_absent(tmp_path):
    path = write_json(tmp_path / "sub" / "r.json", {"x": 1}, seed=3)
    assert json.loads(path.read_text())["provenance"]["seed"] == 3
    with pytest.raises(ValueError):  # NaN is not JSON: nothing written
        write_json(tmp_path / "nan.json", {"x": math.nan})
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(OSError):  # the rename fails: the temporary file is removed
        write_json(tmp_path / "dir.json", {"x": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.json", "sub"]


def test_git_state_counts_tracked_changes_only(tmp_path, monkeypatch):
    """``git_dirty``: a change to a tracked file, not an untracked file (results, logs)."""

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
    monkeypatch.setattr(provenance, "_REPO", tmp_path)
    commit, dirty = provenance.git_state()
    assert len(commit) == 40 and dirty is False
    (tmp_path / "results.json").write_text("{}")
    assert provenance.git_state() == (commit, False)
    (tmp_path / "a.py").write_text("x = 2\n")
    assert provenance.git_state() == (commit, True)
    monkeypatch.setattr(provenance, "_REPO", tmp_path / "not-a-repo")
    assert provenance.git_state() == (None, None)


def test_the_triton_version_is_recorded_where_installed(monkeypatch):
    """A ``make bench-gpu`` result's decisions hold for the Triton version it ran with
    (``measured_faster`` reads ``versions.triton``): recorded where Triton is installed, left
    out where it is not (a record need not have it: results before 2026-11-29 lack it)."""
    from importlib import metadata

    triton = pytest.importorskip("triton")
    assert provenance.package_versions()["triton"] == triton.__version__
    monkeypatch.setitem(__import__("sys").modules, "triton", None)
    real = metadata.version

    def version(name):
        if name == "triton":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", version)
    versions = provenance.package_versions()
    assert "triton" not in versions and versions["torch"] is not None
