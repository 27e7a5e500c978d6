"""The GPU scripts' CPU-side behaviour (issue 22.4): refusing cleanly without CUDA, the
fairseq log parsing and round order of ``make bench-gpu``.  No timing here."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_gpu  # noqa: E402

# two train_inner lines of a real `fairseq-train --log-format json --log-interval 2` run
# (fairseq-fixed 0.12.3.1, CPU, the synthetic corpus of bench_gpu.py)
LOG = """\
2026-11-25 13:32:36 | INFO | train_inner | {"epoch": 1, "update": 0.333, "loss": "11.777", "nll_loss": "11.785", "ppl": "3529.36", "wps": "4366.8", "ups": "3.24", "wpb": "1076.5", "bsz": "52", "num_updates": "2", "lr": "1.75e-06", "gnorm": "0.537", "train_wall": "1", "wall": "4"}
2026-11-25 13:32:36 | INFO | train_inner | {"epoch": 1, "update": 0.667, "loss": "11.772", "nll_loss": "11.779", "ppl": "3514.67", "wps": "4575.5", "ups": "3.48", "wpb": "1316.5", "bsz": "64", "num_updates": "4", "lr": "3.5e-06", "gnorm": "0.49", "train_wall": "1", "wall": "4"}
2026-11-25 13:32:37 | INFO | train | {"epoch": 1, "train_loss": "11.77", "ups": "9.99"}
"""


#: LOG as a run whose first epoch ends after update 2 logs it: fairseq's end-of-epoch record
#: (a real one of fairseq-fixed 0.12.3.1, 2026-11-29, its update count set to 2)
EPOCH_END = (
    '2026-11-29 00:13:46 | INFO | train | {"epoch": 1, "train_loss": "11.372", "train_nll_loss": "11.351", '
    '"train_ppl": "2612.91", "train_wps": "356.5", "train_ups": "2.15", "train_wpb": "165.9", "train_bsz": "8", '
    '"train_num_updates": "2", "train_lr": "1.225e-05", "train_gnorm": "7.063", "train_train_wall": "7", '
    '"train_wall": "8"}'
)
RUN_LOG = LOG.replace("\n", "\n" + EPOCH_END + "\n", 1)


def test_parse_ups_reads_train_inner_records_only():
    assert bench_gpu.parse_ups(LOG) == [(2, 3.24), (4, 3.48)]
    assert bench_gpu.run_updates_per_second(bench_gpu.parse_ups(LOG)) == pytest.approx(3.48)
    with pytest.raises(ValueError, match="no log interval"):
        bench_gpu.run_updates_per_second([(2, 3.24)])


def _inner(epoch, updates, ups):
    return (
        f'2026-11-29 00:13:40 | INFO | train_inner | {{"epoch": {epoch}, "update": 0.5, "ups": "{ups}", '
        f'"num_updates": "{updates}", "lr": "1e-05"}}'
    )


def _summary(epoch, updates):
    # the end-of-epoch record as fairseq-fixed 0.12.3.1 writes it (--log-format json)
    return (
        f'2026-11-29 00:13:46 | INFO | train | {{"epoch": {epoch}, "train_loss": "11.372", "train_ups": "2.15", '
        f'"train_num_updates": "{updates}", "train_wall": "8"}}'
    )


def test_the_first_epoch_ends_where_fairseq_s_record_says():
    assert bench_gpu.first_epoch_updates(RUN_LOG) == 2
    assert bench_gpu.steady_updates_per_second(RUN_LOG) == pytest.approx(3.48)
    assert bench_gpu.first_epoch_updates(LOG) is None  # (its summary has no update count)


def test_updates_per_second_are_those_after_the_first_epoch():
    """Epoch 1 ends at update 45 (its summary record); log interval 20: the intervals
    (0, 20], (20, 40], (40, 60] hold first-epoch updates, (60, 80], (80, 100], (100, 120]
    do not, so the rate is their mean (a hand count), not the slow first epoch's."""
    log = "\n".join(
        [_inner(1, 20, 1.0), _inner(1, 40, 5.0), _summary(1, 45), _inner(2, 60, 9.0)]
        + [_inner(2, 80, 14.0), _summary(2, 90), _inner(3, 100, 15.0), _inner(3, 120, 16.0)]
    )
    assert bench_gpu.first_epoch_updates(log) == 45
    assert bench_gpu.steady_updates_per_second(log) == pytest.approx(15.0)
    # an interval that starts exactly where the epoch ends is taken
    assert bench_gpu.run_updates_per_second(bench_gpu.parse_ups(log), after=40) == pytest.approx((9 + 14 + 15 + 16) / 4)


def test_a_run_that_stays_in_its_first_epoch_gives_no_rate():
    log = "\n".join([_inner(1, 20, 1.0), _inner(1, 40, 5.0), _inner(1, 60, 9.0)])
    assert bench_gpu.first_epoch_updates(log) is None
    with pytest.raises(ValueError, match="did not finish its first epoch"):
        bench_gpu.steady_updates_per_second(log)
    short = "\n".join([_inner(1, 20, 1.0), _inner(1, 40, 5.0), _summary(1, 45), _inner(2, 60, 9.0)])
    with pytest.raises(ValueError, match="no log interval starts at or after update 45"):
        bench_gpu.steady_updates_per_second(short)


def test_rounds_alternate_the_order():
    names = ["softmax", "rela_g", "entmax15"]
    assert bench_gpu.alternating(names, 0) == names
    assert bench_gpu.alternating(names, 1) == names[::-1]
    assert bench_gpu.alternating(names, 2) == names


def test_table_marks_missing_runs_not_measured():
    result = {"fp16": {"ratios": {"softmax": {"median": 1.0, "min": 1.0, "max": 1.0, "rounds": 3}, "rela_g": None}}}
    md = bench_gpu.table(result, "NVIDIA H100", "2026-11-25", "abc")
    assert "| rela_g | not measured |" in md and "NVIDIA H100, 2026-11-25, commit abc" in md


def _run(script, *args):
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    import os

    env = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_bench_gpu_refuses_cleanly_without_cuda(tmp_path):
    p = _run("bench_gpu.py", "--out", str(tmp_path / "o"))
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1].startswith("bench-gpu: error: no CUDA device")
    assert not (tmp_path / "o").exists()  # nothing written
    p = _run("bench_gpu.py", "--rounds", "2")
    assert p.returncode == 2 and "--rounds must be >= 3" in p.stderr


