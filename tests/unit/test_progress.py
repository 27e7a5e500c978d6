"""fairseq_sparse_attn/tools/progress.py: counts read from fairseq's own log lines, the
status line's rate and time left against a hand computation, and the watcher's timing with
a fake clock and a log the test writes."""

import io
import threading

from fairseq_sparse_attn.tools.progress import (
    RECENT_INTERVALS,
    Watcher,
    duration,
    generate_progress,
    recent_rate,
    status_line,
    train_progress,
)

# lines as fairseq-train --log-format simple writes them (copied from a real run)
TRAIN_LOG = """\
2026-11-25 13:20:55 | INFO | fairseq_cli.train | {'_name': None, 'optimization': {'_name': None, 'max_epoch': 0, 'max_update': 250, 'stop_time_hours': 0.0}}
2026-11-25 13:20:58 | INFO | train_inner | epoch 001:      2 / 24 loss=11.041, nll_loss=11.041, ppl=2107.01, wps=4103.9, ups=24.47, wpb=179, bsz=11.5, num_updates=20, lr=0.001
2026-11-25 13:20:59 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 10.945 | nll_loss 10.945 | num_updates 30
2026-11-25 13:20:59 | INFO | train_inner | epoch 001:      4 / 24 loss=10.907, nll_loss=10.907, wps=3271.9, num_updates=40, lr=0.000707107
"""
GENERATE_LOG = """\
INFO:fairseq.data.data_utils:loaded 1,000 examples from: data-bin/test.de-en.de
INFO:fairseq.data.data_utils:loaded 1,000 examples from: data-bin/test.de-en.en
S-7\tein Hund .
T-7\ta dog .
H-7\t-0.5\ta dog .
D-7\t-0.5\ta dog .
P-7\t-0.1 -0.2 -0.3 -0.4
S-3\tzwei Katzen
H-3\t-0.4\ttwo cats
D-3\t-0.4\ttwo cats
"""


def test_counts_from_fairseq_lines():
    assert train_progress(TRAIN_LOG) == (40, 250)
    assert train_progress("starting\n") == (0, None)
    json_line = '2026-11-25 | INFO | train_inner | {"epoch": 1, "update": 0.2, "loss": "9.1", "num_updates": "75", "lr": "1e-4"}'
    assert train_progress(TRAIN_LOG + json_line) == (75, 250)
    assert generate_progress(GENERATE_LOG) == (2, 1000)


def test_status_line_rate_and_time_left():
    # 130 of 250 updates in 224 s: 0.5804 updates/s, 120 left -> 206.8 s = 3m27s
    line = status_line("softmax seed 1", "train", 130, 250, 224.0)
    assert line == (
        "[softmax seed 1] training: update 130/250 (52%), 0.58 updates/s, about 3m27s left (rough: start-up "
        "included), 3m44s elapsed"
    )
    line = status_line("rela_g", "generate", 320, 1000, 8.0, what="test")
    assert line == (
        "[rela_g] translating test: sentence 320/1000 (32%), 40.00 sentences/s, about 17s left (rough: start-up "
        "included), 8s elapsed"
    )
    assert status_line("x", "train", 0, 250, 12.0) == "[x] training: starting, 12s elapsed"
    assert status_line("x", "train", 5, None, 10.0) == "[x] training: update 5, 0.50 updates/s, 10s elapsed"
    assert (duration(59.4), duration(60), duration(3725)) == ("59s", "1m00s", "1h02m")
    # the count 130 was reached 24 s ago (fairseq logs every --log-interval updates): rate 130/200 s
    # = 0.65 updates/s, 120 left -> 184.6 s from then, 160.6 s from now
    line = status_line("m", "train", 130, 250, 224.0, stale=24.0)
    assert line == (
        "[m] training: update 130/250 (52%), 0.65 updates/s, about 2m41s left (rough: start-up included), 3m44s elapsed"
    )


ROUGH_40 = (
    "[m] training: update 40/250 (16%), 0.50 updates/s, about 7m00s left (rough: start-up included), 1m20s elapsed"
)


def test_recent_rate_and_its_range():
    # counts first seen at 100 s (start-up before), 110 s, 130 s, 140 s: intervals of 10 updates in
    # 10 s, 20 s, 10 s -> 30 updates in 40 s = 0.75/s; slowest 0.5/s, fastest 1/s
    points = [(100.0, 5), (110.0, 15), (130.0, 25), (140.0, 35)]
    assert recent_rate(points) == (0.75, 0.5, 1.0, 40.0)
    assert recent_rate(points[:1]) is None and recent_rate([]) is None
    # only the last RECENT_INTERVALS intervals count: a slow start is forgotten
    slow_start = [(0.0, 1), (100.0, 2)] + [(100.0 + 10 * i, 2 + 10 * i) for i in range(1, RECENT_INTERVALS + 1)]
    assert recent_rate(slow_start)[0] == 1.0
    # 215 left at 0.75/s = 286.7 s, less 4 s since the count was seen; range 215/1 - 4 .. 215/0.5 - 4
    line = status_line("m", "train", 35, 250, 144.0, stale=4.0, recent=recent_rate(points))
    assert line == (
        "[m] training: update 35/250 (14%), 0.75 updates/s over the last 40s, about 4m43s left "
        "(3m31s-7m06s at the fastest and slowest recent rate), 2m24s elapsed"
    )


