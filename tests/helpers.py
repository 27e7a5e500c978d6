"""Small builders shared by the tests."""

import torch


def make_dictionary(n_symbols=20):
    from fairseq_sparse_attn.models.standalone import synthetic_dictionary

    return synthetic_dictionary(n_symbols)


TINY = dict(
    encoder_embed_dim=16,
    encoder_ffn_embed_dim=32,
    encoder_layers=2,
    encoder_attention_heads=4,
    decoder_embed_dim=16,
    decoder_ffn_embed_dim=32,
    decoder_layers=2,
    decoder_attention_heads=4,
    dropout=0.0,
    attention_dropout=0.0,
    max_source_positions=64,
    max_target_positions=64,
    share_all_embeddings=False,
)


def model_args(arch="sparse_transformer", **overrides):
    """Namespace for a tiny model, filled by the named architecture like fairseq does
    (an override of None leaves that value to the architecture)."""
    from fairseq_sparse_attn.models.standalone import architecture_args

    return architecture_args(arch, **{**TINY, **overrides})


def build_model(arch="sparse_transformer", seed=0, dictionary=None, **overrides):
    import fairseq_sparse_attn.plugin  # noqa: F401
    from fairseq_sparse_attn.models.standalone import build_standalone_model

    dictionary = dictionary or make_dictionary()
    torch.manual_seed(seed)
    model = build_standalone_model(dictionary, arch, **{**TINY, **overrides})
    return model.eval(), dictionary


def random_batch(dictionary, bsz=3, src_len=7, tgt_len=6, seed=1, left_pad_source=True):
    """src_tokens (left-padded as fairseq's default), lengths, prev_output_tokens (right-padded)."""
    g = torch.Generator().manual_seed(seed)
    nspecial = dictionary.nspecial
    lengths = torch.tensor([src_len] + [max(2, src_len - 2 - i) for i in range(bsz - 1)])
    src = torch.full((bsz, src_len), dictionary.pad())
    for b, n in enumerate(lengths.tolist()):
        toks = torch.randint(nspecial, len(dictionary), (n,), generator=g)
        toks[-1] = dictionary.eos()
        if left_pad_source:
            src[b, src_len - n :] = toks
        else:
            src[b, :n] = toks
    tgt_lengths = [tgt_len] + [max(2, tgt_len - 1 - i) for i in range(bsz - 1)]
    prev = torch.full((bsz, tgt_len), dictionary.pad())
    for b, n in enumerate(tgt_lengths):
        prev[b, 0] = dictionary.eos()
        prev[b, 1:n] = torch.randint(nspecial, len(dictionary), (n - 1,), generator=g)
    return src, lengths, prev


def plain_relu_attention(q, k, v, hidden, gamma=None):
    """sum_j relu(q_i . k_j) [/ (gamma sqrt(n_i / 2))] v_j over the visible keys (hidden:
    bool (B|1, 1, T|1, S), True = not visible, or None), written out in float64: the
    reference of the fused and query-block ReLU paths."""
    import math

    out = torch.zeros(q.shape[:3] + (v.size(-1),), dtype=torch.float64)
    for b in range(q.size(0)):
        for h in range(q.size(1)):
            for i in range(q.size(2)):
                n = 0
                for j in range(k.size(2)):
                    if hidden is not None and bool(
                        hidden[b if hidden.size(0) > 1 else 0, 0, i if hidden.size(2) > 1 else 0, j]
                    ):
                        continue
                    n += 1
                    s = float(q[b, h, i].double() @ k[b, h, j].double())
                    out[b, h, i] += max(s, 0.0) * v[b, h, j].double()
                if gamma is not None and n > 0:
                    out[b, h, i] /= gamma * math.sqrt(n / 2)
    return out


