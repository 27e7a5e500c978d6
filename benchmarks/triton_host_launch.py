"""Triton's own launch path, timed on a machine without a GPU: the package's kernels launched
through their compiled form (``kernels/launch.py``'s ``LaunchPlan``: Triton's
``JITFunction.run`` the first time, then the compiled kernel's launcher) with a driver that
compiles for an sm_90 GPU and launches nothing.

``bench_host.py`` on a CPU stubs the kernels' launches: it times everything a GPU step runs
on the host around the kernels, but not Triton's launch itself.  Inside
:func:`host_only_launches` a launch on CPU tensors runs that path instead of the
interpreter, up to the C launcher, which is left out: it packs the arguments and calls
``cuLaunchKernel``, which needs a GPU.  Each kernel is compiled for the target on its first
launch, with Triton's own compiler as ``kernels/aot.py`` uses it, so the binding sees the
real signature, constexprs and specializations.

    with host_only_launches() as launches:
        step()                          # the kernels' launches go through JITFunction.run
    launches.count                      # how many reached the (null) launcher

Only for timing on a CPU: nothing is computed (the outputs are left as allocated).
"""

import contextlib
from typing import Iterator

#: the compute capability the kernels are compiled for (an H100 / H200)
CAPABILITY = 90


class Launches:
    """What reached the launcher inside :func:`host_only_launches`."""

    def __init__(self):
        self.count = 0
        #: the last launch: (grid, the launcher's arguments after the grid and stream)
        self.last = None


class _NullLauncher:
    """Stands in for Triton's CUDA launcher (``CudaLauncher``): its Python part, without the
    C launch.  A kernel that needs a global or profile scratch buffer would have the
    launcher allocate one at every launch; none of the package's kernels does, and this
    refuses one rather than leave that cost out unnoticed."""

    def __init__(self, launches: Launches, src, metadata):
        self.launches = launches
        self.name = getattr(metadata, "name", "?")
        self.scratch = (metadata.global_scratch_size, metadata.profile_scratch_size)

    def __call__(self, grid_x, grid_y, grid_z, stream, function, *args):
        if self.scratch != (0, 0):
            raise RuntimeError(f"{self.name}: needs scratch buffers {self.scratch}: not timed by a null launcher")
        self.launches.count += 1
        self.launches.last = ((grid_x, grid_y, grid_z), (function, *args))


class _Utils:
    def __init__(self, shared: int):
        self.shared = shared

    def load_binary(self, name, kernel, shared, device):
        # (module, function, registers, spills, most threads per block)
        return 1, 1, 0, 0, 1024

    def get_device_properties(self, device):
        return {"max_shared_mem": self.shared, "multiprocessor_count": 132, "max_num_regs": 65536, "warpSize": 32}


class _NullDriver:
    """Triton's driver interface as ``JITFunction.run`` and ``CompiledKernel`` use it:
    device 0, stream 0, the sm_90 target, a null launcher."""

    def __init__(self, launches: Launches, capability: int):
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", capability, 32)
        # the device's shared memory per block (H100 / H200: 227 KiB; A100: 163 KiB)
        self.utils = _Utils(232448 if capability >= 90 else 166912)
        self.launcher_cls = lambda src, metadata: _NullLauncher(launches, src, metadata)

    def is_active(self):
        return True

    def get_current_device(self):
        return 0

    def set_current_device(self, device):
        pass

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self.target


def _kernel_forms():
    from fairseq_sparse_attn.kernels import output_norm, relu_attention

    return list(relu_attention._KERNELS.values()) + [output_norm._FWD, output_norm._BWD]


@contextlib.contextmanager
def host_only_launches(capability: int = CAPABILITY) -> Iterator[Launches]:
    """Inside: the kernels' launches on CPU tensors run Triton's compiled launch path with
    a null driver (module docstring).  Restores Triton's driver and the choice of the
    interpreter, and forgets the plans and kernels made inside, on the way out."""
    import triton

    from fairseq_sparse_attn.kernels import launch as kernel_launch

    launches = Launches()
    config = triton.runtime.driver
    saved_driver = config._active
    saved_interpreted = kernel_launch.interpreted
    kernel_launch.clear_plans()  # (plans made before run in the interpreter)
    config.set_active(_NullDriver(launches, capability))
    try:
        # what a launch on CUDA tensors runs (kernels/launch.py: LaunchPlan)
        kernel_launch.interpreted = lambda device: False
        yield launches
    finally:
        kernel_launch.interpreted = saved_interpreted
        config._active = saved_driver
        # (the plans, binders and kernels made inside are the null driver's)
        kernel_launch.clear_plans()
        for forms in _kernel_forms():
            forms.compiled.device_caches.clear()
