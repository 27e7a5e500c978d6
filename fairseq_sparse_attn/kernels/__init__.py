"""Fused Triton kernels, each registered as a torch custom op (``torch.ops.fsa.*``).

Every module here that a launcher can pick kernels from declares ``launch_configs()``: the
complete list of configurations it may launch, which ``fairseq_sparse_attn.kernels.aot``
compiles ahead of time for sm_80 and sm_90 (``make check-kernels``).
"""
