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

from conftest import require_shared_data, shared_data_dir
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


def test_the_target_side_alone_can_end_a_run():
    """Neither side may exceed L: the target's running count starts at the first sentence's
    own target length (here longer than its source), not at the source's."""
    assert [list(g) for g in pack_lengths([1, 1, 1], [6, 3, 1], 10)] == [[0, 1, 2]]
    assert [list(g) for g in pack_lengths([1, 1, 1], [8, 3, 1], 10)] == [[0], [1, 2]]


def test_sentences_are_joined_by_one_blank_without_a_separator():
    docs = [Document(1, ["a b .", "c d ."], ["A B .", "C D ."])]
    packed, _ = pack_documents(docs, 10)
    assert packed == [("a b . c d .", "A B . C D .", 1)]  # no word glued to the next sentence's


def test_an_overlong_sentence_on_either_side_is_counted():
    docs = [Document(1, ["a", "b c d e f g", "h"], ["A B C D E F", "B", "H"])]
    packed, report = pack_documents(docs, 5)
    assert [s for s, _, _ in packed] == ["a", "b c d e f g", "h"]
    assert report.overlong_sentences == 2  # one longer than L on the target side, one on the source side


def test_an_empty_document_is_not_a_document(tmp_path):
    s = write(tmp_path / "x.en", ["<d>", "<d>", "a", "<d>"])
    t = write(tmp_path / "x.de", ["<d>", "<d>", "A", "<d>"])
    docs = documents_from_marked_files(s, t)
    assert [(d.src, d.first_line) for d in docs] == [(["a"], 3)]
    assert pack_documents(docs, 5)[1].documents_in == 1


def test_sentences_before_the_first_mark_are_refused(tmp_path):
    s = write(tmp_path / "x.en", ["a", "<d>", "b"])
    t = write(tmp_path / "x.de", ["A", "<d>", "B"])
    with pytest.raises(DocumentFormatError, match=r"x\.en:1: expected '<d>' on the first line"):
        documents_from_marked_files(s, t)


def test_document_ids_are_compared_without_surrounding_blanks(tmp_path):
    ids = write(tmp_path / "ids", ["7", "7 ", " 7\r", "9"])
    docs = documents_from_doc_ids(write(tmp_path / "a", ["a", "b", "c", "d"]), write(tmp_path / "b", list("ABCD")), ids)
    assert [(d.src, d.first_line) for d in docs] == [(["a", "b", "c"], 1), (["d"], 4)]


def test_an_empty_document_id_names_its_line(tmp_path):
    ids = write(tmp_path / "ids", ["7", " ", "9"])
    with pytest.raises(DocumentFormatError, match=r"ids:2: empty document id"):
        documents_from_doc_ids(write(tmp_path / "a", ["a", "b", "c"]), write(tmp_path / "b", list("ABC")), ids)


def _document_task(tmp_path, max_doc_length, packed_with, longest):
    """``--task document_translation`` set up on a data-bin of empty dictionaries whose
    doc_info.json says it was packed with L = ``packed_with``, its longest document
    ``longest`` tokens."""
    from fairseq.data import Dictionary

    import fairseq_sparse_attn.plugin  # noqa: F401
    from fairseq_sparse_attn.tasks.document_translation import DocumentTranslationConfig, DocumentTranslationTask

    for lang in ("en", "de"):
        Dictionary().save(str(tmp_path / f"dict.{lang}.txt"))
    info = {"max_doc_length": packed_with, "longest_document": longest}
    (tmp_path / "doc_info.json").write_text(json.dumps(info))
    cfg = DocumentTranslationConfig(
        data=str(tmp_path), source_lang="en", target_lang="de", max_doc_length=max_doc_length
    )
    return DocumentTranslationTask.setup_task(cfg)


@pytest.mark.parametrize("packed_with, longest, positions", [(2048, 2000, 2050), (1024, 1500, 1502)])
def test_the_model_holds_the_longest_packed_document(tmp_path, packed_with, longest, positions):
    """Source and target positions: L or the longest document (a sentence longer than L
    is kept whole), plus EOS and a margin; a model whose arguments say fewer (fairseq's
    default 1024, below L = 2048) is built with them."""
    import argparse

    from fairseq import models

    task = _document_task(tmp_path, packed_with, packed_with, longest)
    assert (task.cfg.max_source_positions, task.cfg.max_target_positions) == (positions, positions)
    args = argparse.Namespace(
        arch="softmax_transformer_wmt_en_de",
        **dict(encoder_layers=1, decoder_layers=1, encoder_embed_dim=16, decoder_embed_dim=16),
        **dict(
            encoder_ffn_embed_dim=32, decoder_ffn_embed_dim=32, encoder_attention_heads=2, decoder_attention_heads=2
        ),
        max_source_positions=1024,
        max_target_positions=1024,
    )
    models.ARCH_CONFIG_REGISTRY[args.arch](args)
    model = task.build_model(args)
    assert model.max_positions() == (positions, positions)


def test_the_document_task_needs_the_packing_length(tmp_path):
    with pytest.raises(ValueError, match=r"--max-doc-length is required \(this data was packed with L=256\)"):
        _document_task(tmp_path, 0, 256, 250)


