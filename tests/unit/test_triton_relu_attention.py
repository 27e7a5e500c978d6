"""The fused ReLU-attention Triton kernels (fairseq_sparse_attn/kernels/relu_attention.py,
issue 31 items 1, 3, 4) run through Triton's interpreter on CPU tensors, against the plain
formula computed in float64 with autograd (written out here, independent of the kernels
and of the attention core): the output and dq, dk, dv, each gradient through both
backwards: the one-pass backward (dQ by atomic adds, the default) and the two passes (taken
under ``torch.use_deterministic_algorithms``), whose dK and dV must agree bit for bit.

Tolerances (relative Frobenius error ||x - ref|| / ||ref||): fp32 (IEEE dots) 1e-5,
fp16 and bf16 1e-2 (bf16: the interpreted launch computes the dots on the bf16-rounded
operands upcast to fp32, module docstring); the reference takes the same rounded inputs.
Measured here: fp32 1e-7 to 3e-7, fp16 3e-4, bf16 2.5e-3, at every head dim.

The interpreter runs the kernels' programs one after another in numpy: shapes are small,
but span more than one tile of queries and keys (the tiles are 16 to 64 wide), with
ragged key padding.  ``TRITON_INTERPRET`` is not needed (the kernel module builds the
interpreted form itself), so nothing here leaks into other tests.
"""

import contextlib
import math

import pytest
import torch

from conftest import require_kernels  # noqa: E402

require_kernels()  # the Triton kernels run here, else the module skips (CI: fails)

from triton.runtime.jit import JITFunction  # noqa: E402

from fairseq_sparse_attn.kernels import relu_attention as ra  # noqa: E402

TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def weights(q, k, key_padding=None, causal=False, kv_groups=1, scale=1.0, gamma=None):
    """The plain formula's weights in float64, (B, H, T, S): w_ij = c_i relu(scale q_i.k_j)
    on visible keys, 0 elsewhere (c_i = 1 / (gamma sqrt(n_i / 2)) with ``gamma``, else 1)."""
    q, k = q.double(), k.double()
    if kv_groups > 1:
        k = k.repeat_interleave(kv_groups, dim=0)
    bsz, _, tgt, _ = q.shape
    src = k.size(2)
    hidden = torch.zeros(bsz, 1, tgt, src, dtype=torch.bool)
    if key_padding is not None:
        hidden |= key_padding.repeat_interleave(kv_groups, dim=0)[:, None, None, :]
    if causal:
        i = torch.arange(tgt)[:, None]
        j = torch.arange(src)[None, :]
        hidden |= (j > i + (src - tgt))[None, None]
    w = torch.relu(q @ k.transpose(-1, -2) * scale).masked_fill(hidden, 0.0)
    if gamma is not None:
        n = (~hidden).sum(-1, keepdim=True).double()
        w = w / (gamma * torch.sqrt(n.clamp(min=1) / 2))
    return w


def reference(q, k, v, key_padding=None, causal=False, kv_groups=1, scale=1.0, gamma=None, keep=None, p=0.0):
    """The plain formula in float64 (:func:`weights`) times v; with ``keep`` (bool,
    (B, H, T, S)), attention dropout: the weights it drops zeroed, the others divided by
    1 - p (as ``torch.nn.Dropout`` scales them)."""
    w = weights(q, k, key_padding, causal, kv_groups, scale, gamma)
    if keep is not None:
        w = w * keep.double() / (1.0 - p) if p < 1 else w * 0.0
    return w @ v.double().repeat_interleave(kv_groups, dim=0)


def rel(x, ref):
    return ((x.double() - ref).norm() / ref.norm().clamp(min=1e-30)).item()


def padding(kv_bsz, src, lengths):
    """(kv_bsz, src) bool, True past each length (right padding; fairseq's encoder pads left,
    the kernels do not care where)."""
    return torch.arange(src)[None, :] >= torch.tensor(lengths)[:, None]


