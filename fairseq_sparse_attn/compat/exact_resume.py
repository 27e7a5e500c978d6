"""Exact resume after the first epoch.

fairseq builds an epoch's batches (size-sorted indices, ties broken by a permutation
drawn with ``numpy_seed(seed + epoch)``) once, in the first epoch a process trains, and
keeps them for every later epoch (``can_reuse_epoch_itr``; only their order is reshuffled,
with ``seed + epoch``).  A run restarted from a checkpoint of epoch E >= 2 builds them
with ``seed + E`` instead: different batches from then on (on a 3,000-pair slice 28
examples trained twice and 28 never in epoch 2; losses differ by up to 0.11).

The fix: when fairseq is about to build batches that it will keep (reuse allowed, not
cached yet) for an epoch E > 1, they are built as in epoch 1 (``seed + 1``), the batches
an uninterrupted run holds; the per-epoch shuffle keeps its ``seed + E``.  An
uninterrupted run is unchanged (its batches are built in epoch 1); a resumed one now
trains the same examples in the same order, so losses and final parameters are
bit-identical (tests/integration/test_resume.py).  Where fairseq rebuilds batches every
epoch anyway (``--update-epoch-batch-itr True``, sharded data, ``disable_iterator_cache``)
resume was already exact and nothing changes.

fairseq 0.12.2 orders the indices under ``numpy_seed(seed)``, the same in every epoch, so
a resume there is already exact: the patch is installed only where fairseq mixes the
epoch into that seed (:func:`epoch_seeds_batches`; under 0.12.2 it made a resume build
other batches than the uninterrupted run).
"""

import functools
import inspect

import numpy as np

BEHAVIOUR_CHANGE = True


def epoch_seeds_batches(get_batch_iterator) -> bool:
    """Whether ``get_batch_iterator`` orders an epoch's indices under a seed that depends on
    the epoch (fairseq-fixed 0.12.3.1: ``seed + epoch``; fairseq 0.12.2: ``seed``), seen
    from the draws a one-example dataset's ``ordered_indices`` makes in epochs 1 and 2 (no
    iterator kept: ``disable_iterator_cache``)."""
    from types import SimpleNamespace

    from fairseq.data import FairseqDataset
    from fairseq.tasks import FairseqTask

    drawn = []

    class Probe(FairseqDataset):
        def __len__(self):
            return 1

        def __getitem__(self, index):
            return index

        def num_tokens(self, index):
            return 1

        def size(self, index):
            return 1

        def ordered_indices(self):
            drawn.append(np.random.randint(2**31))
            return np.arange(1)

    for epoch in (1, 2):
        get_batch_iterator(
            FairseqTask(SimpleNamespace()), Probe(), max_sentences=1, seed=1, epoch=epoch, disable_iterator_cache=True
        )
    return drawn[0] != drawn[1]


def install():
    from fairseq.tasks import FairseqTask

    original = FairseqTask.get_batch_iterator
    if getattr(original, "_fsa_exact_resume", False) or not epoch_seeds_batches(original):
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def get_batch_iterator(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        dataset, epoch, seed = a["dataset"], a["epoch"], a["seed"]
        kept = (
            not a.get("disable_iterator_cache", False)
            and not a.get("update_epoch_batch_itr", False)
            and not getattr(getattr(self, "cfg", None), "rebuild_batches", False)
            and self.can_reuse_epoch_itr(dataset)
            and dataset not in getattr(self, "dataset_to_epoch_iter", {})
        )
        if not kept or epoch <= 1:
            return original(*bound.args, **bound.kwargs)
        a["seed"] = seed + 1 - epoch  # fairseq orders indices under numpy_seed(seed + epoch)
        itr = original(*bound.args, **bound.kwargs)
        itr.seed = seed  # the per-epoch shuffle of the batches: seed + epoch, as fairseq's
        return itr

    get_batch_iterator._fsa_exact_resume = True
    FairseqTask.get_batch_iterator = get_batch_iterator
