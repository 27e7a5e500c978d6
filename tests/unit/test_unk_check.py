"""No silent <unk> (issue 34): words mapped to <unk>, the one-third rule, the codes
record and the warnings' wording, on hand-built inputs.  The real commands:
tests/integration/test_new_user.py."""

import hashlib
import io

from fairseq_sparse_attn.unk_check import InputCheck, codes_fit_data, codes_record, too_many_unknown, unknown_words

VOCAB = {"ein", "hund", "l@@", "äuft", "."}


def is_unk(piece):
    return piece not in VOCAB


def test_words_are_grouped_from_their_pieces():
    # "l@@ äuft" is one word of two known pieces; "x@@ äuft": one word, unknown through its first piece
    assert unknown_words("ein hund l@@ äuft .".split(), is_unk) == ([], 4)
    assert unknown_words("ein x@@ äuft wiese .".split(), is_unk) == (["xäuft", "wiese"], 4)
    assert unknown_words([], is_unk) == ([], 0)


def test_more_than_a_third():
    assert not too_many_unknown(["a"], 3)  # exactly a third
    assert too_many_unknown(["a", "b"], 5)
    assert not too_many_unknown(["a"], 4)
    assert not too_many_unknown([], 0)


def test_codes_record_from_the_flag_or_beside_the_data_bin(tmp_path):
    (tmp_path / "bpe").mkdir()
    codes = tmp_path / "bpe" / "codes"
    codes.write_text("#version: 0.2\ne n\n")
    (tmp_path / "data-bin").mkdir()
    (tmp_path / "data-bin" / "dict.en.txt").write_text("en@@ 4\nn 3\nmadeupword0000 0\n")
    want = {"path": str(codes), "sha256": hashlib.sha256(codes.read_bytes()).hexdigest()}
    assert codes_record(None, str(tmp_path / "data-bin")) == want
    assert codes_record(str(codes), None) == want
    assert codes_record(None, str(tmp_path / "elsewhere" / "data-bin")) is None


def test_codes_beside_a_data_bin_they_did_not_segment_are_not_recorded(tmp_path):
    """bpe/codes beside a word-level data-bin, or beside one made with other codes, was
    recorded: fsa-interactive then told the user to pass those codes, which made the input
    worse.  Codes of fewer merges make fewer pieces than the dictionary has; codes of more
    make pieces it never had.  Codes given as --bpe-codes are recorded as given."""
    codes = tmp_path / "bpe" / "codes"
    codes.parent.mkdir()
    merges = ["h u", "hu n", "hun d</w>", "l a", "la u", "lau f", "lauf t</w>", "d e", "de r</w>", "u n"]
    codes.write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    data = tmp_path / "data-bin"
    data.mkdir()
    fitting = ["hund", "lauft", "der", "un@@", "hu@@", "d", "e", "x@@", "madeupword0000"]
    cases = {
        "the codes' data": (fitting, True),
        "word-level": (["hund", "läuft", "der", "über"], False),
        "fewer merges made it": (["hu@@", "n@@", "d", "la@@", "u@@", "f@@", "t"], False),
        "more merges made it": (fitting + ["hunde@@", "läuft@@", "über@@", "die@@", "das@@"], False),
    }
    for name, (pieces, fits) in cases.items():
        (data / "dict.de.txt").write_text("".join(f"{p} 1\n" for p in pieces))
        assert codes_fit_data(str(codes), str(data)) is fits, name
        assert (codes_record(None, str(data)) is not None) is fits, name
        assert codes_record(str(codes), str(data))["path"] == str(codes)  # the flag: as given


def check(bpe=None, codes=None, record=None):
    out = io.StringIO()
    records = {"m.pt": {"bpe": record}} if record else {"m.pt": None}
    return InputCheck("fsa-interactive", bpe=bpe, bpe_codes=codes, records=records, stream=out), out


def test_warnings_name_the_likely_cause(tmp_path):
    codes = tmp_path / "codes"
    codes.write_text("#version: 0.2\ne n\n")
    record = {"path": str(codes), "sha256": hashlib.sha256(codes.read_bytes()).hexdigest()}

    c, out = check(record=record)  # trained on BPE, no --bpe
    c.start()
    assert "m.pt was trained on BPE input" in out.getvalue() and f"--bpe-codes {codes}" in out.getvalue()
    assert c.check("input line 1", "ein wiese baum".split(), is_unk)
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("fsa-interactive: warning: input line 1: 2 of its 3 words map to <unk> (wiese, baum)")
    assert "no --bpe/--bpe-codes given" in last
    assert not c.check("input line 2", "ein hund wiese".split(), is_unk)
    assert len(out.getvalue().splitlines()) == 2

    other = tmp_path / "other"
    other.write_text("#version: 0.2\nx y\n")
    c, out = check(bpe="subword_nmt", codes=str(other), record=record)
    c.start()
    assert f"--bpe-codes {other} is not the codes file m.pt was trained with ({codes}" in out.getvalue()

    c, out = check(bpe="subword_nmt", codes=str(codes), record=record)  # the right codes: nothing before
    c.start()
    assert out.getvalue() == ""
    c.check("input line 1", "wiese baum".split(), is_unk)
    assert "another language" in out.getvalue()

    c, out = check()  # an older checkpoint, no record: only the per-input line
    c.start()
    assert out.getvalue() == ""
    c.check("input line 1", "wiese baum".split(), is_unk)
    assert "a model trained on BPE input needs its codes file" in out.getvalue()


