"""benchmarks/timing.py: paired ratios, the bootstrap interval and the two clocks, checked
with jobs whose cost is known (busy loops and sleeps), never with timing thresholds on
project code."""

import statistics
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import timing  # noqa: E402


def busy(seconds):
    def job():
        end = time.process_time() + seconds
        while time.process_time() < end:
            pass

    return job


def sleeping(seconds):
    return lambda: time.sleep(seconds)


def test_paired_ratios_are_per_round_baseline_over_variant():
    calls = []

    def job(name):
        return lambda: calls.append(name)

    run = timing.interleaved_rounds({"a": job("a"), "b": job("b")}, "a", rounds=4, warmup=1, reps=1)
    assert run["clock"] == "wall"
    for r in range(4):
        assert run["speed"]["b"][r] == pytest.approx(run["times"]["a"][r] / run["times"]["b"][r])
    assert run["speed"]["a"] == [1.0] * 4
    # warm-up once each, then rounds alternating a b / b a
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b", "b", "a"]


def test_cpu_clock_does_not_count_waiting():
    """A sleeping job costs wall time but (almost) no CPU time; a busy one costs both."""
    jobs = {"busy": busy(0.02), "sleep": sleeping(0.02)}
    wall = timing.interleaved_rounds(jobs, "busy", rounds=3, warmup=1, reps=1, clock="wall")
    cpu = timing.interleaved_rounds(jobs, "busy", rounds=3, warmup=1, reps=1, clock="cpu")
    assert cpu["clock"] == "cpu"
    assert statistics.median(wall["times"]["sleep"]) >= 0.019
    assert statistics.median(cpu["times"]["sleep"]) < 0.005
    assert statistics.median(cpu["times"]["busy"]) >= 0.019
    # sleeping is 'faster' than busy only by the CPU clock
    assert statistics.median(cpu["speed"]["sleep"]) > 4
    assert statistics.median(wall["speed"]["sleep"]) < 4


def test_unknown_clock_is_a_clear_error():
    with pytest.raises(ValueError, match="clock must be one of wall, cpu, got 'gpu'"):
        timing.interleaved_rounds({"a": lambda: None}, "a", rounds=1, clock="gpu")


def test_summary_and_bootstrap_interval():
    ratios = [0.9, 1.0, 1.1, 1.0, 0.95]
    s = timing.summarize_ratios(ratios)
    assert s["median"] == 1.0 and s["min"] == 0.9 and s["max"] == 1.1 and s["rounds"] == 5
    assert 0.9 <= s["ci95_low"] <= s["median"] <= s["ci95_high"] <= 1.1
    assert timing.summarize_ratios(ratios) == s  # seeded
    assert timing.bootstrap_median_interval([2.0]) == (2.0, 2.0)


def test_bootstrap_interval_against_the_exact_distribution_of_the_median():
    """For an odd n the bootstrap median is at most the k-th smallest value exactly when at
    least (n + 1) / 2 of the n draws are, each with probability k / n: the interval's ends
    are that binomial distribution's 2.5% and 97.5% quantiles (within one order statistic:
    2,000 resamples)."""
    from math import comb

    n = 201
    values = [float(v) for v in range(1, n + 1)]  # the k-th smallest is k

    def cdf(k):
        p = k / n
        return sum(comb(n, j) * p**j * (1 - p) ** (n - j) for j in range((n + 1) // 2, n + 1))

    def quantile(level):
        return next(k for k in range(1, n + 1) if cdf(k) >= level)

    lo, hi = quantile(0.025), quantile(0.975)  # 87 and 115
    for seed in range(3):
        got_lo, got_hi = timing.bootstrap_median_interval(values, seed=seed)
        assert abs(got_lo - lo) <= 1 and abs(got_hi - hi) <= 1, (seed, got_lo, got_hi)


def test_repetitions_are_chosen_from_the_baseline(monkeypatch):
    """One timing of the baseline lasts at least min_time: reps from the baseline's
    warm-up, whatever the other jobs take (a fake clock that the jobs advance)."""
    now = [0.0]

    def job(seconds):
        def run():
            now[0] += seconds

        return run

    monkeypatch.setitem(timing.CLOCKS, "fake", lambda: now[0])
    result = timing.interleaved_rounds(
        {"base": job(0.01), "fast": job(0.001), "slow": job(0.05)}, "base", rounds=2, min_time=0.1, clock="fake"
    )
    assert result["reps"] == 10
    assert result["times"]["base"] == pytest.approx([0.01, 0.01])
    assert result["speed"]["slow"] == pytest.approx([0.2, 0.2])
