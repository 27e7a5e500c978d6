"""Recording the norm-based analysis per sentence: :class:`NormRecorder`, the norms
analysis' collector (:class:`..recording.Collector`), and :func:`collect_norms`, its
teacher-forced passes over fairseq batches."""

from dataclasses import dataclass
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

import torch

from ...attention.config import ATTENTION_KINDS as KINDS
from ...attention.intermediates import Intermediates
from ..recording import AttentionSite, Batch, Collector, collecting
from .maths import norm_statistics, pruned_per_sentence, value_transforms


@dataclass
class SentenceNorms:
    """One sentence at one attention module, cropped to real tokens (tgt queries x src
    keys).  float32 on the CPU.

    weights ``(heads, tgt, src)``; transformed ``(heads, src)`` = ‖f^h(x_j)‖; head
    ``(heads, tgt, src)`` = ‖α f‖; layer ``(tgt, src)`` = ‖Σ_h α_h f_h‖; visible
    ``(tgt, src)`` bool (False for causally hidden keys); query_tokens / key_tokens: the
    token ids if the :class:`~..recording.Batch` had them, else None.
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


class NormRecorder(Collector):
    """The collector keeping the norm-based analysis per sentence.

        norms = NormRecorder(model, kinds=("cross",))       # cross attention only
        with torch.no_grad(), collecting(model, norms):
            norms.set_batch(Batch(src_tokens.eq(pad), prev_output_tokens.eq(pad),
                                  src_tokens, prev_output_tokens))
            model(src_tokens, src_lengths, prev_output_tokens)
        norms.records[("cross", 2)][0].layer        # (tgt_len, src_len) of sentence 0

    ``records[(kind, layer)]`` is a list of :class:`SentenceNorms`, one per sentence and
    forward, in order, until :meth:`clear`.  Padding is cropped with the batch's masks
    (True = padding), whatever side it is on: encoder self-attention keeps source x source,
    decoder self-attention target x target, cross attention target x source.  Only
    teacher-forced (full-sequence) passes in eval mode are supported: the recorded α are
    the weights before attention dropout.  ``kinds`` limits what is computed and kept (to
    save memory); ``allow_output_norm`` see :func:`.maths.check_decomposable`.
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

    def set_batch(self, batch: Batch) -> None:
        """The next forward's padding, bool ``(bsz, len)`` True = padding (None: no padding),
        and optionally its tokens (``src_tokens``, ``prev_output_tokens``), kept cropped
        with each sentence for :func:`.statistics.category_spearman`."""
        super().set_batch(batch)
        for name in ("source_padding", "target_padding", "source_tokens", "target_tokens"):
            t = getattr(batch, name)
            if t is not None and t.dim() != 2:
                raise ValueError(f"{name} must be (bsz, len), got shape {tuple(t.shape)}")
        pads = {"source": batch.source_padding, "target": batch.target_padding}
        tokens = {"source": batch.source_tokens, "target": batch.target_tokens}
        self._padding = {side: None if t is None else t.bool().cpu() for side, t in pads.items()}
        self._tokens = {side: None if t is None else t.cpu() for side, t in tokens.items()}
        self._batches += 1

    def clear(self) -> None:
        """Forget the kept sentences (a consumer that has read a batch's records)."""
        self.records = {}

    def sentences(self, kind: Optional[str] = None, layer: Optional[int] = None) -> Iterator[SentenceNorms]:
        """All kept sentences, optionally of one kind and/or layer (e.g. to pool layers)."""
        for (k, l), recs in sorted(self.records.items()):
            if (kind is None or k == kind) and (layer is None or l == layer):
                yield from recs

    @staticmethod
    def _sides(kind: str) -> Tuple[str, str]:
        """(query side, key side)"""
        return {
            "encoder_self": ("source", "source"),
            "decoder_self": ("target", "target"),
            "cross": ("target", "source"),
        }[kind]

    def _valid(self, side: str, bsz: int, length: int, kind: str) -> torch.Tensor:
        pad = self._padding[side]
        if pad is None:
            return torch.ones(bsz, length, dtype=torch.bool)
        if tuple(pad.shape) != (bsz, length):
            raise ValueError(
                f"{kind} attention has bsz={bsz} and {side} length {length}, but set_batch was "
                f"given {side} padding of shape {tuple(pad.shape)}; call set_batch with this "
                f"batch's masks before each forward (teacher-forced passes only, not "
                f"incremental decoding)"
            )
        return ~pad

    def collect(self, site: AttentionSite, inter: Intermediates) -> None:
        if site.kind not in self.kinds:
            return
        if self._padding is None:
            raise ValueError(
                "NormRecorder needs the batch's padding: call "
                "set_batch(Batch(source_padding, target_padding)) before each forward"
            )
        weights, values, mask = inter.weights, inter.values, inter.mask
        module = self._modules[site.name]
        if module.training and module.dropout_module.p > 0:
            raise ValueError(
                f"{site.name} is in training mode with attention dropout "
                f"{module.dropout_module.p}: the recorded weights are not the ones "
                f"used; call model.eval() before recording norms"
            )
        f = value_transforms(module, values, self.allow_output_norm)
        bsz, heads, tgt, src = weights.shape
        pruned = None
        if pruned_per_sentence(module):
            pruned = inter.redundant
            if pruned is None or tuple(pruned.shape) != (bsz, heads):
                raise ValueError(
                    f"{site.name} prunes redundant heads per sentence (RHE) but the recorded "
                    f"call returned no (bsz, heads) = ({bsz}, {heads}) decision "
                    f"(redundant is {None if pruned is None else tuple(pruned.shape)}); "
                    f"the layer norm cannot leave the pruned heads out"
                )
            pruned = pruned.detach().bool()
        stats = norm_statistics(weights, f, getattr(module, "masked_heads", ()), None if pruned is None else ~pruned)
        qside, kside = self._sides(site.kind)
        qvalid = self._valid(qside, bsz, tgt, site.kind)
        kvalid = self._valid(kside, bsz, src, site.kind)
        hidden = (
            torch.zeros(bsz, 1, tgt, src, dtype=torch.bool)
            if mask is None
            else mask.bool().cpu().expand(bsz, 1, tgt, src)
        )
        pad_keys_seen = ~kvalid & ~hidden[:, 0].all(dim=1)  # (bsz, src)
        if pad_keys_seen.any():
            b, s = (int(i) for i in pad_keys_seen.nonzero()[0])
            raise ValueError(
                f"set_batch says key {s} of sentence {b} is padding, but the {site.kind} "
                f"attention at layer {site.layer} lets queries see it: the padding masks do "
                f"not belong to this batch"
            )
        weights, hidden = weights.cpu(), hidden[:, 0]
        transformed, head, layer = (t.cpu() for t in (stats.transformed, stats.head, stats.layer))
        out = self.records.setdefault((site.kind, site.layer), [])
        for b in range(bsz):
            q = qvalid[b].nonzero().squeeze(1)
            k = kvalid[b].nonzero().squeeze(1)
            qt, kt = self._tokens[qside], self._tokens[kside]
            out.append(
                SentenceNorms(
                    sentence=b,
                    batch=self._batches,
                    weights=weights[b][:, q][:, :, k].float(),
                    transformed=transformed[b][:, k].float(),
                    head=head[b][:, q][:, :, k].float(),
                    layer=layer[b][q][:, k].float(),
                    visible=~hidden[b][q][:, k],
                    query_tokens=None if qt is None else qt[b, q],
                    key_tokens=None if kt is None else kt[b, k],
                    pruned=None if pruned is None else pruned[b].cpu(),
                )
            )


@torch.no_grad()
def collect_norms(
    model,
    batches,
    pad_idx: int,
    kinds: Iterable[str] = KINDS,
    allow_output_norm: bool = False,
    max_sentences: Optional[int] = None,
) -> NormRecorder:
    """Teacher-forced passes over fairseq ``batches`` (samples with ``net_input``) in eval
    mode; padding from ``pad_idx``; tokens kept for :func:`.statistics.category_spearman`."""
    norms = NormRecorder(model, kinds, allow_output_norm)
    model.eval()
    seen = 0
    with collecting(model, norms):
        for sample in batches:
            net_input = sample["net_input"]
            src, prev = net_input["src_tokens"], net_input["prev_output_tokens"]
            norms.set_batch(Batch(src.eq(pad_idx), prev.eq(pad_idx), src, prev))
            model(**net_input)
            seen += src.size(0)
            if max_sentences is not None and seen >= max_sentences:
                break
    return norms
