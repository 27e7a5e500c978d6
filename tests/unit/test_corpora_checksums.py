"""The published checksums in data_prep/corpora.py against their sources, read
independently: every file whose checksum the table says comes from tensorflow/datasets
(``TFDS``) has that URL with that size and sha256 in tensorflow-datasets' own
``url_checksums`` files (the lines of release 4.9.9 kept in
tests/fixtures/tfds_4.9.9_url_checksums.tsv); every md5 from the sacreBLEU table
(``SACREBLEU``) is the md5 the installed sacrebleu lists for that URL.  A digit changed in
the table, or a URL moved to another file's checksum, fails here, before any download
would."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "data_prep"))

import corpora  # noqa: E402

FIXTURE = REPO / "tests" / "fixtures" / "tfds_4.9.9_url_checksums.tsv"


def tfds_checksums():
    """URL -> {(size, sha256), ...} as tensorflow-datasets publishes them."""
    table = {}
    for line in FIXTURE.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        _, url, size, sha256, *_ = line.split("\t")
        table.setdefault(url, set()).add((int(size), sha256))
    return table


def sources(checksum_from):
    found = {}
    for corpus in corpora.CORPORA.values():
        for source in corpus.sources:
            if source.checksum_from == checksum_from:
                found[source.name] = source
    return sorted(found.values(), key=lambda s: s.name)


@pytest.mark.parametrize("source", sources(corpora.TFDS), ids=lambda s: s.name)
def test_a_tfds_checksum_is_the_one_tensorflow_datasets_publishes(source):
    published = tfds_checksums()
    assert source.sha256 and source.size, f"{source.name}: says TFDS but has no sha256 and size"
    listed = [url for url in source.urls if url in published]
    assert listed, f"{source.name}: none of its URLs is in tensorflow-datasets' url_checksums"
    for url in listed:
        assert (source.size, source.sha256) in published[url], url


@pytest.mark.parametrize("source", sources(corpora.SACREBLEU), ids=lambda s: s.name)
def test_a_sacrebleu_md5_is_the_one_sacrebleu_lists(source):
    from sacrebleu.dataset import DATASETS

    listed = {
        md5
        for dataset in DATASETS.values()
        for url, md5 in zip(getattr(dataset, "data", []), getattr(dataset, "md5", []))
        if url in source.urls
    }
    assert listed, f"{source.name}: sacreBLEU lists none of its URLs"
    assert listed == {source.md5}


def test_the_tables_name_their_checksums_and_the_fixture_covers_them():
    """Every file with a checksum says where it is published, and each TFDS one is covered
    (22 files on 2026-11-29; the fixture holds their lines)."""
    tfds = sources(corpora.TFDS)
    assert len(tfds) >= 20 and len(sources(corpora.SACREBLEU)) >= 1
    for corpus in corpora.CORPORA.values():
        for source in corpus.sources:
            if source.sha256 or source.md5 or source.size is not None:
                assert source.checksum_from, source.name
