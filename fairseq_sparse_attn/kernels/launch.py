"""How a kernel of this package is launched, on every device (one mechanism for
:mod:`.relu_attention` and :mod:`.output_norm`).

Each kernel has two forms built from the same Python source (:func:`kernel_forms`): the
compiled form (a ``JITFunction``: CUDA tensors, and what ``launch_configs()`` lists for the
ahead-of-time check) and the interpreted form (an ``InterpretedFunction``: CPU tensors,
slow, for tests and CI), picked by the tensors' device (:func:`interpreted`).  The
interpreted form is built explicitly and the ``@triton.jit`` functions a kernel calls
(Triton's own ``tl.sum``, ``tl.zeros``, ... and the package's helpers) run through the
interpreter while it runs (:func:`interpreting_nested_jit`), so ``TRITON_INTERPRET`` is
neither read nor needed, and the choice does not depend on the order in which modules
were imported.

A kernel op launches through a :class:`LaunchPlan`: what it computes from its inputs'
shapes, strides, dtypes, devices and flags (the checks, the configuration, the grid, the
scalar arguments) is made once per call signature and kept in the op's plan cache
(:func:`plan_cache`), so a call with a known signature allocates its outputs and passes its
tensors.  On CUDA a plan launches through Triton's own launch path (``JITFunction.run``:
binding and specializing every argument, the kernel-cache key) the first time, and after
that straight to the compiled kernel's launcher: the same kernel, launched the way
``JITFunction.run`` launches it, without redoing the binding.  A launch-bound GPU step pays
the host time of every call (docs/performance.md, "Launch plans").

Interpreter limits the callers handle: bf16 ``tl.dot`` is wrong there (relu_attention
upcasts its dot operands, see its docstring; the norm kernels have no dot); races never
show (programs run one after another).
"""

import contextlib
import logging
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, TypeVar

import torch

from .served import CUDA_CHECKED_TRITON, installed_triton, minor_version, triton_unserved

if triton_unserved() is not None:  # before Triton's internals are imported (3.4 lacks HookChain)
    raise ImportError(f"fairseq_sparse_attn.kernels: {triton_unserved()}")

from triton import knobs  # noqa: E402
from triton.knobs import HookChain  # noqa: E402
from triton.runtime import driver  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402


class KernelForms(NamedTuple):
    compiled: JITFunction
    interpreted: InterpretedFunction


def kernel_forms(fn, do_not_specialize: Sequence[str] = ()) -> KernelForms:
    """Both forms of the kernel ``fn`` (a plain Python function, or one already decorated
    with ``@triton.jit``, whatever ``TRITON_INTERPRET`` made of it)."""
    fn = getattr(fn, "fn", fn)
    return KernelForms(
        JITFunction(fn, do_not_specialize=tuple(do_not_specialize)),
        InterpretedFunction(fn, do_not_specialize=tuple(do_not_specialize)),
    )


def interpreted(device: torch.device) -> bool:
    """Whether a launch on ``device`` runs in the interpreter (CPU); RuntimeError for a
    device the kernels do not run on."""
    if device.type == "cuda":
        return False
    if device.type == "cpu":
        return True
    raise RuntimeError(f"Triton kernels run on CUDA tensors, or on CPU tensors in the interpreter; got {device.type}")