def test_gpu_check_refuses_cleanly_without_cuda():
    p = _run("gpu_check.py", "--time-budget", "5")
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1].startswith("gpu_check: error: no CUDA device")


def test_loss_scale_records_and_overflow_notes():
    # the note fairseq's trainer logs on an fp16 overflow (read from its source, so that a
    # fairseq that words it differently fails here rather than counting 0 overflows)
    import fairseq.trainer

    assert "gradient overflow detected" in Path(fairseq.trainer.__file__).read_text()
    log = (
        LOG.replace('"gnorm"', '"loss_scale": "128", "gnorm"', 1)
        + "2026-11-25 13:32:38 | INFO | fairseq.trainer | NOTE: gradient overflow detected, ignoring gradient, "
        "setting loss scale to: 64.0\n"
        + LOG.splitlines()[1].replace('"num_updates": "4"', '"num_updates": "6", "loss_scale": "64"')
        + "\n"
    )
    scales, overflows = bench_gpu.parse_loss_scale(log)
    assert scales == [(2, 128.0), (6, 64.0)]
    assert overflows == 1


def test_data_languages_names_the_folder(tmp_path):
    (tmp_path / "train.en-de.en.bin").write_bytes(b"")
    assert bench_gpu.data_languages(tmp_path) == ("en", "de")
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "empty")):
        (tmp_path / "empty").mkdir()
        bench_gpu.data_languages(tmp_path / "empty")


@pytest.mark.kernels
def test_kernel_checks_launch_what_the_serving_table_refuses(monkeypatch):
    """The CUDA checks of gpu_kernels.py test the kernels themselves: inside them a dtype
    that kernels.served refuses on CUDA is launched (the check is how it gets served
    again); outside, the refusal stands."""
    import gpu_kernels
    import torch

    from fairseq_sparse_attn.kernels import served

    monkeypatch.setitem(served.CUDA_NOT_SERVED, torch.float32, "float32 on CUDA (a failed check)")
    assert served.unserved("cuda", torch.float32, 64) is not None
    from fairseq_sparse_attn.kernels import relu_attention as ra

    with gpu_kernels.every_dtype_served():
        assert served.unserved("cuda", torch.float32, 64) is None
        q = torch.randn(1, 1, 4, 32)
        ra.relu_attention(q, q, q)  # a plan made while every dtype is served
        assert ra._FWD_PLANS
    assert served.unserved("cuda", torch.float32, 64) == served.CUDA_NOT_SERVED[torch.float32]
    assert not ra._FWD_PLANS  # forgotten: a later call checks against the table again


@pytest.mark.kernels
def test_fp32_probe_checks_each_tile_with_both_precisions(monkeypatch):
    """--parts fp32probe (interpreter, one small tile): a row per tile and precision, each
    with the forward's error for every case, and the shipped tiles put back afterwards."""
    import gpu_kernels

    from fairseq_sparse_attn.kernels import relu_attention as ra

    monkeypatch.setattr(gpu_kernels, "FP32_PROBE", {32: [(16, 16, 4, 1)]})
    monkeypatch.setattr(gpu_kernels, "ATTENTION_CASES", {"cross_padded": (2, 1, 5, 7, False, None, True)})
    monkeypatch.setattr(ra, "LAUNCH_LOG", [])
    shipped = dict(ra._TILES)
    rows = gpu_kernels.fp32_probe("cpu")
    # the probed tile and each precision reached the forward's launches (the interpreter
    # ignores input_precision, so the errors alone could not show it)
    forward = [
        (c["BLOCK_M"], c["BLOCK_N"], warps, stages, c["PRECISION"])
        for name, _, c, warps, stages, _ in ra.LAUNCH_LOG
        if name.startswith("relu_attention_fwd_d32_fp32")
    ]
    # each case runs the forward three times (the check's relaunch, the rerun of the diagnosis)
    assert forward == [(16, 16, 4, 1, "ieee")] * 3 + [(16, 16, 4, 1, "tf32")] * 3
    assert [(r["head_dim"], r["tile"], r["precision"]) for r in rows] == [
        (32, (16, 16, 4, 1), "ieee"),
        (32, (16, 16, 4, 1), "tf32"),
    ]
    assert all(r["ok"] and set(r["out_errors"]) == {"cross_padded"} for r in rows)
    assert all(r["diagnosis"]["cross_padded"]["wrong_rows"] == 0 for r in rows)
    assert all(r["diagnosis"]["cross_padded"]["repeat_identical"] for r in rows)
    assert (
        ra._TILES == shipped
        and ra._make_config("relu_attention_fwd", ra.torch.float32, 32)["constexprs"]["PRECISION"] == "ieee"
    )


@pytest.mark.kernels
def test_the_diagnosis_finds_the_wrong_rows_and_a_moving_error(monkeypatch):
    """check_attention(diagnose=True) on a forward made wrong at one head and query position
    names those rows; a forward whose result changes from run to run is reported as moving."""
    import gpu_kernels

    from fairseq_sparse_attn.kernels import relu_attention as ra

    right = ra.relu_attention

    def wrong_at_head_1_position_3(*args, **kwargs):
        out = right(*args, **kwargs)
        bump = torch.zeros_like(out)
        bump[:, 1, 3] = 5.0
        return out + bump

    monkeypatch.setattr(ra, "relu_attention", wrong_at_head_1_position_3)
    r = gpu_kernels.check_attention("cpu", 32, "fp32", "self_unpadded", seed=3, diagnose=True)
    assert not r["ok"]
    assert r["diagnosis"] == {
        "rows": 2 * 2 * 40,
        "wrong_rows": 2,
        "wrong_query_positions": [3],
        "wrong_heads": [1],
        "wrong_batch_entries": [0, 1],
        "repeat_identical": True,
    }
    calls = []

    def moving(*args, **kwargs):
        calls.append(1)
        return right(*args, **kwargs) * (1.0 + 1e-3 * len(calls))

    monkeypatch.setattr(ra, "relu_attention", moving)
    r = gpu_kernels.check_attention("cpu", 32, "fp32", "self_unpadded", seed=3, diagnose=True)
    assert r["diagnosis"]["repeat_identical"] is False


