#!/usr/bin/env python3
"""Head ablation of Raganato et al. (2020), Table 4: disable one encoder self-attention head
(the same index in every encoder layer) at test time and report the BLEU change.

    python scripts/fixed_patterns/head_ablation.py DATA_BIN --path checkpoint_best.pt \
        --out ablation/ -- --beam 5 --remove-bpe --tokenizer moses --batch-size 128

Runs ``fairseq-generate`` once with every head active and once per head with
``--model-overrides "{'encoder_masked_heads': '<h>'}"`` (what ``fsa-generate
--mask-encoder-heads <h>`` does), scores each run with sacreBLEU (detokenized D- lines
against the T- references, as fsa-length-bleu reads them) and prints, per head, the
pattern it carries (or "learned"), the BLEU and the difference to the full model.  Writes
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

    from fairseq_sparse_attn.attention.fixed_patterns import parse_pattern_list

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

    cmd = [sys.executable, "-m", "fairseq_cli.generate", str(data), "--user-dir", user_dir(),
           "--path", str(checkpoint), *extra]
    if masked is not None:
        cmd += ["--model-overrides", repr({"encoder_masked_heads": str(masked)})]
    with open(out_file, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"fairseq-generate failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")


def bleu_of(path):
    import sacrebleu

    from fairseq_sparse_attn.analysis.length_bleu import read_generate_output

    refs, hyps = read_generate_output(path)
    return sacrebleu.corpus_bleu(hyps, [refs]).score


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", help="fairseq-preprocess output directory")
    parser.add_argument("--path", required=True, help="checkpoint to evaluate")
    parser.add_argument("--out", required=True, help="directory for generate outputs and ablation.tsv")
    parser.add_argument("--heads", help="comma-separated head indices (default: every encoder head)")
    parser.epilog = "Arguments after -- go to fairseq-generate (--beam, --remove-bpe, ...)."
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    os.makedirs(args.out, exist_ok=True)
    heads = encoder_heads(args.path)
    if args.heads:
        wanted = {int(h) for h in args.heads.split(",")}
        bad = wanted - {h for h, _ in heads}
        if bad:
            raise SystemExit(f"--heads {sorted(bad)}: the encoder has heads 0..{len(heads) - 1}")
        heads = [(h, lab) for h, lab in heads if h in wanted]

    full_out = Path(args.out) / "gen.full.txt"
    generate(args.data, args.path, None, full_out, extra)
    full = bleu_of(full_out)
    rows = [("-", "all heads", full, 0.0)]
    for h, label in heads:
        out = Path(args.out) / f"gen.mask{h}.txt"
        generate(args.data, args.path, h, out, extra)
        b = bleu_of(out)
        rows.append((str(h), label, b, b - full))

    print(f"{'masked head':<12}{'pattern':<32}{'BLEU':>8}{'delta':>8}")
    for h, label, b, d in rows:
        print(f"{h:<12}{label:<32}{b:>8.2f}{d:>+8.2f}")
    with open(Path(args.out) / "ablation.tsv", "w") as f:
        f.write("masked_head\tpattern\tbleu\tdelta\n")
        for h, label, b, d in rows:
            f.write(f"{h}\t{label}\t{b:.4f}\t{d:.4f}\n")
    return rows


if __name__ == "__main__":
    main()
