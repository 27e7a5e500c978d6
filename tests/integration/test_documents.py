"""Document construction (ReLUFormer Appendix B) on hand-made documents, bad input, and a
tiny real document-level run (ReLUFormer vs softmax) on the Europarl dev documents."""

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_sparse_attn.data.documents import (
    Document,
    DocumentFormatError,
    documents_from_doc_ids,
    documents_from_marked_files,
    pack_documents,
    pack_lengths,
)

from conftest import shared_data_dir
from helpers import model_size_flags

REPO = Path(__file__).resolve().parents[2]
USER_DIR = str(REPO / "fairseq_sparse_attn")


def test_pack_lengths_by_hand():
    # L = 10; source lengths 3, 4, 3, 12 (longer than L), 2, 2; target always shorter except
    # sentence 4 whose target (9) would overflow the run 4,5 on the target side
    src = [3, 4, 3, 12, 2, 2, 6]
    tgt = [3, 4, 2, 5, 2, 9, 1]
    groups = pack_lengths(src, tgt, 10)
    # [0,1,2]: src 10 <= 10, tgt 9; adding 3 (src 12) overflows
    # [3]: alone, longer than L
    # [4]: src 2+2=4 ok but tgt 2+9=11 > 10 -> stop (neither side may exceed L)
    # [5, 6]: src 8, tgt 10
    assert [list(g) for g in groups] == [[0, 1, 2], [3], [4], [5, 6]]


def test_pack_lengths_counts_separators():
    assert [list(g) for g in pack_lengths([3, 3, 3], [1, 1, 1], 7, separator=True)] == [[0, 1], [2]]
    assert [list(g) for g in pack_lengths([3, 3, 3], [1, 1, 1], 7, separator=False)] == [[0, 1], [2]]
    assert [list(g) for g in pack_lengths([3, 3, 1], [1, 1, 1], 7, separator=False)] == [[0, 1, 2]]
    assert [list(g) for g in pack_lengths([3, 3, 1], [1, 1, 1], 7, separator=True)] == [[0, 1], [2]]


def test_pack_documents_never_cross_boundaries_and_reports_overlong():
    docs = [Document(1, ["a b", "c"], ["A B", "C"]), Document(5, ["d e f g h i", "j"], ["D", "J"])]
    packed, report = pack_documents(docs, 5, separator="<sep>")
    assert [(s, t) for s, t, _ in packed] == [("a b <sep> c", "A B <sep> C"), ("d e f g h i", "D"), ("j", "J")]
    assert [line for _, _, line in packed] == [1, 5, 6]
    assert report.overlong_sentences == 1 and report.packed == 3 and report.sentences == 4


def write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_marked_files_and_doc_ids(tmp_path):
    s = write(tmp_path / "x.en", ["<d>", "a", "b", "<d>", "c"])
    t = write(tmp_path / "x.de", ["<d>", "A", "B", "<d>", "C"])
    docs = documents_from_marked_files(s, t)
    assert [(d.src, d.tgt, d.first_line) for d in docs] == [(["a", "b"], ["A", "B"], 2), (["c"], ["C"], 5)]
    ids = write(tmp_path / "ids", ["7", "7", "9"])
    s2 = write(tmp_path / "y.en", ["a", "b", "c"])
    t2 = write(tmp_path / "y.de", ["A", "B", "C"])
    docs = documents_from_doc_ids(s2, t2, ids)
    assert [d.src for d in docs] == [["a", "b"], ["c"]]


def test_boundary_disagreement_names_file_and_line(tmp_path):
    s = write(tmp_path / "x.en", ["<d>", "a", "<d>", "b"])
    t = write(tmp_path / "x.de", ["<d>", "A", "B", "<d>"])
    with pytest.raises(DocumentFormatError, match=r"x\.en:3: document boundary"):
        documents_from_marked_files(s, t)


def test_line_count_mismatch_names_both_files(tmp_path):
    s = write(tmp_path / "x.en", ["<d>", "a", "b"])
    t = write(tmp_path / "x.de", ["<d>", "A"])
    with pytest.raises(DocumentFormatError, match=r"x\.en has 3 lines but .*x\.de has 2"):
        documents_from_marked_files(s, t)
    ids = write(tmp_path / "ids", ["1"])
    with pytest.raises(DocumentFormatError, match=r"ids has 1 lines"):
        documents_from_doc_ids(write(tmp_path / "a", ["x", "y"]), write(tmp_path / "b", ["X", "Y"]), ids)


