"""``triton``: relu / relu_scaled through the fused Triton kernels
(:mod:`fairseq_sparse_attn.kernels.relu_attention`): forward and backward without the
(tgt × src) weights: a forward kernel and one (fp16/bf16) or two backward kernels per call,
one torch op each.

Serves activations that are rectified, have exact zeros and ReLU's backward
(``supports_chunking``: ``relu``, ``relu_scaled``), with a row factor of the kernel's form
``c / √max(n, 1)`` (ReLUFormer's 1/(γ√(n/2)); probed once per activation through its
``row_scale``); head dims 32, 64, 128, 256 in fp32 / fp16 / bf16 (:mod:`...kernels.served`); masks that are key padding
and/or causal (:func:`..masks.padding_and_causal`), beam-search key groups, attention
dropout (inside the kernels, under a seed drawn from torch's generator: ``relu_attention``'s
``dropout_p``), ReLUFormer's row sums for its regularized loss (summed in the forward
kernel's loop, their gradients added to the backward's: ``relu_attention_with_row_sums``).
Not served, so
they go to the other backends with the reason: returned weights (analysis, ``need_weights``),
additive biases, bias providers, fixed-pattern heads, masked
heads / RHE, an activation module with hooks
(the kernels never call it, so its hooks would not run).  fairseq's own requests for
weights (``need_weights`` by default, the alignment layer's ``need_head_weights``) get
None on a module named ``triton``, so ``--print-alignment``, which needs them, is refused
in one line (``compat/alignment_weights.py``).

Calls of a module with a plain pipeline do not come through :func:`triton_attention`: the
call plan hands them to :func:`direct_call` (no per-call description or backend choice, the
scale inside the kernel, a fused RMS output norm in the kernels' own autograd Function);
what that declines comes here through :func:`~..core.attend`, which says why.  A module on
``auto`` gets the same direct call for the calls auto gives this backend (on a machine where
:func:`auto_may_take_it`), so auto runs what ``--attn-backend triton`` was measured with.

Devices: CUDA runs the compiled kernels.  On CPU the same kernels run through Triton's
interpreter (slow: for tests), only when the backend is named (``--attn-backend triton``).

Triton: the kernels run with the Triton versions of :data:`~...kernels.served.TRITON_VERSIONS`
(3.6 and 3.7, which torch 2.10 to 2.13 pin).  Under any other, or without Triton, the
backend serves nothing (:func:`~...kernels.served.triton_unserved` names the version): a
named ``--attn-backend triton`` is refused in one line when the model is built, and
``auto`` never takes it, nor imports the kernels.

``auto`` (:func:`_auto_enabled`) takes it only for a training call on a CUDA device whose
family (board) has a recorded ``make bench-gpu`` result in ``docs/results/`` that shows it
faster for the call's activation in its dtype, with the installed Triton's version
(:data:`MEASURED_FASTER`, what
:func:`measured_faster` reads from the results: at least 3 paired rounds, of
``fairseq-train`` runs or of ``benchmarks/train_ab.py``'s blocks, the kernels faster in
enough of them for a one-sided sign test at 1/8 (all of 3), and a complete, passing
correctness part: :func:`faster_in`).  The recorded runs
(2026-11-27, Triton 3.6.0) show it for ReLA's ``relu`` in bf16 on an H200 (``bench-gpu-h200.json``:
ReLA-g's updates/s ahead of eager in each of 3 rounds); the H100's fp16 (2 rounds, ranges
overlapping) and the H200's fp16 (1 round) decide nothing.  A call with attention dropout or
row sums is a setting of its own (``"fp16+dropout"``, ``"fp16+rowsums"``,
``"fp16+dropout+rowsums"``: :func:`measured_setting`) that no recorded run has measured yet
(``make bench-gpu``'s ``*_dropout`` and ``reluformer*`` presets: :data:`DECIDING_PRESETS`).
Incremental
decoding steps (no gradients) are served only when named, as no measurement shows the
kernels faster there (a decoding step of a module with a plain pipeline does not reach
:func:`~..core.attend` at all: the call plan's inference call).
"""

import functools
import json
import math
import re
import sys
from pathlib import Path
from typing import Callable, Dict, FrozenSet, Hashable, NamedTuple, Optional, Tuple

import torch