@contextlib.contextmanager
def deterministic():
    """torch.use_deterministic_algorithms(True) for the block (the two-pass backward)."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def run(
    dtype, d, tgt, src, heads=2, kv_bsz=2, key_padding=None, causal=False, kv_groups=1, gamma=None, seed=0,
    dropout_p=0.0, keep_mask=None,
):  # fmt: skip
    """Output and gradients of the kernels (both backwards) and of the reference; returns the
    errors: out, dq, dk, dv (one pass) and dq/dk/dv_two_pass.  ``dropout_p`` > 0: attention
    dropout under a seed drawn here, whose decisions ``keep_mask(seed, B, H, T, S, p)`` gives
    the reference (test_triton_dropout.py)."""
    g = torch.Generator().manual_seed(seed)
    bsz = kv_bsz * kv_groups
    q = torch.randn(bsz, heads, tgt, d, generator=g).to(dtype).requires_grad_()
    k = torch.randn(kv_bsz, heads, src, d, generator=g).to(dtype).requires_grad_()
    v = torch.randn(kv_bsz, heads, src, d, generator=g).to(dtype).requires_grad_()
    upstream = torch.randn(bsz, heads, tgt, d, generator=g).to(dtype)
    scale = 1 / math.sqrt(d)
    dropout_seed = int(torch.randint(0, 2**62, (1,), generator=g)) if dropout_p else None
    seed_arg = None if dropout_seed is None else torch.tensor([dropout_seed])
    out = ra.relu_attention(q, k, v, key_padding, causal, kv_groups, scale, gamma, dropout_p, seed_arg)
    assert out.dtype == dtype and out.shape == (bsz, heads, tgt, d)
    one_pass = torch.autograd.grad(out, (q, k, v), upstream, retain_graph=True)
    with deterministic():
        two_pass = torch.autograd.grad(out, (q, k, v), upstream)
    assert torch.equal(one_pass[1], two_pass[1]) and torch.equal(one_pass[2], two_pass[2])  # the same dK/dV code
    keep = None if dropout_seed is None else keep_mask(dropout_seed, bsz, heads, tgt, src, dropout_p)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = reference(q64, k64, v64, key_padding, causal, kv_groups, scale, gamma, keep, dropout_p)
    ref.backward(upstream.double())
    for t in (out, *one_pass, *two_pass):
        assert torch.isfinite(t).all()
    errors = {"out": rel(out, ref)}
    for suffix, grads in (("", one_pass), ("_two_pass", two_pass)):
        for name, grad, want in zip(("dq", "dk", "dv"), grads, (q64.grad, k64.grad, v64.grad)):
            assert grad.dtype == dtype
            errors[name + suffix] = rel(grad, want)
    return errors, (out, *one_pass)


def assert_close(errors, dtype):
    assert max(errors.values()) <= TOL[dtype], errors


# --------------------------------------------------------------------------- accuracy
@pytest.mark.parametrize("d", ra.HEAD_DIMS)
def test_fp32_each_head_dim_ragged_cross_attention_relu_scaled(d):
    """Cross-attention (T != S), ragged key padding, ReLUFormer's row factor, fp32."""
    errors, _ = run(torch.float32, d, tgt=19, src=37, key_padding=padding(2, 37, [37, 21]), gamma=0.7)
    assert_close(errors, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [32, 256])