class LaunchPlan:
    """A launch of one kernel whose configuration, grid and scalar arguments are fixed: what
    a kernel op computes once per call signature (its inputs' shapes, strides, dtypes,
    devices and flags) and reuses at every call of that signature, so that a call passes
    only its tensors (the kernel's leading parameters) and launches.

    Interpreted (CPU tensors): Triton's interpreter, every time.  Compiled (CUDA): through
    Triton's own launch path (``JITFunction.run``: binding and specializing every argument,
    the kernel-cache key, compiling or finding the kernel) the first time, and again whenever
    what that kernel was found for changes: the current device (Triton's kernel cache and
    the loaded module are per device), Triton's debug and instrumentation options, or the
    tensors' 16-byte alignment (Triton specializes a pointer on it; the scalars, and so their
    specializations, are the plan's own).  Otherwise straight to the compiled kernel's
    launcher, called as ``JITFunction.run`` calls it (Triton 3.6 and 3.7) on the current
    device's current stream, with the launch metadata and the launch hooks where a hook is
    installed, and without them (None, which the launcher skips) where none is."""

    __slots__ = ("forms", "grid", "scalars", "constexprs", "num_warps", "num_stages", "interpreted", "direct")

    def __init__(
        self,
        forms: KernelForms,
        grid: Tuple[int, ...],
        scalars: tuple,
        constexprs: Dict[str, object],
        num_warps: int,
        num_stages: int,
        device: torch.device,
    ):
        self.forms = forms
        self.grid = tuple(grid)
        self.scalars = tuple(scalars)
        self.constexprs = dict(constexprs)
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.interpreted = interpreted(device)
        #: (current device, debug, instrumentation mode, the compiled kernel Triton's path
        #: found for aligned tensors, the values that follow the tensors: the scalars, then
        #: the constexprs' values)
        self.direct: Optional[tuple] = None

    def __call__(self, tensors: tuple) -> None:
        """Launches the kernel on ``(*tensors, *scalars)``."""
        if self.interpreted:
            with interpreting_nested_jit():
                self.forms.interpreted[self.grid](
                    *tensors, *self.scalars, **self.constexprs, num_warps=self.num_warps, num_stages=self.num_stages
                )
            return
        active = driver.active
        device = active.get_current_device()
        runtime = knobs.runtime
        address = 0
        for t in tensors:
            address |= t.data_ptr()
        options = (device, runtime.debug, knobs.compilation.instrumentation_mode)
        direct = self.direct
        if direct is not None and not address & 15 and direct[:3] == options:
            kernel, following = direct[3], direct[4]
            stream = active.get_current_stream(device)
            grid = self.grid
            n = len(grid)
            values = (*tensors, *following)
            enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
            if _unhooked(enter) and _unhooked(leave):
                # the launcher reads the launch metadata only for the hooks, and calls a hook
                # that is not None (Triton's own path passes its empty hook chains, which the
                # launcher calls): nothing to call, nothing to describe
                metadata = enter = leave = None
            else:
                metadata = kernel.launch_metadata(grid, stream, *values)
            kernel.run(
                grid[0],
                grid[1] if n > 1 else 1,
                grid[2] if n > 2 else 1,
                stream,
                kernel.function,
                kernel.packed_metadata,
                metadata,
                enter,
                leave,
                *values,
            )
            return
        if not _CUDA_CHECK_NOTED:
            _note_unchecked_triton()
        jit = self.forms.compiled
        args = (*tensors, *self.scalars)
        kernel = jit[self.grid](*args, **self.constexprs, num_warps=self.num_warps, num_stages=self.num_stages)
        if kernel is not None and not jit.pre_run_hooks and not address & 15:
            constexprs = self.constexprs
            tail = tuple(constexprs[p.name] if p.name in constexprs else p.default for p in jit.params[len(args) :])
            self.direct = (*options, kernel, (*self.scalars, *tail))


logger = logging.getLogger(__name__)
#: whether the first CUDA launch of this process has looked at the Triton version
_CUDA_CHECK_NOTED = False


def _note_unchecked_triton() -> None:
    """At the first CUDA launch: one warning when the installed Triton is not a version under
    which the kernels' CUDA correctness check passed on a GPU (:data:`.served.CUDA_CHECKED_TRITON`)."""
    global _CUDA_CHECK_NOTED
    _CUDA_CHECK_NOTED = True
    version = installed_triton() or ""
    if minor_version(version) not in CUDA_CHECKED_TRITON:
        logger.warning(
            "the Triton kernels run on CUDA under Triton %s, under which their CUDA correctness has not been "
            "checked on a GPU (checked: Triton %s); `python benchmarks/bench_gpu.py --parts kernels` checks them "
            "on this GPU",
            version,
            ", ".join(CUDA_CHECKED_TRITON),
        )


