#!/usr/bin/env python
"""Host time of one training step (forward + backward) of every preset against stock
fairseq's own ``transformer``, on a CPU: what a launch-bound GPU step pays for.

A ``fairseq-train --fp16`` step of an MT-size model on a GPU waits on the Python and the
kernel launches that drive it (the H100 profile of issue 22: 153 ms of CPU time per step
for ReLA-g against 80 ms for softmax, while the GPU's kernels took 13.6 ms against 11 ms).
That host time does not need a GPU to be measured: it is the Python around each op and
the dispatcher's work per op, which a CPU run of a model too small for its arithmetic to
count measures as well.  The model: the base size's 6 + 6 layers, every attention call with
one head of dimension 32 (the kernels' smallest), d = 32, FFN 64, 2 sentences of 6 tokens;
the host cost of an op does not depend on the widths or the number of heads (``--heads``,
``--width`` to check; the arithmetic then counts too).

The fused Triton kernels (``*_triton``: ``--attn-backend triton``) would run in Triton's
interpreter on a CPU, which is not what a GPU runs; their launches are **stubbed** (the
kernels' launch function does nothing), so those rows time everything a GPU step runs
on the host around the kernels, ops, autograd and the launchers' own Python included, but
not Triton's launch itself (its argument binding and the driver call).  ``--launches
triton`` adds Triton's own launch path (``JITFunction.run`` up to the C launcher, with a
driver that compiles the kernels for sm_90 and launches nothing:
``benchmarks/triton_host_launch.py``); only the C launcher and the driver's
``cuLaunchKernel`` are then left out.  ``--device cuda`` runs the real kernels and times wall clock with a sync per timing:
a whole step as the GPU runs it.

Method (benchmarks/timing.py): one thread, the CPU clock (steady on a shared machine),
warm-up rounds discarded, interleaved rounds in alternating order, per-round paired ratios
``t_stock / t_preset`` (> 1: less host time than stock), their median with a bootstrap 95%
interval and min-max.  Each row also gives the ops a step dispatches (below autograd, as
tests/unit/test_op_count.py counts them), to tell a cost per op from a number of ops.

    python benchmarks/bench_host.py                       # every preset (minutes)
    python benchmarks/bench_host.py --presets stock,rela_g,rela_g_triton --rounds 11
    python benchmarks/bench_host.py --json docs/results/host-time-cpu.json
    python benchmarks/bench_host.py --device cuda --presets stock,rela_g --profile 5   # where it goes
"""

import argparse
import contextlib
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from timing import interleaved_rounds, pin_threads, summarize_ratios  # noqa: E402

pin_threads(1)

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

pin_threads(1)

from host_profile import format_profiles, profile_presets  # noqa: E402  (imports torch: after the threads are pinned)

BASELINE = "stock"

#: name -> (architecture, overrides); ``stock`` is fairseq's own TransformerModel.  The
#: ReLU-family rows without ``_triton`` name the eager backend (``materialized``): on a CUDA
#: device where ``auto`` takes the kernels (a measured family and dtype) they stay eager, and
#: elsewhere they run what ``auto`` runs (the call plan's plain training call, either way).
EAGER = {"attn_backend": "materialized"}
PRESETS = {
    "stock": ("transformer_wmt_en_de", {}),
    "softmax": ("softmax_transformer_wmt_en_de", {}),
    "rela_g": ("rela_transformer_wmt_en_de", EAGER),
    "rela_i": ("rela_transformer_wmt_en_de", {"attn_output_norm": "rmsnorm_i", **EAGER}),
    "reluformer": ("reluformer_wmt_en_de", EAGER),
    "sparsemax": ("sparsemax_transformer_wmt_en_de", {}),
    "entmax15": ("entmax15_transformer_wmt_en_de", {}),
    "rela_g_triton": ("rela_transformer_wmt_en_de", {"attn_backend": "triton"}),
    "rela_i_triton": ("rela_transformer_wmt_en_de", {"attn_output_norm": "rmsnorm_i", "attn_backend": "triton"}),
    "reluformer_triton": ("reluformer_wmt_en_de", {"attn_backend": "triton"}),
}


