"""ReLUFormer: scaled ReLU attention (n_i by hand: padding, causal, incremental) and the
regularization loss against the formula written plainly."""

import math

import pytest
import torch
from fairseq import utils

from fairseq_sparse_attn.attention import SparseMultiheadAttention, build_activation
from fairseq_sparse_attn.attention.config import ActivationConfig
from fairseq_sparse_attn.attention.intermediates import collect
from fairseq_sparse_attn.attention.scaled_relu import visible_key_counts
from fairseq_sparse_attn.criterions.relu_regularized import RowTerms, row_regularization

from helpers import attention_config, build_model, random_batch

E, H = 16, 4


def test_scaled_relu_by_hand_with_padding_and_causal_mask():
    act = build_activation(ActivationConfig("relu_scaled", relu_scale_gamma=2.0), 1)
    scores = torch.tensor([[[[1.0, -1.0, 3.0, 5.0], [2.0, 4.0, -2.0, 6.0], [0.5, 1.5, 2.5, 7.0]]]])
    causal = torch.triu(torch.ones(3, 4, dtype=torch.bool), 1).view(1, 1, 3, 4)
    pad = torch.tensor([False, False, False, True]).view(1, 1, 1, 4)
    w = act(scores, causal | pad)
    # row 0 sees key 0 (n=1); row 1 keys 0,1 (n=2); row 2 keys 0..2 (n=3, key 3 is padding)
    expected = torch.tensor(
        [
            [1.0 / (2 * math.sqrt(1 / 2)), 0, 0, 0],
            [2.0 / (2 * math.sqrt(2 / 2)), 4.0 / (2 * math.sqrt(2 / 2)), 0, 0],
            [0.5 / (2 * math.sqrt(3 / 2)), 1.5 / (2 * math.sqrt(3 / 2)), 2.5 / (2 * math.sqrt(3 / 2)), 0],
        ]
    )
    torch.testing.assert_close(w[0, 0], expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_row_factor_counts_keys_in_float32(dtype):
    """c_i = 1 / (gamma sqrt(n_i / 2)) with n_i counted and c_i computed in float32, rounded
    to the weights' dtype once: 301 visible keys of 310 (bf16 holds integers exactly only to
    256, fp16 to 2,048: counted in bf16, 301 would be 300), through the activation's
    forward and the core's masked path (``masks.row_factor``), as the Triton and key-block
    paths compute it."""
    act = build_activation(ActivationConfig("relu_scaled", relu_scale_gamma=2.0), 1)
    scores = torch.full((1, 1, 2, 310), 3.0, dtype=dtype)
    hidden = torch.zeros(1, 1, 1, 310, dtype=torch.bool)
    hidden[..., 301:] = True
    for n, mask in ((301, hidden), (310, None)):
        factor = torch.tensor(1 / (2.0 * math.sqrt(n / 2)), dtype=torch.float32).to(dtype)
        assert act(scores, mask)[0, 0, :, 0].tolist() == (scores[0, 0, :, 0] * factor).tolist()
        w = act.weights_of_hiding_scores(scores.view(1, 2, 310).masked_fill(hidden.view(1, 1, 310), 0.0)
                                         if mask is not None else scores.view(1, 2, 310), mask, 1)  # fmt: skip
        assert w.dtype == dtype and w[0, :, 0].tolist() == (scores[0, 0, :, 0] * factor).tolist()


def test_no_length_scale_ablation_is_plain_relu():
    act = build_activation(ActivationConfig("relu_scaled", relu_no_length_scale=True), 1)
    s = torch.randn(1, 1, 3, 5)
    torch.testing.assert_close(act(s, None), torch.relu(s))


def test_incremental_n_equals_teacher_forced_n():
    """Step t of incremental decoding sees t keys: the same n_i as the causal row i."""
    torch.manual_seed(0)
    m = SparseMultiheadAttention(E, H, self_attention=True, config=attention_config("relu_scaled")).eval()
    x = torch.randn(5, 2, E)
    with collect("row_sums") as records:
        full, _ = m(x, x, x, attn_mask=utils.fill_with_neg_inf(torch.zeros(5, 5)).triu(1))
    teacher_n = records[-1][1].row_sums[2].flatten().tolist()
    state = {}
    for t in range(5):
        with collect("row_sums") as records:
            out, _ = m(x[t : t + 1], x[t : t + 1], x[t : t + 1], incremental_state=state)
        assert records[-1][1].row_sums[2].flatten().tolist() == [t + 1]
        torch.testing.assert_close(out[0], full[t], atol=1e-5, rtol=1e-5)
    assert teacher_n == [1, 2, 3, 4, 5]


def plain_row_loss(row, n, c=0.7):
    s = [x for x in row]
    total = sum(s)
    p = [x / total for x in s]
    h = -sum(q * math.log(q) for q in p if q > 0)
    return abs(math.log(total)) + max(h - c * math.log(n), 0.0), h, total


def test_row_terms_against_plain_formula():
    w = torch.tensor([[[[0.2, 0.0, 0.9, 0.4], [0.0, 0.0, 0.0, 0.0], [0.05, 0.05, 0.05, 0.05]]]])
    n = torch.tensor([3.0, 4.0, 4.0]).view(1, 1, 3, 1)
    terms = row_regularization(w, n)
    for i in (0, 2):
        loss, h, total = plain_row_loss(w[0, 0, i].tolist(), n[0, 0, i, 0].item())
        assert terms["loss"][0, 0, i].item() == pytest.approx(loss, rel=1e-5)
        assert terms["entropy"][0, 0, i].item() == pytest.approx(h, rel=1e-5)
        assert terms["wsum"][0, 0, i].item() == pytest.approx(total, rel=1e-6)
    # row 2 is uniform over 4 keys: H = log 4 > 0.7 log 4, so the margin term is active
    assert terms["entropy"][0, 0, 2].item() == pytest.approx(math.log(4))
    assert terms["bound"][0, 0, 2].item() == pytest.approx(0.7 * math.log(4))
    assert terms["null"][0, 0].tolist() == [False, True, False]
    assert torch.isfinite(terms["loss"]).all() and torch.isfinite(terms["entropy"]).all()


def test_null_rows_excluded_and_gradients_finite():
    scores = torch.tensor([[[[1.0, 2.0, -1.0], [-1.0, -2.0, -3.0]]]], requires_grad=True)
    act = build_activation("relu_scaled", 1)
    qpad = {}
    col = RowTerms("encoder_self", 0.7, 1e-12, qpad)
    col(act(scores, None), visible_key_counts(scores, None))
    w = torch.relu(scores.detach())[0, 0, 0] / math.sqrt(3 / 2)
    expected, _, _ = plain_row_loss(w.tolist(), 3)
    assert col.loss.item() == pytest.approx(expected, rel=1e-5)  # mean over the 1 non-null row
    assert col.stats[4].item() == 1 and col.stats[3].item() == 1  # one null row, one used row
    col.loss.backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.all(scores.grad[0, 0, 1] == 0)


def test_query_padding_rows_are_excluded():
    act = build_activation("relu_scaled", 1)
    col = RowTerms("encoder_self", 0.7, 1e-12, {"encoder_self": torch.tensor([[False, True]])})
    scores = torch.tensor([[[[1.0, 2.0], [5.0, 0.1]]]])
    col(act(scores, None), visible_key_counts(scores, None))
    assert col.stats[3].item() == 1  # only the first (real) query row counted


@pytest.mark.parametrize("ffn", ["softmax", "softmax_layernorm"])
def test_ffn_key_value_memory_against_formula(ffn):
    model, _ = build_model(ffn_type=ffn)
    layer = model.encoder.layers[0]
    x = torch.randn(5, 16)
    with torch.no_grad():
        got = layer.fc2(layer.activation_fn(layer.fc1(x)))
        keys, values = layer.fc1.weight, layer.fc2.weight  # (slots, d), (d, slots)
        expected = torch.softmax(x @ keys.T + layer.fc1.bias, dim=-1) @ values.T + layer.fc2.bias
        if ffn == "softmax_layernorm":
            expected = torch.nn.functional.layer_norm(expected, (16,))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert "encoder.layers.0.fc2.weight" in model.state_dict()


def test_ffn_activation_rows_are_recordable():
    from fairseq_sparse_attn.attention.intermediates import collect

    model, d = build_model(ffn_type="softmax")
    src, lengths, prev = random_batch(d)
    with torch.no_grad(), collect("ffn") as records:
        model(src, lengths, prev)
    encoder = list(model.encoder.layers)
    rows = [inter.rows for layer, inter in records if any(layer is e for e in encoder)]
    assert len(rows) == 2
    torch.testing.assert_close(rows[0].sum(-1), torch.ones(rows[0].shape[:-1]))


def test_unknown_ffn_type():
    with pytest.raises(ValueError, match="softmax_layernorm"):
        build_model(ffn_type="gelu_memory")


def test_reluformer_presets():
    from helpers import model_args

    drop = dict(
        encoder_embed_dim=None,
        encoder_ffn_embed_dim=None,
        encoder_attention_heads=None,
        encoder_layers=None,
        decoder_layers=None,
        decoder_attention_heads=None,
        decoder_embed_dim=None,
        decoder_ffn_embed_dim=None,
    )
    a = model_args("reluformer_iwslt_de_en", **drop)
    assert (
        a.attn_activation,
        a.encoder_layers,
        a.decoder_layers,
        a.encoder_attention_heads,
        a.encoder_embed_dim,
        a.encoder_ffn_embed_dim,
    ) == ("relu_scaled", 6, 6, 4, 512, 1024)
    b = model_args("reluformer_wmt_en_de", **drop)
    assert (b.attn_activation, b.encoder_attention_heads, b.encoder_ffn_embed_dim) == ("relu_scaled", 8, 2048)


def test_layers_have_no_hooks_until_a_scope_asks_for_ffn_calls():
    """Training never opens a collect("ffn") scope, so its layers stay hook-free (a hooked
    module takes nn.Module's slow call path: host time of every step); the first forward
    inside such a scope hooks each layer once, and a deep copy of a hooked model delivers
    too."""
    import copy

    from fairseq_sparse_attn.attention.intermediates import collect

    model, d = build_model(ffn_type="softmax_layernorm")
    src, lengths, prev = random_batch(d)

    def hooked():
        return [n for n, m in model.named_modules() if m._forward_hooks or m._forward_pre_hooks]

    model.train()
    model(src, lengths, prev)[0].sum().backward()
    with collect("row_sums"):
        model(src, lengths, prev)
    assert hooked() == []
    model.eval()
    for _ in range(2):
        with torch.no_grad(), collect("ffn") as records:
            model(src, lengths, prev)
        assert len(records) == 4 and len(hooked()) == 3 * 4  # three hooks per layer, installed once
    twin = copy.deepcopy(model)
    with torch.no_grad(), collect("ffn") as records:
        twin(src, lengths, prev)
    twin_layers = {id(m) for m in twin.modules()}
    assert len(records) == 4 and all(id(layer) in twin_layers for layer, _ in records)


def test_ffn_analysis_hooks_against_direct_computation():
    """collect("ffn"): one record per FFN call of each layer, against the block computed
    directly; outside a scope that asks for "ffn" nothing is recorded."""
    from fairseq_sparse_attn.analysis.ffn_stats import anisotropy, top_p_mass, variance_ratio
    from fairseq_sparse_attn.attention.intermediates import FFNIntermediates, collect
    from fairseq_sparse_attn.models import ffn as ffn_module

    model, d = build_model(ffn_type="softmax_layernorm")
    src, lengths, prev = random_batch(d)
    names = {id(m): n for n, m in model.named_modules()}
    with torch.no_grad(), collect("ffn") as records:
        model(src, lengths, prev)
    seen = {names[id(layer)]: vars(inter) for layer, inter in records}
    assert len(records) == 4 and sorted(seen) == [
        "decoder.layers.0",
        "decoder.layers.1",
        "encoder.layers.0",
        "encoder.layers.1",
    ]
    layer = model.encoder.layers[0]
    entry = seen["encoder.layers.0"]
    with torch.no_grad():  # post-norm layer: the FFN input is the residual stream
        direct = layer.fc2(torch.softmax(layer.fc1(entry["residual"]), dim=-1))
    torch.testing.assert_close(entry["ffn_output"], direct, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entry["rows"].sum(-1), torch.ones(entry["rows"].shape[:-1]))
    ratio = variance_ratio(entry["ffn_output"], entry["residual"])
    assert ratio == pytest.approx((direct.var() / entry["residual"].var()).item(), rel=1e-5)
    with torch.no_grad(), collect("row_sums") as other:
        model(src, lengths, prev)
    assert other and not any(isinstance(inter, FFNIntermediates) for _, inter in other)
    assert ffn_module._CALLS == {}
    # hand-computed examples
    assert anisotropy(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])) == pytest.approx((0 + 2 * (1 / 2**0.5)) / 3)
    assert top_p_mass(torch.tensor([[4.0, 3.0, 2.0, 1.0]]), 0.5) == pytest.approx(0.7)


