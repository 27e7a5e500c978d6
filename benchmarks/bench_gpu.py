#!/usr/bin/env python
"""``make bench-gpu``: the GPU benchmark of issue 22 in one call, on one CUDA device.

Its parts, each a ratio against softmax measured in the same run, with its spread:

1. ``attention``: ``bench_attention.py --device cuda --measures train_step`` (one train
   step of the base-size model per variant, interleaved rounds);
2. ``long``: ``bench_long_sequences.py --device cuda`` (one self-attention layer at long
   lengths, train and inference, every backend row);
3. ``train``: end-to-end ``fairseq-train`` updates/s of every preset against stock
   ``transformer_iwslt_de_en`` at the iwslt size (``*_dropout`` presets: against softmax with
   the same attention dropout; ``*_base``: against ``transformer_wmt_en_de``, the base size;
   :func:`baseline`), in ``--fp16`` and ``--bf16``:
   ``--rounds`` rounds, each round runs every preset once in an order that alternates
   between rounds (A B C, then C B A, ...), on a synthetic corpus (random tokens, joined
   dictionary: no download; speed does not depend on the words).  updates/s of one run is
   the mean of fairseq's ``ups`` over its log intervals that lie wholly after its first
   epoch (:func:`steady_updates_per_second`: the first epoch holds CUDA start-up, the
   allocator's warm-up and the first call of every batch shape, which cost stock softmax
   2-3x its later updates on the H200, docs/performance.md); the ratio of a round is ups(preset) /
   ups(softmax) of that round; reported as the median over rounds with min-max;
4. ``train_ab``: ``benchmarks/train_ab.py`` per dtype: the same presets' training steps
   (fairseq's ``Trainer``, the train part's arguments) in one process, blocks of updates in
   alternating order: tens of paired ratios where the train part gets ``--rounds``
   (docs/performance.md, "Paired training blocks in one process"); plus ``kernels`` (the
   Triton kernels' CUDA correctness and time against flash) and ``loss_scale``.

Writes ``OUT/bench_gpu.json`` (every run's ups, the ratios, provenance: device, torch,
commit, date) and ``OUT/bench_gpu.md`` (the README table with device, date and commit).
``--budget S``: no part or run starts after S seconds (recorded as skipped).  On an H100
(2026-11-26) one ``fairseq-train`` process took about 25 s beyond its updates (start-up:
imports, CUDA, data), so all presets in fp16 and bf16 with three rounds do not fit one
8-minute call: ``benchmarks/gpu_session.sh`` splits them (docs/performance.md "GPU").

    python benchmarks/bench_gpu.py --out bench_gpu_out          # make bench-gpu
    python benchmarks/bench_gpu.py --parts train --dtypes fp16 --rounds 5
"""

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