@pytest.mark.kernels
def test_correctness_checks_both_backwards_in_half_precision(monkeypatch):
    """The CUDA correctness part checks fp16/bf16 through the one-pass backward (the default)
    and the two passes, each reaching its own kernels; fp32 has the two passes only."""
    import gpu_kernels

    from fairseq_sparse_attn.kernels import relu_attention as ra

    monkeypatch.setattr(gpu_kernels, "ATTENTION_CASES", {"cross_padded": (2, 1, 5, 7, False, 1.0, True)})
    monkeypatch.setattr(ra, "LAUNCH_LOG", [])
    monkeypatch.setattr(gpu_kernels, "check_norm", lambda *a: {"ok": True, "errors": {"out": 0.0}, "tolerance": 1})
    monkeypatch.setattr(gpu_kernels, "DROPOUT_CASES", ())  # (their own tests below)
    monkeypatch.setattr(gpu_kernels, "ROW_SUMS_CASES", ())
    rows = gpu_kernels._correctness("cpu", [32, 256], ["fp16", "fp32"], 0, None, lambda: None)
    attention = [(r["head_dim"], r["dtype"], r["backward"], r["ok"]) for r in rows if r["kernel"] == "relu_attention"]
    assert attention == [
        (32, "fp16", "default", True),
        (32, "fp16", "two_pass", True),
        (32, "fp16", "long_tiles", True),  # the long tier's forward and dQ pass
        (32, "fp32", "default", True),
        (256, "fp16", "default", True),  # the long tier has no tiles at head dim 256
        (256, "fp16", "two_pass", True),
        (256, "fp32", "default", True),
    ]
    names = [name for name, *_ in ra.LAUNCH_LOG]
    kernels = [name.rsplit("_d", 1)[0] for name in names]
    two_passes = ["relu_attention_fwd", "relu_attention_bwd_dkdv", "relu_attention_bwd_dq"]
    one_pass = ["relu_attention_fwd", "relu_attention_bwd"]
    # every check calls the kernels twice (the relaunch): each form's launches come in pairs
    twice = lambda form: form * 2  # noqa: E731
    assert kernels == twice(one_pass) + twice(two_passes) * 3 + twice(one_pass) + twice(two_passes) * 2
    long_form = [
        "relu_attention_fwd_d32_fp16_long",
        "relu_attention_bwd_dkdv_d32_fp16",
        "relu_attention_bwd_dq_d32_fp16_long",
    ]
    assert names[10:16] == long_form * 2  # fp32: the two passes
    assert not any(name.endswith("_long") for name in names[:10] + names[16:])
    assert not torch.are_deterministic_algorithms_enabled() and ra.LONG_FROM == 1024


@pytest.mark.kernels
def test_the_sweep_puts_each_tile_in_the_tier_its_length_takes(monkeypatch):
    """--parts sweep at a length that takes the long tier and one that does not: each swept
    tile is checked once and reaches the short check and both timed calls alike (its forward
    a long-tier launch on that tile at the long length, a sentence-tier launch at the short
    one), one row per tile and length, the shipped flag names the tile each length takes as
    shipped, and both tile tables are put back.  The timing itself needs CUDA: a stand-in
    runs the call it would time."""
    import gpu_kernels

    from fairseq_sparse_attn.kernels import relu_attention as ra

    monkeypatch.setattr(ra, "LONG_FROM", 24)
    monkeypatch.setattr(
        gpu_kernels, "SWEEP", {"relu_attention_fwd": [ra._LONG_TILES[("relu_attention_fwd", 32)], (16, 16, 4, 1)]}
    )
    monkeypatch.setattr(gpu_kernels, "ATTENTION_CASES", {"causal_self_scaled": (1, 1, 10, 10, True, 1.5, True)})
    monkeypatch.setattr(ra, "LAUNCH_LOG", [])
    sentence, long = dict(ra._TILES), dict(ra._LONG_TILES)
    timed = []

    def time_case(device, dtype_name, length, tokens, heads, d, causal, two_pass=False, one_pass=False):
        ra.LAUNCH_LOG.clear()
        q = torch.randn(1, heads, length, d).half()
        with torch.no_grad():
            ra.relu_attention(q, q, q)
        name, _, c, warps, stages, _ = ra.LAUNCH_LOG[0]
        timed.append((name, (c["BLOCK_M"], c["BLOCK_N"], warps, stages)))
        return {"relu_triton_ms": [1.0], "flash_ms": [1.0], "speedup_vs_flash": {"mean": 1.0}}

    monkeypatch.setattr(gpu_kernels, "time_case", time_case)
    checks = []
    real_check = gpu_kernels.check_attention
    monkeypatch.setattr(gpu_kernels, "check_attention", lambda *a, **k: checks.append(a) or real_check(*a, **k))
    rows = gpu_kernels.sweep("cpu", d=32, lengths=(24, 12), heads=1)
    long_tile, sentence_tile = long[("relu_attention_fwd", 32)], sentence[("relu_attention_fwd", True, 32)]
    assert [(r["tile"], r["length"], r["ok"], r["shipped"]) for r in rows] == [
        (long_tile, 24, True, True),
        (long_tile, 12, True, long_tile == sentence_tile),
        ((16, 16, 4, 1), 24, True, False),
        ((16, 16, 4, 1), 12, True, False),
    ]
    assert len(checks) == 2  # one per tile
    assert timed == [("relu_attention_fwd_d32_fp16" + ("_long" if r["length"] == 24 else ""), r["tile"]) for r in rows]
    assert ra._TILES == sentence and ra._LONG_TILES == long


def test_two_pass_backward_restores_the_settings():
    import gpu_kernels
    from torch.utils import deterministic

    fill = deterministic.fill_uninitialized_memory
    with gpu_kernels.two_pass_backward():
        assert torch.are_deterministic_algorithms_enabled() and not deterministic.fill_uninitialized_memory
    assert not torch.are_deterministic_algorithms_enabled() and deterministic.fill_uninitialized_memory == fill


