#!/usr/bin/env python
"""make demo: softmax vs ReLA-g on Multi30k German->English, same budget, with the recipe
that fits the machine (``--recipe auto``: ``cuda`` when torch sees a GPU, else ``cpu``).

Recipes (RECIPES below; every setting can be changed with its flag; docs/demo.md):

- ``cpu``: the small recipe: 3+3 layers, d=256, 4 heads, FFN 1024, 250 updates of <= 2048
  tokens (one epoch), lr 1e-3 for both (``make demo-sweep``), warmup 100, dropout 0.1, one
  seed (1), beam 4.  About 15 minutes on 2 CPU cores; a one-epoch regime: it measures how
  fast each model starts, not the converged models the papers compare.
- ``cuda``: the real-budget recipe of issue 23: fairseq's ``transformer_iwslt_de_en`` size
  (6+6 layers, d=512, 4 heads, FFN 1024; ``softmax_transformer_iwslt_de_en`` against
  ``rela_transformer_iwslt_de_en``), 1,500 updates of <= 4096 tokens, lr 7e-4, inverse_sqrt
  with 800 warmup updates, dropout 0.3, seeds 1 and 2, beam 4, lenpen 0.6.  Its four runs
  (two models, two seeds) train side by side on the GPU (``--jobs``, which does not change
  a result): a step of this size waits on the host, so four processes share one GPU well.

Steps:

1. prepares Multi30k (data_prep/prepare_multi30k.py) from the shipped copy found as the
   Makefile finds it (``shipped_multi30k``: $MULTI30K_DIR, else ../shared/data/multi30k
   beside the repository), else ``--raw-dir``, else downloads it;
2. for every seed trains the models (same size, budget, seed and schedule; only --arch
   differs, and each model's learning rate when given apart), validating every
   --validate-interval updates;
3. translates the test set with fairseq-generate, detokenizes and scores with sacreBLEU
   against the raw references: BLEU and its 95% confidence interval for every run, and
   the paired-bootstrap p-value of every seed pair (same seed, baseline vs model;
   sacreBLEU's --paired-bs, 1000 resamples);
4. prints one table per seed (BLEU, CI, p-value, valid loss, speed, repetition rate, length
   ratio, sparsity and null rate per attention kind), the mean over seeds and what the
   numbers do and do not show; writes results.json (per-seed results and provenance:
   device, versions, date, commit), learning_curves.{png,csv,json} and a cross-attention
   heatmap PNG of one test sentence (first seed).

While training and decoding it prints a status line (count, rate, time left) at least
every --status-interval seconds; on a terminal it shows fairseq's own tqdm progress bar
instead (``--progress``).

``--sweep 5e-4,1e-3,2e-3`` (``make demo-sweep``) instead trains every model at every rate
with the demo's budget, translates the *validation* set (beam 4) and picks each model's
rate by validation BLEU: sweep.{json,csv,md} and sweep_curves.{png,csv,json}.  The test
set is not touched by the sweep.
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# model name -> the attention preset; the size comes from the recipe (model_flags)
PRESETS = {
    "softmax": ("softmax", []),
    "rela_g": ("rela", []),
    # not in the default demo; for comparisons (--models softmax,rela_i, --sweep)
    "rela_i": ("rela", ["--attn-output-norm", "rmsnorm_i"]),
}
MODELS = tuple(PRESETS)
DEFAULT_MODELS = ("softmax", "rela_g")
# Each model's learning rate in the cpu recipe: its best validation BLEU in `make demo-sweep`
# at that budget (250 updates, warmup 100; rates 5e-4, 1e-3, 2e-3; 2026-11-23): 1e-3 for
# softmax (15.10) and for ReLA-g (6.70); the table is in docs/demo.md.  ReLA-i was not swept.
DEMO_LR = {"softmax": 1e-3, "rela_g": 1e-3, "rela_i": 1e-3}
SWEEP_LRS = "5e-4,1e-3,2e-3"
KINDS = ("encoder_self", "decoder_self", "cross")
ALPHA = 0.05
STATUS_INTERVAL = 20.0  # seconds between status lines (fairseq_sparse_attn/tools/progress.py)
# The Multi30k test sets the demo scores (pooled into one corpus when there are several):
# data_prep/prepare_multi30k.py prepares test_2016_flickr, the one the shipped folder has.
TEST_SETS = ("test_2016_flickr",)

# Every setting a recipe fixes (argparse dest -> value); a flag given on the command line wins.
RECIPES = {
    "cpu": dict(
        size="wmt_en_de",
        layers=3,
        dim=256,
        ffn_dim=1024,
        heads=4,
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=None,
        max_update=250,
        max_tokens=2048,
        update_freq=None,
        warmup=100,
        lr_softmax=DEMO_LR["softmax"],
        lr_rela_g=DEMO_LR["rela_g"],
        lr_rela_i=DEMO_LR["rela_i"],
        validate_interval=50,
        log_interval=1,  # a count from the first update (the status line reads fairseq's log lines)
        seeds="1",
        lenpen=None,
    ),
    "cuda": dict(
        size="iwslt_de_en",
        layers=6,
        dim=512,
        ffn_dim=1024,
        heads=4,
        dropout=0.3,
        attention_dropout=0.0,
        activation_dropout=None,
        max_update=1500,
        max_tokens=4096,
        update_freq=None,
        warmup=800,
        lr_softmax=7e-4,
        lr_rela_g=7e-4,
        lr_rela_i=7e-4,
        validate_interval=250,
        log_interval=10,  # every update would sync the GPU once more per update
        seeds="1,2",
        lenpen=0.6,
    ),
}
REGIME = {
    "cpu": "small CPU budget (one epoch of a 3+3-layer d256 model): how fast each model starts, "
    "not the converged models the papers compare",
    "cuda": "real budget on a GPU (6+6-layer d512 IWSLT-size model, 1,500 updates of 4k tokens, 2 seeds)",
}


def changed_settings(args):
    """The recipe settings this run changed: {dest: (recipe's, this run's)}."""
    return {
        k: (v, getattr(args, k)) for k, v in RECIPES[args.recipe].items() if k != "seeds" and getattr(args, k) != v
    } | (
        {"seeds": (RECIPES[args.recipe]["seeds"], ",".join(map(str, args.seeds)))}
        if parse_seeds(RECIPES[args.recipe]["seeds"]) != args.seeds
        else {}
    )


def regime_of(args):
    changed = changed_settings(args)
    text = f"recipe {args.recipe}: {REGIME[args.recipe]}"
    if changed:
        text += "; changed here: " + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items())
    return text


def log(msg):
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def shipped_multi30k(repo=REPO, environ=None):
    """The raw Multi30k folder the Makefile uses, found the same way: $MULTI30K_DIR when set
    and non-empty (relative: to the working directory), else ../shared/data/multi30k beside the repository root when it exists
    (the Makefile's ``$(wildcard ../shared/data/multi30k)``, run from the root), else None
    (data_prep then looks in <out>/raw and downloads)."""
    environ = os.environ if environ is None else environ
    if environ.get("MULTI30K_DIR"):  # a relative one is relative to where make ran: the repository root
        return Path(environ["MULTI30K_DIR"]).resolve()
    shared = Path(repo) / ".." / "shared" / "data" / "multi30k"
    return shared.resolve() if shared.is_dir() else None


def choose_recipe(name, cuda_available=None):
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``; other names as given."""
    if name != "auto":
        return name
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    return "cuda" if cuda_available else "cpu"


def use_tty_progress(mode, stream=None):
    """fairseq's own tqdm bar (``--log-format tqdm``) when ``--progress bar``, or ``auto``
    and stderr is a terminal; else status lines."""
    stream = sys.stderr if stream is None else stream
    return mode == "bar" or (mode == "auto" and stream.isatty())


def clean_terminal_text(raw):
    """What a terminal shows at the end of ``raw`` output: per line the text after the last
    carriage return (tqdm redraws), without ANSI escape sequences and empty lines."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)
    lines = [line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.split("\n")]
    return "\n".join(line for line in lines if line.strip()) + "\n"


def run_with_terminal_stderr(cmd, stdout, err_path, env):
    """Run ``cmd`` with stdout in the open file ``stdout`` and stderr on a pseudo-terminal
    whose output is copied to our stderr (fairseq's tqdm bar shows: it needs a terminal) and,
    cleaned of the bar's redraws, to ``err_path``.  Returns the exit status."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, stdout=stdout, stderr=slave, env=env)
    os.close(slave)
    raw = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        raw += chunk
        sys.stderr.buffer.write(chunk)
        sys.stderr.flush()
    os.close(master)
    Path(err_path).write_text(clean_terminal_text(raw.decode("utf-8", errors="replace")))
    return proc.wait()


def run(cmd, logfile, mode="w", args=None, progress=None):
    """Run ``cmd`` with its output in ``logfile`` (``mode="a"``: appended, for a resumed run);
    returns the output's text.  ``progress``
    (kind, label, total, what): a status line every ``args.status_interval`` s, or fairseq's
    tqdm bar on a terminal (stderr then goes to ``logfile``.err, cleaned of the redraws)."""
    from fairseq_sparse_attn.tools.progress import Watcher

    cmd = [str(c) for c in cmd]
    log(" ".join(cmd[:4]) + " ... (log: %s)" % logfile)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    err_path = Path(str(logfile) + ".err")
    # fairseq's own bar only for one run at a time (several would redraw over each other)
    one_at_a_time = args is None or getattr(args, "jobs", 1) == 1
    tty = progress is not None and one_at_a_time and use_tty_progress(setting(args, "progress"))
    with open(logfile, mode) as f:
        if tty:
            returncode = run_with_terminal_stderr(cmd + ["--log-format", "tqdm"], f, err_path, env)
        elif progress is not None:
            kind, label, total, what = progress
            with Watcher(logfile, kind, label, total, setting(args, "status_interval"), what, stream=sys.stdout):
                returncode = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
        else:
            returncode = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    text = Path(logfile).read_text(errors="replace")
    if tty and err_path.exists():
        text += err_path.read_text()
    if returncode != 0:
        tail = text.splitlines()[-25:]
        sys.exit(f"command failed ({returncode}): {' '.join(cmd)}\n" + "\n".join(tail))
    return text


def setting(args, name):
    """``args.name``, else the cpu recipe's (callers such as scripts/rela/budget_study.py
    pass their own argparse namespace with the demo's older settings only)."""
    value = getattr(args, name, None)
    if value is not None:
        return value
    if name == "ffn_dim":
        return 4 * args.dim
    return {"beam": 4, "progress": "auto", "status_interval": STATUS_INTERVAL}.get(name, RECIPES["cpu"].get(name))


def arch_of(name, args):
    preset, extra = PRESETS[name]
    return ["--arch", f"{preset}_transformer_{setting(args, 'size')}", *extra]


def model_flags(args):
    flags = [
        "--encoder-layers",
        str(args.layers),
        "--decoder-layers",
        str(args.layers),
        "--encoder-embed-dim",
        str(args.dim),
        "--decoder-embed-dim",
        str(args.dim),
        "--encoder-ffn-embed-dim",
        str(setting(args, "ffn_dim")),
        "--decoder-ffn-embed-dim",
        str(setting(args, "ffn_dim")),
        "--encoder-attention-heads",
        str(args.heads),
        "--decoder-attention-heads",
        str(args.heads),
        "--share-all-embeddings",
        "--dropout",
        str(args.dropout),
        "--attention-dropout",
        str(args.attention_dropout),
    ]
    if getattr(args, "activation_dropout", None) is not None:
        flags += ["--activation-dropout", str(args.activation_dropout)]
    if getattr(args, "attn_init", None) is not None:
        flags += ["--attn-init", args.attn_init]
    return flags


def train_command(name, lr, args, data_bin, save_dir, seed=None):
    """The fairseq-train command of one demo (or sweep) run: the only thing that differs
    between the two models is --arch (and the learning rate, when given per model).
    ``seed``: default ``args.seed``."""
    seed = args.seed if seed is None else seed
    cmd = [
        sys.executable,
        "-m",
        "fairseq_cli.train",
        data_bin,
        "--user-dir",
        REPO / "fairseq_sparse_attn",
        *arch_of(name, args),
        *model_flags(args),
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9,0.98)",
        "--lr",
        str(lr),
        "--lr-scheduler",
        "inverse_sqrt",
        "--warmup-updates",
        str(args.warmup),
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        "0.1",
        "--max-tokens",
        str(args.max_tokens),
        "--max-update",
        str(args.max_update),
        "--save-dir",
        save_dir,
        "--no-epoch-checkpoints",
        "--num-workers",
        "0",
        "--seed",
        str(seed),
        "--log-format",
        "simple",
        "--log-interval",
        str(setting(args, "log_interval")),
        "--validate-interval-updates",
        str(args.validate_interval),
    ]
    if getattr(args, "update_freq", None) and args.update_freq != 1:
        cmd += ["--update-freq", str(args.update_freq)]
    if getattr(args, "fp16", False):
        cmd += ["--fp16"]
    if args.tensorboard_logdir:
        cmd += ["--tensorboard-logdir", Path(args.tensorboard_logdir) / save_dir.name.replace("checkpoints_", "", 1)]
    return cmd


def mean_wps(text):
    """Training words/s: the mean over fairseq's ``train_inner`` lines (simple format), else
    over its ``train`` summary lines (tqdm format logs only those)."""
    wps = [float(m) for m in re.findall(r"\| train_inner \| .*?wps=([\d.]+)", text)]
    if not wps:
        wps = [float(m) for m in re.findall(r"\| train \| .*?\| wps ([\d.]+)", text)]
    return round(sum(wps) / len(wps), 1) if wps else None


def train(name, lr, args, data_bin, out, tag, seed):
    save_dir = out / f"checkpoints_{tag}"
    if save_dir.exists():  # a fresh run: fairseq-train would resume from an earlier checkpoint_last.pt
        shutil.rmtree(save_dir)
    text = run(
        train_command(name, lr, args, data_bin, save_dir, seed),
        out / f"train_{tag}.log",
        args=args,
        progress=("train", tag, args.max_update, ""),
    )
    # fairseq's progress lines: "train_inner | epoch 001:  25 / 247 loss=..., wps=1725.4, ..."
    per_epoch = re.search(r"epoch 001: +\d+ / (\d+) ", text)
    if per_epoch:
        args.updates_per_epoch = int(per_epoch.group(1)) // max(getattr(args, "update_freq", None) or 1, 1)
    ckpt = save_dir / "checkpoint_last.pt"
    if not ckpt.exists():
        sys.exit(f"{name}: training ended without {ckpt}")
    if share_identical_checkpoints(save_dir) == "slimmed":
        log(
            f"{save_dir.name}/checkpoint_best.pt is an earlier update than checkpoint_last.pt (which the demo "
            "evaluates): kept without its optimizer state"
        )
    return ckpt, mean_wps(text), out / f"train_{tag}.log"


def share_identical_checkpoints(save_dir):
    """One copy of the model where two would do.  When the last validation was the best,
    checkpoint_best.pt is byte-identical to checkpoint_last.pt: both names become hard links
    to one file (~100 MB each).  When an earlier validation was better (at this budget often
    the end-of-epoch validation a few updates before the last: ReLA-g's loss at update 250
    was above its loss at update 247), checkpoint_best.pt is another model; the demo
    evaluates checkpoint_last.pt (both models at the same budget), so checkpoint_best.pt
    keeps only what translating needs: its optimizer state (two thirds of the file, for
    Adam) is dropped.  Returns "linked", "slimmed" or None."""
    import filecmp

    import torch

    best, last = save_dir / "checkpoint_best.pt", save_dir / "checkpoint_last.pt"
    if not (best.exists() and last.exists()) or os.path.samefile(best, last):
        return None
    if filecmp.cmp(best, last, shallow=False):
        tmp = save_dir / "checkpoint_best.pt.link"
        os.link(last, tmp)
        os.replace(tmp, best)
        return "linked"
    state = torch.load(best, map_location="cpu", weights_only=False)
    if not isinstance(state, dict) or not state.get("last_optimizer_state"):
        return None
    state["last_optimizer_state"] = None
    tmp = save_dir / "checkpoint_best.pt.slim"
    torch.save(state, tmp)
    os.replace(tmp, best)
    return "slimmed"


def generate_command(checkpoint, args, data_bin, subset):
    cmd = [
        sys.executable,
        "-m",
        "fairseq_cli.generate",
        data_bin,
        "--user-dir",
        REPO / "fairseq_sparse_attn",
        "--path",
        checkpoint,
        "--gen-subset",
        subset,
        "--beam",
        str(setting(args, "beam")),
        "--batch-size",
        "64",
        "--max-len-a",
        "1.2",
        "--max-len-b",
        "10",
        "--remove-bpe",
        "--tokenizer",
        "moses",
        "--source-lang",
        args.src,
        "--target-lang",
        args.tgt,
    ]
    if getattr(args, "lenpen", None) is not None:
        cmd += ["--lenpen", str(args.lenpen)]
    if getattr(args, "no_repeat_ngram_size", None):
        cmd += ["--no-repeat-ngram-size", str(args.no_repeat_ngram_size)]
    return cmd


def generate(name, checkpoint, args, data_bin, out, subset="test", total=None):
    """(detokenized hypotheses, detokenized references fairseq printed, sentences/s)."""
    text = run(
        generate_command(checkpoint, args, data_bin, subset),
        out / f"generate_{subset}_{name}.log",
        args=args,
        progress=("generate", name, total, subset),
    )
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


def bleu_tokens(sentence):
    """The tokens BLEU counts: sacreBLEU's default (13a) tokenization, case kept."""
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    return Tokenizer13a()(sentence.strip()).split()


def repeats(tokens):
    """Does the output repeat a word or a bigram at once: w[i] == w[i+1] for some i, or
    (w[i], w[i+1]) == (w[i+2], w[i+3]) for some i."""
    if any(a == b for a, b in zip(tokens, tokens[1:])):
        return True
    return any(tokens[i : i + 2] == tokens[i + 2 : i + 4] for i in range(len(tokens) - 3))


def repetition_rate(sentences):
    """The share of outputs that repeat a word or a bigram consecutively (``repeats`` on the
    13a tokens BLEU counts)."""
    return sum(repeats(bleu_tokens(s)) for s in sentences) / len(sentences) if sentences else None


def length_ratio(hyps, refs):
    """Output length / reference length in 13a tokens, summed over the test set (BLEU's
    brevity-penalty ratio)."""
    ref_len = sum(len(bleu_tokens(r)) for r in refs)
    return sum(len(bleu_tokens(h)) for h in hyps) / ref_len if ref_len else None


def quiet_fairseq():
    """The in-process steps (loading, statistics) should not flood the table with INFO."""
    import logging
    import warnings

    # importing fairseq's models runs logging.basicConfig(level=DEBUG) (wav2vec2_classification):
    # import them first, then one WARNING handler for the whole process (matplotlib included)
    import fairseq.models  # noqa: F401

    logging.basicConfig(level=logging.WARNING, force=True)
    logging.getLogger("fairseq").setLevel(logging.WARNING)
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")


def load(checkpoint, data_bin):
    from fairseq import checkpoint_utils

    import fairseq_sparse_attn.plugin  # noqa: F401

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(data_bin)}
    )
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
    """Cross-attention of one test sentence, one row per model and one column per head of
    its last decoder layer; one colour scale per row (per model, with its colour bar): a
    softmax row is a distribution (at most 1) while ReLA's weights are not bounded by 1, so
    one scale for all would leave softmax's panels almost black.  Source tokens on the x
    axis, the target tokens each row predicts on the y axis; layers and heads numbered from
    0, as ``fsa-analyze --layer`` (docs/analysis.md).  Returns the matplotlib figure after
    saving it."""
    import logging

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    path = Path(path)
    heads = max(w.size(0) for _, w, _, _, _ in panels)
    fig = Figure(figsize=(3.4 * heads + 1.6, 3.6 * len(panels) + 0.8), constrained_layout=True)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), heads, squeeze=False)
    for row, (name, w, src, tgt, layer) in enumerate(panels):
        vmax = float(w.max()) or 1.0
        image = None
        for h in range(heads):
            ax = axes[row][h]
            if h >= w.size(0):
                ax.set_visible(False)
                continue
            image = ax.imshow(
                w[h].float().numpy(), cmap="viridis", aspect="auto", vmin=0.0, vmax=vmax, interpolation="nearest"
            )
            ax.set_title(f"{name}: cross-attention layer {layer}, head {h}", fontsize=8)
            ax.set_xticks(range(len(src)))
            ax.set_xticklabels(src, rotation=90, fontsize=6)
            ax.set_yticks(range(len(tgt)))
            ax.set_yticklabels(tgt, fontsize=6)
            ax.set_xlabel("source token", fontsize=7)
            ax.set_ylabel("target token predicted", fontsize=7)
        bar = fig.colorbar(image, ax=axes[row].tolist(), shrink=0.8)
        bar.set_label(f"{name}: attention weight α (0 to {vmax:.2g}, this row's scale)", fontsize=8)
    fig.suptitle(
        f"{' vs '.join(name for name, *_ in panels)}: cross-attention of one test sentence, "
        f"last decoder layer (layers and heads from 0); one colour scale per model (row), "
        f"from 0 to that model's largest weight; run {path.parent.resolve().name}",
        fontsize=10,
    )
    fig.savefig(str(path), dpi=110)
    return fig


