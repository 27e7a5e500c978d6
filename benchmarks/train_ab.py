#!/usr/bin/env python
"""Paired training steps in one process: fairseq's own ``Trainer`` for several presets,
blocks of updates in alternating order, each block a paired ratio against softmax.

Why.  ``make bench-gpu``'s train part runs one ``fairseq-train`` process per preset and
round.  On the H100 (2026-11-28) stock softmax's own runs spread from 12.3 to 16.1
updates/s over three rounds, as far apart as the gap the issue's target asks about
(ReLA-g ≥ 1.00× softmax in fp16), and each run paid ~25 s of start-up for ~7 s of timed
updates.  Here every preset is set up once, in one process, from the very arguments the
train part gives ``fairseq-train`` (``bench_gpu.train_command``: the same flags, parsed by
fairseq's own parser, the same task, criterion, ``Trainer``, FP16 optimizer and loss
scaler), and then trained in short blocks that take turns (A B C, C B A, ...): a drift of
the machine's speed hits every preset alike, and a run gives tens of paired ratios instead
of three.

What a block times: ``--block-updates`` updates of one preset as ``fairseq-train``'s loop
runs them (the next batches of the preset's own epoch iterator, collated in the timed
region as with ``--num-workers 0``, then ``trainer.train_step``), between two device
synchronisations, on a wall clock.  Every preset's iterator is built from the same data,
seed and ``--max-tokens``, so block b of each preset trains on the same batches: the
ratio of a block is paired.  Not timed: fairseq's progress bar and its log records, the
same for every preset.  A warm-up of each preset comes first, in the same order, not
recorded: by default one epoch of its batches (``--warmup-updates epoch``), so that every
batch shape the blocks meet has been met once.  The first call of a shape costs more than
the later ones (Triton's compiles; kernel plans and the allocator's blocks per shape), and
not alike for every preset: on the H200 (2026-11-28, a warm-up of 20 updates, about half an
epoch) stock softmax ran its first three blocks at 4.9-7.4 updates/s and every later one at
11-18, while the ReLU presets' first blocks were as fast as their later ones.  A training of
many epochs meets each shape once in its first epoch; the blocks time the later ones.

Reported per preset: updates/s of every block, the paired ratios to the baseline
(``bench_gpu.baseline``: softmax of the same group) with their median, bootstrap 95%
interval and min-max, and for a ``*_triton`` preset beside its eager form (``rela_g`` for
``rela_g_triton``) the blocks in which the kernels were faster and the one-sided sign
test's p-value (the probability of at least that many under no difference).

    python benchmarks/train_ab.py --presets softmax,rela_g,rela_g_triton --dtype fp16 \\
        --blocks 30 --block-updates 10 --out train_ab_out          # on a GPU
    python benchmarks/train_ab.py --cpu --dtype fp32 --presets softmax,rela_g ...  # tests

Writes ``OUT/train_ab.json`` (settings, every block, the summaries, provenance) and appends
each round of blocks to ``--progress`` (default ``OUT/train_ab_blocks.jsonl``) as it ends, so a call cut off by its time limit
keeps the blocks that ended.  ``--budget S``: no block starts once the time left would not
hold it (the median of the blocks that ended, times the presets of a round).
"""

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_gpu import DTYPE_FLAGS, PRESETS, alternating, baseline, synthetic_corpus, train_command  # noqa: E402
from timing import summarize_ratios  # noqa: E402

#: a ``*_triton`` preset and the eager preset it is compared with block by block
TRITON_SUFFIX = "_triton"


def eager_form(preset: str):
    """``rela_g_triton`` -> ``rela_g``, ``rela_g_triton_dropout`` -> ``rela_g_dropout``;
    None for a preset that does not run the kernels."""
    if TRITON_SUFFIX not in preset:
        return None
    head, _, tail = preset.partition(TRITON_SUFFIX)
    return head + tail