@pytest.mark.kernels
def test_one_pass_backward_times_the_one_pass_at_any_length(monkeypatch):
    """one_pass_backward lifts TWO_PASS_FROM_KEYS for the block (the timing part's
    relu_triton_one_pass_ms and the sweep of the one-pass tiles time that kernel even at the
    lengths that ship the two passes), then puts it back."""
    import gpu_kernels

    from fairseq_sparse_attn.kernels import relu_attention as ra

    monkeypatch.setattr(ra, "TWO_PASS_FROM_KEYS", 4)  # the 6 keys below are "long"
    q, k, v = (torch.randn(1, 1, 6, 32).half().requires_grad_() for _ in range(3))

    def backward_kernels():
        ra.LAUNCH_LOG = []
        ra.relu_attention(q, k, v).sum().backward()
        return sorted(name.rsplit("_d", 1)[0] for name, *_ in ra.LAUNCH_LOG[1:])

    monkeypatch.setattr(ra, "LAUNCH_LOG", [])
    assert backward_kernels() == ["relu_attention_bwd_dkdv", "relu_attention_bwd_dq"]
    with gpu_kernels.one_pass_backward():
        assert backward_kernels() == ["relu_attention_bwd"]
    assert ra.TWO_PASS_FROM_KEYS == 4


def test_the_eager_rela_g_names_its_backend():
    """auto takes the triton backend where bench_gpu's rela_g_triton beat rela_g, so rela_g
    names the eager backend (an auto rela_g would compare the kernels with themselves
    there); the name is one fairseq-train accepts, and bench_host's eager rows name it too."""
    import bench_host

    from fairseq_sparse_attn.options import schema

    assert bench_gpu.PRESETS["rela_g"][-2:] == ["--attn-backend", "materialized"]
    assert bench_gpu.PRESETS["rela_g_triton"][-2:] == ["--attn-backend", "triton"]
    assert "materialized" in schema._backends()
    for name in ("rela_g", "rela_i", "reluformer"):
        assert bench_host.PRESETS[name][1]["attn_backend"] == "materialized"
        assert bench_host.PRESETS[f"{name}_triton"][1]["attn_backend"] == "triton"


@pytest.mark.kernels
def test_each_length_is_timed_on_both_tiers(monkeypatch):
    """The timing part times every length on the tier it takes and on the other one where
    the long tier has tiles (fp16/bf16): the sentence tiles from LONG_FROM tokens, the long
    tier's below, each key naming the tier its calls ran; fp32 (no long tiles) has neither.
    ``do_bench`` needs CUDA: a stand-in runs the step once and reads which forward ran."""
    import gpu_kernels
    import triton.testing

    from fairseq_sparse_attn.kernels import relu_attention as ra

    monkeypatch.setattr(ra, "LONG_FROM", 6)
    forwards = []

    def do_bench(step, **kwargs):
        ra.LAUNCH_LOG = []
        step()
        forwards.extend(name for name, *_ in ra.LAUNCH_LOG if name.startswith("relu_attention_fwd"))
        ra.LAUNCH_LOG = None
        return 1.0

    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    monkeypatch.setattr(ra, "LAUNCH_LOG", None)

    def timed(dtype_name, length):
        forwards.clear()
        r = gpu_kernels.time_case("cpu", dtype_name, length, length, 1, 32, causal=False)
        assert "error" not in r, r.get("error")
        return {key for key in r if key.endswith("tiles_ms")}, list(forwards)

    def order(shipped, other):  # two rounds, each backward form, the other tier twice, forward only
        return [shipped] * 4 + [other] * 2 + [shipped]

    sentence, long = "relu_attention_fwd_d32_fp16", "relu_attention_fwd_d32_fp16_long"
    keys, runs = timed("fp16", 6)  # long: shipped on the long tier, also on the sentence tiles
    assert keys == {"relu_triton_sentence_tiles_ms"} and runs == order(long, sentence)
    keys, runs = timed("fp16", 5)  # short: shipped on the sentence tiles, also on the long tier
    assert keys == {"relu_triton_long_tiles_ms"} and runs == order(sentence, long)
    keys, runs = timed("fp32", 6)
    assert keys == set() and not any(name.endswith("_long") for name in runs)
    assert ra.LONG_FROM == 6


@pytest.mark.kernels
def test_graph_timing_replays_the_shipped_steps_and_a_capture_failure_keeps_the_other_times(monkeypatch):
    """time_case(graphs=True) also times flash's and the kernels' forward+backward from a
    CUDA graph (do_bench_cudagraph: the GPU's time without the host's), the kernels in the
    shipped backward; a step that cannot be captured is recorded as graph_error, beside the
    times that were measured.  CUDA is stubbed: each bench runs its step once here."""
    import gpu_kernels
    import triton.testing

    from fairseq_sparse_attn.kernels import relu_attention as ra

    benched = []

    def bench(step, **kwargs):
        ra.LAUNCH_LOG = []
        step()
        benched.append(sorted({name.rsplit("_d", 1)[0] for name, *_ in ra.LAUNCH_LOG}))
        ra.LAUNCH_LOG = None
        return 1.0

    graph_times = iter([2.0, 4.0])

    def bench_graph(step, **kwargs):
        bench(step)
        return next(graph_times)

    monkeypatch.setattr(triton.testing, "do_bench", bench)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", bench_graph)
    monkeypatch.setattr(ra, "LAUNCH_LOG", None)
    r = gpu_kernels.time_case("cpu", "fp16", 6, 6, 1, 32, causal=False, graphs=True)
    assert "error" not in r and r["flash_graph_ms"] == 2.0 and r["relu_triton_graph_ms"] == 4.0
    assert r[
        "graph_speedup_vs_flash"
    ] == 0.5 and "CUDA graph: flash 2.000, relu-triton 4.000 ms" in gpu_kernels.fmt_time(r)
    assert benched[-2:] == [[], ["relu_attention_bwd", "relu_attention_fwd"]]  # flash, then the shipped one pass

    def no_capture(step, **kwargs):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", no_capture)
    r = gpu_kernels.time_case("cpu", "fp16", 6, 6, 1, 32, causal=False, graphs=True)
    assert "error" not in r and r["speedup_vs_flash"] and "flash_graph_ms" not in r
    assert r["graph_error"].startswith("RuntimeError: operation not permitted")
    assert "CUDA graph: RuntimeError" in gpu_kernels.fmt_time(r)
    assert "graph" not in "".join(gpu_kernels.time_case("cpu", "fp16", 6, 6, 1, 32, causal=False))