def _prepare_europarl_docs(argv, capsys, monkeypatch):
    """(exit status, stderr) of data_prep/prepare_europarl_docs.py run with ``argv``."""
    monkeypatch.delenv("EUROPARL_DOC_DIR", raising=False)
    monkeypatch.syspath_prepend(str(REPO / "data_prep"))
    import prepare_europarl_docs

    status = prepare_europarl_docs.main([str(a) for a in argv])
    return status, capsys.readouterr().err


def test_prepare_refuses_unpublished_splits_before_downloading(tmp_path, capsys, monkeypatch):
    """Without --raw-dir only dev and test exist (no training split is published): refused
    with the way out, before anything is downloaded or written."""
    out = tmp_path / "out"
    status, err = _prepare_europarl_docs(["--out", out, "--max-doc-length", "256"], capsys, monkeypatch)
    assert status == 1
    assert "--train-split train: the document-level Europarl7 set publishes only dev and test" in err
    assert "--raw-dir DIR" in err and "--train-split dev for a small run" in err
    assert not out.exists()


@pytest.mark.parametrize("separator", ["</s>", "<pad>", "<s>"])
def test_prepare_refuses_a_special_symbol_as_the_separator(tmp_path, capsys, monkeypatch, separator):
    out = tmp_path / "out"
    argv = ["--raw-dir", tmp_path, "--out", out, "--max-doc-length", "256", "--separator", separator]
    status, err = _prepare_europarl_docs(argv, capsys, monkeypatch)
    assert status == 1 and f"--separator {separator}: fairseq's special symbol" in err
    assert not out.exists()


def test_prepare_learns_one_bpe_on_both_sides_and_records_the_longest_document(tmp_path, capsys, monkeypatch):
    """A hand-made corpus through data_prep/prepare_europarl_docs.py: the BPE is learned on
    the training sentences of both sides (a word only the target side has, frequent enough
    for its merges, stays one piece) and applied to both (a rare one is split), and doc_info.json's
    longest_document is the longest packed document of any split on either side (here a
    training target sentence longer than L, kept whole), counted here from the written files."""
    raw = tmp_path / "raw"
    raw.mkdir()
    short_en, short_de = ["the cat sat on the mat"] * 3, ["zzzz yyyy zzzz"] * 3
    long_de = " ".join(["zzzz"] * 12)  # 12 > L = 8 tokens: kept whole, on the target side only
    corpus = {
        "train": (["<d>", *short_en, "the cat", "<d>", *short_en], ["<d>", *short_de, long_de, "<d>", *short_de]),
        "dev": (["<d>", "the mat"], ["<d>", "yyyy qqqq"]),
        "test": (["<d>", "the cat"], ["<d>", "zzzz"]),
    }
    for split, (en, de) in corpus.items():
        write(raw / f"{split}.en", en)
        write(raw / f"{split}.de", de)
    out = tmp_path / "out"
    argv = ["--raw-dir", raw, "--out", out, "--max-doc-length", "8", "--bpe-merges", "30", "--workers", "1"]
    status, err = _prepare_europarl_docs(argv, capsys, monkeypatch)
    assert status == 0, err
    text = out / "L8" / "bpe"
    train_de = (text / "train.de").read_text(encoding="utf-8").split()
    assert "zzzz" in train_de and "yyyy" in train_de  # merges learned from the target side
    assert (text / "valid.de").read_text(encoding="utf-8").split() == ["yyyy", "q@@", "q@@", "q@@", "q"]
    files = [text / f"{split}.{lang}" for split in ("train", "valid", "test") for lang in ("en", "de")]
    lengths = [len(line.split()) for f in files for line in f.read_text(encoding="utf-8").splitlines()]
    info = json.loads((out / "L8" / "data-bin" / "doc_info.json").read_text())
    assert info["longest_document"] == max(lengths) == 12
    assert info["splits"]["train"]["overlong_sentences"] == 1


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
    require_shared_data(d / "dev.en.gz", "Europarl documents")
    docs = documents_from_marked_files(d / "dev.en.gz", d / "dev.de.gz")
    assert len(docs) == 240
    with gzip.open(d / "dev.en.gz", "rt") as f:
        assert sum(len(doc.src) for doc in docs) == sum(1 for line in f if line.strip() != "<d>")


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def doc_data(tmp_path_factory):
    d = shared_data_dir() / "europarl7_doc"
    require_shared_data(d / "dev.en.gz", "Europarl documents")
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
    # fsa-train: the same message as one line, exit 1, before any data loads (docs/errors.md)
    code = "import sys; sys.argv[0] = 'fsa-train'; from fairseq_sparse_attn.cli import train; train()"
    flags = ["--task", "document_translation", "--max-doc-length", "512", "--arch", "sparse_transformer"]
    flags += ["--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--save-dir", tmp_path / "fsa"]
    proc = run([sys.executable, "-c", code, doc_data / "data-bin", *flags])
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"fsa-train: error: --max-doc-length 512 does not match the data ({doc_data / 'data-bin'}: packed with L=256)"
    )
    assert "loaded" not in proc.stderr  # no split was read
