"""attention/masks.py: the masks derived once per mask tensor and shared by all modules
(the cache), and the only place in the attention core that derives masks."""

import ast
import re
from pathlib import Path

import torch

from fairseq_sparse_attn.attention import masks as mask_cache


def test_computed_once_per_unmodified_tensor_and_recomputed_after_a_change():
    mask_cache.clear()
    calls = []

    def compute(t):
        calls.append(1)
        return t.any().item()

    t = torch.zeros(3, 4, dtype=torch.bool)
    assert mask_cache.cached("s", (t,), None, compute) is False
    assert mask_cache.cached("s", (t[:],), None, compute) is False  # a view of the same storage
    assert len(calls) == 1
    t[1, 2] = True  # in place: the version counter changes
    assert mask_cache.cached("s", (t,), None, compute) is True
    assert len(calls) == 2
    assert mask_cache.cached("s", (t,), 5, compute) is True  # another extra: another entry
    assert len(calls) == 3


def test_keeps_at_most_max_entries_and_references_its_inputs():
    mask_cache.clear()
    tensors = [torch.zeros(2, dtype=torch.bool) for _ in range(mask_cache.MAX_ENTRIES + 3)]
    for t in tensors:
        mask_cache.cached("s", (t,), None, lambda x: x.clone())
    assert len(mask_cache._ENTRIES) == mask_cache.MAX_ENTRIES
    # an entry holds its input: an equal key can never be a new tensor at a reused address
    assert all(any(e[0][0] is t for e in mask_cache._ENTRIES.values()) for t in tensors[-3:])


def test_every_layer_shares_the_padding_mask_views():
    """One model forward: the padding view of the encoder mask is built once, not per module."""
    from helpers import build_model, random_batch

    mask_cache.clear()
    model, d = build_model(attn_activation="relu", attn_output_norm="gated_rmsnorm")
    src, lengths, prev = random_batch(d)
    with torch.no_grad():
        model(src, lengths, prev)
    slots = [key[0] for key in mask_cache._ENTRIES]
    # encoder padding (encoder self + cross), decoder padding, causal | padding: once each
    assert slots.count("key_padding") == 2 and slots.count("hidden") == 1


# --- every mask derivation lives in attention/masks.py (issue 33.1) ------------------------
ATTENTION = Path(__file__).resolve().parents[2] / "fairseq_sparse_attn" / "attention"
#: the code that takes a call's masks: the façade, the plan, the core and every backend
MASK_USERS = ["multihead.py", "call_plan.py", "core.py"] + sorted(
    str(p.relative_to(ATTENTION)) for p in (ATTENTION / "backends").glob("*.py")
)
#: fairseq's and the former places' mask code, called or defined
MASK_CODE = {
    "ADDITIVE_MASK_THRESHOLD",
    "mask_cache",
    "_pad_masks",
    "_append_prev_key_padding_mask",
    "_append_zero_attn",
    "_add_bias",
    "_visibility_mask",
    "_split_attn_mask",
    "hiding_mask_only",
    "_hides_a_whole_row",
    "real_keys",
    "visible_key_counts",
}
MASK_NAME = re.compile(r"mask|hidden|hide|pad")


def mentions_a_mask(node) -> bool:
    return any(
        (isinstance(n, ast.Name) and MASK_NAME.search(n.id))
        or (isinstance(n, ast.Attribute) and MASK_NAME.search(n.attr))
        for n in ast.walk(node)
    )


def mask_derivations(path: Path):
    """``(line, what)`` for each place in ``path`` that derives a mask instead of taking it
    from masks.py: mask code by name, a mask combined (``|``, ``~``, ``bitwise_or``),
    expanded (``repeat_interleave``, a strided slice), turned into a float mask
    (``torch.where``) or compared with an additive-mask threshold."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    # what comes from masks.py is taken, not derived: `from .masks import x`, `masks.x(...)`
    taken = {
        a.asname or a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "masks"
        for a in node.names
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "masks":
            continue
        if isinstance(node, ast.Name) and node.id in MASK_CODE and node.id not in taken:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and node.attr in MASK_CODE:
            if not (isinstance(node.value, ast.Name) and node.value.id == "masks"):
                found.append((node.lineno, node.attr))
        elif isinstance(node, (ast.FunctionDef, ast.ImportFrom)):
            names = [node.name] if isinstance(node, ast.FunctionDef) else [a.name for a in node.names]
            found += [(node.lineno, n) for n in names if n in MASK_CODE]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr) and mentions_a_mask(node):
            found.append((node.lineno, "a | of masks"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert) and mentions_a_mask(node):
            found.append((node.lineno, "a ~ of a mask"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("repeat_interleave", "bitwise_or", "where") and mentions_a_mask(node):
                found.append((node.lineno, node.func.attr))
        elif isinstance(node, ast.Subscript) and mentions_a_mask(node.value):
            slices = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if any(isinstance(s, ast.Slice) and s.step is not None for s in slices):
                found.append((node.lineno, "a strided slice of a mask"))
        elif isinstance(node, ast.Compare) and mentions_a_mask(node):
            for c in [node.left, *node.comparators]:
                if isinstance(c, ast.UnaryOp) and isinstance(c.operand, ast.Constant) and c.operand.value >= 1e4:
                    found.append((node.lineno, "an additive-mask threshold"))
    return sorted(set(found))


def test_the_plan_and_the_backends_build_no_mask_of_their_own():
    found = {name: mask_derivations(ATTENTION / name) for name in MASK_USERS}
    assert {name: f for name, f in found.items() if f} == {}


def test_the_mask_check_sees_derivations(tmp_path):
    """The check above finds the derivations it looks for (so it can fail)."""
    src = (
        "from .heads import real_keys\n"
        "def f(hidden, hide, pad, attn_mask):\n"
        "    a = hidden | hide\n"
        "    b = pad.repeat_interleave(2, dim=0)\n"
        "    c = hidden[::2]\n"
        "    d = attn_mask <= -1e4\n"
        "    e = torch.where(hidden, x, y)\n"
        "    return module._visibility_mask(attn_mask, pad, 1, 1, 1), ~pad\n"
    )
    path = tmp_path / "probe.py"
    path.write_text(src)
    what = {w for _, w in mask_derivations(path)}
    assert what == {
        "real_keys",
        "a | of masks",
        "repeat_interleave",
        "a strided slice of a mask",
        "an additive-mask threshold",
        "where",
        "_visibility_mask",
        "a ~ of a mask",
    }
