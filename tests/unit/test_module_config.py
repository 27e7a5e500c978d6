"""Issue 33 items 2-3 on the attention module: its settings live in ``module.config`` only
(no value copied onto the module: the properties are views of the config), and the call plan
is built from that config and never calls back into the module."""

import ast
import dataclasses
import inspect
from pathlib import Path

import torch

from fairseq_sparse_attn.attention import SparseMultiheadAttention
from fairseq_sparse_attn.attention import call_plan as call_plan_module

from helpers import attention_config

E, H = 16, 4
#: the settings __init__ used to copy onto the module (core v3)
SETTINGS = (
    "kind",
    "layer_index",
    "activation_name",
    "output_norm_name",
    "backend",
    "key_block_size",
    "flex_min_keys",
    "fixed_patterns",
    "fixed_pattern_unit",
    "right_context_reading",
    "fixed_patterns_exclude_eos",
)


def test_no_setting_is_copied_onto_the_module():
    config = dataclasses.replace(attention_config("relu", "gated_rmsnorm"), kind="encoder_self", layer_index=1)
    m = SparseMultiheadAttention(E, H, self_attention=True, config=config)
    assert m.config is config
    assert [name for name in SETTINGS if name in vars(m)] == []
    assert (m.kind, m.layer_index, m.activation_name, m.output_norm_name) == (
        "encoder_self",
        1,
        "relu",
        "gated_rmsnorm",
    )
    plan = m.plan()
    m.backend = "materialized"  # a view: setting it replaces the config, and the plan
    assert m.config.backend.name == "materialized" and "backend" not in vars(m)
    assert m.plan() is not plan and m.plan().config is m.config and m.spec().backend == "materialized"
    m.masked_heads = (1,)
    assert m.config.heads.masked_heads == (1,) and m.spec().heads.masked.heads == (1,)


def test_the_plan_never_calls_back_into_the_module():
    """No CallPlan method takes the module, and call_plan.py calls none of fairseq's
    module methods (``_add_bias``, ``_append_zero_attn``, ...) nor ``spec()``."""
    for name, method in inspect.getmembers(call_plan_module.CallPlan, inspect.isfunction):
        assert "module" not in inspect.signature(method).parameters, name
    tree = ast.parse(Path(call_plan_module.__file__).read_text())
    called = {
        n.func.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr.startswith("_")
    }
    assert called <= {"_get_full_incremental_state_key"}  # build_plan: the cache key, once


def test_the_plan_serves_a_forward_without_the_module():
    torch.manual_seed(0)
    m = SparseMultiheadAttention(E, H, self_attention=True, config=attention_config("relu", "rmsnorm")).eval()
    x = torch.randn(5, 2, E)
    with torch.no_grad():
        want, _ = m(x, x, x, need_weights=False)
        out, weights, _ = m.plan().forward(x, x, x, None, None, False, False, None, False, False, None, frozenset())
    assert torch.equal(out, want) and weights is None
