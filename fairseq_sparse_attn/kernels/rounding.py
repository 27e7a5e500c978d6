"""Rounding fp32 values to a kernel's 16-bit dtype, as a GPU rounds, in Triton's interpreter
too (the kernels of :mod:`.relu_attention` and :mod:`.output_norm`).

The interpreter's fp32 -> bf16 cast truncates; a GPU's rounds to nearest even.  An
interpreted bf16 launch (constexpr ``UPCAST``, set by the launcher on CPU tensors only)
rounds by hand instead, so CPU results are the GPU's: one bf16 step apart otherwise.
"""

import triton
import triton.language as tl


@triton.jit
def rounded(x, DT: tl.constexpr, UPCAST: tl.constexpr):
    """fp32 ``x`` rounded to ``DT``, the dtype of a dot operand or of a stored result.  With
    ``UPCAST`` (an interpreted bf16 launch) the result stays fp32, rounded to bf16's 8
    significant bits to nearest even by hand (storing it to a bf16 pointer is then exact)."""
    if UPCAST:
        bits = x.to(tl.int32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
        y = bits.to(tl.float32, bitcast=True)
    else:
        y = x.to(DT)
    return y
