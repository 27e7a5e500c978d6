"""The pieces behind ``fsa-analyze``: checkpoint loading (plugin, stock transformer,
unsupported architectures), examples and batching, the target shuffle of the
hallucination test, corpus statistics pooled over padded batches (against per-sentence
loops written out here), per-sentence null rates and the filter ranking, plots (the data
drawn is read back), and the CLI's input checks."""

import argparse
import json
import math
import types
from pathlib import Path

import pytest
import torch

from fairseq_sparse_attn.analysis import cli
from fairseq_sparse_attn.analysis.alignment import WeightsRecorder
from fairseq_sparse_attn.analysis.attention_stats import AttentionStatistics, NullRatePerSentence
from fairseq_sparse_attn.analysis.collect import run_passes
from fairseq_sparse_attn.analysis.commands.filter import rank_by_score
from fairseq_sparse_attn.analysis.ffn_stats import FFNStatistics, anisotropy, top_p_mass, variance_ratio
from fairseq_sparse_attn.analysis.loading import (
    Example,
    collate,
    examples_from_raw,
    load_checkpoint,
    make_batches,
    shuffle_targets,
    supported_architectures,
)
from fairseq_sparse_attn.analysis.recording import AttentionSite, Batch, record_attention
from fairseq_sparse_attn.analysis.results import number_key
from fairseq_sparse_attn.attention.intermediates import Intermediates, collect

from helpers import build_model, make_examples, model_args, random_batch

# ------------------------------------------------------------------ checkpoints


