#!/usr/bin/env python
"""Speed of softmax, ReLA-g, ReLA-i, sparsemax and 1.5-entmax transformers of the same
size on the same batches, in one process; every number is printed as a ratio against
softmax measured in the same run (absolute times only as context).

Measures
* train step: forward + backward + Adam step on a fixed batch (tokens/s);
* decoding: fairseq's SequenceGenerator, beam 4, batch 1 and batch 64, every model forced
  to decode the same number of steps (min_len = max_len), so the ratio compares the
  per-step cost and not how early a model happens to emit EOS.

* entmax check: the plugin's sparsemax / 1.5-entmax activations (masking included) against
  the entmax package's own functions on the same masked scores, forward + backward.

Method (benchmarks/timing.py): threads pinned, warm-up rounds discarded, interleaved rounds
(softmax and every variant in each round, alternating order), enough repetitions per timing,
and per-round paired ratios t_softmax / t_variant summarized as the median with a bootstrap
95% interval and min-max over rounds.

    python benchmarks/bench_attention.py                # CPU-sized defaults (minutes)
    python benchmarks/bench_attention.py --quick        # a smoke run (seconds; not for claims)
    python benchmarks/bench_attention.py --device cuda --preset base
    python benchmarks/bench_attention.py --claims --before HEAD~1   # a change, before/after

``--before REV`` adds, for every variant but softmax, ``VARIANT@REV``: the same model
(same parameters in the same memory; two model copies of identical code measured up to 5%
apart, an artefact of where their tensors lie) whose attention modules are replaced by
twins of git revision REV's attention class (that revision's package imported under another
name; each twin built from the module's constructor arguments and config, holding the
module's own parameter tensors; the layers around attention are today's code; each job puts
its code's modules in place first), timed in the same
interleaved rounds, so a change to the attention code is measured before and after in one
run.  Both must decode the same hypotheses (checked before timing).
"""

import argparse
import dataclasses
import importlib
import importlib.util
import io
import platform
import subprocess
import sys
import tarfile
import tempfile
import typing
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from timing import interleaved_rounds, pin_threads, summarize_ratios  # noqa: E402


def _threads_from_argv(argv):
    """--threads N read before torch is imported (OMP/MKL read their variables at load);
    --claims on a CPU device means one thread."""
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            return int(argv[i + 1])
        if a.startswith("--threads="):
            return int(a.split("=", 1)[1])
    if "--claims" in argv and "cuda" not in argv:  # CPU claims: one thread (set again after import)
        return 1
    return None


pin_threads(_threads_from_argv(sys.argv))

import torch  # noqa: E402

from fairseq_sparse_attn.models.architectures import ATTENTION_PRESETS  # noqa: E402

VARIANTS = {
    "softmax": ATTENTION_PRESETS["softmax"],
    "rela_g": ATTENTION_PRESETS["rela"],
    "rela_i": dict(ATTENTION_PRESETS["rela"], attn_output_norm="rmsnorm_i"),
    "sparsemax": ATTENTION_PRESETS["sparsemax"],
    "entmax15": ATTENTION_PRESETS["entmax15"],
    # Raganato et al.: softmax with 7 fixed + 1 learned encoder heads (needs 8 encoder heads:
    # --preset base); not in the default list
    "fixed_7f1l": dict(ATTENTION_PRESETS["softmax"], encoder_fixed_patterns="7F"),
    "fixed_7f1l_word": dict(
        ATTENTION_PRESETS["softmax"], encoder_fixed_patterns="7F", encoder_fixed_pattern_unit="word"
    ),
}
DEFAULT_VARIANTS = ["softmax", "rela_g", "rela_i", "sparsemax", "entmax15"]
PRESETS = {
    # CPU-sized: the demo's model
    "small": dict(
        encoder_embed_dim=256,
        decoder_embed_dim=256,
        encoder_ffn_embed_dim=1024,
        decoder_ffn_embed_dim=1024,
        encoder_layers=3,
        decoder_layers=3,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
    ),
    # Transformer base, as the ReLA paper's Table 2
    "base": dict(
        encoder_embed_dim=512,
        decoder_embed_dim=512,
        encoder_ffn_embed_dim=2048,
        decoder_ffn_embed_dim=2048,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
    ),
}


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def build(variant, preset, dictionary, device, seed=0):
    from fairseq_sparse_attn.models.standalone import build_standalone_model

    torch.manual_seed(seed)
    model = build_standalone_model(
        dictionary,
        "sparse_transformer",
        dropout=0.1,
        attention_dropout=0.0,
        share_all_embeddings=True,
        max_source_positions=256,
        max_target_positions=256,
        **PRESETS[preset],
        **VARIANTS[variant],
    )
    return model.to(device)