def test_reg_lambda_0_trains_as_cross_entropy_and_logs_the_entropy_in_validation():
    """--relu-reg-lambda 0 (Table 5's "w/o reg loss" row): a training step is the plain
    label-smoothed criterion's, loss and every gradient, bit for bit, with nothing of the
    regularizer logged; a validation step has the same loss and logs the attention entropy
    per kind (what Table 5 reports for that row), the same statistics as at lambda 1."""
    import argparse

    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    from fairseq_sparse_attn.criterions.relu_regularized import ReLURegularizedCriterion

    model, d = build_model("reluformer_iwslt_de_en", dropout=0.0, attention_dropout=0.0)
    src, lengths, prev = random_batch(d)
    target = torch.cat([prev[:, 1:], torch.full((3, 1), d.eos())], dim=1)
    target[prev.eq(d.pad())] = d.pad()
    net_input = {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev}
    sample = {"net_input": net_input, "target": target, "ntokens": int(target.ne(d.pad()).sum()), "nsentences": 3}
    task = argparse.Namespace(target_dictionary=d)
    plain = LabelSmoothedCrossEntropyCriterion(task, False, 0.1)
    noreg = ReLURegularizedCriterion(task, False, 0.1, relu_reg_lambda=0.0)
    reg = ReLURegularizedCriterion(task, False, 0.1, relu_reg_lambda=1.0)

    def run(criterion, training):
        model.train(training)
        model.zero_grad()
        loss, _, log = criterion(model, sample)
        if training:
            loss.backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        return loss.detach(), grads, log

    loss, grads, log = run(plain, True)
    loss0, grads0, log0 = run(noreg, True)
    assert torch.equal(loss, loss0) and len(grads) == len(grads0) and all(map(torch.equal, grads, grads0))
    assert not any(k.startswith("reg") for k in log0)
    valid, _, vlog = run(plain, False)
    valid0, _, vlog0 = run(noreg, False)
    _, _, vlog1 = run(reg, False)
    assert torch.equal(valid, valid0) and vlog0["loss"] == vlog["loss"]
    # float(): the logged values may be 0-d tensors, which pytest >= 9.2's approx cannot take
    for kind in ("encoder_self", "decoder_self", "cross"):
        assert float(vlog0[f"reg_{kind}_entropy"]) == pytest.approx(float(vlog1[f"reg_{kind}_entropy"]), rel=1e-6)
        assert vlog0[f"reg_{kind}_rows"] > 0
    assert float(vlog0["reg_loss"]) == pytest.approx(float(vlog1["reg_loss"]), rel=1e-6)