def test_half_dtypes(dtype, d):
    """fp16 / bf16 at the smallest and largest head dim, causal self-attention with ragged
    padding (the tiles of the 16-bit configurations are the largest: 70 tokens span two)."""
    pad = padding(2, 70, [70, 45])
    errors, _ = run(dtype, d, tgt=70, src=70, key_padding=pad, causal=True)
    assert_close(errors, dtype)
    if dtype == torch.bfloat16:  # rounded to nearest, as on a GPU (a truncating cast: 6e-3)
        assert max(errors.values()) < 4e-3, errors


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_dtypes_ragged_cross_attention_relu_scaled_head_dim_128(dtype):
    """The one-pass backward's remaining head dim: cross-attention, ragged padding, row factor."""
    errors, _ = run(dtype, 128, tgt=21, src=50, key_padding=padding(2, 50, [50, 17]), gamma=0.9)
    assert_close(errors, dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_dtypes_cross_attention_with_kv_groups(dtype):
    errors, _ = run(dtype, 64, tgt=9, src=70, key_padding=padding(2, 70, [33, 70]), kv_groups=3, gamma=1.0)
    assert_close(errors, dtype)


@pytest.mark.parametrize("gamma", [None, 1.3])
def test_causal_self_attention_with_padding(gamma):
    errors, _ = run(torch.float32, 64, tgt=45, src=45, key_padding=padding(2, 45, [45, 30]), causal=True, gamma=gamma)
    assert_close(errors, torch.float32)


def test_causal_with_more_keys_than_queries():
    """Causal with S > T: the last T queries of a longer sequence (query i sees j <= i + S - T)."""
    errors, _ = run(torch.float32, 32, tgt=7, src=40, causal=True, gamma=1.0)
    assert_close(errors, torch.float32)


@pytest.mark.parametrize(
    "dtype,d,tgt,src,lengths,gamma",
    [
        (torch.float32, 32, 100, 100, [100, 61], None),
        (torch.float32, 32, 100, 100, None, 1.1),
        (torch.float32, 32, 40, 130, [130, 97], None),
        (torch.float32, 32, 130, 40, None, None),
        (torch.float16, 64, 150, 150, [150, 80], None),
        (torch.float16, 64, 150, 150, None, 0.8),
    ],
)
def test_causal_cut_across_many_blocks(dtype, d, tgt, src, lengths, gamma):
    """Causal calls long enough that each kernel loops over key (query) blocks that every row
    (key) of a tile sees whole, where no element mask is applied, then over the blocks the
    causal cut crosses: with and without padding (separate loops), T = S, T < S, T > S."""
    pad = padding(2, src, lengths) if lengths else None
    errors, _ = run(dtype, d, tgt=tgt, src=src, key_padding=pad, causal=True, gamma=gamma, heads=1)
    assert_close(errors, dtype)


@pytest.mark.parametrize(
    "dtype,d,tgt,src,lengths,gamma,causal",
    [
        (torch.float16, 64, 150, 150, [150, 80], None, True),
        (torch.bfloat16, 32, 140, 200, None, 1.0, True),
        (torch.float16, 128, 200, 130, [130, 77], 0.9, True),
        (torch.bfloat16, 64, 130, 270, [270, 140], None, False),
    ],
)
def test_long_calls_take_the_long_tiles(monkeypatch, dtype, d, tgt, src, lengths, gamma, causal):
    """Calls of LONG_FROM queries and keys or more (lowered here to 128) take the long tier's
    forward and dQ tiles (128 queries per block, 2 to 4 key blocks per query block), which
    are as right as the sentence tiles through both backwards: T = S, T < S, T > S, padded,
    row-scaled, causal and not.  Every launch is a listed configuration."""
    monkeypatch.setattr(ra, "LONG_FROM", 128)
    log = []
    monkeypatch.setattr(ra, "LAUNCH_LOG", log)
    pad = padding(2, src, lengths) if lengths else None
    errors, _ = run(dtype, d, tgt=tgt, src=src, key_padding=pad, causal=causal, gamma=gamma, heads=1)
    assert_close(errors, dtype)
    names = [name for name, *_ in log]
    kind = {torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    # forward, one-pass backward, then the two passes (dK/dV on its sentence tiles)
    assert names == [
        f"relu_attention_fwd_d{d}_{kind}_long",
        f"relu_attention_bwd_d{d}_{kind}",
        f"relu_attention_bwd_dkdv_d{d}_{kind}",
        f"relu_attention_bwd_dq_d{d}_{kind}_long",
    ]
    listed = {c["name"]: c for c in ra.launch_configs()}
    for name, _, constexprs, warps, stages, _ in log:
        c = listed[name]
        assert (constexprs, warps, stages) == (c["constexprs"], c["num_warps"], c["num_stages"])
    forward = listed[names[0]]["constexprs"]
    assert (
        forward["BLOCK_M"] == 128
        and (forward["BLOCK_M"], forward["BLOCK_N"]) != (ra._TILES[("relu_attention_fwd", True, d)][:2])
    )


def test_the_long_tier_needs_both_lengths_and_half_precision(monkeypatch):
    """Fewer queries or fewer keys than LONG_FROM, fp32, and head dim 256: the sentence tiles."""
    monkeypatch.setattr(ra, "LONG_FROM", 8)
    log = []
    monkeypatch.setattr(ra, "LAUNCH_LOG", log)

    def forward_config(dtype, d, tgt, src):
        log.clear()
        q = torch.randn(1, 1, tgt, d).to(dtype)
        k = torch.randn(1, 1, src, d).to(dtype)
        with torch.no_grad():
            ra.relu_attention(q, k, k)
        return log[0][0]

    assert forward_config(torch.float16, 32, 8, 8) == "relu_attention_fwd_d32_fp16_long"
    assert forward_config(torch.float16, 32, 7, 30) == "relu_attention_fwd_d32_fp16"
    assert forward_config(torch.float16, 32, 30, 7) == "relu_attention_fwd_d32_fp16"
    assert forward_config(torch.float32, 32, 8, 8) == "relu_attention_fwd_d32_fp32"
    assert forward_config(torch.bfloat16, 256, 8, 8) == "relu_attention_fwd_d256_bf16"
    monkeypatch.setattr(ra, "LONG_FROM", 1024)  # as shipped
    assert ra._is_long(1024, 1024) and not ra._is_long(1023, 4096) and not ra._is_long(4096, 1023)


def test_kv_groups_beam_search_layout():
    """Query batch entry b reads key copy b // kv_groups (core._scores), fp32, relu."""
    errors, _ = run(torch.float32, 128, tgt=5, src=33, kv_bsz=2, kv_groups=4, key_padding=padding(2, 33, [12, 33]))
    assert_close(errors, torch.float32)


def test_no_mask_single_query_and_single_key():
    for tgt, src in ((1, 9), (9, 1), (1, 1)):
        errors, _ = run(torch.float32, 32, tgt=tgt, src=src, heads=1, kv_bsz=1, gamma=2.0)
        assert_close(errors, torch.float32)


# --------------------------------------------------------------------------- empty rows
@pytest.mark.parametrize("gamma", [None, 1.0])
def test_rows_without_visible_keys_or_positive_scores_are_exactly_zero(gamma):
    """A sentence whose keys are all padding, causal rows that see no key (T > S), and rows
    whose every score is negative: exactly 0 out, finite gradients (0 for those rows)."""
    d, tgt, src = 32, 6, 5
    q = torch.randn(3, 1, tgt, d)
    k = torch.randn(3, 1, src, d).abs() + 0.1
    q[2, 0, :3] = -q[2, 0, :3].abs() - 0.1  # negative against positive keys: no positive score
    v = torch.randn(3, 1, src, d)
    pad = torch.zeros(3, src, dtype=torch.bool)
    pad[0] = True  # sentence 0: every key is padding
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = ra.relu_attention(q, k, v, pad, causal=True, gamma=gamma)  # T > S: row i sees j <= i - 1
    out.backward(torch.randn_like(out))
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    assert torch.equal(out[1:, :, 0], torch.zeros_like(out[1:, :, 0]))  # query 0 sees no key
    assert torch.equal(out[2, 0, :3], torch.zeros(3, d))
    assert out[1, 0, 1:].abs().sum() > 0
    for g in (q.grad, k.grad, v.grad):
        assert torch.isfinite(g).all()
    assert torch.equal(q.grad[0], torch.zeros_like(q.grad[0])) and torch.equal(q.grad[2, 0, :3], torch.zeros(3, d))
    assert torch.equal(k.grad[0], torch.zeros_like(k.grad[0])) and torch.equal(v.grad[0], torch.zeros_like(v.grad[0]))


# --------------------------------------------------------------------------- registration
class OpCounter(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_one_dispatched_op_per_kernel():
    """Forward: one op; backward: one op (the one-pass kernel), or one per pass (dK/dV, dQ)
    under torch.use_deterministic_algorithms; nothing else of ours is dispatched (the row
    factor needs no zero gradient, the head output needs no copy to fairseq's layout)."""
    x = torch.randn(2, 2, 7, 32, dtype=torch.float16)
    q, k, v = (x.clone().requires_grad_() for _ in range(3))
    w = torch.randn(2, 2, 7, 32, dtype=torch.float16, requires_grad=True)
    with OpCounter() as fwd:
        out = ra.relu_attention(q * w, k, v, gamma=1.0)
    with OpCounter() as bwd:
        out.backward(torch.ones_like(out), retain_graph=True)
    assert fwd.ops == ["aten.mul.Tensor", "fsa.relu_attention_fwd.default"]
    assert [op for op in bwd.ops if op.startswith("fsa.")] == ["fsa.relu_attention_bwd.default"]
    assert "aten.zeros.default" not in bwd.ops
    with deterministic(), OpCounter() as bwd:
        out.backward(torch.ones_like(out))
    ours = [op for op in bwd.ops if op.startswith("fsa.")]
    assert sorted(ours) == ["fsa.relu_attention_bwd_dkdv.default", "fsa.relu_attention_bwd_dq.default"]
    # (T, B, H, d) memory: fairseq's (T, B, H * d) is a view
    assert out.permute(2, 0, 1, 3).is_contiguous()


def test_long_keys_take_the_two_passes(monkeypatch):
    """From TWO_PASS_FROM_KEYS keys (measured on an H100: the one pass's atomic dQ adds cost
    more than a second pass there) the backward dispatches the two passes in fp16 too, with
    the one pass's dK/dV bit for bit and its dQ to rounding."""
    assert ra.TWO_PASS_FROM_KEYS == 1024
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 9, 32, generator=g).half().requires_grad_() for _ in range(3))
    upstream = torch.randn(1, 2, 9, 32, generator=g).half()
    out = ra.relu_attention(q, k, v, scale=0.2)
    with OpCounter() as short:
        one = torch.autograd.grad(out, (q, k, v), upstream, retain_graph=True)
    monkeypatch.setattr(ra, "TWO_PASS_FROM_KEYS", 9)  # these 9 keys count as long
    with OpCounter() as long:
        two = torch.autograd.grad(out, (q, k, v), upstream)
    assert [op for op in short.ops if op.startswith("fsa.")] == ["fsa.relu_attention_bwd.default"]
    ours = sorted(op for op in long.ops if op.startswith("fsa."))
    assert ours == ["fsa.relu_attention_bwd_dkdv.default", "fsa.relu_attention_bwd_dq.default"]
    assert torch.equal(one[1], two[1]) and torch.equal(one[2], two[2])
    torch.testing.assert_close(one[0], two[0], rtol=1e-2, atol=1e-3)


def test_custom_ops_pass_opcheck():
    """torch.library.opcheck: schema, fake (meta) kernels, autograd registration."""
    q = torch.randn(2, 1, 5, 32, requires_grad=True)
    k = torch.randn(1, 1, 6, 32, requires_grad=True)
    v = torch.randn(1, 1, 6, 32, requires_grad=True)
    pad = padding(1, 6, [4])
    seed = torch.tensor([3])
    for dropout in ((None, 0.0), (seed, 0.25)):  # without and with attention dropout
        torch.library.opcheck(
            ra.relu_attention_fwd,
            (q, k, v, pad, False, 2, 0.5, True, 1.4, *dropout),
            test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
        )
        half = [t.detach().half() for t in (q, k, v)]
        dout = torch.randn(2, 1, 5, 32).half()
        rs = torch.rand(2, 1, 5)
        for op in (ra.relu_attention_bwd, ra.relu_attention_bwd_dkdv, ra.relu_attention_bwd_dq):
            torch.library.opcheck(
                op, (dout, *half, pad, rs, False, 2, 0.5, True, *dropout), test_utils=("test_schema", "test_faketensor")
            )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])  # two-pass, one-pass backward
