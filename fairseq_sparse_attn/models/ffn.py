"""Feed-forward variants (ReLUFormer, Sec. 3: the FFN as a key-value memory).

``--ffn-type``:
* ``standard``           fairseq's FFN: fc2(act(fc1(x))) with ``--activation-fn`` (relu default)
* ``softmax``            key-value memory, Eq. 2: H = Softmax(X K^T) V, with K = fc1, V = fc2
* ``softmax_layernorm``  H = LN(Softmax(X K^T) V): LayerNorm on the FFN output (Table 1)

The fc1/fc2 biases of fairseq's FFN are kept in all variants (the paper's Eq. 2 has none;
with a bias, K^T x + b is still a score per memory slot).  The softmax is computed in
float32 over the FFN's hidden dimension (the memory slots).

Analysis hooks: ``FFNActivation.recorder`` (called with the activation rows, i.e. the
memory scores after the activation) and the weights ``fc1.weight`` (keys, one row per
slot) and ``fc2.weight`` (values, one column per slot); the FFN output is ``fc2``'s output
(a forward hook) and the residual is the block input.
"""

import torch
import torch.nn as nn
from fairseq import utils
from fairseq.modules import LayerNorm

FFN_TYPES = ("standard", "softmax", "softmax_layernorm")


class FFNActivation(nn.Module):
    def __init__(self, ffn_type: str, activation_fn: str):
        super().__init__()
        if ffn_type not in FFN_TYPES:
            raise ValueError(f"unknown --ffn-type {ffn_type!r}; valid values: {', '.join(FFN_TYPES)}")
        self.ffn_type = ffn_type
        self.fn = None if ffn_type != "standard" else utils.get_activation_fn(activation_fn)
        self.recorder = None

    def forward(self, x):
        if self.fn is None:
            out = torch.softmax(x.float(), dim=-1).type_as(x)
        else:
            out = self.fn(x)
        if self.recorder is not None:
            self.recorder(self, rows=out.detach())
        return out

    def extra_repr(self):
        return self.ffn_type


class LinearLayerNorm(nn.Linear):
    """fc2 followed by a LayerNorm (``softmax_layernorm``); keeps ``fc2.weight``/``fc2.bias``."""

    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features)
        self.output_layer_norm = LayerNorm(out_features)

    def forward(self, x):
        return self.output_layer_norm(super().forward(x))