def write_updates(log, upto, total=250):
    """A fairseq-train log (--log-interval 1) up to update ``upto``."""
    lines = [f"2026-11-25 13:20:55 | INFO | fairseq_cli.train | {{'optimization': {{'max_update': {total}}}}}"]
    lines += [
        f"2026-11-25 13:21:{u:02d} | INFO | train_inner | epoch 001:  {u} / 247 loss=9.1, wps=1000.0, num_updates={u}, lr=1e-05"
        for u in range(1, upto + 1)
    ]
    log.write_text("\n".join(lines) + "\n")


def test_count_and_estimate_from_the_first_update(tmp_path):
    """With a fake clock: start-up takes 60 s, then an update every 2 s, and the watcher
    reads the log every 4 s.  From the first update the line has a count and a time left
    (rough), from the second reading with a new count the recent rate (0.5 updates/s) and
    its range; never only 'starting' once an update is logged."""
    log = tmp_path / "train.log"
    write_updates(log, 0)
    now = [0.0]
    w = Watcher(log, "train", "m", clock=lambda: now[0])
    w.start_time = 0.0  # as start() sets it, without the thread
    assert w.line() == "[m] training: starting, 0s elapsed"
    lines = []
    for update in range(1, 11):
        now[0] = 60.0 + 2 * update
        write_updates(log, update)
        if update % 2:  # a reading every 4 s
            lines.append(w.line())
    assert lines[0] == (
        "[m] training: update 1/250 (0%), 0.02 updates/s, about 4h17m left (rough: start-up included), 1m02s elapsed"
    )
    # update 3 at 66 s: 2 updates in 4 s since update 1 -> 0.5/s, 247 left -> 8m14s
    assert lines[1] == (
        "[m] training: update 3/250 (1%), 0.50 updates/s over the last 4s, about 8m14s left, 1m06s elapsed"
    )
    assert lines[-1].startswith("[m] training: update 9/250 (4%), 0.50 updates/s over the last 16s, about 8m02s left")


def test_estimate_follows_a_changed_rate(tmp_path):
    """The pace doubles at update 50 (another job on the cores ended): within a few readings
    the time left is that of the new pace, not of the average since the start."""
    log = tmp_path / "train.log"
    now = [0.0]
    w = Watcher(log, "train", "m", clock=lambda: now[0])
    w.start_time = 0.0
    t = 10.0
    for update in range(1, 81):
        t += 2.0 if update <= 50 else 1.0
        if update % 5 == 0:
            now[0] = t
            write_updates(log, update)
            line = w.line()
    # at update 80: 1 update/s for the last 6 intervals -> 170 left = 2m50s (the mean since the
    # start, 80 updates in 140 s, would say 4m58s)
    assert "1.00 updates/s over the last 30s, about 2m50s left" in line


def test_watcher_prints_at_every_interval(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(TRAIN_LOG)
    now = [180.0]
    first = iter([100.0])  # the watcher starts at 100 s; every later reading is now[0]
    out = io.StringIO()
    printed = threading.Event()

    class Stream(io.StringIO):
        def write(self, s):
            out.write(s)
            printed.set()
            return len(s)

    w = Watcher([log, log], "train", "m", interval=0.02, stream=Stream(), clock=lambda: next(first, now[0]))
    assert w.logs == [log, log] and w.read() == TRAIN_LOG * 2  # the same file twice is harmless
    w.start()  # 80 s later the count 40 is first seen: 0.5 updates/s, 210 left -> 420 s
    assert printed.wait(5)
    w.stop()
    lines = [l for l in out.getvalue().splitlines() if l]
    assert ROUGH_40 in lines
    assert w.line() == ROUGH_40
    now[0] = 190.0  # 10 s on, no new line: the same rate, 10 s less left
    assert w.line() == ROUGH_40.replace("7m00s", "6m50s").replace("1m20s", "1m30s")


def test_watcher_on_a_terminal_draws_the_tqdm_bar(tmp_path):
    """On a TTY the watcher draws tqdm's bar (what fairseq-train --log-format tqdm shows):
    the count of the total read from the log, not status lines."""
    log = tmp_path / "train.log"
    log.write_text(TRAIN_LOG)
    drawn = threading.Event()

    class Terminal(io.StringIO):
        def isatty(self):
            return True

        def write(self, s):
            if "40/250" in s:
                drawn.set()
            return super().write(s)

    term = Terminal()
    w = Watcher(log, "train", "m", interval=0.05, stream=term)
    w.start()
    assert drawn.wait(5)
    w.stop()
    text = term.getvalue()
    assert "m training" in text and "40/250" in text and "update" in text
    assert "[m] training: update" not in text  # no status lines on a terminal