from ...errors import UsageError
from ...kernels.served import installed_triton, minor_version, triton_unserved, unserved, unserved_sizes
from .. import masks
from ..core import (
    AttendSpec,
    AttentionInputs,
    Backend,
    Call,
    Capabilities,
    auto_remedy,
    hook_free,
    register_backend,
)
from ..intermediates import Intermediates

#: what the kernels compute of an activation: f = ReLU (``supports_chunking``: ReLU's
#: backward), hidden keys zeroed (rectified, exact zeros)
TRITON_TRAITS = frozenset({"rectified", "exact_zeros", "supports_chunking"})

#: the recorded ``make bench-gpu`` results, in a checkout (an installed wheel has no docs/)
RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"


# --------------------------------------------------------------------------- the row factor
@functools.lru_cache(maxsize=None)
def _row_coef_of(row_scale_probe: Tuple[float, ...]) -> Optional[float]:
    """For ``row_scale(n)`` at n = 0..len-1: None (factor 1), or c with
    ``row_scale(n) = c / √max(n, 1)``; raises ValueError when neither fits."""
    values = torch.tensor(row_scale_probe, dtype=torch.float64)
    if torch.all(values == 1):
        return None
    n = torch.arange(len(values), dtype=torch.float64).clamp(min=1)
    coef = float(values[2] * math.sqrt(2))
    if not coef > 0 or not torch.allclose(values, coef / n.sqrt(), rtol=1e-5, atol=0):
        raise ValueError("its row factor is not of the kernels' form c / sqrt(n)")
    return coef


#: an activation's ``row_scale_key()`` (what its ``row_scale`` depends on besides n, e.g.
#: ReLUFormer's gamma) -> (row scaled, c) or the ValueError: probed once per key, not at every
#: call (the probe reads 64 numbers back), and again when the key changes (a gamma set after
#: the first call reaches the kernels, as it reaches the materialized path's row factor)
_ROW_COEF: Dict[Hashable, object] = {}


def row_coef(activation) -> Tuple[bool, float]:
    """(row scaled, c) for the kernels; ValueError when the activation's factor does not fit."""
    if not getattr(activation, "row_scaled", False):
        return False, 1.0
    key = activation.row_scale_key()
    if key is None:  # no row factor (ReLUFormer's no-length-scale ablation)
        return False, 1.0
    known = _ROW_COEF.get(key)
    if known is None:
        probe = activation.row_scale(torch.arange(64, dtype=torch.float64)).flatten()
        try:
            coef = _row_coef_of(tuple(float(x) for x in probe))
            known = (False, 1.0) if coef is None else (True, coef)
        except ValueError as e:
            known = e
        _ROW_COEF[key] = known
    if isinstance(known, ValueError):
        raise known
    return known  # type: ignore[return-value]


def kernel_gamma(activation) -> Optional[float]:
    """The kernels' ``gamma`` for ``activation``: None (ReLA's relu, factor 1) or
    ReLUFormer's gamma; ValueError when its row factor is not of the kernels' form."""
    scaled, coef = row_coef(activation)
    return math.sqrt(2.0) / coef if scaled else None


# --------------------------------------------------------------------------- auto
_BOARDS = {"PCIE": "PCIe", "NVL": "NVL"}  # board variants named apart (device_family)


def device_family(name: str) -> str:
    """The family of a CUDA device name: "NVIDIA H100 80GB HBM3" -> "H100" (the SXM
    board), "NVIDIA H100 PCIe" -> "H100 PCIe", "NVIDIA H100 NVL" -> "H100 NVL": boards of
    one chip with other memory and clocks are families of their own, so that one board's
    measurement does not decide for another."""
    tokens = re.split(r"[\s,-]+", name)
    for i, token in enumerate(tokens):
        if re.fullmatch(r"[A-Z]*\d{2,}[A-Z]*", token) and not token.endswith("GB"):
            variant = next((_BOARDS[t.upper()] for t in tokens[i + 1 :] if t.upper() in _BOARDS), None)
            return f"{token} {variant}" if variant else token
    return name


#: the dtype names of a ``make bench-gpu`` result's train part
DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


