"""benchmarks/host_profile.py (``bench_host.py --profile``): where the host time of a step
goes.  ``summarize`` is checked against a hand count on made-up profiler events (the CUDA
runtime's and the device's events included, which a CPU run never has), and a real CPU
profile against an independent count of the host reads (a TorchDispatchMode).  No timing is
asserted."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import host_profile  # noqa: E402

from helpers import OpLog  # noqa: E402

CPU, CUDA = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA


def event(name, self_us=0.0, device=CPU, elapsed_us=0.0):
    return SimpleNamespace(
        name=name,
        self_cpu_time_total=self_us,
        device_type=device,
        time_range=SimpleNamespace(elapsed_us=lambda: elapsed_us),
    )


@pytest.mark.parametrize(
    "name, share",
    [
        ("aten::mm", "ops"),
        ("aten::_local_scalar_dense", "ops"),
        ("fsa::relu_attention_fwd", "package_ops"),
        ("cudaLaunchKernel", "runtime"),
        ("cuLaunchKernelEx", "runtime"),
        ("cudaStreamSynchronize", "runtime"),
        ("autograd::engine::evaluate_function: MmBackward0", "autograd"),
        ("_RMSNormFunctionBackward", "autograd"),
        ("_RMSNormFunction", "other"),
        ("custom_range", "other"),
        ("cute_helper", "other"),  # "cu" then a lower-case letter: not a runtime call
    ],
)
def test_each_event_counts_towards_one_share(name, share):
    assert host_profile.category(name) == share


def test_a_summary_is_the_hand_count_per_step():
    events = [
        event("aten::mm", 30.0),
        event("aten::mm", 10.0),
        event("cudaLaunchKernel", 4.0),
        event("cudaLaunchKernel", 4.0),
        event("cuLaunchKernelEx", 6.0),
        event("fsa::relu_attention_fwd", 20.0),
        event("aten::_local_scalar_dense", 2.0),
        event("cudaStreamSynchronize", 50.0),
        event("MmBackward0", 8.0),
        event("_RMSNormFunction", 6.0),
        event("ampere_gemm_kernel", device=CUDA, elapsed_us=100.0),
        event("relu_attention_fwd_kernel", device=CUDA, elapsed_us=60.0),
    ]
    s = host_profile.summarize(events, steps=2, wall_us=400.0, top=3)
    assert s["steps"] == 2 and s["wall_ms_per_step"] == pytest.approx(0.2)
    h = s["host_ms_per_step"]
    assert h["ops"] == pytest.approx((30 + 10 + 2) / 2 / 1e3)
    assert h["package_ops"] == pytest.approx(20 / 2 / 1e3)
    assert h["runtime"] == pytest.approx((4 + 4 + 6 + 50) / 2 / 1e3)
    assert h["autograd"] == pytest.approx(8 / 2 / 1e3)
    assert h["other"] == pytest.approx(6 / 2 / 1e3)
    covered = 30 + 10 + 4 + 4 + 6 + 20 + 2 + 50 + 8 + 6
    assert h["outside_ops"] == pytest.approx((400 - covered) / 2 / 1e3)
    assert s["launches_per_step"] == 1.5 and s["syncs_per_step"] == 0.5 and s["host_reads_per_step"] == 0.5
    assert s["events_per_step"] == 5.0  # the host events only
    assert s["device_events_per_step"] == 1.0 and s["device_ms_per_step"] == pytest.approx(0.08)
    # the host ops with the most self time, per call and per step
    assert [t["name"] for t in s["top_host"]] == ["cudaStreamSynchronize", "aten::mm", "fsa::relu_attention_fwd"]
    assert s["top_host"][1] == {"name": "aten::mm", "calls_per_step": 1.0, "self_us_per_call": 20.0}


def test_time_the_events_cover_beyond_the_wall_time_leaves_nothing_outside():
    """Events of two threads (the autograd engine's) can cover more than the wall time."""
    s = host_profile.summarize([event("aten::mm", 300.0)], steps=1, wall_us=200.0)
    assert s["host_ms_per_step"]["outside_ops"] == 0.0


def test_no_steps_is_refused():
    with pytest.raises(ValueError, match="steps must be >= 1"):
        host_profile.summarize([], steps=0, wall_us=1.0)


def test_a_real_profile_counts_the_host_reads_a_dispatch_counter_sees():
    from conftest import require_kernels

    require_kernels()
    import bench_host

    import fairseq_sparse_attn.plugin  # noqa: F401
    from fairseq_sparse_attn.models.standalone import synthetic_dictionary

    d = synthetic_dictionary(100)
    batch = bench_host.make_batch(d, 2, 6, torch.device("cpu"))
    with bench_host.stubbed_launches():
        model = bench_host.build("rela_g_triton", d, 1, 32, torch.device("cpu"), torch.float16)
        step = bench_host.step_fn(model, batch)
        step()
        log = OpLog()
        with log:
            step()
        p = host_profile.profile_steps(step, 2, lambda: None, on_cuda=False)
    reads = log.ops.count("aten._local_scalar_dense")
    assert reads > 0 and p["host_reads_per_step"] == reads
    # the kernels' ops (stubbed launches: their host work only) are a share of their own
    assert [t for t in p["top_host"] if t["name"].startswith("fsa::")]
    assert p["host_ms_per_step"]["package_ops"] > 0
    assert p["launches_per_step"] == 0 and p["device_events_per_step"] == 0  # a CPU run


def test_a_profile_that_fails_is_reported_and_the_others_go_on():
    def fails():
        raise RuntimeError("CUPTI is not available")

    profiles = host_profile.profile_presets({"stock": lambda: None, "rela_g": fails}, 1, lambda: None, on_cuda=False)
    assert list(profiles) == ["stock", "rela_g"] and profiles["stock"]["steps"] == 1
    assert profiles["rela_g"] == {"error": "RuntimeError: CUPTI is not available"}
    table = host_profile.format_profiles(profiles)
    assert "| rela_g | profile failed: RuntimeError: CUPTI is not available |" in table
    assert "stock top host:" in table and "rela_g top host:" not in table


def test_the_device_is_synced_before_the_profile_and_after_the_last_step_inside_it():
    """Earlier work waited for outside the profile (it would count as runtime time without
    being in the wall time); the last step's work waited for inside it."""
    seen = []

    def sync():
        seen.append(torch.autograd.profiler._is_profiler_enabled)

    p = host_profile.profile_steps(lambda: None, 3, sync, on_cuda=False)
    assert seen == [False, True] and p["steps"] == 3
