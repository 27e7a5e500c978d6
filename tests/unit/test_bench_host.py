"""benchmarks/bench_host.py: the host time of a training step per preset against stock
fairseq (docs/performance.md, "Host time of a training step").  Checked here: it runs, the
kernels' launches are stubbed only while it times, a triton row really ran the kernels'
ops, the JSON carries its provenance, and bad arguments get one line.  No timing is
asserted (a timing is never a test)."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_host  # noqa: E402

from fairseq_sparse_attn.provenance import check_provenance  # noqa: E402

from conftest import require_kernels  # noqa: E402

require_kernels()  # the Triton kernels run here, else the module skips (CI: fails)

QUICK = ["--rounds", "1", "--warmup", "1", "--min-time", "0"]


def test_it_times_stock_and_a_triton_preset_and_writes_its_json(tmp_path, capsys):
    from fairseq_sparse_attn.kernels import output_norm, relu_attention

    launchers = (relu_attention._launch, output_norm._launch)
    out = tmp_path / "host.json"
    result = bench_host.main(["--presets", "rela_g_triton", *QUICK, "--json", str(out)])
    assert (relu_attention._launch, output_norm._launch) == launchers  # the stubs are gone
    rows = result["presets"]
    assert list(rows) == ["stock", "rela_g_triton"]  # the baseline comes first, always
    assert rows["stock"]["kernel_ops_per_step"] == 0
    assert rows["rela_g_triton"]["launch_paths"] is None  # stubbed: no launch to count
    # 18 attention calls: forward, one-pass backward (fp16), norm forward and backward
    assert rows["rela_g_triton"]["kernel_ops_per_step"] == 4 * 18
    assert rows["stock"]["speed_vs_stock"]["median"] == 1.0
    assert result["kernel_launches"] == "stubbed" and result["dtype"] == "float16" and result["clock"] == "cpu"
    data = json.loads(out.read_text())
    check_provenance(data)
    assert data["presets"]["rela_g_triton"]["ops_per_step"] == rows["rela_g_triton"]["ops_per_step"]
    table = capsys.readouterr().out
    assert "| rela_g_triton |" in table and "speed vs stock" in table


def test_the_launches_are_stubbed_inside_only():
    from fairseq_sparse_attn.kernels import relu_attention

    real = relu_attention._launch
    with bench_host.stubbed_launches():
        assert relu_attention._launch is not real
        assert relu_attention._launch("relu_attention_fwd", {}, (1,), ()) is None
    assert relu_attention._launch is real


def test_a_triton_row_that_ran_no_kernel_is_refused(monkeypatch):
    """A preset named *_triton whose modules did not reach the kernels (here: its backend
    left to auto, which does not take triton on a CPU) would time the eager path under
    the kernels' name: refused with one line."""
    monkeypatch.setitem(bench_host.PRESETS, "rela_g_triton", ("rela_transformer_wmt_en_de", {}))
    with pytest.raises(SystemExit, match="rela_g_triton dispatched no kernel op"):
        bench_host.main(["--presets", "rela_g_triton", *QUICK])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--presets", "stock,nope"], "--presets: unknown nope"),
        (["--heads", "2", "--width", "96"], "the head dim must be 32, 64, 128 or 256"),
        (["--profile", "-1"], "--profile -1: must be 0 (no profile) or a number of steps"),
    ],
)
def test_bad_arguments_get_one_line(args, message, capsys):
    with pytest.raises(SystemExit) as stop:
        bench_host.main(args)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_with_attention_dropout_every_preset_applies_it():
    """--attention-dropout 0.1 (the papers' setting): the triton row applies it inside the
    kernels (one seed drawn per attention call, its dropout forms launched) and every row
    records it; a value outside [0, 1) is one line."""
    without = bench_host.main(["--presets", "rela_g_triton", *QUICK])["presets"]
    result = bench_host.main(["--presets", "rela_g,rela_g_triton", *QUICK, "--attention-dropout", "0.1"])
    assert result["attention_dropout"] == 0.1
    rows = result["presets"]
    assert rows["rela_g_triton"]["kernel_ops_per_step"] == 4 * 18
    # one seed per attention call (aten.randint), nothing else; stock's fused attention
    # applies dropout with ops of its own
    assert rows["rela_g_triton"]["ops_per_step"] == without["rela_g_triton"]["ops_per_step"] + 18
    assert rows["stock"]["ops_per_step"] > without["stock"]["ops_per_step"]
    with pytest.raises(SystemExit):
        bench_host.main(["--presets", "rela_g", *QUICK, "--attention-dropout", "1.5"])


