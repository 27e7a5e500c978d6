"""scripts/rela/budget_study.py's parts that need no training, on hand-made inputs: run
specs, the budget grid, the checkpoints an average takes, translation statistics and the
table's number formats.  (Its training and report end to end:
tests/integration/test_budget_study.py.)"""

import argparse
import runpy
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
study = runpy.run_path(str(REPO / "scripts" / "rela" / "budget_study.py"))


def test_run_spec():
    assert study["parse_run"]("rela_g_adrop=rela_g:--attention-dropout 0.1 --lr 5e-4") == (
        "rela_g_adrop",
        "rela_g",
        ["--attention-dropout", "0.1", "--lr", "5e-4"],
    )
    assert study["parse_run"]("softmax=softmax") == ("softmax", "softmax", [])
    for bad in ("softmax", "a b=softmax", "x=transformer", "=rela_g"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected NAME=MODEL"):
            study["parse_run"](bad)


def saved(folder, *names):
    checkpoints = folder / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    for name in names:
        (checkpoints / name).write_bytes(b"")
    return checkpoints


def test_budget_grid(tmp_path):
    """Given budgets: sorted, deduplicated, positive.  Without: every 250 updates up to the
    baseline's last checkpoint, and that last one."""
    assert study["parse_budgets"]("1000,250, 500,250", tmp_path) == [250, 500, 1000]
    for bad in ("0,250", "x", ","):
        with pytest.raises(SystemExit, match="--budgets"):
            study["parse_budgets"](bad, tmp_path)
    saved(tmp_path, "checkpoint_1_250.pt", "checkpoint_2_700.pt", "checkpoint_last.pt", "checkpoint_best.pt")
    assert study["parse_budgets"](None, tmp_path) == [250, 500, 700]
    with pytest.raises(SystemExit, match="has no checkpoint_E_U.pt yet"):
        study["parse_budgets"](None, tmp_path / "elsewhere")


def test_checkpoints_an_average_takes(tmp_path):
    folder = saved(tmp_path, "checkpoint_1_500.pt", "checkpoint_2_750.pt", "checkpoint_3_1000.pt")
    take = study["checkpoints_to_average"]
    assert [p.name for p in take(folder, 1000, 3, 250)] == [
        "checkpoint_1_500.pt",
        "checkpoint_2_750.pt",
        "checkpoint_3_1000.pt",
    ]  # oldest first
    assert [p.name for p in take(folder, 1000, 2, 250)] == ["checkpoint_2_750.pt", "checkpoint_3_1000.pt"]
    assert take(folder, 1000, 4, 250) is None  # the one at 250 is missing
    assert take(folder, 1000, 1, 250) is None  # one checkpoint is no average
    assert study["checkpoint_at"](folder, 750).name == "checkpoint_2_750.pt"
    assert study["checkpoint_at"](folder, 75) is None
    saved(tmp_path, "checkpoint_5_1750.pt")  # ends in 750 too: not the checkpoint at 750 updates
    assert study["checkpoint_at"](folder, 750).name == "checkpoint_2_750.pt"


def test_translation_statistics():
    hyps = ["a dog runs", "a dog runs", "the the cat", "horse riders ride horses riders"]
    stats = study["translation_stats"](hyps, ref_words=10)
    # 3 + 3 + 3 + 5 words against 10 reference words; a repeated bigram or content word in 1
    # of 4 ("riders" twice; "the the" is one bigram, and "the" is no content word)
    assert stats == {"length_ratio": 1.4, "repeats": 0.25, "distinct": 3, "sentences": 4}
    has_repeat = study["has_repeat"]
    assert has_repeat("a man in a hat in a hat".split())  # the bigram "in a" twice
    assert not has_repeat("a man and a woman".split())  # "a" recurs: no content word
    assert has_repeat("children play with children".split())


def test_table_number_formats():
    fmt = study["fmt"]
    assert fmt(None) == "-" and fmt([30.04, 31.96]) == "30.04-31.96"
    assert fmt([0.05, 0.12]) == "0.05-0.12"  # at .1f: "0.1-0.1", beside a BLEU of 0.07
    assert fmt(0.12345) == "0.123" and fmt(31.666, 2) == "31.67" and fmt(7) == "7"
    row = {"test_avg3_bleu": 30.0, "test_avg3_ci95": [29.0, 31.0], "cross_null": {"all": 0.1, "first": 0.2}}
    flat = study["flat"](row, 3)
    assert flat["test_avg_bleu"] == 30.0 and flat["test_avg_ci95"] == [29.0, 31.0]
    assert flat["test_avg_p_vs_baseline"] is None and flat["null_all"] == 0.1 and flat["null_first"] == 0.2
