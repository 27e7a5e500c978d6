"""Norm-based analysis of attention (Kobayashi et al. 2020, *Attention is Not Only a
Weight: Analyzing Transformers with Vector Norms*).

Multi-head attention without an output norm is a sum of weighted vectors (Eqs. 3, 4 and
App. A, Eqs. 7-10)::

    y_i = Σ_j Σ_h α^h_{i,j} f^h(x_j) + b^O,    f^h(x) = (x W^{V,h} + b^{V,h}) W^{O,h}

where ``W^{O,h}`` is the block of ``out_proj``'s *input* columns that head h's output
occupies (``out_proj.weight[:, h·d_h:(h+1)·d_h]``, fairseq's ``nn.Linear`` stores
``(out, in)``), and ``b^O`` (``out_proj.bias``) is left out as the paper does (App. A: a
fixed vector says nothing about token-to-token interaction).

* :func:`value_transforms` — ``f^h(x_j)`` from the recorder's value vectors
  ``v = x W^V + b^V`` (Eq. 9), ``(bsz, heads, src, embed)``;
* :func:`norm_statistics` — ``‖f^h(x_j)‖`` (§4.1), ``‖α^h_{i,j} f^h(x_j)‖ =
  |α^h_{i,j}|·‖f^h(x_j)‖`` per head (§3, Eq. 5) and the layer-level
  ``‖Σ_h α^h_{i,j} f^h(x_j)‖`` (App. A Eq. 10; §5.1's layer alignment);
* :class:`NormRecorder` — a callback for :func:`.recording.record_attention` that keeps,
  per (kind, layer), each sentence's matrices cropped to its real tokens;
* :func:`spearman`, :func:`category_spearman` — §4.2 / Table 2: Spearman's ρ between α
  and ‖f(x)‖ per category of the key token (:func:`token_category`).

The decomposition is exact only when nothing non-linear sits between the weighted sum of
the heads and ``out_proj``.  ReLA's RMSNorm / LayerNorm (and their gates) on the
concatenated heads break it: :func:`check_decomposable` refuses such modules unless
``allow_output_norm=True``, and then every norm here is that of a *pre-norm* vector (what
the heads hand to the output norm, mapped by ``out_proj``), not of a summand of the
module's output.

Heads.  Every head has a value projection, fixed-pattern heads included, so ``f^h`` is
computed for all heads.  A head listed in the module's ``masked_heads`` (test-time
ablation) is zeroed by the module *after* the recorder sees its weights: its ``f`` and
per-head ``‖αf‖`` are still computed (what it would contribute), but it is left out of
the layer-level sum, which therefore stays the module's actual output.  Heads pruned per
sentence by RHE (``--prune-redundant-heads``) are left out of that sentence's layer-level
sum the same way.  A Rel_Pos value term (``--encoder-rel-pos-values``) makes the vector a
key contributes depend on the query: :func:`check_decomposable` refuses it.
"""

import math
import string
import unicodedata
from dataclasses import dataclass
from typing import Callable, Dict, Hashable, Iterable, Iterator, List, Optional, Sequence, Tuple

import torch

from ..options import ATTENTION_KINDS as KINDS  # noqa: F401  (re-exported)
from ..subwords import strip_markers
from .recording import AttentionSite, record_attention

SPEARMAN_UNITS = ("pair", "key")

# --------------------------------------------------------------- the decomposition


def value_term_providers(module) -> List[str]:
    """Names of the module's bias providers that add a term of their own to the heads'
    weighted values (Rel_Pos with ``--encoder-rel-pos-values``)."""
    biases = getattr(module, "biases", None) or {}
    return [name for name, p in biases.items() if getattr(p, "has_value_term", False)]


def pruned_per_sentence(module) -> bool:
    """True when the module zeroes redundant heads per sentence (RHE with pruning)."""
    rhe = getattr(module, "rhe", None)
    return rhe is not None and bool(getattr(rhe, "prune", False))