def build(name, dictionary, heads, width, device, dtype, attention_dropout=0.0):
    """The preset's model at the base size's layer counts and the given attention shape."""
    from fairseq_sparse_attn.models.standalone import build_standalone_model

    arch, overrides = PRESETS[name]
    torch.manual_seed(0)
    model = build_standalone_model(
        dictionary,
        arch,
        encoder_embed_dim=width,
        decoder_embed_dim=width,
        encoder_ffn_embed_dim=2 * width,
        decoder_ffn_embed_dim=2 * width,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        dropout=0.1,
        attention_dropout=attention_dropout,  # 0: the presets' default; --attention-dropout
        max_source_positions=64,
        max_target_positions=64,
        share_all_embeddings=False,
        **overrides,
    )
    assert len(model.encoder.layers) == 6 and len(model.decoder.layers) == 6
    return model.to(device=device, dtype=dtype).train()


def make_batch(dictionary, bsz, length, device, seed=1):
    """Source and target of ``bsz`` sentences of ``length`` tokens (one padded by 2)."""
    g = torch.Generator().manual_seed(seed)
    lo, hi, pad = dictionary.nspecial, len(dictionary), dictionary.pad()
    src = torch.randint(lo, hi, (bsz, length), generator=g)
    src[:, -1] = dictionary.eos()
    lengths = torch.full((bsz,), length)
    if bsz > 1:  # left padding, as fairseq's default
        src[-1] = torch.cat([torch.full((2,), pad), src[-1, :-2]])
        lengths[-1] = length - 2
    tgt = torch.randint(lo, hi, (bsz, length), generator=g)
    tgt[:, -1] = dictionary.eos()
    prev = torch.cat([tgt[:, -1:], tgt[:, :-1]], dim=1)
    return [t.to(device) for t in (src, lengths, prev, tgt)]


def step_fn(model, batch):
    """One forward + backward; the gradients dropped after it as fairseq's optimizers drop
    them (``p.grad = None`` over the parameter list: ``Module.zero_grad`` walks the module
    tree, which would charge a preset for its number of submodules)."""
    src, lengths, prev, tgt = batch
    params = [p for p in model.parameters() if p.requires_grad]

    def step():
        out, _ = model(src, lengths, prev)
        loss = torch.nn.functional.cross_entropy(out.float().view(-1, out.size(-1)), tgt.view(-1))
        loss.backward()
        for p in params:
            p.grad = None

    return step


