#!/usr/bin/env python
"""Speed of softmax, ReLA-g, ReLA-i, sparsemax and 1.5-entmax transformers of the same
size on the same batches, in one process; every number is printed as a ratio against
softmax measured in the same run (absolute times only as context).

Measures
* train step: forward + backward + Adam step on a fixed batch (tokens/s);
* decoding: fairseq's SequenceGenerator, beam 4, batch 1 and batch 64, every model forced
  to decode the same number of steps (min_len = max_len), so the ratio compares the
  per-step cost and not how early a model happens to emit EOS.

Rounds are interleaved (model A, B, C, ... then again) and the median is reported, so a
slow phase of the machine hits all models alike.

    python benchmarks/bench_attention.py                # CPU-sized defaults
    python benchmarks/bench_attention.py --device cuda --preset base
"""

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

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
    "fixed_7f1l_word": dict(ATTENTION_PRESETS["softmax"], encoder_fixed_patterns="7F",
                            encoder_fixed_pattern_unit="word"),
}
DEFAULT_VARIANTS = ["softmax", "rela_g", "rela_i", "sparsemax", "entmax15"]
PRESETS = {
    # CPU-sized: the demo's model
    "small": dict(encoder_embed_dim=256, decoder_embed_dim=256, encoder_ffn_embed_dim=1024,
                  decoder_ffn_embed_dim=1024, encoder_layers=3, decoder_layers=3,
                  encoder_attention_heads=4, decoder_attention_heads=4),
    # Transformer base, as the ReLA paper's Table 2
    "base": dict(encoder_embed_dim=512, decoder_embed_dim=512, encoder_ffn_embed_dim=2048,
                 decoder_ffn_embed_dim=2048, encoder_layers=6, decoder_layers=6,
                 encoder_attention_heads=8, decoder_attention_heads=8),
}


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device):
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def build(variant, preset, dictionary, device, seed=0):
    from fairseq_sparse_attn.models.standalone import build_standalone_model

    torch.manual_seed(seed)
    model = build_standalone_model(dictionary, "sparse_transformer", dropout=0.1,
                                   attention_dropout=0.0, share_all_embeddings=True,
                                   max_source_positions=256, max_target_positions=256,
                                   **PRESETS[preset], **VARIANTS[variant])
    return model.to(device)


def make_batch(dictionary, bsz, src_len, tgt_len, device, seed):
    g = torch.Generator().manual_seed(seed)
    lo, hi = dictionary.nspecial, len(dictionary)
    src = torch.randint(lo, hi, (bsz, src_len), generator=g)
    src[:, -1] = dictionary.eos()
    tgt = torch.randint(lo, hi, (bsz, tgt_len), generator=g)
    tgt[:, -1] = dictionary.eos()
    prev = torch.cat([tgt[:, -1:], tgt[:, :-1]], dim=1)
    return {
        "src_tokens": src.to(device), "src_lengths": torch.full((bsz,), src_len).to(device),
        "prev_output_tokens": prev.to(device), "target": tgt.to(device),
    }


def train_step_fn(model, batch, optimizer):
    def step():
        model.train()
        optimizer.zero_grad(set_to_none=True)
        out, _ = model(batch["src_tokens"], batch["src_lengths"], batch["prev_output_tokens"])
        loss = torch.nn.functional.cross_entropy(out.float().view(-1, out.size(-1)),
                                                 batch["target"].view(-1))
        loss.backward()
        optimizer.step()

    return step