def check_decomposable(module, allow_output_norm: bool = False) -> None:
    """Raise unless ``Σ_h α_h f_h`` (+ b^O) is the module's output, or the caller accepts
    norms of pre-norm vectors (``allow_output_norm=True``).

    * An output norm on the concatenated heads (ReLA): refused unless
      ``allow_output_norm``.
    * A value term of a bias provider (Rel_Pos values, Shaw et al. Eq. 3:
      ``z_i = Σ_j α_ij (v_j + a^V_{j−i})``): always refused.  The vector a key
      contributes then depends on the query (``f_i(x_j) = (v_j + a^V_{j−i}) W^O``), so
      there is no per-key ``f(x_j)`` as Kobayashi et al. define it.
    * RHE pruning (heads zeroed per sentence) is decomposable: :class:`NormRecorder`
      leaves each sentence's pruned heads out of the layer norm (read from the module's
      identifier in the same forward, returned in the attention's intermediates as ``redundant``).
    """
    for attr in ("out_proj", "num_heads", "head_dim", "embed_dim"):
        if not hasattr(module, attr):
            raise ValueError(f"norm analysis needs a multi-head attention module with "
                             f"{attr!r} (fairseq MultiheadAttention); got {type(module).__name__}")
    extra = value_term_providers(module)
    if extra:
        raise ValueError(
            f"attention module ({getattr(module, 'kind', None)}) adds the value term of "
            f"{', '.join(extra)} (--encoder-rel-pos-values: z_i = Σ_j α_ij (v_j + a^V_(j-i))) to "
            f"its heads, so the vector each key contributes depends on the query and the "
            f"output is not Σ_h α_h f_h(x_j) with a per-key f (Kobayashi et al. Eq. 10): the "
            f"norm-based analysis is not defined for it (weight-based analyses are)")
    norm = getattr(module, "output_norm_name", "none")
    if norm != "none" and not allow_output_norm:
        raise ValueError(
            f"attention module ({getattr(module, 'kind', None)}) applies the output norm "
            f"{norm!r} to the concatenated heads before out_proj, so its output is not "
            f"Σ_h α_h f_h(x) (Kobayashi et al. Eq. 10) and the norms would not be those of "
            f"its summands; pass allow_output_norm=True (--allow-output-norm) to get the norms "
            f"of the pre-norm vectors anyway")


def model_decomposition(model, kinds: Iterable[str] = KINDS, allow_output_norm: bool = False) -> bool:
    """:func:`check_decomposable` for every attention module of ``kinds``; returns True
    when the decomposition is exact (no output norm), False when only ``allow_output_norm``
    let it through."""
    exact = True
    kinds = tuple(kinds)
    for module in model.attention_modules():
        if module.kind in kinds:
            check_decomposable(module, allow_output_norm)
            exact = exact and getattr(module, "output_norm_name", "none") == "none"
    return exact


def head_output_blocks(module) -> torch.Tensor:
    """``W^{O,h}`` for every head, ``(heads, head_dim, embed)``: the transposed block of
    ``out_proj.weight`` columns ``h·d_h .. (h+1)·d_h - 1``."""
    weight = module.out_proj.weight  # (embed_out, embed_in = heads * head_dim)
    heads, d = module.num_heads, module.head_dim
    if weight.shape[1] != heads * d:
        raise ValueError(f"out_proj takes {weight.shape[1]} inputs, expected heads x head_dim "
                         f"= {heads} x {d}")
    return weight.detach().view(weight.shape[0], heads, d).permute(1, 2, 0)


