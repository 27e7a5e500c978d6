"""fairseq's data loaders always ask for pinned memory (``pin_memory=True`` in
``fairseq.data.iterators``); without an accelerator torch then warns on every
generate / interactive / train run (``'pin_memory' argument is set as true but no
accelerator is found``) and pins nothing.  The patch gives ``fairseq.data.iterators`` a
view of torch whose ``DataLoader`` pins memory only when CUDA is available: the same
batches, the same speed, no warning.  torch itself is not changed.
"""

import types

BEHAVIOUR_CHANGE = False


class _View(types.ModuleType):
    """``target`` with some attributes replaced (the others read through)."""

    def __init__(self, target, **replaced):
        super().__init__(target.__name__)
        self._target = target
        self.__dict__.update(replaced)

    def __getattr__(self, name):
        return getattr(self._target, name)


def install():
    import torch
    from fairseq.data import iterators

    if isinstance(iterators.torch, _View):
        return

    class DataLoader(torch.utils.data.DataLoader):
        """torch's DataLoader; ``pin_memory`` only when CUDA is available."""

        def __init__(self, *args, pin_memory=False, **kwargs):
            super().__init__(*args, pin_memory=bool(pin_memory) and torch.cuda.is_available(), **kwargs)

    data = _View(torch.utils.data, DataLoader=DataLoader)
    iterators.torch = _View(torch, utils=_View(torch.utils, data=data))
