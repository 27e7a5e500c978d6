"""The memory-bounded key-block ReLU path gives the plain path's outputs, gradients and
regularization terms (1e-5)."""

import pytest
import torch
from fairseq import utils

from fairseq_sparse_attn.attention import SparseMultiheadAttention
from fairseq_sparse_attn.attention.chunked_relu import chunked_relu_attention
from fairseq_sparse_attn.attention.intermediates import collect
from fairseq_sparse_attn.criterions.relu_regularized import RowTerms

from helpers import attention_config, build_model, random_batch

E, H = 16, 4


def pair(activation, block, **kw):
    torch.manual_seed(0)
    plain = SparseMultiheadAttention(E, H, config=attention_config(activation, "gated_rmsnorm"), **kw)
    chunked = SparseMultiheadAttention(E, H, config=attention_config(activation, "gated_rmsnorm"), **kw)
    chunked.load_state_dict(plain.state_dict())
    chunked.key_block_size = block
    return plain.train(), chunked.train()


def grads(module, x_list):
    return [p.grad.clone() for p in module.parameters()] + [x.grad.clone() for x in x_list]


@pytest.mark.parametrize("activation", ["relu", "relu_scaled"])
@pytest.mark.parametrize("block", [1, 3, 64])
def test_self_attention_with_causal_and_padding(activation, block):
    plain, chunked = pair(activation, block, self_attention=True)
    T, B = 7, 3
    x1 = torch.randn(T, B, E, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    pad = torch.zeros(B, T, dtype=torch.bool)
    pad[1, 5:] = True
    pad[2, 2:] = True
    future = utils.fill_with_neg_inf(torch.zeros(T, T)).triu(1)
    terms = []
    outs = []
    for m, x in ((plain, x1), (chunked, x2)):
        with collect("row_sums") as records:
            outs.append(m(x, x, x, key_padding_mask=pad, attn_mask=future))
        ((_, inter),) = records
        assert inter.backend == ("materialized" if m is plain else "key_block")
        if activation == "relu_scaled":
            col = RowTerms("decoder_self", 0.7, 1e-12, {"decoder_self": pad})
            col.add_sums(*inter.row_sums)
            terms.append(col)
        else:
            assert inter.row_sums is None  # plain relu reports no row sums
    (out1, w1), (out2, w2) = outs
    assert w2 is None
    torch.testing.assert_close(out2, out1, atol=1e-5, rtol=1e-5)
    loss1, loss2 = (out1**2).sum(), (out2**2).sum()
    if terms:
        torch.testing.assert_close(terms[1].loss, terms[0].loss, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(terms[1].stats, terms[0].stats, atol=1e-4, rtol=1e-5)
        loss1, loss2 = loss1 + 3 * terms[0].loss, loss2 + 3 * terms[1].loss
    loss1.backward()
    loss2.backward()
    for g1, g2 in zip(grads(plain, [x1]), grads(chunked, [x2])):
        torch.testing.assert_close(g2, g1, atol=1e-5, rtol=1e-4)


def test_cross_attention_and_null_rows():
    plain, chunked = pair("relu_scaled", 2, encoder_decoder_attention=True)
    with torch.no_grad():  # make some rows all-negative (null attention)
        plain.q_proj.bias[:4] = -50.0
        chunked.q_proj.bias[:4] = -50.0
    x = torch.randn(4, 2, E)
    enc1 = torch.randn(9, 2, E, requires_grad=True)
    enc2 = enc1.detach().clone().requires_grad_(True)
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[0, :3] = True
    out1, _ = plain(x, enc1, enc1, key_padding_mask=pad, static_kv=True)
    out2, _ = chunked(x, enc2, enc2, key_padding_mask=pad, static_kv=True)
    torch.testing.assert_close(out2, out1, atol=1e-5, rtol=1e-5)
    out1.sum().backward()
    out2.sum().backward()
    torch.testing.assert_close(enc2.grad, enc1.grad, atol=1e-5, rtol=1e-4)
    assert torch.isfinite(enc2.grad).all()


def test_function_against_plain_formula_by_gradcheck():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 3, 4, dtype=torch.double, requires_grad=True) for _ in range(3))
    mask = torch.zeros(1, 1, 3, 3, dtype=torch.bool)
    mask[..., 2] = True
    scale = torch.full((1, 1, 3, 1), 0.5, dtype=torch.double)

    def f(q, k, v):
        out, wsum, wlogw = chunked_relu_attention(q, k, v, mask, scale, block=2)
        return out.sum() + wsum.sum() + 0.1 * wlogw.sum()

    assert torch.autograd.gradcheck(f, (q, k, v), eps=1e-6, atol=1e-5)


def test_model_level_chunked_equals_plain_and_refuses_dropout():
    plain, d = build_model(attn_activation="relu_scaled")
    chunked, _ = build_model(attn_activation="relu_scaled", attn_key_block_size=2)
    chunked.load_state_dict(plain.state_dict())
    src, lengths, prev = random_batch(d)
    with torch.no_grad():
        a, _ = plain(src, lengths, prev)
        b, _ = chunked(src, lengths, prev)
    torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
    # refused when the model is built (argument time), not at the first forward
    with pytest.raises(ValueError, match="attention-dropout 0"):
        build_model(attn_activation="relu_scaled", attn_key_block_size=2, attention_dropout=0.1)
