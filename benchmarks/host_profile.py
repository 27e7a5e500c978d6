"""Where the host time of a training step goes, per preset: ``bench_host.py --profile N``.

``bench_host.py`` says how much slower a preset's step is than stock fairseq's; this says
where the difference sits, from ``torch.profiler`` over N steps of each preset:

* ``ops``: self CPU time inside aten ops (the dispatcher and the op's own host work);
* ``package_ops``: inside the package's own ops (``fsa::...``: the Triton kernels' custom
  ops, their launch included; empty on a CPU, where bench_host stubs the launches);
* ``runtime``: inside CUDA runtime and driver calls (``cudaLaunchKernel``, Triton's
  ``cuLaunchKernelEx``, copies, synchronizations); empty on a CPU;
* ``autograd``: inside the autograd engine's own events (``autograd::...``, ``*Backward*``);
* ``outside_ops``: the step's wall time that no event covers: the Python between ops
  (modules, wrappers, fairseq's code), what none of the above sees;

and per step the kernel launches, the host synchronizations, the host reads of a device
value (``aten::_local_scalar_dense``: ``.item()``, ``bool(t)``), the device
events (kernels, copies) and their time, and the ops that take the most host time.  The
profiler adds a little time to every event, so these are shares of a profiled step, not
the step times ``bench_host.py`` measures (those are timed without it).
"""

import re
import time
from collections import defaultdict
from typing import Callable, Dict, Iterable, List

import torch

#: runtime / driver calls that launch a kernel (the CUDA runtime's for aten ops; the
#: driver's for Triton's launcher)
LAUNCHES = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx"})
#: runtime calls that wait for the device
SYNCS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy"})
#: the op through which every read of a device scalar reaches the host (``.item()``,
#: ``bool(t)``, ``torch.equal`` on CUDA: a synchronization on a GPU; on a CPU, fairseq's and
#: the package's CPU-only checks)
HOST_READS = frozenset({"aten::_local_scalar_dense"})
_RUNTIME = re.compile(r"^cu(da)?[A-Z]")

CATEGORIES = ("ops", "package_ops", "runtime", "autograd", "other", "outside_ops")


def category(name: str) -> str:
    """The share a host event's self time counts towards (module docstring)."""
    if name.startswith("aten::"):
        return "ops"
    if name.startswith("fsa::"):
        return "package_ops"
    if _RUNTIME.match(name):
        return "runtime"
    if name.startswith("autograd::") or "Backward" in name:
        return "autograd"
    return "other"


def _is_device(event) -> bool:
    return event.device_type != torch.autograd.DeviceType.CPU


def summarize(events: Iterable, steps: int, wall_us: float, top: int = 12) -> Dict[str, object]:
    """Per-step figures of ``steps`` profiled steps that took ``wall_us`` in all, from the
    profiler's events (``prof.events()``: ``name``, ``self_cpu_time_total`` in µs,
    ``device_type``, ``time_range``)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    shares = dict.fromkeys(CATEGORIES, 0.0)
    calls: Dict[str, int] = defaultdict(int)
    self_us: Dict[str, float] = defaultdict(float)
    launches = syncs = reads = device_events = 0
    device_us = 0.0
    for e in events:
        if _is_device(e):
            device_events += 1
            device_us += e.time_range.elapsed_us()
            continue
        name = e.name
        shares[category(name)] += e.self_cpu_time_total
        calls[name] += 1
        self_us[name] += e.self_cpu_time_total
        launches += name in LAUNCHES
        syncs += name in SYNCS
        reads += name in HOST_READS
    covered = sum(shares.values())
    shares["outside_ops"] = max(wall_us - covered, 0.0)
    ranked = sorted(self_us, key=lambda n: (-self_us[n], n))[:top]
    return {
        "steps": steps,
        "wall_ms_per_step": wall_us / steps / 1e3,
        "host_ms_per_step": {k: v / steps / 1e3 for k, v in shares.items()},
        "events_per_step": sum(calls.values()) / steps,
        "launches_per_step": launches / steps,
        "syncs_per_step": syncs / steps,
        "host_reads_per_step": reads / steps,
        "device_events_per_step": device_events / steps,
        "device_ms_per_step": device_us / steps / 1e3,
        "top_host": [
            {"name": n, "calls_per_step": calls[n] / steps, "self_us_per_call": self_us[n] / calls[n]} for n in ranked
        ],
    }


def profile_steps(step: Callable[[], None], steps: int, sync: Callable[[], None], on_cuda: bool) -> Dict[str, object]:
    """Runs ``step`` ``steps`` times under ``torch.profiler`` (CPU, and CUDA when
    ``on_cuda``) and summarizes it.  The device is idle when the profile starts (a sync
    before it, outside the profile: earlier work would count as this run's runtime time
    without being in its wall time); the sync after the last step is inside the wall time
    (it is among the syncs: one per profile, not per step)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if on_cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    sync()
    with torch.profiler.profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        wall_us = (time.perf_counter() - t0) * 1e6
    return summarize(prof.events(), steps, wall_us)


def profile_presets(
    jobs: Dict[str, Callable[[], None]], steps: int, sync: Callable[[], None], on_cuda: bool
) -> Dict[str, Dict[str, object]]:
    """:func:`profile_steps` of every preset's step; a preset whose profile fails (a
    profiler that cannot start on the machine) gets ``{"error": ...}`` and the others go on,
    so the timing before it is never lost to it."""
    profiles: Dict[str, Dict[str, object]] = {}
    for name, step in jobs.items():
        try:
            profiles[name] = profile_steps(step, steps, sync, on_cuda)
        except Exception as e:  # noqa: BLE001  (reported in the result, with its type)
            profiles[name] = {"error": f"{type(e).__name__}: {e}"}
    return profiles


def format_profiles(profiles: Dict[str, Dict[str, object]], top: int = 5) -> str:
    """The per-preset table (ms per profiled step), then each preset's top host ops."""
    head = "| preset | wall | " + " | ".join(CATEGORIES) + " | launches | syncs | host reads | device ms |"
    lines = [
        "where the host time of a profiled step goes (ms per step; torch.profiler)",
        head,
        "|" + "---|" * (len(CATEGORIES) + 6),
    ]
    for name, p in profiles.items():
        if "error" in p:
            lines.append(f"| {name} | profile failed: {p['error']} |")
            continue
        h = p["host_ms_per_step"]
        lines.append(
            f"| {name} | {p['wall_ms_per_step']:.2f} | "
            + " | ".join(f"{h[c]:.2f}" for c in CATEGORIES)
            + f" | {p['launches_per_step']:.0f} | {p['syncs_per_step']:.0f} | {p['host_reads_per_step']:.0f}"
            f" | {p['device_ms_per_step']:.2f} |"
        )
    for name, p in profiles.items():
        if "error" in p:
            continue
        tops: List[str] = [
            f"{t['name']} {t['calls_per_step']:.0f}x{t['self_us_per_call']:.1f}us" for t in p["top_host"][:top]
        ]
        lines.append(f"{name} top host: " + ", ".join(tops))
    return "\n".join(lines)
