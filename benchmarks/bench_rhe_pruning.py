#!/usr/bin/env python
"""Speed of RHE pruning (docs/rhe.md, "Pruning"): the LPEA + RHE model (``rhe``: redundant
heads enlivened) against the same weights with the redundant heads pruned, on the same
batches in one process; every number is a ratio against ``rhe`` measured in the same run.

Variants (same parameters, only the flags differ):

* ``rhe``                 --rhe (enlivening: the paper's LPEA+RHE model)
* ``rhe_pruned``          + --prune-redundant-heads (+ --prune-skip-in-training in the train
                          step): the pruned heads are skipped
* ``rhe_pruned_zeroing``  + --prune-redundant-heads, skipping off: the pruned heads are computed
                          and their output zeroed (the computation before skipping existed).
                          At test time skipping is always on, so this variant runs its RHE
                          attention with the dropout module flagged as training (attention
                          dropout is 0: nothing is dropped), which turns the skip off.

Measures
* ``encoder``: encoder forward at test time (eval, no grad) -- pruning changes the encoder only;
* ``attn_l0``: the RHE layer's self-attention alone (eval, no grad);
  (each timing of these two runs ``--repeat`` calls, ``attn_l0`` four times as many)
* ``train_step``: forward + backward + Adam step of the whole model.

The source annotations are synthetic: per sentence a random dependency tree (each word's
head an earlier word), its DEA matrix and the constituency tree made from it
(``tree_from_dependencies``) for LPEA.  How many (sentence, head) pairs are pruned depends on
the weights: the fraction and the number of heads pruned in every sentence of the batch are
printed.  Rounds are interleaved and the median is reported with the spread
(min..max over rounds of the per-round ratio).

    python benchmarks/bench_rhe_pruning.py                 # CPU-sized defaults
    python benchmarks/bench_rhe_pruning.py --preset base --rhe-gate 0.3
"""

import argparse
import platform
import random
import statistics
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_attention import PRESETS, make_batch, timed  # noqa: E402

VARIANTS = {
    "rhe": dict(),
    "rhe_pruned": dict(prune_redundant_heads=True, prune_skip_in_training=True),
    "rhe_pruned_zeroing": dict(prune_redundant_heads=True),
}


def annotations(src_tokens, pad, seed):
    """(src_dep, src_rp) for a left-padded batch: one random dependency tree per sentence."""
    from fairseq_sparse_attn.syntax import NO_PHRASE, dependency_matrix, phrase_rp_matrix
    from fairseq_sparse_attn.syntax.structure import tree_from_dependencies

    rng = random.Random(seed)
    bsz, T = src_tokens.shape
    dep = torch.zeros(bsz, T, T, dtype=torch.bool)
    rp = torch.full((bsz, T, T), NO_PHRASE, dtype=torch.int16)
    for b in range(bsz):
        n = int(src_tokens[b].ne(pad).sum()) - 1  # words, EOS excluded
        heads = [-1] + [rng.randrange(i) for i in range(1, n)]
        s = T - n - 1
        dep[b, s:, s:] = dependency_matrix(heads)
        rp[b, s:, s:] = phrase_rp_matrix(tree_from_dependencies([f"w{i}" for i in range(n)], heads))
    return dep, rp


def build(variant, preset, dictionary, gate, seed=0):
    from fairseq_sparse_attn.models.standalone import build_standalone_model

    torch.manual_seed(seed)
    return build_standalone_model(
        dictionary,
        "rhe_transformer_wmt_en_de",
        dropout=0.1,
        attention_dropout=0.0,
        share_all_embeddings=True,
        max_source_positions=256,
        max_target_positions=256,
        rhe_gate=gate,
        **PRESETS[preset],
        **VARIANTS[variant],
    )


