"""Status lines for long fairseq runs whose output goes to a log file.

``make demo`` and the reproduction scripts (scripts/lib.sh) send fairseq-train and
fairseq-generate output to log files.  While such a run works, a :class:`Watcher` reads
its log every few seconds and prints one status line at least every ``interval`` seconds
(default 20 s, so always within 30 s):

    [softmax seed 1] training: update 130/250 (52%), 0.58 updates/s over the last 1m40s, about 3m27s left (3m05s-3m58s at the fastest and slowest recent rate), 3m45s elapsed
    [softmax seed 1] translating test: sentence 320/1000 (32%), 45.1 sentences/s, about 15s left, 7s elapsed

What is counted (read from the log as fairseq writes it):

- training: the last ``num_updates`` of a ``train_inner`` / ``valid`` / ``train`` line
  (``--log-format simple`` or ``json``; ``--log-interval`` sets how fresh it is); the total is the
  given one, else ``'max_update': N`` of the configuration fairseq-train logs at start;
- decoding: the distinct sentence ids of the ``H-``/``D-`` lines fairseq-generate prints
  (it prints them batch by batch; run it with ``PYTHONUNBUFFERED=1`` so they reach the
  file at once); the total is the given one, else ``loaded N examples`` of the first
  (source) side fairseq logs.

The rate follows the recent pace: the counts gained over the last few intervals between
new counts (:func:`recent_rate`), and the time left, (total - done) / rate less the time
since the count was seen, comes with its range at the slowest and fastest of those
intervals: ``about 3m27s left (2m50s-4m10s at the fastest and slowest recent rate)``.  At
the first count there is no interval yet: the rate is the count over the time since the
watcher started, start-up included, and the line says the estimate is rough.  Run
fairseq-train with ``--log-interval 1`` (``make demo`` does, on CPU) for a count from the
first update.

This module uses only the standard library and runs as a file, so shell scripts can
start it without importing fairseq::

    python fairseq_sparse_attn/tools/progress.py --pid PID --kind train --label NAME LOG

(exits when process PID has ended).
"""

import argparse
import os
import re
import sys
import threading
import time
from pathlib import Path

UPDATES = re.compile(r"num_updates(?:=| |\": \")(\d+)")  # simple, tqdm summaries, json
MAX_UPDATE = re.compile(r"'max_update': (\d+)")
SENTENCE_IDS = re.compile(r"^[HD]-(\d+)\t", re.M)
LOADED = re.compile(r"loaded ([\d,]+) examples from")
DEFAULT_INTERVAL = 20.0
UNITS = {"train": ("training", "update", "updates"), "generate": ("translating", "sentence", "sentences")}


def train_progress(text):
    """(updates done, max_update or None) from a fairseq-train log's text."""
    done = UPDATES.findall(text)
    total = MAX_UPDATE.search(text)
    return (int(done[-1]) if done else 0), (int(total.group(1)) if total and int(total.group(1)) > 0 else None)


def generate_progress(text):
    """(sentences translated, sentences in the subset or None) from fairseq-generate output."""
    total = LOADED.search(text)
    return len(set(SENTENCE_IDS.findall(text))), (int(total.group(1).replace(",", "")) if total else None)


COUNTERS = {"train": train_progress, "generate": generate_progress}


