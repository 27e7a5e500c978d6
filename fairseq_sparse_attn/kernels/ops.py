"""How a kernel of this package becomes a torch operator (one mechanism for
:mod:`.relu_attention` and :mod:`.output_norm`): one op per kernel in the ``fsa``
namespace, so autograd, ``torch.compile`` and a dispatch-level op counter each see one op
per kernel.

Each op is defined on the low-level :class:`torch.library.Library` (:func:`define`): a
schema, a Python implementation for CPU (the interpreter) and CUDA tensors, and a fake
implementation (``torch.compile``, meta tensors).  A differentiable op (:func:`differentiable`)
gets a Python autograd kernel that runs a :class:`torch.autograd.Function`, whose
``forward`` calls the op below autograd (:func:`below_autograd`) and whose ``backward``
calls the backward ops.  The package's Python entries (``relu_attention``,
``fused_rms_normalize``) run that ``Function`` directly when not compiling
(:func:`call_differentiable`): the same ops dispatched, one round trip fewer.

Why not ``torch.library.custom_op``: a launch-bound GPU training step pays for the Python
run around every kernel launch, and ``custom_op``'s wrappers (default filling, alias
checks, its dynamo guard, a second Python ``autograd.Function`` layer) cost about as much
as the operator's own body.  Measured on a CPU with the launches stubbed (docs/performance.md,
"Host time of a training step"); ``torch.library.opcheck`` holds these ops to the contract
the ``custom_op`` ones met (tests/unit/test_triton_relu_attention.py,
test_triton_output_norm.py).
"""

import functools
from typing import Callable, Type

import torch

#: the ``fsa`` namespace's operators (one definition library per namespace)
LIBRARY = torch.library.Library("fsa", "DEF")

#: dispatch keys the Python implementations serve: CUDA (compiled kernels) and CPU (the
#: interpreter); meta and fake tensors get the fake implementation
DEVICE_KEYS = ("CPU", "CUDA")


def define(name: str, schema: str, impl: Callable, fake: Callable) -> torch._ops.OpOverload:
    """Defines ``fsa::<name><schema>`` with ``impl`` on CPU and CUDA tensors and ``fake``
    for meta / fake tensors; returns the op's default overload (the cheapest to call)."""
    LIBRARY.define(name + schema)
    for key in DEVICE_KEYS:
        LIBRARY.impl(name, impl, key)
    torch.library.register_fake(f"fsa::{name}", fake, lib=LIBRARY)
    return getattr(torch.ops.fsa, name).default


def differentiable(op: torch._ops.OpOverload, function: Type[torch.autograd.Function]) -> None:
    """Makes ``op`` differentiable: called with inputs that need gradients, it runs
    ``function.apply`` with the op's arguments (``function.forward`` must call the op
    :func:`below_autograd`)."""
    LIBRARY.impl(op._schema.name.split("::")[1], function.apply, "Autograd")


def call_differentiable(op: torch._ops.OpOverload, function: Type[torch.autograd.Function], *args):
    """``op(*args)`` for a :func:`differentiable` op: eagerly ``function.apply(*args)``
    itself, which is what the op's autograd kernel runs, without the dispatcher's round
    trip into Python (host time at every call); while ``torch.compile`` traces, the op
    (one node in the graph, its fake implementation for shapes)."""
    if torch.compiler.is_compiling():
        return op(*args)
    return function.apply(*args)


def below_autograd(op: torch._ops.OpOverload, *args):
    """``op(*args)`` dispatched below the autograd keys (from an ``autograd.Function``'s
    ``forward``: the op's own implementation, not its autograd kernel again)."""
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)


def once_differentiable(backward: Callable) -> Callable:
    """``torch.autograd.function.once_differentiable`` for a ``Function``'s ``backward``,
    without its ``torch.no_grad()`` block where grad mode is off already (the autograd engine
    runs a backward so, unless ``create_graph``): one Python context fewer per backward, the
    same result; with grad mode on, torch's own wrapper (the outputs raise if differentiated)."""
    wrapped = torch.autograd.function.once_differentiable(backward)

    @functools.wraps(backward)
    def run(ctx, *grads):
        if torch.is_grad_enabled():
            return wrapped(ctx, *grads)
        return backward(ctx, *grads)

    return run