def test_traced_by_torch_compile_without_graph_breaks(dtype):
    """torch.compile (aot_eager: fake-tensor tracing of forward and backward, no C++
    compiler needed) sees the custom ops and matches the eager result."""
    q, k, v = (torch.randn(1, 2, 6, 32, dtype=dtype, requires_grad=True) for _ in range(3))

    def f(q, k, v):
        return ra.relu_attention(q * 2, k, v, causal=True, gamma=1.0).sum()

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    loss = compiled(q, k, v)
    loss.backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    f(q, k, v).backward()
    assert torch.allclose(loss, f(q, k, v))
    for a, t in zip(grads, (q, k, v)):
        assert torch.allclose(a, t.grad)


# --------------------------------------------------------------------------- configurations
def test_launch_configs_cover_every_head_dim_and_dtype_once():
    configs = ra.launch_configs()
    names = [c["name"] for c in configs]
    # forward, dK/dV, dQ, and the one-pass backward (the dK/dV kernel with WITH_DQ) in fp16/bf16,
    # and the long tier's tiles in fp16/bf16; each without and with attention dropout, and each
    # of those without and with the row sums
    sentence = (3 * len(ra.DTYPES) + len(ra.ONE_PASS_DTYPES)) * len(ra.HEAD_DIMS)
    assert len(names) == len(set(names)) == 2 * 2 * (sentence + 2 * len(ra._LONG_TILES))
    assert sum("_long" in name for name in names) == 2 * 2 * 2 * len(ra._LONG_TILES)
    assert sum(name.removesuffix("_rowsums").endswith("_dropout") for name in names) == len(names) // 2
    assert sum(name.endswith("_rowsums") for name in names) == len(names) // 2
    for c in configs:
        assert set(c) == {"name", "kernel", "signature", "constexprs", "num_warps", "num_stages"}
        fn = c["kernel"]
        assert isinstance(fn, JITFunction)  # the compiled form, whatever TRITON_INTERPRET says
        assert list(c["signature"]) == fn.arg_names
        assert {a for a, t in c["signature"].items() if t == "constexpr"} == set(c["constexprs"])
        assert c["constexprs"]["UPCAST"] is False and c["constexprs"]["PRECISION"] == "ieee"
        kernel = c["name"].removesuffix("_rowsums").removesuffix("_dropout").rsplit("_d", 1)[0]
        if kernel in ("relu_attention_bwd", "relu_attention_bwd_dkdv"):  # one kernel source
            assert c["constexprs"]["WITH_DQ"] is (kernel == "relu_attention_bwd")
        else:
            assert "WITH_DQ" not in c["constexprs"]
        assert c["constexprs"]["DROPOUT"] is c["name"].removesuffix("_rowsums").endswith("_dropout")
        assert c["constexprs"]["ROW_SUMS"] is c["name"].endswith("_rowsums")
        assert all(
            t in ("*fp32", "*fp16", "*bf16", "*i8", "*i64", "i32", "fp32", "constexpr") for t in c["signature"].values()
        )