def duration(seconds):
    """12s, 3m27s, 1h05m."""
    seconds = int(round(max(seconds, 0)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


RECENT_INTERVALS = 6  # the recent rate: over the last this many intervals between new counts


def recent_rate(points):
    """(rate, slowest, fastest, seconds) from ``points``, [(time a count was first seen,
    count)] in order: the rate over the last :data:`RECENT_INTERVALS` intervals between new
    counts, and the slowest and fastest rate of one of those intervals; None with fewer than
    two points (the time before the first count is start-up, not training, so it is not an
    interval)."""
    window = points[-(RECENT_INTERVALS + 1) :]
    if len(window) < 2:
        return None
    rates = [(d1 - d0) / (t1 - t0) for (t0, d0), (t1, d1) in zip(window, window[1:]) if t1 > t0]
    span = window[-1][0] - window[0][0]
    if not rates or span <= 0:
        return None
    return (window[-1][1] - window[0][1]) / span, min(rates), max(rates), span


def status_line(label, kind, done, total, elapsed, what="", stale=0.0, recent=None):
    """One status line: count (of total), rate, time left, time elapsed.  ``stale``: seconds
    since the count last changed (fairseq logs every --log-interval updates): the time left
    counts from when the count was reached.  ``recent``: :func:`recent_rate`'s (rate,
    slowest, fastest, seconds); the time left follows that rate and gives the range of the
    slowest and fastest recent interval.  Without it (the first count) the rate is the count
    over the whole time, start-up included, and the time left says it is rough."""
    verb, unit, units = UNITS[kind]
    head = f"[{label}] {verb}{' ' + what if what else ''}: "
    if done <= 0:
        return head + f"starting, {duration(elapsed)} elapsed"
    count = f"{unit} {done}" + (f"/{total} ({100 * done / total:.0f}%)" if total else "")
    remaining = max(total - done, 0) if total else None
    if recent is None:
        reached = elapsed - stale
        rate = done / reached if reached > 0 else 0.0
        speed = f"{rate:.2f} {units}/s"
        left = (
            f", about {duration(remaining / rate - stale)} left (rough: start-up included)"
            if remaining is not None and rate > 0
            else ""
        )
    else:
        rate, slow, fast, span = recent
        speed = f"{rate:.2f} {units}/s over the last {duration(span)}"
        left = ""
        if remaining is not None and rate > 0:
            left = f", about {duration(remaining / rate - stale)} left"
            if slow > 0 and fast > 0:
                low, high = (duration(remaining / r - stale) for r in (fast, slow))
                left += f" ({low}-{high} at the fastest and slowest recent rate)" if low != high else ""
    return head + f"{count}, {speed}{left}, {duration(elapsed)} elapsed"


def _is_terminal(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Watcher:
    """Prints a status line of ``kind`` read from ``logs`` every ``interval`` seconds
    until :meth:`stop` (use as a context manager around the run)."""

    def __init__(
        self, logs, kind, label, total=None, interval=DEFAULT_INTERVAL, what="", stream=None, clock=time.monotonic
    ):
        if kind not in COUNTERS:
            raise ValueError(f"kind must be one of {', '.join(COUNTERS)}, got {kind!r}")
        self.logs = [Path(p) for p in ([logs] if isinstance(logs, (str, Path)) else logs)]
        self.kind, self.label, self.total, self.interval, self.what = kind, label, total, interval, what
        self.stream = stream
        self.clock = clock
        self._stop = threading.Event()
        self._last = (0, None)  # (count, when it was first seen)
        self._points = []  # [(when, count)] of every new count seen (recent_rate)
        self._thread = None
        self.start_time = None

    def read(self):
        text = ""
        for p in self.logs:
            try:
                text += p.read_text(errors="replace")
            except OSError:
                pass
        return text

    def line(self):
        done, total = COUNTERS[self.kind](self.read())
        now = self.clock()
        if done != self._last[0] or self._last[1] is None:
            self._last = (done, now)
            if done > 0:
                self._points.append((now, done))
        return status_line(
            self.label,
            self.kind,
            done,
            self.total or total,
            now - self.start_time,
            self.what,
            stale=now - self._last[1],
            recent=recent_rate(self._points),
        )

    def _loop(self):
        stream = self.stream or sys.stderr
        if _is_terminal(stream):
            return self._bar_loop(stream)
        while not self._stop.wait(self.interval):
            print(self.line(), file=stream, flush=True)

    def _bar_loop(self, stream):
        """On a terminal: the progress bar fairseq draws with ``--log-format tqdm`` (tqdm:
        count of total, rate, time left), refreshed every second from the log, instead of a
        status line every ``interval`` seconds."""
        from tqdm import tqdm

        unit = "update" if self.kind == "train" else "sentence"
        desc = f"{self.label} {'training' if self.kind == 'train' else 'translating'}"
        bar = tqdm(total=self.total, desc=desc, unit=unit, file=stream, dynamic_ncols=True, mininterval=0)
        try:
            while not self._stop.wait(min(self.interval, 1.0)):
                done, total = COUNTERS[self.kind](self.read())
                total = self.total or total
                if total and bar.total != total:
                    bar.total = total
                if done > bar.n:
                    bar.update(done - bar.n)
                bar.refresh()
        finally:
            bar.close()

    def start(self):
        self.start_time = self.clock()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def alive(pid):
    """Is process ``pid`` still running (a zombie not yet reaped counts as ended)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # Linux: a zombie has state Z
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Print a status line of a fairseq run every --interval seconds until process --pid ends."
    )
    p.add_argument("logs", nargs="+", help="the run's log file(s)")
    p.add_argument("--pid", type=int, required=True, help="the process to watch")
    p.add_argument("--kind", choices=sorted(COUNTERS), required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--total", type=int, default=None, help="default: read from the log")
    p.add_argument("--what", default="", help="e.g. the subset being translated")
    p.add_argument("--interval", type=float, default=float(os.environ.get("FSA_STATUS_INTERVAL", DEFAULT_INTERVAL)))
    args = p.parse_args(argv)
    if args.interval <= 0:
        p.error(f"--interval must be positive, got {args.interval}")
    watcher = Watcher(args.logs, args.kind, args.label, args.total, args.interval, args.what).start()
    try:
        while alive(args.pid):
            time.sleep(min(0.5, args.interval))
    except KeyboardInterrupt:
        pass
    finally:
        watcher.stop()


if __name__ == "__main__":
    main()