def fairseq_args(data: Path, preset: str, dtype: str, args):
    """The arguments ``bench_gpu``'s train part gives ``fairseq-train`` for ``preset``
    (without the interpreter and module), plus ``--cpu`` where asked."""
    cmd = train_command(data, preset, dtype, args)
    argv = cmd[cmd.index("fairseq_cli.train") + 1 :]
    return argv + (["--cpu"] if args.cpu else [])


class Run:
    """One preset, set up as ``fairseq_cli.train.main`` sets it up, up to its first
    update: task, model, criterion, ``Trainer``, and an endless source of its batches."""

    def __init__(self, preset: str, argv):
        import numpy as np
        from fairseq import options, tasks, utils
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf
        from fairseq.trainer import Trainer

        import fairseq_sparse_attn.plugin  # noqa: F401  (fairseq's parser reads --user-dir from sys.argv)

        parser = options.get_training_parser()
        cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, input_args=argv))
        np.random.seed(cfg.common.seed)
        utils.set_torch_seed(cfg.common.seed)
        self.preset = preset
        self.cfg = cfg
        task = tasks.setup_task(cfg.task)
        model = task.build_model(cfg.model)
        criterion = task.build_criterion(cfg.criterion)
        self.trainer = Trainer(cfg, task, model, criterion)
        self.epoch_itr = self.trainer.get_train_iterator(epoch=1, load_dataset=True)
        self.trainer.begin_epoch(self.epoch_itr.epoch)
        self._batches = None
        self.updates = 0
        self.overflows = 0

    def next_batch(self):
        """The next batch of the epoch iterator (a new epoch when one ends), collated."""
        while True:
            if self._batches is None:  # (the iterator counts its epochs itself)
                self._batches = self.epoch_itr.next_epoch_itr(shuffle=True)
            try:
                return next(self._batches)
            except StopIteration:
                self._batches = None

    def epoch_batches(self) -> int:
        """The batches of one epoch (every batch shape this preset's blocks meet)."""
        return len(self.epoch_itr)

    def train(self, updates: int) -> None:
        for _ in range(updates):
            before = self.trainer.get_num_updates()
            self.trainer.train_step([self.next_batch()])
            self.updates += 1
            self.overflows += self.trainer.get_num_updates() == before  # fp16: an overflow skips the update


#: ``--warmup-updates epoch``: one epoch of each preset's batches
EPOCH = "epoch"


def warmup_updates(value: str):
    """``--warmup-updates``: ``epoch`` or a count >= 0."""
    if value == EPOCH:
        return value
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be a count >= 0 or 'epoch', got {value!r}")
    return n


def synchronizer(cpu: bool):
    if cpu:
        return lambda: None
    import torch

    return torch.cuda.synchronize


def summarize(blocks, presets):
    """Per preset: updates/s of each block; paired ratios to its baseline; for a
    ``*_triton`` preset the blocks it won against its eager form, the sign test, and
    whether that is what auto's rule takes as faster (``shows_faster``)."""
    from fairseq_sparse_attn.attention.backends.triton import paired_rounds, shows_faster, sign_test_p

    ups = {p: [b["ups"][p] for b in blocks if p in b["ups"]] for p in presets}
    out = {}
    for preset in presets:
        base = baseline(preset)
        pairs = [b["ups"][preset] / b["ups"][base] for b in blocks if preset in b["ups"] and base in b["ups"]]
        entry = {
            "ups_median": statistics.median(ups[preset]) if ups[preset] else None,
            "ratio_to_" + base: summarize_ratios(pairs) if pairs else None,
        }
        eager = eager_form(preset)
        if eager in presets:
            paired = paired_rounds({"blocks": blocks}, preset, eager)
            wins = sum(a > b for a, b in paired)
            entry["against_" + eager] = {
                "ratio": summarize_ratios([a / b for a, b in paired]) if paired else None,
                "faster_blocks": wins,
                "blocks": len(paired),
                "sign_test_p": sign_test_p(wins, len(paired)),
                "shows_faster": shows_faster(paired),
            }
        out[preset] = entry
    return out