def write_checkpoint(path: Path, model, args: argparse.Namespace, data_dir: Path, dictionary):
    """A checkpoint laid out as fairseq-train writes it (cfg.model = the arch Namespace)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    dictionary.save(str(data_dir / "dict.de.txt"))
    dictionary.save(str(data_dir / "dict.en.txt"))
    state = {
        "args": None,
        "cfg": {
            "_name": None,
            "common": {},
            "model": args,
            "task": {"_name": "translation", "data": str(data_dir), "source_lang": "de", "target_lang": "en"},
        },
        "model": model.state_dict(),
        "optimizer_history": [
            {
                "criterion_name": "CrossEntropyCriterion",
                "optimizer_name": "Adam",
                "lr_scheduler_state": {"best": None},
                "num_updates": 0,
            }
        ],
        "extra_state": {},
        "last_optimizer_state": None,
    }
    torch.save(state, str(path))
    return path


def arch_args(arch, **overrides):
    args = model_args(arch, **overrides)
    args.arch = args._name = arch
    return args


def test_stock_transformer_checkpoint_loads_into_the_plugin_with_identical_outputs(tmp_path):
    from fairseq.models.transformer import TransformerModel

    stock, d = build_model(arch="transformer", seed=3)
    assert type(stock) is TransformerModel
    ckpt = write_checkpoint(tmp_path / "stock.pt", stock, arch_args("transformer"), tmp_path / "data", d)
    loaded = load_checkpoint(str(ckpt), str(tmp_path / "data"))
    assert loaded.loaded_as == "stock-transformer" and loaded.arch == "transformer"
    assert type(loaded.model).__name__ == "SparseTransformerModel"
    modules = loaded.model.attention_modules()
    assert len(modules) == 2 + 2 * 2  # 2 encoder self, 2 decoder self + 2 cross
    assert {(m.activation_name, m.output_norm_name) for m in modules} == {("softmax", "none")}
    src, lengths, prev = random_batch(d, bsz=3, src_len=7, tgt_len=6)
    seen = []
    with torch.no_grad():
        expected = stock(src, lengths, prev)[0]
        plain = loaded.model(src, lengths, prev)[0]
        with record_attention(loaded.model, lambda site, **kw: seen.append(site.kind)):
            recorded = loaded.model(src, lengths, prev)[0]
    torch.testing.assert_close(plain, expected, rtol=0, atol=0)
    torch.testing.assert_close(recorded, expected, rtol=1e-5, atol=1e-6)  # plugin pipeline
    assert sorted(set(seen)) == ["cross", "decoder_self", "encoder_self"] and len(seen) == 6


def test_plugin_checkpoint_keeps_its_attention(tmp_path):
    model, d = build_model(arch="rela_transformer_wmt_en_de", seed=2)
    args = arch_args("rela_transformer_wmt_en_de")
    ckpt = write_checkpoint(tmp_path / "rela.pt", model, args, tmp_path / "data", d)
    loaded = load_checkpoint(str(ckpt), str(tmp_path / "data"))
    assert loaded.loaded_as == "plugin"
    assert {(m.activation_name, m.output_norm_name) for m in loaded.model.attention_modules()} == {
        ("relu", "gated_rmsnorm")
    }
    src, lengths, prev = random_batch(d)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(src, lengths, prev)[0], model(src, lengths, prev)[0])


def test_a_checkpoint_trained_on_a_fused_backend_is_analysed_with_auto(tmp_path, caplog):
    """--attn-backend triton (a speed choice kept in the checkpoint) computes no weights,
    so every analysis of such a checkpoint failed; it is loaded with auto (one log line),
    records the weights and gives the trained model's outputs.  An explicit override keeps
    what it names."""
    model, d = build_model(arch="rela_transformer_wmt_en_de", seed=2)
    args = arch_args("rela_transformer_wmt_en_de", attn_backend="triton")
    ckpt = write_checkpoint(tmp_path / "rela.pt", model, args, tmp_path / "data", d)
    with caplog.at_level("INFO", logger="fairseq_sparse_attn.analysis.loading"):
        loaded = load_checkpoint(str(ckpt), str(tmp_path / "data"))
    assert "trained with --attn-backend triton, analysed with auto" in caplog.text
    assert {m.backend for m in loaded.model.attention_modules()} == {"auto"}
    src, lengths, prev = random_batch(d)
    seen = []
    with torch.no_grad():
        with record_attention(loaded.model, lambda site, **kw: seen.append(site.kind)):
            recorded = loaded.model(src, lengths, prev)[0]
        torch.testing.assert_close(recorded, model(src, lengths, prev)[0], rtol=1e-5, atol=1e-6)
    assert sorted(set(seen)) == ["cross", "decoder_self", "encoder_self"]
    # an override naming triton is kept: this small model's head dim is not the kernels'
    from fairseq_sparse_attn.errors import UsageError

    with pytest.raises(UsageError, match="attention backend 'triton' .* head dim"):
        load_checkpoint(str(ckpt), str(tmp_path / "data"), model_overrides={"attn_backend": "triton"})


@pytest.mark.parametrize("arch", ["lstm", "no_such_arch"])
def test_unsupported_architecture_is_an_error_listing_the_supported_ones(tmp_path, arch):
    model, d = build_model(arch="transformer", seed=3)
    args = arch_args("transformer")
    args.arch = args._name = arch
    ckpt = write_checkpoint(tmp_path / "other.pt", model, args, tmp_path / "data", d)
    with pytest.raises(ValueError) as e:
        load_checkpoint(str(ckpt), str(tmp_path / "data"))
    message = str(e.value)
    assert str(ckpt) in message and repr(arch) in message and "not supported" in message
    plugin, stock = supported_architectures()
    assert "rela_transformer_wmt_en_de" in plugin and "transformer_iwslt_de_en" in stock
    assert "lstm" not in plugin + stock
    for name in ("sparse_transformer", "rela_transformer_wmt_en_de", "transformer_iwslt_de_en"):
        assert name in message


def test_missing_and_unreadable_checkpoints(tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoint not found: .*nope.pt"):
        load_checkpoint(str(tmp_path / "nope.pt"), str(tmp_path))
    junk = tmp_path / "junk.pt"
    junk.write_text("this is not a checkpoint\n")
    with pytest.raises(ValueError, match=r"junk\.pt: cannot be read as a fairseq checkpoint"):
        load_checkpoint(str(junk), str(tmp_path))
    torch.save({"model": {}}, str(tmp_path / "bare.pt"))  # fairseq's upgrade fails on it
    with pytest.raises(
        ValueError,
        match=r"bare\.pt: not a fairseq checkpoint \(no 'cfg'/'args' "
        r"configuration; keys: model\)",
    ):
        load_checkpoint(str(tmp_path / "bare.pt"), str(tmp_path))
    history = [{"criterion_name": "x", "optimizer_name": "y", "lr_scheduler_state": {}, "num_updates": 0}]
    torch.save(
        {"model": {}, "cfg": None, "args": None, "extra_state": {}, "optimizer_history": history},
        str(tmp_path / "nocfg.pt"),
    )
    with pytest.raises(ValueError, match=r"nocfg\.pt: not a fairseq checkpoint \(no 'cfg'/'args'"):
        load_checkpoint(str(tmp_path / "nocfg.pt"), str(tmp_path))


# ------------------------------------------------------------------ examples


def test_batches_cover_every_example_once_within_limits():
    _, d = build_model()
    examples = make_examples(d, n=11)
    batches = make_batches(examples, batch_size=3, max_tokens=None)
    assert sorted(p for b in batches for p in b) == list(range(11))
    assert max(len(b) for b in batches) == 3
    sample = collate(examples, batches[0], d.pad(), d.eos())
    for row, position in enumerate(sample["id"].tolist()):
        ex = examples[position]
        src = sample["net_input"]["src_tokens"][row]
        assert torch.equal(src[src.ne(d.pad())], ex.source)  # left-padded source
        assert torch.equal(sample["target"][row][: ex.target.numel()], ex.target)
        prev = sample["net_input"]["prev_output_tokens"][row]
        assert int(prev[0]) == d.eos() and torch.equal(prev[1 : ex.target.numel()], ex.target[:-1])


def test_shuffled_targets_are_a_derangement_and_reproducible():
    _, d = build_model()
    examples = make_examples(d, n=9)
    shuffled, perm = shuffle_targets(examples, seed=5)
    assert sorted(perm) == list(range(9)) and all(perm[i] != i for i in range(9))
    for i, ex in enumerate(shuffled):
        assert torch.equal(ex.source, examples[i].source)
        assert torch.equal(ex.target, examples[perm[i]].target)
        assert ex.target_pieces == examples[perm[i]].target_pieces
    assert shuffle_targets(examples, seed=5)[1] == perm
    assert shuffle_targets(examples, seed=6)[1] != perm
    assert shuffle_targets(examples[:2], seed=0)[1] == [1, 0]
    with pytest.raises(ValueError, match="at least 2 sentences"):
        shuffle_targets(examples[:1])


def test_raw_files_must_be_line_aligned(tmp_path):
    (tmp_path / "a.de").write_text("ein mann\nzwei\n")
    (tmp_path / "a.en").write_text("a man\n")
    task = types.SimpleNamespace(cfg=types.SimpleNamespace(source_lang="de", target_lang="en"))
    with pytest.raises(ValueError, match=r"a\.en has 1 lines but .*a\.de has 2"):
        examples_from_raw(task, str(tmp_path / "a.de"), str(tmp_path / "a.en"))
    with pytest.raises(FileNotFoundError, match="text file not found"):
        examples_from_raw(task, str(tmp_path / "missing.de"), str(tmp_path / "a.en"))


# ------------------------------------------------- statistics against plain loops


def per_sentence_weights(model, examples, dictionary):
    """Each example alone (no padding): {(kind, layer): [(weights (H, T, S), visible (T, S))]}."""
    out = {}
    for ex in examples:
        sample = collate(examples, [ex.index], dictionary.pad(), dictionary.eos())
        net = sample["net_input"]

        def keep(site, weights, mask=None, **_):
            visible = torch.ones(weights.shape[2:], dtype=torch.bool)
            if mask is not None:
                visible = ~mask[0, 0].expand(weights.shape[2:])
            out.setdefault((site.kind, site.layer), []).append((weights[0].clone(), visible))

        with torch.no_grad(), record_attention(model, keep):
            model(**net)
    return out


def plain_row_stats(w, visible, p_values, temperatures, normalizing):
    """One row: visible weights -> (is_zero list, null, entropy, {p: top share})."""
    x = [float(v) for v, s in zip(w.tolist(), visible.tolist()) if s]
    total = sum(x)
    null = all(v == 0 for v in x)
    entropy, tops = None, {}
    if not null:
        s_hat = [v / total for v in x]
        entropy = -sum(q * math.log(q) for q in s_hat if q > 0)
        for p in p_values:
            k = math.ceil(round(p * len(x), 9))
            tops[p] = sum(sorted(x, reverse=True)[:k]) / total
    # JS distributions over visible keys + null slot
    dists = {}
    if normalizing:
        dists[None] = x + [0.0]
    else:
        for tau in temperatures:
            if null:
                dists[tau] = [0.0] * len(x) + [1.0]
            else:
                e = [math.exp(v**tau) for v in x]
                z = sum(e)
                dists[tau] = [v / z for v in e] + [0.0]
    return [v == 0 for v in x], null, entropy, tops, dists


def plain_entropy(p):
    return -sum(q * math.log(q) for q in p if q > 0)


def reference_statistics(records, p_values, temperatures, normalizing):
    out = {}
    for key, sentences in records.items():
        heads = sentences[0][0].shape[0]
        zeros, positions, nulls, rows = [0] * heads, [0] * heads, [0] * heads, [0] * heads
        ent = [[0.0, 0] for _ in range(heads)]
        top = {p: [[0.0, 0] for _ in range(heads)] for p in p_values}
        js = {}
        js_rows = 0
        for w, visible in sentences:
            for t in range(w.shape[1]):
                per_head = []
                for h in range(heads):
                    z, null, e, tops, dists = plain_row_stats(w[h, t], visible[t], p_values, temperatures, normalizing)
                    zeros[h] += sum(z)
                    positions[h] += len(z)
                    nulls[h] += null
                    rows[h] += 1
                    if e is not None:
                        ent[h][0] += e
                        ent[h][1] += 1
                        for p in p_values:
                            top[p][h][0] += tops[p]
                            top[p][h][1] += 1
                    per_head.append(dists)
                js_rows += 1
                for name in per_head[0]:
                    ps = [d[name] for d in per_head]
                    mix = [sum(col) / heads for col in zip(*ps)]
                    value = plain_entropy(mix) - sum(plain_entropy(q) for q in ps) / heads
                    js[name] = js.get(name, 0.0) + value
        out[key] = {
            "sparsity": [zeros[h] / positions[h] for h in range(heads)],
            "null_rate": [nulls[h] / rows[h] for h in range(heads)],
            "entropy": [ent[h][0] / ent[h][1] for h in range(heads)],
            "entropy_layer": sum(e[0] for e in ent) / sum(e[1] for e in ent),
            "top_p": {p: [top[p][h][0] / top[p][h][1] for h in range(heads)] for p in p_values},
            "js": {name: v / js_rows for name, v in js.items()},
        }
    return out


@pytest.mark.parametrize("activation", ["relu", "softmax"])
def test_attention_statistics_over_padded_batches_match_per_sentence_loops(activation):
    model, d = build_model(attn_activation=activation, attn_output_norm="none", seed=4)
    examples = make_examples(d, n=7, seed=3)
    p_values, temperatures = (0.1, 0.5), (1.0, 0.5)
    stats = AttentionStatistics(model, p_values, temperatures)
    seen = run_passes(model, examples, [stats], d.pad(), d.pad(), d.eos(), batch_size=3)
    assert seen == 7
    layers = stats.layers()
    reference = reference_statistics(
        per_sentence_weights(model, examples, d), p_values, temperatures, activation == "softmax"
    )
    nulls = 0
    for (kind, layer), ref in reference.items():
        entry = [e for e in layers[kind] if e["layer"] == layer][0]
        ph = entry["per_head"]
        assert ph["sparsity"] == pytest.approx(ref["sparsity"], abs=1e-9)
        assert ph["null_rate"] == pytest.approx(ref["null_rate"], abs=1e-9)
        assert ph["entropy"] == pytest.approx(ref["entropy"], abs=1e-6)
        assert entry["entropy"] == pytest.approx(ref["entropy_layer"], abs=1e-6)
        # the layer's figures (what fsa-analyze curves plots) are the means over its heads
        assert entry["sparsity"] == pytest.approx(sum(ref["sparsity"]) / len(ref["sparsity"]), abs=1e-9)
        assert entry["null_rate"] == pytest.approx(sum(ref["null_rate"]) / len(ref["null_rate"]), abs=1e-9)
        for p in p_values:
            assert ph["top_p"][number_key(p)] == pytest.approx(ref["top_p"][p], abs=1e-6)
        if activation == "softmax":
            assert entry["js_renormalization"] == "none" and entry["js_temperatures"] is None
            assert entry["js"] == pytest.approx(ref["js"][None], abs=1e-6)
            assert entry["sparsity"] == 0 and entry["null_rate"] == 0
        else:
            assert entry["js_renormalization"] == "power"
            for tau in temperatures:
                assert entry["js_temperatures"][number_key(tau)] == pytest.approx(ref["js"][tau], abs=1e-6)
            assert entry["js"] == entry["js_temperatures"]["1"]
        nulls += sum(ph["null_rate"])
    if activation == "relu":
        assert nulls > 0  # the comparison covered null rows


def test_negative_weights_leave_entropy_top_p_and_power_js_undefined():
    model, d = build_model(attn_activation="leaky_relu", attn_output_norm="none", seed=4)
    examples = make_examples(d, n=4)
    stats = AttentionStatistics(model, (0.5,), (1.0,), js_mode="power")
    run_passes(model, examples, [stats], d.pad(), d.pad(), d.eos(), batch_size=2)
    entry = stats.layers()["cross"][0]
    assert entry["entropy"] is None and entry["top_p"] == {"0.5": None}
    assert entry["js_temperatures"] == {"1": None} and "negative weights" in entry["undefined"]
    stats = AttentionStatistics(model, (0.5,), (1.0,), js_mode="divide")
    run_passes(model, examples, [stats], d.pad(), d.pad(), d.eos(), batch_size=2)
    assert stats.layers()["cross"][0]["js"] is not None


def test_ffn_statistics_pool_real_positions_only():
    model, d = build_model(seed=5)
    examples = make_examples(d, n=5, seed=1)
    ffn = FFNStatistics(model, (0.25,))
    run_passes(model, examples, [ffn], d.pad(), d.pad(), d.eos(), batch_size=4)
    # reference: every sentence alone (no padding), vectors concatenated
    kept = {}
    names = {id(m): n for n, m in model.named_modules()}
    with torch.no_grad(), collect("ffn") as records:
        for ex in examples:
            model(**collate(examples, [ex.index], d.pad(), d.eos())["net_input"])
    for layer, inter in records:
        entry = kept.setdefault(names[id(layer)], {"res": [], "out": [], "rows": []})
        entry["res"].append(inter.residual[:, 0])
        entry["out"].append(inter.ffn_output[:, 0])
        entry["rows"].append(inter.rows[:, 0])
    results = {r["name"]: r for r in ffn.results()}
    assert sorted(results) == sorted(kept) and len(results) == 4
    layers = dict(model.named_modules())
    for name, entry in kept.items():
        r = results[name]
        expected = variance_ratio(torch.cat(entry["out"]), torch.cat(entry["res"]))
        assert r["variance_ratio"] == pytest.approx(expected, rel=1e-5)
        assert r["top_p_mass"]["0.25"] == pytest.approx(top_p_mass(torch.cat(entry["rows"]), 0.25), rel=1e-5)
        assert r["anisotropy_keys"] == pytest.approx(anisotropy(layers[name].fc1.weight.detach()))
        assert r["anisotropy_values"] == pytest.approx(anisotropy(layers[name].fc2.weight.detach().t()))
        assert r["side"] == name.split(".")[0] and r["layer"] == int(name.split(".")[-1])


# ------------------------------------------------------- null rate per sentence


def test_null_rate_per_sentence_by_hand():
    # 2 sentences, 2 heads, 3 target rows (sentence 1: last row is padding), 3 keys
    # (sentence 0: key 0 is padding)
    w = torch.zeros(2, 2, 3, 3)
    w[0, 0, 0, 1] = 0.5  # s0 h0 row0 not null
    w[0, 0, 1, 0] = 0.9  # s0 h0 row1: weight only on the hidden key -> null
    w[0, 1, 2, 2] = 0.1  # s0 h1 row2 not null
    w[1, 0, :2, 0] = 1.0  # s1 h0 rows 0, 1 not null
    w[1, 1, 2, 1] = 1.0  # s1 h1 row2 is a padding query: not counted
    mask = torch.zeros(2, 1, 1, 3, dtype=torch.bool)
    mask[0, 0, 0, 0] = True
    collector = NullRatePerSentence()
    tpad = torch.tensor([[False, False, False], [False, False, True]])
    collector.set_batch(Batch(mask[:, 0, 0], tpad, None, None, ids=[7, 3]))
    site = AttentionSite("cross", 0, "decoder.layers.0.encoder_attn", 2)
    collector.collect(site, Intermediates(weights=w, mask=mask))
    collector.collect(
        AttentionSite("decoder_self", 0, "x", 2), Intermediates(weights=torch.ones(2, 2, 3, 3))
    )  # ignored
    # s0 (id 7): 6 rows, non-null: (h0,r0), (h1,r2) -> 4 null; s1 (id 3): 4 rows, 2 null
    assert collector.rates() == {7: pytest.approx(4 / 6), 3: pytest.approx(2 / 4)}
    collector.collect(
        AttentionSite("cross", 1, "decoder.layers.1.encoder_attn", 2), Intermediates(weights=torch.ones(2, 2, 3, 3))
    )
    # a second layer with no null row: s0 4 of 12, s1 2 of 8
    assert collector.rates() == {7: pytest.approx(4 / 12), 3: pytest.approx(2 / 8)}


def test_rank_by_score_order_ties_and_nan():
    scores = {4: 0.5, 1: 0.25, 2: 0.5, 0: float("nan"), 3: 0.0}
    assert rank_by_score(scores) == [(2, 0.5), (4, 0.5), (1, 0.25), (3, 0.0), (0, scores[0])]
    assert [i for i, _ in rank_by_score(scores, descending=False)] == [3, 1, 2, 4, 0]


def test_weights_recorder_crops_left_padded_sources():
    model, d = build_model(seed=1)
    src, lengths, prev = random_batch(d, bsz=3, src_len=7, tgt_len=6)
    rec = WeightsRecorder(("cross", "decoder_self"))
    full = {}
    rec.set_batch(Batch(src.eq(d.pad()), prev.eq(d.pad()), src, prev, [0, 1, 2]))

    def both(site, weights, values, mask):
        rec.collect(site, Intermediates(weights=weights, values=values, mask=mask))
        full[(site.kind, site.layer)] = weights

    with torch.no_grad(), record_attention(model, both):
        model(src, lengths, prev)
    for b in range(3):
        n_src, n_tgt = int(src[b].ne(d.pad()).sum()), int(prev[b].ne(d.pad()).sum())
        cross = rec.records[("cross", 1)][b].weights
        assert cross.shape == (4, n_tgt, n_src)
        assert torch.equal(cross, full[("cross", 1)][b][:, :n_tgt, 7 - n_src :])
        assert rec.records[("decoder_self", 0)][b].weights.shape == (4, n_tgt, n_tgt)
    assert ("encoder_self", 0) not in rec.records


# ------------------------------------------------------------------------ plots


def is_png(path):
    return Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_heatmaps_draw_the_given_matrices(tmp_path):
    from fairseq_sparse_attn.analysis.plots import attention_heatmaps

    g = torch.Generator().manual_seed(0)
    weights = [torch.rand(3, 4, generator=g) for _ in range(2)]
    norms = [torch.rand(3, 4, generator=g) * 5 for _ in range(2)]
    fig = attention_heatmaps(
        [("α", weights), ("‖αf‖", norms)],
        ["head 0", "head 1"],
        ["</s>", "a", "b"],
        ["x", "y", "z", "</s>"],
        tmp_path / "h.png",
        "t",
    )
    assert is_png(tmp_path / "h.png")
    images = [ax for ax in fig.axes if ax.images]
    assert len(images) == 4
    drawn = [torch.tensor(ax.images[0].get_array()) for ax in images]
    for got, want in zip(drawn, [weights[0], norms[0], weights[1], norms[1]]):
        torch.testing.assert_close(got.float(), want)
    assert [t.get_text() for t in images[0].get_xticklabels()] == ["x", "y", "z", "</s>"]
    with pytest.raises(ValueError, match=r"matrix of shape \(3, 4\), expected \(2 queries"):
        attention_heatmaps([("α", weights)], ["h0", "h1"], ["a", "b"], ["x", "y", "z", "w"], tmp_path / "x.png")


def test_layer_curves_and_bars_draw_the_given_values(tmp_path):
    from fairseq_sparse_attn.analysis.plots import layer_curves, real_vs_shuffled

    series = {
        "sparsity": {"softmax": [(0, 0.0), (1, 0.0)], "rela": [(0, 0.4), (1, 0.6)]},
        "aer": {"rela": [(0, 0.5), (1, None)]},
    }
    fig = layer_curves(series, tmp_path / "c.png")
    assert is_png(tmp_path / "c.png")
    ax0, ax1 = fig.axes[:2]
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax0.lines}
    assert lines == {"softmax": ([0, 1], [0.0, 0.0]), "rela": ([0, 1], [0.4, 0.6])}
    ys = list(ax1.lines[0].get_ydata())
    assert ys[0] == 0.5 and math.isnan(ys[1])
    # a label keeps its colour in every panel: "rela" alone in the AER panel was drawn in
    # the first colour, softmax's in the other panels
    colors = {(i, line.get_label()): line.get_color() for i, ax in enumerate((ax0, ax1)) for line in ax.lines}
    assert colors[(1, "rela")] == colors[(0, "rela")] != colors[(0, "softmax")]
    fig = real_vs_shuffled([0, 1], [0.1, 0.2], [0.3, 0.5], tmp_path / "b.png")
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights == pytest.approx([0.1, 0.2, 0.3, 0.5])
    with pytest.raises(ValueError, match="2 layers, 1 real"):
        real_vs_shuffled([0, 1], [0.1], [0.3, 0.5], tmp_path / "b.png")


# -------------------------------------------------------------------- CLI inputs


def test_gold_file_checks(tmp_path):
    examples = [Example(0, None, None, ["ein", "mann"], ["a", "m@@", "an"]), Example(1, None, None, ["hallo"], ["hi"])]
    gold = tmp_path / "gold.talp"
    gold.write_text("1-1 2p2\n1-1\n")
    links = cli.read_gold(str(gold), examples, 2, "DATA", "subword-nmt", False, False)
    assert links[0].sure == {(0, 0)} and links[0].possible == {(0, 0), (1, 1)}
    gold.write_text("1-1\n")
    with pytest.raises(cli.UsageError, match=r"gold\.talp: 1 lines, expected 2 \(one line per sentence pair of DATA\)"):
        cli.read_gold(str(gold), examples, 2, "DATA", "subword-nmt", False, False)
    gold.write_text("1-1 2-3\n1-1\n")  # target has 2 words ("a", "m@@ an")
    with pytest.raises(ValueError, match=r"gold\.talp:1: target index 3 in link '2-3' is out of range"):
        cli.read_gold(str(gold), examples, 2, "DATA", "subword-nmt", False, False)
    gold.write_text("0-0 1-1\n0-0\n")
    with pytest.raises(ValueError, match=r"gold\.talp:1: source index 0 .* below 1"):
        cli.read_gold(str(gold), examples, 2, "DATA", "subword-nmt", False, False)
    # zero-indexed, target-source: "1-0" = target word 1, source word 0
    assert cli.read_gold(str(gold), examples, 2, "DATA", "subword-nmt", True, True)[0].sure == {(0, 0), (1, 1)}
    gold.write_text("1-1\n1-1\n1-1\n")  # lines beyond the analysed sentences still count
    with pytest.raises(cli.UsageError, match="3 lines, expected 2"):
        cli.read_gold(str(gold), examples, 2, "DATA", "subword-nmt", False, False)
    gold.write_text("1-1\n1-1\nbad\n")
    with pytest.raises(ValueError, match=r"gold\.talp:3: bad alignment link 'bad'"):
        cli.read_gold(str(gold), examples[:1], 3, "DATA", "subword-nmt", False, False)


def stats_json(path, label_values, kind="cross"):
    entries = [
        {"layer": layer, "sparsity": v, "null_rate": v / 2, "entropy": 1.0, "js": v, "js_temperatures": None}
        for layer, v in label_values
    ]
    path.write_text(json.dumps({"command": "stats", "attention": {kind: entries}, "model": {"checkpoint": str(path)}}))
    return path


def test_curves_from_result_files(tmp_path):
    a = stats_json(tmp_path / "a.json", [(0, 0.0), (1, 0.0)])
    relu = [
        {
            "layer": 0,
            "sparsity": 0.5,
            "null_rate": 0.2,
            "entropy": 2.0,
            "js": 0.3,
            "js_temperatures": {"1": 0.3, "0.5": 0.1},
        }
    ]
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "stats.json").write_text(json.dumps({"command": "stats", "attention": {"cross": relu}}))
    (tmp_path / "b" / "align.json").write_text(
        json.dumps(
            {
                "command": "align",
                "results": [
                    {
                        "method": "weights",
                        "setting": "awi",
                        "rows": [{"layer": 0, "head": None, "aer": 0.4}, {"layer": 0, "head": 1, "aer": 0.3}],
                    }
                ],
            }
        )
    )
    out = tmp_path / "out"
    report = cli.run(["curves", f"soft={a}", str(tmp_path / "b"), "--output-dir", str(out), "--tau", "0.5"])
    assert report["series"]["js"] == {
        "soft": [{"layer": 0, "value": 0.0}, {"layer": 1, "value": 0.0}],
        "b": [{"layer": 0, "value": 0.1}],
    }
    assert report["series"]["aer"] == {"b": [{"layer": 0, "value": 0.4}]}
    assert list(report["series"]) == ["sparsity", "null_rate", "entropy", "js", "aer"]
    assert is_png(out / "curves.png")
    tsv = (out / "curves.tsv").read_text().splitlines()
    assert tsv[0] == "statistic\tlabel\tlayer\tvalue" and "aer\tb\t0\t0.4" in tsv
    odd = tmp_path / "lr=3e-3"
    odd.mkdir()
    stats_json(odd / "stats.json", [(0, 0.25)])
    assert cli.run(["curves", str(odd), f"x={odd}", "--output-dir", str(out)])["series"]["sparsity"] == {
        "lr=3e-3": [{"layer": 0, "value": 0.25}],
        "x": [{"layer": 0, "value": 0.25}],
    }
    with pytest.raises(cli.UsageError, match="--tau 0.25: b's stats were computed at"):
        cli.run(["curves", str(a), str(tmp_path / "b"), "--output-dir", str(out), "--tau", "0.25"])
    with pytest.raises(cli.UsageError, match="no input has aer"):
        cli.run(["curves", str(a), "--output-dir", str(out), "--metrics", "aer"])
    with pytest.raises(cli.UsageError, match="label 'x' is given two stats results"):
        cli.run(["curves", f"x={a}", f"x={a}", "--output-dir", str(out)])
    (tmp_path / "bad.json").write_text('{"command": "filter"}')
    with pytest.raises(cli.UsageError, match=r"bad\.json: not a result of 'fsa-analyze stats'"):
        cli.run(["curves", str(tmp_path / "bad.json"), "--output-dir", str(out)])
    (tmp_path / "broken.json").write_text('{"command": ')
    with pytest.raises(cli.UsageError, match=r"broken\.json, line 1, column 13: malformed JSON"):
        cli.run(["curves", str(tmp_path / "broken.json"), "--output-dir", str(out)])
    assert cli.main(["curves", str(tmp_path / "nothing.json"), "--output-dir", str(out)]) == 2


def test_json_output_has_no_nan(tmp_path):
    cli.write_json({"a": float("nan"), "b": [1.0, float("inf")], 3: (0.5,)}, tmp_path / "x.json")
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": None, "b": [1.0, None], "3": [0.5]}


def test_console_script_and_every_flag_documented():
    repo = Path(__file__).resolve().parents[2]
    assert '"fsa-analyze = fairseq_sparse_attn.analysis.cli:main"' in (repo / "setup.py").read_text()
    parser = cli.get_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert sorted(sub.choices) == sorted(cli.SUBCOMMANDS)
    docs = (repo / "docs" / "analysis.md").read_text()
    readme = (repo / "README.md").read_text()
    for name, subparser in sub.choices.items():
        assert f"fsa-analyze {name}" in readme and f"| `{name}` |" in docs, name
        for action in subparser._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    assert f"`{flag}" in docs or f" {flag}" in docs, (name, flag)


def test_temperatures_are_checked_when_parsed(capsys):
    """--temperatures -1 was recorded in stats.json on a softmax model, and on a ReLU model
    failed after the model and the data loaded, without naming the flag."""
    parser = cli.get_parser()
    for bad in ("-1", "0.5,0"):
        with pytest.raises(SystemExit):
            parser.parse_args(["stats", "--path", "m.pt", "--output-dir", "o", f"--temperatures={bad}"])
        assert f"argument --temperatures: every value must be > 0, got '{bad}'" in capsys.readouterr().err
    good = parser.parse_args(["stats", "data-bin", "--path", "m.pt", "--output-dir", "o", "--temperatures", "1,0.5"])
    assert good.temperatures == [1.0, 0.5]


def test_a_missing_split_is_said_once():
    """fsa-analyze --split valid printed "split 'valid' not found in D: split 'valid' not
    found in D: expected ..." (the data check's message, wrapped again)."""
    from types import SimpleNamespace

    from fairseq_sparse_attn.analysis.loading import _load_split

    def task(message):
        def load_dataset(split):
            raise FileNotFoundError(message)

        return SimpleNamespace(cfg=SimpleNamespace(data="D"), load_dataset=load_dataset)

    with pytest.raises(FileNotFoundError) as e:
        _load_split(task("split 'valid' not found in D: expected valid.en-de.en.idx"), "valid")
    assert str(e.value) == "split 'valid' not found in D: expected valid.en-de.en.idx"
    with pytest.raises(FileNotFoundError) as e:
        _load_split(task("[Errno 2] No such file: 'D/valid.bin'"), "valid")
    assert str(e.value) == "split 'valid' not found in D: [Errno 2] No such file: 'D/valid.bin'"
