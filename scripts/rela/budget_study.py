#!/usr/bin/env python
"""Why does ReLA-g lag softmax at small budgets?  Train variants of the demo's model on
Multi30k and compare each with a baseline run *at the same number of updates*
(docs/rela.md, "Small budgets").

    # 1. train (one process per run, or several runs in one process); every run is the
    #    demo's training command (scripts/demo.py) plus its own fairseq flags, with a
    #    checkpoint kept every --save-every updates:
    python scripts/rela/budget_study.py train --out study --max-update 2000 \\
        --run softmax=softmax --run rela_g=rela_g
    python scripts/rela/budget_study.py train --out study --max-update 250 \\
        --run "rela_g_adrop=rela_g:--attention-dropout 0.1" \\
        --run "rela_g_init=rela_g:--attn-init rela_official" --run rela_i=rela_i
    # 2. evaluate every run found in --out at every budget its checkpoints reach:
    python scripts/rela/budget_study.py report --out study --baseline softmax \\
        --budgets 250,500,1000,2000

A run is ``NAME=MODEL[:FAIRSEQ FLAGS]``; MODEL is one of the demo's models (softmax,
rela_g, rela_i) and the flags are appended to the demo's command, so they override it
(``--attention-dropout 0.1``, ``--warmup-updates 400``, ``--lr 5e-4``, ``--attn-init
rela_official``).  Each run's learning rate is the demo's (``DEMO_LR``) unless its flags
set one.

``report`` computes, for every run and budget B (a checkpoint at update B must exist):
validation sacreBLEU (beam 4, the demo's decoding) - the BLEU curve beside the loss curve
from the training log -, and on the test set (test_2016_flickr against the raw references):
sacreBLEU with its 95% CI and the paired-bootstrap p-value against the baseline run at the
same B (1000 resamples), the same for the average of the last ``--average`` checkpoints up
to B, the length ratio, the share of hypotheses with a repeated word or bigram, the number
of distinct outputs, and - teacher-forced on the test references - the null rate of the
cross-attention (rows with every weight 0) overall and by position in the target sentence
(first, middle, last third).  It writes ``study.json`` (with provenance), ``study.csv``,
``study.md`` and ``study_curves.{png,csv,json}`` (validation loss and BLEU vs updates);
``--name`` changes the prefix, so one study folder can hold several reports (another
baseline, other runs or budgets); translations are cached per run and budget.
"""

import argparse
import csv
import json
import re
import shlex
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))

import demo  # noqa: E402  (scripts/demo.py: the demo's training, decoding and statistics)

RUN_FILE = "run.json"
THIRDS = ("first", "middle", "last")


def parse_run(text):
    """``NAME=MODEL[:FLAGS]`` -> (name, model, [flags])."""
    name, sep, rest = text.partition("=")
    model, _, flags = rest.partition(":")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.+-]+", name or "") or model.strip() not in demo.MODELS:
        raise argparse.ArgumentTypeError(
            f"--run: expected NAME=MODEL[:FAIRSEQ FLAGS] with NAME of letters, digits, _.+- and MODEL one of "
            f"{', '.join(demo.MODELS)}, got {text!r}"
        )
    return name, model.strip(), shlex.split(flags)


def train(args):
    from fairseq_sparse_attn.provenance import write_json

    out = Path(args.out).resolve()
    data_bin = prepare(args, out)
    for name, model, flags in args.run:
        run_dir = out / name
        run_dir.mkdir(parents=True, exist_ok=True)
        save_dir = run_dir / "checkpoints"
        cmd = demo.train_command(model, demo.DEMO_LR[model], args, data_bin, save_dir)
        cmd += ["--save-interval-updates", str(args.save_every), "--keep-interval-updates", "-1", *flags]
        record = {
            "name": name,
            "model": model,
            "flags": flags,
            "max_update": args.max_update,
            "save_every": args.save_every,
            "train_command": [str(c) for c in cmd],
            "finished": False,
        }
        resumed = earlier_run(run_dir, record)
        if resumed == "finished":
            demo.log(f"study: {name} is already trained ({run_dir / RUN_FILE}); skipped")
            continue
        demo.log(
            f"study: {'resuming' if resumed else 'training'} {name} ({model} {' '.join(flags)}), "
            f"{args.max_update} updates"
        )
        # written first, so that a run stopped early can still be reported up to its last checkpoint
        write_json(run_dir / RUN_FILE, record, seed=args.seed)
        start = time.time()
        # a resumed run (fairseq continues from checkpoint_last.pt) appends to its log: the
        # validation losses before the interruption are part of its curve
        demo.run(cmd, run_dir / "train.log", mode="a" if resumed else "w")
        write_json(
            run_dir / RUN_FILE,
            {**record, "finished": True, "train_seconds": round(time.time() - start, 1)},
            seed=args.seed,
        )


