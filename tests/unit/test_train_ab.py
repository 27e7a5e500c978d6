"""``benchmarks/train_ab.py`` without training: its pairing of blocks, its summary against
a hand count, the sign test, what auto's rule makes of its rounds, and its refusals
(before any work).  The training itself: tests/integration/test_train_ab_runs.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_sparse_attn.attention.backends import triton as tb

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import train_ab  # noqa: E402


def test_a_triton_preset_is_paired_with_its_eager_form():
    assert train_ab.eager_form("rela_g_triton") == "rela_g"
    assert train_ab.eager_form("rela_g_triton_dropout") == "rela_g_dropout"
    assert train_ab.eager_form("reluformer_reg_triton_dropout") == "reluformer_reg_dropout"
    assert train_ab.eager_form("rela_g_triton_base") == "rela_g_base"
    assert train_ab.eager_form("softmax") is None and train_ab.eager_form("rela_g") is None
    # every pair auto's rule reads is a pair the harness forms
    for fused, eager, _, _ in tb.DECIDING_PRESETS:
        assert train_ab.eager_form(fused) == eager


def test_the_sign_test_against_a_hand_count():
    assert tb.sign_test_p(3, 3) == 1 / 8
    assert tb.sign_test_p(0, 3) == 1.0
    assert tb.sign_test_p(5, 6) == pytest.approx(7 / 64)  # C(6,5) + C(6,6) = 7
    assert tb.sign_test_p(26, 40) == pytest.approx(0.0403, abs=5e-4)
    assert tb.sign_test_p(0, 0) == 1.0


def test_auto_s_rule_is_the_sign_test_at_one_eighth():
    """With 3 to 5 rounds the rule is "faster in every one" (what it was before the paired
    blocks); with more, a clear majority."""
    for n in (3, 4, 5):
        assert tb.shows_faster([(2.0, 1.0)] * n)
        assert not tb.shows_faster([(2.0, 1.0)] * (n - 1) + [(1.0, 2.0)])
    assert not tb.shows_faster([(2.0, 1.0)] * 2)  # two rounds decide nothing
    assert tb.shows_faster([(2.0, 1.0)] * 5 + [(1.0, 2.0)])  # 5 of 6: p = 7/64
    assert tb.shows_faster([(2.0, 1.0)] * 26 + [(1.0, 2.0)] * 14)  # 26 of 40: p = 0.04
    assert not tb.shows_faster([(2.0, 1.0)] * 24 + [(1.0, 2.0)] * 16)  # 24 of 40: p = 0.13
    assert not tb.shows_faster([(1.0, 1.0)] * 10)  # ties are not wins


def blocks_of(ups_by_preset):
    """Rounds of blocks as train_ab writes them: [{"round": r, "ups": {preset: ups}}]."""
    n = len(next(iter(ups_by_preset.values())))
    return [{"round": r + 1, "ups": {p: v[r] for p, v in ups_by_preset.items() if v[r] is not None}} for r in range(n)]


def test_the_summary_pairs_blocks_of_the_same_round():
    blocks = blocks_of(
        {
            "softmax": [10.0, 12.0, 11.0, 8.0],
            "rela_g": [9.0, 12.0, 10.0, 8.8],
            "rela_g_triton": [9.5, 11.0, 11.0, None],  # its last block did not run
        }
    )
    summary = train_ab.summarize(blocks, ["softmax", "rela_g", "rela_g_triton"])
    assert summary["softmax"]["ratio_to_softmax"]["median"] == 1.0
    rela_g = summary["rela_g"]["ratio_to_softmax"]
    assert rela_g["rounds"] == 4 and rela_g["median"] == pytest.approx((10 / 11 + 1.0) / 2)  # 0.9, 1.0, 0.909, 1.1
    assert rela_g["min"] == pytest.approx(0.9) and rela_g["max"] == pytest.approx(1.1)
    k = summary["rela_g_triton"]["against_rela_g"]
    assert (k["faster_blocks"], k["blocks"]) == (2, 3)  # 9.5 > 9, 11 < 12, 11 > 10
    assert k["sign_test_p"] == pytest.approx(4 / 8) and not k["shows_faster"]
    assert summary["rela_g_triton"]["ratio_to_softmax"]["rounds"] == 3
    assert summary["rela_g_triton"]["ups_median"] == 11.0
    table = train_ab.format_table(
        {"settings": {"dtype": "fp16", "block_updates": 10}, "blocks": blocks, "summary": summary}
    )
    assert "| rela_g_triton | 11.00 |" in table and "2 of 3, p = 0.5 |" in table


def test_auto_reads_the_paired_blocks_of_a_recorded_result(tmp_path):
    """A recorded result with a train_ab part (train_ab.py's layout: parts -> train_ab ->
    dtype) and a passing kernels part decides where its blocks show the kernels faster."""
    won = [10.0 + (i % 3) for i in range(40)]
    blocks = blocks_of(
        {
            "softmax": [12.0] * 40,
            "rela_g": won,
            # faster in 30 of 40 blocks: p < 1/8
            "rela_g_triton": [w + (0.5 if i < 30 else -0.5) for i, w in enumerate(won)],
            "reluformer": won,
            # faster in 22 of 40: p = 0.32, decides nothing
            "reluformer_triton": [w + (0.5 if i < 22 else -0.5) for i, w in enumerate(won)],
        }
    )
    result = {
        "parts": {"train_ab": {"fp16": {"blocks": blocks}}, "kernels": {"correctness": [{"ok": True}]}},
        "provenance": {"device": "NVIDIA H100 80GB HBM3", "versions": {"triton": "3.6.0"}},
    }
    assert tb.faster_in(result) == {("relu", "fp16")}
    (tmp_path / "bench-gpu.json").write_text(json.dumps(result))
    assert tb.measured_faster(tmp_path) == {("H100", "relu", "fp16"): tb.Measurement("bench-gpu.json", "3.6")}
    # without a passing correctness part, no blocks decide
    result["parts"]["kernels"] = {"correctness": [{"ok": False}]}
    assert tb.faster_in(result) == frozenset()


def run_script(*args):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "train_ab.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--presets", "softmax,rela_x"], "--presets: unknown rela_x"),
        (["--blocks", "2", "--cpu"], "--blocks must be >= 3, got 2"),
        (["--block-updates", "0", "--cpu"], "--block-updates must be >= 1, got 0"),
        (["--data", "/nonexistent", "--cpu"], "--data /nonexistent: no dict.src.txt"),
        (["--warmup-updates", "-1", "--cpu"], "--warmup-updates: must be a count >= 0 or 'epoch', got '-1'"),
        (["--warmup-updates", "half", "--cpu"], "--warmup-updates: must be a count >= 0 or 'epoch', got 'half'"),
        ([], "no CUDA device"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_any_work(tmp_path, args, message):
    p = run_script(*args, "--out", str(tmp_path / "o"))
    assert p.returncode == 2, p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("train_ab.py: error:") and message in last
    assert not (tmp_path / "o").exists()  # nothing written


class FakeRun:
    """Stands in for train_ab.Run (no training): counts updates; ``FAIL`` names a preset
    and the call of ``train`` that raises (0: its set-up)."""

    FAIL = {}

    def __init__(self, preset, argv):
        self.preset, self.calls, self.overflows = preset, 0, 0
        if self.FAIL.get(preset) == 0:
            raise RuntimeError(f"{preset}: set-up failed")

    def epoch_batches(self):
        return {"softmax": 7}.get(self.preset, 5)

    def train(self, updates):
        self.calls += 1
        if self.FAIL.get(self.preset) == self.calls:
            raise FloatingPointError("Minimum loss scale reached (0.0001).")


@pytest.fixture
def fake(monkeypatch, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "dict.src.txt").write_text("w0 1\n")
    monkeypatch.setattr(train_ab, "Run", FakeRun)
    FakeRun.FAIL = {}

    def main(*args):
        out = tmp_path / "out"
        code = train_ab.main(["--cpu", "--dtype", "fp32", "--data", str(tmp_path / "data"), "--out", str(out), *args])
        return code, json.loads((out / "train_ab.json").read_text())["parts"]["train_ab"]["fp32"]

    return main


def test_a_preset_that_fails_leaves_the_others_their_rounds(fake):
    """A diverged kernels run (its 3rd call: warm-up, then two blocks) drops out with its
    reason; the other presets keep every round; the run exits 1 (something failed)."""
    FakeRun.FAIL = {"rela_g_triton": 3}
    code, part = fake("--presets", "rela_g,rela_g_triton", "--blocks", "4")
    assert code == 1
    assert part["failed"] == {"rela_g_triton": "FloatingPointError: Minimum loss scale reached (0.0001)."}
    assert [sorted(b["ups"]) for b in part["blocks"]] == [
        ["rela_g", "rela_g_triton", "softmax"],
        ["rela_g", "softmax"],
        ["rela_g", "softmax"],
        ["rela_g", "softmax"],
    ]
    assert part["summary"]["rela_g"]["ratio_to_softmax"]["rounds"] == 4
    assert part["summary"]["rela_g_triton"]["against_rela_g"]["blocks"] == 1


def test_without_its_baseline_no_round_runs(fake):
    FakeRun.FAIL = {"softmax": 0}  # the baseline's set-up fails: no ratio could be formed
    code, part = fake("--presets", "rela_g", "--blocks", "3")
    assert code == 1 and part["blocks"] == [] and part["summary"] == {}
    assert part["failed"] == {"softmax": "RuntimeError: softmax: set-up failed"}
    FakeRun.FAIL = {}
    code, part = fake("--presets", "rela_g", "--blocks", "3")
    assert code == 0 and len(part["blocks"]) == 3 and part["failed"] == {}


class TimedRun(FakeRun):
    """A FakeRun whose updates take 1 s each on a fake clock, its calls recorded in CALLS."""

    CALLS = []
    NOW = [0.0]

    def train(self, updates):
        super().train(updates)
        self.CALLS.append(self.preset)
        self.NOW[0] += 1.0 * updates


@pytest.fixture
def timed(fake, monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setattr(train_ab, "Run", TimedRun)
    TimedRun.CALLS.clear()
    TimedRun.NOW[0] = 0.0
    clock = SimpleNamespace(monotonic=lambda: TimedRun.NOW[0], perf_counter=lambda: TimedRun.NOW[0])
    monkeypatch.setattr(train_ab, "time", clock)
    return fake


def test_blocks_take_turns_in_alternating_order(timed):
    """Round 1 softmax, rela_g, rela_g_triton; round 2 the reverse; ... (a drift of the
    machine hits every preset alike)."""
    code, part = timed("--presets", "rela_g,rela_g_triton", "--blocks", "3", "--warmup-updates", "1")
    assert code == 0
    order = ["softmax", "rela_g", "rela_g_triton"]
    assert TimedRun.CALLS == order + order + order[::-1] + order  # the warm-up, then 3 rounds


def test_the_warm_up_is_one_epoch_of_each_preset_unless_counted(timed, monkeypatch):
    """By default each preset warms up on one epoch of its batches (its own count), in the
    blocks' order, recorded in the result; ``--warmup-updates N`` warms up N each."""
    sizes = []
    monkeypatch.setattr(
        TimedRun,
        "train",
        lambda self, n: (sizes.append((self.preset, n)), TimedRun.NOW.__setitem__(0, TimedRun.NOW[0] + n)),
    )
    code, part = timed("--presets", "rela_g", "--blocks", "3", "--block-updates", "2")
    assert code == 0 and part["settings"]["warmup_updates"] == "epoch"
    assert sizes[:2] == [("softmax", 7), ("rela_g", 5)] and sizes[2:] == [
        (p, 2) for p in ("softmax", "rela_g", "rela_g", "softmax", "softmax", "rela_g")
    ]
    assert part["warmup_updates"] == {"softmax": 7, "rela_g": 5}
    sizes.clear()
    code, part = timed("--presets", "rela_g", "--blocks", "3", "--warmup-updates", "0")
    assert sizes[:2] == [("softmax", 0), ("rela_g", 0)] and part["warmup_updates"] == {"softmax": 0, "rela_g": 0}


