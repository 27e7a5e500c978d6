"""Op count of one training step (issues 22.1, 31.5): the number of aten ops dispatched by
the forward + backward of every preset, against stock fairseq's own ``transformer``
architecture at the same ``attention_dropout``, counted with a ``TorchDispatchMode`` (every
op that reaches the dispatcher below autograd: kernels, views, in-place updates,
reductions; the optimizer step is not counted).

A GPU step of these small models waits on Python and kernel launches, so fewer ops is
what makes a preset as fast as softmax there; the count is deterministic, so CI holds it
on a CPU (never a timing).  Counted at the settings users run: ``attention_dropout`` 0 (the
presets' default) and 0.1.  Shape: the base size's layer and head counts (6+6 layers,
8 heads, ``*_wmt_en_de``) at batch 8 x 24 tokens, with d = 64 instead of 512 (the count
does not depend on the widths: d = 64 and d = 128 give the same counts), dropout on,
cross entropy loss.  On CPU, so the CPU-only host checks (``bool(mask.any())``) are
counted.  docs/performance.md "Op count" has the table.
"""

import collections
import contextlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from helpers import build_model, make_dictionary, random_batch

#: preset -> (architecture, overrides)
PRESETS = {
    "softmax": ("softmax_transformer_wmt_en_de", {}),
    "rela_g": ("rela_transformer_wmt_en_de", {}),
    "rela_i": ("rela_transformer_wmt_en_de", {"attn_output_norm": "rmsnorm_i"}),
    "reluformer": ("reluformer_wmt_en_de", {}),
    "entmax15": ("entmax15_transformer_wmt_en_de", {}),
    "sparsemax": ("sparsemax_transformer_wmt_en_de", {}),
    "fixed_pattern": ("fixed_pattern_transformer_wmt_en_de", {}),
    "fixed_pattern_word": ("fixed_pattern_word_transformer_wmt_en_de", {}),
}

#: issue 31.5: every preset <= 1.10x stock's count, at both attention dropouts
TARGET = 1.10
#: issue 31.5: the ReLU family <= 1.03x stock's count, on the triton backend at both attention
#: dropouts (test_relu_family_on_triton_within_3_percent_of_stock; the kernels apply attention
#: dropout themselves since 2026-11-27), and on the eager path at 0.1 as well
TRITON_TARGET = 1.03
RELU_FAMILY = ("rela_g", "rela_i", "reluformer")
DROPOUTS = (0.0, 0.1)


class OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def train_step_ops(arch, overrides, dim=64, attention_dropout=0.1):
    """Counter of op names of one forward + backward (the second step: caches warm)."""
    d = make_dictionary(100)
    size = dict(
        encoder_embed_dim=dim,
        decoder_embed_dim=dim,
        encoder_ffn_embed_dim=2 * dim,
        decoder_ffn_embed_dim=2 * dim,
        encoder_layers=None,
        decoder_layers=None,
        encoder_attention_heads=None,
        decoder_attention_heads=None,
        dropout=0.1,
        attention_dropout=attention_dropout,
    )
    model, _ = build_model(arch, dictionary=d, **size, **overrides)
    model.train()
    assert len(model.encoder.layers) == 6 and model.encoder.layers[0].self_attn.num_heads == 8
    src, lengths, prev = random_batch(d, bsz=8, src_len=24, tgt_len=24)
    counter = None
    for step in range(2):
        counter = OpCounter() if step == 1 else None
        with counter if counter is not None else contextlib.nullcontext():
            out, _ = model(src, lengths, prev)
            loss = torch.nn.functional.cross_entropy(out.view(-1, out.size(-1)), prev.view(-1))
            loss.backward()
        model.zero_grad(set_to_none=True)
    return counter.counts


#: stock fairseq's own transformer (fairseq's TransformerModel), the baseline of issue 31.5
STOCK = ("transformer_wmt_en_de", {})


@pytest.fixture(scope="module")
def counts():
    """{attention dropout: {preset (and "stock"): Counter of op names}}."""
    return {
        p: {
            name: train_step_ops(arch, over, attention_dropout=p)
            for name, (arch, over) in {"stock": STOCK, **PRESETS}.items()
        }
        for p in DROPOUTS
    }


def test_op_count_does_not_depend_on_width():
    arch, over = PRESETS["rela_g"]
    assert sum(train_step_ops(arch, over, 32).values()) == sum(train_step_ops(arch, over, 96).values())