def format_table(part) -> str:
    """The summary of one dtype's ``train_ab`` part as a Markdown table."""
    s = part["settings"]
    lines = [
        f"paired training blocks in one process ({s['dtype']}, {s['block_updates']} updates per block, "
        f"{len(part['blocks'])} rounds)",
        "| preset | updates/s (median) | vs baseline: median [95% CI] (min-max) | kernels vs eager: faster blocks, p |",
        "|---|---|---|---|",
    ]
    for preset, e in part["summary"].items():
        ratio = next((v for k, v in e.items() if k.startswith("ratio_to_")), None)
        r = "–" if not ratio else f"{ratio['median']:.3f} [{ratio['ci95_low']:.3f}, {ratio['ci95_high']:.3f}]"
        r += "" if not ratio else f" ({ratio['min']:.2f}-{ratio['max']:.2f})"
        k = next((v for key, v in e.items() if key.startswith("against_")), None)
        kv = "–" if not k else f"{k['faster_blocks']} of {k['blocks']}, p = {k['sign_test_p']:.3g}"
        kv += "" if not k else (" (faster by auto's rule)" if k["shows_faster"] else "")
        u = "–" if e["ups_median"] is None else f"{e['ups_median']:.2f}"
        lines.append(f"| {preset} | {u} | {r} | {kv} |")
    return "\n".join(lines)


def _failure(failed, preset, e) -> None:
    failed[preset] = f"{type(e).__name__}: {e}"[:500]
    print(f"[train-ab] {preset} failed, left out of the rounds: {failed[preset]}", flush=True)


def set_up(presets, data, args):
    """({preset: Run} of the presets set up, {preset: why} of those that failed)."""
    runs, failed = {}, {}
    for preset in presets:
        try:
            runs[preset] = Run(preset, fairseq_args(data, preset, args.dtype, args))
        except Exception as e:  # one preset's failure (a flag, memory) leaves the others their rounds
            _failure(failed, preset, e)
    return runs, failed