def test_every_launch_uses_a_listed_configuration(monkeypatch):
    """The launcher picks among launch_configs() only: every launch of a forward + backward
    (each dtype, a small and a large head dim) is a listed (kernel, constexprs, warps,
    stages) with the listed argument types; the interpreter changes only UPCAST (bf16)."""
    log = []
    monkeypatch.setattr(ra, "LAUNCH_LOG", log)
    for dtype in ra.DTYPES:
        for d in (32, 128):
            for p in (0.0, 0.2):  # without and with attention dropout
                q, k, v = (torch.randn(1, 1, 3, d).to(dtype).requires_grad_() for _ in range(3))
                out = ra.relu_attention(q, k, v, padding(1, 3, [2]), gamma=1.0, dropout_p=p).sum()
                out.backward(retain_graph=True)  # forward, one-pass backward
                with deterministic():
                    out.backward()  # dK/dV, dQ
    # fp32: forward, then the two passes twice; fp16, bf16: forward, one pass, two passes
    assert len(log) == 2 * (2 * (1 + 2 + 2) + 2 * 2 * (1 + 1 + 2))
    assert sum(name.endswith("_dropout") for name, *_ in log) == len(log) // 2
    assert {name.removesuffix("_dropout").rsplit("_d", 1)[0] for name, *_ in log} == {
        "relu_attention_fwd",
        "relu_attention_bwd",
        "relu_attention_bwd_dkdv",
        "relu_attention_bwd_dq",
    }
    listed = {c["name"]: c for c in ra.launch_configs()}
    for name, fn, constexprs, warps, stages, arg_types in log:
        c = listed[name]
        assert fn.fn is c["kernel"].fn
        assert (constexprs, warps, stages) == (c["constexprs"], c["num_warps"], c["num_stages"])
        assert arg_types == [t for t in c["signature"].values() if t != "constexpr"]


