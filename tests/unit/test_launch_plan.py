"""``kernels/launch.py``'s ``LaunchPlan`` and the kernel ops' plans.

A kernel op makes a plan once per call signature (shapes, strides, dtypes, devices, flags):
the checks, the configuration, the grid and the scalar arguments; later calls of that
signature pass their tensors.  On CUDA a plan launches through Triton's own launch path the
first time, then straight to the compiled kernel's launcher.  Checked without a GPU, with
the null driver of benchmarks/triton_host_launch.py (the kernels compiled for sm_90, nothing
launched): the direct launch calls the very kernel Triton's path finds, with the very
arguments Triton's path passes its launcher; misaligned tensors, another current device or
another debug option go through Triton's path again.  In the interpreter (CPU): a call of a
known signature computes what a fresh plan computes, and anything in the signature that
changes gets a plan of its own."""

import sys
from pathlib import Path

import pytest
import torch

from conftest import require_kernels

require_kernels()  # the Triton kernels run here, else the module skips (CI: fails)

import triton  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import triton_host_launch  # noqa: E402
from triton import knobs  # noqa: E402
from triton.knobs import HookChain  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from fairseq_sparse_attn.kernels import launch as kl  # noqa: E402
from fairseq_sparse_attn.kernels import output_norm as fused  # noqa: E402
from fairseq_sparse_attn.kernels import relu_attention as ra  # noqa: E402


@pytest.fixture
def null_driver(monkeypatch):
    """(launches, calls of Triton's JITFunction.run) inside the null driver."""
    runs = []
    real = JITFunction.run

    def counted(self, *args, **kwargs):
        runs.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(JITFunction, "run", counted)
    with triton_host_launch.host_only_launches() as launches:
        yield launches, runs


