"""The fsa-* wrappers' checks of values fairseq takes and then fails on (a traceback after
the model or the data loaded) or misuses with nothing said: ``--lr -1`` exited 0 without
training, ``--max-update -5`` trained one update, ``--label-smoothing 1.5`` trained,
``--beam 0`` and ``--temperature 0`` failed after the model loaded, a missing
``fsa-interactive --input`` after the model loaded (a black-box sweep, 2026-11-28).  Then
the wrappers' own argv handling (head masking, ``--user-dir``, ``-v``, the one-line error),
each test checked to fail on a small bug planted in ``cli.py`` (docs/testing.md)."""

import pytest

from fairseq_sparse_attn.cli import _required_flags

TRAIN = ["data-bin", "--arch", "transformer", "--optimizer", "adam", "--max-tokens", "100"]
GENERATE = ["data-bin", "--path", "model.pt"]


@pytest.mark.parametrize(
    "command,argv,message",
    [
        ("fsa-train", TRAIN + ["--lr", "-1"], "--lr -1: must be > 0"),
        ("fsa-train", TRAIN + ["--lr", "5e-4,0"], "--lr 5e-4,0: must be > 0"),
        ("fsa-train", TRAIN + ["--lr=abc"], "--lr abc: must be > 0"),
        ("fsa-train", TRAIN + ["--max-update", "-5"], "--max-update -5: must be a whole number >= 0"),
        ("fsa-train", TRAIN + ["--update-freq", "0"], "--update-freq 0: must be a whole number >= 1"),
        ("fsa-train", TRAIN + ["--label-smoothing", "1.5"], "--label-smoothing 1.5: must be in [0, 1)"),
        (
            "fsa-train",
            ["data-bin", "--arch", "transformer", "--optimizer", "adam", "--batch-size", "0"],
            "--batch-size 0",
        ),
        ("fsa-generate", GENERATE + ["--beam", "0"], "--beam 0: must be a whole number >= 1"),
        ("fsa-generate", GENERATE + ["--temperature", "0"], "--temperature 0: must be > 0"),
        ("fsa-generate", GENERATE + ["--sampling-topp", "1.5"], "--sampling-topp 1.5: must be <= 1 (0 or below: off)"),
        ("fsa-interactive", GENERATE + ["--nbest", "0"], "--nbest 0: must be a whole number >= 1"),
        ("fsa-generate", GENERATE + ["--min-len", "-1"], "--min-len -1: must be a whole number >= 0"),
        ("fsa-generate", GENERATE + ["--diverse-beam-groups", "1.5"], "--diverse-beam-groups 1.5: must be a whole"),
        ("fsa-train", TRAIN + ["--warmup-updates", "-5"], "--warmup-updates -5: must be a whole number >= 0"),
    ],
)
def test_bad_values_are_one_line_before_any_work(command, argv, message):
    with pytest.raises(SystemExit) as e:
        _required_flags(command, argv)
    assert str(e.value) == f"{command}: error: {message}" or str(e.value).startswith(f"{command}: error: {message}")


def test_files_the_wrappers_read_or_write(tmp_path):
    with pytest.raises(
        SystemExit, match=r"--input \S+nope.txt does not exist \(a text file, or - for standard input\)"
    ):
        _required_flags("fsa-interactive", GENERATE + ["--input", str(tmp_path / "nope.txt")])
    with pytest.raises(SystemExit, match="is a directory"):
        _required_flags("fsa-interactive", GENERATE + ["--input", str(tmp_path)])
    a_file = tmp_path / "gen.txt"
    a_file.write_text("")
    with pytest.raises(SystemExit, match=r"--results-path \S+gen.txt is a file"):
        _required_flags("fsa-generate", GENERATE + ["--results-path", str(a_file)])
    # under a file: os.makedirs' NotADirectoryError traceback before
    with pytest.raises(SystemExit, match=r"--results-path \S+gen.txt/a/b is inside \S+gen.txt, a file"):
        _required_flags("fsa-generate", GENERATE + ["--results-path", str(a_file / "a" / "b")])
    _required_flags("fsa-generate", GENERATE + ["--results-path", str(tmp_path / "new" / "dir")])