def test_bad_input_is_one_clear_error():
    q = torch.randn(1, 1, 4, 48)
    with pytest.raises(ValueError, match="head dim 48 .the kernels serve 32, 64, 128, 256"):
        ra.relu_attention(q, q, q)
    q = torch.randn(2, 1, 4, 32)
    k = torch.randn(1, 1, 4, 32)
    with pytest.raises(ValueError, match="kv_groups 1"):
        ra.relu_attention(q, k, k)
    with pytest.raises(ValueError, match="key_padding must be bool"):
        ra.relu_attention(q, k, k, torch.zeros(2, 4, dtype=torch.bool), kv_groups=2)
    with pytest.raises(ValueError, match="gamma must be > 0"):
        ra.relu_attention(q, k, k, kv_groups=2, gamma=0.0)
    assert ra.unsupported(q.double(), k.double(), k.double()) is not None


def test_sizes_the_offsets_and_the_grid_do_not_hold_are_refused():
    """32-bit offsets within a batch entry and CUDA's grid (at most 65,535 batch entries and
    heads): a call beyond either is refused with the reason before any launch (meta tensors:
    shapes and strides without memory)."""
    from fairseq_sparse_attn.kernels.served import unserved_sizes

    def meta(shape, stride=None):
        return torch.empty_strided(shape, stride or torch.empty(shape, device="meta").stride(), device="meta")

    small = meta((2, 4, 8, 64))
    assert unserved_sizes(small, small, small) is None
    rows_far_apart = meta((1, 1, 3, 32), (0, 0, 2**30 + 32, 1))  # row 2 at offset 2^31 + 64
    assert "32-bit offsets" in unserved_sizes(rows_far_apart, small, small)
    assert "32-bit offsets" in unserved_sizes(small, small, meta((1, 1, 2**25, 64)))
    assert "launch grid" in unserved_sizes(meta((70000, 1, 1, 32)), small, small)
    assert "launch grid" in unserved_sizes(meta((1, 70000, 1, 32)), small, small)
    assert ra.unsupported(meta((70000, 1, 1, 32)), meta((70000, 1, 1, 32)), meta((70000, 1, 1, 32))) is not None


