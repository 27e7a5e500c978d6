"""Batching that loses sentences.  fairseq-fixed 0.12.3.1's ``batch_by_size`` silently
drops its last batch when that batch's size is not a multiple of
``required_batch_size_multiple``: with only ``max_sentences`` given, the last
``len(indices) % required_batch_size_multiple`` examples (``fairseq-generate --batch-size
32`` on a 447-document test set translated 440; the default multiple is 8), with
``max_tokens`` the whole unfinished last batch (6 of 13 sentences in a test here).  The
wrapper puts every dropped index back, in extra batches that respect
``max_sentences``/``max_tokens`` (each sentence's length read from ``num_tokens_vec`` at
its position in ``indices``, as fairseq passes it, or from ``num_tokens_fn``).  fairseq
0.12.2 drops none; there the wrapper finds nothing missing and changes nothing.

Where it applies: wherever a lost sentence is a wrong result, i.e. every batching except
fairseq's training batches (generate, validate, the validation of a training run,
scoring, the analysis tools).  The training batches (``Trainer.get_train_iterator``, also
when fairseq rebuilds them every epoch) are left exactly as fairseq makes them, so a stock
model trains as it does without the plugin; ``FSA_COMPLETE_TRAIN_BATCHES=1`` completes
them too (every training example in every epoch).
"""

import contextlib
import functools
import logging
import os
import threading

BEHAVIOUR_CHANGE = True

logger = logging.getLogger(__name__)

COMPLETE_TRAIN = "FSA_COMPLETE_TRAIN_BATCHES"

_state = threading.local()


def complete_train_batches(env=None) -> bool:
    """Whether ``$FSA_COMPLETE_TRAIN_BATCHES`` asks to complete the training batches too."""
    return (os.environ if env is None else env).get(COMPLETE_TRAIN, "") not in ("", "0")


@contextlib.contextmanager
def stock_batches():
    """Inside it, ``batch_by_size`` returns fairseq's batches unchanged (this thread)."""
    before = getattr(_state, "stock", False)
    _state.stock = True
    try:
        yield
    finally:
        _state.stock = before


def _stock_now() -> bool:
    return getattr(_state, "stock", False)


def _complete_batches(batches, indices, num_tokens_fn, max_tokens, max_sentences, num_tokens_vec):
    """Append the indices ``batches`` lost, as extra batches within the same limits.

    ``num_tokens_vec`` (when given) is aligned with ``indices``: ``num_tokens_vec[k]`` is
    the length of example ``indices[k]``, as fairseq passes it."""
    import numpy as np

    covered = sum(len(b) for b in batches)
    if covered >= len(indices):
        return batches
    seen = set()
    for b in batches:
        seen.update(int(i) for i in b)
    missing = [(k, int(i)) for k, i in enumerate(indices) if int(i) not in seen]
    max_sentences = max_sentences if max_sentences and max_sentences > 0 else len(missing)
    max_tokens = max_tokens if max_tokens and max_tokens > 0 else None

    def tokens(k, i):
        return int(num_tokens_vec[k]) if num_tokens_vec is not None else int(num_tokens_fn(i))

    extra, current, longest = [], [], 0
    for k, i in missing:
        n = tokens(k, i)
        longest_if_added = max(longest, n)
        too_many = len(current) >= max_sentences
        too_long = max_tokens is not None and current and longest_if_added * (len(current) + 1) > max_tokens
        if current and (too_many or too_long):
            extra.append(current)
            current, longest_if_added = [], n
        current.append(i)
        longest = longest_if_added
    if current:
        extra.append(current)
    dtype = batches[0].dtype if len(batches) and hasattr(batches[0], "dtype") else np.int64
    return list(batches) + [np.array(b, dtype=dtype) for b in extra]


def _stock_sampler(sampler):
    """fairseq's per-epoch ``make_batches`` (``--update-epoch-batch-itr``), run with stock
    batching."""

    @functools.wraps(sampler)
    def make_batches(*args, **kwargs):
        with stock_batches():
            return sampler(*args, **kwargs)

    make_batches._fsa_stock = True
    return make_batches


def install_batching_fix():
    from fairseq import trainer
    from fairseq.data import data_utils

    original = data_utils.batch_by_size
    if getattr(original, "_fsa_complete", False):
        return

    @functools.wraps(original)
    def batch_by_size(
        indices,
        num_tokens_fn,
        num_tokens_vec=None,
        max_tokens=None,
        max_sentences=None,
        required_batch_size_multiple=1,
        fixed_shapes=None,
    ):
        batches = original(
            indices,
            num_tokens_fn,
            num_tokens_vec=num_tokens_vec,
            max_tokens=max_tokens,
            max_sentences=max_sentences,
            required_batch_size_multiple=required_batch_size_multiple,
            fixed_shapes=fixed_shapes,
        )
        if fixed_shapes is not None or _stock_now():
            return batches
        completed = _complete_batches(batches, indices, num_tokens_fn, max_tokens, max_sentences, num_tokens_vec)
        if len(completed) > len(batches):  # said: stock fairseq's figures are of fewer examples
            restored = sum(len(b) for b in completed[len(batches) :])
            logger.info(
                f"fairseq's batch_by_size left out {restored} of {len(indices)} examples (--required-batch-size-"
                f"multiple {required_batch_size_multiple}); the plugin added them back in {len(completed) - len(batches)} "
                "batch(es), so this loss or BLEU covers every example (stock fairseq's covers the others only)"
            )
        return completed

    batch_by_size._fsa_complete = True
    data_utils.batch_by_size = batch_by_size

    get_train_iterator = trainer.Trainer.get_train_iterator

    @functools.wraps(get_train_iterator)
    def get_train_iterator_stock(self, *args, **kwargs):
        if complete_train_batches():
            return get_train_iterator(self, *args, **kwargs)
        try:
            with stock_batches():
                itr = get_train_iterator(self, *args, **kwargs)
        except Exception as e:
            if type(e) is Exception and str(e).startswith("The dataset is empty"):
                raise no_training_batch(self) from e
            raise
        sampler = getattr(itr, "batch_sampler", None)
        if callable(sampler) and not getattr(sampler, "_fsa_stock", False):
            itr.batch_sampler = _stock_sampler(sampler)
        return itr

    trainer.Trainer.get_train_iterator = get_train_iterator_stock


def no_training_batch(trainer):
    """The UsageError for fairseq's "The dataset is empty ... Try increasing the max number
    of allowed tokens": in a split of fewer sentences than ``--required-batch-size-multiple``
    (8 by default) fairseq's training batches leave out every sentence, and more tokens do
    not help."""
    from ..errors import UsageError

    cfg = trainer.cfg.dataset
    split, multiple = cfg.train_subset, cfg.required_batch_size_multiple
    try:
        sentences = len(trainer.task.dataset(split))
    except Exception:  # not loaded: say what is known
        sentences = None
    said = f"training split '{split}' gave no batch"
    if sentences is not None and sentences < multiple:
        return UsageError(
            f"{said}: it has {sentences} sentences, fewer than --required-batch-size-multiple {multiple}, and "
            "fairseq's training batches leave out the last (sentences mod that multiple) of a split; give "
            f"--required-batch-size-multiple 1, or set {COMPLETE_TRAIN}=1 (every sentence in every epoch)"
        )
    return UsageError(
        f"{said} ({sentences if sentences is not None else 'unknown'} sentences, --max-tokens {cfg.max_tokens}, "
        f"--batch-size {cfg.batch_size}, --required-batch-size-multiple {multiple}): every sentence was left "
        "out; check that the split holds sentences no longer than --max-tokens and the model's positions"
    )


install = install_batching_fix
