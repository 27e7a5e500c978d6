"""Fused RMSNorm of the concatenated heads (ReLA-i) and its gated form (ReLA-g), in Triton.

The formulas are those of ``attention/output_norms.py`` (``rms_normalize``):

    r = 1 / sqrt(mean(z^2) + eps)                  (eps inside the root: z = 0 gives 0)
    out = z r g [* sigmoid(w z)]                   (g: ``weight``, w: ``gate_weight``)

computed in float32 whatever the input dtype (float16 / bfloat16 / float32 inputs; weights
float32 or the input's dtype), returned in the input's dtype; the backward is the module's
hand-written one, including its fp16/bf16 gradient bound: for half inputs the
normalization's part of dz is scaled by ``min(1, RMS(z) / floor)`` (``floor``: the
caller's, ``HALF_BACKWARD_RMS_FLOOR`` of ``attention/output_norms.py`` as it is at the call), the gate's part and the
parameter gradients are exact.

Each direction is one Triton kernel and one torch op (:mod:`.ops`):

* ``torch.ops.fsa.rms_norm_fwd(z, weight, gate_weight, eps, half_floor) -> (out, rstd)``
  (differentiable: its autograd runs :class:`_RmsNorm`): one program
  per row; ``rstd`` (float32, one per row) is kept for the backward.
* ``torch.ops.fsa.rms_norm_bwd(grad_out, z, weight, gate_weight, rstd, half_floor)
  -> (grad_z, grads)``: a fixed number of programs, each looping over rows ``pid, pid + P,
  ...``; dz per row, the parameter gradients accumulated in float32 registers per program,
  written as P partial rows per parameter that the op sums (in program order:
  deterministic) and casts to the parameters' dtype inside the op, both parameters in one
  sum and one cast: ``grads`` is grad_weight (n,) without a gate, and (2, n) with one,
  grad_weight then grad_gate_weight (:func:`param_grads` splits it).

so autograd, ``torch.compile`` (a fake implementation) and a dispatch-level op counter see one
op per direction.  On CUDA tensors the kernels are compiled by Triton; on CPU tensors they
run in Triton's interpreter (slow: for tests, never for training), explicitly, whatever
``TRITON_INTERPRET`` says (:mod:`.launch`, the launch of every kernel of this package).
The kernels have no ``tl.dot``; their bf16 results are rounded to nearest even by hand in
the interpreter, whose casts truncate (:mod:`.rounding`), so CPU results are the GPU's.

``launch_configs()`` lists every configuration the launcher can pick (input dtype x weight
dtype x gate x block width); the launcher picks only among them, and
``fairseq_sparse_attn.kernels.aot`` compiles each for sm_80 and sm_90 (docs/performance.md,
"Fused output norms").
"""

import functools
from typing import Dict, List, Optional, Tuple

import torch
import triton
import triton.language as tl
from torch import Tensor

from . import launch as launching
from . import ops
from .launch import LaunchPlan, kernel_forms, plan_cache, remember
from .rounding import rounded
from .served import NORM_MAX_WIDTH