#: ReLUFormer's criterion (Eq. 7), which the ``reluformer_reg*`` presets name (the others train
#: with ``label_smoothed_cross_entropy``)
REGULARIZED = "relu_regularized_label_smoothed_cross_entropy"
#: preset name -> fairseq-train arguments (iwslt size: 6+6 layers, d 512, 4 heads, head dim
#: 128).  ``rela_g`` is the eager path, named (``materialized``), not left to ``auto``: auto
#: takes the triton backend where this benchmark's ``rela_g_triton`` beat ``rela_g`` (the
#: train part; attention/backends/triton.py), so an ``auto`` rela_g would compare triton with
#: itself there (a module on ``materialized`` runs the same ops as one that auto gives
#: ``materialized``: the call plan's plain training call).  So are ``rela_i`` and
#: ``reluformer`` (until 2026-11-27 they ran what auto runs: the kernels on the H100 in fp16,
#: the eager path on the H200, under one name), each beside its ``*_triton`` form.
PRESETS = {
    "softmax": ["--arch", "transformer_iwslt_de_en"],
    "rela_g": ["--arch", "rela_transformer_iwslt_de_en", "--attn-backend", "materialized"],
    "rela_g_triton": ["--arch", "rela_transformer_iwslt_de_en", "--attn-backend", "triton"],
    "rela_i": ["--arch", "rela_transformer_iwslt_de_en", "--attn-output-norm", "rmsnorm_i", "--attn-backend",
               "materialized"],
    "rela_i_triton": ["--arch", "rela_transformer_iwslt_de_en", "--attn-output-norm", "rmsnorm_i", "--attn-backend",
                      "triton"],
    "reluformer": ["--arch", "reluformer_iwslt_de_en", "--attn-backend", "materialized"],
    "reluformer_triton": ["--arch", "reluformer_iwslt_de_en", "--attn-backend", "triton"],
    "entmax15": ["--arch", "entmax15_transformer_iwslt_de_en"],
    "sparsemax": ["--arch", "sparsemax_transformer_iwslt_de_en"],
    "fixed_pattern": ["--arch", "fixed_pattern_transformer_iwslt_de_en"],
    # with attention dropout 0.1 (ReLA's and ReLUFormer's papers' setting; served inside the
    # kernels), each against softmax with the same dropout: auto's "+dropout" settings
    "softmax_dropout": ["--arch", "transformer_iwslt_de_en", "--attention-dropout", "0.1"],
    "rela_g_dropout": ["--arch", "rela_transformer_iwslt_de_en", "--attn-backend", "materialized",
                       "--attention-dropout", "0.1"],
    "rela_g_triton_dropout": ["--arch", "rela_transformer_iwslt_de_en", "--attn-backend", "triton",
                              "--attention-dropout", "0.1"],
    # ReLUFormer with its regularized criterion (the row sums, inside the kernels on triton),
    # without and with attention dropout 0.1 (its paper's setting): auto's "+rowsums" and
    # "+dropout+rowsums" settings
    "reluformer_reg": ["--arch", "reluformer_iwslt_de_en", "--attn-backend", "materialized", "--criterion", REGULARIZED],
    "reluformer_reg_triton": ["--arch", "reluformer_iwslt_de_en", "--attn-backend", "triton", "--criterion", REGULARIZED],
    "reluformer_reg_dropout": ["--arch", "reluformer_iwslt_de_en", "--attn-backend", "materialized",
                               "--attention-dropout", "0.1", "--criterion", REGULARIZED],
    "reluformer_reg_triton_dropout": ["--arch", "reluformer_iwslt_de_en", "--attn-backend", "triton",
                                      "--attention-dropout", "0.1", "--criterion", REGULARIZED],
    # the base size (6+6 layers, d 512, 8 heads, head dim 64: issue 31's second target size),
    # against stock transformer_wmt_en_de
    "softmax_base": ["--arch", "transformer_wmt_en_de"],
    "rela_g_base": ["--arch", "rela_transformer_wmt_en_de", "--attn-backend", "materialized"],
    "rela_g_triton_base": ["--arch", "rela_transformer_wmt_en_de", "--attn-backend", "triton"],
}  # fmt: skip
#: what ``make bench-gpu`` runs unless ``--presets`` names others (the groups with a
#: baseline of their own, ``*_dropout`` and ``*_base``, are named: gpu_session.sh)
DEFAULT_PRESETS = (
    "softmax",
    "rela_g",
    "rela_g_triton",
    "rela_i",
    "reluformer",
    "reluformer_triton",
    "entmax15",
    "sparsemax",
)  # (fixed_pattern is the base size with the low-resource dropout 0.3 and tied embeddings:
#     against the iwslt softmax its ratio mixed size into the attention's cost; named only)

#: a preset's name ends with its group's suffix; its ratios are against that group's softmax
GROUP_SUFFIXES = ("_dropout", "_base")


def baseline(preset: str) -> str:
    """The stock softmax preset ``preset``'s updates/s are divided by: the one of its group
    (the same size and attention dropout), ``softmax`` for the iwslt size without dropout."""
    for suffix in GROUP_SUFFIXES:
        if preset.endswith(suffix):
            return "softmax" + suffix
    return "softmax"