def test_with_profile_every_preset_gets_where_its_host_time_goes(tmp_path, capsys):
    """--profile N: each preset's profile of N steps in the JSON (benchmarks/host_profile.py)
    and its row in the printed table; the kernels' ops show up as the triton row's own
    share (stubbed launches: they do nothing but their host work), stock has none."""
    out = tmp_path / "host.json"
    result = bench_host.main(["--presets", "rela_g_triton", *QUICK, "--profile", "2", "--json", str(out)])
    profiles = result["profile"]
    assert list(profiles) == ["stock", "rela_g_triton"] and all(p["steps"] == 2 for p in profiles.values())
    assert profiles["stock"]["host_ms_per_step"]["package_ops"] == 0.0
    assert profiles["rela_g_triton"]["host_ms_per_step"]["package_ops"] > 0.0
    assert json.loads(out.read_text())["profile"]["rela_g_triton"]["steps"] == 2
    table = capsys.readouterr().out
    assert "where the host time of a profiled step goes" in table and "rela_g_triton top host:" in table
    assert "profile" not in bench_host.main(["--presets", "rela_g_triton", *QUICK])  # off by default


def test_with_triton_launches_the_kernels_go_through_triton_s_launch_path(capsys):
    """``--launches triton``: the launches run Triton's compiled launch path with a null
    driver (benchmarks/triton_host_launch.py), and Triton's driver is restored after."""
    import triton
    import triton_host_launch

    seen = []
    real = triton_host_launch._NullLauncher.__call__

    def counting(self, *args):
        seen.append(self.name)
        return real(self, *args)

    driver = triton.runtime.driver._active
    triton_host_launch._NullLauncher.__call__ = counting
    try:
        result = bench_host.main(["--presets", "reluformer_triton", *QUICK, "--launches", "triton"])
    finally:
        triton_host_launch._NullLauncher.__call__ = real
    assert result["kernel_launches"] == "triton launch path, null driver (sm_90)"
    assert result["presets"]["reluformer_triton"]["kernel_ops_per_step"] == 2 * 18
    # after the warm step, every launch goes straight to the compiled kernel's launcher
    assert result["presets"]["reluformer_triton"]["launch_paths"] == {
        "plan_launches": 2 * 18,
        "through_triton": 0,
        "plans_made": 0,
    }
    assert result["presets"]["stock"]["launch_paths"] is None
    # the line the GPU session's host step keeps (benchmarks/gpu_session.sh greps "one warm step:")
    assert (
        "reluformer_triton, one warm step: 36 kernel launches, 0 of them through Triton's own launch path, "
        "0 plans made" in capsys.readouterr().out
    )
    assert seen and set(seen) <= {"_relu_attention_fwd", "_relu_attention_bwd_dkdv"}
    assert triton.runtime.driver._active is driver


def test_launch_paths_count_a_step_s_plans_and_triton_s_path():
    """A step whose plans are new (a batch shape not seen before) makes a plan per call
    signature and launches each one's first call through Triton's path; the next step of
    that shape launches directly."""
    import torch
    from triton_host_launch import host_only_launches

    import fairseq_sparse_attn.plugin  # noqa: F401
    from fairseq_sparse_attn.kernels.launch import clear_plans
    from fairseq_sparse_attn.models.standalone import synthetic_dictionary

    dictionary = synthetic_dictionary(100)
    with host_only_launches():
        model = bench_host.build("reluformer_triton", dictionary, 1, 32, torch.device("cpu"), torch.float16)
        step = bench_host.step_fn(model, bench_host.make_batch(dictionary, 2, 6, torch.device("cpu")))
        step()
        clear_plans()
        fresh = bench_host.launch_paths_of(step)
        warm = bench_host.launch_paths_of(step)
    # 2 call signatures (the encoder's self-attention and the cross-attention are the same
    # call here: source and target of 6 tokens, the source's padding; the decoder's is
    # causal) x (forward, one-pass backward)
    assert fresh == {"plan_launches": 36, "through_triton": 4, "plans_made": 4}
    assert warm == {"plan_launches": 36, "through_triton": 0, "plans_made": 0}