def earlier_run(run_dir, record):
    """None for a new run, "finished" for a run trained to the end with this very command,
    "unfinished" for one that stopped early (it resumes); another command in the same
    folder is an error (its checkpoints and log would be mixed with this one's)."""
    path = run_dir / RUN_FILE
    if not path.exists():
        return None
    earlier = json.loads(path.read_text(encoding="utf-8"))
    if earlier.get("train_command") != record["train_command"]:
        sys.exit(
            f"study: {run_dir} holds run {earlier.get('name')!r} trained with another command "
            f"({' '.join(earlier.get('train_command', [])[5:])}); give this run another NAME or "
            f"remove that folder"
        )
    return "finished" if earlier.get("finished") else "unfinished"


def prepare(args, out):
    """The demo's Multi30k preparation, done once per study folder (concurrent ``train``
    processes share it: prepare first, or start them after one has prepared)."""
    data_bin = out / "multi30k" / "data-bin"
    if (data_bin / "test.de-en.de.bin").exists() or (data_bin / f"test.{args.src}-{args.tgt}.{args.src}.bin").exists():
        return data_bin
    return demo.prepare(args, out)


# ---------------------------------------------------------------------------------- report


def report(args):
    import sacrebleu

    from fairseq_sparse_attn.provenance import write_json
    from fairseq_sparse_attn.tools.learning_curves import parse_validation, write_curves
    from fairseq_sparse_attn.tools.significance import N_RESAMPLES, paired_bootstrap

    out = Path(args.out).resolve()
    data_bin = out / "multi30k" / "data-bin"
    runs = find_runs(out, args.runs)
    if args.baseline not in runs:
        sys.exit(
            f"report: no run named {args.baseline!r} in {out} (runs: {', '.join(runs) or 'none'}); "
            f"train it first or pass --baseline"
        )
    budgets = parse_budgets(args.budgets, out / args.baseline)
    refs = (out / "multi30k" / "raw" / f"test.{args.tgt}").read_text(encoding="utf-8").splitlines()
    ref_words = sum(len(r.split()) for r in refs)
    demo.quiet_fairseq()
    rows, curves, hyps_of, signature = [], {}, {}, None
    for name, run in runs.items():
        run_dir = out / name
        points = {p["num_updates"]: dict(p) for p in parse_validation(run_dir / "train.log")}
        for budget in budgets:
            ckpt = checkpoint_at(run_dir / "checkpoints", budget)
            if ckpt is None:
                continue
            demo.log(f"report: {name} at {budget} updates")
            valid_hyps, valid_refs = decode(ckpt, args, data_bin, run_dir, f"u{budget}", "valid")
            bleu = sacrebleu.metrics.BLEU()
            valid_bleu = bleu.corpus_score(valid_hyps, [valid_refs]).score
            signature = signature or str(bleu.get_signature())
            points.setdefault(budget, {"num_updates": budget})["bleu"] = round(valid_bleu, 2)
            test_hyps, _ = decode(ckpt, args, data_bin, run_dir, f"u{budget}", "test")
            hyps_of[(name, budget, 1)] = test_hyps
            # (the lambdas below are called within this iteration)
            null = cached(run_dir / "eval" / f"null_u{budget}.json", lambda: cross_null_rates(ckpt, data_bin))  # noqa: B023
            row = {
                "run": name,
                "model": run["model"],
                "flags": " ".join(run["flags"]),
                "updates": budget,
                "valid_loss": points.get(budget, {}).get("loss"),
                "valid_bleu": round(valid_bleu, 2),
                **translation_stats(test_hyps, ref_words),
                "cross_null": null,
            }
            inputs = checkpoints_to_average(run_dir / "checkpoints", budget, args.average, run["save_every"])
            if inputs is not None:
                avg_hyps, _ = decode(
                    lambda: write_average(inputs, run_dir / "checkpoints", budget),  # noqa: B023 (called at once, inside this iteration)
                    args,
                    data_bin,
                    run_dir,
                    f"u{budget}_avg{args.average}",
                    "test",
                )
                hyps_of[(name, budget, args.average)] = avg_hyps
            rows.append(row)
        curves[name] = [points[u] for u in sorted(points)]
    for budget in budgets:
        for n_avg in (1, args.average):
            base = hyps_of.get((args.baseline, budget, n_avg))
            others = [
                (n, hyps_of[(n, budget, n_avg)]) for n in runs if n != args.baseline and (n, budget, n_avg) in hyps_of
            ]
            if base is None:
                continue
            sig, signature = paired_bootstrap((args.baseline, base), others, refs)
            key = "test" if n_avg == 1 else f"test_avg{n_avg}"
            for row in rows:
                if row["updates"] == budget and row["run"] in sig:
                    s = sig[row["run"]]
                    row.update(
                        {f"{key}_bleu": s["bleu"], f"{key}_ci95": s["ci95"], f"{key}_p_vs_baseline": s["p_value"]}
                    )
    curve_files = write_curves(
        curves,
        out / f"{args.name}_curves",
        seed=args.seed,
        title=f"validation loss and BLEU (beam 4) vs updates; baseline {args.baseline}",
    )
    write_json(
        out / f"{args.name}.json",
        {
            "baseline": args.baseline,
            "budgets": budgets,
            "average": args.average,
            "test_set": "Multi30k test_2016_flickr",
            "paired_bootstrap_resamples": N_RESAMPLES,
            "runs": runs,
            "rows": rows,
        },
        seed=args.seed,
        sacrebleu_signature=signature,
    )
    write_tables(rows, out, args)
    print(f"\nsacreBLEU signature: {signature}\ncurves: {curve_files[2]}\nresults: {out / (args.name + '.json')}")


