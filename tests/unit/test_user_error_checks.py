"""The checking functions behind docs/errors.md's Data, Generation and Interactive rows
(issue 24), on hand-built inputs: dictionaries, fairseq mmap index/data pairs written here
byte by byte, checkpoints' state dicts, interactive input bytes."""

import io
import struct
from argparse import Namespace

import numpy as np
import pytest
import torch

from fairseq_sparse_attn.compat.checkpoint_overrides import check_overrides_apply
from fairseq_sparse_attn.compat.data_checks import (
    DataError,
    check_dictionary_file,
    check_embedding_sizes,
    check_indexed_pair,
    check_split,
)
from fairseq_sparse_attn.compat.no_crash_dump import is_usage_error_dump
from fairseq_sparse_attn.errors import UsageError
from fairseq_sparse_attn.interactive_input import InputLine, make_batches_skipping_bad_lines, read_lines


def write_index(prefix, sentences_ids):
    sizes = [len(s) for s in sentences_ids]
    pointers = (
        np.concatenate([[0], np.cumsum(sizes[:-1]) * 4]).astype(np.int64) if sizes else np.zeros(0, dtype=np.int64)
    )
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + bytes([4]))
        f.write(struct.pack("<Q", len(sizes)))
        f.write(np.array(sizes, dtype=np.int32).tobytes())
        f.write(pointers.tobytes())
    with open(f"{prefix}.bin", "wb") as f:
        for s in sentences_ids:
            f.write(np.array(s, dtype=np.int32).tobytes())


def write_dict(path, symbols):
    path.write_text("".join(f"{s} {100 - i}\n" for i, s in enumerate(symbols)))


def test_index_writer_matches_fairseq(tmp_path):
    """The hand-written index reads back through fairseq's own reader."""
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    write_index(tmp_path / "x", [[5, 6, 2], [7, 2]])
    ds = MMapIndexedDataset(str(tmp_path / "x"))
    assert [ds[i].tolist() for i in range(len(ds))] == [[5, 6, 2], [7, 2]]


# --- dictionaries ---------------------------------------------------------------------


def test_dictionary_duplicate_names_both_lines(tmp_path):
    path = tmp_path / "dict.en.txt"
    write_dict(path, ["a", "b", "c", "b"])
    with pytest.raises(DataError, match=f"{path}:4: duplicate symbol 'b', already on line 2"):
        check_dictionary_file(path)


def test_dictionary_overwrite_flag_and_clean_dictionary_pass(tmp_path):
    path = tmp_path / "dict.en.txt"
    path.write_text("a 5\nb 4\nb 3 #fairseq:overwrite\n")
    check_dictionary_file(path)
    from fairseq.data import Dictionary

    assert len(Dictionary.load(str(path))) == 4 + 3  # fairseq accepts it (one entry a line)


@pytest.mark.parametrize(
    "content,fragment",
    [
        ("a 5\n<pad> 3\n", ":2: duplicate symbol fairseq's special symbol '<pad>'"),
        ("a 5\nb\n", ":2: expected '<symbol> <count>', got 'b'"),
        ("a 5\nb x\n", ":2: expected '<symbol> <count>', got 'b x'"),
    ],
)
def test_dictionary_lines_fairseq_would_refuse(tmp_path, content, fragment):
    from fairseq.data import Dictionary

    path = tmp_path / "dict.en.txt"
    path.write_text(content)
    with pytest.raises(Exception):  # fairseq's own loader refuses the same file
        Dictionary.load(str(path))
    with pytest.raises(DataError, match=None) as e:
        check_dictionary_file(path)
    assert str(e.value).startswith(str(path)) and fragment in str(e.value)


# --- splits ---------------------------------------------------------------------------


def make_split(d, name, src, tgt, vocab=("a", "b", "c", "d")):
    write_dict(d / "dict.de.txt", vocab)
    write_dict(d / "dict.en.txt", vocab)
    write_index(d / f"{name}.de-en.de", src)
    write_index(d / f"{name}.de-en.en", tgt)


@pytest.mark.parametrize("src,tgt", [("de", "en"), ("en", "de")])
def test_sentence_counts_differ(tmp_path, src, tgt):
    """Also for the reverse direction: fairseq reads train.de-en.* for an en-de run."""
    make_split(tmp_path, "train", [[4, 2], [5, 2], [6, 2]], [[4, 2], [5, 2]])
    with pytest.raises(DataError, match=rf"train.de-en.{src}.idx has \d sentences but \S*train.de-en.{tgt}.idx has"):
        check_split(str(tmp_path), "train", src, tgt)


