"""The backends that serve :func:`~..core.attend`, one file each, registered with
:func:`~..core.register_backend` when imported (``attention/__init__`` imports this
package, so every import of the attention core registers them).  A backend takes its masks
from :mod:`..masks` (``inputs.hidden``, ``inputs.score_bias`` and the derivations there)
and builds none of its own.

==============  ========  ==========================================================
file            priority  serves
==============  ========  ==========================================================
``sdpa``        20        softmax, learned heads only, no bias providers, no weights
``key_block``   30        relu / relu_scaled over blocks of keys (--attn-key-block-size)
``triton``      35        relu / relu_scaled through the fused Triton kernels (forced, or measured faster)
``query_block`` 45        relu / relu_scaled without gradients over blocks of queries
``materialized`` 100      everything (the reference; returns the weights)
==============  ========  ==========================================================
"""

from . import key_block, materialized, query_block, sdpa, triton  # noqa: F401  (register)
