"""A seeded differential fuzz of the fused ReLU-attention kernels (through Triton's
interpreter) against the plain formula in float64: random batch entries, beam key groups,
heads, query and key lengths (1 to 48, T != S), head dims, dtypes, padding patterns (fully
padded entries included), causal masks, ReLUFormer's row factor, attention dropout (the
decisions from the numpy Philox of test_triton_dropout.py), the long tier's tiles, and both
backwards (``run`` checks the one pass and the two passes, and that their dK and dV agree
bit for bit).  The cases are drawn from a fixed seed, so a run is reproducible and a
failure names its case; the ninth session's ad-hoc fuzz (2,485 cases, no defect) is this
test at a size CI can afford (about half a minute).  A second set of cases asks for
ReLUFormer's row sums too (``relu_attention_with_row_sums``: a loss of the output and both
sums, test_triton_row_sums.py's reference)."""

import random

import pytest
import torch

from conftest import require_kernels  # noqa: E402

require_kernels()  # the Triton kernels run here, else the module skips (CI: fails)

from test_triton_dropout import keep_mask  # noqa: E402
from test_triton_relu_attention import TOL, run  # noqa: E402
from test_triton_row_sums import run as run_with_row_sums  # noqa: E402

from fairseq_sparse_attn.kernels import relu_attention as ra  # noqa: E402

CASES = 64
ROW_SUMS_CASES = 24


def draw(rng: random.Random) -> dict:
    kv_bsz, heads = rng.randint(1, 2), rng.randint(1, 2)
    tgt, src = rng.randint(1, 48), rng.randint(1, 48)
    padding = None
    if rng.random() < 0.6:
        lengths = [rng.randint(0, src) for _ in range(kv_bsz)]  # 0: a fully padded entry
        padding = torch.arange(src)[None, :] >= torch.tensor(lengths)[:, None]
    return dict(
        dtype=rng.choice([torch.float32, torch.float16, torch.bfloat16]),
        d=rng.choice([32, 32, 64, 64, 128, 256]),
        tgt=tgt,
        src=src,
        heads=heads,
        kv_bsz=kv_bsz,
        kv_groups=rng.choice([1, 1, 2, 3]),
        key_padding=padding,
        causal=rng.random() < 0.4,
        gamma=rng.choice([None, None, round(rng.uniform(0.5, 2.0), 2)]),
        dropout_p=rng.choice([0.0, 0.0, round(rng.uniform(0.05, 0.6), 2)]),
        seed=rng.randrange(1 << 30),
        long=rng.random() < 0.25,
    )


@pytest.mark.parametrize("case", range(CASES))
def test_random_case_against_the_plain_formula(case, monkeypatch):
    spec = draw(random.Random(1000 + case))
    if spec.pop("long"):  # the long tier's tiles (fp16/bf16 where it has them)
        monkeypatch.setattr(ra, "LONG_FROM", 1)
    dtype = spec["dtype"]
    errors, _ = run(**spec, keep_mask=keep_mask)
    assert max(errors.values()) <= TOL[dtype], (spec, errors)


@pytest.mark.parametrize("case", range(ROW_SUMS_CASES))
def test_random_case_with_row_sums_against_the_plain_formula(case, monkeypatch):
    spec = draw(random.Random(5000 + case))
    if spec.pop("long"):
        monkeypatch.setattr(ra, "LONG_FROM", 1)
    spec["p"] = spec.pop("dropout_p")
    errors, _ = run_with_row_sums(**spec)
    assert max(errors.values()) <= TOL[spec["dtype"]], (spec, errors)