DTYPE_FLAGS = {"fp16": ["--fp16"], "bf16": ["--bf16"], "fp32": []}
PARTS = ("kernels", "attention", "long", "train", "loss_scale", "train_ab")
#: the least budget a dtype's train_ab part is started with (set-up, compiles and 3 rounds)
TRAIN_AB_MIN_SECONDS = 90
#: the loss-scale part: fp16 runs over --loss-scale-updates updates, side by side
LOSS_SCALE_PRESETS = ("softmax", "rela_g", "rela_g_triton")

_UPS = re.compile(r"train_inner \| (\{.*\})")


def error(msg: str) -> int:
    print(f"bench-gpu: error: {msg}", file=sys.stderr)
    return 2


def cuda_unavailable() -> str:
    """Why this machine cannot run the benchmark, or '' (checked before any work)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return (
            "no CUDA device (torch.cuda.is_available() is False; torch "
            f"{torch.__version__}): make bench-gpu measures GPU speed only; "
            "make bench is the CPU benchmark"
        )
    return ""


def train_inner_records(log: str, field: str):
    """[(update, value of ``field``), ...] of every fairseq ``train_inner`` record of a
    ``--log-format json`` log that has the field, in order."""
    out = []
    for line in log.splitlines():
        m = _UPS.search(line)
        if m:
            rec = json.loads(m.group(1))
            if field in rec:
                out.append((int(rec["num_updates"]), float(rec[field])))
    return out


def parse_ups(log: str):
    """fairseq's ``ups`` of every ``train_inner`` record: [(update, ups), ...]."""
    return train_inner_records(log, "ups")


#: what a train part's updates/s cover (its ``window``; scripts/check_readme.py says it)
AFTER_FIRST_EPOCH = "after_first_epoch"

_EPOCH_SUMMARY = re.compile(r"\| train \| (\{.*\})")


def first_epoch_updates(log: str) -> Optional[int]:
    """The updates of epoch 1 (``train_num_updates`` of fairseq's end-of-epoch ``train``
    record), None when the log has no end of epoch 1."""
    for m in _EPOCH_SUMMARY.finditer(log):
        rec = json.loads(m.group(1))
        if int(rec.get("epoch", 0)) == 1 and "train_num_updates" in rec:
            return int(rec["train_num_updates"])
    return None


def run_updates_per_second(records, after: int = 0):
    """Mean ups over the log intervals that start at or after update ``after`` (an
    interval is the updates since the previous record; the first record's interval starts
    at the run's start-up and is never taken)."""
    later = [ups for (prev, _), (_, ups) in zip(records, records[1:]) if prev >= after]
    if not later:
        raise ValueError(
            f"no log interval starts at or after update {after} ({len(records)} train_inner records, "
            f"at updates {[u for u, _ in records]}): --max-update too small for the corpus's epoch"
        )
    return statistics.fmean(later)


def steady_updates_per_second(log: str) -> float:
    """updates/s of a ``fairseq-train`` run after its first epoch (module docstring, part
    3); ValueError when the run did not get past it with a whole log interval."""
    epoch = first_epoch_updates(log)
    if epoch is None:
        raise ValueError("the run did not finish its first epoch: --max-update too small for the corpus's epoch")
    return run_updates_per_second(parse_ups(log), after=epoch)


def alternating(names, round_index):
    """Round 0: names in order; round 1: reversed; ... (a drift hits every preset alike)."""
    return list(names) if round_index % 2 == 0 else list(reversed(names))


def synthetic_corpus(out: Path, pairs: int, seed: int = 0) -> Path:
    """A binarized translation corpus of random tokens (train only, joined dictionary):
    ``out/data-bin``."""
    rng = random.Random(seed)
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    vocab = [f"w{i}" for i in range(2000)]
    for lang, shift in (("src", 0), ("tgt", 3)):
        rng_l = random.Random(seed + shift)
        with open(raw / f"train.{lang}", "w") as f:
            for _ in range(pairs):
                n = rng_l.randint(8, 30)
                f.write(" ".join(rng.choice(vocab) for _ in range(n)) + "\n")
    dest = out / "data-bin"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "fairseq_cli.preprocess",
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
            "--trainpref",
            str(raw / "train"),
            "--destdir",
            str(dest),
            "--joined-dictionary",
            "--workers",
            "1",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return dest


