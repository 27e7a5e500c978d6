#!/usr/bin/env python3
"""Head ablation of Raganato et al. (2020), Table 4: disable one encoder self-attention head
(the same index in every encoder layer) at test time and report the BLEU change.

    python scripts/fixed_patterns/head_ablation.py DATA_BIN --path checkpoint_best.pt \
        --out ablation/ -- -s de -t en --beam 5 --remove-bpe --tokenizer moses --batch-size 128

Runs ``fairseq-generate`` once with every head active and once per head with
``--model-overrides "{'encoder_masked_heads': '<h>'}"`` (what ``fsa-generate
--mask-encoder-heads <h>`` does), scores each run with sacreBLEU (detokenized D- lines
against the T- references, as fsa-length-bleu reads them) and prints, per head, the
pattern it carries (or "learned"), the BLEU with its 95% CI, the difference to the full
model and its paired-bootstrap p-value (1000 resamples).  Writes
``gen.<run>.txt`` for every run and ``ablation.tsv`` in ``--out``.
"""

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def encoder_heads(checkpoint):
    """[(index, label)] of the encoder self-attention heads of a plugin checkpoint."""
    import torch

    from fairseq_sparse_attn.options.cli import parse_pattern_list

    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    cfg = state.get("cfg") or {}
    model = cfg.get("model") if hasattr(cfg, "get") else None
    if model is None and state.get("args") is not None:
        model = state["args"]
    if model is None:
        raise SystemExit(f"{checkpoint}: no model configuration in the checkpoint")
    get = (lambda k, d=None: model.get(k, d)) if hasattr(model, "get") else (lambda k, d=None: getattr(model, k, d))
    heads = int(get("encoder_attention_heads"))
    fixed = parse_pattern_list(get("encoder_fixed_patterns", "none"))
    unit = get("encoder_fixed_pattern_unit", "token")
    return [(h, f"{fixed[h]} ({unit})" if h < len(fixed) else "learned") for h in range(heads)]


def generate(data, checkpoint, masked, out_file, extra):
    from fairseq_sparse_attn import user_dir

    cmd = [
        sys.executable,
        "-m",
        "fairseq_cli.generate",
        str(data),
        "--user-dir",
        user_dir(),
        "--path",
        str(checkpoint),
        *extra,
    ]
    if masked is not None:
        cmd += ["--model-overrides", repr({"encoder_masked_heads": str(masked)})]
    with open(out_file, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"fairseq-generate failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")


def bleu_and_significance(full_path, masked_paths):
    """sacreBLEU (D- lines against the T- references, as fsa-length-bleu reads them) of the
    all-heads output and of every masked output, each with its 95% CI, and the
    paired-bootstrap p-value of every masked output against the all-heads one (sacreBLEU's
    --paired-bs, 1000 resamples): {name: (bleu, (lo, hi), p or None)}, signature."""
    import sacrebleu

    from fairseq_sparse_attn.analysis.length_bleu import read_generate_output
    from fairseq_sparse_attn.tools.significance import paired_bootstrap

    refs, full = read_generate_output(full_path)
    systems = []
    for name, path in masked_paths:
        r, hyps = read_generate_output(path)
        if r != refs:
            raise SystemExit(f"{path} and {full_path} translate different sentences")
        systems.append((name, hyps))
    boot, signature = paired_bootstrap(("all", full), systems, refs)
    out = {}
    for name, hyps in [("all", full)] + systems:
        out[name] = (sacrebleu.corpus_bleu(hyps, [refs]).score, tuple(boot[name]["ci95"]), boot[name]["p_value"])
    return out, signature


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", help="fairseq-preprocess output directory")
    parser.add_argument("--path", required=True, help="checkpoint to evaluate")
    parser.add_argument("--out", required=True, help="directory for generate outputs and ablation.tsv")
    parser.add_argument("--heads", help="comma-separated head indices (default: every encoder head)")
    parser.epilog = "Arguments after -- go to fairseq-generate (--beam, --remove-bpe, ...)."
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    from fairseq_sparse_attn.cli import _check_tokenizer_languages
    from fairseq_sparse_attn.options.cli import parse_head_list

    # fairseq-generate's hydra traceback after the model loaded, once per run: one line first
    _check_tokenizer_languages("head_ablation.py", [args.data, *extra])
    wanted = None
    if args.heads:  # read as --mask-encoder-heads reads its value
        try:
            wanted = set(parse_head_list(args.heads))
        except ValueError:
            wanted = set()
        if not wanted:
            raise SystemExit(f"--heads {args.heads!r}: expected comma-separated head indices (e.g. 1,7)")
    heads = encoder_heads(args.path)
    if wanted is not None:
        bad = wanted - {h for h, _ in heads}
        if bad:
            raise SystemExit(f"--heads {sorted(bad)}: the encoder has heads 0..{len(heads) - 1}")
        heads = [(h, lab) for h, lab in heads if h in wanted]
    os.makedirs(args.out, exist_ok=True)  # (after every check: a refused run leaves no folder)

    full_out = Path(args.out) / "gen.full.txt"
    generate(args.data, args.path, None, full_out, extra)
    masked = []
    for h, _label in heads:
        out = Path(args.out) / f"gen.mask{h}.txt"
        generate(args.data, args.path, h, out, extra)
        masked.append((str(h), out))
    scores, signature = bleu_and_significance(full_out, masked)
    full = scores["all"][0]
    rows = [("-", "all heads", full, 0.0, scores["all"][1], None)]
    for h, label in heads:
        b, ci, p = scores[str(h)]
        rows.append((str(h), label, b, b - full, ci, p))

    print(f"{'masked head':<12}{'pattern':<32}{'BLEU':>8}{'95% CI':>14}{'delta':>8}{'p vs all':>10}")
    for h, label, b, d, ci, p in rows:
        p_text = "-" if p is None else f"{p:.4f}"
        print(f"{h:<12}{label:<32}{b:>8.2f}{ci[0]:>8.2f}-{ci[1]:<5.2f}{d:>+8.2f}{p_text:>10}")
    print(f"sacreBLEU {signature}; p: paired bootstrap against all heads, 1000 resamples")
    with open(Path(args.out) / "ablation.tsv", "w") as f:
        f.write("masked_head\tpattern\tbleu\tdelta\tci95\tp_vs_all_heads\n")
        for h, label, b, d, ci, p in rows:
            p_text = "-" if p is None else f"{p:.4f}"
            f.write(f"{h}\t{label}\t{b:.4f}\t{d:.4f}\t{ci[0]:.2f}-{ci[1]:.2f}\t{p_text}\n")
    return rows


if __name__ == "__main__":
    main()
