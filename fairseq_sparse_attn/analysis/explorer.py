"""The data of the attention explorer (``fsa-analyze explore``, rendered by
:mod:`.explorer_html`), and :func:`bertviz_inputs` for notebooks.

One teacher-forced pass per batch records, for every sentence, every layer and head of
the three attention kinds (0-based layers and heads, as everywhere in ``fsa-analyze``):

* the weights α ``(heads, queries, keys)``, cropped to the sentence's real tokens;
* ‖f^h(x_j)‖ ``(heads, keys)`` (:func:`.norms.value_transforms`), from which the viewer
  draws Kobayashi et al.'s ‖α f(x)‖ = |α_ij|·‖f^h(x_j)‖ (:func:`.norms.norm_statistics`
  computes the same product); ``None`` for a kind whose norms are not defined (a Rel_Pos
  value term, :func:`.norms.check_decomposable`).  Behind an output norm (ReLA) they are
  the norms of the pre-norm vectors, and the data says so (``norms_exact``);
* per head, the rows whose weights are all zero (null rows: ReLA, ReLUFormer) and the
  share of exact zeros among the visible (query, key) pairs (sparsity);
* the tokens: the source pieces + ``</s>`` (encoder queries and keys, cross keys), the
  decoder inputs ``</s>`` + target pieces (decoder queries and keys, cross queries:
  row r predicts target token r), and their words (:func:`fairseq_sparse_attn.subwords.word_index`,
  ``</s>`` a word of its own) for the word view.

Storage, to keep the HTML small: α as integers in 1/:data:`WEIGHT_SCALE` (an exact zero
stays 0, a non-zero weight that would round to 0 is stored as ±1, so a stored 0 means
exactly zero), ‖f‖ to :data:`NORM_DIGITS` significant digits.  The word view is computed
by the viewer with the rule of :func:`.alignment.merge_subwords` (Kobayashi et al. App. E.2):
mean over the query pieces of a word, sum over the key pieces of a word.
"""

from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ..attention.config import ATTENTION_KINDS as KINDS
from ..attention.intermediates import Intermediates
from ..subwords import uncertain_boundaries, word_index, words
from .norms import NormRecorder, check_decomposable
from .recording import AttentionSite, Batch, Collector

WEIGHT_SCALE = 1000
NORM_DIGITS = 4
EOS = "</s>"


# ---------------------------------------------------------------- what the model is


def fixed_heads(model) -> Dict[str, Dict[int, Dict[int, str]]]:
    """``{kind: {layer: {head: pattern name}}}`` of the fixed-pattern heads (heads 0..F-1
    of a module built with fixed patterns, :mod:`fairseq_sparse_attn.attention.heads`)."""
    from .recording import attention_sites

    modules = dict(model.named_modules())
    out: Dict[str, Dict[int, Dict[int, str]]] = {}
    for site in attention_sites(model):
        patterns = tuple(getattr(modules[site.name], "fixed_patterns", ()) or ())
        if patterns:
            out.setdefault(site.kind, {})[site.layer] = dict(enumerate(patterns))
    return out


def norm_support(model) -> Dict[str, Tuple[bool, bool, str]]:
    """``{kind: (norms defined, exact, note)}``: norms are defined unless a module of the
    kind has a value term; exact unless it has an output norm (then they are the norms of
    the pre-norm vectors)."""
    out = {}
    for kind in KINDS:
        modules = [m for m in model.attention_modules() if m.config.kind == kind]
        try:
            for m in modules:
                check_decomposable(m, allow_output_norm=True)
        except ValueError as e:
            out[kind] = (False, False, f"‖αf(x)‖ is not defined here: {e}")
            continue
        norms = sorted({m.config.output_norm.name for m in modules} - {"none"})
        if norms:
            out[kind] = (
                True,
                False,
                f"output norm {', '.join(norms)} on the concatenated heads: ‖αf(x)‖ of the pre-norm vectors",
            )
        else:
            out[kind] = (True, True, "")
    return out


def module_info(model) -> Dict[str, Dict]:
    """``{kind: {layers, heads, activation, output_norm}}`` of the model's attention."""
    from .recording import attention_sites

    modules = dict(model.named_modules())
    out: Dict[str, Dict] = {}
    for site in attention_sites(model):
        m = modules[site.name]
        e = out.setdefault(site.kind, {"layers": 0, "heads": site.num_heads, "activation": set(), "output_norm": set()})
        e["layers"] = max(e["layers"], site.layer + 1)
        e["activation"].add(m.config.activation.name)
        e["output_norm"].add(m.config.output_norm.name)
    return {
        k: {**e, "activation": ", ".join(sorted(e["activation"])), "output_norm": ", ".join(sorted(e["output_norm"]))}
        for k, e in out.items()
    }


# ---------------------------------------------------------------------- recording