class _OpCount(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.total = 0
        self.kernels = 0  # the package's own ops (fsa::...)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.total += 1
        self.kernels += func.namespace == "fsa"
        return func(*args, **(kwargs or {}))


def ops_of(step):
    """(ops, of which the package's kernel ops) dispatched by one step."""
    counter = _OpCount()
    with counter:
        step()
    return counter.total, counter.kernels


def launch_paths_of(step):
    """How one step's kernel launches went (kernels/launch.py: LaunchPlan): ``plan_launches``
    (every launch of the kernels), ``through_triton`` (those that took Triton's own launch
    path, ``JITFunction.run``: a plan's first launch, a tensor not 16-byte aligned, a changed
    device or Triton option; the rest went straight to the compiled kernel's launcher) and
    ``plans_made`` (plan-cache misses: call signatures not seen before).  After a warm step
    of one batch shape, a step should launch every kernel directly and make no plan."""
    from triton.runtime.jit import JITFunction

    from fairseq_sparse_attn.kernels import launch

    counts = {"plan_launches": 0, "through_triton": 0}
    plan_call, triton_run = launch.LaunchPlan.__call__, JITFunction.run

    def counted_plan(self, tensors):
        counts["plan_launches"] += 1
        return plan_call(self, tensors)

    def counted_run(self, *args, **kwargs):
        counts["through_triton"] += 1
        return triton_run(self, *args, **kwargs)

    plans_before = sum(len(cache) for cache in launch._PLAN_CACHES)
    launch.LaunchPlan.__call__, JITFunction.run = counted_plan, counted_run
    try:
        step()
    finally:
        launch.LaunchPlan.__call__, JITFunction.run = plan_call, triton_run
    counts["plans_made"] = sum(len(cache) for cache in launch._PLAN_CACHES) - plans_before
    return counts


@contextlib.contextmanager
def stubbed_launches():
    """The Triton kernels' launches do nothing while inside (module docstring)."""
    from fairseq_sparse_attn.kernels import output_norm, relu_attention

    saved = [(m, m._launch) for m in (relu_attention, output_norm)]
    try:
        for m, _ in saved:
            m._launch = lambda *args, **kwargs: None
        yield
    finally:
        for m, launch in saved:
            m._launch = launch


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", default=",".join(PRESETS), help=f"comma-separated, from {', '.join(PRESETS)}")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument(
        "--dtype",
        default=None,
        choices=("float32", "float16", "bfloat16"),
        help="default: float16 (what users train with: --fp16)",
    )
    p.add_argument("--heads", type=int, default=1, help="attention heads (default 1)")
    p.add_argument("--width", type=int, default=None, help="model width (default: 32 per head)")
    p.add_argument("--batch", type=int, default=2, help="sentences per batch (default 2)")
    p.add_argument("--length", type=int, default=6, help="tokens per sentence (default 6)")
    p.add_argument("--rounds", type=int, default=31, help="timed interleaved rounds (default 31)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--min-time", type=float, default=0.2, help="seconds one timing of stock lasts at least")
    p.add_argument(
        "--attention-dropout",
        type=float,
        default=0.0,
        help="attention dropout of every preset, stock included (default 0, the presets' own; 0.1: the papers')",
    )
    p.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="after the timing, profile N steps of each preset (torch.profiler): where the host time goes "
        "(benchmarks/host_profile.py; default 0: no profile)",
    )
    p.add_argument(
        "--launches",
        default="stubbed",
        choices=("stubbed", "triton"),
        help="on a CPU, the kernels' launches: stubbed (default), or through Triton's own launch path with a "
        "null driver (benchmarks/triton_host_launch.py; compiles each kernel for sm_90 on first use)",
    )
    p.add_argument("--json", default=None, help="write the results here (with provenance)")
    args = p.parse_args(argv)

    names = [n.strip() for n in args.presets.split(",") if n.strip()]
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        p.error(f"--presets: unknown {', '.join(unknown)} (known: {', '.join(PRESETS)})")
    if BASELINE not in names:
        names.insert(0, BASELINE)
    on_cuda = args.device == "cuda"
    if on_cuda and not torch.cuda.is_available():
        p.error("--device cuda: CUDA is not available")
    width = args.width or 32 * args.heads
    if width % args.heads or width // args.heads not in (32, 64, 128, 256):
        p.error(f"--width {width} / --heads {args.heads}: the head dim must be 32, 64, 128 or 256 (the kernels')")
    dtype = getattr(torch, args.dtype or "float16")
    if not 0.0 <= args.attention_dropout < 1.0:
        p.error(f"--attention-dropout {args.attention_dropout}: must be in [0, 1)")
    if args.profile < 0:
        p.error(f"--profile {args.profile}: must be 0 (no profile) or a number of steps")

    import fairseq_sparse_attn.plugin  # noqa: F401  (registers the architectures)
    from fairseq_sparse_attn.models.standalone import synthetic_dictionary

    device = torch.device(args.device)
    dictionary = synthetic_dictionary(100)
    batch = make_batch(dictionary, args.batch, args.length, device)
    if on_cuda and args.launches != "stubbed":
        p.error("--launches: for a CPU run (--device cuda launches the kernels)")
    if on_cuda:
        launches = "real"
        stub = contextlib.nullcontext()
    elif args.launches == "triton":
        from triton_host_launch import host_only_launches

        launches = "triton launch path, null driver (sm_90)"
        stub = host_only_launches()
    else:
        launches = "stubbed"
        stub = stubbed_launches()
    with stub:
        jobs, ops, paths = {}, {}, {}
        for name in names:
            model = build(name, dictionary, args.heads, width, device, dtype, args.attention_dropout)
            step = step_fn(model, batch)
            step()  # caches warm
            ops[name] = ops_of(step)
            if name.endswith("_triton") and not ops[name][1]:
                raise SystemExit(f"bench_host: {name} dispatched no kernel op: the triton backend did not serve it")
            # (stubbed launches never reach a plan: nothing to count)
            paths[name] = launch_paths_of(step) if ops[name][1] and launches != "stubbed" else None
            jobs[name] = step

        def sync():
            if on_cuda:
                torch.cuda.synchronize()

        timed = interleaved_rounds(
            jobs,
            BASELINE,
            rounds=args.rounds,
            warmup=args.warmup,
            min_time=args.min_time,
            sync=sync,
            clock="wall" if on_cuda else "cpu",
            progress=lambda msg: print(msg, file=sys.stderr, flush=True),
        )
        profiles = profile_presets(jobs, args.profile, sync, on_cuda) if args.profile else None

    rows = {}
    for name in names:
        rows[name] = {
            "arch": PRESETS[name][0],
            "overrides": PRESETS[name][1],
            "ms_per_step": statistics.median(timed["times"][name]) * 1e3,
            "speed_vs_stock": summarize_ratios(timed["speed"][name]),
            "ops_per_step": ops[name][0],
            "kernel_ops_per_step": ops[name][1],
            "launch_paths": paths[name],
        }
    result = {
        "what": "host time of one training step (forward + backward), per preset, against stock fairseq's transformer",
        "device": args.device,
        "dtype": str(dtype).replace("torch.", ""),
        "kernel_launches": launches,
        "clock": "wall" if on_cuda else "cpu",
        "attention_dropout": args.attention_dropout,
        "shape": {
            "layers": "6+6",
            "heads": args.heads,
            "width": width,
            "ffn": 2 * width,
            "batch": args.batch,
            "length": args.length,
        },
        "rounds": args.rounds,
        "reps_per_timing": timed["reps"],
        "presets": rows,
    }
    if profiles:
        result["profile"] = profiles
    print(format_table(result))
    if profiles:
        print(format_profiles(profiles))
    if args.json:
        from fairseq_sparse_attn.provenance import finite, write_json

        write_json(args.json, finite(result), seed=0)
        print(f"json: {args.json}")
    return result


def format_table(result) -> str:
    lines = [
        f"host time per training step ({result['device']}, {result['dtype']}, kernel launches {result['kernel_launches']}, "
        f"{result['clock']} clock, {result['rounds']} rounds)",
        "| preset | ms / step | speed vs stock [95% CI] (min-max) | ops / step |",
        "|---|---|---|---|",
    ]
    for name, row in result["presets"].items():
        s = row["speed_vs_stock"]
        lines.append(
            f"| {name} | {row['ms_per_step']:.2f} | {s['median']:.3f} [{s['ci95_low']:.3f}, {s['ci95_high']:.3f}] "
            f"({s['min']:.2f}-{s['max']:.2f}) | {row['ops_per_step']:,} |"
        )
    for name, row in result["presets"].items():
        paths = row.get("launch_paths")
        if paths:
            lines.append(
                f"{name}, one warm step: {paths['plan_launches']} kernel launches, {paths['through_triton']} of them "
                f"through Triton's own launch path, {paths['plans_made']} plans made"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