#: (fused preset, eager preset, activation, setting suffix) of ``make bench-gpu``'s train part
#: that decide a setting (:func:`measured_setting`) for modules of that activation: ReLA's
#: ``relu`` by ReLA-g without and with attention dropout (ReLA-i, the same kernels with the
#: norm kernel's ungated form, shares the decision), ReLUFormer's ``relu_scaled`` by
#: ReLUFormer, and with its regularized criterion (the row sums), without and with the
#: papers' attention dropout
DECIDING_PRESETS = (
    ("rela_g_triton", "rela_g", "relu", ""),
    ("rela_g_triton_dropout", "rela_g_dropout", "relu", "+dropout"),
    ("reluformer_triton", "reluformer", "relu_scaled", ""),
    ("reluformer_reg_triton", "reluformer_reg", "relu_scaled", "+rowsums"),
    ("reluformer_reg_triton_dropout", "reluformer_reg_dropout", "relu_scaled", "+dropout+rowsums"),
)
#: paired rounds a decision needs, and the evidence it needs from them: the fused preset
#: faster in so many of the rounds that a one-sided sign test gives at most
#: :data:`DECIDING_SIGN_P` under no difference.  With 3 rounds (``make bench-gpu``'s train
#: part) that is all three (1/8); with the tens of paired blocks of ``benchmarks/train_ab.py``
#: it is a clear majority (e.g. 26 of 40).  Two rounds whose ranges overlapped decided H100
#: fp16 until 2026-11-27.
MIN_DECIDING_ROUNDS = 3
DECIDING_SIGN_P = 0.125


def sign_test_p(wins: int, n: int) -> float:
    """One-sided sign test: the probability of at least ``wins`` of ``n`` paired rounds
    under no difference (each side 1/2)."""
    if n <= 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(wins, n + 1)) / 2**n


def paired_rounds(train_dtype: dict, fused: str, eager: str) -> list:
    """[(fused updates/s, eager updates/s)] of the rounds of a result's dtype in which both
    presets ran: the train part's ``runs[preset][round]`` (a round cut off by the budget is
    None), or the paired blocks of a ``train_ab`` part (``blocks[i]["ups"][preset]``)."""
    if "blocks" in train_dtype:
        blocks = train_dtype.get("blocks") or []
        return [(b["ups"][fused], b["ups"][eager]) for b in blocks if fused in b.get("ups", {}) and eager in b["ups"]]
    runs = train_dtype.get("runs") or {}
    pairs = zip(runs.get(fused) or [], runs.get(eager) or [])
    return [(f, e) for f, e in pairs if f is not None and e is not None]


def shows_faster(pairs) -> bool:
    """At least :data:`MIN_DECIDING_ROUNDS` paired rounds, the fused preset faster in enough
    of them for a one-sided sign test at :data:`DECIDING_SIGN_P`."""
    wins = sum(f > e for f, e in pairs)
    return len(pairs) >= MIN_DECIDING_ROUNDS and sign_test_p(wins, len(pairs)) <= DECIDING_SIGN_P


def kernels_verified(result: dict) -> bool:
    """The result's CUDA correctness part ran every check it planned and each passed (a
    result without one, or with a shard cut off, decides nothing)."""
    kernels = (result.get("parts") or {}).get("kernels") or {}
    checks = kernels.get("correctness") or []
    if not checks or kernels.get("shards_missing") or kernels.get("correctness_ok") is False:
        return False  # (a shard that wrote nothing: its plan, and so the count, is unknown)
    expected = kernels.get("expected_checks")
    if expected is not None and len(checks) < expected:
        return False
    return all(c.get("ok") for c in checks)


#: the parts of a recorded result whose paired rounds decide: ``make bench-gpu``'s
#: ``fairseq-train`` rounds and ``benchmarks/train_ab.py``'s paired blocks
DECIDING_PARTS = ("train", "train_ab")


def faster_in(result: dict) -> FrozenSet[Tuple[str, str]]:
    """The (activation, setting) pairs (:func:`measured_setting`: ``"fp16"``,
    ``"bf16+dropout"``, ...) in which a recorded result shows the triton backend faster:
    its kernels passed their CUDA correctness checks (:func:`kernels_verified`), and the
    fused and the eager preset of :data:`DECIDING_PRESETS` ran side by side in paired
    rounds of one of :data:`DECIDING_PARTS` that show the fused one faster
    (:func:`shows_faster`)."""
    if not kernels_verified(result):
        return frozenset()
    faster = set()
    for part in DECIDING_PARTS:
        for dtype, per_dtype in ((result.get("parts") or {}).get(part) or {}).items():
            for fused, eager, activation, suffix in DECIDING_PRESETS:
                if shows_faster(paired_rounds(per_dtype, fused, eager)):
                    faster.add((activation, dtype + suffix))
    return frozenset(faster)