@pytest.mark.parametrize(
    "command,argv,message",
    [
        # fairseq's "DiverseBeamSearch requires --beam to be divisible..." after the model loaded
        ("fsa-generate", GENERATE + ["--diverse-beam-groups", "3", "--beam", "4"], "--diverse-beam-groups 3: --beam 4"),
        (
            "fsa-interactive",
            GENERATE + ["--diverse-beam-groups", "2", "--beam", "5"],
            "--diverse-beam-groups 2: --beam 5",
        ),
        # fairseq printed --beam hypotheses per sentence, not --nbest, with nothing said
        ("fsa-generate", GENERATE + ["--nbest", "5", "--beam", "2"], "--nbest 5: at most --beam 2"),
        ("fsa-interactive", GENERATE + ["--nbest", "6"], "--nbest 6: at most --beam 5"),
        # its "min_len cannot be larger than max_len" assertion, for every sentence
        ("fsa-generate", GENERATE + ["--max-len-b", "-5"], "--min-len 1 is above the longest output --max-len-a 0"),
        ("fsa-generate", GENERATE + ["--min-len", "50", "--max-len-b", "10"], "--min-len 50 is above"),
        # inverse_sqrt divides by its warmup: a ZeroDivisionError after the data loaded
        ("fsa-train", TRAIN + ["--lr-scheduler", "inverse_sqrt", "--warmup-updates", "0"], "--warmup-updates 0:"),
    ],
)
def test_values_that_fail_together_are_one_line_before_any_work(command, argv, message):
    with pytest.raises(SystemExit) as e:
        _required_flags(command, argv)
    assert str(e.value).startswith(f"{command}: error: {message}"), str(e.value)


def test_values_that_work_together_pass():
    _required_flags("fsa-generate", GENERATE + ["--diverse-beam-groups", "2", "--beam", "4", "--max-len-b", "3"])
    _required_flags("fsa-generate", GENERATE + ["--nbest", "5"])
    _required_flags("fsa-generate", GENERATE + ["--max-len-a", "1.2", "--max-len-b", "-2"])  # per sentence: later
    _required_flags("fsa-train", TRAIN + ["--lr-scheduler", "polynomial_decay", "--warmup-updates", "0"])
    _required_flags("fsa-train", TRAIN + ["--lr-scheduler", "inverse_sqrt", "--warmup-updates", "1"])


def test_good_values_pass():
    _required_flags(
        "fsa-train", TRAIN + ["--lr", "5e-4", "--max-update", "0", "--update-freq", "2", "--label-smoothing", "0.1"]
    )
    _required_flags(
        "fsa-generate", GENERATE + ["--beam", "5", "--nbest", "2", "--sampling-topp", "-1", "--temperature", "0.7"]
    )
    _required_flags("fsa-interactive", GENERATE + ["--input", "-"])


def test_the_last_value_counts_as_for_argparse():
    with pytest.raises(SystemExit, match="--lr -1: must be > 0"):
        _required_flags("fsa-train", TRAIN + ["--lr", "5e-4", "--lr", "-1"])
    _required_flags("fsa-train", TRAIN + ["--lr", "-1", "--lr", "5e-4"])


# --------------------------------------------------------------------------- the wrappers' argv
def test_head_masking_becomes_one_model_override():
    """``--mask-encoder-heads H`` (both spellings) leaves argv with its value and merges into
    ``--model-overrides``, where the flag's heads win over an override naming them too."""
    from fairseq_sparse_attn.cli import with_head_masking

    argv = ["data-bin", "--mask-encoder-heads", "0,7", "--path", "m.pt"]
    assert with_head_masking(argv) == [
        "data-bin",
        "--path",
        "m.pt",
        "--model-overrides",
        "{'encoder_masked_heads': '0,7'}",
    ]
    given = ["data-bin", "--model-overrides", "{'encoder_masked_heads': '1', 'beam': 2}", "--mask-encoder-heads=3"]
    assert with_head_masking(given) == ["data-bin", "--model-overrides", "{'encoder_masked_heads': '3', 'beam': 2}"]
    assert with_head_masking(["data-bin"]) == ["data-bin"]


@pytest.mark.parametrize("overrides", ["[1, 2]", "{'a':", "abc"])
def test_model_overrides_must_be_a_dict(overrides):
    from fairseq_sparse_attn.cli import with_head_masking

    with pytest.raises(SystemExit, match=r"fsa-validate: error: --model-overrides must be a Python dict literal"):
        with_head_masking(["d", "--model-overrides", overrides, "--mask-encoder-heads", "0"], "fsa-validate")


