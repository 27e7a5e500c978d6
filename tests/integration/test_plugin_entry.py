"""Importing the package has no side effects; the fairseq side runs from the --user-dir
entry.

* The attention core imports and computes in a process where ``import fairseq`` fails
  (a meta-path blocker), and ``import fairseq_sparse_attn`` sets no logging and patches
  nothing.
* fairseq loading ``user_dir()`` (``fsa-user-dir``) as ``--user-dir`` registers the
  architectures, tasks and criterion and installs the compat patches, also in a process
  that imported the package already (as an ``fsa-train`` worker started by fairseq
  does); so does the ``fairseq_sparse_attn`` folder itself, where fairseq imports it first
  (plain ``fairseq-train``, older commands).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

BLOCK_FAIRSEQ = r"""
import importlib.abc, sys

class NoFairseq(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("fairseq", "fairseq_cli"):
            raise ImportError(f"fairseq is not installed (blocked: {name})")

sys.meta_path.insert(0, NoFairseq())
try:
    import fairseq  # noqa: F401
    raise SystemExit("the blocker does not block")
except ImportError:
    pass
"""

CORE = (
    BLOCK_FAIRSEQ
    + r"""
import json, logging
import torch
import fairseq_sparse_attn
from fairseq_sparse_attn.attention.activations import build_activation
from fairseq_sparse_attn.attention.core import AttendSpec, AttentionInputs, attend
from fairseq_sparse_attn.attention.heads import HeadPlan

g = torch.Generator().manual_seed(0)
B, H, T, S, D = 2, 2, 3, 4, 5
q, k, v = (torch.randn(B, H, n, D, generator=g) for n in (T, S, S))
out = {}
for name in ("softmax", "relu"):
    spec = AttendSpec(activation=build_activation(name, H), dropout=torch.nn.Dropout(0.0), heads=HeadPlan(H))
    result, _ = attend(q, k, v, AttentionInputs(), spec)
    scores = q @ k.transpose(-1, -2)  # attend takes q scaled already
    weights = torch.softmax(scores, -1) if name == "softmax" else torch.relu(scores)
    out[name] = (result.reshape(B, H, T, D) - weights @ v).abs().max().item()
out["fairseq_modules"] = sorted(m for m in sys.modules if m.split(".")[0] in ("fairseq", "fairseq_cli"))
out["root_handlers"] = len(logging.root.handlers)
out["plugin_modules"] = sorted(m for m in sys.modules if m.startswith("fairseq_sparse_attn.")
                               and m.split(".")[1] in ("plugin", "compat", "models", "tasks", "criterions"))
print(json.dumps(out))
"""
)

FRESH_USER_DIR = r"""
import argparse, json, sys
from fairseq import utils
from fairseq.criterions import CRITERION_REGISTRY
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.tasks import TASK_REGISTRY
assert "fairseq_sparse_attn" not in sys.modules
{load}
assert "fairseq_sparse_attn.plugin" in sys.modules
import fairseq_sparse_attn.compat as compat
print(json.dumps({{"arch": "rela_transformer_wmt_en_de" in ARCH_MODEL_REGISTRY,
                  "task": "parse_annotated_translation" in TASK_REGISTRY,
                  "criterion": "relu_regularized_label_smoothed_cross_entropy" in CRITERION_REGISTRY,
                  "patches": compat.active_patches()}}))
"""
PACKAGE_FOLDER = "utils.import_user_module(argparse.Namespace(user_dir=sys.argv[1]))"
USER_DIR = (
    "import fairseq_sparse_attn\n"
    "assert 'fairseq_sparse_attn.plugin' not in sys.modules\n"
    "utils.import_user_module(argparse.Namespace(user_dir=fairseq_sparse_attn.user_dir()))"
)


def _run(code, *args):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600, cwd=REPO.parent
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_core_works_without_fairseq():
    out = _run(CORE)
    # attend() against the plain formulas: softmax and ReLA's relu of q k^T, times v
    assert out["fairseq_modules"] == []
    assert out["root_handlers"] == 0  # no logging.basicConfig on import
    assert out["plugin_modules"] == []  # nothing registered, nothing patched
    assert out["softmax"] < 1e-6 and out["relu"] < 1e-6, out


def test_user_dir_registers_everything_when_fairseq_imports_it():
    from fairseq_sparse_attn.compat import PATCHES

    for load in (USER_DIR, PACKAGE_FOLDER):
        out = _run(FRESH_USER_DIR.format(load=load), str(REPO / "fairseq_sparse_attn"))
        assert out == {"arch": True, "task": True, "criterion": True, "patches": list(PATCHES)}, load


def test_user_dir_is_the_entry_package_beside_the_plugin():
    import fairseq_sparse_attn

    path = Path(fairseq_sparse_attn.user_dir())
    assert path == REPO / "fairseq_sparse_attn_plugin"
    assert (path / "__init__.py").is_file()