def qkv(dtype=torch.float16, offset=0, tgt=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    buf = torch.randn(3 * 2 * tgt * 32 + offset, generator=g).to(dtype)
    return buf[offset:].view(3, 2, 1, tgt, 32).unbind(0)


def captured_plan(monkeypatch, **kw):
    """(plan, tensors) of ``relu_attention``'s forward for a small call."""
    seen = {}
    real = ra._launch

    def grab(plan, tensors):
        seen.update(plan=plan, tensors=tensors)
        real(plan, tensors)

    monkeypatch.setattr(ra, "_launch", grab)
    q, k, v = qkv(**kw)
    ra._fwd_impl(q, k, v, torch.zeros(2, q.size(2), dtype=torch.bool), False, 1, 0.125, False, 1.0, None, 0.0)
    monkeypatch.setattr(ra, "_launch", real)
    return seen["plan"].launch, seen["tensors"]


def same_call(a, b, unhooked=False):
    """Two launcher calls alike: the grid, and every argument the same object, but the launch
    metadata, made anew at each launch (a ``LazyDict`` of the same entries).  ``unhooked``:
    ``a`` is a direct launch with no launch hook installed, which passes None for the
    metadata and both hooks (the launcher calls a hook that is not None, and reads the
    metadata only for them), where Triton's path passes its empty hook chains."""
    (grid_a, args_a), (grid_b, args_b) = a, b
    assert grid_a == grid_b and len(args_a) == len(args_b)
    for i, (x, y) in enumerate(zip(args_a, args_b)):
        # (function, packed metadata, launch metadata, enter hook, exit hook, *values)
        if unhooked and i in (2, 3, 4):
            assert x is None and (i == 2 or (type(y) is HookChain and not y.calls)), i
        elif i == 2:
            assert type(x) is type(y) and vars(x).keys() == vars(y).keys()
            assert x.data == y.data if hasattr(x, "data") else x == y
        else:
            assert x is y or (type(x) in (int, float, bool, str) and x == y), i


def test_the_second_launch_skips_triton_s_path_and_passes_the_same_arguments(null_driver, monkeypatch):
    launches, runs = null_driver
    plan, tensors = captured_plan(monkeypatch)  # launched once, through Triton's path
    assert not plan.interpreted and len(runs) == 1 and launches.count == 1
    plan(tensors)
    first_direct = launches.last  # (the first launch's own tensors were others: fresh outputs)
    runs.clear()
    plan.direct = None
    plan(tensors)  # through Triton's path: the reference
    reference = launches.last
    assert len(runs) == 1
    plan(tensors)
    plan(tensors)
    assert len(runs) == 1 and launches.count == 5  # launched twice more, without Triton's path
    same_call(launches.last, reference, unhooked=True)  # the same kernel function and values
    same_call(first_direct, reference, unhooked=True)
    device, debug, mode, kernel, following = plan.direct
    jit, args = plan.forms.compiled, (*tensors, *plan.scalars)
    assert (device, debug, mode) == (0, knobs.runtime.debug, knobs.compilation.instrumentation_mode)
    assert following == (*plan.scalars, *(plan.constexprs[p.name] for p in jit.params[len(args) :]))
    assert kernel is jit[plan.grid](*args, **plan.constexprs, num_warps=plan.num_warps, num_stages=plan.num_stages)


@pytest.mark.parametrize("version, warned", [("3.7.1", True), ("3.6.0", False)])
def test_the_first_cuda_launch_says_when_triton_s_version_was_never_checked_on_a_gpu(
    null_driver, monkeypatch, caplog, version, warned
):
    """The kernels' CUDA correctness was checked on a GPU under Triton 3.6 only: under 3.7
    (torch 2.12/2.13, which the kernels run with) the first CUDA launch of the process says
    so, once, and names the check to run."""
    monkeypatch.setattr(kl, "installed_triton", lambda: version)
    monkeypatch.setattr(kl, "_CUDA_CHECK_NOTED", False)
    with caplog.at_level("WARNING", logger=kl.__name__):
        plan, tensors = captured_plan(monkeypatch)
        plan.direct = None
        plan(tensors)  # Triton's path again: no second warning
        captured_plan(monkeypatch, tgt=7)  # another plan: none either
    lines = [r.getMessage() for r in caplog.records if r.name == kl.__name__]
    if warned:
        assert lines == [
            f"the Triton kernels run on CUDA under Triton {version}, under which their CUDA correctness has not "
            "been checked on a GPU (checked: Triton 3.6); `python benchmarks/bench_gpu.py --parts kernels` checks "
            "them on this GPU"
        ]
    else:
        assert lines == []


@pytest.mark.parametrize("which", ["launch_enter_hook", "launch_exit_hook"])
def test_a_direct_launch_passes_the_metadata_and_hooks_where_a_hook_is_installed(null_driver, monkeypatch, which):
    """A profiler's hook (Proton adds its own to the chains) sees every launch: with one
    installed, the direct launch passes the launch metadata and both hook chains exactly as
    Triton's path does."""
    launches, runs = null_driver
    plan, tensors = captured_plan(monkeypatch)
    plan(tensors)
    assert plan.direct is not None
    chain = getattr(knobs.runtime, which)
    hook = lambda metadata: None  # noqa: E731
    chain.add(hook)
    try:
        runs.clear()
        plan(tensors)  # direct, hooked
        hooked = launches.last
        plan.direct = None
        plan(tensors)  # Triton's path
        assert len(runs) == 1
        same_call(hooked, launches.last)
        assert hooked[1][3] is knobs.runtime.launch_enter_hook and hooked[1][4] is knobs.runtime.launch_exit_hook
        assert hooked[1][2] is not None or which == "launch_exit_hook"  # Triton's metadata: made for an enter hook
    finally:
        chain.remove(hook)
    plan(tensors)  # the hook removed: none passed again
    assert launches.last[1][2:5] == (None, None, None)


def test_misaligned_tensors_go_through_triton_s_path(null_driver, monkeypatch):
    launches, runs = null_driver
    plan, tensors = captured_plan(monkeypatch, offset=1)  # q, k, v at an odd fp16 address
    assert plan.direct is None  # nothing kept for misaligned tensors
    plan(tensors)
    assert len(runs) == 2 and plan.direct is None
    aligned_plan, aligned = captured_plan(monkeypatch)
    assert aligned_plan is plan  # the same signature: alignment is not in it
    assert len(runs) == 3 and plan.direct is not None
    plan(aligned)
    assert len(runs) == 3  # the aligned call: direct
    kept = plan.direct
    plan(tensors)  # misaligned again: Triton's path, and the aligned kernel stays kept
    assert len(runs) == 4 and plan.direct is kept
    jit = plan.forms.compiled
    options = dict(**plan.constexprs, num_warps=plan.num_warps, num_stages=plan.num_stages)
    misaligned_kernel = jit[plan.grid](*tensors, *plan.scalars, **options)
    assert misaligned_kernel is not kept[3]  # Triton's own specialization for misaligned pointers
    assert jit[plan.grid](*aligned, *plan.scalars, **options) is kept[3]


def test_another_device_or_debug_option_goes_through_triton_s_path(null_driver, monkeypatch):
    launches, runs = null_driver
    plan, tensors = captured_plan(monkeypatch)
    plan(tensors)
    assert len(runs) == 1
    monkeypatch.setattr(triton.runtime.driver.active, "get_current_device", lambda: 1)
    plan(tensors)
    assert len(runs) == 2 and plan.direct[0] == 1
    plan(tensors)
    assert len(runs) == 2
    monkeypatch.setattr(knobs.runtime, "debug", not knobs.runtime.debug)
    plan(tensors)
    assert len(runs) == 3 and launches.count == 5


def test_ops_make_one_plan_per_signature():
    kl.clear_plans()
    q, k, v = qkv(torch.float32)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    ra.relu_attention(q, k, v, pad, scale=0.5)
    ra.relu_attention(q, k, v, pad.clone(), scale=0.5)  # another mask tensor, same signature
    assert len(ra._FWD_PLANS) == 1
    ra.relu_attention(q, k, v, pad, scale=0.25)  # another scale
    ra.relu_attention(q, k.transpose(0, 0).contiguous(), v, None, scale=0.5)  # no padding
    ra.relu_attention(torch.randn(2, 1, 6, 64)[..., :32], k, v, pad, scale=0.5)  # other strides
    assert len(ra._FWD_PLANS) == 4
    z = torch.randn(4, 64)
    fused.fused_rmsnorm(z, torch.ones(64), 1e-6, 1e-2)
    fused.fused_rmsnorm(z, torch.ones(64), 1e-5, 1e-2)
    fused.fused_rmsnorm(z.double().float(), torch.ones(64), 1e-6, 1e-2)
    assert len(fused._FWD_PLANS) == 2
    kl.clear_plans()
    assert not ra._FWD_PLANS and not fused._FWD_PLANS


def test_a_call_of_a_known_signature_computes_what_a_fresh_plan_computes():
    """New data, masks and row factors through a plan made by an earlier call: the same
    numbers as with every plan made anew (the plans keep no data of the call that made them)."""
    pads = [torch.tensor([[False] * 6, [True, True] + [False] * 4]), torch.tensor([[False] * 5 + [True]] * 2)]

    def outputs(seed, pad):
        q, k, v = (t.requires_grad_() for t in qkv(torch.float32, seed=seed))
        out = ra.relu_attention(q, k, v, pad, causal=True, scale=0.3, gamma=1.5)
        out.square().sum().backward()
        z = torch.randn(3, 64, generator=torch.Generator().manual_seed(seed), requires_grad=True)
        w = torch.linspace(0.5, 1.5, 64, requires_grad=True)
        normed = fused.fused_gated_rmsnorm(z, w, w.detach().flip(0).requires_grad_(), 1e-6, 1e-2)
        normed.square().sum().backward()
        return [out.detach(), q.grad, k.grad, v.grad, normed.detach(), z.grad, w.grad]

    kl.clear_plans()
    reused = [outputs(seed, pad) for seed, pad in enumerate(pads)]  # the second through the first's plans
    plans = len(ra._FWD_PLANS) + len(ra._KEY_BLOCK_PLANS) + len(fused._FWD_PLANS) + len(fused._BWD_PLANS)
    assert plans == 4  # one per op: both calls had one signature
    fresh = []
    for seed, pad in enumerate(pads):
        kl.clear_plans()  # each call makes its own plans
        fresh.append(outputs(seed, pad))
    for a, b in zip(reused, fresh):
        for x, y in zip(a, b):
            assert torch.equal(x, y)


def test_the_plans_hold_a_changed_setting():
    """A module setting read by the plan (the long tier's threshold) changed after a plan was
    made: the next call makes a plan under the new setting, and takes the long tier's tiles."""
    kl.clear_plans()
    q, k, v = qkv(torch.float16)
    log = []
    saved = ra.LAUNCH_LOG, ra.LONG_FROM
    ra.LAUNCH_LOG = log
    try:
        ra.relu_attention(q, k, v)
        ra.LONG_FROM = 4
        ra.relu_attention(q, k, v)
    finally:
        ra.LAUNCH_LOG, ra.LONG_FROM = saved
    assert [name for name, *_ in log] == ["relu_attention_fwd_d32_fp16", "relu_attention_fwd_d32_fp16_long"]
    assert len(ra._FWD_PLANS) == 2


def test_a_full_cache_is_emptied_before_the_next_plan(monkeypatch):
    cache = kl.plan_cache()
    monkeypatch.setattr(kl, "PLANS_MAX", 2)
    kl.remember(cache, 1, "a")
    kl.remember(cache, 2, "b")
    assert kl.remember(cache, 3, "c") == "c" and cache == {3: "c"}


def test_inputs_on_different_devices_are_refused():
    q, k, v = qkv(torch.float32)
    with pytest.raises(ValueError, match="one device"):
        ra._fwd_impl(q, k.to("meta"), v, None, False, 1, 1.0, False, 1.0, None, 0.0)