def value_transforms(module, values: torch.Tensor, allow_output_norm: bool = False) -> torch.Tensor:
    """Kobayashi et al. Eq. 9: ``f^h(x_j) = (x_j W^{V,h} + b^{V,h}) W^{O,h}``, b^O excluded.

    ``values`` are the recorder's value vectors ``x W^V + b^V``, ``(bsz*heads, src,
    head_dim)`` (head-major within a sentence, as fairseq lays them out).  Returns
    ``(bsz, heads, src, embed)`` float32 (computed in float32 at least, whatever the model
    dtype).  Every head gets its ``f``, masked heads included (see the module docstring).
    """
    check_decomposable(module, allow_output_norm)
    heads, d = module.num_heads, module.head_dim
    if values.dim() != 3 or values.shape[0] % heads or values.shape[2] != d:
        raise ValueError(f"values must be (bsz*heads, src, head_dim) with heads={heads}, "
                         f"head_dim={d}; got shape {tuple(values.shape)}")
    v = values.detach().view(values.shape[0] // heads, heads, values.shape[1], d)
    dtype = torch.promote_types(v.dtype, torch.float32)
    blocks = head_output_blocks(module).to(dtype)
    return torch.einsum("bhsd,hde->bhse", v.to(dtype), blocks)


@dataclass
class NormStatistics:
    """``transformed``: ‖f^h(x_j)‖ ``(bsz, heads, src)``; ``head``: ‖α^h_{ij} f^h(x_j)‖
    ``(bsz, heads, tgt, src)``; ``layer``: ‖Σ_h α^h_{ij} f^h(x_j)‖ ``(bsz, tgt, src)``.
    float64."""

    transformed: torch.Tensor
    head: torch.Tensor
    layer: torch.Tensor


def norm_statistics(weights: torch.Tensor, f: torch.Tensor,
                    masked_heads: Sequence[int] = (),
                    head_keep: Optional[torch.Tensor] = None) -> NormStatistics:
    """The three norms of the norm-based analysis for one attention module and batch.

    ``weights`` ``(bsz, heads, tgt, src)`` (α, invisible keys 0); ``f`` ``(bsz', heads,
    src, embed)`` from :func:`value_transforms`, ``bsz'`` dividing ``bsz`` (one key copy
    per beam group is repeated).  ``masked_heads`` are left out of the layer-level sum
    (the module zeroes their output); their per-head norms are still given.  ``head_keep``
    ``(bsz, heads)`` bool does the same per sentence (False = pruned in that sentence,
    RHE pruning).

    The layer norm is computed without materializing the ``(bsz, tgt, src, embed)`` sum:
    ``‖Σ_h α_h f_h‖² = Σ_{h,g} α_h α_g ⟨f_h, f_g⟩`` with the per-key Gram matrix of the
    heads' vectors, in float64 (rounding can make a zero norm a tiny negative square,
    clamped to 0).
    """
    if weights.dim() != 4 or f.dim() != 4:
        raise ValueError(f"weights must be (bsz, heads, tgt, src) and f (bsz, heads, src, "
                         f"embed); got {tuple(weights.shape)} and {tuple(f.shape)}")
    bsz, heads, tgt, src = weights.shape
    fb, fh, fs, _ = f.shape
    if fh != heads or fs != src or bsz % fb:
        raise ValueError(f"f {tuple(f.shape)} does not match weights {tuple(weights.shape)}: "
                         f"need the same heads and src, and a batch dividing {bsz}")
    if torch.isnan(weights).any():
        raise ValueError("attention weights contain NaN")
    f = f.double()
    if fb != bsz:
        f = f.repeat_interleave(bsz // fb, dim=0)
    alpha = weights.double()
    transformed = torch.linalg.vector_norm(f, dim=-1)  # (bsz, heads, src)
    head = alpha.abs() * transformed.unsqueeze(2)
    keep = torch.ones(heads, dtype=torch.float64, device=alpha.device)
    for h in masked_heads:
        if not 0 <= int(h) < heads:
            raise ValueError(f"masked head {h} out of range for {heads} heads")
        keep[int(h)] = 0.0
    a = alpha * keep.view(1, heads, 1, 1)
    if head_keep is not None:
        if tuple(head_keep.shape) != (bsz, heads):
            raise ValueError(f"head_keep must be (bsz, heads) = ({bsz}, {heads}), got "
                             f"{tuple(head_keep.shape)}")
        a = a * head_keep.to(device=a.device, dtype=a.dtype).view(bsz, heads, 1, 1)
    gram = torch.einsum("bhse,bgse->bshg", f, f)  # (bsz, src, heads, heads)
    ag = torch.einsum("bhts,bshg->bgts", a, gram)
    layer = (ag * a).sum(dim=1).clamp(min=0).sqrt()
    return NormStatistics(transformed, head, layer)


# ------------------------------------------------------------------------ recorder


@dataclass
class SentenceNorms:
    """One sentence at one attention module, cropped to real tokens (tgt queries x src
    keys).  float32 on the CPU.

    weights ``(heads, tgt, src)``; transformed ``(heads, src)`` = ‖f^h(x_j)‖; head
    ``(heads, tgt, src)`` = ‖α f‖; layer ``(tgt, src)`` = ‖Σ_h α_h f_h‖; visible
    ``(tgt, src)`` bool (False for causally hidden keys); query_tokens / key_tokens: the
    token ids if :meth:`NormRecorder.set_batch` was given them, else None.
    """

    sentence: int  # index of the sentence in its batch
    batch: int  # running batch number (set_batch calls)
    weights: torch.Tensor
    transformed: torch.Tensor
    head: torch.Tensor
    layer: torch.Tensor
    visible: torch.Tensor
    query_tokens: Optional[torch.Tensor] = None
    key_tokens: Optional[torch.Tensor] = None
    pruned: Optional[torch.Tensor] = None  # (heads,) bool: heads pruned in this sentence (RHE)


class NormRecorder:
    """``record_attention`` callback keeping the norm-based analysis per sentence.

        norms = NormRecorder(model, kinds=("cross",))       # cross attention only
        with torch.no_grad(), record_attention(model, norms):
            norms.set_batch(src_tokens.eq(pad), prev_output_tokens.eq(pad),
                            src_tokens, prev_output_tokens)
            model(src_tokens, src_lengths, prev_output_tokens)
        norms.records[("cross", 2)][0].layer        # (tgt_len, src_len) of sentence 0

    ``records[(kind, layer)]`` is a list of :class:`SentenceNorms`, one per sentence and
    forward, in order.  Padding is cropped with the masks given to :meth:`set_batch`
    (True = padding), whatever side it is on: encoder self-attention keeps source x source,
    decoder self-attention target x target, cross attention target x source.  Only
    teacher-forced (full-sequence) passes in eval mode are supported: the recorded α are
    the weights before attention dropout.  ``kinds`` limits what is computed and kept (to
    save memory); ``allow_output_norm`` see :func:`check_decomposable`.
    """

    def __init__(self, model, kinds: Iterable[str] = KINDS, allow_output_norm: bool = False):
        self.kinds = tuple(kinds)
        bad = [k for k in self.kinds if k not in KINDS]
        if bad or not self.kinds:
            raise ValueError(f"kinds must be a non-empty subset of {KINDS}, got {self.kinds}")
        self.allow_output_norm = allow_output_norm
        self._modules = dict(model.named_modules())
        self.records: Dict[Tuple[str, int], List[SentenceNorms]] = {}
        self._padding: Optional[Dict[str, Optional[torch.Tensor]]] = None
        self._tokens: Dict[str, Optional[torch.Tensor]] = {}
        self._batches = 0

    def set_batch(self, source_padding: Optional[torch.Tensor],
                  target_padding: Optional[torch.Tensor],
                  source_tokens: Optional[torch.Tensor] = None,
                  target_tokens: Optional[torch.Tensor] = None) -> None:
        """The next forward's padding, bool ``(bsz, len)`` True = padding (None: no padding),
        and optionally its tokens (``src_tokens``, ``prev_output_tokens``), kept cropped
        with each sentence for :func:`category_spearman`."""
        for name, t in (("source_padding", source_padding), ("target_padding", target_padding),
                        ("source_tokens", source_tokens), ("target_tokens", target_tokens)):
            if t is not None and t.dim() != 2:
                raise ValueError(f"{name} must be (bsz, len), got shape {tuple(t.shape)}")
        self._padding = {"source": None if source_padding is None else source_padding.bool().cpu(),
                         "target": None if target_padding is None else target_padding.bool().cpu()}
        self._tokens = {"source": None if source_tokens is None else source_tokens.cpu(),
                        "target": None if target_tokens is None else target_tokens.cpu()}
        self._batches += 1

    def sentences(self, kind: Optional[str] = None,
                  layer: Optional[int] = None) -> Iterator[SentenceNorms]:
        """All kept sentences, optionally of one kind and/or layer (e.g. to pool layers)."""
        for (k, l), recs in sorted(self.records.items()):
            if (kind is None or k == kind) and (layer is None or l == layer):
                yield from recs

    @staticmethod
    def _sides(kind: str) -> Tuple[str, str]:
        """(query side, key side)"""
        return {"encoder_self": ("source", "source"), "decoder_self": ("target", "target"),
                "cross": ("target", "source")}[kind]

    def _valid(self, side: str, bsz: int, length: int, kind: str) -> torch.Tensor:
        pad = self._padding[side]
        if pad is None:
            return torch.ones(bsz, length, dtype=torch.bool)
        if tuple(pad.shape) != (bsz, length):
            raise ValueError(
                f"{kind} attention has bsz={bsz} and {side} length {length}, but set_batch was "
                f"given {side} padding of shape {tuple(pad.shape)}; call set_batch with this "
                f"batch's masks before each forward (teacher-forced passes only, not "
                f"incremental decoding)")
        return ~pad

    def __call__(self, site: AttentionSite, weights: torch.Tensor, values: torch.Tensor,
                 mask: Optional[torch.Tensor] = None, redundant: Optional[torch.Tensor] = None,
                 **_) -> None:
        if site.kind not in self.kinds:
            return
        if self._padding is None:
            raise ValueError("NormRecorder needs the batch's padding: call "
                             "set_batch(source_padding, target_padding) before each forward")
        module = self._modules[site.name]
        if module.training and module.dropout_module.p > 0:
            raise ValueError(f"{site.name} is in training mode with attention dropout "
                             f"{module.dropout_module.p}: the recorded weights are not the ones "
                             f"used; call model.eval() before recording norms")
        f = value_transforms(module, values, self.allow_output_norm)
        bsz, heads, tgt, src = weights.shape
        pruned = None
        if pruned_per_sentence(module):
            pruned = redundant
            if pruned is None or tuple(pruned.shape) != (bsz, heads):
                raise ValueError(
                    f"{site.name} prunes redundant heads per sentence (RHE) but the recorded "
                    f"call returned no (bsz, heads) = ({bsz}, {heads}) decision "
                    f"(redundant is {None if pruned is None else tuple(pruned.shape)}); "
                    f"the layer norm cannot leave the pruned heads out")
            pruned = pruned.detach().bool()
        stats = norm_statistics(weights, f, getattr(module, "masked_heads", ()),
                                None if pruned is None else ~pruned)
        qside, kside = self._sides(site.kind)
        qvalid = self._valid(qside, bsz, tgt, site.kind)
        kvalid = self._valid(kside, bsz, src, site.kind)
        hidden = (torch.zeros(bsz, 1, tgt, src, dtype=torch.bool) if mask is None
                  else mask.bool().cpu().expand(bsz, 1, tgt, src))
        pad_keys_seen = ~kvalid & ~hidden[:, 0].all(dim=1)  # (bsz, src)
        if pad_keys_seen.any():
            b, s = (int(i) for i in pad_keys_seen.nonzero()[0])
            raise ValueError(
                f"set_batch says key {s} of sentence {b} is padding, but the {site.kind} "
                f"attention at layer {site.layer} lets queries see it: the padding masks do "
                f"not belong to this batch")
        weights, hidden = weights.cpu(), hidden[:, 0]
        transformed, head, layer = (t.cpu() for t in (stats.transformed, stats.head, stats.layer))
        out = self.records.setdefault((site.kind, site.layer), [])
        for b in range(bsz):
            q = qvalid[b].nonzero().squeeze(1)
            k = kvalid[b].nonzero().squeeze(1)
            qt, kt = self._tokens[qside], self._tokens[kside]
            out.append(SentenceNorms(
                sentence=b, batch=self._batches,
                weights=weights[b][:, q][:, :, k].float(),
                transformed=transformed[b][:, k].float(),
                head=head[b][:, q][:, :, k].float(),
                layer=layer[b][q][:, k].float(),
                visible=~hidden[b][q][:, k],
                query_tokens=None if qt is None else qt[b, q],
                key_tokens=None if kt is None else kt[b, k],
                pruned=None if pruned is None else pruned[b].cpu(),
            ))


@torch.no_grad()
def collect_norms(model, batches, pad_idx: int, kinds: Iterable[str] = KINDS,
                  allow_output_norm: bool = False,
                  max_sentences: Optional[int] = None) -> NormRecorder:
    """Teacher-forced passes over fairseq ``batches`` (samples with ``net_input``) in eval
    mode; padding from ``pad_idx``; tokens kept for :func:`category_spearman`."""
    norms = NormRecorder(model, kinds, allow_output_norm)
    model.eval()
    seen = 0
    with record_attention(model, norms):
        for sample in batches:
            net_input = sample["net_input"]
            src, prev = net_input["src_tokens"], net_input["prev_output_tokens"]
            norms.set_batch(src.eq(pad_idx), prev.eq(pad_idx), src, prev)
            model(**net_input)
            seen += src.size(0)
            if max_sentences is not None and seen >= max_sentences:
                break
    return norms


# ------------------------------------------------------------------------ Spearman


def average_ranks(x: torch.Tensor) -> torch.Tensor:
    """1-based ranks of a 1-D tensor, ties sharing the average of their positions
    (``[10, 20, 20, 5] -> [2, 3.5, 3.5, 1]``), float64."""
    if x.dim() != 1:
        raise ValueError(f"average_ranks takes a 1-D tensor, got shape {tuple(x.shape)}")
    x = x.double()
    if torch.isnan(x).any():
        raise ValueError("cannot rank NaN values")
    n = x.numel()
    order = torch.argsort(x, stable=True)
    ordered = x[order]
    starts = torch.ones(n, dtype=torch.bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    group = starts.cumsum(0) - 1
    positions = torch.arange(1, n + 1, dtype=torch.float64)
    sums = torch.zeros(int(group[-1]) + 1 if n else 0, dtype=torch.float64).index_add_(0, group, positions)
    counts = torch.bincount(group).double()
    ranks = torch.empty(n, dtype=torch.float64)
    ranks[order] = (sums / counts)[group]
    return ranks


def spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    """Spearman's ρ: the Pearson correlation of the average ranks of ``x`` and ``y``
    (ties averaged).  ``nan`` with fewer than 2 pairs or when either side is constant."""
    x, y = torch.as_tensor(x).flatten(), torch.as_tensor(y).flatten()
    if x.numel() != y.numel():
        raise ValueError(f"spearman needs paired values, got {x.numel()} and {y.numel()}")
    if x.numel() < 2:
        return math.nan
    rx, ry = average_ranks(x), average_ranks(y)
    dx, dy = rx - rx.mean(), ry - ry.mean()
    denominator = math.sqrt(float((dx * dx).sum()) * float((dy * dy).sum()))
    if denominator == 0:
        return math.nan
    return float((dx * dy).sum()) / denominator


@dataclass(frozen=True)
class CategoryCorrelation:
    """Spearman's ρ between α and ‖f(x)‖ over ``count`` values of one key category."""

    rho: float
    count: int


_PUNCTUATION = set(string.punctuation)


def token_category(symbol: str, eos: str = "</s>") -> str:
    """``"eos"`` for the end-of-sentence symbol, ``"punctuation"`` for a token made only of
    punctuation characters (Unicode category P*, or ASCII punctuation; subword markers
    ``@@`` and ``▁`` ignored), ``"other"`` for everything else (NMT analogues of
    Kobayashi et al.'s [SEP]/[CLS], "comma & period" and "others")."""
    if symbol == eos:
        return "eos"
    core = strip_markers(symbol)
    if core and all(c in _PUNCTUATION or unicodedata.category(c).startswith("P") for c in core):
        return "punctuation"
    return "other"


def dictionary_categorizer(dictionary, categorize: Callable[[str], Hashable] = token_category):
    """Token id -> category through a fairseq ``Dictionary``'s symbols."""
    return lambda token: categorize(dictionary[int(token)])


def category_values(sentences: Iterable[SentenceNorms], categorize: Callable[[int], Hashable],
                    unit: str = "pair") -> Dict[Hashable, Tuple[torch.Tensor, torch.Tensor]]:
    """The (α, ‖f(x)‖) values :func:`category_spearman` correlates, per key category.

    * ``unit="pair"``: one value per head h, real query i and key j *visible* to i:
      ``(α^h_{ij}, ‖f^h(x_j)‖)`` (zero weights of ReLU heads included; causally hidden
      keys are not attention decisions and are skipped);
    * ``unit="key"``: one value per head h and key j: ``(mean_i α^h_{ij}, ‖f^h(x_j)‖)``,
      the mean over the real queries that see j (Kobayashi App. D.1 ``Weight(p,q,ℓ,h)``;
      keys no query sees are skipped).
    """
    if unit not in SPEARMAN_UNITS:
        raise ValueError(f"unit must be one of {SPEARMAN_UNITS}, got {unit!r}")
    alphas: Dict[Hashable, List[torch.Tensor]] = {}
    norms: Dict[Hashable, List[torch.Tensor]] = {}
    for n, rec in enumerate(sentences):
        if rec.key_tokens is None:
            raise ValueError(f"sentence {n} has no key tokens: give set_batch the tokens "
                             f"(source_tokens, target_tokens) to categorize keys")
        labels = [categorize(int(t)) for t in rec.key_tokens]
        visible = rec.visible.unsqueeze(0).expand_as(rec.weights)
        for label in set(labels):
            cols = torch.tensor([j for j, l in enumerate(labels) if l == label], dtype=torch.long)
            w = rec.weights[:, :, cols].double()  # (heads, tgt, k)
            vis = visible[:, :, cols]
            fn = rec.transformed[:, cols].double().unsqueeze(1).expand_as(w)
            if unit == "pair":
                a, f = w[vis], fn[vis]
            else:
                seen = vis.sum(dim=1)  # (heads, k)
                keep = seen > 0
                a = ((w * vis).sum(dim=1) / seen.clamp(min=1))[keep]
                f = rec.transformed[:, cols].double()[keep]
            alphas.setdefault(label, []).append(a.reshape(-1))
            norms.setdefault(label, []).append(f.reshape(-1))
    return {label: (torch.cat(alphas[label]), torch.cat(norms[label])) for label in alphas}


def category_spearman(sentences: Iterable[SentenceNorms], categorize: Callable[[int], Hashable],
                      unit: str = "pair") -> Dict[Hashable, CategoryCorrelation]:
    """Kobayashi et al. §4.2 / Table 2: per category of the key token, Spearman's ρ
    between the attention weight α and ‖f(x)‖, pooled over everything passed in
    (sentences, and the heads and layers they come from: chain the records of several
    layers to pool them, as the paper pools all layers and heads).

    ``categorize`` maps a key token id to a label (see :func:`dictionary_categorizer`,
    :func:`token_category`).  ``unit="pair"`` (default) correlates every (query, key,
    head) pair — what Table 2's counts ("number of vectors", one per query per head for
    each key token) and Fig. 5 ("a pair of α_{i,j} and ‖f(x_j)‖") use; ``unit="key"``
    first averages α over the queries, as App. D.2's text describes.  See
    :func:`category_values`.
    """
    return {label: CategoryCorrelation(spearman(a, f), int(a.numel()))
            for label, (a, f) in category_values(sentences, categorize, unit).items()}