class ExplorerCollector(Collector):
    """Keeps, per example position, kind and layer: α ``(heads, q, k)`` and ‖f‖
    ``(heads, k)`` (None where norms are not defined), float32 on the CPU, cropped to real
    tokens (whichever side the padding is on)."""

    def __init__(self, model, norm_kinds: Sequence[str]):
        self.norm_kinds = tuple(norm_kinds)
        self.recorder = NormRecorder(model, self.norm_kinds, allow_output_norm=True) if self.norm_kinds else None
        self.weights: Dict[int, Dict[Tuple[str, int], torch.Tensor]] = {}
        self.f_norms: Dict[int, Dict[Tuple[str, int], torch.Tensor]] = {}

    def set_batch(self, batch: Batch) -> None:
        super().set_batch(batch)
        if self.recorder is not None:
            self.recorder.clear()
            self.recorder.set_batch(batch)

    def collect(self, site: AttentionSite, inter: Intermediates) -> None:
        if self.recorder is not None:
            self.recorder.collect(site, inter)  # its kinds are norm_kinds
        weights = inter.weights
        qpad = self.batch.query_padding(site.kind).cpu()
        kpad = self.batch.key_padding(site.kind).cpu()
        w = weights.detach().float().cpu()
        for b, position in enumerate(self.batch.ids):
            q = (~qpad[b]).nonzero().squeeze(1)
            k = (~kpad[b]).nonzero().squeeze(1)
            self.weights.setdefault(position, {})[(site.kind, site.layer)] = w[b][:, q][:, :, k].clone()

    def end_batch(self) -> None:
        if self.recorder is None:
            return
        for key, recs in self.recorder.records.items():
            for rec in recs:
                position = self.batch.ids[rec.sentence]
                self.f_norms.setdefault(position, {})[key] = rec.transformed.clone()
        self.recorder.clear()


# ------------------------------------------------------------------------ storage


def stored_weights(weights: torch.Tensor) -> List:
    """α as nested lists of integers in 1/WEIGHT_SCALE; 0 only for an exact zero."""
    w = weights.double() * WEIGHT_SCALE
    q = torch.round(w)
    tiny = (q == 0) & (w != 0)
    q = torch.where(tiny, torch.sign(w), q)
    return q.to(torch.int64).tolist()


def stored_norms(values: torch.Tensor) -> List:
    """‖f‖ as nested lists rounded to NORM_DIGITS significant digits."""
    return [[float(f"{v:.{NORM_DIGITS}g}") for v in row] for row in values.tolist()]


def visible(kind: str, queries: int, keys: int) -> torch.Tensor:
    """(queries, keys) bool: the keys a query may see (decoder self-attention: causal)."""
    if kind == "decoder_self":
        return torch.ones(queries, keys, dtype=torch.bool).tril()
    return torch.ones(queries, keys, dtype=torch.bool)


def head_summary(weights: torch.Tensor, kind: str) -> Tuple[List[List[int]], List[float]]:
    """Per head: the null rows (every visible weight exactly 0) and the sparsity (share of
    exact zeros among visible pairs), from the unrounded weights."""
    heads, nq, nk = weights.shape
    vis = visible(kind, nq, nk)
    zero = (weights == 0) & vis
    null_rows = [[int(r) for r in (zero[h].sum(-1) == vis.sum(-1)).nonzero().squeeze(1)] for h in range(heads)]
    sparsity = [round(float(zero[h].sum()) / max(int(vis.sum()), 1), 4) for h in range(heads)]
    return null_rows, sparsity


def side_tokens(pieces: Sequence[str], scheme: str, eos_first: bool) -> Dict:
    """Tokens of one side with ``</s>`` (first for the decoder inputs, last for the
    source), their words and each token's word."""
    tokens = [EOS, *pieces] if eos_first else [*pieces, EOS]
    word_list = words(pieces, scheme) if pieces else []
    word_list = [EOS, *word_list] if eos_first else [*word_list, EOS]
    groups = word_index(tokens, scheme, eos=EOS)
    if len(word_list) != (max(groups) + 1 if groups else 0):
        raise ValueError(f"words {word_list} do not match the word index {groups} of {tokens}")
    return {"tokens": tokens, "words": word_list, "word_of": groups}


