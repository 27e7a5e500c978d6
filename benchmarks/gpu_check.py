#!/usr/bin/env python
"""CPU vs CUDA check of the attention core (not part of the test suite).

For each configuration a SparseMultiheadAttention module is built once on the CPU, copied to
CUDA with identical parameters, and fed identical inputs (left-padded batch, float32):
outputs, per-head weights and gradients (inputs + parameters) are compared CPU vs CUDA.
The CUDA module is then run in float16 and bfloat16 (forward + backward): outputs and
gradients must be finite; the difference against the float32 CUDA output is reported.
Whole models (every attention preset, 7F+1L token and word) are compared CPU vs CUDA on
logits, and incremental decoding is compared with teacher forcing on CUDA.  (The fused
Triton ReLU kernels are checked on CUDA by ``make bench-gpu``, benchmarks/gpu_kernels.py;
the FlexAttention backend was removed, issue 31.6.)

    python benchmarks/gpu_check.py [--time-budget 110]   # needs a CUDA device

``--time-budget S``: checks
not started within S seconds are reported as skipped (the summary says how many).  The
script exits right after its summary (``os._exit`` after flushing): the compile worker
threads and subprocesses inductor leaves behind cannot keep it alive; compiling runs in
this process (``compile_threads = 1``), so there is no worker pool to wait for.
"""

import argparse
import copy
import math
import os
import sys
import time
import traceback
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from fairseq import utils  # noqa: E402
from fairseq.data import Dictionary  # noqa: E402

import fairseq_sparse_attn.plugin  # noqa: E402,F401
from fairseq_sparse_attn.attention import SparseMultiheadAttention  # noqa: E402
from fairseq_sparse_attn.attention.config import (  # noqa: E402
    ActivationConfig,
    AttentionConfig,
    HeadsConfig,
    OutputNormConfig,
)
from fairseq_sparse_attn.attention.core import AttentionInputs  # noqa: E402
from fairseq_sparse_attn.attention.fixed_patterns import PATTERNS, SEVEN, source_word_ids, word_start_table  # noqa: E402

TOL = 1e-4
CUDA = torch.device(os.environ.get("GPU_CHECK_DEVICE", "cuda"))  # cpu: dry run of the script
ROWS = []
FAILURES = []


def maxdiff(a, b):
    if a is None and b is None:
        return 0.0
    return (a.detach().float().cpu() - b.detach().float().cpu()).abs().max().item()


def record(name, **diffs):
    worst = max(v for k, v in diffs.items() if k.startswith("f32"))
    ok = worst <= TOL and all(math.isfinite(v) for v in diffs.values())
    finite = diffs.pop("finite", True)
    ok = ok and finite
    ROWS.append((name, ok, diffs))
    cells = "  ".join(f"{k}={v:.2e}" for k, v in diffs.items())
    print(f"{'OK  ' if ok else 'FAIL'} {name:44s} {cells}", flush=True)
    if not ok:
        FAILURES.append(name)


# ------------------------------------------------------------------ inputs


def left_padded(T, B, E, lengths, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, B, E, generator=g)
    pad = torch.ones(B, T, dtype=torch.bool)
    for b, n in enumerate(lengths):
        pad[b, T - n :] = False
    x = x.masked_fill(pad.t().unsqueeze(-1), 0.0)
    return x, pad


def bpe_dictionary():
    d = Dictionary()
    for i in range(60):
        d.add_symbol(f"w{i}@@" if i % 3 == 0 else f"w{i}")
    return d


def bpe_source(d, T, lengths, seed):
    g = torch.Generator().manual_seed(seed)
    src = torch.full((len(lengths), T), d.pad())
    for b, n in enumerate(lengths):
        toks = torch.randint(d.nspecial, len(d), (n,), generator=g)
        toks[-1] = d.eos()
        src[b, T - n :] = toks
    return src


# ------------------------------------------------------------------ module checks


def run_module(m, x, kind, pad, future, enc=None, enc_pad=None, need_head_weights=True, attn_inputs=None):
    """forward + backward of sum(out * fixed random projection); returns out, weights, grads."""
    m.zero_grad(set_to_none=True)
    xi = x.detach().clone().requires_grad_(True)
    inputs = [xi]
    if kind == "self":
        out, w = m(
            xi,
            xi,
            xi,
            key_padding_mask=pad,
            attn_mask=future,
            need_head_weights=need_head_weights,
            attn_inputs=attn_inputs,
        )
    else:
        ei = enc.detach().clone().requires_grad_(True)
        inputs.append(ei)
        out, w = m(xi, ei, ei, key_padding_mask=enc_pad, static_kv=True, need_head_weights=need_head_weights)
    g = torch.Generator().manual_seed(123)
    proj = torch.randn(out.shape, generator=g).to(out.device, out.dtype)
    (out * proj).float().sum().backward()
    grads = [t.grad for t in inputs] + [p.grad if p.grad is not None else torch.zeros_like(p) for p in m.parameters()]
    return out, w, grads