@pytest.mark.parametrize("lam", [1.0, 0.3])
def test_the_criterion_s_total_loss_is_eq_7_written_out(lam):
    """The regularized criterion's loss minus the label-smoothed cross entropy equals
    λ · sample_size · (mean over the relu_scaled modules of the mean over real-query,
    non-null rows of |log S_i| + max(H_i − c log n_i, 0)), computed here in plain Python
    from the weights: the layer mean, the sample_size factor and the query padding of each
    kind (source padding for encoder self-attention, target padding for decoder self and
    cross attention) included; the rows logged per kind are those rows."""
    import argparse

    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    from fairseq_sparse_attn.criterions.relu_regularized import ReLURegularizedCriterion

    model, d = build_model("reluformer_iwslt_de_en", dropout=0.0, attention_dropout=0.0)
    model = model.double().eval()
    src, lengths, prev = random_batch(d, bsz=3, src_len=7, tgt_len=6)
    target = torch.cat([prev[:, 1:], torch.full((3, 1), d.eos())], dim=1)
    target[prev.eq(d.pad())] = d.pad()
    net_input = {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev}
    sample = {"net_input": net_input, "target": target, "ntokens": int(target.ne(d.pad()).sum()), "nsentences": 3}
    task = argparse.Namespace(target_dictionary=d)
    with torch.no_grad():
        ce, sample_size, _ = LabelSmoothedCrossEntropyCriterion(task, False, 0.1)(model, sample)
        total, _, log = ReLURegularizedCriterion(task, False, 0.1, relu_reg_lambda=lam)(model, sample)
        with collect("weights") as records:
            model(**net_input)
    query_padding = {"encoder_self": src.eq(d.pad()), "decoder_self": prev.eq(d.pad()), "cross": prev.eq(d.pad())}
    per_module, rows = [], {}
    for module, inter in records:
        w, hidden = inter.weights.double(), inter.mask  # (bsz, H, tgt, src), True = hidden
        n = torch.broadcast_to((~hidden).sum(-1), w.shape[:-1]) if hidden is not None else None
        pad, kind = query_padding[module.config.kind], module.config.kind
        terms = []
        for b in range(w.size(0)):
            for h in range(w.size(1)):
                for t in range(w.size(2)):
                    row = w[b, h, t].tolist()
                    s = sum(row)
                    if pad[b, t] or s == 0:
                        continue
                    entropy = -sum(x / s * math.log(x / s) for x in row if x > 0)
                    keys = w.size(-1) if n is None else int(n[b, h, t])
                    terms.append(abs(math.log(s)) + max(entropy - 0.7 * math.log(keys), 0.0))
        per_module.append(sum(terms) / len(terms))
        rows[kind] = rows.get(kind, 0) + len(terms)
    assert sorted(rows) == ["cross", "decoder_self", "encoder_self"] and len(per_module) == 6  # 2 layers each
    expected = lam * sample_size * sum(per_module) / len(per_module)
    assert float(total - ce) == pytest.approx(expected, rel=1e-6)
    assert {k: log[f"reg_{k}_rows"] for k in rows} == rows