def prepare(args, out):
    prep = [
        sys.executable,
        REPO / "data_prep" / "prepare_multi30k.py",
        "--out",
        out / "multi30k",
        "--src",
        args.src,
        "--tgt",
        args.tgt,
    ]
    if args.raw_dir:
        prep += ["--raw-dir", args.raw_dir]
    if args.max_train_lines:
        prep += ["--max-train-lines", str(args.max_train_lines)]
    if args.max_eval_lines:
        prep += ["--max-eval-lines", str(args.max_eval_lines)]
    log(
        "preparing Multi30k "
        + (
            "from " + str(args.raw_dir)
            if args.raw_dir
            else "(no $MULTI30K_DIR, no ../shared/data/multi30k, no --raw-dir: download)"
        )
    )
    if args.raw_dir:
        unused = sorted({p.name.split(".")[0] for p in Path(args.raw_dir).glob("test_*")} - set(TEST_SETS))
        if unused:
            log(
                f"note: {args.raw_dir} also has {', '.join(unused)}; the demo scores {', '.join(TEST_SETS)} "
                "(the test sets data_prep/prepare_multi30k.py prepares)"
            )
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
    seed = args.seeds[0]
    rows, curves, signature = [], {}, None
    for name in args.models:
        for lr in lrs:
            tag = f"{name}_lr{lr:g}"
            log(f"sweep: training {name} at lr {lr:g} ({args.max_update} updates)")
            ckpt, wps, train_log = train(name, lr, args, data_bin, out, tag, seed)
            hyps, refs, _ = generate(tag, ckpt, args, data_bin, out, subset="valid")
            bleu = sacrebleu.metrics.BLEU()
            score = bleu.corpus_score(hyps, [refs])
            signature = str(bleu.get_signature())
            points = parse_validation(train_log)
            curves[tag] = points
            rows.append(
                {
                    "model": name,
                    "lr": lr,
                    "valid_bleu": round(score.score, 2),
                    "valid_loss": points[-1]["loss"] if points else None,
                    "best_valid_loss": min(p["loss"] for p in points) if points else None,
                    "train_words_per_s": wps,
                    "log": str(train_log),
                }
            )
            log(f"sweep: {name} lr {lr:g}: valid BLEU {score.score:.2f}, valid loss {rows[-1]['valid_loss']}")
            for f in ckpt.parent.glob("*.pt"):  # not reused: the demo retrains at the chosen rate
                f.unlink()
    best = {}
    for name in args.models:
        mine = [r for r in rows if r["model"] == name]
        best[name] = max(mine, key=lambda r: (r["valid_bleu"], -(r["valid_loss"] or 0)))["lr"]
    write_curves(curves, out / "sweep_curves", title="demo-sweep: validation loss, every model and rate", seed=seed)
    settings = {k: v for k, v in vars(args).items()}
    write_json(
        out / "sweep.json",
        {
            "rows": rows,
            "best_lr": best,
            "selection": "validation sacreBLEU, beam 4",
            "recipe": args.recipe,
            "settings": settings,
        },
        seed=seed,
        sacrebleu_signature=signature,
    )
    header = ["model", "lr", "valid_bleu", "valid_loss", "best_valid_loss", "train_words_per_s"]
    (out / "sweep.csv").write_text(
        "\n".join([",".join(header)] + [",".join(str(r[h]) for h in header) for r in rows]) + "\n"
    )
    md = [
        "| model | lr | valid BLEU (beam 4) | valid loss at the end | best valid loss |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        mark = " **(chosen)**" if best[r["model"]] == r["lr"] else ""
        md.append(
            f"| {r['model']} | {r['lr']:g}{mark} | {r['valid_bleu']:.2f} | {r['valid_loss']:.3f} | "
            f"{r['best_valid_loss']:.3f} |"
        )
    (out / "sweep.md").write_text("\n".join(md) + "\n")
    print("\n" + "\n".join(md))
    print(f"\nsacreBLEU signature: {signature}")
    print("best learning rate per model (validation BLEU): " + ", ".join(f"{n} {lr:g}" for n, lr in best.items()))
    if any(args.lr.get(n) != lr for n, lr in best.items()):
        print(
            f"note: the {args.recipe} recipe uses learning rates {args.lr}; pass --lr-softmax / --lr-rela-g "
            "or update RECIPES in scripts/demo.py (and docs/demo.md) to use the sweep's choice"
        )
    print(f"curves: {out / 'sweep_curves.png'}\nresults: {out / 'sweep.json'}")


def run_tag(name, seed, n_seeds):
    """File names of one run: NAME with one seed (the cpu recipe's names), NAME_seedS with several."""
    return name if n_seeds == 1 else f"{name}_seed{seed}"


def mean(values):
    values = [v for v in values if v is not None]
    return round(statistics.fmean(values), 4) if values else None


def pooled(per_seed, names):
    """The mean over seeds of every model's figures (and the per-seed BLEU, its sample std)."""
    out = {}
    for name in names:
        runs = [per_seed[s][name] for s in per_seed]
        bleus = [r["bleu"] for r in runs]
        out[name] = {
            "seeds": len(runs),
            "lr": runs[0]["lr"],
            "bleu_mean": round(statistics.fmean(bleus), 2),
            "bleu_per_seed": bleus,
            "bleu_std": round(statistics.stdev(bleus), 2) if len(bleus) > 1 else None,
            "final_valid_loss_mean": mean(r["final_valid_loss"] for r in runs),
            "repetition_rate_mean": mean(r["repetition_rate"] for r in runs),
            "length_ratio_mean": mean(r["length_ratio"] for r in runs),
            "train_words_per_s_mean": mean(r["train_words_per_s"] for r in runs),
            "decode_sentences_per_s_mean": mean(r["decode_sentences_per_s"] for r in runs),
            "attention_mean": {
                k: {m: mean(r["attention"][k][m] for r in runs) for m in ("sparsity", "null_rate")} for k in KINDS
            },
        }
    return out


def seed_pair(seed, base, name, results):
    """The comparison of ``name`` with ``base`` on one seed: BLEU difference (``name``
    minus ``base``) and the paired-bootstrap p-value, from that seed's ``results``."""
    return {
        "seed": seed,
        "baseline": base,
        "model": name,
        "bleu_difference": round(results[name]["bleu"] - results[base]["bleu"], 2),
        "p_value": results[name]["p_value_vs_baseline"],
    }


def train_and_translate(name, seed, args, data_bin, out, total):
    """One model and seed: trained, then the test set translated; (checkpoint, training
    words/s, training log, hypotheses, decoding sentences/s)."""
    tag = run_tag(name, seed, len(args.seeds))
    lr = args.lr[name]
    log(
        f"training {tag}: {args.layers}+{args.layers} layers, d={args.dim}, {args.heads} heads, lr {lr:g}, "
        f"{args.max_update} updates of <= {args.max_tokens} tokens"
        + (f" x {args.update_freq}" if args.update_freq and args.update_freq != 1 else "")
        + f", seed {seed}, validation every {args.validate_interval}"
    )
    ckpt, wps, train_log = train(name, lr, args, data_bin, out, tag, seed)
    log(f"translating the test set with {tag}")
    hyps, _, sps = generate(tag, ckpt, args, data_bin, out, total=total)
    return ckpt, wps, train_log, hyps, sps


def trained_and_translated(args, data_bin, out, total):
    """{(seed, model): train_and_translate(...)} for every seed and model, ``args.jobs`` at
    a time (each a fairseq process; on one GPU they share it).  A failed run ends the demo
    with its message once the runs under way have ended."""
    jobs = [(seed, name) for seed in args.seeds for name in args.models]
    if args.jobs == 1:
        return {(seed, name): train_and_translate(name, seed, args, data_bin, out, total) for seed, name in jobs}
    from concurrent.futures import ThreadPoolExecutor

    log(f"{len(jobs)} runs, {min(args.jobs, len(jobs))} at a time (--jobs)")
    pool = ThreadPoolExecutor(max_workers=args.jobs)
    try:
        futures = {job: pool.submit(train_and_translate, job[1], job[0], args, data_bin, out, total) for job in jobs}
        return {job: future.result() for job, future in futures.items()}
    finally:  # after a failure: the runs not started are dropped, those under way end
        pool.shutdown(wait=True, cancel_futures=True)


def demo(args, out, data_bin):
    from fairseq_sparse_attn.provenance import write_json
    from fairseq_sparse_attn.tools.learning_curves import parse_validation, write_curves
    from fairseq_sparse_attn.tools.significance import N_RESAMPLES, paired_bootstrap

    refs = (out / "multi30k" / "raw" / f"test.{args.tgt}").read_text().splitlines()
    quiet_fairseq()
    names = list(args.models)
    runs = trained_and_translated(args, data_bin, out, len(refs))
    per_seed, pairs, panels, curves, signature = {}, [], [], {}, None
    for seed in args.seeds:
        results, hyps_of = {}, {}
        for name in names:
            tag = run_tag(name, seed, len(args.seeds))
            lr = args.lr[name]
            ckpt, wps, train_log, hyps, sps = runs[(seed, name)]
            curves[tag] = parse_validation(train_log)
            hyps_of[name] = hyps
            model, task = load(ckpt, data_bin)
            log(f"attention statistics of {tag}")
            stats = attention_statistics(model, task)
            if seed == args.seeds[0]:
                w, src, tgt, layer = cross_attention_of(model, task, args.heatmap_sentence)
                panels.append((name, w, src, tgt, layer))
            results[name] = {
                "lr": lr,
                "train_words_per_s": wps,
                "decode_sentences_per_s": sps,
                "final_valid_loss": curves[tag][-1]["loss"] if curves[tag] else None,
                "attention": {k: {m: round(v, 4) for m, v in stats[k].items()} for k in KINDS},
                "repetition_rate": round(repetition_rate(hyps), 4),
                "length_ratio": round(length_ratio(hyps, refs), 4),
                "checkpoint": str(ckpt),
                "hypotheses": str(out / f"test_{tag}.hyp"),
            }
        sig, signature = paired_bootstrap(
            (names[0], hyps_of[names[0]]), [(n, hyps_of[n]) for n in names[1:]], refs, lowercase=args.lowercase
        )
        for name in names:
            results[name].update(
                bleu=sig[name]["bleu"], bleu_ci95=sig[name]["ci95"], p_value_vs_baseline=sig[name]["p_value"]
            )  # vs the first model (softmax)
        pairs += [seed_pair(seed, names[0], name, results) for name in names[1:]]
        per_seed[str(seed)] = results
    png = out / "cross_attention_heatmap.png"
    heatmap(panels, png)
    curve_files = write_curves(
        curves,
        out / "learning_curves",
        seed=args.seeds[0],
        title=f"validation loss, {args.max_update} updates (lr: "
        + ", ".join(f"{n} {args.lr[n]:g}" for n in names)
        + ")",
    )
    elapsed = round(time.time() - start_time, 1)
    report = {
        "recipe": args.recipe,
        "regime": regime_of(args),
        "changed_settings": {k: list(v) for k, v in changed_settings(args).items()},
        "models_compared": names,
        "seeds": args.seeds,
        "per_seed": per_seed,
        "pairs": pairs,
        "models": pooled(per_seed, names),
        "references": {"repetition_rate": round(repetition_rate(refs), 4)},
        "signature": signature,
        "paired_bootstrap_resamples": N_RESAMPLES,
        "test_set": " + ".join(f"Multi30k {t}" for t in TEST_SETS),
        "test_sets": list(TEST_SETS),
        "test_sentences": len(refs),
        "settings": {k: v for k, v in vars(args).items()},
        "elapsed_s": elapsed,
    }
    write_json(out / "results.json", report, seed=args.seeds[0], sacrebleu_signature=signature)
    print_report(report, args, curves)
    print(f"learning curves: {curve_files[2]} (data: {curve_files[0].name}, {curve_files[1].name})")
    print(f"heatmap: {png}\nresults: {out / 'results.json'}\ntotal time: {elapsed:.0f}s")


def print_table(results, names, args):
    rows = [
        ("sacreBLEU", lambda r: f"{r['bleu']:.2f}"),
        ("  95% CI (bootstrap)", lambda r: f"{r['bleu_ci95'][0]:.1f}-{r['bleu_ci95'][1]:.1f}"),
        (
            f"  p-value vs {names[0]}",
            lambda r: "-" if r["p_value_vs_baseline"] is None else f"{r['p_value_vs_baseline']:.3f}",
        ),
        ("learning rate", lambda r: f"{r['lr']:g}"),
        ("final validation loss", lambda r: "-" if r["final_valid_loss"] is None else f"{r['final_valid_loss']:.3f}"),
        ("repetition rate", lambda r: f"{r['repetition_rate']:.3f}"),
        ("length ratio", lambda r: f"{r['length_ratio']:.3f}"),
    ]
    for kind in KINDS:
        rows.append((f"{kind} sparsity rate", lambda r, k=kind: f"{r['attention'][k]['sparsity']:.3f}"))
        rows.append((f"{kind} null rate", lambda r, k=kind: f"{r['attention'][k]['null_rate']:.3f}"))
    width = max(len(r[0]) for r in rows) + 2
    print("".ljust(width) + "".join(n.rjust(12) for n in names))
    for label, fmt in rows:
        print(label.ljust(width) + "".join(fmt(results[n]).rjust(12) for n in names))


def print_report(report, args, curves=None):
    names = report["models_compared"]
    seeds = report["seeds"]
    print(f"\n{report['regime']}")
    for seed in seeds:
        print(f"\nseed {seed} ({report['test_set']}, {report['test_sentences']} sentences):")
        print_table(report["per_seed"][str(seed)], names, args)
    if len(seeds) > 1:
        print(f"\nmean over seeds {', '.join(map(str, seeds))}:")
        for name in names:
            m = report["models"][name]
            print(
                f"  {name}: sacreBLEU {m['bleu_mean']:.2f} (per seed "
                f"{', '.join(f'{b:.2f}' for b in m['bleu_per_seed'])}; sample std {m['bleu_std']:.2f}), "
                f"repetition rate {m['repetition_rate_mean']:.3f}, length ratio {m['length_ratio_mean']:.3f}, "
                f"cross null rate {m['attention_mean']['cross']['null_rate']:.3f}"
            )
    print(f"  references: repetition rate {report['references']['repetition_rate']:.3f}")
    print(f"\nsacreBLEU signature: {report['signature']}")
    print(
        "repetition rate: share of outputs with a word or bigram repeated at once (13a tokens); "
        "length ratio: output / reference tokens over the test set"
    )
    for name in names[1:]:
        print(reading(names[0], name, report, args, curves))


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
    trend = (
        "narrowing: more updates may close it"
        if abs(g1) < abs(g0)
        else "not narrowing: at this budget more updates do not yet close it"
    )
    return (
        f"The learning curves: {name}'s validation loss is {g1:+.3f} from {base}'s at update {u1} "
        f"({g0:+.3f} at update {u0}), so the gap is {trend}; where the curves meet with longer "
        f"training: docs/rela.md, 'Small budgets'."
    )


def verdict(base, name, diff, p, seed=None):
    which = f"seed {seed}: " if seed is not None else ""
    if p is not None and p < ALPHA and round(diff, 2) != 0:
        return (
            f"{which}{name} is {abs(diff):.2f} BLEU {'below' if diff < 0 else 'above'} {base} and the paired "
            f"bootstrap says this is not test-set noise (p = {p:.3f} < {ALPHA}): at this budget the "
            f"two are NOT tied."
        )
    return (
        f"{which}{name} differs from {base} by {diff:+.2f} BLEU, within the noise of this test set "
        f"(p = {p:.3f}): at this budget they tie on this test set."
    )


def reading(base, name, report, args, curves=None):
    """What the numbers do and do not show, in words."""
    seeds = report["seeds"]
    pairs = [p for p in report["pairs"] if p["model"] == name]
    if len(seeds) == 1:
        shows = verdict(base, name, pairs[0]["bleu_difference"], pairs[0]["p_value"])
    else:
        apart = sum(p["p_value"] < ALPHA and round(p["bleu_difference"], 2) != 0 for p in pairs)
        m = report["models"]
        shows = (
            " ".join(verdict(base, name, p["bleu_difference"], p["p_value"], p["seed"]) for p in pairs)
            + f"  Mean over {len(seeds)} seeds: {name} {m[name]['bleu_mean']:.2f} against {base} "
            f"{m[base]['bleu_mean']:.2f} ({m[name]['bleu_mean'] - m[base]['bleu_mean']:+.2f}); the test set "
            f"tells them apart in {apart} of {len(pairs)} seed pairs."
        )
    first = report["per_seed"][str(seeds[0])]
    b, r = first[base], first[name]
    epochs = f", {args.max_update / args.updates_per_epoch:.1f} epochs" if args.updates_per_epoch else ""
    batch = f"<= {args.max_tokens} tokens" + (
        f" x {args.update_freq}" if args.update_freq and args.update_freq != 1 else ""
    )
    budget = f"{args.max_update} updates of {batch}{epochs}"
    seed_words = "one seed" if len(seeds) == 1 else f"{len(seeds)} seeds, each pair compared on the same seed"
    if r["lr"] == b["lr"]:
        rates = f"the same learning rate ({r['lr']:g}; how it was chosen and what is not measured: docs/demo.md)"
    else:
        rates = (
            "each its own learning rate, chosen the same way (best validation BLEU of `make demo-sweep`, docs/demo.md)"
        )
    tag = lambda n: run_tag(n, seeds[0], len(seeds))  # noqa: E731
    curve_curves = {base: (curves or {}).get(tag(base), []), name: (curves or {}).get(tag(name), [])}
    return (
        f"\nWhat this shows: {shows}\n"
        f"Both models had the same budget ({budget}, {seed_words}) and {rates}.  The CI and p-value "
        f"describe only the uncertainty from the choice of test sentences ({report['paired_bootstrap_resamples']} "
        f"paired resamples of {report['test_sentences']} test sentences); they say nothing about other seeds, "
        f"longer training, larger data or larger models - the ReLA paper's parity is for converged base "
        f"models.  {curve_reading(base, name, curve_curves)}"
        f"  Speed is not compared here: one unpaired run measures the machine's load as much as the "
        f"models (other jobs on the cores); `make bench` measures it, paired and interleaved, with its spread."
    )


start_time = time.time()


def parse_seeds(text):
    try:
        seeds = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        seeds = []
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"expected distinct comma-separated whole numbers (e.g. 1,2), got {text!r}")
    return seeds


