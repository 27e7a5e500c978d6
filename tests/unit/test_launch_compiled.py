"""``kernels/launch.py``'s ``launch_compiled``: a launch on CUDA goes through Triton's own
launch path once per kernel, configuration and argument specialization, then straight to
the compiled kernel's launcher.  Checked without a GPU, with the null driver of
benchmarks/triton_host_launch.py (the kernels compiled for sm_90, nothing launched): the
direct launch calls the very kernel Triton's path finds, with the very arguments Triton's
path passes its launcher; a change of anything Triton specializes on (a tensor's
alignment, an int's value, the constexprs, the options, the current device) goes through
Triton's path again and gets its own kernel."""

import sys
from pathlib import Path

import pytest
import torch

triton = pytest.importorskip("triton", reason="triton is not installed (make install installs the version torch pins)")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import triton_host_launch  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from fairseq_sparse_attn.kernels import launch as kl  # noqa: E402
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


def captured_launch(dtype=torch.float16, offset=0, tgt=6):
    """The arguments ``relu_attention``'s forward hands ``launch`` for a small call."""
    seen = {}
    buf = torch.randn(3 * 2 * tgt * 32 + offset, dtype=dtype)
    q, k, v = buf[offset:].view(3, 2, 1, tgt, 32).unbind(0)
    pad = torch.zeros(2, tgt, dtype=torch.bool)
    real = ra.launch

    def grab(forms, grid, device, args, constexprs, num_warps, num_stages):
        seen.update(jit=forms.compiled, grid=grid, args=args, constexprs=constexprs, warps=num_warps, stages=num_stages)

    ra.launch = grab
    try:
        ra._fwd_impl(q, k, v, pad, False, 1, 0.125, False, 1.0, None, 0.0)
    finally:
        ra.launch = real
    return seen


def same_call(a, b):
    """Two launcher calls alike: the grid, and every argument the same object, but the launch
    metadata, made anew at each launch (a ``LazyDict`` of the same entries)."""
    (grid_a, args_a), (grid_b, args_b) = a, b
    assert grid_a == grid_b and len(args_a) == len(args_b)
    for i, (x, y) in enumerate(zip(args_a, args_b)):
        if i == 2:  # (function, packed metadata, launch metadata, enter hook, exit hook, *values)
            assert type(x) is type(y) and vars(x).keys() == vars(y).keys()
            assert x.data == y.data if hasattr(x, "data") else x == y
        else:
            assert x is y or (type(x) in (int, float, bool, str) and x == y), i


def launch(c, **change):
    c = {**c, **change}
    kl.launch_compiled(c["jit"], c["grid"], c["args"], c["constexprs"], c["warps"], c["stages"])


def test_the_second_launch_skips_triton_s_path_and_passes_the_same_arguments(null_driver):
    launches, runs = null_driver
    c = captured_launch()
    launch(c)
    assert len(runs) == 1 and launches.count == 1
    through_triton = launches.last
    launch(c)
    launch(c)
    assert len(runs) == 1 and launches.count == 3  # launched twice more, without Triton's path
    same_call(launches.last, through_triton)  # the same kernel function, metadata, hooks and values
    (kernel, tail, jit) = next(iter(kl._DIRECT.values()))
    assert jit is c["jit"] and tail == tuple(c["constexprs"][p.name] for p in jit.params[len(c["args"]) :])
    assert kernel is c["jit"][c["grid"]](*c["args"], **c["constexprs"], num_warps=c["warps"], num_stages=c["stages"])


def test_what_triton_specializes_on_goes_through_its_path_again(null_driver):
    launches, runs = null_driver
    c = captured_launch()
    launch(c)
    misaligned = captured_launch(offset=1)  # q, k, v at an odd fp16 address: not 16-byte aligned
    assert kl.argument_key(misaligned["args"]) != kl.argument_key(c["args"])
    launch(misaligned)
    assert len(runs) == 2
    kernels = [entry[0] for entry in kl._DIRECT.values()]
    assert len(kernels) == 2 and kernels[0] is not kernels[1]  # Triton compiled a second specialization
    launch(misaligned)
    assert len(runs) == 2 and launches.count == 3
    longer = captured_launch(tgt=16)  # ints of other values (sizes, strides)
    launch(longer)
    assert len(runs) == 3
    launch(c, warps=c["warps"] * 2)  # another option
    launch(c, constexprs={**c["constexprs"], "UPCAST": True})  # another constexpr value
    assert len(runs) == 5


def test_a_launch_on_another_device_goes_through_triton_s_path(null_driver, monkeypatch):
    launches, runs = null_driver
    c = captured_launch()
    launch(c)
    launch(c)
    monkeypatch.setattr(triton.runtime.driver.active, "get_current_device", lambda: 1)
    launch(c)
    assert len(runs) == 2 and launches.count == 3


def test_the_key_tells_apart_what_triton_tells_apart():
    t = torch.zeros(8, dtype=torch.float16)
    assert kl.argument_key((t, 1, 2.0, True)) == ((torch.float16, True), 1, float, bool)
    assert kl.argument_key((t[1:],)) == ((torch.float16, False),)
    assert kl.argument_key((t.float(),)) != kl.argument_key((t,))
    assert kl.argument_key((16,)) != kl.argument_key((17,))