def find_runs(out, only=None):
    runs = {}
    for path in sorted(out.glob(f"*/{RUN_FILE}")):
        run = json.loads(path.read_text(encoding="utf-8"))
        runs[run["name"]] = run
    if only:
        wanted = [n.strip() for n in only.split(",") if n.strip()]
        missing = [n for n in wanted if n not in runs]
        if missing:
            sys.exit(f"report: --runs {', '.join(missing)} not trained in {out} (have: {', '.join(runs)})")
        runs = {n: runs[n] for n in wanted}
    return runs


def parse_budgets(text, baseline_dir):
    if text:
        try:
            budgets = sorted({int(b) for b in text.split(",") if b.strip()})
        except ValueError:
            sys.exit(f"--budgets: expected comma-separated update counts, got {text!r}")
        if not budgets or budgets[0] <= 0:
            sys.exit(f"--budgets: expected positive update counts, got {text!r}")
        return budgets
    saved = [
        int(m.group(1))
        for c in (baseline_dir / "checkpoints").glob("checkpoint_*_*.pt")
        if (m := re.fullmatch(r"checkpoint_\d+_(\d+)\.pt", c.name))
    ]
    if not saved:
        sys.exit(f"report: {baseline_dir}/checkpoints has no checkpoint_E_U.pt yet")
    last = max(saved)
    return sorted({b for b in range(250, last + 1, 250)} | {last})


def checkpoint_at(save_dir, updates):
    """The checkpoint fairseq saved at exactly ``updates`` updates (``checkpoint_E_U.pt``)."""
    found = sorted(save_dir.glob(f"checkpoint_*_{updates}.pt"))
    return found[-1] if found else None


def checkpoints_to_average(save_dir, budget, n, every):
    """The n checkpoints at budget, budget-every, ... (oldest first); None when n < 2 or one
    of them is missing."""
    if n < 2:
        return None
    inputs = [checkpoint_at(save_dir, budget - i * every) for i in reversed(range(n))]
    return None if any(c is None for c in inputs) else inputs


def write_average(inputs, save_dir, budget):
    """A temporary checkpoint averaging ``inputs`` (removed after decoding)."""
    import torch

    from fairseq_sparse_attn.tools.average_checkpoints import average

    target = save_dir / f".avg{len(inputs)}_{budget}.pt"
    torch.save(average(inputs), target)
    return target


def cached(path, compute):
    if path.exists():
        return json.loads(path.read_text(encoding="utf-8"))
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value), encoding="utf-8")
    return value


