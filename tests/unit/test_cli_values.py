"""The fsa-* wrappers' checks of values fairseq takes and then fails on (a traceback after
the model or the data loaded) or misuses with nothing said: ``--lr -1`` exited 0 without
training, ``--max-update -5`` trained one update, ``--label-smoothing 1.5`` trained,
``--beam 0`` and ``--temperature 0`` failed after the model loaded, a missing
``fsa-interactive --input`` after the model loaded (a black-box sweep, 2026-11-28)."""

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
