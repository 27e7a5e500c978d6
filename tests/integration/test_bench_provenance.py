"""The benchmarks' JSON results carry provenance (fairseq_sparse_attn/provenance.py): each
benchmark runs at its smallest size and the file it writes is opened and checked."""

import json
import os
import subprocess
import sys
from pathlib import Path

from fairseq_sparse_attn.provenance import check_provenance

REPO = Path(__file__).resolve().parents[2]


def run(script, *args):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_bench_attention_json(tmp_path):
    out = tmp_path / "bench.json"
    run(
        "bench_attention.py",
        "--variants",
        "softmax,rela_g",
        "--rounds",
        "2",
        "--warmup",
        "0",
        "--min-time",
        "0",
        "--measures",
        "train_step,decode_b1",
        "--train-batch",
        "2",
        "--src-len",
        "6",
        "--tgt-len",
        "6",
        "--decode-steps",
        "2",
        "--decode-sentences",
        "1",
        "--threads",
        "1",
        "--json",
        out,
    )
    data = json.loads(out.read_text())
    record = check_provenance(data)
    assert record["threads"] == 1 and record["seed"] == 0 and "bench_attention.py" in record["command"]
    assert data["clock"] == "wall"
    for measure in ("train_step", "decode_b1"):
        base = data["measures"][measure]["softmax"]["speed_vs_softmax"]
        assert base["median"] == 1.0 and base["rounds"] == 2
        rela = data["measures"][measure]["rela_g"]
        # the ratio is the per-round t_softmax / t_rela_g of the times written beside it
        ratios = [s / r for s, r in zip(data["measures"][measure]["softmax"]["times_s"], rela["times_s"])]
        assert abs(rela["speed_vs_softmax"]["median"] - sum(ratios) / len(ratios)) < 1e-9
        assert rela["speed_vs_softmax"]["min"] <= rela["speed_vs_softmax"]["median"] <= rela["speed_vs_softmax"]["max"]


def test_bench_attention_adds_softmax_as_the_baseline(tmp_path):
    out = tmp_path / "bench.json"
    run(
        "bench_attention.py",
        "--variants",
        "rela_g",
        "--rounds",
        "1",
        "--warmup",
        "0",
        "--min-time",
        "0",
        "--measures",
        "train_step",
        "--train-batch",
        "2",
        "--src-len",
        "6",
        "--tgt-len",
        "6",
        "--threads",
        "1",
        "--json",
        out,
    )
    data = json.loads(out.read_text())  # strict JSON (no NaN)
    check_provenance(data)
    assert set(data["measures"]["train_step"]) == {"softmax", "rela_g"}


def test_bench_attention_before_and_after_in_one_run(tmp_path):
    """--before REV: the attention code of REV timed in the same rounds as this tree's, after a
    check that both decode the same hypotheses; now/before is the per-round paired ratio."""
    import pytest

    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    sha = head.stdout.strip()
    out = tmp_path / "bench.json"
    run(
        "bench_attention.py",
        *("--variants", "rela_g", "--before", "HEAD", "--rounds", "2", "--warmup", "0", "--min-time", "0"),
        *("--measures", "decode_b1", "--src-len", "6", "--tgt-len", "6", "--decode-steps", "2"),
        *("--decode-sentences", "1", "--threads", "1", "--json", out),
    )
    data = json.loads(out.read_text())
    check_provenance(data)
    assert data["before_after_identical_hypotheses"] is True
    measure = data["measures"]["decode_b1"]
    assert set(measure) == {"softmax", "rela_g", f"rela_g@{sha}"}
    ratios = [b / n for n, b in zip(measure["rela_g"]["times_s"], measure[f"rela_g@{sha}"]["times_s"])]
    assert abs(data["now_vs_before"]["rela_g"]["decode_b1"]["median"] - sum(ratios) / len(ratios)) < 1e-9


def test_bench_long_sequences_json(tmp_path):
    out = tmp_path / "long.json"
    run(
        "bench_long_sequences.py",
        "--lengths",
        "16",
        "--modes",
        "train",
        "--dim",
        "16",
        "--heads",
        "2",
        "--batch",
        "1",
        "--block",
        "8",
        "--rounds",
        "1",
        "--warmup",
        "0",
        "--memory-repeats",
        "1",
        "--json",
        out,
    )
    data = json.loads(out.read_text())
    check_provenance(data)
    rows = data["results"]["train"]["16"]
    assert {"softmax_stock", "relu_chunked"} <= set(rows)
    assert rows["softmax_stock"]["speed_vs_softmax_stock"]["median"] == 1.0


def test_bench_attention_cpu_clock(tmp_path):
    out = tmp_path / "bench.json"
    run(
        "bench_attention.py",
        "--variants",
        "rela_g",
        "--rounds",
        "2",
        "--warmup",
        "0",
        "--min-time",
        "0",
        "--measures",
        "decode_b1",
        "--src-len",
        "6",
        "--tgt-len",
        "6",
        "--decode-steps",
        "2",
        "--decode-sentences",
        "1",
        "--threads",
        "1",
        "--clock",
        "cpu",
        "--json",
        out,
    )
    data = json.loads(out.read_text())
    check_provenance(data)
    assert data["clock"] == "cpu" and data["settings"]["clock"] == "cpu"


