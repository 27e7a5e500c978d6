"""--checkpoint-activations for every preset: a training step (loss and every gradient)
is the same with and without it, including the presets whose per-batch inputs used to
reach the attention as module attributes (word patterns, DEA/LPEA, RHE) and the
ReLUFormer criterion whose loss is built from returned intermediates."""

import argparse
import math

import pytest
import torch
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion
from fairseq.data import Dictionary
from fairseq.logging import metrics

from fairseq_sparse_attn.criterions.relu_regularized import ReLURegularizedCriterion
from fairseq_sparse_attn.models.architectures import PRESET_NAMES

from helpers import build_model, random_batch

SIZE = dict(
    encoder_attention_heads=8,
    decoder_attention_heads=4,
    encoder_embed_dim=32,
    decoder_embed_dim=32,
    encoder_ffn_embed_dim=32,
    decoder_ffn_embed_dim=32,
)


def bpe_dictionary():
    """Symbols with and without the '@@' continuation mark (word patterns see words)."""
    d = Dictionary()
    for i in range(10):
        d.add_symbol(f"w{i}")
        d.add_symbol(f"p{i}@@")
    return d


def annotations(src, pad):
    from test_rhe import batch_annotations  # random symmetric src_dep / src_rp of a batch

    return batch_annotations(src, pad)


# every named preset, plus the flag-only configurations refused before
CONFIGS = [(arch, {}) for arch in PRESET_NAMES] + [
    ("sparse_transformer", dict(encoder_syntax_attention="dea")),
    ("sparse_transformer", dict(encoder_syntax_attention="lpea", encoder_bias_layers="all")),
    ("sparse_transformer", dict(encoder_rel_pos_k=2, encoder_rel_pos_values=True, encoder_localness=True)),
    ("rhe_transformer_wmt_en_de", dict(encoder_syntax_attention="dea", rhe_layers="0,1")),
    ("rela_transformer_wmt_en_de", dict(encoder_masked_heads="1,2")),
]


def criterion_for(arch, dictionary):
    task = argparse.Namespace(target_dictionary=dictionary)
    if arch.startswith("reluformer"):
        return ReLURegularizedCriterion(task, False, 0.1, relu_reg_lambda=0.5)
    return LabelSmoothedCrossEntropyCriterion(task, False, 0.1)


def step(model, criterion, sample):
    model.zero_grad()
    with metrics.aggregate() as agg:
        loss, _, log = criterion(model, sample)
        loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    logged = {k: (m.count, float(m.avg)) for k, m in agg.items() if k.startswith("rhe_")}
    return loss.detach(), grads, log, logged


@pytest.mark.parametrize("arch,flags", CONFIGS, ids=[a + "".join(f"+{k}" for k in f) for a, f in CONFIGS])
def test_training_step_same_with_checkpoint_activations(arch, flags):
    d = bpe_dictionary()
    kw = dict(SIZE, **flags, dictionary=d, dropout=0.0, attention_dropout=0.0)
    plain, _ = build_model(arch, **kw)
    ckpt, _ = build_model(arch, checkpoint_activations=True, **kw)
    assert hasattr(ckpt.encoder.layers[0], "precheckpoint_forward")
    ckpt.load_state_dict(plain.state_dict())
    assert list(ckpt.state_dict()) == list(plain.state_dict())  # same keys
    src, lengths, prev = random_batch(d, bsz=3, src_len=7, tgt_len=6)
    net_input = {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev}
    if plain.encoder._needs_annotations:
        net_input["src_dep"], net_input["src_rp"] = annotations(src, d.pad())
    target = torch.cat([prev[:, 1:], torch.full((3, 1), d.eos())], dim=1)
    target[prev.eq(d.pad())] = d.pad()
    sample = {"net_input": net_input, "target": target, "ntokens": int(target.ne(d.pad()).sum()), "nsentences": 3}
    results = []
    for model in (plain.train(), ckpt.train()):
        results.append(step(model, criterion_for(arch, d), sample))
    (loss1, g1, log1, rhe1), (loss2, g2, log2, rhe2) = results
    torch.testing.assert_close(loss2, loss1, atol=1e-6, rtol=1e-6)
    assert set(g1) == set(g2) and g1
    for name in g1:
        torch.testing.assert_close(g2[name], g1[name], atol=1e-6, rtol=1e-5, msg=name)
    if arch.startswith("reluformer"):
        assert log1["reg_loss"] > 0
        torch.testing.assert_close(log2["reg_loss"], log1["reg_loss"], atol=1e-6, rtol=1e-6)
    # RHE's redundant fraction: logged once per forward (not again by the recomputation)
    assert rhe1.keys() == rhe2.keys()
    for key, (count, avg) in rhe1.items():
        assert rhe2[key][0] == count == 3 * 8
        assert math.isclose(rhe2[key][1], avg, rel_tol=1e-6)
    if plain.has_rhe:
        assert rhe1


def test_seeded_dropout_step_same_with_checkpoint_activations():
    """With dropout, the recomputation replays the forward's random state."""
    d = bpe_dictionary()
    kw = dict(SIZE, dictionary=d, dropout=0.3, attention_dropout=0.2)
    arch = "rela_transformer_wmt_en_de"
    plain, _ = build_model(arch, **kw)
    ckpt, _ = build_model(arch, checkpoint_activations=True, **kw)
    ckpt.load_state_dict(plain.state_dict())
    src, lengths, prev = random_batch(d)
    out = []
    for model in (plain.train(), ckpt.train()):
        torch.manual_seed(5)
        model.zero_grad()
        x, _ = model(src, lengths, prev)
        x.pow(2).mean().backward()
        out.append((x.detach(), [p.grad.clone() for p in model.parameters()]))
    torch.testing.assert_close(out[1][0], out[0][0], atol=1e-6, rtol=1e-6)
    for a, b in zip(out[0][1], out[1][1]):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)