def train_command(data: Path, preset: str, dtype: str, args, langs=("src", "tgt"), max_update=None) -> list:
    """``fairseq-train`` of ``preset`` on ``data``; its own ``--save-dir`` beside the data
    (nothing is saved, but runs side by side must not share one: the save-dir lock)."""
    return [
        sys.executable,
        "-m",
        "fairseq_cli.train",
        str(data),
        "--user-dir",
        str(REPO / "fairseq_sparse_attn"),
        "--task",
        "translation",
        "-s",
        langs[0],
        "-t",
        langs[1],
        *PRESETS[preset],
        *DTYPE_FLAGS[dtype],
        "--share-all-embeddings",
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9, 0.98)",
        "--lr",
        "7e-4",
        "--lr-scheduler",
        "inverse_sqrt",
        "--warmup-updates",
        "800",
        *([] if "--criterion" in PRESETS[preset] else ["--criterion", "label_smoothed_cross_entropy"]),
        "--label-smoothing",
        "0.1",
        "--max-tokens",
        str(args.max_tokens),
        "--max-update",
        str(max_update or args.max_update),
        "--log-format",
        "json",
        "--log-interval",
        str(args.log_interval),
        "--no-save",
        "--save-dir",
        str(data.parent / f"save-{preset}-{dtype}"),
        "--disable-validation",
        "--num-workers",
        "0",
        "--seed",
        "1",
    ]


class Budget:
    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        return self.end - time.monotonic()


def run_part(name, cmd, budget, results):
    if budget.left() <= 5:
        results[name] = {"skipped": "--budget spent"}
        print(f"[bench-gpu] {name}: skipped (--budget spent)", flush=True)
        return
    print(f"[bench-gpu] {name}: {' '.join(cmd[1:])}", flush=True)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=budget.left())
    except subprocess.TimeoutExpired:
        results[name] = {"skipped": "timed out at --budget"}
        return
    results[name] = {"returncode": p.returncode, "stdout_tail": p.stdout[-4000:]}
    if p.returncode != 0:
        results[name]["stderr_tail"] = p.stderr[-2000:]


def expected_run_seconds(took) -> float:
    """How long the next ``fairseq-train`` run is expected to take: the median of the runs
    that ended (0 before the first: it is started whatever is left)."""
    return statistics.median(took) if took else 0.0


def train_part(args, budget, data, progress=None):
    """{dtype: {"runs": {preset: [ups or None per round]}, "ratios": {...}}}."""
    from timing import summarize_ratios

    presets = args.presets
    out = {}
    took: list = []  # seconds of every run that ended
    for dtype in args.dtypes:
        runs = {p: [] for p in presets}
        for r in range(args.rounds):
            # a round is started only when the time left holds it whole (the first whatever
            # is left): one cut off in the middle leaves runs without the same round's
            # softmax, whose ratios cannot be formed (the H200's fp16 round 2, 2026-11-27:
            # two runs, a minute of the budget, no ratio)
            whole = expected_run_seconds(took) * len(presets)
            start_round = not took or budget.left() > whole  # (the very first round: no estimate yet)
            for preset in alternating(presets, r):
                if not start_round or budget.left() <= expected_run_seconds(took):  # it would be cut off
                    runs[preset].append(None)
                    why = "--budget left" if start_round else f"--budget left: the round needs ~{whole:.0f} s"
                    print(f"[bench-gpu] {dtype} round {r + 1} {preset}: not started ({why})", flush=True)
                    continue
                cmd = train_command(data, preset, dtype, args)
                t0 = time.monotonic()
                try:
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1, budget.left()))
                    ups = steady_updates_per_second(p.stdout + p.stderr) if p.returncode == 0 else None
                    if p.returncode != 0:
                        print(f"[bench-gpu] {dtype} {preset}: fairseq-train failed:\n{p.stderr[-1500:]}", flush=True)
                except (subprocess.TimeoutExpired, ValueError) as e:
                    print(f"[bench-gpu] {dtype} {preset}: {type(e).__name__}: {e}", flush=True)
                    ups = None
                took.append(time.monotonic() - t0)
                runs[preset].append(ups)
                if progress is not None:  # every run as it ends (a cut-off call keeps them)
                    with open(progress, "a") as f:
                        f.write(json.dumps({"dtype": dtype, "round": r + 1, "preset": preset, "ups": ups}) + "\n")
                print(
                    f"[bench-gpu] {dtype} round {r + 1} {preset}: {'-' if ups is None else f'{ups:.2f}'} updates/s",
                    flush=True,
                )
        ratios = {}
        for preset in presets:
            pairs = [a / b for a, b in zip(runs[preset], runs[baseline(preset)]) if a and b]
            ratios[preset] = summarize_ratios(pairs) if pairs else None
        out[dtype] = {"runs": runs, "ratios": ratios, "window": AFTER_FIRST_EPOCH}
    return out