def test_the_plugin_dir_is_added_unless_one_is_given():
    from fairseq_sparse_attn import user_dir
    from fairseq_sparse_attn.cli import _with_user_dir

    assert _with_user_dir(["d"]) == ["d", "--user-dir", user_dir()]
    assert _with_user_dir(["d", "--user-dir", "mine"]) == ["d", "--user-dir", "mine"]
    assert _with_user_dir(["d", "--user-dir=mine"]) == ["d", "--user-dir=mine"]


def test_option_values_as_argparse_reads_them():
    from fairseq_sparse_attn.cli import _flag_given, _option_value

    argv = ["--x", "1", "--y=2", "--x", "3"]
    assert (_option_value(argv, "--x"), _option_value(argv, "--x", last=True)) == ("1", "3")
    assert _option_value(argv, "--y") == "2" and _option_value(argv, "--z") is None
    assert _flag_given(argv, "--y") and _flag_given(["--arch=t"], "--arch", "-a") and not _flag_given(argv, "--z")


def test_verbose_flags_are_the_wrapper_s(monkeypatch):
    import os

    from fairseq_sparse_attn.cli import _pop_verbose

    monkeypatch.setenv("FSA_VERBOSE", "")  # recorded, so that the value _pop_verbose sets is undone after
    monkeypatch.delenv("FSA_VERBOSE")
    assert _pop_verbose(["d", "--lr", "1"]) == ["d", "--lr", "1"] and "FSA_VERBOSE" not in os.environ
    assert _pop_verbose(["d", "-v", "--verbose"]) == ["d"] and os.environ["FSA_VERBOSE"] == "1"


@pytest.mark.parametrize(
    "command,argv,message",
    [
        ("fsa-train", TRAIN + ["--max-update", "2.5"], "--max-update 2.5: must be a whole number >= 0"),
        ("fsa-train", TRAIN + ["--label-smoothing", "1"], "--label-smoothing 1: must be in [0, 1)"),
        ("fsa-train", TRAIN + ["--update-freq", "two"], "--update-freq two: must be a whole number >= 1"),
        ("fsa-train", ["d", "--arch", "t", "--max-tokens", "9"], "--optimizer is required"),
        ("fsa-train", ["d", "--optimizer", "adam", "--max-tokens", "9"], "--arch is required"),
        (
            "fsa-validate",
            ["d", "--path", "m.pt", "--task", "translation"],
            "--max-tokens N or --batch-size N is required",
        ),
        (
            "fsa-interactive",
            ["d", "--path", "m.pt", "--tokenizer", "moses", "-s", "de"],
            "--tokenizer moses needs -t/--target-lang",
        ),
    ],
)
def test_more_values_and_flags_refused_before_any_work(command, argv, message):
    with pytest.raises(SystemExit) as e:
        _required_flags(command, argv)
    assert str(e.value).startswith(f"{command}: error: {message}"), str(e.value)


def test_flags_given_in_the_equals_form_count():
    _required_flags("fsa-train", ["d", "--arch=t", "--optimizer=adam", "--max-tokens=9"])
    _required_flags("fsa-interactive", ["d", "--path", "m.pt", "--tokenizer", "moses", "-s", "de", "-t", "en"])


def test_fsa_validate_names_the_checkpoint_s_task():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints" / "dea.pt"
    with pytest.raises(SystemExit, match=r"the checkpoint was trained with --task parse_annotated_translation"):
        _required_flags("fsa-validate", ["d", "--path", str(path), "--max-tokens", "9"])


