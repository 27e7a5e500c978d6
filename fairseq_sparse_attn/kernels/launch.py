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

Interpreter limits the callers handle: bf16 ``tl.dot`` is wrong there (relu_attention
upcasts its dot operands, see its docstring; the norm kernels have no dot); races never
show (programs run one after another).
"""

import contextlib
from typing import Dict, NamedTuple, Sequence, Tuple

import torch
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
        forms.compiled[grid](*args, **constexprs, num_warps=num_warps, num_stages=num_stages)


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