@pytest.mark.parametrize("attention_dropout", DROPOUTS)
def test_op_count_per_preset_within_bound_of_stock(counts, capsys, attention_dropout):
    """Every preset <= 1.10x stock fairseq's transformer at the same attention dropout; the
    ReLU family on the eager path (what auto runs where no measurement shows the kernels
    faster) <= 1.03x at 0.1 as well."""
    at = counts[attention_dropout]
    base = at["stock"]
    total = sum(base.values())
    lines = [
        f"attention_dropout {attention_dropout}",
        f"{'preset':<20}{'ops':>7}{'x stock':>11}  most added ops (vs stock transformer)",
    ]
    for name, c in at.items():
        n = sum(c.values())
        diff = sorted(((k, c[k] - base[k]) for k in set(c) | set(base) if c[k] != base[k]), key=lambda kv: -kv[1])[:6]
        lines.append(f"{name:<20}{n:>7}{n / total:>11.3f}  " + ", ".join(f"{k} {v:+d}" for k, v in diff))
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    assert total > 1000  # a real training step was counted
    for name, c in at.items():
        assert sum(c.values()) <= TARGET * total, (name, sum(c.values()), total)
    if attention_dropout > 0:
        for name in RELU_FAMILY:
            assert sum(at[name].values()) <= TRITON_TARGET * total, (name, sum(at[name].values()), total)


def test_stock_count_rises_with_attention_dropout(counts):
    """The reason both dropouts are counted: stock's own count grows at 0.1 (its fused
    attention applies dropout), so a ratio at 0.1 alone would flatter every preset."""
    assert sum(counts[0.1]["stock"].values()) > sum(counts[0.0]["stock"].values()) + 100


def test_rela_g_norm_ops_are_fewer_than_an_autograd_composite():
    """The gated RMSNorm's forward + backward dispatches fewer ops than autograd through
    the plain formula (the reason it is a custom autograd Function)."""
    from fairseq_sparse_attn.attention import build_output_norm

    norm = build_output_norm("gated_rmsnorm", 64, 8)
    z = torch.randn(24, 8, 64, requires_grad=True)
    upstream = torch.randn(24, 8, 64)
    with OpCounter() as ours:
        norm(z).backward(upstream)
    w, g = norm.weight, norm.gate_weight
    with OpCounter() as plain:
        out = z / torch.sqrt((z * z).mean(-1, keepdim=True) + 1e-8) * w * torch.sigmoid(g * z)
        out.backward(upstream)
    assert sum(ours.counts.values()) < sum(plain.counts.values())


@pytest.mark.parametrize("attention_dropout", DROPOUTS)
@pytest.mark.parametrize("preset", ["rela_g", "rela_i", "reluformer"])
def test_relu_family_on_triton_within_3_percent_of_stock(preset, attention_dropout, monkeypatch):
    """At both attention dropouts, against stock at the same one (at 0.1 the kernels apply
    the dropout themselves: one seed drawn per attention call, ``aten.randint``).
    Head dim 32 (d = 256, 8 heads: the kernels' smallest); each kernel is one custom op
    (test_triton_relu_attention.py and test_triton_output_norm.py run them through the
    interpreter and count one op per kernel), the RMS output norms included (fused on this
    backend).  The launches inside the ops are stubbed here: they sit below the dispatcher,
    so they dispatch nothing and cannot change the count, and the interpreter would take
    minutes."""
    from conftest import require_kernels

    require_kernels()
    from fairseq_sparse_attn.kernels import output_norm, relu_attention

    for kernels in (relu_attention, output_norm):
        monkeypatch.setattr(kernels, "_launch", lambda *args, **kwargs: None)
    stock = sum(train_step_ops(*STOCK, attention_dropout=attention_dropout).values())
    arch, over = PRESETS[preset]
    ops = train_step_ops(arch, {**over, "attn_backend": "triton"}, dim=256, attention_dropout=attention_dropout)
    assert ops["relu_attention_fwd"] == 18 and ops["relu_attention_bwd_dq"] == 18  # 6 + 6 + 6 attention calls
    assert ops["randint"] == (18 if attention_dropout else 0)  # the dropout seeds
    normed = 18 if preset in ("rela_g", "rela_i") else 0  # every attention call of a normed preset
    assert ops["rms_norm_fwd"] == normed and ops["rms_norm_bwd"] == normed
    assert sum(ops.values()) <= TRITON_TARGET * stock, (sum(ops.values()), stock)