class Measurement(NamedTuple):
    """A recorded result that shows the kernels faster: its file in ``docs/results/``, and
    the Triton version (major.minor) it ran with (another Triton compiles other code)."""

    file: str
    triton: str


def measured_faster(results: Path = RESULTS) -> Dict[Tuple[str, str, str], Measurement]:
    """{(device family, activation, setting): measurement} for every recorded ``make
    bench-gpu`` result (``docs/results/bench-gpu*.json``) that shows the triton backend
    faster there (:func:`faster_in`), and records the Triton version it ran with (a result
    without it decides nothing)."""
    found: Dict[Tuple[str, str, str], Measurement] = {}
    for path in sorted(results.glob("bench-gpu*.json")) if results.is_dir() else ():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        provenance = data.get("provenance") or {}
        device = provenance.get("device", "")
        triton = (provenance.get("versions") or {}).get("triton")
        if device and device != "cpu" and triton:
            for activation, setting in faster_in(data):
                for name in device.split(", "):
                    found[(device_family(name), activation, setting)] = Measurement(path.name, minor_version(triton))
    return found


#: where auto takes this backend: {(device family, activation, setting): the result that
#: shows it faster, and the Triton version it ran with} (a setting: the dtype, with
#: "+dropout" for calls with attention dropout and "+rowsums" with ReLUFormer's row sums,
#: :func:`measured_setting`), what
#: :func:`measured_faster` reads from ``docs/results/`` (a test keeps the two equal, so a
#: new recorded result changes auto only with this table).  Kept in the package because an
#: installed wheel (``make install OFFLINE=...``, the GPU nodes' install) has no ``docs/``:
#: read from there, auto never took the kernels on any GPU.  (H100 fp16 was here until
#: 2026-11-27 on 2 rounds whose ranges overlapped; it needs a third.)
MEASURED_FASTER: Dict[Tuple[str, str, str], Measurement] = {
    ("H200", "relu", "bf16"): Measurement("bench-gpu-h200.json", "3.6"),
}


@functools.lru_cache(maxsize=None)
def _family_of_device(index: int) -> str:
    return device_family(torch.cuda.get_device_name(index))


def auto_may_take_it() -> bool:
    """``auto`` may take this backend on this machine: CUDA is available, and a recorded
    measurement with the installed Triton's version shows it faster on some device family
    (:func:`_auto_enabled` decides per call, for the call's device and dtype; this does not
    initialise CUDA, and imports Triton only on a CUDA machine)."""
    return bool(MEASURED_FASTER) and torch.cuda.is_available() and _installed_triton_measured()


def _installed_triton_measured() -> bool:
    """Some recorded measurement ran with the installed Triton (major.minor), which the
    kernels run with (:func:`~...kernels.served.triton_unserved`)."""
    version = installed_triton()
    if triton_unserved() is not None or not version:
        return False
    return any(m.triton == minor_version(version) for m in MEASURED_FASTER.values())


def measured_setting(dtype: torch.dtype, dropout: bool, row_sums: bool = False) -> str:
    """The name under which a ``make bench-gpu`` result records a training setting:
    ``"fp16"``, ``"bf16"``, ... and, with attention dropout, ``"fp16+dropout"``; with the
    row sums (ReLUFormer's regularized criterion), ``"+rowsums"`` after those."""
    return DTYPE_NAMES.get(dtype, "") + ("+dropout" if dropout else "") + ("+rowsums" if row_sums else "")


def _auto_enabled(spec: AttendSpec, call: Call) -> bool:
    if call.device != "cuda" or not call.grad or call.dtype is None or not torch.cuda.is_available():
        return False
    family = _family_of_device(torch.cuda.current_device())
    measured = MEASURED_FASTER.get((family, call.activation, measured_setting(call.dtype, call.dropout, call.row_sums)))
    return measured is not None and measured.triton == minor_version(installed_triton() or "")


# --------------------------------------------------------------------------- the backend
def _unavailable(call: Call) -> Optional[str]:
    if call.dtype is None:
        return "no values dtype"
    reason = unserved(call.device, call.dtype, call.head_dim)
    version_reason = triton_unserved()  # (cached: read at every call of a named backend)
    if version_reason is not None:
        reason = version_reason if reason is None else f"{version_reason}, {reason}"
    if reason is not None or call.device == "cpu":
        return reason  # CPU: Triton's interpreter (named backend only: auto never takes it on CPU)
    if not torch.cuda.is_available():
        return "CUDA is not available"
    return None


