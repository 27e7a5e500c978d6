"""How a kernel of this package is launched, on every device (one mechanism for
:mod:`.relu_attention` and :mod:`.output_norm`).

Each kernel has two forms built from the same Python source (:func:`kernel_forms`): the
compiled form (a ``JITFunction``: CUDA tensors, and what ``launch_configs()`` lists for the
ahead-of-time check) and the interpreted form (an ``InterpretedFunction``: CPU tensors,
slow, for tests and CI).  :func:`launch` picks the form by the tensors' device.  The
interpreted form is built explicitly and the ``@triton.jit`` functions a kernel calls
(Triton's own ``tl.sum``, ``tl.zeros``, ... and the package's helpers) run through the
interpreter while it runs (:func:`interpreting_nested_jit`), so ``TRITON_INTERPRET`` is
neither read nor needed, and the choice does not depend on the order in which modules
were imported.

On CUDA a launch goes through Triton's own launch path (``JITFunction.run``: binding and
specializing every argument, the kernel-cache key) once per kernel, configuration and
argument specialization, and after that straight to the compiled kernel's launcher
(:func:`launch_compiled`): the same kernel, launched the way ``JITFunction.run`` launches
it, without redoing the binding (about three quarters of that path's host time, measured
on a CPU with ``benchmarks/triton_host_launch.py``).

Interpreter limits the callers handle: bf16 ``tl.dot`` is wrong there (relu_attention
upcasts its dot operands, see its docstring; the norm kernels have no dot); races never
show (programs run one after another).
"""

import contextlib
from typing import Dict, NamedTuple, Sequence, Tuple

import torch
from triton import knobs
from triton.runtime import driver
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction


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


def launch(
    forms: KernelForms,
    grid: Tuple[int, ...],
    device: torch.device,
    args: tuple,
    constexprs: Dict[str, object],
    num_warps: int,
    num_stages: int,
) -> None:
    """Runs the kernel on ``grid``: compiled on CUDA, interpreted on CPU (module docstring)."""
    if interpreted(device):
        with interpreting_nested_jit():
            forms.interpreted[grid](*args, **constexprs, num_warps=num_warps, num_stages=num_stages)
    else:
        launch_compiled(forms.compiled, grid, args, constexprs, num_warps, num_stages)


#: (id of the kernel's JITFunction, the current device, options, constexprs, argument key)
#: -> (the compiled kernel Triton's launch path found for them, the constexpr values that
#: follow the arguments in the kernel's parameters, the JITFunction: held, so that its id is
#: not reused); cleared when it holds :data:`DIRECT_MAX` entries
_DIRECT: Dict[tuple, tuple] = {}
DIRECT_MAX = 4096


def argument_key(args: tuple) -> tuple:
    """What Triton's specialization of a launch's arguments depends on, and more: a tensor's
    dtype and whether its address is 16-byte aligned, an int's value (Triton specializes
    ints on their value: equal to 1, divisible by 16, 32- or 64-bit), the type of anything
    else (floats and bools are not specialized).  Equal keys: equal specializations."""
    return tuple(
        [
            a if type(a) is int else (a.dtype, a.data_ptr() % 16 == 0) if isinstance(a, torch.Tensor) else type(a)
            for a in args
        ]
    )


def launch_compiled(
    jit: JITFunction, grid: Tuple[int, ...], args: tuple, constexprs: Dict[str, object], num_warps: int, num_stages: int
) -> None:
    """``jit[grid](*args, **constexprs, num_warps=, num_stages=)``: through Triton's launch
    path the first time for these options, constexprs and argument key (:func:`argument_key`;
    Triton compiles or finds the kernel and checks its globals), then straight to that
    compiled kernel's launcher, called as ``JITFunction.run`` calls it (Triton 3.6 and 3.7:
    the launch metadata and the launch hooks included) on the current device's current
    stream.  Triton's kernel cache is per current device; so is this one."""
    runtime = knobs.runtime
    active = driver.active
    device = active.get_current_device()
    key = (
        id(jit),
        device,
        num_warps,
        num_stages,
        runtime.debug,
        knobs.compilation.instrumentation_mode,
        tuple(constexprs.items()),
        argument_key(args),
    )
    hit = _DIRECT.get(key)
    if hit is None:
        kernel = jit[grid](*args, **constexprs, num_warps=num_warps, num_stages=num_stages)
        if kernel is not None and not jit.pre_run_hooks:
            if len(_DIRECT) >= DIRECT_MAX:
                _DIRECT.clear()
            tail = tuple(constexprs[p.name] if p.name in constexprs else p.default for p in jit.params[len(args) :])
            _DIRECT[key] = (kernel, tail, jit)
        return
    kernel, tail, _ = hit
    stream = active.get_current_stream(device)
    n = len(grid)
    values = (*args, *tail)
    kernel.run(
        grid[0],
        grid[1] if n > 1 else 1,
        grid[2] if n > 2 else 1,
        stream,
        kernel.function,
        kernel.packed_metadata,
        kernel.launch_metadata(grid, stream, *values),
        runtime.launch_enter_hook,
        runtime.launch_exit_hook,
        *values,
    )


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