def module_config(activation="softmax", output_norm="none", **heads):
    """The module's AttentionConfig: activation and norm by name, ``heads`` HeadsConfig fields."""
    heads = {k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in heads.items()}
    return AttentionConfig(
        activation=ActivationConfig(activation), output_norm=OutputNormConfig(output_norm), heads=HeadsConfig(**heads)
    )


def check_module(name, T=23, B=5, E=64, H=8, kind="self", causal=False, train=False, word=False, key_block=0, **kw):
    torch.manual_seed(0)
    cpu = SparseMultiheadAttention(
        E, H, self_attention=(kind == "self"), encoder_decoder_attention=(kind == "cross"), config=module_config(**kw)
    )
    cpu.eval()
    if kw.get("activation", "softmax") == "softmax" and not kw.get("fixed_patterns"):
        cpu.backend = "materialized"
    lengths = [T, T - 3, T - 7, 5, 1][:B]
    x, pad = left_padded(T, B, E, lengths, seed=1)
    enc = enc_pad = None
    if kind == "cross":
        S = T + 4
        enc, enc_pad = left_padded(S, B, E, [S, S - 2, S - 9, 3, 1][:B], seed=2)
        pad = None
    future = utils.fill_with_neg_inf(torch.zeros(T, T)).triu(1) if causal else None
    ids = None
    if word:
        d = bpe_dictionary()
        src = bpe_source(d, T, lengths, seed=3)
        pad = src.eq(d.pad())
        table = word_start_table(d, "bpe")
        ids = source_word_ids(src, table, "bpe", d.pad(), d.eos())
        ids_cuda = source_word_ids(src.to(CUDA), table.to(CUDA), "bpe", d.pad(), d.eos())
        valid = ~pad
        assert torch.equal(ids[valid], ids_cuda.cpu()[valid]), "source_word_ids differ CPU vs CUDA"
    # per-batch word ids go to the attention as an argument (AttentionInputs)
    in_cpu = AttentionInputs(word_ids=ids) if word else None
    in_cuda = AttentionInputs(word_ids=ids_cuda) if word else None
    gpu = copy.deepcopy(cpu).to(CUDA)
    if key_block:
        gpu.key_block_size = key_block  # plain path on CPU, key-block path on CUDA
    to = lambda t: None if t is None else t.to(CUDA)
    need_w = not key_block

    o1, w1, g1 = run_module(cpu, x, kind, pad, future, enc, enc_pad, need_w, in_cpu)
    o2, w2, g2 = run_module(gpu, to(x), kind, to(pad), to(future), to(enc), to(enc_pad), need_w, in_cuda)
    diffs = {
        "f32_out": maxdiff(o1, o2),
        "f32_w": maxdiff(w1, w2) if need_w else 0.0,
        "f32_grad": max(maxdiff(a, b) / max(1.0, a.abs().max().item()) for a, b in zip(g1, g2)),
    }
    if need_w and pad is not None and kind == "self":
        # padding keys get exactly zero weight on CUDA
        diffs["pad_w_cuda"] = (w2.float().cpu() * pad.view(1, B, 1, T)).abs().max().item()
        if diffs["pad_w_cuda"] != 0:
            diffs["finite"] = False
    finite = True
    for dtype, tag in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
        half = copy.deepcopy(gpu).to(dtype)
        oh, wh, gh = run_module(
            half,
            to(x).to(dtype),
            kind,
            to(pad),
            to(future),
            None if enc is None else to(enc).to(dtype),
            to(enc_pad),
            need_w,
            in_cuda,
        )
        fin = bool(torch.isfinite(oh).all()) and all(bool(torch.isfinite(t).all()) for t in gh)
        if wh is not None:
            fin = fin and bool(torch.isfinite(wh).all())
        finite = finite and fin
        diffs[f"{tag}_out"] = maxdiff(oh, o2)
    diffs["finite"] = finite
    record(name, **diffs)


