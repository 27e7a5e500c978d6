"""The ahead-of-time kernel check (fairseq_sparse_attn/kernels/aot.py): discovery of every
``launch_configs()``, their validation, ptxas report parsing, the fit rules (a deliberately
oversized tile compiled for sm_80 is reported), and the generated table's markers.  The
full check over every configuration is ``make check-kernels`` (CI)."""

import pytest
import triton
import triton.language as tl
from triton.runtime.jit import JITFunction

from fairseq_sparse_attn.kernels import aot, output_norm

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


def test_problem_rules():
    ok = {"shared": 1000, "registers": 64, "stack": 0, "spill_stores": 0, "spill_loads": 0, "num_warps": 8}
    assert aot.problems("k", 90, ok) == []
    assert aot.problems("k", 90, dict(ok, shared=232448)) == []
    assert "232449 bytes of shared memory > 232448 on H100 (sm_90)" in aot.problems("k", 90, dict(ok, shared=232449))[0]
    assert "register spills" in aot.problems("k", 80, dict(ok, spill_loads=4))[0]
    assert "registers x 512 threads > 65536" in aot.problems("k", 80, dict(ok, registers=200, num_warps=16))[0]


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