def decode_fn(model, dictionary, batch, steps, beam):
    from fairseq.sequence_generator import SequenceGenerator

    gen = SequenceGenerator([model], dictionary, beam_size=beam, max_len_a=0, max_len_b=steps,
                            min_len=steps)
    sample = {"net_input": {"src_tokens": batch["src_tokens"], "src_lengths": batch["src_lengths"]}}

    def run():
        model.eval()
        with torch.no_grad():
            gen.generate([model], sample)

    return run


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--preset", choices=PRESETS, default=None,
                   help="model size (default: small on CPU, base on CUDA)")
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                   help=f"comma-separated, from {', '.join(VARIANTS)} (default: {','.join(DEFAULT_VARIANTS)})")
    p.add_argument("--train-batch", type=int, default=None, help="sentences per train batch")
    p.add_argument("--src-len", type=int, default=24)
    p.add_argument("--tgt-len", type=int, default=24)
    p.add_argument("--decode-steps", type=int, default=20)
    p.add_argument("--decode-sentences", type=int, default=8, help="sentences decoded one by one (batch 1)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args()

    import fairseq_sparse_attn  # noqa: F401
    from fairseq_sparse_attn.models.standalone import synthetic_dictionary

    device = torch.device(args.device)
    preset = args.preset or ("base" if device.type == "cuda" else "small")
    if args.threads:
        torch.set_num_threads(args.threads)
    train_bsz = args.train_batch or (128 if device.type == "cuda" else 32)
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variants {unknown}; valid: {', '.join(VARIANTS)}")
    if any(v.startswith("fixed_") for v in variants) and PRESETS[preset]["encoder_attention_heads"] < 8:
        sys.exit(f"the fixed_7f1l variants need 8 encoder heads; preset {preset!r} has "
                 f"{PRESETS[preset]['encoder_attention_heads']}: use --preset base")
    dictionary = synthetic_dictionary(8000)

    train_batch = make_batch(dictionary, train_bsz, args.src_len, args.tgt_len, device, 1)
    batch64 = make_batch(dictionary, 64, args.src_len, args.tgt_len, device, 2)
    singles = [make_batch(dictionary, 1, args.src_len, args.tgt_len, device, 10 + i)
               for i in range(args.decode_sentences)]

    jobs = {}
    for v in variants:
        model = build(v, preset, dictionary, device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        dec1 = [decode_fn(model, dictionary, b, args.decode_steps, 4) for b in singles]
        jobs[v] = {
            "train_step": train_step_fn(model, train_batch, opt),
            "decode_b1": lambda fs=dec1: [f() for f in fs],
            "decode_b64": decode_fn(model, dictionary, batch64, args.decode_steps, 4),
        }
    work = {"train_step": train_bsz * (args.src_len + args.tgt_len),
            "decode_b1": args.decode_sentences, "decode_b64": 64}
    unit = {"train_step": "tokens/s", "decode_b1": "sentences/s", "decode_b64": "sentences/s"}

    times = {v: {k: [] for k in work} for v in variants}
    for v in variants:  # warm-up
        for k in work:
            jobs[v][k]()
    for r in range(args.rounds):
        for k in work:
            for v in variants:
                times[v][k].append(timed(jobs[v][k], device))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)

    machine = (torch.cuda.get_device_name(device) if device.type == "cuda"
               else f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    result = {"device": str(device), "machine": machine, "preset": preset, "torch": torch.__version__,
              "settings": vars(args), "measures": {}}
    for v in variants:
        result["measures"][v] = {}
        for k in work:
            med = statistics.median(times[v][k])
            base = statistics.median(times["softmax"][k]) if "softmax" in times else float("nan")
            result["measures"][v][k] = {"median_s": med, "throughput": work[k] / med,
                                        "unit": unit[k], "speed_vs_softmax": base / med}

    print(f"\n{preset} transformer on {machine} ({device}); speed relative to softmax "
          f"(>1 = faster), median of {args.rounds} interleaved rounds")
    cols = list(work)
    print("variant".ljust(12) + "".join(c.rjust(14) for c in cols) + "   absolute (softmax)")
    for v in variants:
        cells = "".join(f"{result['measures'][v][c]['speed_vs_softmax']:.3f}x".rjust(14) for c in cols)
        print(v.ljust(12) + cells)
    if "softmax" in result["measures"]:
        print("softmax absolute: " + ", ".join(
            f"{c} {result['measures']['softmax'][c]['throughput']:.1f} {unit[c]}" for c in cols))
    if args.json:
        from fairseq_sparse_attn.provenance import finite, write_json  # noqa: E402
        write_json(args.json, finite(result), seed=0)  # models are built with torch.manual_seed(0)
        print(f"json: {args.json}")


if __name__ == "__main__":
    main()