def test_empty_split(tmp_path):
    make_split(tmp_path, "train", [], [])
    with pytest.raises(DataError, match="train.de-en.de.idx holds no sentences: split 'train' is empty"):
        check_split(str(tmp_path), "train", "de", "en")


def test_missing_split_and_other_data_paths(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    make_split(a, "train", [[4, 2]], [[5, 2]])
    make_split(b, "valid", [[4, 2]], [[5, 2]])
    with pytest.raises(DataError, match=f"split 'train' not found in {b}"):
        check_split(f"{a}:{b}", "train", "de", "en", epoch=2)
    check_split(f"{a}:{b}", "train", "de", "en", epoch=1)  # epoch 1 reads a


@pytest.mark.parametrize(
    "sentences,message",
    [
        (
            [[4, 5, 2], [4, 1, 5, 2]],
            "sentence 1 (line 2 of the text it was binarized from) holds the special symbol '<pad>' (id 1) at token 1",
        ),
        (
            [[4, 2, 5, 2]],
            "sentence 0 (line 1 of the text it was binarized from) holds the special symbol '</s>' (id 2) at token 1",
        ),
        ([[0, 4, 2], [4, 0, 2]], "'<s>' (id 0) at token 0, and 1 more special ids inside sentences"),
    ],
)
def test_special_ids_inside_sentences(tmp_path, sentences, message):
    write_index(tmp_path / "train.de-en.de", sentences)
    with pytest.raises(DataError, match=None) as e:
        check_indexed_pair(str(tmp_path / "train.de-en.de"), 8)
    assert message in str(e.value)


def test_end_of_sentence_at_the_end_and_unk_are_fine(tmp_path):
    write_index(tmp_path / "x", [[4, 3, 2], [2], [5, 6, 7, 2]])
    assert check_indexed_pair(str(tmp_path / "x"), 8) == 3


# --- checkpoints and data ---------------------------------------------------------------


def test_embedding_rows_against_dictionary_size():
    state = {"encoder.embed_tokens.weight": torch.zeros(40, 4), "decoder.embed_tokens.weight": torch.zeros(32, 4)}
    check_embedding_sizes(state, {"source": 40, "target": 32}, {})
    with pytest.raises(
        DataError, match="d/dict.en.txt has 40 entries .* the checkpoint's decoder.embed_tokens.weight has 32 rows"
    ):
        check_embedding_sizes(
            state, {"source": 40, "target": 40}, {"source": "d/dict.de.txt", "target": "d/dict.en.txt"}
        )
    # more rows than the dictionary has entries: refused too (not torch's size-mismatch traceback)
    with pytest.raises(
        DataError, match="the source dictionary has 38 entries .* encoder.embed_tokens.weight has 40 rows"
    ):
        check_embedding_sizes(state, {"source": 38, "target": 32}, {})


def state_of(arch):
    return {"cfg": {"model": Namespace(arch=arch, _name=arch)}}


def test_plugin_overrides_refused_for_a_stock_model():
    import fairseq_sparse_attn.plugin  # noqa: F401  (registers the plugin's architectures)

    with pytest.raises(
        UsageError,
        match="--mask-encoder-heads 0,1: m.pt has no plugin attention "
        r"\(it was trained with --arch transformer",
    ):
        check_overrides_apply("m.pt", state_of("transformer"), {"encoder_masked_heads": "0,1"})
    # plugin models, fairseq options, default values: nothing to refuse
    check_overrides_apply("m.pt", state_of("rela_transformer_wmt_en_de"), {"encoder_masked_heads": "0,1"})
    check_overrides_apply("m.pt", state_of("transformer"), {"beam": 4, "encoder_masked_heads": ""})
    # a plugin option at its default value changes nothing on a stock model: accepted
    check_overrides_apply("m.pt", state_of("transformer"), {"attn_activation": "softmax", "attn_output_norm": "none"})
    # a configuration that names its model by _name only (fairseq's dataclass configs)
    with pytest.raises(UsageError, match=r"--model-overrides 'attn_activation' relu: m.pt .* --arch transformer"):
        check_overrides_apply("m.pt", {"cfg": {"model": Namespace(_name="transformer")}}, {"attn_activation": "relu"})


def test_crash_dump_skipped_only_for_usage_errors():
    assert is_usage_error_dump("/x/crash.pt", UsageError("bad flag"))
    assert not is_usage_error_dump("/x/crash.pt", RuntimeError("a real crash"))
    assert not is_usage_error_dump("/x/checkpoint_last.pt", UsageError("bad flag"))


# --- interactive input ------------------------------------------------------------------


def test_input_split_on_newline_only():
    lines = list(read_lines(io.BytesIO(b"a b\rc\r\nd\n\xffe\nlast")))
    assert [str(x) for x in lines] == ["a b\rc", "d", "", "last"]
    assert [x.number for x in lines] == [1, 2, 3, 4]
    assert [x.problem for x in lines] == [None, None, "not valid UTF-8 (invalid start byte at byte 0)", None]


class _Task:
    """Tokens = whitespace-split words + EOS, as fairseq's encode_line does."""

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        tokens = [list(range(len(encode_fn(x).split()) + 1)) for x in lines]
        return tokens, [len(t) for t in tokens]


def test_bad_lines_left_out_and_ids_kept(capsys):
    from collections import namedtuple

    Batch = namedtuple("Batch", "ids src_tokens src_lengths constraints")
    seen = []

    def original(lines, cfg, task, max_positions, encode_fn):
        seen.append(list(lines))
        yield Batch(torch.tensor([1, 0]), None, None, None)

    lines = [
        InputLine.make("a b", 11),
        InputLine.make("", 12, "not valid UTF-8 (x)"),
        InputLine.make("a b c d e", 13),
        InputLine.make("c", 14),
    ]
    batches = list(make_batches_skipping_bad_lines(original)(lines, None, _Task(), (5, 5), lambda x: x))
    assert seen == [["a b", "c"]]
    assert batches[0].ids.tolist() == [3, 0]  # places in the original buffer
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "fsa-interactive: error: input line 12: not valid UTF-8 (x); skipped",
        "fsa-interactive: error: input line 13: 6 tokens (with the end of sentence), "
        "more than the model's 5 source positions; skipped",
    ]