#: why a call whose activation module has hooks is not the kernels': they compute the
#: activation inside, so a hook on it would never see the scores or the weights
HOOKED_ACTIVATION = "hooks on the activation module (the kernels never call it, so its hooks would not run)"
#: the same for hooks on every module (``torch.nn.modules.module.register_module_forward_hook``
#: and its kind, which tools such as ``torch.utils.flop_counter.FlopCounterMode`` install)
GLOBAL_MODULE_HOOKS = (
    "global module hooks (registered for every module, e.g. by FlopCounterMode; the kernels never call "
    "the activation module, so they would not see its call)"
)


def _dropout_types() -> Tuple[type, ...]:
    """``torch.nn.Dropout``, and fairseq's ``FairseqDropout`` where fairseq was imported (the
    attention core needs torch only; without fairseq imported no such module exists)."""
    fairseq_dropout = sys.modules.get("fairseq.modules.fairseq_dropout")
    return (torch.nn.Dropout,) + ((fairseq_dropout.FairseqDropout,) if fairseq_dropout is not None else ())


def _dropout_kind_reason(dropout) -> Optional[str]:
    """None when ``dropout`` is a plain ``torch.nn.Dropout`` or fairseq's ``FairseqDropout``,
    whose whole effect is its ``p``; else why the kernels cannot stand in for it."""
    if type(dropout) not in _dropout_types():
        return f"attention dropout by a {type(dropout).__name__} module (the kernels apply torch.nn.Dropout's and fairseq's)"
    return None


def dropout_reason(dropout) -> Optional[str]:
    """None when the kernels may apply ``dropout`` (a module that applies to this call) in
    its place: a plain ``torch.nn.Dropout`` or fairseq's ``FairseqDropout`` without hooks;
    else why not (the kernels never call the module, so its hooks, or what another module
    does, would be skipped)."""
    kind = _dropout_kind_reason(dropout)
    if kind is not None:
        return kind
    if not hook_free(dropout):
        return "hooks on the attention dropout module (the kernels never call it, so its hooks would not run)"
    return None


def hooks_reason(activation) -> str:
    """Which hooks keep a call of a module with this ``activation`` from the kernels (given
    that :func:`~..core.hook_free` is false for it)."""
    own = (
        activation._forward_hooks
        or activation._forward_pre_hooks
        or activation._backward_hooks
        or activation._backward_pre_hooks
    )
    return HOOKED_ACTIVATION if own else GLOBAL_MODULE_HOOKS


def triton_attention(q, k, v, inputs: AttentionInputs, spec: AttendSpec, call: Call):
    """The kernels on q (bsz, H, tgt, d) (already scaled), k, v (kv_bsz, H, src, d); with
    ``call.row_sums`` also the row sums of the weights (the regularized criterion's)."""
    from ...kernels.relu_attention import relu_attention, relu_attention_with_row_sums

    structure = masks.padding_and_causal(inputs.hidden, inputs.kv_groups, k.size(0))
    try:
        if structure is None:
            raise ValueError("a mask other than key padding and causal")
        too_large = unserved_sizes(q, k, v)
        if too_large is not None:
            raise ValueError(too_large)
        if not hook_free(spec.activation):
            raise ValueError(hooks_reason(spec.activation))
        not_served = dropout_reason(spec.dropout) if call.dropout else None
        if not_served is not None:
            raise ValueError(not_served)
        gamma = kernel_gamma(spec.activation)
    except ValueError as e:
        if spec.backend == "auto":  # auto (a measured family and dtype): the exact path
            from .materialized import materialized

            return materialized(q, k, v, inputs, spec, call)
        raise UsageError(
            f"attention backend 'triton' (--attn-backend) cannot serve this configuration: {e}; {auto_remedy(call.grad)}"
        ) from None
    key_padding, causal = structure
    dropout_p = float(spec.dropout.p) if call.dropout else 0.0
    if not call.row_sums:
        out = relu_attention(q, k, v, key_padding, causal, inputs.kv_groups, 1.0, gamma, dropout_p)
        return out, Intermediates(backend="triton")
    out, wsum, wlogw = relu_attention_with_row_sums(
        q, k, v, key_padding, causal, inputs.kv_groups, 1.0, gamma, dropout_p
    )
    n = masks.key_counts(inputs.hidden, k.size(2), q.device)
    return out, Intermediates(backend="triton", row_sums=(wsum, wlogw, n))


