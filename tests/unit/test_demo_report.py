"""scripts/demo.py's report without training: the mean over seeds of every figure, the
file names of a run, the reading in words (verdict per seed, seeds told apart, budget,
learning rates), the learning curves' reading, the settings a run changed from its
recipe, the learning rates of --sweep, and the printed report with one seed and with
several.  Expected values are worked out by hand from the inputs."""

import argparse
import copy
import math
import runpy
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
demo = runpy.run_path(str(REPO / "scripts" / "demo.py"))
KINDS = ("encoder_self", "decoder_self", "cross")


def run_of(bleu, loss, rep, ratio, sparsity, null, lr=1e-3, wps=1000.0, sps=50.0):
    return {
        "lr": lr,
        "bleu": bleu,
        "bleu_ci95": [bleu - 1, bleu + 1],
        "p_value_vs_baseline": None,
        "final_valid_loss": loss,
        "repetition_rate": rep,
        "length_ratio": ratio,
        "train_words_per_s": wps,
        "decode_sentences_per_s": sps,
        "attention": {k: {"sparsity": sparsity, "null_rate": null} for k in KINDS},
    }


PER_SEED = {
    "1": {"softmax": run_of(20.0, 3.0, 0.1, 1.0, 0.0, 0.0), "rela_g": run_of(21.0, 2.0, 0.3, 0.9, 0.5, 0.1)},
    "2": {"softmax": run_of(21.0, None, 0.2, 1.0, 0.0, 0.0), "rela_g": run_of(22.0, 2.5, 0.3, 0.9, 0.6, 0.2)},
    "3": {"softmax": run_of(25.0, 4.0, 0.6, 1.0, 0.0, 0.0), "rela_g": run_of(23.0, 3.0, 0.3, 0.9, 0.7, 0.6)},
}


def test_mean_over_seeds_of_every_figure():
    """Means (not medians) over the seeds, a missing value (no validation) left out, the
    per-seed BLEU and its sample (n - 1) standard deviation, the attention means of both
    statistics."""
    pooled = demo["pooled"](PER_SEED, ["softmax", "rela_g"])
    s = pooled["softmax"]
    assert s["seeds"] == 3 and s["bleu_per_seed"] == [20.0, 21.0, 25.0]
    assert s["bleu_mean"] == 22.0  # the median would be 21.0
    assert s["bleu_std"] == round(math.sqrt((4 + 1 + 9) / 2), 2) == 2.65  # the population std: 2.16
    assert s["final_valid_loss_mean"] == 3.5  # (3.0 + 4.0) / 2: the seed without validation left out
    assert s["repetition_rate_mean"] == 0.3  # the median would be 0.2
    r = pooled["rela_g"]
    assert r["attention_mean"]["cross"] == {"sparsity": 0.6, "null_rate": 0.3}
    assert r["attention_mean"]["encoder_self"]["sparsity"] == 0.6
    one = demo["pooled"]({"1": PER_SEED["1"]}, ["softmax"])["softmax"]
    assert one["bleu_std"] is None and one["bleu_mean"] == 20.0


def test_run_file_names():
    assert demo["run_tag"]("rela_g", 1, 1) == "rela_g"  # one seed: the cpu recipe's names
    assert demo["run_tag"]("rela_g", 2, 2) == "rela_g_seed2"  # the cuda recipe's two seeds
    assert demo["run_tag"]("softmax", 3, 3) == "softmax_seed3"


def test_seed_pair_is_the_model_minus_its_baseline():
    results = {
        "softmax": {"bleu": 30.0, "p_value_vs_baseline": None},
        "rela_g": {"bleu": 28.756, "p_value_vs_baseline": 0.02},
    }
    assert demo["seed_pair"](2, "softmax", "rela_g", results) == {
        "seed": 2,
        "baseline": "softmax",
        "model": "rela_g",
        "bleu_difference": -1.24,
        "p_value": 0.02,
    }


def test_verdict_in_words():
    verdict = demo["verdict"]
    below = verdict("softmax", "rela_g", -1.234, 0.01, seed=2)
    assert below.startswith("seed 2: rela_g is 1.23 BLEU below softmax")
    assert "(p = 0.010 < 0.05): at this budget the two are NOT tied." in below
    assert "is 0.50 BLEU above softmax" in verdict("softmax", "rela_g", 0.5, 0.001)
    # a difference that rounds to 0.00 is a tie whatever its p-value; so is p >= 0.05
    assert "differs from softmax by +0.00 BLEU, within the noise" in verdict("softmax", "rela_g", 0.004, 0.01)
    assert verdict("softmax", "rela_g", -0.8, 0.2) == (
        "rela_g differs from softmax by -0.80 BLEU, within the noise of this test set (p = 0.200): at this budget "
        "they tie on this test set."
    )


def report_of(seeds, pairs, lrs=(1e-3, 1e-3)):
    per_seed = {str(s): copy.deepcopy(PER_SEED[str(s)]) for s in seeds}
    for s in seeds:
        per_seed[str(s)]["softmax"]["lr"], per_seed[str(s)]["rela_g"]["lr"] = lrs
    return {
        "regime": "recipe cuda: real budget",
        "seeds": list(seeds),
        "per_seed": per_seed,
        "pairs": pairs,
        "models": demo["pooled"](per_seed, ["softmax", "rela_g"]),
        "models_compared": ["softmax", "rela_g"],
        "references": {"repetition_rate": 0.05},
        "signature": "nrefs:1",
        "test_set": "Multi30k test_2016_flickr",
        "test_sentences": 1000,
        "paired_bootstrap_resamples": 1000,
    }