def sentence_entry(example, position: int, collector: ExplorerCollector, scheme: str) -> Dict:
    """One sentence's part of the data; ``position``: its place in the list that was run."""
    pos_weights = collector.weights[position]
    pos_norms = collector.f_norms.get(position, {})
    source = side_tokens(example.source_pieces, scheme, eos_first=False)
    decoder = side_tokens(example.target_pieces, scheme, eos_first=True)
    attention: Dict[str, List[Dict]] = {}
    for kind, layer in sorted(pos_weights):
        w = pos_weights[(kind, layer)]
        nq = len(source["tokens"]) if kind == "encoder_self" else len(decoder["tokens"])
        nk = len(decoder["tokens"]) if kind == "decoder_self" else len(source["tokens"])
        if tuple(w.shape[1:]) != (nq, nk):
            raise ValueError(
                f"sentence {example.index}: {kind} layer {layer} has weights of shape "
                f"{tuple(w.shape)}, expected (heads, {nq}, {nk}) from its tokens"
            )
        null_rows, sparsity = head_summary(w, kind)
        f = pos_norms.get((kind, layer))
        entry = {
            "layer": layer,
            "weights": stored_weights(w),
            "f_norm": None if f is None else stored_norms(f),
            "null_rows": null_rows,
            "sparsity": sparsity,
        }
        attention.setdefault(kind, []).append(entry)
    for kind, layers in attention.items():
        if [e["layer"] for e in layers] != list(range(len(layers))):
            raise ValueError(f"{kind}: layers {[e['layer'] for e in layers]} are not 0..{len(layers) - 1}")
    return {
        "index": example.index,
        "source": source,
        "decoder_input": decoder,
        "uncertain_words": uncertain_boundaries(example.source_pieces, scheme)
        or uncertain_boundaries(example.target_pieces, scheme),
        "attention": attention,
    }


def explorer_data(
    model, examples, collector: ExplorerCollector, scheme: str, title: str, header: Optional[Dict] = None
) -> Dict:
    """The explorer's JSON (see the module docstring): ``examples`` in the order they were
    run through ``collector``."""
    support = norm_support(model)
    info = module_info(model)
    fixed = fixed_heads(model)
    kinds = {}
    for kind in KINDS:
        if kind not in info:
            continue
        defined, exact, note = support[kind]
        kinds[kind] = {
            **info[kind],
            "norms": defined,
            "norms_exact": exact,
            "norms_note": note,
            "fixed": {
                str(layer): {str(h): name for h, name in heads.items()} for layer, heads in fixed.get(kind, {}).items()
            },
        }
    sentences = [sentence_entry(ex, i, collector, scheme) for i, ex in enumerate(examples)]
    return {
        **(header or {}),
        "title": title,
        "numbering": "0-based",
        "subword_scheme": scheme,
        "weight_scale": WEIGHT_SCALE,
        "norm_digits": NORM_DIGITS,
        "kinds": kinds,
        "sentences": sentences,
    }


def decode_weights(stored) -> torch.Tensor:
    """The inverse of the storage: nested integer lists -> float tensor of weights."""
    return torch.tensor(stored, dtype=torch.float64) / WEIGHT_SCALE


# ----------------------------------------------------------------------- bertviz


@torch.no_grad()
def bertviz_inputs(model, source_dictionary, target_dictionary, source, target) -> Dict:
    """The attention of one sentence pair in the form ``bertviz.head_view`` takes::

        from bertviz import head_view
        head_view(**bertviz_inputs(model, src_dict, tgt_dict, "the dog ru@@ ns home",
                                   "der hund läuft nach hause"))

    ``source`` / ``target``: text already segmented into the dictionary's pieces (or 1-d
    tensors of ids ending with ``</s>``).  One teacher-forced pass (the model is put in eval
    mode).  Returns ``encoder_attention``, ``decoder_attention``, ``cross_attention``: tuples
    with one ``(1, heads, queries, keys)`` float tensor per layer (layer 0 first), and
    ``encoder_tokens`` (source pieces + ``</s>``) and ``decoder_tokens`` (the decoder
    inputs ``</s>`` + target pieces; row r predicts target token r).
    """
    from .recording import record_attention

    def ids(text, dictionary):
        if isinstance(text, torch.Tensor):
            t = text.long().view(-1)
        else:
            t = dictionary.encode_line(text, add_if_not_exist=False, append_eos=True).long()
        if t.numel() == 0 or int(t[-1]) != dictionary.eos():
            raise ValueError("token ids must end with </s>")
        return t

    device = next(model.parameters()).device
    src = ids(source, source_dictionary)
    tgt = ids(target, target_dictionary)
    prev = torch.cat([tgt[-1:], tgt[:-1]])  # </s> y_0 .. y_{n-1}
    model.eval()
    with record_attention(model) as taps:
        model(src.unsqueeze(0).to(device), torch.tensor([src.numel()], device=device), prev.unsqueeze(0).to(device))
    by_kind: Dict[str, Dict[int, torch.Tensor]] = {k: {} for k in KINDS}
    for tap in taps:
        by_kind[tap.site.kind][tap.site.layer] = tap.weights.float().cpu()
    out = {}
    for kind, name in (
        ("encoder_self", "encoder_attention"),
        ("decoder_self", "decoder_attention"),
        ("cross", "cross_attention"),
    ):
        layers = by_kind[kind]
        out[name] = tuple(layers[i] for i in sorted(layers))
    out["encoder_tokens"] = [source_dictionary[int(i)] for i in src]
    out["decoder_tokens"] = [target_dictionary[int(i)] for i in prev]
    return out