def decode(ckpt, args, data_bin, run_dir, tag, subset):
    """(hypotheses, fairseq's detokenized references) with the demo's decoding; cached in
    ``run_dir/eval`` (a report can be re-run while other runs still train).  ``ckpt`` is a
    path, or a function that writes a temporary checkpoint (averaged) and returns its path:
    called only when the translation is not cached, the file removed afterwards."""
    eval_dir = run_dir / "eval"
    hyp_file, ref_file = eval_dir / f"{subset}_{tag}.hyp", eval_dir / f"{subset}_{tag}.ref"
    if hyp_file.exists() and ref_file.exists():
        return (
            hyp_file.read_text(encoding="utf-8").split("\n")[:-1],
            ref_file.read_text(encoding="utf-8").split("\n")[:-1],
        )
    eval_dir.mkdir(parents=True, exist_ok=True)
    made = callable(ckpt)  # a temporary checkpoint, written only when the translation is not cached
    path = ckpt() if made else ckpt
    try:
        hyps, refs, _ = demo.generate(tag, path, args, data_bin, eval_dir, subset=subset)
    finally:
        if made:
            path.unlink(missing_ok=True)
    ref_file.write_text("\n".join(refs) + "\n", encoding="utf-8")
    return hyps, refs


def translation_stats(hyps, ref_words):
    """Length ratio (hypothesis words / reference words, whitespace-split), share of
    hypotheses with a word or bigram occurring twice, number of distinct hypotheses."""
    words = [h.split() for h in hyps]
    return {
        "length_ratio": round(sum(map(len, words)) / ref_words, 3),
        "repeats": round(sum(map(has_repeat, words)) / len(words), 3),
        "distinct": len(set(hyps)),
        "sentences": len(hyps),
    }


def has_repeat(words):
    bigrams = list(zip(words, words[1:]))
    content = [w for w in words if w.isalpha() and len(w) > 3]  # "a", "the", "in" recur in fine captions
    return len(set(bigrams)) < len(bigrams) or len(set(content)) < len(content)


def cross_null_rates(ckpt, data_bin):
    """Teacher-forced on the test references: the share of cross-attention rows (one query,
    one head, one layer) whose weights are all 0, overall and by the query's position in its
    target sentence (first / middle / last third)."""
    import torch

    from fairseq_sparse_attn.analysis.recording import record_attention

    model, task = demo.load(ckpt, data_bin)
    pad = task.target_dictionary.pad()
    counts, nulls = torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    state = {}

    def keep(site, weights, **_):
        if site.kind != "cross":
            return
        null = (weights == 0).all(-1)  # (bsz, heads, tgt): no source position gets weight
        third = state["third"]  # (bsz, tgt), -1 on padding
        for k in range(3):
            sel = (third == k).unsqueeze(1).expand_as(null)
            counts[k] += sel.sum()
            nulls[k] += (null & sel).sum()

    itr = task.get_batch_iterator(task.dataset("test"), max_tokens=4096).next_epoch_itr(shuffle=False)
    with torch.no_grad(), record_attention(model, keep):
        for sample in itr:
            prev = sample["net_input"]["prev_output_tokens"]
            real = prev.ne(pad)
            length = real.sum(1, keepdim=True)
            position = real.long().cumsum(1) - 1
            state["third"] = torch.where(
                real, torch.div(3 * position, length, rounding_mode="floor"), torch.full_like(position, -1)
            )
            model(**sample["net_input"])
    return {
        "all": round(float(nulls.sum() / counts.sum()), 4),
        **{t: round(float(nulls[k] / counts[k]), 4) for k, t in enumerate(THIRDS)},
    }


COLUMNS = [
    "run",
    "model",
    "flags",
    "updates",
    "valid_loss",
    "valid_bleu",
    "test_bleu",
    "test_ci95",
    "test_p_vs_baseline",
    "test_avg_bleu",
    "test_avg_ci95",
    "test_avg_p_vs_baseline",
    "length_ratio",
    "repeats",
    "distinct",
    "null_all",
    "null_first",
    "null_middle",
    "null_last",
]


def flat(row, n_avg):
    r = dict(row)
    for k in ("bleu", "ci95", "p_vs_baseline"):
        r[f"test_avg_{k}"] = row.get(f"test_avg{n_avg}_{k}")
    for k, v in row["cross_null"].items():
        r[f"null_{k}"] = v
    return r


