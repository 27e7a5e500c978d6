"""Teacher-forced passes over a list of examples with the analyses' collectors attached
(:class:`.recording.Collector`): the driver of ``fsa-analyze`` (:mod:`.commands`).

    stats = AttentionStatistics(model)                    # .attention_stats
    run_passes(model, examples, [stats, FFNStatistics(model)], source_pad, target_pad, eos)

Per batch, every collector gets :meth:`~.recording.Collector.set_batch` (a
:class:`.recording.Batch`: padding masks, tokens, example positions), then one
``collect(site, intermediates)`` per call it wants (attention calls; FFN calls for
``"ffn"``), then :meth:`~.recording.Collector.end_batch`.  The collectors belong to their
analyses: :mod:`.attention_stats` (stats, hallucination, filter), :mod:`.norms` (norms,
heatmap), :mod:`.alignment` (align), :mod:`.explorer` (explore), :mod:`.ffn_stats` (stats).
"""

from typing import Optional, Sequence

import torch

from .recording import Batch, Collector, collecting


@torch.no_grad()
def run_passes(
    model,
    examples,
    collectors: Sequence[Collector],
    source_pad: int,
    target_pad: int,
    eos: int,
    batch_size: Optional[int] = 32,
    max_tokens: Optional[int] = None,
    device="cpu",
    progress: bool = False,
    description: str = "analysis",
) -> int:
    """One teacher-forced forward per batch with every collector attached; returns the
    number of sentence pairs seen.  The model is put in eval mode (the recorded weights
    are the ones used, no attention dropout)."""
    from tqdm import tqdm

    from .loading import iterate_batches, make_batches

    model.eval()
    n_batches = len(make_batches(examples, batch_size, max_tokens))

    seen = 0
    with collecting(model, *collectors):
        batches = iterate_batches(examples, source_pad, eos, batch_size, max_tokens, device)
        for sample in tqdm(batches, total=n_batches, desc=description, unit="batch", disable=not progress):
            net = sample["net_input"]
            src, prev = net["src_tokens"], net["prev_output_tokens"]
            batch = Batch(src.eq(source_pad), prev.eq(target_pad), src, prev, sample["id"].tolist())
            for c in collectors:
                c.set_batch(batch)
            model(**net)
            for c in collectors:
                c.end_batch()
            seen += src.size(0)
    return seen