@pytest.mark.kernels
@pytest.mark.parametrize("form", ["two_pass", "one_pass"])
def test_a_forced_backward_form_is_timed_in_every_bench(monkeypatch, form):
    """time_case(two_pass=True) / (one_pass=True), as the sweep calls it for the backward's
    tiles: the forced form is entered afresh for each timed step (a context manager made
    once could be entered once: every backward row of the sweep ended in an error), and
    each step runs that backward."""
    import gpu_kernels
    import triton.testing

    from fairseq_sparse_attn.kernels import relu_attention as ra

    backwards = []

    def bench(step, **kwargs):
        ra.LAUNCH_LOG = []
        step()
        backwards.append(sorted({n.rsplit("_d", 1)[0] for n, *_ in ra.LAUNCH_LOG} - {"relu_attention_fwd"}))
        ra.LAUNCH_LOG = None
        return 1.0

    monkeypatch.setattr(triton.testing, "do_bench", bench)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", bench)
    monkeypatch.setattr(ra, "LAUNCH_LOG", None)
    r = gpu_kernels.time_case("cpu", "fp16", 6, 6, 1, 32, causal=False, graphs=True, **{form: True})
    assert "error" not in r and "graph_error" not in r, r
    want = ["relu_attention_bwd"] if form == "one_pass" else ["relu_attention_bwd_dkdv", "relu_attention_bwd_dq"]
    timed_with_backward = [b for b in backwards if b]
    assert timed_with_backward == [want] * 3  # two rounds and the graph replay (flash's steps launch no kernel of ours)


def test_timing_adds_the_graph_times_in_a_second_pass_and_stops_capturing_after_a_failure(monkeypatch):
    """timing(graphs=True): every case's eager times first (saved as each ends), then each
    row gets its CUDA-graph times; after a failed capture the later rows are not captured
    (said in their graph_error), and no eager figure is touched."""
    import gpu_kernels

    calls = []

    def time_case(device, dtype_name, length, tokens, heads, d, causal, two_pass=False, one_pass=False, graphs=False):
        calls.append((length, causal, graphs))
        if graphs == "only":
            if length == 16 and causal:
                return {"graph_error": "RuntimeError: capture failed"}
            return {"flash_graph_ms": 1.0, "relu_triton_graph_ms": 2.0, "graph_speedup_vs_flash": 0.5}
        return {"dtype": dtype_name, "length": length, "batch": 1, "causal": causal, "flash_ms": [1.0],
                "relu_triton_ms": [1.0], "speedup_vs_flash": {"mean": 1.0, "min": 1.0, "max": 1.0},
                "fwd_speedup_vs_flash": 1.0}  # fmt: skip

    monkeypatch.setattr(gpu_kernels, "time_case", time_case)
    saved = []
    rows = gpu_kernels.timing("cuda", ["fp16"], (8, 16, 32), 32, 1, 32, save=lambda: saved.append(1))
    assert calls[:6] == [(n, c, False) for n in (8, 16, 32) for c in (False, True)]
    assert calls[6:] == [(8, False, "only"), (8, True, "only"), (16, False, "only"), (16, True, "only")]
    assert [r.get("graph_speedup_vs_flash") for r in rows] == [0.5, 0.5, 0.5, None, None, None]
    assert rows[3]["graph_error"] == "RuntimeError: capture failed"
    assert all(r["graph_error"].startswith("not captured after an earlier capture failed") for r in rows[4:])
    assert all(r["flash_ms"] == [1.0] for r in rows) and len(saved) == 12
    calls.clear()
    gpu_kernels.timing("cpu", ["fp16"], (8,), 8, 1, 32, graphs=False)
    assert calls == [(8, False, False), (8, True, False)]


@pytest.mark.kernels
def test_correctness_shards_split_the_checks_by_configuration(monkeypatch):
    """--shard K/N: N processes run the correctness checks between them, each (head dim,
    dtype) group (its kernels' configurations, compiled once) in one shard only, the norms'
    checks as one more group; together exactly the unsharded run's checks, with the same
    seeds (fresh inputs per check, the same inputs as one process would draw)."""
    import gpu_kernels

    def check_attention(device, d, dt, case, seed, diagnose=False, dropout_p=0.0, row_sums=False):
        return {"ok": True, "errors": {"out": 0.0}, "tolerance": 1, "seed": seed}

    def check_norm(device, dt, gated, seed):
        return {"ok": True, "errors": {"out": 0.0}, "tolerance": 1, "seed": seed}

    monkeypatch.setattr(gpu_kernels, "check_attention", check_attention)
    monkeypatch.setattr(gpu_kernels, "check_norm", check_norm)

    def run(shard):
        rows = gpu_kernels.correctness("cpu", [32, 64, 128, 256], ["fp32", "fp16", "bf16"], shard=shard)
        return [
            (r["kernel"], r.get("head_dim"), r["dtype"], r.get("case"), r.get("backward"), r.get("dropout"))
            + (r.get("row_sums"), r["seed"])
            for r in rows
        ]

    whole = run((0, 1))
    shards = [run((k, 4)) for k in range(4)]
    assert sorted(sum(shards, [])) == sorted(whole) and len(whole) > 100
    groups = [{(kernel, d, dt) if kernel == "relu_attention" else "norms" for kernel, d, dt, *_ in s} for s in shards]
    assert all(groups) and sum(len(g) for g in groups) == len(set().union(*groups)) == 4 * 3 + 1
    assert gpu_kernels.main(["--shard", "4/4", "--device", "cpu"]) == 2  # K must be below N
    for bad in ("", "1024,x", "0"):  # before any work
        assert gpu_kernels.main(["--parts", "sweep", "--sweep-lengths", bad, "--device", "cpu"]) == 2


