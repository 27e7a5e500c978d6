"""The ahead-of-time kernel check (fairseq_sparse_attn/kernels/aot.py): discovery of every
``launch_configs()``, their validation, ptxas report parsing, the fit rules (a deliberately
oversized tile compiled for sm_80 is reported; a loop asked to pipeline that compiles
without asynchronous copies is reported; a configuration that does not compile is reported
and the others still checked), the dot instructions read from the compiled kernels, and the
generated table's markers.  The full check over every configuration, under the installed
Triton and the GPU machines' version, is ``make check-kernels`` (CI)."""

from pathlib import Path

import pytest

from conftest import require_kernels

require_kernels()  # the Triton kernels run here, else the module skips (CI: fails)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from fairseq_sparse_attn.kernels import aot, output_norm, relu_attention  # noqa: E402

PTXAS_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
    16 bytes stack frame, 24 bytes spill stores, 20 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 16 bytes cumulative stack size, 392 bytes smem
"""


@pytest.fixture
def compiled_mode(tmp_path, monkeypatch):
    assert isinstance(tl.sum, JITFunction), (
        "triton was imported with TRITON_INTERPRET=1 in this process: AOT compiles need it unset"
    )
    monkeypatch.setenv("FSA_AOT_CACHE", str(tmp_path))


@triton.jit
def big_tile_kernel(A, B, C, K, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, K, BLOCK):
        a = tl.load(A + offs[:, None] * K + (k + offs)[None, :])
        b = tl.load(B + (k + offs)[:, None] * BLOCK + offs[None, :])
        acc += tl.dot(a, b)
    tl.store(C + offs[:, None] * BLOCK + offs[None, :], acc)


def big_tile_config(block, stages):
    return {
        "name": f"big_tile_{block}_s{stages}",
        "kernel": big_tile_kernel,
        "signature": {"A": "*fp32", "B": "*fp32", "C": "*fp32", "K": "i32", "BLOCK": "constexpr"},
        "constexprs": {"BLOCK": block},
        "num_warps": 4,
        "num_stages": stages,
    }


def test_an_oversized_tile_is_reported_for_sm_80(compiled_mode):
    config = big_tile_config(128, 3)  # pipelined buffers of two 128 x 128 fp32 tiles (128 KiB each)
    result = aot.compile_config(config, 80)
    assert result["shared"] > aot.DEVICES[80][1]
    found = aot.problems(config["name"], 80, result)
    assert any(f"{result['shared']} bytes of shared memory > 166912 on A100 (sm_80)" in p for p in found), found
    # cached: the second call reads the result back
    assert aot.compile_config(config, 80) == result


def test_the_largest_norm_configs_fit_both_devices(compiled_mode):
    names = {"rms_norm_bwd_bf16_wbf16_gated_d2048", "rms_norm_fwd_fp32_wfp32_gated_d2048"}
    configs = [c for c in output_norm.launch_configs() if c["name"] in names]
    assert len(configs) == 2
    for config in configs:
        for cap in aot.DEVICES:
            result = aot.compile_config(config, cap)
            assert aot.problems(config["name"], cap, result) == [], result
            assert 0 < result["registers"] <= 255 and result["shared"] > 0


def test_the_cache_key_covers_the_helpers_a_kernel_calls(tmp_path, monkeypatch):
    """Two kernels of the same source whose helper differs get different cache keys (the
    key once held the kernel's own source only, so a change inside a helper such as
    relu_attention._fwd_tile kept stale compile results)."""
    import importlib

    kernel = (
        "import triton\nimport triton.language as tl\n\n"
        "@triton.jit\ndef helper(x):\n    return x {op} 1.0\n\n"
        "@triton.jit\ndef kernel(X):\n    tl.store(X, helper(tl.load(X)))\n"
    )
    keys = []
    for name, op in (("aot_key_plus", "+"), ("aot_key_times", "*")):
        (tmp_path / f"{name}.py").write_text(kernel.format(op=op))
        monkeypatch.syspath_prepend(str(tmp_path))
        module = importlib.import_module(name)
        config = {"name": "k", "kernel": module.kernel, "signature": {"X": "*fp32"}, "constexprs": {}}
        keys.append(aot._cache_key(dict(config, num_warps=1, num_stages=1), 90))
    assert keys[0] != keys[1]


def test_problem_rules():
    ok = {
        "shared": 1000,
        "registers": 64,
        "stack": 0,
        "spill_stores": 0,
        "spill_loads": 0,
        "num_warps": 8,
        "num_stages": 2,
        "dots": "wgmma",
        "async_copies": 4,
    }
    assert aot.problems("k", 90, ok) == []
    assert aot.problems("k", 90, dict(ok, shared=232448)) == []
    assert "232449 bytes of shared memory > 232448 on H100 (sm_90)" in aot.problems("k", 90, dict(ok, shared=232449))[0]
    assert "register spills" in aot.problems("k", 80, dict(ok, spill_loads=4))[0]
    assert "registers x 512 threads > 65536" in aot.problems("k", 80, dict(ok, registers=200, num_warps=16))[0]
    unpipelined = aot.problems("k", 90, dict(ok, async_copies=0))
    assert unpipelined == [
        "k: asks for 2 pipeline stages but compiles without asynchronous copies on H100 (sm_90) "
        "(its loop is not pipelined: a load under a run-time branch in the loop?)"
    ]
    assert aot.problems("k", 90, dict(ok, async_copies=0, num_stages=1)) == []
    assert aot.problems("k", 80, {"error": "RuntimeError: PassManager::run failed"}) == [
        "k: does not compile for A100 (sm_80): RuntimeError: PassManager::run failed"
    ]


def test_parse_ptxas():
    assert aot.parse_ptxas(PTXAS_LOG) == {"registers": 255, "stack": 16, "spill_stores": 24, "spill_loads": 20}
    with pytest.raises(RuntimeError, match="unexpected ptxas -v report"):
        aot.parse_ptxas("ptxas fatal")


def test_discovery_finds_every_norm_config_and_validates():
    found = aot.discover()
    names = {c["name"] for module, c in found if module.endswith(".output_norm")}
    assert names == {c["name"] for c in output_norm.launch_configs()}
    good = big_tile_config(64, 2)
    aot.validate(good, "here")
    with pytest.raises(ValueError, match="lacks \\['num_stages'\\]"):
        aot.validate({k: v for k, v in good.items() if k != "num_stages"}, "here")
    with pytest.raises(ValueError, match="signature .* != kernel arguments"):
        aot.validate(dict(good, signature={"A": "*fp32", "BLOCK": "constexpr"}), "here")
    with pytest.raises(ValueError, match="constexpr arguments \\['BLOCK'\\] but values for \\[\\]"):
        aot.validate(dict(good, constexprs={}), "here")


def test_table_between_markers():
    doc = f"intro\n{aot.BEGIN}\nold\n{aot.END}\nrest\n"
    assert aot.replace_table(doc, "| new |") == f"intro\n{aot.BEGIN}\n| new |\n{aot.END}\nrest\n"
    with pytest.raises(ValueError, match="markers"):
        aot.replace_table("no markers", "x")
    assert aot.BEGIN in aot.DOC.read_text()


def test_dot_instructions_and_pipelining_of_the_shipped_attention_kernels(compiled_mode):
    """The half-precision dK/dV pass (the backward's larger part) runs Hopper's warpgroup MMA
    on sm_90 and is pipelined: its loop issues asynchronous copies.  Under Triton 3.6.0 a
    load of the row factor under `if row_scaled` in that loop made the pipeliner fail, so the
    pass shipped with one stage and no asynchronous copies (2026-11-26)."""
    configs = {c["name"]: c for c in relu_attention.launch_configs()}
    dkdv = configs["relu_attention_bwd_dkdv_d64_fp16"]
    assert dkdv["num_stages"] >= 2
    on_h100 = aot.compile_config(dkdv, 90)
    assert on_h100["dots"] == "wgmma" and on_h100["async_copies"] > 0, on_h100
    assert on_h100["sass_instructions"] > 100  # cuobjdump -sass read the cubin
    assert aot.compile_config(dkdv, 80)["dots"] == "mma"  # no wgmma before Hopper
    assert aot.compile_config(configs["relu_attention_fwd_d64_fp32"], 90)["dots"] == "fma"  # IEEE fp32 dots
    norm = next(c for c in output_norm.launch_configs() if c["name"] == "rms_norm_fwd_fp16_wfp16_gated_d512")
    assert aot.compile_config(norm, 90)["dots"] == "-"


def test_dot_kind_from_ttgir():
    assert aot.dot_kind("%1 = ttng.warp_group_dot %a, %b") == "wgmma"
    assert aot.dot_kind("#mma = #ttg.nvidia_mma<{versionMajor = 2}>\n%1 = tt.dot %a, %b") == "mma"
    assert aot.dot_kind("#blocked = #ttg.blocked<{}>\n%1 = tt.dot %a, %b") == "fma"
    assert aot.dot_kind("%1 = tt.load %p") == "-"
    assert aot.async_copies("cp.async.cg.shared.global [%r1], [%rd2], 16;\ncp.async.commit_group;") == 1


@triton.jit
def bad_arange_kernel(X, BLOCK: tl.constexpr):
    tl.store(X + tl.arange(0, BLOCK), 1.0)


def test_a_config_that_does_not_compile_is_reported_and_the_rest_checked(compiled_mode):
    bad = {
        "name": "bad_arange",
        "kernel": bad_arange_kernel,
        "signature": {"X": "*fp32", "BLOCK": "constexpr"},
        "constexprs": {"BLOCK": 48},  # tl.arange needs a power of two
        "num_warps": 1,
        "num_stages": 1,
    }
    good = big_tile_config(32, 2)
    results = aot.check_all([("here", bad), ("here", good)])
    found = [
        p for _, config, by_cap in results for cap, r in by_cap.items() for p in aot.problems(config["name"], cap, r)
    ]
    assert len(found) == 2 and all(p.startswith("bad_arange: does not compile for ") for p in found), found
    assert "does not compile" in aot.table(results, "test")
    assert results[1][2][90]["async_copies"] > 0


REPO = aot.DOC.parents[1]


def _check_kernels(tmp_path, versions, **env):
    import os
    import subprocess
    import sys

    run_env = dict(os.environ, PYTHON=sys.executable, AOT_JOBS="2", KERNEL_TRITONS=versions)
    run_env["KERNEL_TRITON_CACHE"] = str(tmp_path)
    run_env.update(env)
    run_env.pop("TRITON_INTERPRET", None)
    return subprocess.run(
        ["bash", "scripts/check_kernels.sh"], cwd=REPO, env=run_env, capture_output=True, text=True, timeout=600
    )


def test_check_kernels_runs_each_named_triton_from_its_cache_folder(tmp_path):
    """`make check-kernels` checks every configuration again under each other Triton version,
    imported from $KERNEL_TRITON_CACHE/triton-X.Y.Z (here the installed package stands in for
    version 9.9.9, so nothing is downloaded)."""
    (tmp_path / "triton-9.9.9").mkdir()
    (tmp_path / "triton-9.9.9" / "triton").symlink_to(Path(triton.__file__).parent)
    proc = _check_kernels(tmp_path, "9.9.9")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"[check-kernels] Triton 9.9.9 ({tmp_path}/triton-9.9.9)" in proc.stdout
    assert proc.stdout.count(" configurations x 2 devices, ok ") == 2, proc.stdout


def test_check_kernels_says_so_when_a_version_cannot_be_installed(tmp_path):
    proc = _check_kernels(tmp_path, "0.0.1", PIP_NO_INDEX="1")
    assert proc.returncode == 1
    assert (
        "check-kernels: could not install triton==0.0.1 (offline? KERNEL_TRITONS= checks only the installed Triton)"
        in proc.stderr
    )
    assert not (tmp_path / "triton-0.0.1").exists()
