#!/usr/bin/env python
"""make demo: softmax vs ReLA-g on Multi30k German->English, on CPU, same budget.

1. prepares Multi30k (data_prep/prepare_multi30k.py: $MULTI30K_DIR or download,
   sacremoses, joint BPE, fairseq-preprocess);
2. trains a small softmax transformer and a small ReLA-g transformer (same size, same
   number of updates, same seed) with fairseq-train --user-dir fairseq_sparse_attn;
3. translates the 2016 Flickr test set with fairseq-generate (beam 4), detokenizes and
   scores with sacreBLEU against the raw references;
4. prints a side-by-side table (BLEU + signature, train words/s, decode sentences/s,
   sparsity and null rate per attention kind) and writes results.json;
5. writes a PNG heatmap of one test sentence's cross-attention for both models.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODELS = {
    "softmax": ["--arch", "softmax_transformer_wmt_en_de"],
    "rela_g": ["--arch", "rela_transformer_wmt_en_de"],
}
KINDS = ("encoder_self", "decoder_self", "cross")


def log(msg):
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd, logfile):
    log(" ".join(str(c) for c in cmd[:4]) + " ... (log: %s)" % logfile)
    with open(logfile, "w") as f:
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
        "--share-all-embeddings", "--dropout", "0.1",
    ]


def train(name, args, data_bin, out):
    save_dir = out / f"checkpoints_{name}"
    cmd = [
        sys.executable, "-m", "fairseq_cli.train", data_bin, "--user-dir", REPO / "fairseq_sparse_attn",
        *MODELS[name], *model_flags(args),
        "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", str(args.lr),
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(args.warmup),
        "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--max-tokens", str(args.max_tokens), "--max-update", str(args.max_update),
        "--save-dir", save_dir, "--no-epoch-checkpoints", "--num-workers", "0",
        "--seed", str(args.seed), "--log-format", "simple", "--log-interval", "25",
        "--disable-validation",
    ]
    text = run(cmd, out / f"train_{name}.log")
    # fairseq's end-of-epoch summaries: "train | epoch 001 | ... | wps 1725.4 | ... | train_wall 118"
    wps = [float(m) for m in re.findall(r"\| train \| epoch .*?\| wps ([\d.]+)", text)]
    return save_dir / "checkpoint_last.pt", (sum(wps) / len(wps) if wps else float("nan"))


def generate(name, checkpoint, args, data_bin, out):
    cmd = [
        sys.executable, "-m", "fairseq_cli.generate", data_bin, "--user-dir", REPO / "fairseq_sparse_attn",
        "--path", checkpoint, "--gen-subset", "test", "--beam", "4", "--batch-size", "64",
        "--max-len-a", "1.2", "--max-len-b", "10",
        "--remove-bpe", "--tokenizer", "moses", "--source-lang", args.src, "--target-lang", args.tgt,
    ]
    text = run(cmd, out / f"generate_{name}.log")
    hyps = {}
    for line in text.splitlines():
        if line.startswith("D-"):
            idx, _, hyp = line[2:].split("\t", 2)
            hyps[int(idx)] = hyp
    m = re.search(r"\(([\d.]+) sentences/s", text)
    (out / f"test_{name}.hyp").write_text("\n".join(hyps[i] for i in sorted(hyps)) + "\n")
    return [hyps[i] for i in sorted(hyps)], float(m.group(1)) if m else float("nan")


def quiet_fairseq():
    """The in-process steps (loading, statistics) should not flood the table with INFO."""
    import logging
    import warnings

    logging.getLogger("fairseq").setLevel(logging.WARNING)
    logging.getLogger().setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")


def load(checkpoint, data_bin):
    import fairseq_sparse_attn  # noqa: F401
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


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("DEMO_DIR", str(REPO / "demo_out")))
    p.add_argument("--raw-dir", default=os.environ.get("MULTI30K_DIR"),
                   help="local Multi30k raw files (default $MULTI30K_DIR; else downloaded)")
    p.add_argument("--src", default="de")
    p.add_argument("--tgt", default="en")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--max-update", type=int, default=int(os.environ.get("DEMO_MAX_UPDATE", 280)))
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=150)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-train-lines", type=int, default=None)
    p.add_argument("--heatmap-sentence", type=int, default=7, help="test sentence index for the PNG")
    args = p.parse_args()

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    prep = [sys.executable, REPO / "data_prep" / "prepare_multi30k.py", "--out", out / "multi30k",
            "--src", args.src, "--tgt", args.tgt]
    if args.raw_dir:
        prep += ["--raw-dir", args.raw_dir]
    if args.max_train_lines:
        prep += ["--max-train-lines", str(args.max_train_lines)]
    log("preparing Multi30k " + ("from " + args.raw_dir if args.raw_dir else "(download)"))
    if subprocess.run([str(c) for c in prep]).returncode != 0:
        sys.exit("data preparation failed (see messages above)")
    data_bin = out / "multi30k" / "data-bin"
    refs = (out / "multi30k" / "raw" / f"test.{args.tgt}").read_text().splitlines()

    import sacrebleu

    quiet_fairseq()
    results, panels = {}, []
    for name in MODELS:
        log(f"training {name}: {args.layers}+{args.layers} layers, d={args.dim}, "
            f"{args.max_update} updates of <= {args.max_tokens} tokens")
        ckpt, wps = train(name, args, data_bin, out)
        log(f"translating the test set with {name}")
        hyps, sps = generate(name, ckpt, args, data_bin, out)
        bleu = sacrebleu.metrics.BLEU()
        score = bleu.corpus_score(hyps, [refs])
        model, task = load(ckpt, data_bin)
        log(f"attention statistics of {name}")
        stats = attention_statistics(model, task)
        w, src, tgt, layer = cross_attention_of(model, task, args.heatmap_sentence)
        panels.append((name, w, src, tgt, layer))
        results[name] = {
            "bleu": round(score.score, 2), "signature": str(bleu.get_signature()),
            "train_words_per_s": round(wps, 1), "decode_sentences_per_s": sps,
            "attention": {k: {m: round(v, 4) for m, v in stats[k].items()} for k in KINDS},
            "checkpoint": str(ckpt),
        }
    png = out / "cross_attention_heatmap.png"
    heatmap(panels, png)
    results["_settings"] = {k: v for k, v in vars(args).items()}
    results["_elapsed_s"] = round(time.time() - start, 1)
    (out / "results.json").write_text(json.dumps(results, indent=2))

    rows = [("sacreBLEU", lambda r: f"{r['bleu']:.2f}"),
            ("train words/s", lambda r: f"{r['train_words_per_s']:.0f}"),
            ("decode sentences/s (beam 4)", lambda r: f"{r['decode_sentences_per_s']:.1f}")]
    for kind in KINDS:
        rows.append((f"{kind} sparsity rate", lambda r, k=kind: f"{r['attention'][k]['sparsity']:.3f}"))
        rows.append((f"{kind} null rate", lambda r, k=kind: f"{r['attention'][k]['null_rate']:.3f}"))
    width = max(len(r[0]) for r in rows) + 2
    print()
    print("".ljust(width) + "".join(n.rjust(12) for n in MODELS))
    for label, fmt in rows:
        print(label.ljust(width) + "".join(fmt(results[n]).rjust(12) for n in MODELS))
    print(f"\nsacreBLEU signature: {results['softmax']['signature']}")
    print(f"relative to softmax: ReLA-g train speed {results['rela_g']['train_words_per_s'] / results['softmax']['train_words_per_s']:.2f}x, "
          f"decode speed {results['rela_g']['decode_sentences_per_s'] / results['softmax']['decode_sentences_per_s']:.2f}x")
    print(f"heatmap: {png}\nresults: {out / 'results.json'}\ntotal time: {results['_elapsed_s']:.0f}s")


if __name__ == "__main__":
    main()