ARGS = argparse.Namespace(max_update=1500, updates_per_epoch=500, max_tokens=4096, update_freq=None)


def test_reading_of_two_seeds():
    """Every seed pair's verdict; a pair whose difference rounds to 0.00 is not told apart
    even at p < 0.05; the mean difference is rela_g's minus softmax's; the budget in
    epochs; the models' own learning rates named."""
    pairs = [
        {"seed": 1, "model": "rela_g", "bleu_difference": 1.0, "p_value": 0.01},
        {"seed": 2, "model": "rela_g", "bleu_difference": 0.001, "p_value": 0.03},
    ]
    text = demo["reading"]("softmax", "rela_g", report_of([1, 2], pairs, lrs=(7e-4, 1e-3)), ARGS)
    assert "seed 1: rela_g is 1.00 BLEU above softmax" in text and "seed 2: rela_g differs from softmax" in text
    assert (
        "Mean over 2 seeds: rela_g 21.50 against softmax 20.50 (+1.00); the test set tells them apart in 1 of 2" in text
    )
    assert "(1500 updates of <= 4096 tokens, 3.0 epochs, 2 seeds, each pair compared on the same seed)" in text
    assert "each its own learning rate, chosen the same way" in text
    same = demo["reading"]("softmax", "rela_g", report_of([1], pairs[:1]), ARGS)
    assert "and the same learning rate (0.001;" in same and "one seed" in same
    assert "(1000 paired resamples of 1000 test sentences)" in same


def curve(points):
    return [{"num_updates": u, "loss": loss} for u, loss in points]


def test_learning_curves_reading():
    """The gap at the last common validation against the latest one at least a quarter of
    the run earlier (here 400, not 300 or 100), narrowing when its size shrinks."""
    base = curve([(100, 5.0), (200, 4.0), (300, 3.5), (400, 3.0), (500, 2.9)])
    widening = curve([(100, 5.0), (200, 3.0), (300, 3.3), (400, 2.5), (500, 2.3)])  # gaps ..., -0.5, -0.6
    text = demo["curve_reading"]("softmax", "rela_g", {"softmax": base, "rela_g": widening})
    assert "rela_g's validation loss is -0.600 from softmax's at update 500 (-0.500 at update 400)" in text
    assert "not narrowing" in text
    narrowing = curve([(100, 5.0), (200, 3.0), (300, 3.3), (400, 3.5), (500, 3.2)])  # gaps +0.5, +0.3
    assert "so the gap is narrowing" in demo["curve_reading"](
        "softmax", "rela_g", {"softmax": base, "rela_g": narrowing}
    )
    one = {"softmax": base, "rela_g": curve([(500, 3.0)])}
    assert "fewer than two common validations" in demo["curve_reading"]("softmax", "rela_g", one)


def args_of(*argv):
    return demo["parse_args"](list(argv), cuda_available=False)


def test_settings_a_run_changed_from_its_recipe():
    args = args_of()
    assert demo["changed_settings"](args) == {} and "changed here" not in demo["regime_of"](args)
    args = args_of("--max-update", "70", "--seeds", "1,2")
    changed = demo["changed_settings"](args)
    recipe = demo["RECIPES"]["cpu"]
    assert changed == {"max_update": (recipe["max_update"], 70), "seeds": ("1", "1,2")}
    assert demo["regime_of"](args).endswith(f"; changed here: max_update {recipe['max_update']} -> 70, seeds 1 -> 1,2")


@pytest.mark.parametrize("text", ["1e-3,0", "-1e-3", "x", ""])
def test_sweep_learning_rates_must_be_positive_numbers(text):
    with pytest.raises(SystemExit, match="expected comma-separated positive learning rates"):
        demo["parse_lrs"](text)
    assert demo["parse_lrs"]("5e-4, 1e-3") == [5e-4, 1e-3]


def test_length_ratio_counts_13a_tokens():
    assert demo["length_ratio"](["A hat."], ["a hat ."]) == 1.0  # "hat." is two tokens
    assert demo["length_ratio"](["a"], []) is None


def test_printed_report_with_one_seed_and_with_three(capsys):
    pairs = [{"seed": s, "model": "rela_g", "bleu_difference": 1.0, "p_value": 0.01} for s in (1, 2, 3)]
    demo["print_report"](report_of([1], pairs[:1]), ARGS)
    out = capsys.readouterr().out
    assert "seed 1 (Multi30k test_2016_flickr, 1000 sentences):" in out and "mean over seeds" not in out
    demo["print_report"](report_of([1, 2, 3], pairs), ARGS)
    out = capsys.readouterr().out
    assert "mean over seeds 1, 2, 3:" in out
    assert "  softmax: sacreBLEU 22.00 (per seed 20.00, 21.00, 25.00; sample std 2.65)" in out
