#!/usr/bin/env python
"""make demo: softmax vs ReLA-g on Multi30k German->English, on CPU, same budget.

1. prepares Multi30k (data_prep/prepare_multi30k.py: $MULTI30K_DIR or download,
   sacremoses, joint BPE, fairseq-preprocess);
2. trains a small softmax transformer and a small ReLA-g transformer (same size, same
   number of updates, same seed, same schedule), each at its own learning rate chosen the
   same way: the best of a validation sweep (``make demo-sweep``, DEMO_LR below,
   docs/demo.md); both validate every --validate-interval updates;
3. translates the 2016 Flickr test set with fairseq-generate (beam 4), detokenizes and
   scores with sacreBLEU against the raw references: BLEU, its 95% confidence interval and
   the paired-bootstrap p-value of the difference (sacreBLEU's --paired-bs, 1000 resamples);
4. prints a side-by-side table (BLEU, CI, p-value, train words/s, decode sentences/s,
   sparsity and null rate per attention kind) and what it does and does not show; writes
   results.json (with provenance), learning_curves.{png,csv,json} (validation loss vs
   updates, both models) and a cross-attention heatmap PNG of one test sentence.

``--sweep 5e-4,1e-3,2e-3`` (``make demo-sweep``) instead trains every model at every rate
with the demo's budget, translates the *validation* set (beam 4) and picks each model's
rate by validation BLEU: sweep.{json,csv,md} and sweep_curves.{png,csv,json}.  The test
set is not touched by the sweep.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODELS = {
    "softmax": ["--arch", "softmax_transformer_wmt_en_de"],
    "rela_g": ["--arch", "rela_transformer_wmt_en_de"],
    # not in the default demo; for comparisons (--models softmax,rela_i, --sweep)
    "rela_i": ["--arch", "rela_transformer_wmt_en_de", "--attn-output-norm", "rmsnorm_i"],
}
DEFAULT_MODELS = ("softmax", "rela_g")
# Each model's learning rate: its best validation BLEU in `make demo-sweep` at the demo's
# budget (250 updates, warmup 100; rates 5e-4, 1e-3, 2e-3; 2026-11-23): 1e-3 for softmax
# (15.10) and for ReLA-g (6.70); the table is in docs/demo.md.  ReLA-i was not swept.
DEMO_LR = {"softmax": 1e-3, "rela_g": 1e-3, "rela_i": 1e-3}
SWEEP_LRS = "5e-4,1e-3,2e-3"
KINDS = ("encoder_self", "decoder_self", "cross")
ALPHA = 0.05


def log(msg):
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd, logfile, mode="w"):
    """Run ``cmd`` with its output in ``logfile`` (``mode="a"``: appended, for a resumed run)."""
    log(" ".join(str(c) for c in cmd[:4]) + " ... (log: %s)" % logfile)
    with open(logfile, mode) as f:
        proc = subprocess.run([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = Path(logfile).read_text().splitlines()[-25:]
        sys.exit(f"command failed ({proc.returncode}): {' '.join(map(str, cmd))}\n" + "\n".join(tail))
    return Path(logfile).read_text()


def model_flags(args):
    return [
        "--encoder-layers", str(args.layers), "--decoder-layers", str(args.layers),
        "--encoder-embed-dim", str(args.dim), "--decoder-embed-dim", str(args.dim),
        "--encoder-ffn-embed-dim", str(4 * args.dim), "--decoder-ffn-embed-dim", str(4 * args.dim),
        "--encoder-attention-heads", str(args.heads), "--decoder-attention-heads", str(args.heads),
        "--share-all-embeddings", "--dropout", str(args.dropout),
        "--attention-dropout", str(args.attention_dropout),
    ]


def train_command(name, lr, args, data_bin, save_dir):
    """The fairseq-train command of one demo (or sweep) run: the only thing that differs
    between the two models is --arch (and the learning rate, chosen per model)."""
    cmd = [
        sys.executable, "-m", "fairseq_cli.train", data_bin, "--user-dir", REPO / "fairseq_sparse_attn",
        *MODELS[name], *model_flags(args),
        "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", str(lr),
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(args.warmup),
        "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--max-tokens", str(args.max_tokens), "--max-update", str(args.max_update),
        "--save-dir", save_dir, "--no-epoch-checkpoints",
        "--num-workers", "0", "--seed", str(args.seed), "--log-format", "simple", "--log-interval", "25",
        "--validate-interval-updates", str(args.validate_interval),
    ]
    if args.tensorboard_logdir:
        cmd += ["--tensorboard-logdir", Path(args.tensorboard_logdir) / save_dir.name.replace("checkpoints_", "", 1)]
    return cmd


def train(name, lr, args, data_bin, out, tag):
    save_dir = out / f"checkpoints_{tag}"
    if save_dir.exists():  # a fresh run: fairseq-train would resume from an earlier checkpoint_last.pt
        shutil.rmtree(save_dir)
    text = run(train_command(name, lr, args, data_bin, save_dir), out / f"train_{tag}.log")
    # fairseq's progress lines: "train_inner | epoch 001:  25 / 247 loss=..., wps=1725.4, ..."
    wps = [float(m) for m in re.findall(r"\| train_inner \| .*?wps=([\d.]+)", text)]
    per_epoch = re.search(r"\| train_inner \| epoch 001: +\d+ / (\d+) ", text)
    args.updates_per_epoch = int(per_epoch.group(1)) if per_epoch else None
    ckpt = save_dir / "checkpoint_last.pt"
    if not ckpt.exists():
        sys.exit(f"{name}: training ended without {ckpt}")
    return ckpt, (round(sum(wps) / len(wps), 1) if wps else None), out / f"train_{tag}.log"


def generate(name, checkpoint, args, data_bin, out, subset="test"):
    """(detokenized hypotheses, detokenized references fairseq printed, sentences/s)."""
    cmd = [
        sys.executable, "-m", "fairseq_cli.generate", data_bin, "--user-dir", REPO / "fairseq_sparse_attn",
        "--path", checkpoint, "--gen-subset", subset, "--beam", "4", "--batch-size", "64",
        "--max-len-a", "1.2", "--max-len-b", "10",
        "--remove-bpe", "--tokenizer", "moses", "--source-lang", args.src, "--target-lang", args.tgt,
    ]
    text = run(cmd, out / f"generate_{subset}_{name}.log")
    hyps, refs = {}, {}
    for line in text.splitlines():
        if line.startswith("D-"):
            idx, _, hyp = line[2:].split("\t", 2)
            hyps[int(idx)] = hyp
        elif line.startswith("T-"):
            idx, ref = line[2:].split("\t", 1)
            refs[int(idx)] = ref
    m = re.search(r"\(([\d.]+) sentences/s", text)
    ordered = [hyps[i] for i in sorted(hyps)]
    (out / f"{subset}_{name}.hyp").write_text("\n".join(ordered) + "\n")
    return ordered, [refs[i] for i in sorted(refs)], float(m.group(1)) if m else None


def quiet_fairseq():
    """The in-process steps (loading, statistics) should not flood the table with INFO."""
    import logging
    import warnings

    logging.getLogger("fairseq").setLevel(logging.WARNING)
    logging.getLogger().setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")


def load(checkpoint, data_bin):
    import fairseq_sparse_attn.plugin  # noqa: F401
    from fairseq import checkpoint_utils

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(data_bin)})
    task.load_dataset("test")
    return models[0].eval(), task


def attention_statistics(model, task):
    from fairseq_sparse_attn.analysis.attention_stats import collect_sparsity

    itr = task.get_batch_iterator(task.dataset("test"), max_tokens=4096).next_epoch_itr(shuffle=False)
    return collect_sparsity(model, itr, task.target_dictionary.pad()).per_kind()


def cross_attention_of(model, task, index):
    """Teacher-forced cross-attention of the last decoder layer, all heads, for test
    sentence ``index`` with its reference: (heads, tgt, src) + token strings."""
    import torch
    from fairseq_sparse_attn.analysis.recording import attention_sites, record_attention

    dataset = task.dataset("test")
    index = min(index, len(dataset) - 1)
    sample = dataset.collater([dataset[index]])
    captured = {}
    last = max(s.layer for s in attention_sites(model) if s.kind == "cross")

    def keep(site, weights, **_):
        if site.kind == "cross" and site.layer == last:
            captured["w"] = weights[0].clone()

    with torch.no_grad(), record_attention(model, keep):
        model(**sample["net_input"])
    src = [task.source_dictionary[t] for t in sample["net_input"]["src_tokens"][0]]
    tgt = [task.target_dictionary[t] for t in sample["target"][0]]
    return captured["w"], src, tgt, last


def heatmap(panels, path):
    import logging

    import matplotlib

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heads = panels[0][1].size(0)
    fig, axes = plt.subplots(len(panels), heads, figsize=(3.2 * heads, 3.4 * len(panels)), squeeze=False)
    for row, (title, w, src, tgt, layer) in enumerate(panels):
        for h in range(heads):
            ax = axes[row][h]
            ax.imshow(w[h].numpy(), cmap="Blues", aspect="auto", vmin=0)
            ax.set_title(f"{title}: cross layer {layer + 1}, head {h + 1}", fontsize=8)
            ax.set_xticks(range(len(src)))
            ax.set_xticklabels(src, rotation=90, fontsize=6)
            ax.set_yticks(range(len(tgt)))
            ax.set_yticklabels(tgt if h == 0 else [""] * len(tgt), fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def prepare(args, out):
    prep = [sys.executable, REPO / "data_prep" / "prepare_multi30k.py", "--out", out / "multi30k",
            "--src", args.src, "--tgt", args.tgt]
    if args.raw_dir:
        prep += ["--raw-dir", args.raw_dir]
    if args.max_train_lines:
        prep += ["--max-train-lines", str(args.max_train_lines)]
    if args.max_eval_lines:
        prep += ["--max-eval-lines", str(args.max_eval_lines)]
    log("preparing Multi30k " + ("from " + args.raw_dir if args.raw_dir else "(download)"))
    if subprocess.run([str(c) for c in prep]).returncode != 0:
        sys.exit("data preparation failed (see messages above)")
    return out / "multi30k" / "data-bin"


def parse_lrs(text):
    try:
        lrs = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        lrs = []
    if not lrs or any(lr <= 0 for lr in lrs):
        sys.exit(f"--sweep: expected comma-separated positive learning rates (e.g. {SWEEP_LRS}), got {text!r}")
    return lrs


def sweep(args, out, data_bin):
    """Every model at every learning rate, same budget; validation BLEU (beam 4) picks."""
    import sacrebleu

    from fairseq_sparse_attn.provenance import write_json
    from fairseq_sparse_attn.tools.learning_curves import parse_validation, write_curves

    lrs = parse_lrs(args.sweep)
    rows, curves, signature = [], {}, None
    for name in args.models:
        for lr in lrs:
            tag = f"{name}_lr{lr:g}"
            log(f"sweep: training {name} at lr {lr:g} ({args.max_update} updates)")
            ckpt, wps, train_log = train(name, lr, args, data_bin, out, tag)
            hyps, refs, _ = generate(tag, ckpt, args, data_bin, out, subset="valid")
            bleu = sacrebleu.metrics.BLEU()
            score = bleu.corpus_score(hyps, [refs])
            signature = str(bleu.get_signature())
            points = parse_validation(train_log)
            curves[tag] = points
            rows.append({"model": name, "lr": lr, "valid_bleu": round(score.score, 2),
                         "valid_loss": points[-1]["loss"] if points else None,
                         "best_valid_loss": min(p["loss"] for p in points) if points else None,
                         "train_words_per_s": wps, "log": str(train_log)})
            log(f"sweep: {name} lr {lr:g}: valid BLEU {score.score:.2f}, valid loss {rows[-1]['valid_loss']}")
            for f in ckpt.parent.glob("*.pt"):  # not reused: the demo retrains at the chosen rate
                f.unlink()
    best = {}
    for name in args.models:
        mine = [r for r in rows if r["model"] == name]
        best[name] = max(mine, key=lambda r: (r["valid_bleu"], -(r["valid_loss"] or 0)))["lr"]
    write_curves(curves, out / "sweep_curves", title="demo-sweep: validation loss, every model and rate",
                 seed=args.seed)
    settings = {k: v for k, v in vars(args).items()}
    write_json(out / "sweep.json", {"rows": rows, "best_lr": best, "selection": "validation sacreBLEU, beam 4",
                                    "settings": settings}, seed=args.seed, sacrebleu_signature=signature)
    header = ["model", "lr", "valid_bleu", "valid_loss", "best_valid_loss", "train_words_per_s"]
    (out / "sweep.csv").write_text("\n".join([",".join(header)] + [
        ",".join(str(r[h]) for h in header) for r in rows]) + "\n")
    md = ["| model | lr | valid BLEU (beam 4) | valid loss at the end | best valid loss |",
          "| --- | --- | --- | --- | --- |"]
    for r in rows:
        mark = " **(chosen)**" if best[r["model"]] == r["lr"] else ""
        md.append(f"| {r['model']} | {r['lr']:g}{mark} | {r['valid_bleu']:.2f} | {r['valid_loss']:.3f} | "
                  f"{r['best_valid_loss']:.3f} |")
    (out / "sweep.md").write_text("\n".join(md) + "\n")
    print("\n" + "\n".join(md))
    print(f"\nsacreBLEU signature: {signature}")
    print("best learning rate per model (validation BLEU): "
          + ", ".join(f"{n} {lr:g}" for n, lr in best.items()))
    if any(DEMO_LR.get(n) != lr for n, lr in best.items()):
        print(f"note: scripts/demo.py uses DEMO_LR = {DEMO_LR}; pass --lr-softmax / --lr-rela-g "
              "or update DEMO_LR (and docs/demo.md) to use the sweep's choice")
    print(f"curves: {out / 'sweep_curves.png'}\nresults: {out / 'sweep.json'}")


def demo(args, out, data_bin):
    import sacrebleu

    from fairseq_sparse_attn.provenance import write_json
    from fairseq_sparse_attn.tools.learning_curves import parse_validation, write_curves
    from fairseq_sparse_attn.tools.significance import N_RESAMPLES, paired_bootstrap

    refs = (out / "multi30k" / "raw" / f"test.{args.tgt}").read_text().splitlines()
    quiet_fairseq()
    results, panels, curves, hyps_of = {}, [], {}, {}
    for name in args.models:
        lr = args.lr[name]
        log(f"training {name}: {args.layers}+{args.layers} layers, d={args.dim}, lr {lr:g}, "
            f"{args.max_update} updates of <= {args.max_tokens} tokens, validation every {args.validate_interval}")
        ckpt, wps, train_log = train(name, lr, args, data_bin, out, name)
        curves[name] = parse_validation(train_log)
        log(f"translating the test set with {name}")
        hyps, _, sps = generate(name, ckpt, args, data_bin, out)
        hyps_of[name] = hyps
        model, task = load(ckpt, data_bin)
        log(f"attention statistics of {name}")
        stats = attention_statistics(model, task)
        w, src, tgt, layer = cross_attention_of(model, task, args.heatmap_sentence)
        panels.append((name, w, src, tgt, layer))
        results[name] = {
            "lr": lr, "train_words_per_s": wps, "decode_sentences_per_s": sps,
            "final_valid_loss": curves[name][-1]["loss"] if curves[name] else None,
            "attention": {k: {m: round(v, 4) for m, v in stats[k].items()} for k in KINDS},
            "checkpoint": str(ckpt),
        }
    names = list(args.models)
    sig, signature = paired_bootstrap((names[0], hyps_of[names[0]]),
                                      [(n, hyps_of[n]) for n in names[1:]], refs)
    for name in names:
        results[name].update(bleu=sig[name]["bleu"], bleu_ci95=sig[name]["ci95"],
                             p_value_vs_softmax=sig[name]["p_value"])  # vs the first model (softmax by default)
    png = out / "cross_attention_heatmap.png"
    heatmap(panels, png)
    curve_files = write_curves(curves, out / "learning_curves", seed=args.seed,
                               title=f"validation loss, {args.max_update} updates (lr: " +
                                     ", ".join(f"{n} {args.lr[n]:g}" for n in names) + ")")
    elapsed = round(time.time() - start_time, 1)
    report = {"models": results, "signature": signature, "paired_bootstrap_resamples": N_RESAMPLES,
              "test_set": "Multi30k test_2016_flickr", "settings": {k: v for k, v in vars(args).items()},
              "elapsed_s": elapsed}
    write_json(out / "results.json", report, seed=args.seed, sacrebleu_signature=signature)
    print_table(results, names, signature, args, curves)
    print(f"learning curves: {curve_files[2]} (data: {curve_files[0].name}, {curve_files[1].name})")
    print(f"heatmap: {png}\nresults: {out / 'results.json'}\ntotal time: {elapsed:.0f}s")


def print_table(results, names, signature, args, curves=None):
    rows = [("sacreBLEU", lambda r: f"{r['bleu']:.2f}"),
            ("  95% CI (bootstrap)", lambda r: f"{r['bleu_ci95'][0]:.1f}-{r['bleu_ci95'][1]:.1f}"),
            (f"  p-value vs {names[0]}", lambda r: "-" if r["p_value_vs_softmax"] is None else f"{r['p_value_vs_softmax']:.3f}"),
            ("learning rate", lambda r: f"{r['lr']:g}"),
            ("final validation loss", lambda r: "-" if r["final_valid_loss"] is None else f"{r['final_valid_loss']:.3f}"),
            ("train words/s", lambda r: _num(r["train_words_per_s"], ".0f")),
            ("decode sentences/s (beam 4)", lambda r: _num(r["decode_sentences_per_s"], ".1f"))]
    for kind in KINDS:
        rows.append((f"{kind} sparsity rate", lambda r, k=kind: f"{r['attention'][k]['sparsity']:.3f}"))
        rows.append((f"{kind} null rate", lambda r, k=kind: f"{r['attention'][k]['null_rate']:.3f}"))
    width = max(len(r[0]) for r in rows) + 2
    print()
    print("".ljust(width) + "".join(n.rjust(12) for n in names))
    for label, fmt in rows:
        print(label.ljust(width) + "".join(fmt(results[n]).rjust(12) for n in names))
    print(f"\nsacreBLEU signature: {signature}")
    for name in names[1:]:
        print(reading(names[0], name, results[names[0]], results[name], args, curves))


def _num(value, fmt):
    return "-" if value is None else format(value, fmt)


def curve_reading(base, name, curves):
    """What the two validation-loss curves say about the gap, from their points: the gap
    (name minus base) at the last common validation and at an earlier one (the latest at
    least a quarter of the run before; not the end-of-epoch validation a few updates
    earlier), and whether it narrows."""
    common = sorted({p["num_updates"] for p in curves.get(base, [])} & {p["num_updates"] for p in curves.get(name, [])})
    if len(common) < 2:
        return "The learning curves have fewer than two common validations: no trend to read."
    loss = {n: {p["num_updates"]: p["loss"] for p in curves[n]} for n in (base, name)}
    u1 = common[-1]  # against the latest validation at least a quarter of the run earlier
    u0 = max(u for u in common[:-1] if u1 - u >= (u1 - common[0]) / 4)
    g0, g1 = (loss[name][u] - loss[base][u] for u in (u0, u1))
    trend = ("narrowing: more updates may close it" if abs(g1) < abs(g0) else
             "not narrowing: at this budget more updates do not yet close it")
    return (f"The learning curves: {name}'s validation loss is {g1:+.3f} from {base}'s at update {u1} "
            f"({g0:+.3f} at update {u0}), so the gap is {trend}; where the curves meet with longer "
            f"training: docs/rela.md, 'Small budgets'.")


def reading(base, name, b, r, args, curves=None):
    """What the numbers do and do not show, in words."""
    diff = r["bleu"] - b["bleu"]
    p = r["p_value_vs_softmax"]
    epochs = f", {args.max_update / args.updates_per_epoch:.1f} epochs" if args.updates_per_epoch else ""
    budget = f"{args.max_update} updates of <= {args.max_tokens} tokens{epochs}"
    if p is not None and p < ALPHA and round(diff, 2) != 0:
        verdict = (f"{name} is {abs(diff):.2f} BLEU {'below' if diff < 0 else 'above'} {base} and the paired "
                   f"bootstrap says this is not test-set noise (p = {p:.3f} < {ALPHA}): at this budget the "
                   f"two are NOT tied.")
    else:
        verdict = (f"{name} differs from {base} by {diff:+.2f} BLEU, within the noise of this test set "
                   f"(p = {p:.3f}): at this budget they tie on this test set.")
    speed = (f"{r['train_words_per_s'] / b['train_words_per_s']:.2f}x"
             if r["train_words_per_s"] and b["train_words_per_s"] else "not measured")
    if r["lr"] == b["lr"]:
        rates = f"the same learning rate ({r['lr']:g}; how it was chosen and what is not measured: docs/demo.md)"
    else:
        rates = ("each its own learning rate, chosen the same way (best validation BLEU of `make demo-sweep`, "
                 "docs/demo.md)")
    return (f"\nWhat this shows: {verdict}\n"
            f"Both models had the same budget ({budget}, one seed) and {rates}.  The CI and p-value "
            f"describe only the uncertainty from the choice of test sentences (1000 paired resamples of "
            f"test_2016_flickr); they say nothing about other seeds, longer training, larger data or larger "
            f"models - the ReLA paper's parity is for converged base models.  {curve_reading(base, name, curves or {})}"
            f"  Train speed {name}/{base}: {speed} in this run "
            f"(one run; benchmarks/bench_attention.py measures speed with spread).")


start_time = time.time()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("DEMO_DIR", str(REPO / "demo_out")))
    p.add_argument("--raw-dir", default=os.environ.get("MULTI30K_DIR"),
                   help="local Multi30k raw files (default $MULTI30K_DIR; else downloaded)")
    p.add_argument("--src", default="de")
    p.add_argument("--tgt", default="en")
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated, first is the baseline "
                   f"(default {','.join(DEFAULT_MODELS)}; also: rela_i)")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--attention-dropout", type=float, default=0.0)
    p.add_argument("--max-update", type=int, default=int(os.environ.get("DEMO_MAX_UPDATE", 250)))
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--validate-interval", type=int, default=50, help="validate every N updates (curves)")
    p.add_argument("--lr-softmax", type=float, default=DEMO_LR["softmax"])
    p.add_argument("--lr-rela-g", type=float, default=DEMO_LR["rela_g"])
    p.add_argument("--lr-rela-i", type=float, default=DEMO_LR["rela_i"])
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sweep", nargs="?", const=SWEEP_LRS, default=None, metavar="LRS",
                   help=f"learning-rate sweep on the validation set instead of the demo (default rates {SWEEP_LRS})")
    p.add_argument("--tensorboard-logdir", help="also log training to tensorboard here (one folder per run)")
    p.add_argument("--max-train-lines", type=int, default=None)
    p.add_argument("--max-eval-lines", type=int, default=None)
    p.add_argument("--heatmap-sentence", type=int, default=7, help="test sentence index for the PNG")
    args = p.parse_args()
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in args.models if m not in MODELS]
    if unknown or not args.models:
        p.error(f"--models: unknown {unknown}; choose from {', '.join(MODELS)}")
    args.lr = {"softmax": args.lr_softmax, "rela_g": args.lr_rela_g, "rela_i": args.lr_rela_i}
    if args.validate_interval <= 0 or args.validate_interval > args.max_update:
        p.error(f"--validate-interval must be in 1..--max-update ({args.max_update}), got {args.validate_interval}")

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    data_bin = prepare(args, out)
    if args.sweep:
        sweep(args, out, data_bin)
    else:
        demo(args, out, data_bin)


if __name__ == "__main__":
    main()