def build_parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    R = " (default: the recipe's; cpu %s, cuda %s)"

    def recipe_default(dest):
        return R % (RECIPES["cpu"][dest], RECIPES["cuda"][dest])

    p.add_argument(
        "--recipe",
        choices=("auto", "cpu", "cuda"),
        default=os.environ.get("DEMO_RECIPE", "auto"),
        help="auto (default; $DEMO_RECIPE): cuda when torch sees a GPU, else cpu",
    )
    p.add_argument("--out", default=os.environ.get("DEMO_DIR", str(REPO / "demo_out")))
    p.add_argument(
        "--raw-dir",
        default=None,
        help="local Multi30k raw files (default: $MULTI30K_DIR, else ../shared/data/multi30k beside "
        "the repository, as the Makefile; else downloaded)",
    )
    p.add_argument("--src", default="de")
    p.add_argument("--tgt", default="en")
    p.add_argument(
        "--models",
        default=",".join(DEFAULT_MODELS),
        help=f"comma-separated, first is the baseline (default {','.join(DEFAULT_MODELS)}; also: rela_i)",
    )
    p.add_argument("--layers", type=int, help="encoder and decoder layers" + recipe_default("layers"))
    p.add_argument("--dim", type=int, help="embedding dimension" + recipe_default("dim"))
    p.add_argument("--ffn-dim", type=int, help="FFN dimension" + recipe_default("ffn_dim"))
    p.add_argument("--heads", type=int, help="attention heads" + recipe_default("heads"))
    p.add_argument("--dropout", type=float, help=recipe_default("dropout").strip())
    p.add_argument("--attention-dropout", type=float, help=recipe_default("attention_dropout").strip())
    p.add_argument("--activation-dropout", type=float, help="(default: not passed, fairseq's 0)")
    p.add_argument(
        "--attn-init",
        choices=("fairseq", "rela_official"),
        help="q/k/v initialisation (default: not passed, the plugin's fairseq)",
    )
    env_updates = os.environ.get("DEMO_MAX_UPDATE")
    p.add_argument(
        "--max-update",
        type=int,
        default=int(env_updates) if env_updates else None,
        help="($DEMO_MAX_UPDATE)" + recipe_default("max_update"),
    )
    p.add_argument("--max-tokens", type=int, help=recipe_default("max_tokens").strip())
    p.add_argument("--update-freq", type=int, help="batches per update (default 1)")
    p.add_argument("--fp16", action="store_true", help="train with --fp16 (CUDA)")
    p.add_argument(
        "--validate-interval", type=int, help="validate every N updates (curves)" + recipe_default("validate_interval")
    )
    p.add_argument("--log-interval", type=int, help="fairseq's --log-interval" + recipe_default("log_interval"))
    p.add_argument("--lr-softmax", type=float, help=recipe_default("lr_softmax").strip())
    p.add_argument("--lr-rela-g", type=float, help=recipe_default("lr_rela_g").strip())
    p.add_argument("--lr-rela-i", type=float, help=recipe_default("lr_rela_i").strip())
    p.add_argument("--warmup", type=int, help="inverse_sqrt warmup updates" + recipe_default("warmup"))
    p.add_argument(
        "--seeds", help="comma-separated training seeds, one run per model and seed" + recipe_default("seeds")
    )
    p.add_argument("--seed", type=int, help="one seed (= --seeds S)")
    p.add_argument(
        "--jobs",
        type=int,
        help="trainings (and their translations) run at once, each its own fairseq process: the "
        "results do not depend on it (default: cpu 1, cuda one per model and seed, side by side on the GPU)",
    )
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--lenpen", type=float, help="length penalty (default: cpu not passed (1), cuda 0.6)")
    p.add_argument("--no-repeat-ngram-size", type=int, default=None, help="fairseq-generate's (default: off)")
    p.add_argument("--lowercase", action="store_true", help="lowercased BLEU (default: cased, sacreBLEU's)")
    p.add_argument(
        "--progress",
        choices=("auto", "bar", "lines"),
        default="auto",
        help="auto: fairseq's tqdm bar when stderr is a terminal, else status lines",
    )
    p.add_argument(
        "--status-interval",
        type=float,
        default=STATUS_INTERVAL,
        help=f"seconds between status lines (default {STATUS_INTERVAL:g})",
    )
    p.add_argument(
        "--sweep",
        nargs="?",
        const=SWEEP_LRS,
        default=None,
        metavar="LRS",
        help=f"learning-rate sweep on the validation set instead of the demo (default rates {SWEEP_LRS})",
    )
    p.add_argument("--tensorboard-logdir", help="also log training to tensorboard here (one folder per run)")
    p.add_argument("--max-train-lines", type=int, default=None)
    p.add_argument("--max-eval-lines", type=int, default=None)
    p.add_argument("--heatmap-sentence", type=int, default=7, help="test sentence index for the PNG")
    return p