def test_no_round_starts_that_the_budget_would_not_hold(timed):
    """Blocks of 10 s (2 presets): after 2 rounds (40 s) a third would end at 60 s, past
    --budget 45, so it does not start; the time of the set-up and warm-up counts."""
    code, part = timed("--presets", "rela_g", "--blocks", "5", "--block-updates", "10", "--warmup-updates", "0",
                       "--budget", "45")  # fmt: skip
    assert len(part["blocks"]) == 2
    assert [b["ups"] for b in part["blocks"]] == [{"softmax": 1.0, "rela_g": 1.0}] * 2


def test_overflows_are_the_updates_fairseq_skipped():
    """Run.train counts an fp16 overflow when train_step leaves the update count as it was
    (fairseq skips the update and lowers the loss scale)."""
    counts = iter([1, 1, 2, 2])  # the update count after each step

    class Trainer:
        updates = 0

        def get_num_updates(self):
            return self.updates

        def train_step(self, samples):
            self.updates = next(counts)

    run = train_ab.Run.__new__(train_ab.Run)
    run.trainer, run.updates, run.overflows = Trainer(), 0, 0
    run.next_batch = lambda: {}
    run.train(4)  # updates 0->1, 1->1 (skipped), 1->2, 2->2 (skipped)
    assert (run.updates, run.overflows) == (4, 2)


def test_batches_go_on_into_the_next_epoch():
    """next_batch starts the next epoch of the iterator when one ends (a block may span
    epochs of a small corpus)."""
    from types import SimpleNamespace

    epochs = []

    def next_epoch_itr(shuffle):
        epochs.append(shuffle)
        return iter([f"e{len(epochs)}b1", f"e{len(epochs)}b2"])

    run = train_ab.Run.__new__(train_ab.Run)
    run.epoch_itr, run._batches = SimpleNamespace(next_epoch_itr=next_epoch_itr), None
    assert [run.next_batch() for _ in range(5)] == ["e1b1", "e1b2", "e2b1", "e2b2", "e3b1"]
    assert epochs == [True, True, True]
