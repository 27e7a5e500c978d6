"""Fused GPU kernels written in Triton, each registered as a torch op
(``torch.library``, namespace ``fsa``: :mod:`.ops`) so that autograd, ``torch.compile`` and a
dispatch-level op counter see one op per kernel.

Every module here that launches kernels exposes ``launch_configs() -> list[dict]``: one
dict per configuration its launcher can pick (``name``, ``kernel`` (the ``@triton.jit``
function), ``signature`` (argument name -> Triton type string, ``"constexpr"`` for
compile-time arguments), ``constexprs``, ``num_warps``, ``num_stages``).  The launcher
chooses only among these, so compiling the list ahead of time (sm_80, sm_90) covers every
kernel a GPU run can launch.

Importing this package imports nothing else: each kernel module imports ``triton`` (an
install requirement on every machine: ``make install`` installs the version the installed
torch pins) when it is itself imported.  Every kernel is launched through :mod:`.launch`:
compiled on CUDA tensors, through Triton's interpreter on CPU tensors.

Modules: :mod:`.relu_attention` (ReLA ``relu`` / ReLUFormer ``relu_scaled`` attention,
forward and backward); :mod:`.output_norm` (RMSNorm-i and the gated RMSNorm over the
concatenated heads, forward and backward); :mod:`.launch` (the launch of every kernel:
compiled or interpreted); :mod:`.aot` (the ahead-of-time compile check of every
``launch_configs()``, ``make check-kernels``).
"""
