"""The attention-dropout decisions of the fused ReLU-attention kernels
(``fairseq_sparse_attn/kernels/relu_attention.py``, ``_kept``), written out in numpy from the
published algorithm, independently of Triton: Philox-4x32-10 (Salmon et al. 2011, the round
and key constants of Random123, which Triton's ``tl.philox`` implements) under the call's
64-bit seed at the element's counter (key j, query i, b * H + h, 0), its first word as
Triton's ``uint_to_uniform_float`` maps it to [0, 1), kept when >= p.  The reference of the
kernels' dropout in the unit tests (through the interpreter) and in ``gpu_kernels.py``'s CUDA
correctness checks."""

import numpy as np
import torch

MASK32 = np.uint64(0xFFFFFFFF)


def philox_first_word(seed: int, c0, c1, c2, c3):
    """The first output word of Philox-4x32-10 with key (seed low, seed high), elementwise
    on uint32 arrays (numpy, uint64 products)."""
    c = [np.asarray(x, dtype=np.uint64) & MASK32 for x in np.broadcast_arrays(c0, c1, c2, c3)]
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64((seed >> 32) & 0xFFFFFFFF)
    round_a, round_b = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    for _ in range(10):
        p0, p2 = round_a * c[0], round_b * c[2]  # full 64-bit products of two 32-bit words
        c = [
            ((p2 >> np.uint64(32)) ^ c[1] ^ k0) & MASK32,
            p2 & MASK32,
            ((p0 >> np.uint64(32)) ^ c[3] ^ k1) & MASK32,
            p0 & MASK32,
        ]
        k0 = (k0 + np.uint64(0x9E3779B9)) & MASK32
        k1 = (k1 + np.uint64(0xBB67AE85)) & MASK32
    return c[0]


def keep_mask(seed: int, bsz: int, heads: int, tgt: int, src: int, p: float) -> torch.Tensor:
    """(bsz, heads, tgt, src) bool: the weights dropout keeps (independent of the kernels)."""
    bh = np.arange(bsz * heads, dtype=np.uint64).reshape(bsz, heads, 1, 1)
    i = np.arange(tgt, dtype=np.uint64).reshape(1, 1, tgt, 1)
    j = np.arange(src, dtype=np.uint64).reshape(1, 1, 1, src)
    word = philox_first_word(seed, j, i, bh, np.uint64(0)).astype(np.uint32).view(np.int32).astype(np.int64)
    # Triton's uint_to_uniform_float: the word as int32, negatives folded, times 2^-31 (rounded)
    folded = np.where(word < 0, -word - 1, word).astype(np.float32)
    uniform = folded * np.float32(4.6566127342e-10)
    return torch.from_numpy(uniform >= np.float32(p))