def attention_config(
    activation="softmax",
    output_norm="none",
    *,
    biases=(),
    rhe=None,
    kind=None,
    layer_index=None,
    init="fairseq",
    **heads,
):
    """The :class:`~fairseq_sparse_attn.attention.config.AttentionConfig` of a module built
    in a test: activation and output norm by name (or their configs), ``biases`` as
    provider names (default options) or ``(name, config)`` pairs, ``rhe`` an RHEConfig,
    ``heads`` the fields of HeadsConfig (fixed_patterns, masked_heads, ...)."""
    from fairseq_sparse_attn.attention.config import (
        ActivationConfig,
        AttentionConfig,
        BiasesConfig,
        BiasProviderConfig,
        HeadsConfig,
        OutputNormConfig,
    )

    if isinstance(activation, str):
        activation = ActivationConfig(name=activation)
    if isinstance(output_norm, str):
        output_norm = OutputNormConfig(name=output_norm)
    providers = tuple(b if isinstance(b, tuple) else (b, BiasProviderConfig()) for b in biases)
    heads = {k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in heads.items()}
    return AttentionConfig(
        kind=kind,
        layer_index=layer_index,
        activation=activation,
        output_norm=output_norm,
        heads=HeadsConfig(**heads),
        biases=BiasesConfig(providers, rhe),
        init=init,
    )


def model_size_flags(layers, dim, ffn, heads):
    """fairseq-train flags of a model size: encoder and decoder alike."""
    flags = []
    for side in ("encoder", "decoder"):
        flags += [f"--{side}-layers", str(layers), f"--{side}-embed-dim", str(dim)]
        flags += [f"--{side}-ffn-embed-dim", str(ffn), f"--{side}-attention-heads", str(heads)]
    return flags


# fsa-train flags of a tiny model (1+1 layers, d 32) trained for 2 updates: the user-error
# and trust tests only need a run that starts, saves and ends
TINY_TRAIN_ARGS = [
    *model_size_flags(layers=1, dim=32, ffn=64, heads=2),
    "--share-all-embeddings",
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--max-tokens",
    "1000",
    "--num-workers",
    "0",
    "--log-format",
    "simple",
    "--no-epoch-checkpoints",
    "--max-update",
    "2",
]


class OpLog(torch.utils._python_dispatch.TorchDispatchMode):
    """The ops dispatched below autograd, by name (``aten.mul``, ``fsa.rms_norm_fwd``)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def kernel_call(device="cuda", dtype=torch.float16, activation="relu", dropout=False, row_sums=False, grad=True,
                head_dim=64):  # fmt: skip
    """The ``attention.core.Call`` of a plain ReLU-family module's call (no weights, biases
    or head policy), as the backends' choice sees it."""
    from fairseq_sparse_attn.attention.core import Call

    return Call(activation, frozenset(), False, dropout, False, False, False, False, grad, device, row_sums,
                keys=10, dtype=dtype, head_dim=head_dim)  # fmt: skip


def on_cuda_device(monkeypatch, family, triton="3.6.0"):
    """CUDA looks available and its current device is of ``family`` (a name, or a callable
    giving it at each call), with Triton ``triton`` installed (by default the version the
    recorded GPU results ran with; the kernels still run under the installed one): what
    auto's per-family decisions read, without a GPU."""
    from fairseq_sparse_attn.attention.backends import triton as tb

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(tb, "_family_of_device", lambda index: family() if callable(family) else family)
    monkeypatch.setattr(tb, "installed_triton", lambda: triton)


def make_examples(dictionary, n=7, seed=0, min_len=2, max_len=9):
    """``n`` random sentence pairs of ``fsa-analyze``'s :class:`Example` (lengths
    ``min_len``..``max_len`` before EOS), reproducible by ``seed``."""
    from fairseq_sparse_attn.analysis.loading import Example

    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        pair = []
        for _ in range(2):
            length = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
            toks = torch.randint(dictionary.nspecial, len(dictionary), (length,), generator=g)
            pair.append(torch.cat([toks, torch.tensor([dictionary.eos()])]))
        out.append(
            Example(
                i,
                pair[0],
                pair[1],
                [dictionary[int(t)] for t in pair[0][:-1]],
                [dictionary[int(t)] for t in pair[1][:-1]],
            )
        )
    return out
