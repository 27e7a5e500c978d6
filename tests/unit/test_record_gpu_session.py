"""``benchmarks/record_gpu_session.py``: a GPU session's returned files put together as the
device family's ``docs/results/bench-gpu*.json`` (stubbed files, no GPU), what auto then
decides, and its refusals before anything is written."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import record_gpu_session as record  # noqa: E402

from fairseq_sparse_attn.attention.backends import triton as tb  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"


def provenance(commit="abc123", device=H100):
    return {"git_commit": commit, "device": device, "versions": {"torch": "2.11.0+cu130"}, "date": "2026-11-29"}


def session_files(tmp_path, commit="abc123", device=H100, kernels_ok=True):
    """kernels.json, train-fp16.json (3 rounds, the kernels faster in 2) and ab-fp16.json
    (40 blocks, the kernels faster in 30) as gpu_session.sh returns them."""
    files = {
        "kernels.json": {
            "correctness": [{"ok": kernels_ok, "dtype": "fp16", "head_dim": 64}] * 3,
            "expected_checks": 3,
            "device": device,
            "triton": "3.6.0",
            "commit": commit,
        },
        "train-fp16.json": {
            "provenance": provenance(commit, device),
            "parts": {
                "train": {
                    "fp16": {
                        "runs": {"softmax": [10.0] * 3, "rela_g": [9.0, 9.0, 9.0], "rela_g_triton": [9.5, 8.5, 9.5]},
                        "ratios": {},
                    }
                }
            },
        },
        "ab-fp16.json": {
            "provenance": provenance(commit, device),
            "parts": {
                "train_ab": {
                    "fp16": {
                        "blocks": [
                            {
                                "round": i + 1,
                                "ups": {"softmax": 10.0, "rela_g": 9.0, "rela_g_triton": 9.5 if i < 30 else 8.5},
                            }
                            for i in range(40)
                        ]
                    }
                }
            },
        },
    }
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data))
    return [str(tmp_path / name) for name in files]


def test_a_session_s_files_become_the_family_s_result(tmp_path, capsys):
    paths = session_files(tmp_path)
    results = tmp_path / "results"
    assert record.main([*paths, "--results", str(results)]) == 0
    data = json.loads((results / "bench-gpu.json").read_text())
    assert sorted(data["parts"]) == ["kernels", "train", "train_ab"]
    assert data["provenance"]["git_commit"] == "abc123" and data["provenance"]["versions"]["triton"] == "3.6.0"
    # the fairseq-train rounds alone decide nothing (2 of 3); the paired blocks do (30 of 40)
    assert tb.faster_in(data) == {("relu", "fp16")}
    assert tb.measured_faster(results) == {("H100", "relu", "fp16"): tb.Measurement("bench-gpu.json", "3.6")}
    out = capsys.readouterr().out
    assert "auto would take the kernels for [('relu', 'fp16')]" in out
    assert "auto's table changes: set MEASURED_FASTER" in out  # the package's table must follow


def test_family_files():
    assert record.family_file(H100) == "bench-gpu.json"
    assert record.family_file("NVIDIA H200") == "bench-gpu-h200.json"
    assert record.family_file("NVIDIA H100 PCIe") == "bench-gpu-h100-pcie.json"


def test_the_recorded_h200_result_is_what_its_files_compose_to():
    """The committed H200 file, taken apart into the files its session returned, records the
    same parts and the same decision."""
    committed = json.loads((REPO / "docs" / "results" / "bench-gpu-h200.json").read_text())
    parts = committed["parts"]
    named = [("kernels.json", parts["kernels"])]
    named += [
        (f"{n}.json", {"provenance": committed["provenance"], "parts": {n: parts[n]}}) for n in ("loss_scale", "train")
    ]
    composed = record.compose_data(named)
    assert composed["parts"] == parts
    assert tb.faster_in(composed) == tb.faster_in(committed) == {("relu", "bf16")}


@pytest.mark.parametrize(
    "case, message",
    [
        ("no kernels", "no kernels.json among the files"),
        ("commits", "the files are of different commits"),
        ("devices", "the files are of different devices"),
        ("kernels commit", "kernels.json is of commit def456, the others of abc123"),
        ("kernels device", "the files are of different devices"),
        ("not a result", "not a GPU session result"),
        ("unreadable", "cannot read it as JSON"),
    ],
)
def test_refusals_write_nothing(tmp_path, capsys, case, message):
    paths = session_files(tmp_path)
    if case == "no kernels":
        paths = paths[1:]
    elif case in ("commits", "devices"):
        other = tmp_path / "other"
        other.mkdir()
        extra = (
            session_files(other, commit="def456") if case == "commits" else session_files(other, device="NVIDIA H200")
        )
        paths = paths[:2] + extra[2:]
    elif case in ("kernels commit", "kernels device"):  # the correctness part of another call
        kernels = json.loads((tmp_path / "kernels.json").read_text())
        kernels.update(commit="def456") if case == "kernels commit" else kernels.update(device="NVIDIA H200")
        (tmp_path / "kernels.json").write_text(json.dumps(kernels))
    elif case == "not a result":
        (tmp_path / "x.json").write_text(json.dumps({"seeds": []}))
        paths.append(str(tmp_path / "x.json"))
    else:
        (tmp_path / "x.json").write_text("{cut")
        paths.append(str(tmp_path / "x.json"))
    results = tmp_path / "results"
    assert record.main([*paths, "--results", str(results)]) == 2
    assert message in capsys.readouterr().err
    assert not results.exists()


def test_each_dtype_s_steps_add_to_one_part(tmp_path):
    """train-fp16.json and train-bf16.json (and ab-*): one train part with both dtypes, not
    the last file's alone."""
    paths = session_files(tmp_path)
    bf16 = json.loads((tmp_path / "train-fp16.json").read_text())
    bf16["parts"]["train"] = {"bf16": bf16["parts"]["train"]["fp16"]}
    (tmp_path / "train-bf16.json").write_text(json.dumps(bf16))
    ab = json.loads((tmp_path / "ab-fp16.json").read_text())
    ab["parts"]["train_ab"] = {"bf16": ab["parts"]["train_ab"]["fp16"]}
    (tmp_path / "ab-bf16.json").write_text(json.dumps(ab))
    composed = record.compose([*paths, str(tmp_path / "train-bf16.json"), str(tmp_path / "ab-bf16.json")])
    assert sorted(composed["parts"]["train"]) == ["bf16", "fp16"]
    assert sorted(composed["parts"]["train_ab"]) == ["bf16", "fp16"]
    assert tb.faster_in(composed) == {("relu", "fp16"), ("relu", "bf16")}