def attention_class_at(rev):
    """``SparseMultiheadAttention`` of git revision ``rev``: that revision's
    ``fairseq_sparse_attn`` package imported under another name (importing the package
    registers and patches nothing; ``fairseq_sparse_attn.plugin`` is not imported)."""
    sha = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", rev], capture_output=True, text=True, check=True
    ).stdout.strip()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", sha, "fairseq_sparse_attn"], capture_output=True, check=True
    ).stdout
    root = Path(tempfile.mkdtemp(prefix=f"fairseq_sparse_attn_{sha}_"))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    name = f"fairseq_sparse_attn_at_{sha}"
    folder = root / "fairseq_sparse_attn"
    spec = importlib.util.spec_from_file_location(
        name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    return sha, importlib.import_module(f"{name}.attention.multihead").SparseMultiheadAttention


def _as_config_of(value, hint):
    """``value`` (a config dataclass of this tree) rebuilt as the dataclass that ``hint``
    names in another revision: field by field, by name; fields the other revision lacks are
    dropped, fields only it has keep its defaults (the identical-hypotheses check guards the
    result).  Plain values pass through."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    targets = [t for t in (hint, *typing.get_args(hint)) if dataclasses.is_dataclass(t)]
    if not targets:
        return value
    by_name = [t for t in targets if t.__name__ == type(value).__name__]
    target = (by_name or targets)[0]
    hints = typing.get_type_hints(target)
    fields = {
        f.name: _as_config_of(getattr(value, f.name), hints[f.name])
        for f in dataclasses.fields(target)
        if hasattr(value, f.name)
    }
    return target(**fields)


def _twin(module, cls):
    """An instance of ``cls`` (another revision's attention class) built from ``module``'s
    constructor arguments, with ``module``'s config in ``cls``'s config types, whose
    parameters and buffers are ``module``'s own tensors (same memory)."""
    if any(m._forward_pre_hooks for m in (module.q_proj, module.k_proj, module.v_proj)):
        raise RuntimeError("--before: quant-noise projections cannot be rebuilt")
    config_hint = typing.get_type_hints(cls.__init__)["config"]
    twin = cls(
        module.embed_dim,
        module.num_heads,
        kdim=module.kdim,
        vdim=module.vdim,
        dropout=module.dropout_module.p,
        bias=module.k_proj.bias is not None,
        add_bias_kv=module.bias_k is not None,
        add_zero_attn=module.add_zero_attn,
        self_attention=module.self_attention,
        encoder_decoder_attention=module.encoder_decoder_attention,
        config=_as_config_of(module.config, config_hint),
    ).to(next(module.parameters()).device)
    mine = dict(module.named_parameters()) | dict(module.named_buffers())
    theirs = dict(twin.named_parameters()) | dict(twin.named_buffers())
    if set(mine) != set(theirs) or any(mine[n].shape != theirs[n].shape for n in mine):
        raise RuntimeError(
            f"--before: the two revisions' attention modules hold different tensors: {sorted(set(mine) ^ set(theirs))}"
        )
    for name, tensor in mine.items():
        owner_path, _, leaf = name.rpartition(".")
        owner = twin.get_submodule(owner_path) if owner_path else twin
        if isinstance(tensor, torch.nn.Parameter):
            owner._parameters[leaf] = tensor
        else:
            owner._buffers[leaf] = tensor
    twin.train(module.training)
    return twin


def run_attention_as(model, cls):
    """Every attention module of ``model`` now runs ``cls``'s code (None: this tree's): a
    twin of each module, built once per class from the same constructor arguments and
    config and holding the same parameter tensors, takes the module's place in its parent
    (another revision may keep different attributes on the module, so its class cannot
    simply be set on today's object)."""
    from fairseq_sparse_attn.attention import SparseMultiheadAttention

    places = model.__dict__.setdefault("_bench_attention_places", None)
    if places is None:  # (parent, attribute, today's module), found once
        places = [
            (parent, name, child)
            for parent in model.modules()
            for name, child in parent.named_children()
            if isinstance(child, SparseMultiheadAttention)
        ]
        if not places:
            raise RuntimeError("no attention module to swap")
        model.__dict__["_bench_attention_places"] = places
    twins = model.__dict__.setdefault("_bench_attention_twins", {})
    if cls is not None and cls is not SparseMultiheadAttention and cls not in twins:
        twins[cls] = [_twin(module, cls) for _, _, module in places]
    for i, (parent, name, module) in enumerate(places):
        chosen = module if cls is None or cls is SparseMultiheadAttention else twins[cls][i]
        chosen.train(parent.training)
        parent._modules[name] = chosen
    return model


def with_attention_class(model, cls, job):
    """``job`` run with the attention modules of ``model`` set to ``cls`` (None: today's)."""
    from fairseq_sparse_attn.attention import SparseMultiheadAttention

    cls = cls or SparseMultiheadAttention

    def run():
        run_attention_as(model, cls)
        return job()

    return run


def make_batch(dictionary, bsz, src_len, tgt_len, device, seed):
    g = torch.Generator().manual_seed(seed)
    lo, hi = dictionary.nspecial, len(dictionary)
    src = torch.randint(lo, hi, (bsz, src_len), generator=g)
    src[:, -1] = dictionary.eos()
    tgt = torch.randint(lo, hi, (bsz, tgt_len), generator=g)
    tgt[:, -1] = dictionary.eos()
    prev = torch.cat([tgt[:, -1:], tgt[:, :-1]], dim=1)
    return {
        "src_tokens": src.to(device),
        "src_lengths": torch.full((bsz,), src_len).to(device),
        "prev_output_tokens": prev.to(device),
        "target": tgt.to(device),
    }


def train_step_fn(model, batch, optimizer):
    def step():
        model.train()
        optimizer.zero_grad(set_to_none=True)
        out, _ = model(batch["src_tokens"], batch["src_lengths"], batch["prev_output_tokens"])
        loss = torch.nn.functional.cross_entropy(out.float().view(-1, out.size(-1)), batch["target"].view(-1))
        loss.backward()
        optimizer.step()

    return step


def decode_fn(model, dictionary, batch, steps, beam):
    from fairseq.sequence_generator import SequenceGenerator

    gen = SequenceGenerator([model], dictionary, beam_size=beam, max_len_a=0, max_len_b=steps, min_len=steps)
    sample = {"net_input": {"src_tokens": batch["src_tokens"], "src_lengths": batch["src_lengths"]}}

    def run():
        model.eval()
        with torch.no_grad():
            gen.generate([model], sample)

    return run


def entmax_check_jobs(device, bsz=64, heads=4, tgt=24, src=24, seed=3):
    """Forward + backward of the plugin's activations and of the entmax package's functions
    on the same scores (bsz, heads, tgt, src) with a padded batch (a quarter of the
    sentences 1/3 shorter).  Returns {name: job} and the name pairs (plugin, package)."""
    import entmax

    from fairseq_sparse_attn.attention.activations import ENTMAX_MASK_VALUE, build_activation

    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(bsz, heads, tgt, src, generator=g).to(device)
    mask = torch.zeros(bsz, 1, 1, src, dtype=torch.bool)
    mask[: bsz // 4, ..., src - src // 3 :] = True
    mask = mask.to(device)
    grad = torch.randn(bsz, heads, tgt, src, generator=g).to(device)

    def fwd_bwd(fn):
        def job():
            x = scores.detach().requires_grad_(True)
            fn(x).backward(grad)

        return job

    jobs, pairs = {}, []
    for name, package_fn in (("sparsemax", entmax.sparsemax), ("entmax15", entmax.entmax15)):
        act = build_activation(name, heads).to(device)
        jobs[f"{name}_plugin"] = fwd_bwd(lambda x, act=act: act(x, mask))
        # the package on the same masked scores (the masking is part of the job)
        jobs[f"{name}_package"] = fwd_bwd(lambda x, f=package_fn: f(x.masked_fill(mask, ENTMAX_MASK_VALUE), dim=-1))
        pairs.append((f"{name}_plugin", f"{name}_package"))
    return jobs, pairs


def before_after_identical(builds, preset, dictionary, device, batch, steps):
    """Both codes decode the same tokens and scores (beam 4) from the same parameters."""
    from fairseq.sequence_generator import SequenceGenerator

    sample = {"net_input": {"src_tokens": batch["src_tokens"], "src_lengths": batch["src_lengths"]}}
    for base, cls in builds.values():
        if cls is None:
            continue
        hyps = []
        for swap in (None, cls):
            model = build(base, preset, dictionary, device).eval()
            if swap is not None:
                run_attention_as(model, swap)
            gen = SequenceGenerator([model], dictionary, beam_size=4, max_len_a=0, max_len_b=steps)
            with torch.no_grad():
                hyps.append([(h["tokens"].tolist(), float(h["score"])) for h in gen.generate([model], sample)[0]])
        if hyps[0] != hyps[1]:
            return False
    return True


def paired_speed(times_new, times_old):
    """Per-round t_old / t_new (> 1: the new code is faster)."""
    return summarize_ratios([o / n for n, o in zip(times_new, times_old)])


def fmt_ratio(s):
    return f"{s['median']:.3f} [{s['ci95_low']:.3f}, {s['ci95_high']:.3f}]"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--preset", choices=PRESETS, default=None, help="model size (default: small on CPU, base on CUDA)")
    p.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help=f"comma-separated, from {', '.join(VARIANTS)} (default: {','.join(DEFAULT_VARIANTS)})",
    )
    p.add_argument(
        "--measures",
        default="train_step,decode_b1,decode_b64,entmax_check",
        help="comma-separated subset of train_step, decode_b1, decode_b64, entmax_check",
    )
    p.add_argument("--train-batch", type=int, default=None, help="sentences per train batch")
    p.add_argument("--src-len", type=int, default=24)
    p.add_argument("--tgt-len", type=int, default=24)
    p.add_argument("--decode-steps", type=int, default=20)
    p.add_argument("--decode-sentences", type=int, default=4, help="sentences decoded one by one (batch 1)")
    p.add_argument(
        "--claims",
        action="store_true",
        help="the recipe for figures one may claim (what `make bench` runs): on CPU one "
        "thread, the CPU clock, 101 rounds of >= 0.1 s (31 for decode_b64); on CUDA "
        "31 rounds, wall clock.  Flags given explicitly win",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="timed interleaved rounds (default 15; --claims: 101 on CPU, 31 on CUDA)",
    )
    p.add_argument(
        "--rounds-b64",
        type=int,
        default=None,
        help="rounds for decode_b64 (its jobs are ~10x longer; default --rounds, --claims on CPU: 31)",
    )
    p.add_argument("--warmup", type=int, default=2, help="discarded rounds before timing (default 2)")
    p.add_argument(
        "--min-time",
        type=float,
        default=None,
        help="seconds one timing of softmax lasts at least (repetitions per timing "
        "are chosen from the warm-up; default 0.3, --claims on CPU 0.1)",
    )
    p.add_argument(
        "--threads", type=int, default=None, help="pin torch / OpenMP / MKL threads (default: torch's own choice)"
    )
    p.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default=None,
        help="wall: elapsed time (default); cpu: CPU seconds of this process, steady on "
        "a machine shared with other jobs (use with --threads 1; CPU devices only; "
        "the --claims default on CPU)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 3 rounds, 1 warm-up, one repetition per timing, 2 sentences "
        "for batch 1, batch 64 decoding skipped (the figures are not for claims)",
    )
    p.add_argument(
        "--before",
        default=None,
        metavar="REV",
        help="also time every variant with the attention code of git revision REV (VARIANT@REV), "
        "in the same rounds: a change measured before and after in one run",
    )
    p.add_argument("--json", default=None, help="write the results here (with provenance)")
    args = p.parse_args()
    on_cpu = args.device == "cpu"
    recipe = (
        dict(threads=1, clock="cpu", rounds=101, rounds_b64=31, min_time=0.1)
        if args.claims and on_cpu
        else dict(rounds=31)
        if args.claims
        else {}
    )
    defaults = dict(threads=None, clock="wall", rounds=15, rounds_b64=None, min_time=0.3)
    for name, default in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, recipe.get(name, default))
    if args.rounds_b64 is None:
        args.rounds_b64 = args.rounds
    if args.quick:
        args.rounds, args.rounds_b64, args.warmup, args.min_time, args.decode_sentences = 3, 3, 1, 0.0, 2
        args.decode_steps = min(args.decode_steps, 8)
        args.measures = ",".join(m for m in args.measures.split(",") if m != "decode_b64")

    import fairseq_sparse_attn.plugin  # noqa: F401
    from fairseq_sparse_attn.models.standalone import synthetic_dictionary

    device = torch.device(args.device)
    if args.clock == "cpu" and device.type != "cpu":
        sys.exit("--clock cpu measures CPU time of this process: CPU devices only (use --clock wall on a GPU)")
    preset = args.preset or ("base" if device.type == "cuda" else "small")
    pin_threads(args.threads)
    train_bsz = args.train_batch or (128 if device.type == "cuda" else 32)
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        sys.exit(f"--variants: unknown {unknown}; valid: {', '.join(VARIANTS)}")
    if "softmax" not in variants:
        variants.insert(0, "softmax")  # the baseline of every ratio
    measures = args.measures.split(",")
    all_measures = ("train_step", "decode_b1", "decode_b64", "entmax_check")
    bad = [m for m in measures if m not in all_measures]
    if bad:
        sys.exit(f"--measures: unknown {bad}; valid: {', '.join(all_measures)}")
    if any(v.startswith("fixed_") for v in variants) and PRESETS[preset]["encoder_attention_heads"] < 8:
        sys.exit(
            f"the fixed_7f1l variants need 8 encoder heads; preset {preset!r} has "
            f"{PRESETS[preset]['encoder_attention_heads']}: use --preset base"
        )
    dictionary = synthetic_dictionary(8000)

    train_batch = make_batch(dictionary, train_bsz, args.src_len, args.tgt_len, device, 1)
    batch64 = make_batch(dictionary, 64, args.src_len, args.tgt_len, device, 2)
    singles = [
        make_batch(dictionary, 1, args.src_len, args.tgt_len, device, 10 + i) for i in range(args.decode_sentences)
    ]

    builds = {v: (v, None) for v in variants}
    if args.before:
        sha, before_cls = attention_class_at(args.before)
        for v in list(variants):
            if v != "softmax":
                builds[f"{v}@{sha}"] = (v, before_cls)
                variants.append(f"{v}@{sha}")
    model_measures = [m for m in measures if m != "entmax_check"]
    jobs = {m: {} for m in model_measures}
    shared = {}  # with --before: base variant -> (model, optimizer) that both codes run
    for v in variants:
        if not model_measures:
            break
        base, attention_cls = builds[v]
        twin = args.before is not None and base != "softmax"
        if twin and base in shared:
            model, opt = shared[base]
        else:
            model = build(base, preset, dictionary, device)
            opt = torch.optim.Adam(model.parameters(), lr=1e-4)
            shared[base] = (model, opt)
        dec1 = [decode_fn(model, dictionary, b, args.decode_steps, 4) for b in singles]
        made = {
            "train_step": lambda m=model, o=opt: train_step_fn(m, train_batch, o),
            "decode_b1": lambda fs=dec1: lambda: [f() for f in fs],
            "decode_b64": lambda m=model: decode_fn(m, dictionary, batch64, args.decode_steps, 4),
        }
        for m in model_measures:
            job = made[m]()
            if twin:
                # the same model (same parameters in the same memory) for both codes: each job
                # first sets its code's class on the attention modules (~1 ms against a job's
                # >= 100 ms, paid by both), so the pair differs in the code only
                job = with_attention_class(model, attention_cls, job)
            jobs[m][v] = job
    work = {
        "train_step": train_bsz * (args.src_len + args.tgt_len),
        "decode_b1": args.decode_sentences,
        "decode_b64": 64,
    }
    unit = {"train_step": "tokens/s", "decode_b1": "sentences/s", "decode_b64": "sentences/s"}

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def progress(what):
        print(f"  {what}", file=sys.stderr, flush=True)

    machine = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    )
    result = {
        "device": str(device),
        "machine": machine,
        "preset": preset,
        "torch": torch.__version__,
        "settings": vars(args),
        "method": "paired per-round speed ratios t_softmax / t_variant, "
        "median with percentile-bootstrap 95% interval of the median",
        "clock": args.clock,
        "measures": {},
    }
    if args.before:
        same = before_after_identical(builds, preset, dictionary, device, singles[0], args.decode_steps)
        result["before_after_identical_hypotheses"] = same
        if not same:
            sys.exit(f"--before {args.before}: the two codes decode different hypotheses; not a speed comparison")
    for m in model_measures:
        print(f"{m}:", file=sys.stderr, flush=True)
        rounds = args.rounds_b64 if m == "decode_b64" else args.rounds
        run = interleaved_rounds(
            jobs[m], "softmax", rounds, args.warmup, args.min_time, sync=sync, progress=progress, clock=args.clock
        )
        result["measures"][m] = {}
        for v in variants:
            t_med = sorted(run["times"][v])[len(run["times"][v]) // 2]
            result["measures"][m][v] = {
                "speed_vs_softmax": summarize_ratios(run["speed"][v]),
                "median_s": t_med,
                "throughput": work[m] / t_med,
                "unit": unit[m],
                "times_s": run["times"][v],
                "reps_per_timing": run["reps"],
            }
    entmax = None
    if "entmax_check" in measures:
        print("entmax_check:", file=sys.stderr, flush=True)
        ejobs, pairs = entmax_check_jobs(device)
        entmax = {}
        for plugin, package in pairs:
            run = interleaved_rounds(
                {package: ejobs[package], plugin: ejobs[plugin]},
                package,
                args.rounds,
                args.warmup,
                args.min_time,
                sync=sync,
                clock=args.clock,
            )
            entmax[plugin.split("_")[0]] = {
                "speed_plugin_vs_package": summarize_ratios(run["speed"][plugin]),
                "package_median_s": sorted(run["times"][package])[args.rounds // 2],
                "reps_per_timing": run["reps"],
            }
        result["entmax_check"] = entmax

    print(
        f"\n{preset} transformer on {machine} ({device}); speed relative to softmax "
        f"(>1 = faster): median of {args.rounds} paired interleaved rounds "
        f"({args.rounds_b64} for decode_b64) [bootstrap 95% interval], {args.clock} clock, "
        f"{torch.get_num_threads()} thread(s)"
    )
    if model_measures:
        print("variant".ljust(16) + "".join(c.rjust(26) for c in model_measures))
        for v in variants:
            print(
                v.ljust(16)
                + "".join(fmt_ratio(result["measures"][c][v]["speed_vs_softmax"]).rjust(26) for c in model_measures)
            )
        print(
            "softmax absolute: "
            + ", ".join(f"{c} {result['measures'][c]['softmax']['throughput']:.1f} {unit[c]}" for c in model_measures)
        )
    if args.before and model_measures:
        print(f"\nthis tree against {args.before} ({sha}), same rounds: speed now / speed before (>1 = faster now)")
        result["now_vs_before"] = {}
        for v, (base, cls) in builds.items():
            if cls is None:
                continue
            row = {
                c: paired_speed(result["measures"][c][base]["times_s"], result["measures"][c][v]["times_s"])
                for c in model_measures
            }
            result["now_vs_before"][base] = row
            print(base.ljust(16) + "".join(fmt_ratio(row[c]).rjust(26) for c in model_measures))
    if entmax:
        print(
            "\nentmax check (fwd+bwd of the activation on masked scores (64, 4, 24, 24)): "
            "plugin speed relative to the entmax package's own function (>1 = faster)"
        )
        for name, r in entmax.items():
            print(
                f"{name.ljust(12)}{fmt_ratio(r['speed_plugin_vs_package']).rjust(26)}"
                f"   (package {r['package_median_s'] * 1e3:.2f} ms)"
            )
    if args.json:
        from fairseq_sparse_attn.provenance import finite, write_json

        write_json(args.json, finite(result), seed=0)  # models are built with torch.manual_seed(0)
        print(f"json: {args.json}")


if __name__ == "__main__":
    main()