@pytest.mark.parametrize("gamma", [None, 1.0])
def test_a_second_derivative_is_one_clear_error(gamma):
    """The backward ops have no autograd of their own: differentiating the gradients raises
    (rather than returning a silently wrong second derivative)."""
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 1, 5, 32, generator=g).requires_grad_() for _ in range(3))
    (dq,) = torch.autograd.grad(ra.relu_attention(q, k, v, gamma=gamma).pow(2).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|differentiate twice"):
        dq.sum().backward()


def test_a_second_derivative_through_the_fused_norm_is_one_clear_error():
    """The same for attention with the fused output norm (one Function, its own backward)."""
    from fairseq_sparse_attn.kernels.normed_attention import normed_relu_attention

    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 5, 32, generator=g).requires_grad_() for _ in range(3))
    w = torch.ones(64, requires_grad=True)
    out = normed_relu_attention(q, k, v, None, False, 1, 0.2, None, w, w.detach().clone(), 1e-6, 1e-2)
    (dq,) = torch.autograd.grad(out.pow(2).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|differentiate twice"):
        dq.sum().backward()


def test_an_interpreted_launch_leaves_triton_language_as_it_found_it():
    """Triton 3.7.1's interpreter patches triton.language for each nested @triton.jit call it
    runs and never puts it back; a compile later in the same process then failed
    ("Unsupported function referenced: <function _patch_attr.<locals>.<lambda>>": the
    ahead-of-time tests after interpreted launches, 2026-11-26).  The launcher restores it."""
    from fairseq_sparse_attn.kernels import launch

    namespaces = launch._language_namespaces()
    before = [dict(vars(ns)) for ns in namespaces]
    q, k, v = (torch.randn(1, 1, 5, 32).requires_grad_() for _ in range(3))
    ra.relu_attention(q, k, v, padding(1, 5, [4]), causal=True, gamma=1.0).sum().backward()  # calls _rounded, tl.sum
    for ns, attrs in zip(namespaces, before):
        after = vars(ns)
        changed = sorted(n for n in set(attrs) | set(after) if attrs.get(n, None) is not after.get(n, None))
        assert changed == [], f"{ns}: {changed[:5]}"


def test_a_padding_mask_laid_out_with_other_strides():
    """A key-padding mask that is a view with a non-unit last stride (made transposed,
    (S, B).t()) hides the same keys as its contiguous copy: the kernels read one byte per
    key, so the mask is laid out contiguously first."""
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(3, 2, 7, 32, generator=g) for _ in range(3))
    pad = padding(3, 7, [7, 4, 2])
    transposed = pad.t().contiguous().t()
    assert transposed.stride() == (1, 3) and torch.equal(transposed, pad)
    out = ra.relu_attention(q, k, v, transposed)
    assert rel(out, reference(q, k, v, pad)) <= 1e-5


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])  # two passes, one pass
def test_the_backward_ops_read_the_row_factors_by_their_strides_and_refuse_wrong_ones(dtype):
    """A direct caller of the backward ops may pass the row factors c (B, H, T) as any view
    (here every other element of a longer tensor): they give what the contiguous c gives.
    A c of another shape, dtype or device is one clear error, where the kernels would read
    past it."""
    g = torch.Generator().manual_seed(11)
    q, dout = (torch.randn(2, 2, 5, 32, generator=g).to(dtype) for _ in range(2))
    k, v = (torch.randn(2, 2, 6, 32, generator=g).to(dtype) for _ in range(2))
    pad = padding(2, 6, [6, 4])
    rs = torch.rand(2, 2, 5, generator=g) + 0.5
    strided = torch.stack([rs.reshape(-1), torch.full((20,), 9.0)], dim=1).reshape(-1)[::2].view(2, 2, 5)
    assert not strided.is_contiguous() and torch.equal(strided, rs)
    ops = (ra.relu_attention_bwd_dkdv, ra.relu_attention_bwd_dq) + (
        (ra.relu_attention_bwd,) if dtype != torch.float32 else ()
    )
    for op in ops:
        args = (False, 1, 0.5, True, None, 0.0)
        expected = op(dout, q, k, v, pad, rs, *args)
        got = op(dout, q, k, v, pad, strided, *args)
        for a, b in zip(
            got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)
        ):
            assert torch.allclose(a, b, rtol=0, atol=1e-6 if op is not ra.relu_attention_bwd else 1e-2)
        for wrong in (rs[:, :, :4], rs.double()):
            with pytest.raises(ValueError, match=r"the row factors must be \(2, 2, 5\) float32"):
                op(dout, q, k, v, pad, wrong, *args)
        op(dout, q, k, v, pad, rs[:, :, :4], False, 1, 0.5, False, None, 0.0)  # unread when not row-scaled


def test_the_launch_grid_serves_exactly_65535_batch_entries_and_heads():
    """CUDA's grid holds at most 65,535 in its second and third dimensions: 65,535 batch
    entries (or heads) are served, 65,536 are not (expanded views: no memory)."""
    from fairseq_sparse_attn.kernels.served import unserved_sizes

    def t(b, h):
        return torch.empty(1, 1, 1, 32).expand(b, h, 1, 32)

    assert unserved_sizes(t(65535, 1), t(65535, 1), t(65535, 1)) is None
    assert unserved_sizes(t(1, 65535), t(1, 65535), t(1, 65535)) is None
    assert "65,536 batch entries" in unserved_sizes(t(65536, 1), t(65536, 1), t(65536, 1))
    assert "65,536 heads" in unserved_sizes(t(1, 65536), t(1, 65536), t(1, 65536))