def test_input_is_read_in_buffers_of_the_given_size_to_the_last_line(tmp_path):
    """``--buffer-size 1`` translates each line as it comes (an interactive session waits
    for no second line), and the last, partial buffer is translated too."""
    from fairseq_sparse_attn.interactive_input import buffered_read

    path = tmp_path / "input.txt"
    path.write_bytes(b"a\nb\nc\n")
    assert [[str(x) for x in b] for b in buffered_read(str(path), 2)] == [["a", "b"], ["c"]]
    assert [[x.number for x in b] for b in buffered_read(str(path), 1)] == [[1], [2], [3]]


def test_a_line_is_measured_against_the_source_positions_only(capsys, monkeypatch):
    """A line of exactly the model's source positions (EOS included) is translated, one
    token more is left out; the target's limit plays no part."""
    from collections import namedtuple

    from fairseq_sparse_attn import interactive_input

    monkeypatch.setattr(interactive_input, "SKIPPED", [])

    Batch = namedtuple("Batch", "ids src_tokens src_lengths constraints")
    seen = []

    def original(lines, cfg, task, max_positions, encode_fn):
        seen.append(list(lines))
        yield Batch(torch.arange(len(lines)), None, None, None)

    lines = [InputLine.make("a b", 1), InputLine.make("a b c", 2)]
    list(make_batches_skipping_bad_lines(original)(lines, None, _Task(), (3, 100), lambda x: x))
    assert seen == [["a b"]]
    assert capsys.readouterr().err.splitlines() == [
        "fsa-interactive: error: input line 2: 4 tokens (with the end of sentence), "
        "more than the model's 3 source positions; skipped"
    ]


def test_plain_lines_are_reported_by_their_1_based_number(capsys, monkeypatch):
    from fairseq_sparse_attn import interactive_input

    monkeypatch.setattr(interactive_input, "SKIPPED", [])

    def original(lines, cfg, task, max_positions, encode_fn):
        yield from ()

    list(make_batches_skipping_bad_lines(original)(["a", "a b c d"], None, _Task(), 3, lambda x: x))
    assert capsys.readouterr().err.startswith("fsa-interactive: error: input line 2: 5 tokens")


def test_a_session_that_left_lines_out_ends_with_their_count(monkeypatch):
    from fairseq_sparse_attn import interactive_input

    monkeypatch.setattr(interactive_input, "SKIPPED", [])
    assert interactive_input.skipped_summary() is None
    interactive_input.SKIPPED.extend([2, 7])
    assert interactive_input.skipped_summary() == (
        "fsa-interactive: error: 2 input lines left out, without a translation (lines 2, 7; see above)"
    )
    interactive_input.SKIPPED[:] = list(range(1, 13))
    assert "(lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ...; see above)" in interactive_input.skipped_summary()


# --- raw text the plugin reads itself -------------------------------------------------