def test_a_train_run_that_would_be_cut_off_is_not_started(monkeypatch, tmp_path):
    """The train part starts a round only while the budget left holds the whole round (the
    median run time of the runs that ended times the presets: a round cut off in the middle
    leaves runs without the same round's softmax, which give no ratio), and a run only while
    the budget left exceeds the median time; it appends each run to the progress file as it
    ends (a call cut off keeps them).  A fake clock: each fairseq-train takes 30 s."""
    import json
    import types

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(bench_gpu.time, "monotonic", lambda: clock.now)

    def run(cmd, **kwargs):
        clock.now += 30
        return subprocess.CompletedProcess(cmd, 0, stdout=RUN_LOG, stderr="")

    monkeypatch.setattr(bench_gpu.subprocess, "run", run)
    args = types.SimpleNamespace(
        presets=["softmax", "rela_g"], dtypes=["bf16"], rounds=3, max_update=120, log_interval=2, max_tokens=4096
    )
    budget = bench_gpu.Budget(100)  # three runs of 30 s fit, but not a second round of two
    progress = tmp_path / "train.jsonl"
    out = bench_gpu.train_part(args, budget, tmp_path, progress)
    runs = out["bf16"]["runs"]
    assert runs == {
        "softmax": [pytest.approx(runs["softmax"][0]), None, None],
        "rela_g": [runs["rela_g"][0], None, None],
    }
    assert [json.loads(line)["preset"] for line in progress.read_text().splitlines()] == ["softmax", "rela_g"]
    assert clock.now == 60  # (before: a third run, rela_g of round 2 without its softmax)
    clock.now = 0.0
    out = bench_gpu.train_part(args, bench_gpu.Budget(130), tmp_path)  # two whole rounds fit
    assert [x is not None for x in out["bf16"]["runs"]["softmax"]] == [True, True, False]
    assert clock.now == 120
    # the next dtype's first round must fit as well (it started whatever was left)
    clock.now = 0.0
    args.dtypes = ["fp16", "bf16"]
    out = bench_gpu.train_part(args, bench_gpu.Budget(150), tmp_path)  # fp16's 2 rounds, then 30 s
    assert [x is not None for x in out["fp16"]["runs"]["softmax"]] == [True, True, False]
    assert out["bf16"]["runs"] == {"softmax": [None] * 3, "rela_g": [None] * 3} and clock.now == 120
    assert bench_gpu.expected_run_seconds([]) == 0 and bench_gpu.expected_run_seconds([30, 10, 40]) == 30


def test_dropout_and_base_presets_are_divided_by_their_own_softmax(monkeypatch, tmp_path):
    """``*_dropout`` runs (attention dropout 0.1: auto's "+dropout" settings) are divided by
    softmax with the same dropout, ``*_base`` runs (transformer_wmt_en_de's size) by stock
    transformer_wmt_en_de, the others by softmax; the ratios are what faster_in reads.  A
    fake fairseq-train whose updates/s depends on the preset's flags."""
    import types

    from fairseq_sparse_attn.attention.backends import triton as tb

    assert bench_gpu.baseline("rela_g_triton_dropout") == "softmax_dropout"
    assert bench_gpu.baseline("rela_g_base") == "softmax_base" and bench_gpu.baseline("rela_i") == "softmax"
    for name, flags in bench_gpu.PRESETS.items():  # each group's runs differ from the plain ones in that only
        if name.endswith("_dropout") and not name.startswith("reluformer_reg"):  # (their own test below)
            assert flags[-2:] == ["--attention-dropout", "0.1"] and flags[:-2] == bench_gpu.PRESETS[name[:-8]]
        if name.endswith("_base"):
            assert "wmt_en_de" in flags[1] and flags[2:] == bench_gpu.PRESETS[name[:-5]][2:]
    speed = {"transformer_iwslt_de_en": 10.0, "rela_transformer_iwslt_de_en": 9.0, "transformer_wmt_en_de": 8.0}
    speed["rela_transformer_wmt_en_de"] = 8.8

    def run(cmd, **kwargs):
        ups = speed[cmd[cmd.index("--arch") + 1]] / (2 if "--attention-dropout" in cmd else 1)
        ups *= 1.1 if "triton" in cmd else 1.0
        log = "\n".join(f'train_inner | {{"num_updates": "{u}", "ups": "{ups}"}}' for u in (20, 40, 60))
        log = log.replace("\n", '\n| train | {"epoch": 1, "train_num_updates": "20"}\n', 1)  # epoch 1: 20 updates
        return subprocess.CompletedProcess(cmd, 0, stdout=log, stderr="")

    monkeypatch.setattr(bench_gpu.subprocess, "run", run)
    presets = ["softmax_dropout", "rela_g_dropout", "rela_g_triton_dropout", "softmax_base", "rela_g_base"]
    args = types.SimpleNamespace(presets=presets, dtypes=["fp16"], rounds=3, max_update=60, log_interval=20,
                                 max_tokens=4096)  # fmt: skip
    train = bench_gpu.train_part(args, bench_gpu.Budget(1000), tmp_path)["fp16"]
    assert train["window"] == bench_gpu.AFTER_FIRST_EPOCH  # what the README's line says of it
    ratios = train["ratios"]
    assert ratios["rela_g_dropout"]["median"] == pytest.approx(0.9)
    assert ratios["rela_g_triton_dropout"]["median"] == pytest.approx(0.99)
    assert ratios["rela_g_base"]["median"] == pytest.approx(1.1)
    result = {"parts": {"train": {"fp16": train}, "kernels": {"correctness": [{"ok": True}]}}}
    assert tb.faster_in(result) == {("relu", "fp16+dropout")}


@pytest.mark.kernels
def test_correctness_checks_the_dropout_forms_against_the_numpy_philox(monkeypatch):
    """The cases of DROPOUT_CASES are checked again with attention dropout, through every
    backward form, against philox_reference's decisions (so the first GPU run checks the
    compiled tl.philox against them): here through the interpreter, where they pass; with a
    reference that drops other weights, they fail."""
    import gpu_kernels
    import philox_reference

    from fairseq_sparse_attn.kernels import relu_attention as ra

    monkeypatch.setattr(gpu_kernels, "ATTENTION_CASES", {"cross_padded": (2, 2, 9, 13, False, 1.0, True)})
    monkeypatch.setattr(ra, "LAUNCH_LOG", [])
    monkeypatch.setattr(gpu_kernels, "check_norm", lambda *a: {"ok": True, "errors": {"out": 0.0}, "tolerance": 1})
    monkeypatch.setattr(gpu_kernels, "ROW_SUMS_CASES", ())  # (their own test below)
    rows = gpu_kernels._correctness("cpu", [32], ["fp16"], 0, None, lambda: None)
    attention = [(r["backward"], r["dropout"], r["ok"]) for r in rows if r["kernel"] == "relu_attention"]
    forms = ("default", "two_pass", "long_tiles")
    assert attention == [(b, 0.0, True) for b in forms] + [(b, gpu_kernels.DROPOUT_P, True) for b in forms]
    # one pass, two passes, long; each call twice (the check's relaunch)
    assert sum(name.endswith("_dropout") for name, *_ in ra.LAUNCH_LOG) == 2 * (2 + 3 + 3)
    real = philox_reference.keep_mask
    monkeypatch.setattr(philox_reference, "keep_mask", lambda seed, *a: real(seed + 1, *a))
    wrong = gpu_kernels.check_attention("cpu", 32, "fp16", "cross_padded", 5, dropout_p=0.3)
    assert not wrong["ok"] and wrong["errors"]["out"] > 0.1