def test_bench_attention_claims_recipe(tmp_path):
    """--claims (what `make bench` runs) on CPU: one thread, the CPU clock, 101 rounds (31 for
    batch-64 decoding) of >= 0.1 s; flags given explicitly win over the recipe."""
    out = tmp_path / "bench.json"
    run(
        "bench_attention.py",
        "--claims",
        "--variants",
        "rela_g",
        "--rounds",
        "2",
        "--warmup",
        "0",
        "--measures",
        "train_step",
        "--train-batch",
        "2",
        "--src-len",
        "6",
        "--tgt-len",
        "6",
        "--device",
        "cpu",
        "--json",
        out,
    )
    data = json.loads(out.read_text())
    record = check_provenance(data)
    settings = data["settings"]
    assert data["clock"] == "cpu" and settings["threads"] == 1 and record["threads"] == 1
    assert settings["rounds"] == 2 and settings["rounds_b64"] == 31 and settings["min_time"] == 0.1
    assert data["measures"]["train_step"]["rela_g"]["speed_vs_softmax"]["rounds"] == 2


def test_decode_step_costs_json(tmp_path):
    """Per-call costs: the ratio of each round is t_variant / t_softmax of the times written
    beside it, and the per-call microseconds are the median time over the steps."""
    out = tmp_path / "costs.json"
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    before = ["--before", "HEAD"] if head.returncode == 0 else []  # (a git checkout: the old code too)
    run("decode_step_costs.py", "--rounds", "3", "--steps", "2", "--min-time", "0", *before, "--json", out)
    data = json.loads(out.read_text())
    check_provenance(data)
    assert data["clock"] == "cpu" and data["threads"] == 1
    expected = {"softmax", "softmax_pipeline", "rela_g_no_norm", "rela_g", "rela_i"}
    if before:
        sha = head.stdout.strip()
        assert data["before"]["sha"] == sha
        expected |= {f"{v}@{sha}" for v in ("softmax_pipeline", "rela_g", "rela_i")}
    for kind in ("self", "cross"):
        k = data["kinds"][kind]
        times = k["times_s"]
        assert set(times) == expected
        for variant, t in times.items():
            ratios = sorted(v / s for v, s in zip(t, times["softmax"]))
            assert abs(k["cost_vs_stock_softmax"][variant]["median"] - ratios[1]) < 1e-9
            assert abs(k["per_call_us"][variant] - sorted(t)[1] / 2 * 1e6) < 1e-6


# the last revision before core v4 (issue 33): its attention class keeps the settings as
# attributes on the module, so its code cannot run on today's module object
BEFORE_CORE_V4 = "3d8a761"


def _revision_present(rev):
    probe = ["git", "-C", str(REPO), "cat-file", "-e", f"{rev}^{{commit}}"]
    return subprocess.run(probe, capture_output=True).returncode == 0


def test_before_twins_hold_the_same_tensors_and_swap_back():
    """run_attention_as(model, REV's class): each attention module's place is taken by a twin
    of REV's class whose parameters are the module's own tensors; None puts today's back."""
    import pytest
    import torch

    if not _revision_present("HEAD"):
        pytest.skip("not a git checkout")
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_attention

    from fairseq_sparse_attn.attention import SparseMultiheadAttention
    from fairseq_sparse_attn.models.standalone import synthetic_dictionary

    _, cls = bench_attention.attention_class_at("HEAD")
    assert cls is not SparseMultiheadAttention
    model = bench_attention.build("rela_g", "small", synthetic_dictionary(100), torch.device("cpu"))
    today = [m for m in model.modules() if isinstance(m, SparseMultiheadAttention)]
    bench_attention.run_attention_as(model, cls)
    twins = [m for m in model.modules() if type(m) is cls]
    assert len(twins) == len(today) == 9 and not any(isinstance(m, SparseMultiheadAttention) for m in model.modules())
    for mine, twin in zip(today, twins):
        theirs = dict(twin.named_parameters())
        assert all(theirs[n] is p for n, p in mine.named_parameters())
    bench_attention.run_attention_as(model, None)
    assert [m for m in model.modules() if isinstance(m, SparseMultiheadAttention)] == today


def test_bench_attention_before_core_v4(tmp_path):
    """--before a revision whose attention module keeps other attributes (before core v4):
    both codes decode the same hypotheses, for ReLA-g and for sparsemax."""
    import pytest

    if not _revision_present(BEFORE_CORE_V4):
        pytest.skip(f"{BEFORE_CORE_V4} is not in this clone's history")
    out = tmp_path / "bench.json"
    run(
        "bench_attention.py",
        *("--variants", "rela_g,sparsemax", "--before", BEFORE_CORE_V4, "--rounds", "1", "--warmup", "0"),
        *("--min-time", "0", "--measures", "decode_b1", "--src-len", "6", "--tgt-len", "6", "--decode-steps", "2"),
        *("--decode-sentences", "1", "--threads", "1", "--json", out),
    )
    data = json.loads(out.read_text())
    assert data["before_after_identical_hypotheses"] is True
    assert set(data["now_vs_before"]) == {"rela_g", "sparsemax"}