def rhe_attention(model):
    return model.encoder.layers[0].self_attn


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--preset", choices=PRESETS, default=None, help="model size (default: small on CPU, base on CUDA)")
    p.add_argument("--batch", type=int, default=None, help="sentences per batch")
    p.add_argument("--src-len", type=int, default=30)
    p.add_argument("--tgt-len", type=int, default=30)
    p.add_argument("--rhe-gate", default="dynamic")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument(
        "--repeat", type=int, default=5, help="calls per timing of encoder / attn_l0 (short calls are noisy)"
    )
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=None, help="write the results here (provenance.write_json)")
    args = p.parse_args()

    import fairseq_sparse_attn.plugin  # noqa: F401
    from fairseq_sparse_attn.attention.core import AttentionInputs
    from fairseq_sparse_attn.attention.intermediates import collect
    from fairseq_sparse_attn.models.standalone import synthetic_dictionary

    device = torch.device(args.device)
    preset = args.preset or ("base" if device.type == "cuda" else "small")
    if args.threads:
        torch.set_num_threads(args.threads)
    bsz = args.batch or (128 if device.type == "cuda" else 32)
    dictionary = synthetic_dictionary(8000)
    batch = make_batch(dictionary, bsz, args.src_len, args.tgt_len, torch.device("cpu"), 1)
    # sentence lengths vary (left padding), as in real batches
    g = torch.Generator().manual_seed(3)
    for b in range(bsz):
        cut = int(torch.randint(0, args.src_len // 2, (1,), generator=g))
        batch["src_tokens"][b, :cut] = dictionary.pad()
    batch["src_dep"], batch["src_rp"] = annotations(batch["src_tokens"], dictionary.pad(), 4)
    batch = {k: v.to(device) for k, v in batch.items()}
    net = dict(
        src_tokens=batch["src_tokens"],
        src_lengths=batch["src_lengths"],
        src_dep=batch["src_dep"],
        src_rp=batch["src_rp"],
    )

    models = {v: build(v, preset, dictionary, args.rhe_gate).to(device) for v in VARIANTS}
    for v in VARIANTS:  # same weights
        models[v].load_state_dict(models["rhe"].state_dict())

    # the RHE layer's input, for the attention alone
    x0 = {}

    def keep_input(module, inputs, kwargs):
        x0["x"], x0["pad"], x0["inputs"] = inputs[0], kwargs["encoder_padding_mask"], kwargs["attn_inputs"]

    h = models["rhe"].encoder.layers[0].register_forward_pre_hook(keep_input, with_kwargs=True)
    with torch.no_grad(), collect("redundant") as records:
        models["rhe"].eval().encoder(
            batch["src_tokens"], batch["src_lengths"], src_dep=batch["src_dep"], src_rp=batch["src_rp"]
        )
    h.remove()
    redundant = records[0][1].redundant
    pruned_fraction = float(redundant.float().mean())
    whole_heads = int(redundant.all(dim=0).sum())

    def zeroing_at_test_time(model):
        attn = rhe_attention(model)
        attn.dropout_module.training = True  # p = 0: only turns the skip off

    def encoder_fn(v):
        model = models[v]

        def run():
            model.eval()
            if v == "rhe_pruned_zeroing":
                zeroing_at_test_time(model)
            with torch.no_grad():
                for _ in range(args.repeat):
                    model.encoder(**net)

        return run

    def attn_fn(v):
        model = models[v]
        attn = rhe_attention(model)

        def run():
            model.eval()
            if v == "rhe_pruned_zeroing":
                zeroing_at_test_time(model)
            inputs = AttentionInputs(src_dep=batch["src_dep"], src_rp=batch["src_rp"])
            with torch.no_grad():
                for _ in range(args.repeat * 4):
                    attn(x0["x"], x0["x"], x0["x"], key_padding_mask=x0["pad"], need_weights=False, attn_inputs=inputs)

        return run

    def train_fn(v):
        model = models[v]
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)

        def step():
            model.train()
            opt.zero_grad(set_to_none=True)
            out, _ = model(
                batch["src_tokens"],
                batch["src_lengths"],
                batch["prev_output_tokens"],
                src_dep=batch["src_dep"],
                src_rp=batch["src_rp"],
            )
            loss = torch.nn.functional.cross_entropy(out.float().view(-1, out.size(-1)), batch["target"].view(-1))
            loss.backward()
            opt.step()

        return step

    jobs = {v: {"encoder": encoder_fn(v), "attn_l0": attn_fn(v), "train_step": train_fn(v)} for v in VARIANTS}
    measures = list(jobs["rhe"])
    times = {v: {k: [] for k in measures} for v in VARIANTS}
    for v in VARIANTS:  # warm-up
        for k in measures:
            jobs[v][k]()
    for r in range(args.rounds):
        for k in measures:
            for v in VARIANTS:
                times[v][k].append(timed(jobs[v][k], device))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)

    machine = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    )
    try:
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        load = "?"
    result = {
        "device": str(device),
        "machine": machine,
        "load_average": load,
        "preset": preset,
        "batch": bsz,
        "src_len": args.src_len,
        "rhe_gate": args.rhe_gate,
        "pruned_pair_fraction": pruned_fraction,
        "heads_pruned_in_every_sentence": whole_heads,
        "num_heads": int(redundant.size(1)),
        "measures": {},
    }
    print(
        f"\n{preset} LPEA+RHE transformer on {machine} ({device}), load average {load}; "
        f"batch {bsz} x src {args.src_len} (varied lengths), gate {args.rhe_gate}"
    )
    print(
        f"pruned (sentence, head) pairs in layer 0: {pruned_fraction:.1%}; heads pruned in every "
        f"sentence: {whole_heads}/{redundant.size(1)}"
    )
    print(
        f"speed relative to rhe (>1 = faster): median of per-round ratios [min..max] over "
        f"{args.rounds} interleaved rounds"
    )
    print("variant".ljust(20) + "".join(c.rjust(26) for c in measures))
    for v in VARIANTS:
        result["measures"][v] = {}
        cells = ""
        for k in measures:
            ratios = [b / t for b, t in zip(times["rhe"][k], times[v][k])]
            result["measures"][v][k] = {
                "median_s": statistics.median(times[v][k]),
                "ratio_vs_rhe": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
            }
            cells += (f"{statistics.median(ratios):.3f}x [{min(ratios):.2f}..{max(ratios):.2f}]").rjust(26)
        print(v.ljust(20) + cells)
    calls = {"encoder": args.repeat, "attn_l0": 4 * args.repeat, "train_step": 1}
    print(
        "rhe absolute (median per call): "
        + ", ".join(f"{k} {statistics.median(times['rhe'][k]) / calls[k] * 1e3:.1f} ms" for k in measures)
    )
    if args.json:
        from fairseq_sparse_attn.provenance import write_json

        write_json(args.json, result, seed=0)
        print(f"json: {args.json}")


if __name__ == "__main__":
    main()
