"""Small builders shared by the tests."""

import argparse

import torch
from fairseq.data import Dictionary


def make_dictionary(n_symbols=20):
    d = Dictionary()
    for i in range(n_symbols):
        d.add_symbol(f"w{i}")
    return d


class TinyTask:
    def __init__(self, dictionary):
        self.source_dictionary = dictionary
        self.target_dictionary = dictionary


def model_args(arch="sparse_transformer", **overrides):
    """Namespace for a tiny model, filled by the named architecture like fairseq does."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    args = argparse.Namespace(
        encoder_embed_dim=16, encoder_ffn_embed_dim=32, encoder_layers=2,
        encoder_attention_heads=4, decoder_embed_dim=16, decoder_ffn_embed_dim=32,
        decoder_layers=2, decoder_attention_heads=4, dropout=0.0, attention_dropout=0.0,
        max_source_positions=64, max_target_positions=64, share_all_embeddings=False,
    )
    for k, v in overrides.items():  # None = leave it to the architecture
        if v is None:
            delattr(args, k)
        else:
            setattr(args, k, v)
    ARCH_CONFIG_REGISTRY[arch](args)
    return args


def build_model(arch="sparse_transformer", seed=0, dictionary=None, model_cls=None, **overrides):
    import fairseq_sparse_attn  # noqa: F401
    from fairseq_sparse_attn.models import SparseTransformerModel

    dictionary = dictionary or make_dictionary()
    torch.manual_seed(seed)
    cls = model_cls or SparseTransformerModel
    model = cls.build_model(model_args(arch, **overrides), TinyTask(dictionary))
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
            src[b, src_len - n:] = toks
        else:
            src[b, :n] = toks
    tgt_lengths = [tgt_len] + [max(2, tgt_len - 1 - i) for i in range(bsz - 1)]
    prev = torch.full((bsz, tgt_len), dictionary.pad())
    for b, n in enumerate(tgt_lengths):
        prev[b, 0] = dictionary.eos()
        prev[b, 1:n] = torch.randint(nspecial, len(dictionary), (n - 1,), generator=g)
    return src, lengths, prev