def test_a_user_error_is_one_line_with_its_whitespace_folded(monkeypatch):
    """A UsageError raised inside fairseq's CLI: ``<command>: error: <message>`` on one line,
    its line breaks and runs of blanks folded into single blanks; FSA_TRACEBACK=1 raises it."""
    import argparse
    import sys
    import types

    from fairseq_sparse_attn import cli
    from fairseq_sparse_attn.errors import UsageError

    module = types.ModuleType("fsa_fake_cli")

    def cli_main():
        raise UsageError("data-bin/x.idx:\n  does not   match")

    module.cli_main = cli_main
    monkeypatch.setitem(sys.modules, "fsa_fake_cli", module)
    monkeypatch.setattr(sys, "argv", ["/bin/fsa-train", "d", "--arch", "t", "--optimizer", "adam", "--max-tokens", "9"])
    monkeypatch.setattr(cli, "configure_logging", lambda stream=None: None)
    monkeypatch.setattr(argparse.ArgumentParser, "error", argparse.ArgumentParser.error)  # _run replaces it
    monkeypatch.delenv("FSA_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as e:
        cli._run("fsa_fake_cli")
    assert str(e.value) == "fsa-train: error: data-bin/x.idx: does not match"
    monkeypatch.setattr(sys, "argv", ["/bin/fsa-train", "d", "--arch", "t", "--optimizer", "adam", "--max-tokens", "9"])
    monkeypatch.setenv("FSA_TRACEBACK", "1")
    with pytest.raises(UsageError):
        cli._run("fsa_fake_cli")


def test_the_user_dir_notice_shows_only_when_verbose(monkeypatch):
    import logging

    from fairseq_sparse_attn.cli import _UserDirNotice

    notice = logging.LogRecord(
        "fairseq.utils", logging.INFO, "", 0, "--user-dir=/x has already been imported.", None, None
    )
    other = logging.LogRecord("fairseq.utils", logging.INFO, "", 0, "--user-dir=/x loaded", None, None)
    monkeypatch.delenv("FSA_VERBOSE", raising=False)
    assert not _UserDirNotice().filter(notice) and _UserDirNotice().filter(other)
    monkeypatch.setenv("FSA_VERBOSE", "1")
    assert _UserDirNotice().filter(notice)


# --------------------------------------------------------------------------- after the work began
def _fake_command(monkeypatch, raises, command="fsa-generate"):
    """``cli._run`` of a fake fairseq_cli module whose ``cli_main`` raises ``raises``."""
    import argparse
    import sys
    import types

    from fairseq_sparse_attn import cli

    name = "fairseq_cli.train" if command == "fsa-train" else "fsa_fake_cli"  # _run knows training by its module
    module = types.ModuleType(name)

    def cli_main():
        raise raises

    module.cli_main = cli_main
    monkeypatch.setitem(sys.modules, name, module)
    argv = TRAIN if command == "fsa-train" else GENERATE
    monkeypatch.setattr(sys, "argv", [f"/bin/{command}", *argv])
    monkeypatch.setattr(cli, "configure_logging", lambda stream=None: None)
    monkeypatch.setattr(argparse.ArgumentParser, "error", argparse.ArgumentParser.error)  # _run replaces it
    monkeypatch.delenv("FSA_TRACEBACK", raising=False)
    return lambda: cli._run(name)


def test_fairseq_failures_a_user_causes_are_one_line(monkeypatch):
    """fairseq's own exceptions for a user's flags, raised after the work began: its
    min_len assertion (a --max-len-b too small for a short sentence) and the
    ``--restore-file`` of another architecture (a bare Exception)."""
    run = _fake_command(monkeypatch, AssertionError("min_len cannot be larger than max_len, please adjust these!"))
    with pytest.raises(SystemExit, match=r"^fsa-generate: error: --min-len is above the longest output"):
        run()
    try:
        raise RuntimeError('Error(s) in loading state_dict for TransformerModel:\n\tUnexpected key(s): "a"')
    except RuntimeError:
        try:
            raise Exception(
                "Cannot load model parameters from checkpoint /x/ck.pt; please ensure that the architectures match."
            )
        except Exception as e:
            restore = e
    run = _fake_command(monkeypatch, restore, "fsa-train")
    with pytest.raises(SystemExit) as e:
        run()
    assert str(e.value) == (
        "fsa-train: error: --restore-file /x/ck.pt: cannot load its model parameters: its model's flags differ "
        'from this run\'s (Error(s) in loading state_dict for TransformerModel: Unexpected key(s): "a"); train '
        "with the checkpoint's --arch and model flags, or start from another checkpoint"
    )


def test_a_checkpoint_the_command_cannot_load_is_one_line(monkeypatch):
    """fsa-generate with --model-overrides that change the parameters (ReLA-g loaded as
    ReLA-i) ended in torch's 25-line traceback; --finetune-from-model's failure named
    --restore-file, a flag the user had not given."""
    import sys

    state = RuntimeError(
        'Error(s) in loading state_dict for SparseTransformerModel:\n\tUnexpected key(s) in state_dict: "g".'
    )
    run = _fake_command(monkeypatch, state)
    monkeypatch.setattr(sys, "argv", [*sys.argv, "--model-overrides", "{'attn_output_norm': 'rmsnorm_i'}"])
    with pytest.raises(SystemExit) as e:
        run()
    assert str(e.value) == (
        "fsa-generate: error: --path model.pt: cannot load its model parameters: --model-overrides "
        "{'attn_output_norm': 'rmsnorm_i'} builds a model with other parameters than the checkpoint's (override "
        "only options that keep them: the activation, the backend, head masking) (Error(s) in loading state_dict "
        'for SparseTransformerModel: Unexpected key(s) in state_dict: "g".)'
    )
    try:
        raise state
    except RuntimeError:
        try:
            raise Exception("Cannot load model parameters from checkpoint /x/ck.pt; please ensure that the arch")
        except Exception as error:
            finetune = error
    run = _fake_command(monkeypatch, finetune, "fsa-train")
    monkeypatch.setattr(sys, "argv", [*sys.argv, "--finetune-from-model", "/x/ck.pt"])
    with pytest.raises(SystemExit, match=r"^fsa-train: error: --finetune-from-model /x/ck.pt: cannot load"):
        run()
    # a state-dict error without --path (not the load of a checkpoint given) keeps its traceback
    run = _fake_command(monkeypatch, state, "fsa-train")
    with pytest.raises(RuntimeError, match="Error"):
        run()


@pytest.mark.parametrize(
    "raised, command, said",
    [
        (
            AssertionError("--replace-unk requires a raw text dataset (--dataset-impl=raw)"),
            "fsa-generate",
            "fsa-generate: error: --replace-unk copies source words, which a binarized data-bin does not keep",
        ),
        (
            Exception(
                "Size of sample #14 is invalid (=(9, 8)) since max_positions=(8, 8), "
                "skip this example with --skip-invalid-size-inputs-valid-test"
            ),
            "fsa-train",
            "fsa-train: error: Size of sample #14 is invalid (=(9, 8)) since max_positions=(8, 8), skip this "
            "example with --skip-invalid-size-inputs-valid-test (a sentence longer than --max-source-positions",
        ),
    ],
)
def test_stock_fairseq_failures_of_a_flag_are_one_line(monkeypatch, raised, command, said):
    """fairseq's own assertion (--replace-unk on a binarized data-bin) and its bare
    Exception for a validation sentence longer than the model's positions ended in
    tracebacks."""
    run = _fake_command(monkeypatch, raised, command)
    with pytest.raises(SystemExit) as e:
        run()
    assert str(e.value).startswith(said) and "\n" not in str(e.value)


def test_other_exceptions_keep_their_traceback(monkeypatch):
    for error in (AssertionError("something else"), ValueError("min_len cannot be larger than max_len")):
        run = _fake_command(monkeypatch, error)
        with pytest.raises(type(error)):
            run()
    run = _fake_command(monkeypatch, AssertionError("min_len cannot be larger than max_len"))
    monkeypatch.setenv("FSA_TRACEBACK", "1")
    with pytest.raises(AssertionError):
        run()


def test_ctrl_c_is_one_line_and_status_130_except_in_training(monkeypatch, capsys):
    run = _fake_command(monkeypatch, KeyboardInterrupt())
    with pytest.raises(SystemExit) as e:
        run()
    assert e.value.code == 130 and capsys.readouterr().err == "fsa-generate: interrupted\n"
    run = _fake_command(monkeypatch, KeyboardInterrupt(), "fsa-train")
    with pytest.raises(KeyboardInterrupt):
        run()


def test_generate_writes_its_results_file_whole(tmp_path):
    """fsa-generate's ``open`` in fairseq_cli.generate (the --results-path file, opened
    before the model loads): a run that fails leaves the previous results and no part of
    its own; one that completes replaces them."""
    import types

    from fairseq_sparse_attn.cli import _results_written_whole

    module = types.ModuleType("fake_generate")
    _results_written_whole(module)
    results = tmp_path / "generate-test.txt"
    results.write_text("previous run\n")

    def main(fail):  # fairseq_cli.generate.main's shape
        with module.open(results, "w", buffering=1, encoding="utf-8") as h:
            h.write("S-0\tpartial\n")
            if fail:
                raise fail
            h.write("done\n")

    for fail in (RuntimeError("model failed"), KeyboardInterrupt()):
        with pytest.raises(type(fail)):
            main(fail)
        assert results.read_text() == "previous run\n" and [p.name for p in tmp_path.iterdir()] == [results.name]
    main(None)
    assert results.read_text() == "S-0\tpartial\ndone\n" and [p.name for p in tmp_path.iterdir()] == [results.name]