def _unhooked(hook) -> bool:
    """No launch hook to call: none, or Triton's hook chain with nothing in it (a profiler,
    Proton for one, adds its hooks to the chain)."""
    return hook is None or (type(hook) is HookChain and not hook.calls)


_P = TypeVar("_P")

#: every plan cache (:func:`plan_cache`), for :func:`clear_plans`
_PLAN_CACHES: List[Dict[tuple, Any]] = []
#: a cache holding this many plans is emptied before the next one is added
PLANS_MAX = 4096


def plan_cache() -> Dict[tuple, Any]:
    """A new cache of a kernel op's plans (call signature -> plan), emptied by :func:`clear_plans`."""
    cache: Dict[tuple, Any] = {}
    _PLAN_CACHES.append(cache)
    return cache


def remember(cache: Dict[tuple, Any], signature: tuple, plan: _P) -> _P:
    """``cache[signature] = plan`` (the cache emptied first when full); returns ``plan``."""
    if len(cache) >= PLANS_MAX:
        cache.clear()
    cache[signature] = plan
    return plan


def clear_plans() -> None:
    """Forgets every plan (each is made again at its signature's next call)."""
    for cache in _PLAN_CACHES:
        cache.clear()


@contextlib.contextmanager
def interpreting_nested_jit():
    """While an interpreted kernel runs, the ``@triton.jit`` functions it calls (Triton's own
    ``tl.zeros``, ``tl.sum``, ...: compiled-form objects unless ``TRITON_INTERPRET=1`` was
    set when ``triton.language`` was imported) run through the interpreter too.  Triton
    reads ``TRITON_INTERPRET`` once, when a function is decorated, for the whole process;
    this makes the interpreted launch independent of it (and leaves the compiled forms,
    which the ahead-of-time compile check needs, untouched)."""
    original = JITFunction.__call__

    def call(self, *args, **kwargs):
        interpreted = _NESTED.get(id(self))
        if interpreted is None:
            interpreted = _NESTED[id(self)] = InterpretedFunction(self.fn)
        return interpreted(*args, **kwargs)

    language = _language_namespaces()
    before = [dict(vars(ns)) for ns in language]
    JITFunction.__call__ = call
    try:
        yield
    finally:
        JITFunction.__call__ = original
        for ns, attrs in zip(language, before):
            _restore_namespace(ns, attrs)


def _language_namespaces() -> Tuple[object, ...]:
    """What Triton's interpreter patches while it runs (``interpreter._patch_lang``): the
    language modules and the classes whose builtins it swaps for interpreted ones."""
    import triton.language as tl

    return (tl, tl.core, tl.math, tl.core.tensor, tl.core.dtype, tl.core.tensor_descriptor_base)


def _restore_namespace(ns: object, attrs: Dict[str, object]) -> None:
    """Puts ``ns``'s attributes back as they were.  An interpreted call of a nested
    ``@triton.jit`` function (``InterpretedFunction.__call__``, Triton 3.7.1) patches the
    language for the interpreter and never restores it; left so, a later *compile* in the
    same process fails ("Unsupported function referenced: <function _patch_attr.<locals>
    .<lambda>>"), seen when the ahead-of-time check ran after interpreted launches."""
    current = vars(ns)
    for name in [n for n in current if n not in attrs]:
        delattr(ns, name)
    for name, value in attrs.items():
        if current.get(name, _ABSENT) is not value:
            setattr(ns, name, value)


_ABSENT = object()


_NESTED: Dict[int, InterpretedFunction] = {}  # id(JITFunction) (hashing one parses its source)