def parse_args(argv=None, cuda_available=None):
    """The demo's settings: the recipe's, then every flag given on the command line."""
    p = build_parser()
    args = p.parse_args(argv)
    args.recipe = choose_recipe(args.recipe, cuda_available)
    for dest, value in RECIPES[args.recipe].items():
        if getattr(args, dest, None) is None:
            setattr(args, dest, value)
    if args.seed is not None:
        args.seeds = str(args.seed)
    try:
        args.seeds = parse_seeds(args.seeds)
    except ValueError as e:
        p.error(f"--seeds: {e}")
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in args.models if m not in MODELS]
    if unknown or not args.models:
        p.error(f"--models: unknown {unknown}; choose from {', '.join(MODELS)}")
    if len(args.models) < 2 and not args.sweep:
        p.error("--models: the demo compares at least two models (the first is the baseline)")
    args.lr = {"softmax": args.lr_softmax, "rela_g": args.lr_rela_g, "rela_i": args.lr_rela_i}
    if args.jobs is None:
        args.jobs = 1 if args.recipe == "cpu" else len(args.models) * len(args.seeds)
    elif args.jobs <= 0:
        p.error(f"--jobs must be positive, got {args.jobs}")
    for flag in ("max_update", "max_tokens", "layers", "dim", "ffn_dim", "heads", "warmup", "beam", "log_interval"):
        if getattr(args, flag) <= 0:
            p.error(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    if args.update_freq is not None and args.update_freq <= 0:
        p.error(f"--update-freq must be positive, got {args.update_freq}")
    if args.dim % args.heads:
        p.error(f"--dim ({args.dim}) must be a multiple of --heads ({args.heads})")
    if args.validate_interval <= 0 or args.validate_interval > args.max_update:
        p.error(f"--validate-interval must be in 1..--max-update ({args.max_update}), got {args.validate_interval}")
    if args.status_interval <= 0:
        p.error(f"--status-interval must be positive, got {args.status_interval}")
    if args.raw_dir is None:
        args.raw_dir = shipped_multi30k()
    args.raw_dir = None if args.raw_dir is None else str(args.raw_dir)
    args.updates_per_epoch = None
    return args


def main(argv=None):
    args = parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    log(regime_of(args))
    data_bin = prepare(args, out)
    if args.sweep:
        sweep(args, out, data_bin)
    else:
        demo(args, out, data_bin)


if __name__ == "__main__":
    main()