def paired_blocks(runs, presets, failed, args, sync, progress, start, warmed):
    """The warm-up (its updates per preset recorded in ``warmed``), then up to ``--blocks``
    rounds of one block per preset in alternating order, each appended to ``progress`` as it
    ends: [{"round": r, "ups": {preset: ups}}].
    A preset whose training fails (diverged, out of memory) is recorded in ``failed`` and
    left out of the later rounds; without its baseline a preset has no ratio, so the
    rounds end when a baseline fails.  No round starts that the budget would not hold."""
    bases = {baseline(p) for p in presets}

    def attempt(preset, updates) -> bool:
        try:
            runs[preset].train(updates)
            return True
        except Exception as e:
            _failure(failed, preset, e)
            return False

    for preset in presets:  # the warm-up (module docstring); not recorded
        if preset in runs and preset not in failed:
            updates = runs[preset].epoch_batches() if args.warmup_updates == EPOCH else args.warmup_updates
            warmed[preset] = updates
            attempt(preset, updates)
    sync()
    blocks, took = [], []
    for b in range(args.blocks):
        active = [p for p in presets if p in runs and p not in failed]
        if bases & set(failed) or not active:
            print(f"[train-ab] round {b + 1}: not started (failed: {', '.join(failed)})", flush=True)
            break
        if args.budget and took and time.monotonic() - start + statistics.median(took) * len(active) > args.budget:
            print(f"[train-ab] round {b + 1}: not started (--budget {args.budget:.0f} s)", flush=True)
            break
        block = {"round": b + 1, "ups": {}}
        for preset in alternating(active, b):
            sync()
            t0 = time.perf_counter()
            if not attempt(preset, args.block_updates):
                continue
            sync()
            seconds = time.perf_counter() - t0
            took.append(seconds)
            block["ups"][preset] = args.block_updates / seconds
        blocks.append(block)
        with open(progress, "a") as f:
            f.write(json.dumps(block) + "\n")
        print(f"[train-ab] round {b + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in block["ups"].items()), flush=True)
    return blocks


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", default="softmax,rela_g,rela_g_triton", help=f"comma list of {', '.join(PRESETS)}")
    p.add_argument("--dtype", default="fp16", choices=sorted(DTYPE_FLAGS))
    p.add_argument("--blocks", type=int, default=30, help="rounds of one block per preset (>= 3)")
    p.add_argument("--block-updates", type=int, default=10, help="updates per timed block (>= 1)")
    p.add_argument(
        "--warmup-updates",
        type=warmup_updates,
        default=EPOCH,
        metavar="N|epoch",
        help="updates per preset before the first block, not timed (default: epoch, one epoch of its batches)",
    )
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--pairs", type=int, default=6000, help="sentence pairs of the synthetic corpus (no --data)")
    p.add_argument("--data", default="", help="a binarized corpus (default: a synthetic one, as bench_gpu's)")
    p.add_argument("--cpu", action="store_true", help="train on the CPU (tests; the timing means little there)")
    p.add_argument("--out", default="train_ab_out")
    p.add_argument(
        "--progress",
        default="",
        metavar="FILE",
        help="every round appended to FILE as it ends (JSON lines; default OUT/train_ab_blocks.jsonl)",
    )
    p.add_argument("--budget", type=float, default=0.0, metavar="S", help="start no block after S seconds (0: none)")
    args = p.parse_args(argv)
    presets = [x for x in args.presets.split(",") if x]
    bad = [x for x in presets if x not in PRESETS]
    if bad:
        print(f"train_ab.py: error: --presets: unknown {', '.join(bad)}", file=sys.stderr)
        return 2
    for name, value, least in (("--blocks", args.blocks, 3), ("--block-updates", args.block_updates, 1)):
        if value < least:
            print(f"train_ab.py: error: {name} must be >= {least}, got {value}", file=sys.stderr)
            return 2
    if args.data and not (Path(args.data) / "dict.src.txt").is_file():
        print(
            f"train_ab.py: error: --data {args.data}: no dict.src.txt (a bench_gpu-style corpus, src-tgt)",
            file=sys.stderr,
        )
        return 2
    if not args.cpu:
        import torch

        if not torch.cuda.is_available():
            print(
                "train_ab.py: error: no CUDA device (torch.cuda.is_available() is False): it times GPU training; "
                "--cpu runs it on the CPU (for tests: the timing means little there)",
                file=sys.stderr,
            )
            return 2
    for base in sorted({baseline(x) for x in presets}, reverse=True):
        if base not in presets:
            presets.insert(0, base)

    from fairseq_sparse_attn.provenance import write_json

    start = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    progress = Path(args.progress) if args.progress else out / "train_ab_blocks.jsonl"
    progress.unlink(missing_ok=True)
    if not args.data:
        shutil.rmtree(out / "corpus", ignore_errors=True)  # (fairseq-preprocess refuses an existing one)
    data = Path(args.data) if args.data else synthetic_corpus(out / "corpus", args.pairs)
    # bench_gpu's flags; log-interval/max-update are read by train_command, not used here
    args.max_update, args.log_interval = 10**9, 10**9
    sync = synchronizer(args.cpu)
    runs, failed = set_up(presets, data, args)
    warmed = {}
    blocks = paired_blocks(runs, presets, failed, args, sync, progress, start, warmed)
    settings = {k: v for k, v in vars(args).items() if k not in ("max_update", "log_interval")}
    settings["presets"] = presets
    part = {
        "settings": settings,
        "blocks": blocks,
        "warmup_updates": warmed,
        "overflows": {p: run.overflows for p, run in runs.items()},
        "failed": failed,
        "summary": summarize(blocks, presets) if blocks else {},
    }
    # the layout of a make bench-gpu result (parts -> part -> dtype), so that a recorded
    # docs/results/bench-gpu*.json takes it beside its kernels part (auto's faster_in)
    result = {"settings": settings, "parts": {"train_ab": {args.dtype: part}}}
    path = write_json(out / "train_ab.json", result, argv=sys.argv if argv is None else ["train_ab.py", *argv])
    if blocks:
        print(format_table(part))
    print(f"[train-ab] wrote {path}", flush=True)
    return 0 if blocks and not failed else 1


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, force=True)  # not fairseq's INFO records of every set-up
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no compile worker thread may keep the process alive