def test_data_prep_refuses_special_symbols_before_binarizing(tmp_path):
    """data_prep's binarize step: a corpus word spelled '<pad>' names its file and line
    (fairseq-preprocess would map it to the padding id); '<unk>' and '<pads>' are words."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "data_prep"))
    from common import PrepError, check_special_symbols

    path = tmp_path / "train.de"
    path.write_text("a <unk> b\nc <pads> d\r e\nf <pad> g\n")
    with pytest.raises(PrepError, match=f"{path}:3: the word '<pad>' is fairseq's special symbol"):
        check_special_symbols(path)
    path.write_text("a <unk> b\n")
    check_special_symbols(path)


def test_document_corpus_lines_end_at_newline_only(tmp_path):
    from fairseq_sparse_attn.data.documents import DocumentFormatError, documents_from_marked_files, read_lines

    src, tgt = tmp_path / "train.de", tmp_path / "train.en"
    src.write_bytes(b"<d>\r\na\rb\r\nc\n")
    tgt.write_bytes(b"<d>\nx\ny\n")
    assert read_lines(src) == ["<d>", "a\rb", "c"]
    docs = documents_from_marked_files(src, tgt)
    assert [d.src for d in docs] == [["a\rb", "c"]]
    tgt.write_bytes(b"<d>\nx\n")
    with pytest.raises(DocumentFormatError) as e:
        documents_from_marked_files(src, tgt)
    assert isinstance(e.value, UsageError) and str(src) in str(e.value)
    tgt.write_bytes(b"<d>\nx\n\xff\n")
    with pytest.raises(DocumentFormatError, match=f"{tgt}:3: not valid UTF-8"):
        read_lines(tgt)


@pytest.mark.parametrize(
    "module, argv, line",
    [
        (
            "fairseq_sparse_attn.analysis.cli",
            ["stats", "data-bin", "--path", "m.pt", "--batch-size", "0"],
            "fsa-analyze stats: error: argument --batch-size: expected a positive integer, got 0 "
            "(`fsa-analyze stats --help` lists the flags)",
        ),
        (  # --top-p 0 or 1.5 was refused only after the model and the split had loaded
            "fairseq_sparse_attn.analysis.cli",
            ["stats", "data-bin", "--path", "m.pt", "--output-dir", "o", "--top-p", "0.01,1.5"],
            "fsa-analyze stats: error: argument --top-p: every value must be a fraction in (0, 1] (top-1% is "
            "0.01), got '0.01,1.5' (`fsa-analyze stats --help` lists the flags)",
        ),
        (
            "fairseq_sparse_attn.analysis.contrastive",
            ["data-bin", "a", "b", "c", "--path", "m.pt", "--max-items", "x"],
            "fsa-contrastive: error: argument --max-items: invalid int value: 'x' "
            "(`fsa-contrastive --help` lists the flags)",
        ),
        (
            "fairseq_sparse_attn.analysis.length_bleu",
            [],
            "fsa-length-bleu: error: the following arguments are required: generate_output "
            "(`fsa-length-bleu --help` lists the flags)",
        ),
        (  # the tools run with python -m: the line says so
            "fairseq_sparse_attn.tools.score",
            ["gen", "--ref", "ref", "--baseline", "base", "--paired-bs-n", "0"],
            "score: error: --paired-bs-n 0: give at least 100 (default 1000; the 95% interval and the "
            "p-value are read off the resamples) (`python -m fairseq_sparse_attn.tools.score --help` lists the flags)",
        ),
        (
            "fairseq_sparse_attn.tools.average_checkpoints",
            ["--inputs", "ckpt"],
            "average_checkpoints: error: the following arguments are required: --output "
            "(`python -m fairseq_sparse_attn.tools.average_checkpoints --help` lists the flags)",
        ),
        (
            "fairseq_sparse_attn.tools.learning_curves",
            ["run=train.log", "--out"],
            "learning_curves: error: argument --out: expected one argument "
            "(`python -m fairseq_sparse_attn.tools.learning_curves --help` lists the flags)",
        ),
        (
            "fairseq_sparse_attn.tools.rela_tables",
            ["--out", "tables", "no_label"],
            "rela_tables: error: argument LABEL=RUN_DIR: 'no_label': expected LABEL=RUN_DIR "
            "(`python -m fairseq_sparse_attn.tools.rela_tables --help` lists the flags)",
        ),
    ],
)
def test_analysis_commands_report_a_bad_flag_in_one_line(capsys, module, argv, line):
    """As the fsa-train family: the error alone, without argparse's usage block first."""
    import importlib

    with pytest.raises(SystemExit) as e:
        importlib.import_module(module).main(argv)
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines() == [line]
