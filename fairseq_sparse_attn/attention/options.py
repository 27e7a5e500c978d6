"""Command-line flags of the attention core and their per-kind resolution.

Three attention kinds, each configurable separately; a per-kind flag overrides the
all-kinds flag:

    --attn-activation / --attn-output-norm                  all three kinds
    --encoder-self-attn-{activation,output-norm}            encoder self-attention
    --decoder-self-attn-{activation,output-norm}            decoder self-attention
    --cross-attn-{activation,output-norm}                   encoder-decoder attention
"""

from dataclasses import dataclass

from .activations import activation_names
from .output_norms import output_norm_names

ATTENTION_KINDS = ("encoder_self", "decoder_self", "cross")
# q/k/v initialisation: fairseq's MultiheadAttention.reset_parameters, or ReLA's official
# code (bzhangGo/zero); see SparseMultiheadAttention.apply_rela_official_init, docs/rela.md
ATTN_INITS = ("fairseq", "rela_official")

DEFAULTS = dict(
    attn_activation="softmax",
    attn_output_norm="none",
    entmax_alpha=1.5,
    entmax_alpha_learned=False,
    entmax_bisect_iters=50,
    leaky_relu_slope=0.01,
    attn_norm_eps=1e-8,
    relu_scale_gamma=1.0,
    relu_no_length_scale=False,
    attn_init="fairseq",
)


def add_attention_args(parser):
    """Flags without argparse defaults: architectures fill them (fairseq convention)."""
    acts, norms = activation_names(), output_norm_names()
    parser.add_argument("--attn-activation", choices=acts, metavar="NAME",
                        help=f"attention activation for all kinds: {', '.join(acts)}")
    parser.add_argument("--attn-output-norm", choices=norms, metavar="NAME",
                        help=f"norm on the concatenated heads for all kinds: {', '.join(norms)}")
    for kind, what in (("encoder-self", "encoder self-attention"),
                       ("decoder-self", "decoder self-attention"),
                       ("cross", "encoder-decoder (cross) attention")):
        parser.add_argument(f"--{kind}-attn-activation", choices=acts, metavar="NAME",
                            help=f"activation of the {what} (overrides --attn-activation)")
        parser.add_argument(f"--{kind}-attn-output-norm", choices=norms, metavar="NAME",
                            help=f"output norm of the {what} (overrides --attn-output-norm)")
    parser.add_argument("--entmax-alpha", type=float, metavar="A",
                        help="alpha of entmax_bisect (default 1.5); initial value when learned")
    parser.add_argument("--entmax-alpha-learned", action="store_true",
                        help="entmax_bisect: learn alpha per head, alpha = 1 + sigmoid(a) "
                             "(adaptively sparse transformers)")
    parser.add_argument("--entmax-bisect-iters", type=int, metavar="N",
                        help="bisection iterations of entmax_bisect (default 50)")
    parser.add_argument("--leaky-relu-slope", type=float, metavar="S",
                        help="negative slope of the leaky_relu activation (default 0.01)")
    parser.add_argument("--attn-norm-eps", type=float, metavar="EPS",
                        help="epsilon inside RMS of the (gated) RMSNorm (default 1e-8)")
    parser.add_argument("--relu-scale-gamma", type=float, metavar="G",
                        help="relu_scaled: gamma of the variance reduction factor "
                             "gamma*sqrt(n/2) (default 1.0)")
    parser.add_argument("--attn-key-block-size", type=int, metavar="N",
                        help="relu / relu_scaled: memory-bounded attention that streams over "
                             "blocks of N keys and recomputes them in backward (0 = off); "
                             "needs --attention-dropout 0; returns no attention weights")
    parser.add_argument("--attn-init", choices=ATTN_INITS,
                        help="q/k/v initialisation: fairseq (default; xavier gain 1/sqrt(2) "
                             "wherever q, k, v have the model's dimension, cross-attention "
                             "included, biases nn.Linear's) or rela_official (ReLA's code: "
                             "cross-attention q/k/v xavier gain 1, all q/k/v biases 0)")
    parser.add_argument("--relu-no-length-scale", action="store_true",
                        help="relu_scaled: drop the factor gamma*sqrt(n/2) (ReLUFormer Table 5 ablation)")


def fill_attention_defaults(args, **overrides):
    """Architecture helper: set missing attention args (``overrides`` first, then defaults)."""
    for name, value in {**DEFAULTS, **overrides}.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)


@dataclass(frozen=True)
class AttentionSpec:
    activation: str
    output_norm: str


def _lookup(cfg, name):
    try:
        return getattr(cfg, name, None)
    except AttributeError:
        return None


def attention_spec(cfg, kind: str) -> AttentionSpec:
    """Resolve activation and output norm of one attention kind from a namespace or a
    fairseq ``TransformerConfig`` (which stores ``encoder_*`` names in ``cfg.encoder``)."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"unknown attention kind {kind!r}; valid: {', '.join(ATTENTION_KINDS)}")
    activation = _lookup(cfg, f"{kind}_attn_activation") or _lookup(cfg, "attn_activation")
    norm = _lookup(cfg, f"{kind}_attn_output_norm") or _lookup(cfg, "attn_output_norm")
    return AttentionSpec(activation or DEFAULTS["attn_activation"],
                         norm or DEFAULTS["attn_output_norm"])