def check_incremental(name, act, norm, E=64, H=8):
    """CUDA: incremental self- and cross-attention == full (teacher forcing)."""
    torch.manual_seed(0)
    sa = SparseMultiheadAttention(E, H, self_attention=True, config=module_config(act, norm)).eval().to(CUDA)
    ca = SparseMultiheadAttention(E, H, encoder_decoder_attention=True, config=module_config(act, norm)).eval().to(CUDA)
    sa.backend = ca.backend = "materialized"
    T, S, B = 9, 11, 4
    x = torch.randn(T, B, E, device=CUDA)
    enc = torch.randn(S, B, E, device=CUDA)
    enc_pad = torch.zeros(B, S, dtype=torch.bool, device=CUDA)
    enc_pad[1, :2] = True
    enc_pad[2, :6] = True
    future = utils.fill_with_neg_inf(torch.zeros(T, T, device=CUDA)).triu(1)
    with torch.no_grad():
        fs, _ = sa(x, x, x, attn_mask=future)
        fc, _ = ca(x, enc, enc, key_padding_mask=enc_pad, static_kv=True)
        state, d = {}, 0.0
        for t in range(T):
            s = x[t : t + 1]
            os_, _ = sa(s, s, s, incremental_state=state)
            oc, _ = ca(s, enc, enc, key_padding_mask=enc_pad, incremental_state=state, static_kv=True)
            d = max(d, maxdiff(os_[0], fs[t]), maxdiff(oc[0], fc[t]))
    record(name, f32_incr_vs_full=d)


# ------------------------------------------------------------------ whole models


def check_model(name, arch="sparse_transformer", **over):
    from fairseq_sparse_attn.models.standalone import build_standalone_model

    from helpers import TINY, random_batch

    d = bpe_dictionary()
    size = dict(
        TINY,
        encoder_embed_dim=64,
        decoder_embed_dim=64,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_embed_dim=128,
        decoder_ffn_embed_dim=128,
    )
    torch.manual_seed(0)
    cpu = build_standalone_model(d, arch, **{**size, **over}).eval()
    gpu = copy.deepcopy(cpu).to(CUDA)
    src, lengths, prev = random_batch(d, bsz=5, src_len=13, tgt_len=9, seed=4)  # left-padded source
    with torch.no_grad():
        o1, _ = cpu(src, lengths, prev)
        o2, _ = gpu(src.to(CUDA), lengths.to(CUDA), prev.to(CUDA))
        diffs = {"f32_logits": maxdiff(o1, o2)}
        # incremental decoding on CUDA == teacher forcing on CUDA
        enc = gpu.encoder(src.to(CUDA), src_lengths=lengths.to(CUDA))
        full, _ = gpu.decoder(prev.to(CUDA), encoder_out=enc)
        state, dd = {}, 0.0
        p = prev.to(CUDA)
        for t in range(p.size(1)):
            step, _ = gpu.decoder(p[:, : t + 1], encoder_out=enc, incremental_state=state)
            real = p[:, t].ne(d.pad())
            dd = max(dd, maxdiff(step[real, 0], full[real, t]))
        diffs["f32_incr_cuda"] = dd
        for dtype, tag in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
            h = copy.deepcopy(gpu).to(dtype)
            oh, _ = h(src.to(CUDA), lengths.to(CUDA), prev.to(CUDA))
            diffs[f"{tag}_logits"] = maxdiff(oh, o2)
            diffs["finite"] = diffs.get("finite", True) and bool(torch.isfinite(oh).all())
    # fp16 train step: finite gradients
    h = copy.deepcopy(gpu).half().train()
    out, _ = h(src.to(CUDA), lengths.to(CUDA), prev.to(CUDA))
    loss = torch.nn.functional.cross_entropy(out.float().view(-1, out.size(-1)), prev.to(CUDA).view(-1))
    loss.backward()
    diffs["finite"] = diffs["finite"] and all(
        bool(torch.isfinite(q.grad).all()) for q in h.parameters() if q.grad is not None
    )
    record(name, **diffs)


DEADLINE = [math.inf]  # time.monotonic() after which no check starts (--time-budget)
SKIPPED = []


