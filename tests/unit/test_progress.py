"""fairseq_sparse_attn/tools/progress.py: counts read from fairseq's own log lines, the
status line's rate and time left against a hand computation, and the watcher's timing with
a fake clock and a log the test writes."""

import io
import threading

from fairseq_sparse_attn.tools.progress import Watcher, duration, generate_progress, status_line, train_progress

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
    assert line == "[softmax seed 1] training: update 130/250 (52%), 0.58 updates/s, about 3m27s left, 3m44s elapsed"
    line = status_line("rela_g", "generate", 320, 1000, 8.0, what="test")
    assert line == "[rela_g] translating test: sentence 320/1000 (32%), 40.00 sentences/s, about 17s left, 8s elapsed"
    assert status_line("x", "train", 0, 250, 12.0) == "[x] training: starting, 12s elapsed"
    assert status_line("x", "train", 5, None, 10.0) == "[x] training: update 5, 0.50 updates/s, 10s elapsed"
    assert (duration(59.4), duration(60), duration(3725)) == ("59s", "1m00s", "1h02m")
    # the count 130 was reached 24 s ago (fairseq logs every --log-interval updates): rate 130/200 s
    # = 0.65 updates/s, 120 left -> 184.6 s from then, 160.6 s from now
    line = status_line("m", "train", 130, 250, 224.0, stale=24.0)
    assert line == "[m] training: update 130/250 (52%), 0.65 updates/s, about 2m41s left, 3m44s elapsed"


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
    assert "[m] training: update 40/250 (16%), 0.50 updates/s, about 7m00s left, 1m20s elapsed" in lines
    assert w.line() == "[m] training: update 40/250 (16%), 0.50 updates/s, about 7m00s left, 1m20s elapsed"
    now[0] = 190.0  # 10 s on, no new line: the same rate, 10 s less left
    assert w.line() == "[m] training: update 40/250 (16%), 0.50 updates/s, about 6m50s left, 1m30s elapsed"


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
