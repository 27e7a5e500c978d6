"""benchmarks/launch_costs.py: the pieces of one kernel op's host time (what the GPU
session's ``host`` step times on CUDA).  Checked on a CPU with the null driver: each piece
does what its name says (launches once, or not at all; through Triton's own launch path
only where it says so; the op through the dispatcher, the implementation without it), and
the run writes every piece with provenance.  No timing is asserted."""

import json
import sys
from pathlib import Path

import pytest
import torch

from conftest import require_kernels

require_kernels()  # the Triton kernels run here, else the module skips (CI: fails)


REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import launch_costs  # noqa: E402
import triton_host_launch  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from fairseq_sparse_attn.provenance import check_provenance  # noqa: E402

from helpers import OpLog  # noqa: E402

PIECES = ("op", "impl", "plan", "launcher", "triton")


def test_each_piece_launches_as_its_name_says(monkeypatch):
    """The op row dispatches the fsa op; the implementation row runs it without the
    dispatcher (a dispatch-level counter sees only its allocations); the plan and launcher
    rows launch without Triton's path, the Triton row through it; the aten rows launch no
    kernel of ours."""
    runs = []
    real_run = JITFunction.run

    def counted_run(self, *args, **kwargs):
        runs.append(self)
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(JITFunction, "run", counted_run)
    with triton_host_launch.host_only_launches() as launches:
        jobs = launch_costs.build_jobs(torch.device("cpu"), torch.float16, rows=12, heads=1, length=6)
        assert set(jobs) == {"aten_add", "aten_empty"} | {
            f"{op}_{piece}" for op in ("norm_fwd", "attention_fwd") for piece in PIECES
        }
        for name, job in jobs.items():
            runs.clear()
            before = launches.count
            with OpLog() as ops:
                job()
            kind = name.rsplit("_", 1)[-1]
            assert launches.count - before == (0 if name.startswith("aten_") else 1), name
            assert len(runs) == (1 if kind == "triton" else 0), name  # only the Triton row binds
            fsa_ops = [n for n in ops.ops if n.startswith("fsa.")]
            assert fsa_ops == (
                [f"fsa.{'rms_norm_fwd' if name.startswith('norm') else 'relu_attention_fwd'}"] if kind == "op" else []
            ), name
            if kind == "impl":
                assert ops.ops and all(n.startswith("aten.") for n in ops.ops), name  # its allocations


def test_a_run_writes_every_piece_with_provenance(tmp_path, capsys):
    out = tmp_path / "costs.json"
    result = launch_costs.main(
        ["--device", "cpu", "--rows", "12", "--heads", "1", "--length", "6", "--rounds", "1", "--min-time", "0.001"]
        + ["--json", str(out)]
    )
    assert "launcher stubbed" in result["kernel_launches"]
    data = json.loads(out.read_text())
    check_provenance(data)
    assert len(data["pieces"]) == 12
    for name, row in data["pieces"].items():
        assert row["us_per_call"] > 0 and row["min"] <= row["us_per_call"] <= row["max"], name
    assert data["pieces"]["aten_add"]["vs_aten_add"] == 1.0
    assert "| norm_fwd_launcher |" in capsys.readouterr().out


def test_cuda_without_a_gpu_is_one_line():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(SystemExit, match="--device cuda needs a CUDA device"):
        launch_costs.main(["--device", "cuda"])
