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