def direct_call(activation, output_norm, dropout) -> Optional[Callable[..., Optional[torch.Tensor]]]:
    """The call plan's direct kernel call for a module whose backend is ``triton`` and
    whose pipeline is plain (``call_plan.plain_pipeline_reason``): ``call(q, k, v, hidden,
    kv_groups, scale)`` on q (bsz, H, tgt, d) *unscaled* and k, v (kv_bsz, H, src, d)
    returns the concatenated heads after the module's ``output_norm``, (tgt * bsz, H * d),
    with attention dropout of probability ``dropout_p`` on the weights (0: none),
    or None for a call the kernels do not serve (a dtype, head dim or mask they do not
    take, an activation with hooks, or a ``dropout`` module they cannot stand in for,
    :func:`dropout_reason`: the plan hands it to :func:`~..core.attend`, which says why); the
    whole function
    is None for an activation they do not serve.  The same kernels as
    :func:`triton_attention` without describing the call and choosing the backend at each
    call, the scale applied to the scores inside the kernel instead of a multiply of q,
    and a fused RMS norm run in the same ``autograd.Function``
    (:mod:`...kernels.normed_attention`): what these cost a launch-bound step on the host
    (docs/performance.md, "Host time of a training step")."""
    if not TRITON_TRAITS <= getattr(activation, "traits", frozenset()) or triton_unserved() is not None:
        return None
    try:
        kernel_gamma(activation)
    except ValueError:
        return None
    from ...kernels.normed_attention import normed_relu_attention
    from ...kernels.relu_attention import relu_attention

    kernel_arguments = getattr(output_norm, "kernel_arguments", None)
    # the module's kind is fixed with the plan (setting dropout_module rebuilds it); its
    # hooks may change between calls
    dropout_kind_unserved = _dropout_kind_reason(dropout) is not None

    def call(q, k, v, hidden, kv_groups: int, scale: float, dropout_p: float = 0.0) -> Optional[torch.Tensor]:
        if unserved(v.device.type, v.dtype, v.size(-1)) is not None or unserved_sizes(q, k, v) is not None:
            return None
        if not hook_free(activation):  # attend() says why (hooks_reason), or auto runs it exactly
            return None
        if dropout_p and (dropout_kind_unserved or not hook_free(dropout)):  # attend() says why, or auto runs it
            return None
        try:  # read at each call, as the materialized path reads it (a dict lookup)
            gamma = kernel_gamma(activation)
        except ValueError:  # a row factor changed to one the kernels do not take: attend() says why
            return None
        structure = masks.padding_and_causal(hidden, kv_groups, k.size(0))
        if structure is None:
            return None
        pad, causal = structure
        fused = kernel_arguments(v.dtype) if kernel_arguments is not None else None
        if fused is not None and hook_free(output_norm) and not torch.compiler.is_compiling():
            weight, gate_weight, eps, half_floor = fused
            return normed_relu_attention(
                q, k, v, pad, causal, kv_groups, scale, gamma, weight, gate_weight, eps, half_floor, dropout_p
            )
        bsz, heads, tgt, d = q.shape
        out = relu_attention(q, k, v, pad, causal, kv_groups, scale, gamma, dropout_p)
        # (bsz, H, tgt, d) laid out as (tgt, bsz, H, d) by the kernel: a view
        return output_norm(out.permute(2, 0, 1, 3).reshape(tgt * bsz, heads * d))

    return call


register_backend(
    Backend(
        "triton",
        triton_attention,
        Capabilities(activation_traits=TRITON_TRAITS, dropout=True, row_sums=True, devices=frozenset({"cpu", "cuda"})),
        priority=35,
        enabled=_auto_enabled,
        auto_when=(
            "for training calls on CUDA devices whose family has a recorded make bench-gpu result showing it "
            "faster for the call's activation in its dtype, with attention dropout and row sums or without ("
            + (
                ", ".join(
                    f"{family} {act} {setting} with Triton {MEASURED_FASTER[family, act, setting].triton}"
                    for family, act, setting in sorted(MEASURED_FASTER)
                )
                or "none"
            )
            + ")"
        ),
        unavailable=_unavailable,
    )
)