@pytest.mark.kernels
def test_correctness_checks_the_row_sums_forms(monkeypatch):
    """The cases of ROW_SUMS_CASES are checked again with the row sums (a loss of the output
    and both sums), without and with dropout, through every backward form, launching the
    ``_rowsums`` forms; against a reference whose entropy term is wrong, they fail."""
    import gpu_kernels

    from fairseq_sparse_attn.kernels import relu_attention as ra

    monkeypatch.setattr(gpu_kernels, "ATTENTION_CASES", {"cross_padded": (2, 2, 9, 13, False, 1.0, True)})
    monkeypatch.setattr(gpu_kernels, "DROPOUT_CASES", ())
    monkeypatch.setattr(ra, "LAUNCH_LOG", [])
    monkeypatch.setattr(gpu_kernels, "check_norm", lambda *a: {"ok": True, "errors": {"out": 0.0}, "tolerance": 1})
    rows = gpu_kernels._correctness("cpu", [32], ["fp16"], 0, None, lambda: None)
    attention = [(r["backward"], r["dropout"], r["row_sums"], r["ok"]) for r in rows if r["kernel"] == "relu_attention"]
    forms = ("default", "two_pass", "long_tiles")
    p = gpu_kernels.DROPOUT_P
    assert attention == [(b, 0.0, False, True) for b in forms] + [
        (b, drop, True, True) for drop in (0.0, p) for b in forms
    ]
    assert all(set(r["errors"]) == {"out", "wsum", "wlogw", "dq", "dk", "dv"} for r in rows if r.get("row_sums"))
    assert sum(name.endswith("_rowsums") for name, *_ in ra.LAUNCH_LOG) == 2 * 2 * (2 + 3 + 3)  # (the relaunch)
    real = gpu_kernels.plain_relu_attention

    def wrong_entropy(*args, row_sums=False):
        out = real(*args, row_sums=row_sums)
        return (out[0], out[1], 1.1 * out[2]) if row_sums else out

    monkeypatch.setattr(gpu_kernels, "plain_relu_attention", wrong_entropy)
    wrong = gpu_kernels.check_attention("cpu", 32, "fp16", "cross_padded", 5, row_sums=True)
    assert not wrong["ok"] and wrong["errors"]["wlogw"] > 0.05


def test_the_regularized_reluformer_presets_decide_the_row_sums_setting(monkeypatch, tmp_path):
    """``reluformer_reg`` / ``reluformer_reg_dropout`` (eager) and their ``_triton`` forms
    train with ReLUFormer's regularized criterion (named once in the command, in place of the
    default), the second pair with attention dropout 0.1, divided by softmax with the same
    dropout; faster_in reads them as the "+rowsums" and "+dropout+rowsums" settings, which
    auto looks up for a call with row sums."""
    import types

    from fairseq_sparse_attn.attention.backends import triton as tb

    assert bench_gpu.baseline("reluformer_reg_triton_dropout") == "softmax_dropout"
    args = types.SimpleNamespace(max_tokens=4096, max_update=60, log_interval=20, seed=1)
    assert bench_gpu.baseline("reluformer_reg_triton") == "softmax"
    for preset in (
        "reluformer_reg",
        "reluformer_reg_triton",
        "reluformer_reg_dropout",
        "reluformer_reg_triton_dropout",
    ):
        cmd = bench_gpu.train_command(tmp_path, preset, "fp16", args)
        assert cmd.count("--criterion") == 1 and cmd[cmd.index("--criterion") + 1] == bench_gpu.REGULARIZED
        assert cmd[cmd.index("--attn-backend") + 1] == ("triton" if "triton" in preset else "materialized")
        assert ("--attention-dropout" in cmd) == preset.endswith("_dropout") and "reluformer_iwslt_de_en" in cmd
        if preset.endswith("_dropout"):
            assert cmd[cmd.index("--attention-dropout") + 1] == "0.1"
    plain = bench_gpu.train_command(tmp_path, "reluformer", "fp16", args)
    assert plain[plain.index("--criterion") + 1] == "label_smoothed_cross_entropy"

    runs = {"reluformer_reg_dropout": [8.0] * 3, "reluformer_reg_triton_dropout": [9.0] * 3}
    runs.update(reluformer_reg=[9.0] * 3, reluformer_reg_triton=[8.5] * 3)  # slower without dropout
    kernels = {"correctness": [{"ok": True}]}
    result = {"parts": {"train": {"bf16": {"runs": runs}}, "kernels": kernels}, "provenance": {"device": "NVIDIA H200"}}
    assert tb.faster_in(result) == {("relu_scaled", "bf16+dropout+rowsums")}
    runs["reluformer_reg_triton"] = [9.5] * 3
    assert tb.faster_in(result) == {("relu_scaled", "bf16+rowsums"), ("relu_scaled", "bf16+dropout+rowsums")}
    assert tb.measured_setting(torch.bfloat16, True, True) == "bf16+dropout+rowsums"