#: the input dtypes served, and each one's Triton pointer type
_DTYPES: Dict[torch.dtype, str] = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
_HALF = (torch.float16, torch.bfloat16)
#: the block widths (the row width padded to a power of two, at least 64): rows of 1 to 2048
#: features (every model dim of the presets: 512 base / iwslt, 1024 big)
MAX_WIDTH = NORM_MAX_WIDTH  # (kernels/served.py: readable without importing Triton)
BLOCK_WIDTHS = tuple(64 << i for i in range((MAX_WIDTH // 64).bit_length()))  # 64, 128, ..., MAX_WIDTH
#: programs of the backward per streaming multiprocessor (CUDA); on the CPU interpreter, 4
#: programs in all (so that tests run programs that loop over several rows)
BWD_PROGRAMS_PER_SM = 4
BWD_PROGRAMS_INTERPRETER = 4


@triton.jit
def rms_norm_fwd_kernel(
    Z,
    W,
    GW,
    OUT,
    RSTD,
    n_cols,
    stride_z,
    stride_out,
    eps,
    HAS_GATE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < n_cols
    z = tl.load(Z + row * stride_z + cols, mask=mask, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(z * z, axis=0) / n_cols + eps)
    out = z * r * tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_GATE:
        gw = tl.load(GW + cols, mask=mask, other=0.0).to(tl.float32)
        out = out * tl.sigmoid(z * gw)
    tl.store(OUT + row * stride_out + cols, rounded(out, OUT.dtype.element_ty, UPCAST), mask=mask)
    tl.store(RSTD + row, r)


@triton.jit
def rms_norm_bwd_kernel(
    DOUT,
    Z,
    W,
    GW,
    RSTD,
    DZ,
    DW_PART,
    DGW_PART,
    n_rows,
    n_cols,
    stride_dout,
    stride_z,
    stride_dz,
    half_floor,
    HAS_GATE: tl.constexpr,
    HALF_BOUND: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < n_cols
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    gw = tl.zeros([BLOCK_D], dtype=tl.float32)
    if HAS_GATE:
        gw = tl.load(GW + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_D], dtype=tl.float32)
    dgw = tl.zeros([BLOCK_D], dtype=tl.float32)
    # rows pid, pid + P, ...: a while loop (Triton 3.6's interpreter cannot take a range()
    # over runtime scalars)
    row = pid
    while row < n_rows:
        row64 = tl.cast(row, tl.int64)
        z = tl.load(Z + row64 * stride_z + cols, mask=mask, other=0.0).to(tl.float32)
        o = tl.load(DOUT + row64 * stride_dout + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(RSTD + row)
        y = z * r * w  # z r g
        gy = o
        if HAS_GATE:
            s = tl.sigmoid(z * gw)
            gy = o * s
        t = gy * y
        proj = tl.sum(t, axis=0) / n_cols
        u = gy * r
        dw += u * z
        dz = u * w - z * (r * r * proj)
        if HALF_BOUND:
            dz = dz * tl.minimum(1.0 / (r * half_floor), 1.0)
        if HAS_GATE:
            ga = t * (1.0 - s)  # gradient of the gate's pre-activation w z
            dgw += ga * z
            dz += ga * gw
        tl.store(DZ + row64 * stride_dz + cols, rounded(dz, DZ.dtype.element_ty, UPCAST), mask=mask)
        row += n_programs
    tl.store(DW_PART + pid * n_cols + cols, dw, mask=mask)
    if HAS_GATE:
        tl.store(DGW_PART + pid * n_cols + cols, dgw, mask=mask)


#: the compiled form (CUDA, and what launch_configs() lists, whatever ``TRITON_INTERPRET``
#: made of the decorated functions) and the interpreted form (CPU) of each kernel
_FWD = kernel_forms(rms_norm_fwd_kernel)
_BWD = kernel_forms(rms_norm_bwd_kernel)
_FORMS = {id(forms.compiled): forms for forms in (_FWD, _BWD)}  # (hashing a JITFunction parses its source)


def _warps(block: int) -> int:
    """8 to 16 features per thread and vector (fewer below 256).  The backward with 8 warps
    at width 1024 made ptxas spill on sm_90 (48 registers, 12 bytes; the ahead-of-time
    check caught it): 4 warps there use 80 registers and no spill."""
    return min(8, max(1, block // 256))


def _weight_dtypes(dtype: torch.dtype) -> Tuple[torch.dtype, ...]:
    """float32 weights (fp32 models, autocast), or the input's dtype (``--fp16`` / ``--bf16``
    models, whose parameters are half)."""
    return (torch.float32,) if dtype == torch.float32 else (torch.float32, dtype)


def _config_name(direction: str, dtype: torch.dtype, wdtype: torch.dtype, gated: bool, block: int) -> str:
    return f"rms_norm_{direction}_{_DTYPES[dtype]}_w{_DTYPES[wdtype]}_{'gated' if gated else 'plain'}_d{block}"


def launch_configs() -> List[dict]:
    """Every configuration the launcher can pick, in the format of
    ``fairseq_sparse_attn.kernels.aot``."""
    configs = []
    for dtype, ty in _DTYPES.items():
        for wdtype in _weight_dtypes(dtype):
            wty = _DTYPES[wdtype]
            for gated in (False, True):
                for block in BLOCK_WIDTHS:
                    fwd_sig = {"Z": f"*{ty}", "W": f"*{wty}", "GW": f"*{wty}", "OUT": f"*{ty}", "RSTD": "*fp32"}
                    fwd_sig.update(n_cols="i32", stride_z="i32", stride_out="i32", eps="fp32")
                    fwd_sig.update(HAS_GATE="constexpr", BLOCK_D="constexpr", UPCAST="constexpr")
                    configs.append(
                        {
                            "name": _config_name("fwd", dtype, wdtype, gated, block),
                            "kernel": _FWD.compiled,
                            "signature": fwd_sig,
                            "constexprs": {"HAS_GATE": gated, "BLOCK_D": block, "UPCAST": False},
                            "num_warps": _warps(block),
                            "num_stages": 1,
                        }
                    )
                    bwd_sig = {"DOUT": f"*{ty}", "Z": f"*{ty}", "W": f"*{wty}", "GW": f"*{wty}", "RSTD": "*fp32"}
                    bwd_sig.update(DZ=f"*{ty}", DW_PART="*fp32", DGW_PART="*fp32")
                    bwd_sig.update(n_rows="i32", n_cols="i32", stride_dout="i32", stride_z="i32", stride_dz="i32")
                    bwd_sig.update(half_floor="fp32", HAS_GATE="constexpr", HALF_BOUND="constexpr", BLOCK_D="constexpr")
                    bwd_sig.update(UPCAST="constexpr")
                    configs.append(
                        {
                            "name": _config_name("bwd", dtype, wdtype, gated, block),
                            "kernel": _BWD.compiled,
                            "signature": bwd_sig,
                            "constexprs": {
                                "HAS_GATE": gated,
                                "HALF_BOUND": dtype in _HALF,
                                "BLOCK_D": block,
                                "UPCAST": False,
                            },
                            "num_warps": _warps(block),
                            "num_stages": 1,
                        }
                    )
    return configs


@functools.lru_cache(maxsize=None)
def _configs_by_name() -> Dict[str, dict]:
    return {c["name"]: c for c in launch_configs()}


@functools.lru_cache(maxsize=None)
def pick_config(direction: str, dtype: torch.dtype, wdtype: torch.dtype, gated: bool, n_cols: int) -> dict:
    """The configuration of ``launch_configs()`` that serves these inputs; ValueError (one
    line) for inputs no configuration serves.  Remembered per inputs (a launch-bound step
    pays the host time of every call)."""
    if dtype not in _DTYPES:
        raise ValueError(f"fused RMSNorm: input dtype {dtype} not served (float32, float16, bfloat16)")
    if wdtype not in _weight_dtypes(dtype):
        raise ValueError(f"fused RMSNorm: {wdtype} weights with {dtype} inputs not served (float32 or {dtype})")
    if not 1 <= n_cols <= MAX_WIDTH:
        raise ValueError(f"fused RMSNorm: width {n_cols} not served (1 to {MAX_WIDTH} features)")
    block = max(BLOCK_WIDTHS[0], 1 << (n_cols - 1).bit_length())  # the next power of 2 (triton's: ~4 µs)
    return _configs_by_name()[_config_name(direction, dtype, wdtype, gated, block)]


def _plan(config: dict, grid: Tuple[int, ...], device: torch.device, dtype: torch.dtype, scalars: tuple) -> LaunchPlan:
    """The launch plan of ``config`` (:func:`pick_config`) for inputs of ``dtype`` on ``device``."""
    forms = _FORMS[id(config["kernel"])]
    constexprs = config["constexprs"]
    if launching.interpreted(device) and dtype == torch.bfloat16:  # round as a GPU does (.rounding)
        constexprs = dict(constexprs, UPCAST=True)
    return LaunchPlan(forms, grid, scalars, constexprs, config["num_warps"], config["num_stages"], device)


def _launch(plan: LaunchPlan, tensors: tuple) -> None:
    """Launches ``plan`` on ``tensors`` (its kernel's pointer arguments): where the norm
    kernels launch (the op counter and the host-time tools stub it)."""
    plan(tensors)


#: each op's plans, by call signature (:mod:`.launch`)
_FWD_PLANS = plan_cache()
_BWD_PLANS = plan_cache()


def _signature(t: Optional[Tensor]) -> Optional[tuple]:
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device)


@functools.lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _bwd_programs(n_rows: int, device: torch.device) -> int:
    if device.type == "cuda":
        most = BWD_PROGRAMS_PER_SM * _sm_count(
            device.index if device.index is not None else torch.cuda.current_device()
        )
    else:
        most = BWD_PROGRAMS_INTERPRETER
    return max(1, min(n_rows, most))


def _rows(t: Tensor) -> Tensor:
    """t as (rows, width) with unit column stride (a copy only when needed; the attention's
    concatenated heads are that already: no op)."""
    t2 = t if t.dim() == 2 else t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def _empty_as(z: Tensor) -> Tensor:
    """A new contiguous tensor of z's shape and dtype (``empty_like`` when z is contiguous:
    about half the host time of ``torch.empty(shape, dtype=, device=)``)."""
    return torch.empty_like(z) if z.is_contiguous() else torch.empty(z.shape, dtype=z.dtype, device=z.device)


def _check(z: Tensor, weight: Tensor, gate_weight: Optional[Tensor]) -> None:
    width = z.shape[-1]
    for name, p in (("weight", weight), ("gate_weight", gate_weight)):
        if p is not None and (p.dim() != 1 or p.shape[0] != width or p.device != z.device):
            raise ValueError(
                f"fused RMSNorm: {name} of shape {tuple(p.shape)} on {p.device} for input width {width} on {z.device}"
            )
    if gate_weight is not None and gate_weight.dtype != weight.dtype:
        raise ValueError(f"fused RMSNorm: gate_weight dtype {gate_weight.dtype} differs from weight's {weight.dtype}")


def _params(weight: Tensor, gate_weight: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """(weight, the gate's pointer argument) with unit stride; without a gate the kernel
    gets ``weight`` there (unread)."""
    weight = weight.contiguous()
    return weight, (gate_weight.contiguous() if gate_weight is not None else weight)


def _fwd_impl(
    z: Tensor, weight: Tensor, gate_weight: Optional[Tensor], eps: float, half_floor: float
) -> Tuple[Tensor, Tensor]:
    """(z r g [* sigmoid(w z)] in z's dtype, r = 1 / RMS(z) in float32, shape z.shape[:-1]).
    ``half_floor`` is the backward's (kept for it by autograd; the forward does not use it)."""
    signature = (_signature(z), _signature(weight), _signature(gate_weight), eps)
    plan = _FWD_PLANS.get(signature)
    if plan is None:
        plan = remember(_FWD_PLANS, signature, _fwd_plan(z, weight, gate_weight, eps))
    out = _empty_as(z)
    rstd = torch.empty(z.shape[:-1], dtype=torch.float32, device=z.device)
    if z.numel():
        n_cols = z.shape[-1]
        weight, gw = _params(weight, gate_weight)
        _launch(plan, (_rows(z), weight, gw, out if out.dim() == 2 else out.view(-1, n_cols), rstd))
    return out, rstd


def _fwd_plan(z: Tensor, weight: Tensor, gate_weight: Optional[Tensor], eps: float) -> LaunchPlan:
    _check(z, weight, gate_weight)
    config = pick_config("fwd", z.dtype, weight.dtype, gate_weight is not None, z.shape[-1])
    z2 = _rows(z)  # (its layout follows from z's shape and strides: the same at every call of the plan)
    n_rows, n_cols = z2.shape
    return _plan(config, (n_rows,), z.device, z.dtype, (n_cols, z2.stride(0), n_cols, eps))  # the output: contiguous


def _fwd_fake(z, weight, gate_weight, eps, half_floor):
    return z.new_empty(z.shape), z.new_empty(z.shape[:-1], dtype=torch.float32)


def _bwd_impl(
    grad_out: Tensor, z: Tensor, weight: Tensor, gate_weight: Optional[Tensor], rstd: Tensor, half_floor: float
) -> Tuple[Tensor, Tensor]:
    """(grad_z, the parameters' gradients in weight's dtype) of ``rms_norm_fwd``: grad_weight
    (n,) without a gate; with one, (2, n): grad_weight, then grad_gate_weight (one sum and
    one cast for both, where two gradients would take two each: ops a launch-bound step
    pays for).  ``half_floor`` bounds the normalization's part of grad_z of fp16/bf16 inputs
    (float32 inputs: exact gradient, ``half_floor`` unused)."""
    gated = gate_weight is not None
    signature = (
        _signature(grad_out), _signature(z), _signature(weight), _signature(gate_weight), _signature(rstd), half_floor,
        BWD_PROGRAMS_PER_SM, BWD_PROGRAMS_INTERPRETER,  # (the grid: :func:`_bwd_programs`, as it is now)
    )  # fmt: skip
    plan = _BWD_PLANS.get(signature)
    if plan is None:
        plan = remember(_BWD_PLANS, signature, _bwd_plan(grad_out, z, weight, gate_weight, rstd, half_floor))
    n_cols = z.shape[-1]
    grad_z = _empty_as(z)
    programs = plan.grid[0]
    # each program's partial sums, (P, n): the gain's, then (gated) the gate's
    parts = torch.empty((2, programs, n_cols) if gated else (programs, n_cols), dtype=torch.float32, device=z.device)
    dgw_part = parts[1] if gated else parts
    if z.numel():
        z2, o2 = _rows(z), _rows(grad_out.to(z.dtype) if grad_out.dtype != z.dtype else grad_out)
        gz2 = grad_z if grad_z.dim() == 2 else grad_z.view(-1, n_cols)
        weight, gw = _params(weight, gate_weight)
        # the kernel reads r of row i at RSTD + i: a strided r (a direct caller's) is copied
        r = rstd if rstd.dim() == 1 and rstd.stride(0) == 1 else rstd.contiguous().view(-1)
        _launch(plan, (o2, z2, weight, gw, r, gz2, parts, dgw_part))
    else:
        parts.zero_()
    summed = parts.sum(-2)
    return grad_z, summed.to(weight.dtype)


def param_grads(grads: Tensor, gate_weight: Optional[Tensor]) -> Tuple[Tensor, Optional[Tensor]]:
    """(grad_weight, grad_gate_weight or None) from ``rms_norm_bwd``'s parameter gradients."""
    if gate_weight is None:
        return grads, None
    grad_w, grad_gw = grads.unbind(0)
    return grad_w, grad_gw


def _bwd_plan(grad_out, z, weight, gate_weight, rstd, half_floor) -> LaunchPlan:
    _check(z, weight, gate_weight)
    if (
        grad_out.shape != z.shape
        or grad_out.device != z.device
        or rstd.shape != z.shape[:-1]
        or rstd.dtype != torch.float32
        or rstd.device != z.device
    ):
        raise ValueError(
            f"fused RMSNorm backward: grad_out {tuple(grad_out.shape)} on {grad_out.device} and rstd "
            f"{tuple(rstd.shape)} {rstd.dtype} on {rstd.device} for input {tuple(z.shape)} on {z.device} "
            f"(rstd: the forward's, float32)"
        )
    config = pick_config("bwd", z.dtype, weight.dtype, gate_weight is not None, z.shape[-1])
    # (their layouts follow from the shapes, strides and dtypes: the same at every call of the plan)
    z2, o2 = _rows(z), _rows(grad_out.to(z.dtype))
    n_rows, n_cols = z2.shape
    programs = _bwd_programs(n_rows, z.device)
    scalars = (n_rows, n_cols, o2.stride(0), z2.stride(0), n_cols, half_floor)  # grad_z: contiguous
    return _plan(config, (programs,), z.device, z.dtype, scalars)


def _bwd_fake(grad_out, z, weight, gate_weight, rstd, half_floor):
    n = weight.shape[0]
    return z.new_empty(z.shape), weight.new_empty((2, n) if gate_weight is not None else (n,))


rms_norm_fwd = ops.define(
    "rms_norm_fwd",
    "(Tensor z, Tensor weight, Tensor? gate_weight, float eps, float half_floor) -> (Tensor, Tensor)",
    _fwd_impl,
    _fwd_fake,
)
rms_norm_bwd = ops.define(
    "rms_norm_bwd",
    "(Tensor grad_out, Tensor z, Tensor weight, Tensor? gate_weight, Tensor rstd, float half_floor) "
    "-> (Tensor, Tensor)",
    _bwd_impl,
    _bwd_fake,
)


class _RmsNorm(torch.autograd.Function):
    """Autograd of ``fsa::rms_norm_fwd`` (:func:`.ops.differentiable`)."""

    @staticmethod
    def forward(ctx, z, weight, gate_weight, eps, half_floor):
        out, rstd = ops.below_autograd(rms_norm_fwd, z, weight, gate_weight, eps, half_floor)
        ctx.mark_non_differentiable(rstd)
        ctx.set_materialize_grads(False)  # no zeros for rstd's (absent) gradient
        ctx.save_for_backward(z, weight, gate_weight, rstd)
        ctx.half_floor = half_floor
        return out, rstd

    @staticmethod
    @ops.once_differentiable  # the backward ops have no autograd: a clear error
    def backward(ctx, grad_out, grad_rstd):
        if grad_out is None:  # (materialize_grads off) the output took no part in the loss
            return None, None, None, None, None
        z, weight, gate_weight, rstd = ctx.saved_tensors
        grad_z, grads = rms_norm_bwd(grad_out, z, weight, gate_weight, rstd, ctx.half_floor)
        return (grad_z, *param_grads(grads, gate_weight), None, None)


ops.differentiable(rms_norm_fwd, _RmsNorm)


def fused_rms_normalize(
    z: Tensor,
    eps: float,
    weight: Tensor,
    gate_weight: Optional[Tensor],
    half_backward_rms_floor: float,
) -> Tensor:
    """z / sqrt(mean(z^2) + eps) * weight [* sigmoid(gate_weight * z)] over the last
    dimension: ``attention.output_norms.rms_normalize`` (float32/float16/bfloat16 inputs) in
    one fused kernel per direction.  ``half_backward_rms_floor``: the floor of the fp16/bf16
    gradient bound, the caller's (``attention/output_norms.py`` passes its
    ``HALF_BACKWARD_RMS_FLOOR`` as it is at the call; the kernels import nothing of
    ``attention/``)."""
    return ops.call_differentiable(
        rms_norm_fwd, _RmsNorm, z, weight, gate_weight, float(eps), float(half_backward_rms_floor)
    )[0]


def fused_rmsnorm(z: Tensor, weight: Tensor, eps: float, half_backward_rms_floor: float) -> Tensor:
    """RMSNorm(z) = z / RMS(z) * weight (``rmsnorm``, ReLA-i's ``rmsnorm_i``)."""
    return fused_rms_normalize(z, eps, weight, None, half_backward_rms_floor)


def fused_gated_rmsnorm(
    z: Tensor, weight: Tensor, gate_weight: Tensor, eps: float, half_backward_rms_floor: float
) -> Tensor:
    """sigmoid(gate_weight * z) * RMSNorm(z) (ReLA-g's ``gated_rmsnorm``)."""
    return fused_rms_normalize(z, eps, weight, gate_weight, half_backward_rms_floor)