def guarded(name, check, *args, **kwargs):
    """Run one check; an exception is a failure of that check, printed, not the end."""
    if time.monotonic() > DEADLINE[0]:
        SKIPPED.append(name)
        print(f"SKIP {name}: --time-budget spent", flush=True)
        return
    try:
        check(*args, **kwargs)
    except Exception:
        FAILURES.append(name)
        print(f"ERROR {name}\n{traceback.format_exc()}", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--time-budget",
        type=float,
        default=110.0,
        metavar="S",
        help="start no check after S seconds (default 110: the whole run in ~2 min)",
    )
    args = parser.parse_args(argv)
    if args.time_budget <= 0:
        parser.error(f"--time-budget must be > 0, got {args.time_budget}")
    if CUDA.type == "cuda" and not torch.cuda.is_available():
        print(
            "gpu_check: error: no CUDA device (torch.cuda.is_available() is False); "
            "GPU_CHECK_DEVICE=cpu runs the script's CPU parts",
            file=sys.stderr,
        )
        return 2
    DEADLINE[0] = time.monotonic() + args.time_budget
    try:  # compile in this process: no worker pool left alive after the summary
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = 1
    except ImportError:
        pass
    where = torch.cuda.get_device_name(0) if CUDA.type == "cuda" else str(CUDA)
    print(f"torch {torch.__version__} on {where}; float32 tolerance {TOL}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    checks = [
        ("7F+1L token, self, left-pad", dict(fixed_patterns=SEVEN)),
        ("8F token, self, left-pad", dict(fixed_patterns=PATTERNS)),
        ("7F+1L word (bpe), self, left-pad", dict(fixed_patterns=SEVEN, fixed_pattern_unit="word", word=True)),
        ("8F word (bpe), self, left-pad", dict(fixed_patterns=PATTERNS, fixed_pattern_unit="word", word=True)),
        ("7F+1L token, masked heads 0,7", dict(fixed_patterns=SEVEN, masked_heads=(0, 7))),
        ("softmax, masked head 2", dict(masked_heads=(2,))),
        ("softmax pipeline, self, left-pad", dict(activation="softmax")),
        ("softmax pipeline, cross", dict(activation="softmax", kind="cross")),
        ("relu+gated_rmsnorm, self, left-pad", dict(activation="relu", output_norm="gated_rmsnorm")),
        ("relu+gated_rmsnorm, self causal", dict(activation="relu", output_norm="gated_rmsnorm", causal=True)),
        ("relu+gated_rmsnorm, cross", dict(activation="relu", output_norm="gated_rmsnorm", kind="cross")),
        ("relu+rmsnorm_i, self, left-pad", dict(activation="relu", output_norm="rmsnorm_i")),
        ("sparsemax, self, left-pad", dict(activation="sparsemax")),
        ("sparsemax, cross", dict(activation="sparsemax", kind="cross")),
        ("entmax15, self, left-pad", dict(activation="entmax15")),
        ("entmax15, self causal", dict(activation="entmax15", causal=True)),
        ("entmax15, cross", dict(activation="entmax15", kind="cross")),
        ("entmax_bisect, self, left-pad", dict(activation="entmax_bisect")),
        ("relu_scaled, self, left-pad", dict(activation="relu_scaled")),
        ("relu_scaled, self causal", dict(activation="relu_scaled", causal=True)),
        ("relu_scaled, cross", dict(activation="relu_scaled", kind="cross")),
        (
            "relu key-block 3 (CUDA) vs plain (CPU), causal",
            dict(activation="relu", output_norm="gated_rmsnorm", causal=True, key_block=3),
        ),
        (
            "relu_scaled key-block 4 (CUDA) vs plain, cross",
            dict(activation="relu_scaled", output_norm="gated_rmsnorm", kind="cross", key_block=4),
        ),
        ("7F+1L token, base size E=512 T=64", dict(fixed_patterns=SEVEN, E=512, T=64)),
        ("relu+gated_rmsnorm, base size E=512 T=64", dict(activation="relu", output_norm="gated_rmsnorm", E=512, T=64)),
        ("entmax15, base size E=512 T=64", dict(activation="entmax15", E=512, T=64)),
    ]
    for name, kw in checks:
        guarded(name, check_module, name, **kw)
    for act, norm in (
        ("softmax", "none"),
        ("relu", "gated_rmsnorm"),
        ("sparsemax", "none"),
        ("entmax15", "none"),
        ("relu_scaled", "none"),
    ):
        name = f"incremental == full on CUDA: {act}"
        guarded(name, check_incremental, name, act, norm)
    models = [
        ("model softmax", "sparse_transformer", dict(attn_activation="softmax")),
        ("model rela-g", "sparse_transformer", dict(attn_activation="relu", attn_output_norm="gated_rmsnorm")),
        ("model sparsemax", "sparse_transformer", dict(attn_activation="sparsemax")),
        ("model entmax15", "sparse_transformer", dict(attn_activation="entmax15")),
        ("model reluformer", "sparse_transformer", dict(attn_activation="relu_scaled")),
        ("model 7F+1L token", "sparse_transformer", dict(encoder_fixed_patterns="7F")),
        (
            "model 7F+1L word (bpe)",
            "sparse_transformer",
            dict(encoder_fixed_patterns="7F", encoder_fixed_pattern_unit="word"),
        ),
        (
            "model 8F token, masked head 3",
            "sparse_transformer",
            dict(encoder_fixed_patterns="8F", encoder_masked_heads="3"),
        ),
    ]
    for name, arch, over in models:
        guarded(name, check_model, name, arch, **over)
    skipped = f", {len(SKIPPED)} skipped (--time-budget)" if SKIPPED else ""
    print(
        f"\n{len(checks) + 5 + len(models)} checks, "
        f"{len(FAILURES)} failed{': ' + ', '.join(FAILURES) if FAILURES else ''}{skipped}"
    )
    return 1 if FAILURES or SKIPPED else 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # exit now: threads and subprocesses left by compiled kernels (inductor's pools are not
    # daemons) would otherwise keep the process alive after the summary
    os._exit(code)