def test_merged_correctness_is_complete_only_when_every_shard_ran_its_plan(tmp_path):
    """gpu_session.sh merges the correctness shards (gpu_kernels.merge_results).  Each shard
    writes how many checks it planned before the first: a shard cut off by its time limit
    ran fewer, one that wrote nothing planned an unknown number, and either way the part is
    not complete (correctness_ok false: auto's kernels_verified refuses the result; the
    README says it was cut off).  Before, "N of N checks pass" counted only what ran."""
    import json
    import runpy

    import gpu_kernels

    from fairseq_sparse_attn.attention.backends import triton as tb

    readme = runpy.run_path(str(Path(__file__).resolve().parents[2] / "scripts" / "check_readme.py"))

    def text(kernels):
        prov = {"device": "NVIDIA H100", "date": "2026-11-28", "git_commit": "abc", "versions": {}}
        return readme["text_of"](readme["render_gpu"]({"provenance": prov, "parts": {"kernels": kernels}}, "b.json"))

    def shard(k, planned, ran, ok=True):
        rows = [{"ok": ok, "kernel": "relu_attention", "dtype": "fp16", "head_dim": 64}] * ran
        data = {"shard": f"{k}/3", "expected_checks": planned, "correctness": rows, "git_commit": "abc"}
        (tmp_path / f"kernels_correctness_{k}.json").write_text(json.dumps(data))

    shard(0, 4, 4)
    shard(1, 5, 5)
    shard(2, 6, 6)
    merged = gpu_kernels.merge_results(tmp_path, tmp_path / "kernels.json", 3)
    assert merged["expected_checks"] == 15 and merged["correctness_ok"] and merged["git_commit"] == "abc"
    assert tb.kernels_verified({"parts": {"kernels": merged}})
    shard(2, 6, 2)  # cut off after 2 of its 6
    merged = gpu_kernels.merge_results(tmp_path, tmp_path / "kernels.json", 3)
    assert (merged["expected_checks"], len(merged["correctness"]), merged["correctness_ok"]) == (15, 11, False)
    assert not tb.kernels_verified({"parts": {"kernels": merged}})
    assert (
        "11 of 11 correctness checks pass (output and gradients against float64, of 15 planned: the part was cut off"
        in text(merged)
    )
    (tmp_path / "kernels_correctness_2.json").unlink()  # a shard that wrote nothing
    merged = gpu_kernels.merge_results(tmp_path, tmp_path / "kernels.json", 3)
    assert merged["expected_checks"] is None and merged["shards_missing"] == 1 and not merged["correctness_ok"]
    assert "of more planned: the part was cut off" in text(merged)
    # ... and auto does not decide from it, although every check that ran passed
    runs = {"softmax": [1.0] * 3, "rela_g": [1.0] * 3, "rela_g_triton": [2.0] * 3}
    result = {"parts": {"kernels": merged, "train": {"bf16": {"runs": runs}}}}
    assert all(r["ok"] for r in merged["correctness"]) and not tb.kernels_verified(result)
    assert tb.faster_in(result) == frozenset()


def test_the_train_ab_part_runs_train_ab_per_dtype_within_the_budget(monkeypatch, tmp_path):
    """Each dtype's train_ab.py gets the train part's presets and settings and the budget
    left; its result's train_ab part is taken as it is; a dtype without the least budget,
    or whose run wrote nothing, is recorded as skipped (auto's rule reads no blocks there)."""
    import json
    import types

    from fairseq_sparse_attn.attention.backends import triton as tb

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(bench_gpu.time, "monotonic", lambda: clock.now)
    seen = []

    def run(cmd, **kwargs):
        seen.append(cmd)
        dtype, out = cmd[cmd.index("--dtype") + 1], Path(cmd[cmd.index("--out") + 1])
        clock.now += 100
        if dtype == "fp16":
            out.mkdir(parents=True)
            part = {"blocks": [{"round": 1, "ups": {"softmax": 10.0, "rela_g": 9.0}}]}
            (out / "train_ab.json").write_text(json.dumps({"parts": {"train_ab": {dtype: part}}}))
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

    monkeypatch.setattr(bench_gpu.subprocess, "run", run)
    args = types.SimpleNamespace(presets=["softmax", "rela_g"], dtypes=["fp16", "bf16"], max_tokens=4096, pairs=6000)
    out = bench_gpu.train_ab_part(args, bench_gpu.Budget(300), tmp_path)
    assert out["fp16"] == {"blocks": [{"round": 1, "ups": {"softmax": 10.0, "rela_g": 9.0}}]}
    assert out["bf16"] == {"skipped": "its run wrote no result"}
    first = seen[0]
    assert first[first.index("--presets") + 1] == "softmax,rela_g" and first[first.index("--budget") + 1] == "285"
    assert seen[1][seen[1].index("--budget") + 1] == "185"  # what the first left
    clock.now = 0.0
    out = bench_gpu.train_ab_part(args, bench_gpu.Budget(150), tmp_path / "again")
    assert out["bf16"] == {"skipped": "--budget spent"} and len(seen) == 3  # 50 s left: not started
    # a skipped dtype decides nothing (no blocks, no runs)
    assert tb.paired_rounds(out["bf16"], "rela_g_triton", "rela_g") == []


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_train_command_as_fairseq_reads_it(tmp_path, monkeypatch, dtype):
    """fairseq's own parser on the command: the dtype asked for and no other, and nothing
    but training updates in the timed run (no validation, no checkpoint writes).  (A GPU
    machine is what it runs on: --fp16 is refused without one.)"""
    import types

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    from fairseq import options

    import fairseq_sparse_attn.plugin  # noqa: F401

    args = types.SimpleNamespace(max_tokens=4096, max_update=60, log_interval=20, seed=1)
    cmd = bench_gpu.train_command(tmp_path, "rela_g_triton", dtype, args)
    parsed = options.parse_args_and_arch(
        options.get_training_parser(), input_args=cmd[cmd.index("fairseq_cli.train") + 1 :]
    )
    assert (parsed.fp16, parsed.bf16) == (dtype == "fp16", dtype == "bf16")
    assert parsed.disable_validation and parsed.no_save
    assert parsed.arch == "rela_transformer_iwslt_de_en" and parsed.attn_backend == "triton"
    assert (parsed.max_tokens, parsed.max_update, parsed.seed) == (4096, 60, 1)


def test_the_readme_reads_the_window_bench_gpu_writes():
    import runpy

    readme = runpy.run_path(str(Path(__file__).resolve().parents[2] / "scripts" / "check_readme.py"))
    assert readme["AFTER_FIRST_EPOCH"] == bench_gpu.AFTER_FIRST_EPOCH
