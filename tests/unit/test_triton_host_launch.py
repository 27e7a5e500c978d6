"""benchmarks/triton_host_launch.py: the kernels' launches through Triton's compiled launch
path with a null driver (what ``bench_host.py --launches triton`` times on a CPU).  Checked
here: a launch really goes through ``JITFunction.run`` (the kernel compiled for sm_90, its
arguments bound: a wrong argument fails there), nothing is launched or computed, and on the
way out Triton's driver and the choice of the interpreter are as before and the plans and
kernels made inside are forgotten, so the interpreter runs the next launch correctly.  No timing is asserted."""

import sys
import types
from pathlib import Path

import pytest
import torch

from conftest import require_kernels  # noqa: E402

require_kernels()  # the Triton kernels run here, else the module skips (CI: fails)

import triton  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import triton_host_launch  # noqa: E402

from fairseq_sparse_attn.kernels import launch as kernel_launch  # noqa: E402
from fairseq_sparse_attn.kernels import output_norm, relu_attention  # noqa: E402


def inputs(dtype=torch.float16):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 1, 5, 32, generator=g).to(dtype) for _ in range(3))
    return q, k, v


def forward(q, k, v):
    return relu_attention._fwd_impl(q, k, v, None, False, 1, 0.25, False, 1.0, None, 0.0)


def test_a_launch_goes_through_triton_s_compiled_path_and_launches_nothing():
    q, k, v = inputs()
    driver = triton.runtime.driver._active
    interpreted = kernel_launch.interpreted
    with triton_host_launch.host_only_launches() as launches:
        assert triton.runtime.driver.active.get_current_target().arch == 90
        out = forward(q, k, v)[0]
        assert launches.count == 1
        forms = relu_attention._KERNELS["relu_attention_fwd"]
        (kernels, _, target, _, _) = forms.compiled.device_caches[0]
        assert target.arch == 90 and len(kernels) == 1  # compiled once, for the null driver's target
        forward(q, k, v)
        assert launches.count == 2 and len(kernels) == 1  # the second launch found it compiled
        # the arguments are bound by the compiled form: one too few fails there
        plan = relu_attention._fwd_plan(q, k, v, None, False, 1, 0.25, False, 1.0, 0.0, False)
        with pytest.raises(TypeError):
            relu_attention._launch(plan, (q, k, v))
    assert triton.runtime.driver._active is driver
    assert kernel_launch.interpreted is interpreted
    assert all(not forms.compiled.device_caches for forms in triton_host_launch._kernel_forms())
    assert not relu_attention._FWD_PLANS and not output_norm._FWD_PLANS  # the null driver's plans: forgotten
    assert out.shape == q.shape  # (nothing computed into it: the launcher is null)
    # afterwards the interpreter runs the kernel again, and computes
    again = forward(q, k, v)[0].float()
    expected = torch.relu(q.float() @ k.float().transpose(-1, -2) * 0.25) @ v.float()
    torch.testing.assert_close(again, expected, rtol=1e-2, atol=1e-2)


def test_a_kernel_that_would_need_scratch_buffers_is_refused():
    """Triton's launcher would allocate them at every launch; the null launcher does not
    time that, so it refuses rather than leave the cost out unnoticed."""
    launches = triton_host_launch.Launches()
    meta = types.SimpleNamespace(name="k", global_scratch_size=128, profile_scratch_size=0)
    launcher = triton_host_launch._NullLauncher(launches, None, meta)
    with pytest.raises(RuntimeError, match="k: needs scratch buffers"):
        launcher(1, 1, 1, 0, 1)
    ok = triton_host_launch._NullLauncher(
        launches, None, types.SimpleNamespace(global_scratch_size=0, profile_scratch_size=0)
    )
    ok(1, 1, 1, 0, 1)
    assert launches.count == 1