def fmt(value, digits=3):
    if value is None:
        return "-"
    if isinstance(value, list):
        return f"{value[0]:.2f}-{value[1]:.2f}"  # as the BLEU beside it: at .1f "0.07 [0.1-0.1]" left out 0.07
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def write_tables(rows, out, args):
    flat_rows = [flat(r, args.average) for r in sorted(rows, key=lambda r: (r["updates"], r["run"] != args.baseline))]
    with open(out / f"{args.name}.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in flat_rows:
            w.writerow([fmt(r.get(c)) if isinstance(r.get(c), list) else r.get(c) for c in COLUMNS])
    head = [
        "run",
        "updates",
        "valid loss",
        "valid BLEU",
        "test BLEU [95% CI]",
        f"p vs {args.baseline}",
        f"test BLEU avg{args.average} [CI]",
        "p (avg)",
        "length ratio",
        "repeats",
        "distinct",
        "cross null: all / first / middle / last third",
    ]
    md = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in flat_rows:
        md.append(
            "| "
            + " | ".join(
                [
                    r["run"] + (f" ({r['flags']})" if r["flags"] else ""),
                    str(r["updates"]),
                    fmt(r["valid_loss"]),
                    fmt(r["valid_bleu"], 2),
                    f"{fmt(r.get('test_bleu'), 2)} [{fmt(r.get('test_ci95'))}]",
                    fmt(r.get("test_p_vs_baseline")),
                    f"{fmt(r.get('test_avg_bleu'), 2)} [{fmt(r.get('test_avg_ci95'))}]",
                    fmt(r.get("test_avg_p_vs_baseline")),
                    fmt(r["length_ratio"]),
                    f"{100 * r['repeats']:.1f}%",
                    f"{r['distinct']}/{r['sentences']}",
                    " / ".join(fmt(r[f"null_{t}"]) for t in ("all",) + THIRDS),
                ]
            )
            + " |"
        )
    (out / f"{args.name}.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    print("\n" + "\n".join(md))


def common_options(p):
    p.add_argument("--out", required=True)
    p.add_argument(
        "--raw-dir",
        default=demo.shipped_multi30k(),
        help="local Multi30k raw files (default: as the Makefile, $MULTI30K_DIR, else "
        "../shared/data/multi30k; else downloaded)",
    )
    p.add_argument("--src", default="de")
    p.add_argument("--tgt", default="en")
    p.add_argument("--max-train-lines", type=int, default=None)
    p.add_argument("--max-eval-lines", type=int, default=None)
    p.add_argument("--seed", type=int, default=1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train runs (the demo's command + each run's flags)")
    common_options(t)
    t.add_argument("--run", type=parse_run, action="append", required=True, metavar="NAME=MODEL[:FLAGS]")
    t.add_argument("--max-update", type=int, default=250)
    t.add_argument("--save-every", type=int, default=50, help="keep a checkpoint every N updates")
    t.add_argument("--validate-interval", type=int, default=50)
    # the demo's model and schedule (scripts/demo.py defaults); a run's flags override them
    t.add_argument("--layers", type=int, default=3)
    t.add_argument("--dim", type=int, default=256)
    t.add_argument("--heads", type=int, default=4)
    t.add_argument("--dropout", type=float, default=0.1)
    t.add_argument("--attention-dropout", type=float, default=0.0)
    t.add_argument("--max-tokens", type=int, default=2048)
    t.add_argument("--warmup", type=int, default=100)
    t.add_argument("--tensorboard-logdir", default=None)
    r = sub.add_parser("report", help="evaluate every run in --out at every budget")
    common_options(r)
    r.add_argument("--baseline", default="softmax", help="the run every other run is compared with")
    r.add_argument(
        "--budgets",
        default=None,
        help="comma-separated update counts (default: the multiples of 250 up "
        "to the baseline's last checkpoint, and that one)",
    )
    r.add_argument("--average", type=int, default=5, help="average the last N checkpoints up to each budget")
    r.add_argument("--runs", default=None, help="comma-separated run names (default: every run in --out)")
    r.add_argument(
        "--name",
        default="study",
        help="report files NAME.{json,csv,md} and NAME_curves.* in --out "
        "(several reports of one study folder: other baselines, runs or budgets)",
    )
    args = p.parse_args(argv)
    names = [n for n, _, _ in getattr(args, "run", [])]
    if len(set(names)) != len(names):
        p.error(f"--run: names must differ, got {names}")
    if args.command == "train":
        if args.save_every <= 0 or args.max_update % args.save_every:
            p.error(f"--save-every must divide --max-update ({args.max_update}), got {args.save_every}")
        train(args)
    else:
        report(args)


if __name__ == "__main__":
    main()
