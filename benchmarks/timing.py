"""Paired, interleaved timing of several variants of one job, summarized as ratios.

The method (used by ``bench_attention.py`` and ``bench_long_sequences.py``):

* **threads pinned** before torch is imported (:func:`pin_threads`: ``OMP_NUM_THREADS``,
  ``MKL_NUM_THREADS``, ``torch.set_num_threads``, one inter-op thread);
* **warm-up discarded**: the first ``warmup`` rounds are run and thrown away (allocator,
  oneDNN primitive caches, lazy initialisation);
* **interleaved rounds**: every round times the baseline and each variant once, in an order
  that alternates between rounds (A B C, then C B A, ...), so a drift of the machine's speed
  within a round hits the variants alike on average;
* **enough work per timing**: each timing repeats the job ``reps`` times, chosen once from the
  warm-up so that one timing of the baseline lasts at least ``min_time`` seconds (the timer's
  resolution and scheduler noise become small against it); the Python garbage collector is
  off while timing;
* **paired ratios**: the statistic is the per-round ratio ``t_baseline / t_variant`` (speed,
  > 1 = faster than the baseline), never a ratio of two separately taken medians: a slow
  phase of a shared machine slows both members of a pair and largely cancels;
* **spread**: the median of the per-round ratios with a percentile-bootstrap 95% interval of
  that median (seeded, so the same timings give the same interval), and min–max;
* **clock**: ``wall`` (``time.perf_counter``, what a user waits for; the default) or ``cpu``
  (``time.process_time``: CPU seconds of this process, all its threads).  On a machine
  shared with other jobs, wall time also counts the moments the benchmark waits for a core;
  CPU time does not, so with ``--threads 1`` the paired ratios stay steady under load
  (memory-bandwidth and cache contention still reach them).  With several threads CPU time
  also counts OpenMP's spin-waiting, so use ``cpu`` with one thread; never on a GPU (the
  device's work is not CPU time of this process).
"""

import gc
import os
import random
import statistics
import time
from typing import Callable, Dict, List, Optional, Sequence

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def pin_threads(threads: Optional[int]):
    """Fix the number of compute threads; call before ``import torch`` for the environment
    variables to take effect, and again after (``torch.set_num_threads``)."""
    if not threads:
        return
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    import sys

    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already set once in this process (or parallel work started)
            pass


def bootstrap_median_interval(values: Sequence[float], level: float = 0.95, resamples: int = 2000, seed: int = 0):
    """Percentile bootstrap interval of the median of ``values``: (low, high)."""
    values = list(values)
    if not values:
        raise ValueError("no values to bootstrap")
    if len(values) == 1:
        return values[0], values[0]
    rng = random.Random(seed)
    n = len(values)
    medians = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(resamples))
    lo_idx = int(round((1 - level) / 2 * (resamples - 1)))
    hi_idx = int(round((1 + level) / 2 * (resamples - 1)))
    return medians[lo_idx], medians[hi_idx]


def summarize_ratios(ratios: Sequence[float], seed: int = 0) -> Dict[str, float]:
    lo, hi = bootstrap_median_interval(ratios, seed=seed)
    return {
        "median": statistics.median(ratios),
        "ci95_low": lo,
        "ci95_high": hi,
        "min": min(ratios),
        "max": max(ratios),
        "rounds": len(ratios),
    }


def clock_named(name: str) -> Callable[[], float]:
    if name not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {name!r}")
    return CLOCKS[name]


def _time_once(
    fn: Callable[[], None], reps: int, sync: Callable[[], None], clock: Callable[[], float] = time.perf_counter
) -> float:
    sync()
    t0 = clock()
    for _ in range(reps):
        fn()
    sync()
    return (clock() - t0) / reps


def interleaved_rounds(
    jobs: Dict[str, Callable[[], None]],
    baseline: str,
    rounds: int,
    warmup: int = 2,
    min_time: float = 0.2,
    reps: Optional[int] = None,
    sync: Callable[[], None] = lambda: None,
    progress: Optional[Callable[[str], None]] = None,
    clock: str = "wall",
):
    """Time every job in ``rounds`` interleaved rounds after ``warmup`` discarded ones,
    with the clock named ``clock`` (:data:`CLOCKS`).

    Returns ``{"reps": reps, "times": {name: [seconds per call, one per round]},
    "speed": {name: [t_baseline / t_name per round]}}``.
    """
    if baseline not in jobs:
        raise ValueError(f"the baseline {baseline!r} is not among the jobs {list(jobs)}")
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    names = list(jobs)
    now = clock_named(clock)
    gc_was_enabled = gc.isenabled()
    try:
        for w in range(max(warmup, 1)):
            for name in names:
                t = _time_once(jobs[name], 1, sync, now)
                if name == baseline and w == max(warmup, 1) - 1 and reps is None:
                    reps = max(1, int(min_time / max(t, 1e-9) + 0.999))
        times: Dict[str, List[float]] = {n: [] for n in names}
        for r in range(rounds):
            order = names if r % 2 == 0 else names[::-1]
            gc.collect()
            gc.disable()
            for name in order:
                times[name].append(_time_once(jobs[name], reps, sync, now))
            if gc_was_enabled:
                gc.enable()
            if progress is not None:
                progress(f"round {r + 1}/{rounds}")
    finally:
        if gc_was_enabled:
            gc.enable()
    base = times[baseline]
    speed = {n: [b / t for b, t in zip(base, times[n])] for n in names}
    return {"reps": reps, "times": times, "speed": speed, "clock": clock}