def recorded_codes(tmp_path):
    """A codes file and the record a checkpoint keeps of it."""
    codes = tmp_path / "codes"
    codes.write_text("#version: 0.2\ne n\n")
    return {"path": str(codes), "sha256": hashlib.sha256(codes.read_bytes()).hexdigest()}


def test_a_last_word_cut_after_a_continuation_piece_is_a_word():
    assert unknown_words("ein hund x@@".split(), is_unk) == (["x@@"], 3)
    assert unknown_words("ein l@@".split(), is_unk) == ([], 2)


def test_codes_record_reads_beside_the_first_data_bin_of_a_list(tmp_path):
    for name in ("first", "second"):
        (tmp_path / name / "bpe").mkdir(parents=True)
        (tmp_path / name / "bpe" / "codes").write_text(f"#version: 0.2\n{name[0]} n\n")
        (tmp_path / name / "data-bin").mkdir()
        (tmp_path / name / "data-bin" / "dict.en.txt").write_text(f"{name[0]}n@@ 2\n")
    data = f"{tmp_path / 'first' / 'data-bin'}:{tmp_path / 'second' / 'data-bin'}"
    assert codes_record(None, data)["path"] == str(tmp_path / "first" / "bpe" / "codes")


def test_a_missing_codes_file_is_a_warning_not_a_crash(tmp_path):
    record = recorded_codes(tmp_path)
    c, out = check(bpe="subword_nmt", codes=str(tmp_path / "missing"), record=record)
    c.start()
    assert f"--bpe-codes {tmp_path / 'missing'} is not the codes file m.pt was trained with" in out.getvalue()


def test_fsa_generate_reads_binarized_input_and_is_not_told_to_pass_bpe(tmp_path):
    record = recorded_codes(tmp_path)
    out = io.StringIO()
    c = InputCheck("fsa-generate", records={"m.pt": {"bpe": record}}, stream=out)
    c.start()
    assert out.getvalue() == ""


def test_fsa_generate_checks_sentences_until_the_first_report():
    """The sentences of each batch, specials (padding, BOS, EOS) left out, until one is
    reported; later batches are translated unchecked."""
    import torch
    from fairseq.data import Dictionary

    from fairseq_sparse_attn.unk_check import generate_inference_step

    dictionary = Dictionary()
    for word in ("ein", "hund", "."):
        dictionary.add_symbol(word)
    calls = []

    class Task:
        source_dictionary = dictionary

        def inference_step(self, generator, models, sample, *args, **kwargs):
            calls.append(sample["id"].tolist())
            return "hypotheses"

    out = io.StringIO()
    c = InputCheck("fsa-generate", records={}, stream=out)
    task = generate_inference_step(Task(), c)
    ids = [dictionary.index(w) for w in ("ein", "hund", ".")]
    bos, pad, eos, unk = dictionary.bos(), dictionary.pad(), dictionary.eos(), dictionary.unk()

    def sample(sids, rows):
        return {"id": torch.tensor(sids), "net_input": {"src_tokens": torch.tensor(rows)}}

    # BOS, EOS and padding are not words: 1 <unk> of 3 words is not more than a third
    assert task.inference_step(None, [], sample([4], [[pad, bos, ids[0], unk, ids[2], eos]])) == "hypotheses"
    assert out.getvalue() == ""
    task.inference_step(None, [], sample([5, 6], [[pad, bos, unk, ids[2], eos], [pad, unk, unk, unk, eos]]))
    warned = out.getvalue().splitlines()
    assert len(warned) == 1, warned
    assert warned[0].startswith(
        "fsa-generate: warning: sentence 5 (S-5; later sentences are not checked): 1 of its 2 words"
    )
    task.inference_step(None, [], sample([7], [[unk, unk, unk, eos]]))
    assert len(out.getvalue().splitlines()) == 1 and calls == [[4], [5, 6], [7]]


def test_the_codes_warning_is_given_once_per_run(tmp_path):
    c, out = check(record=recorded_codes(tmp_path))  # trained on BPE, no --bpe: warned before the first batch only
    c.start()
    c.start()
    assert len(out.getvalue().splitlines()) == 1