def train_ab_part(args, budget, out: Path) -> dict:
    """{dtype: the ``train_ab`` part of ``benchmarks/train_ab.py``'s result}: the presets'
    paired training blocks in one process per dtype, each given the budget left (a dtype
    that no longer has :data:`TRAIN_AB_MIN_SECONDS` is recorded as skipped)."""
    results = {}
    for dtype in args.dtypes:
        left = budget.left()
        if left < TRAIN_AB_MIN_SECONDS:
            results[dtype] = {"skipped": "--budget spent"}
            print(f"[bench-gpu] train_ab {dtype}: skipped (--budget spent)", flush=True)
            continue
        dest = out / f"train_ab_{dtype}"
        cmd = [sys.executable, str(REPO / "benchmarks" / "train_ab.py"), "--dtype", dtype, "--presets"]
        cmd += [",".join(args.presets), "--max-tokens", str(args.max_tokens), "--pairs", str(args.pairs)]
        cmd += ["--budget", str(int(left - 15)), "--out", str(dest)]
        print(f"[bench-gpu] train_ab {dtype}: {' '.join(cmd[1:])}", flush=True)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=left)
            print(p.stdout[-3000:], flush=True)
            if p.returncode != 0:
                print(f"[bench-gpu] train_ab {dtype}: exit status {p.returncode}\n{p.stderr[-1500:]}", flush=True)
        except subprocess.TimeoutExpired:
            print(f"[bench-gpu] train_ab {dtype}: timed out at --budget", flush=True)
        try:
            results[dtype] = json.loads((dest / "train_ab.json").read_text())["parts"]["train_ab"][dtype]
        except (OSError, ValueError, KeyError):
            results[dtype] = {"skipped": "its run wrote no result"}
    return results


_OVERFLOW = "gradient overflow detected"


def parse_loss_scale(log: str):
    """fairseq's ``loss_scale`` of every ``train_inner`` record, [(update, scale), ...], and
    the number of overflow notes (each one an update skipped and the scale halved)."""
    return train_inner_records(log, "loss_scale"), sum(_OVERFLOW in line for line in log.splitlines())


def data_languages(data: Path):
    """(source, target) of a binarized corpus: the languages of its train.S-T.S.bin."""
    for f in sorted(data.glob("train.*-*.*.bin")):
        pair = f.name.split(".")[1]
        return tuple(pair.split("-"))
    raise FileNotFoundError(f"{data}: no train.S-T.S.bin (a fairseq-preprocess output folder)")