def test_shared_europarl_boundaries_agree():
    d = shared_data_dir() / "europarl7_doc"
    if not (d / "dev.en.gz").exists():
        pytest.skip(f"Europarl documents not found at {d}")
    docs = documents_from_marked_files(d / "dev.en.gz", d / "dev.de.gz")
    assert len(docs) == 240
    with gzip.open(d / "dev.en.gz", "rt") as f:
        assert sum(len(doc.src) for doc in docs) == sum(1 for line in f if line.strip() != "<d>")


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def doc_data(tmp_path_factory):
    d = shared_data_dir() / "europarl7_doc"
    if not (d / "dev.en.gz").exists():
        pytest.skip(f"Europarl documents not found at {d}")
    out = tmp_path_factory.mktemp("europarl_docs")
    proc = run(
        [
            sys.executable,
            REPO / "data_prep" / "prepare_europarl_docs.py",
            "--raw-dir",
            d,
            "--out",
            out,
            "--train-split",
            "dev",
            "--valid-split",
            "test",
            "--test-split",
            "test",
            "--max-doc-length",
            "256",
            "--bpe-merges",
            "3000",
            "--max-docs",
            "120",
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads((out / "L256" / "data-bin" / "doc_info.json").read_text())
    assert info["max_doc_length"] == 256
    return out / "L256"


@pytest.mark.parametrize("model", ["reluformer", "softmax"])
def test_tiny_document_level_run(doc_data, model, tmp_path):
    import sacrebleu

    # the ReLUFormer run also exercises the memory-bounded key-block path in training
    arch = (
        [
            "--arch",
            "reluformer_wmt_en_de",
            "--attn-key-block-size",
            "64",
            "--attention-dropout",
            "0",
            "--criterion",
            "relu_regularized_label_smoothed_cross_entropy",
        ]
        if model == "reluformer"
        else ["--arch", "softmax_transformer_wmt_en_de", "--criterion", "label_smoothed_cross_entropy"]
    )
    proc = run(
        [
            sys.executable,
            "-m",
            "fairseq_cli.train",
            doc_data / "data-bin",
            "--user-dir",
            USER_DIR,
            "--task",
            "document_translation",
            "--max-doc-length",
            "256",
            *arch,
            "--label-smoothing",
            "0.1",
            *model_size_flags(layers=2, dim=64, ffn=256, heads=4),
            "--share-all-embeddings",
            "--optimizer",
            "adam",
            "--lr",
            "2e-3",
            "--lr-scheduler",
            "inverse_sqrt",
            "--warmup-updates",
            "25",
            "--max-tokens",
            "4096",
            "--max-update",
            "50",
            "--save-dir",
            tmp_path,
            "--no-epoch-checkpoints",
            "--num-workers",
            "0",
            "--seed",
            "1",
            "--log-format",
            "simple",
            "--validate-interval-updates",
            "50",
        ]
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    if model == "reluformer":
        valid_line = next(line for line in log.splitlines() if "valid on 'valid' subset" in line)
        for kind in ("encoder_self", "decoder_self", "cross"):
            for stat in ("reg", "entropy", "wsum", "null"):
                assert re.search(rf"\b{stat}_{kind} [\d.]+", valid_line), (stat, kind, valid_line)
    proc = run(
        [
            sys.executable,
            "-m",
            "fairseq_cli.generate",
            doc_data / "data-bin",
            "--user-dir",
            USER_DIR,
            "--task",
            "document_translation",
            "--max-doc-length",
            "256",
            "--path",
            tmp_path / "checkpoint_last.pt",
            "--gen-subset",
            "test",
            "--beam",
            "1",
            "--batch-size",
            "32",
            "--max-len-a",
            "0",
            "--max-len-b",
            "128",
            "--remove-bpe",
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    hyps = dict(re.findall(r"^H-(\d+)\t\S+\t(.*)$", proc.stdout, re.M))
    refs = dict(re.findall(r"^T-(\d+)\t(.*)$", proc.stdout, re.M))
    assert hyps and hyps.keys() == refs.keys()
    keys = sorted(hyps, key=int)
    bleu = sacrebleu.corpus_bleu([hyps[k] for k in keys], [[refs[k] for k in keys]], tokenize="none")
    print(f"document-level {model}: {bleu}")
    info = json.loads((doc_data / "data-bin" / "doc_info.json").read_text())
    assert len(keys) == info["splits"]["test"]["packed"]  # every packed test document
    mean_ref = sum(len(refs[k].split()) for k in keys) / len(keys)
    assert mean_ref > 60, f"references are not documents (mean {mean_ref:.0f} words)"
    assert 0 <= bleu.score <= 100 and bleu.sys_len > 0


def test_document_task_rejects_wrong_length(doc_data, tmp_path):
    proc = run(
        [
            sys.executable,
            "-m",
            "fairseq_cli.train",
            doc_data / "data-bin",
            "--user-dir",
            USER_DIR,
            "--task",
            "document_translation",
            "--max-doc-length",
            "512",
            "--arch",
            "sparse_transformer",
            "--max-tokens",
            "1000",
            "--save-dir",
            tmp_path,
        ]
    )
    assert proc.returncode != 0
    assert "does not match the data" in proc.stderr and "L=256" in proc.stderr