def loss_scale_part(args, budget, data, out: Path):
    """fp16 ``fairseq-train`` of :data:`LOSS_SCALE_PRESETS` side by side (not a timing: they
    share the GPU) over ``--loss-scale-updates`` updates at fairseq's default loss-scale
    settings: per preset the loss scale of every log record, its minimum, median and last
    value, and the overflows; the median scale against softmax's."""
    langs = data_languages(data)
    procs, logs = {}, {}
    for preset in LOSS_SCALE_PRESETS:
        cmd = train_command(data, preset, "fp16", args, langs=langs, max_update=args.loss_scale_updates)
        cmd[cmd.index("--log-interval") + 1] = "50"
        cmd[cmd.index("--save-dir") + 1] = str(out / f"save-{preset}")
        logs[preset] = out / f"loss_scale_{preset}.log"
        procs[preset] = subprocess.Popen(cmd, stdout=open(logs[preset], "w"), stderr=subprocess.STDOUT)
    result = {"data": str(data), "updates": args.loss_scale_updates, "presets": {}}
    for preset, proc in procs.items():
        try:
            code = proc.wait(timeout=max(1, budget.left()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = "timed out at --budget"
        scales, overflows = parse_loss_scale(logs[preset].read_text())
        values = [v for _, v in scales]
        result["presets"][preset] = {
            "returncode": code,
            "scales": scales,
            "overflows": overflows,
            "last_update": scales[-1][0] if scales else 0,
            "min": min(values) if values else None,
            "median": statistics.median(values) if values else None,
            "last": values[-1] if values else None,
        }
        print(f"[bench-gpu] loss scale {preset}: {result['presets'][preset]}", flush=True)
    base = result["presets"]["softmax"]["median"]
    for r in result["presets"].values():
        r["median_vs_softmax"] = r["median"] / base if base and r["median"] else None
    return result


def table(result, device, date, commit):
    lines = [
        f"fairseq-train updates/s against stock softmax (`transformer_iwslt_de_en`; `*_dropout`: with "
        f"attention dropout 0.1, against softmax_dropout; `*_base`: `transformer_wmt_en_de`), "
        f"{device}, {date}, commit {commit}; median of per-round ratios [min-max], rounds:",
        "",
        "| preset | " + " | ".join(result) + " |",
        "|---|" + "---|" * len(result),
    ]
    presets = next(iter(result.values()))["ratios"] if result else {}
    for preset in presets:
        cells = []
        for dtype in result:
            s = result[dtype]["ratios"][preset]
            cells.append(
                "not measured" if s is None else f"{s['median']:.2f}x [{s['min']:.2f}-{s['max']:.2f}], {s['rounds']}"
            )
        lines.append(f"| {preset} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="bench_gpu_out", help="directory for bench_gpu.json / .md")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)}")
    p.add_argument(
        "--presets",
        default=",".join(DEFAULT_PRESETS),
        help=f"comma list of {', '.join(PRESETS)} (each one's softmax baseline is always run)",
    )
    p.add_argument("--dtypes", default="fp16,bf16", help="comma list of fp16, bf16, fp32")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of fairseq-train (>= 3)")
    p.add_argument("--max-update", type=int, default=120)
    p.add_argument(
        "--log-interval",
        type=int,
        default=20,
        help="updates/s of a run: the mean of fairseq's ups over the intervals after the first",
    )
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--pairs", type=int, default=6000, help="sentence pairs of the synthetic corpus")
    p.add_argument("--long-lengths", default="1024,4096")
    p.add_argument("--loss-scale-updates", type=int, default=1000)
    p.add_argument(
        "--loss-scale-data",
        default="",
        help="a binarized corpus for the loss-scale part (real text: numerics depend on it); default: the synthetic one",
    )
    p.add_argument(
        "--progress",
        default="",
        metavar="FILE",
        help="train: every run appended to FILE as it ends (JSON lines; default OUT/train_runs.jsonl), "
        "so a cut-off call keeps the runs that ended",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=470.0,
        metavar="S",
        help="start nothing after S seconds (default 470: ~8 min with start-up)",
    )
    args = p.parse_args(argv)
    parts = [x for x in args.parts.split(",") if x]
    args.presets = [x for x in args.presets.split(",") if x]
    args.dtypes = [x for x in args.dtypes.split(",") if x]
    bad = (
        [f"--parts {x}" for x in parts if x not in PARTS]
        + [f"--presets {x}" for x in args.presets if x not in PRESETS]
        + [f"--dtypes {x}" for x in args.dtypes if x not in DTYPE_FLAGS]
    )
    if bad:
        return error(f"unknown {', '.join(bad)}")
    if args.rounds < 3:
        return error(f"--rounds must be >= 3 (a spread needs rounds), got {args.rounds}")
    if args.max_update < 2 * args.log_interval:
        return error("--max-update must be at least twice --log-interval (the first interval is warm-up)")
    if args.loss_scale_data:
        try:
            data_languages(Path(args.loss_scale_data))
        except FileNotFoundError as e:
            return error(f"--loss-scale-data {e}")
    reason = cuda_unavailable()
    if reason:
        return error(reason)
    for base in sorted({baseline(x) for x in args.presets}, reverse=True):
        if base not in args.presets:
            args.presets.insert(0, base)

    import torch

    from fairseq_sparse_attn.provenance import git_state, write_json

    budget = Budget(args.budget)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {"settings": {k: v for k, v in vars(args).items()}, "parts": {}}
    py = sys.executable
    if "kernels" in parts:
        run_part(
            "kernels",
            [py, str(REPO / "benchmarks/gpu_kernels.py"), "--out", str(out / "kernels.json")],
            budget,
            results["parts"],
        )
        if (out / "kernels.json").exists():  # every check and timing, in the one result file
            results["parts"]["kernels"].update(json.loads((out / "kernels.json").read_text()))
        write_json(out / "bench_gpu.json", results, argv=sys.argv)
    if "attention" in parts:
        run_part(
            "attention",
            [
                py,
                str(REPO / "benchmarks/bench_attention.py"),
                "--device",
                "cuda",
                "--measures",
                "train_step",
                "--rounds",
                "5",
                "--warmup",
                "1",
                "--min-time",
                "0.05",
                "--json",
                str(out / "attention.json"),
            ],
            budget,
            results["parts"],
        )
    if "long" in parts:
        run_part(
            "long",
            [
                py,
                str(REPO / "benchmarks/bench_long_sequences.py"),
                "--device",
                "cuda",
                "--lengths",
                *args.long_lengths.split(","),
                "--rounds",
                "3",
                "--warmup",
                "1",
                "--memory-repeats",
                "1",
                "--json",
                str(out / "long.json"),
            ],
            budget,
            results["parts"],
        )
    if "train" in parts or "loss_scale" in parts:
        tmp = Path(tempfile.mkdtemp(prefix="bench_gpu_"))
        try:
            # the synthetic corpus only where a part reads it (6,000 pairs: seconds of the budget)
            needed = "train" in parts or not args.loss_scale_data
            data = synthetic_corpus(tmp, args.pairs) if needed else None
            if "loss_scale" in parts:
                ls_data = Path(args.loss_scale_data) if args.loss_scale_data else data
                results["parts"]["loss_scale"] = loss_scale_part(args, budget, ls_data, out)
                write_json(out / "bench_gpu.json", results, argv=sys.argv)
            if "train" in parts:
                progress = Path(args.progress) if args.progress else out / "train_runs.jsonl"
                results["parts"]["train"] = train_part(args, budget, data, progress)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if "train_ab" in parts:
        results["parts"]["train_ab"] = train_ab_part(args, budget, out)
        write_json(out / "bench_gpu.json", results, argv=sys.argv)
    device = torch.cuda.get_device_name(0)
    commit = git_state()[0] or "?"
    date = time.strftime("%Y-%m-%d", time.gmtime())
    path = write_json(out / "bench_gpu.json", results, argv=sys.argv)
    if "train" in results["parts"]:
        md = table(results["parts"]["train"], device, date, str(commit)[:10])
        (out / "bench_gpu.md").write_text(md)
        print(md)
    print(f"[bench-gpu] wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no compile worker thread may keep the process alive
