"""scripts/check_readme.py: the README's demo blocks rendered from a hand-built results
JSON, checked figure by figure (half a unit of the last printed digit), with a missing JSON
rendered as "not measured" and publishing by recipe."""

import copy
import json
import runpy
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
tool = runpy.run_path(str(REPO / "scripts" / "check_readme.py"))

KINDS = ("encoder_self", "decoder_self", "cross")


def run_of(bleu, ci, p, loss, rep, ratio, nulls):
    return {
        "bleu": bleu,
        "bleu_ci95": ci,
        "p_value_vs_baseline": p,
        "final_valid_loss": loss,
        "lr": 1e-3,
        "repetition_rate": rep,
        "length_ratio": ratio,
        "attention": {k: {"sparsity": 0.5, "null_rate": v} for k, v in zip(KINDS, nulls)},
    }


RESULTS = {
    "recipe": "cuda",
    "regime": "real budget on a GPU",
    "models_compared": ["softmax", "rela_g"],
    "seeds": [1, 2],
    "per_seed": {
        "1": {
            "softmax": run_of(27.99, [27.1, 28.9], None, 3.1, 0.22, 1.006, [0, 0, 0]),
            "rela_g": run_of(31.66, [30.8, 32.5], 0.001, 3.0, 0.31, 1.046, [0.2, 0.3, 0.1234]),
        },
        "2": {
            "softmax": run_of(29.83, [28.9, 30.7], None, 3.2, 0.25, 1.0, [0, 0, 0]),
            "rela_g": run_of(30.42, [29.5, 31.3], 0.031, 3.05, 0.3, 1.04, [0.2, 0.3, 0.1]),
        },
    },
    "models": {
        n: {
            "bleu_mean": b,
            "final_valid_loss_mean": 3.0,
            "repetition_rate_mean": 0.3,
            "length_ratio_mean": 1.0,
            "attention_mean": {k: {"null_rate": 0.0} for k in KINDS},
        }
        for n, b in (("softmax", 28.91), ("rela_g", 31.04))
    },
    "test_set": "Multi30k test_2016_flickr",
    "test_sentences": 1000,
    "signature": "nrefs:1|bs:1000",
    "paired_bootstrap_resamples": 1000,
    "provenance": {
        "device": "NVIDIA H100 80GB HBM3",
        "versions": {"torch": "2.5.1", "fairseq": "0.12.3"},
        "date": "2026-11-25T14:00:00+00:00",
        "git_commit": "0123456789abcdef",
        "git_dirty": False,
        "command": "scripts/demo.py --out demo_out --recipe auto",
    },
}
README = (
    "# x\n\nintro\n\n<!-- BEGIN demo-cpu -->\nold\n<!-- END demo-cpu -->\n\ntext\n\n<!-- BEGIN demo-cuda -->\n"
    "<!-- END demo-cuda -->\nend\n\n<!-- BEGIN bench-gpu -->\n<!-- END bench-gpu -->\n"
)


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "demo-cuda.json").write_text(json.dumps(RESULTS))
    (tmp_path / "README.md").write_text(README)
    return tmp_path


def check(repo):
    return tool["check"](repo / "README.md", repo / "results")


def test_written_blocks_pass_and_keep_the_rest(repo):
    assert check(repo)  # the placeholder 'old' and the empty cuda block disagree with the JSON
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    assert check(repo) == []
    assert text.startswith("# x\n\nintro\n\n<!-- BEGIN demo-cpu -->\n") and text.endswith("<!-- END bench-gpu -->\n")
    assert "Not measured yet: `docs/results/bench-gpu.json` does not exist.  Measure it with `make bench-gpu`" in text
    assert "\ntext\n" in text
    # the missing cpu JSON: "not measured" and the command
    assert "Not measured yet: `docs/results/demo-cpu.json` does not exist" in text and "make publish-demo" in text
    # the figures, as the JSON has them; device, date and commit
    assert "| 1 | rela_g | 31.66 | 30.8–32.5 | 0.001 | 3.000 | 0.310 | 1.046 | 0.200 / 0.300 / 0.123 |" in text
    assert "| mean | rela_g | 31.04 |" in text
    assert "NVIDIA H100 80GB HBM3" in text and "2026-11-25" in text and "`0123456789`" in text
    assert tool["main"](["--readme", str(repo / "README.md"), "--results", str(repo / "results")]) == 0


@pytest.mark.parametrize(
    "old, new, named",
    [
        (
            "| 1 | rela_g | 31.66 |",
            "| 1 | rela_g | 31.76 |",
            "seed 1 rela_g sacreBLEU is 31.76 in the README, 31.66 in the JSON",
        ),
        ("0.200 / 0.300 / 0.123 |", "0.200 / 0.300 / 0.125 |", "seed 1 rela_g cross null rate is 0.125"),
        (
            "| 2 | rela_g | 30.42 | 29.5–31.3 | 0.031 |",
            "| 2 | rela_g | 30.42 | 29.5–31.3 | 0.01 |",
            "seed 2 rela_g p-value is 0.01",
        ),
    ],
)
def test_a_hand_edited_figure_fails_naming_it(repo, old, new, named, capsys):
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    assert old in text
    (repo / "README.md").write_text(text.replace(old, new))
    problems = check(repo)
    assert len(problems) == 1 and named in problems[0], problems
    assert tool["main"](["--readme", str(repo / "README.md"), "--results", str(repo / "results")]) == 1
    assert named in capsys.readouterr().err


def test_tolerance_is_half_a_unit_of_the_last_printed_digit(repo):
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    # printed with fewer digits: 31.7 stands for [31.65, 31.75], which holds 31.66
    (repo / "README.md").write_text(text.replace("| 1 | rela_g | 31.66 |", "| 1 | rela_g | 31.7 |"))
    assert check(repo) == []
    (repo / "README.md").write_text(text.replace("| 1 | rela_g | 31.66 |", "| 1 | rela_g | 31.6 |"))
    assert "tolerance ±0.05" in check(repo)[0]
    agrees = tool["agrees"]
    assert agrees("6.16", 6.155) and agrees("6.16", 6.1649) and not agrees("6.16", 6.1651) and agrees("6", 6.4)


def test_words_and_missing_pieces(repo, capsys):
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    (repo / "README.md").write_text(text.replace("| 2 | rela_g |", "| 2 | rela_i |"))
    assert "the text differs from the JSON's rendering" in check(repo)[0]
    # the cuda JSON removed: the README's measured table no longer matches "not measured"
    (repo / "README.md").write_text(text)
    (repo / "results" / "demo-cuda.json").unlink()
    assert "block demo-cuda has" in check(repo)[0]
    tool["write"](repo / "README.md", repo / "results")
    assert check(repo) == []
    # no markers: one line naming them
    (repo / "README.md").write_text("# no blocks\n")
    assert tool["main"](["--readme", str(repo / "README.md"), "--results", str(repo / "results")]) == 1
    assert "no <!-- BEGIN demo-cpu --> ... <!-- END demo-cpu --> pair" in capsys.readouterr().err
    # a JSON that is not a demo result
    (repo / "README.md").write_text(README)
    (repo / "results" / "demo-cpu.json").write_text('{"rows": []}')
    assert tool["main"](["--check", "--readme", str(repo / "README.md"), "--results", str(repo / "results")]) == 1
    assert "demo-cpu.json: not a demo results.json" in capsys.readouterr().err


def test_publish_by_recipe(repo, tmp_path):
    out = tmp_path / "demo_out"
    out.mkdir()
    cpu = copy.deepcopy(RESULTS)
    cpu.update(recipe="cpu", seeds=[1], per_seed={"1": RESULTS["per_seed"]["1"]})
    cpu["provenance"]["device"] = "cpu"
    (out / "results.json").write_text(json.dumps(cpu))
    assert (
        tool["main"](
            [
                "--publish",
                str(out / "results.json"),
                "--readme",
                str(repo / "README.md"),
                "--results",
                str(repo / "results"),
            ]
        )
        == 0
    )
    assert json.loads((repo / "results" / "demo-cpu.json").read_text()) == cpu
    assert "| 1 | rela_g | 31.66 |" in (repo / "README.md").read_text() and check(repo) == []
    assert "| mean |" not in (repo / "README.md").read_text().split("BEGIN demo-cuda")[0]  # one seed: no mean row
    cpu["recipe"] = "cuda"  # the cuda recipe run on a CPU is not the GPU table
    (out / "results.json").write_text(json.dumps(cpu))
    assert (
        tool["main"](
            [
                "--publish",
                str(out / "results.json"),
                "--readme",
                str(repo / "README.md"),
                "--results",
                str(repo / "results"),
            ]
        )
        == 1
    )


def gpu_result():
    def check(dtype, d, ok):
        return {"kernel": "relu_attention", "dtype": dtype, "head_dim": d, "ok": ok}

    def timed(length, ratio):
        spread = {"min": 0.40, "max": 0.42} if length == 1024 else {}
        return {"dtype": "fp16", "length": length, "causal": False, "speedup_vs_flash": {"mean": ratio, **spread}}

    return {
        "provenance": {
            "device": "NVIDIA H100 80GB HBM3",
            "versions": {"torch": "2.11.0", "triton": "3.6.0"},
            "date": "2026-11-26",
            "git_commit": "d775827abc",
        },
        "parts": {
            "kernels": {
                "correctness": [check("fp16", 64, True), check("fp32", 64, False), check("fp32", 128, False)],
                "timing": [timed(1024, 0.41), timed(4096, 0.68), dict(timed(4096, 9.0), causal=True)],
            },
            "loss_scale": {
                "updates": 1000,
                "presets": {
                    "softmax": {"median": 64.0, "overflows": 1},
                    "rela_g": {"median": 16.0, "overflows": 3},
                    "rela_g_triton": {"median": None, "why_short": "its run failed"},
                },
            },
            "train": {
                "fp16": {
                    "valid": True,
                    "ratios": {
                        "softmax": {"median": 1.0},
                        "rela_g": {"median": 0.934},
                        "rela_g_triton": {"median": 0.966, "min": 0.923, "max": 1.009, "rounds": 2},
                    },
                },
                "bf16": {"valid": False, "ratios": {}, "why_short": "no run"},
            },
        },
    }


def test_gpu_block_renders_the_bench_gpu_result_and_names_an_edited_figure(repo):
    (repo / "results" / "bench-gpu.json").write_text(json.dumps(gpu_result()))
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    assert check(repo) == []
    assert "GPU: NVIDIA H100 80GB HBM3, torch 2.11.0, Triton 3.6.0; 2026-11-26; commit `d775827abc`" in text
    assert "1 of 3 correctness checks pass" in text and "fp32 failed at head dims 64, 128" in text
    assert "0.41× [0.40–0.42] at 1,024 tokens, 0.68× at 4,096 tokens" in text  # non-causal fp16 rows only
    assert "softmax 64 (1 overflows); rela_g 16 (3 overflows); rela_g_triton not measured (its run failed)" in text
    assert "fp16 rela_g 0.93×, rela_g_triton 0.97× [0.92–1.01, 2 rounds]; bf16 not measured (no run)" in text
    (repo / "README.md").write_text(text.replace("0.68× at 4,096", "0.78× at 4,096"))
    problems = check(repo)
    assert len(problems) == 1 and "kernel speed at 4096 tokens is 0.78 in the README, 0.68 in the JSON" in problems[0]


def test_the_train_line_says_what_its_updates_per_second_cover(repo):
    """A train part recorded since bench_gpu measures after each run's first epoch says so;
    one recorded before (no ``window``) says its rates include the first epoch."""
    result = gpu_result()
    (repo / "results" / "bench-gpu.json").write_text(json.dumps(result))
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    assert "from its second log interval, its first epoch included" in text and "after its first epoch" not in text
    for part in result["parts"]["train"].values():
        part["window"] = "after_first_epoch"
    (repo / "results" / "bench-gpu.json").write_text(json.dumps(result))
    assert len(check(repo)) == 1  # the README still says the old window
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    assert "each run's updates/s after its first epoch;" in text and "first epoch included" not in text
    assert check(repo) == []


def test_gpu_json_that_is_not_a_bench_gpu_result_is_one_line(repo):
    (repo / "results" / "bench-gpu.json").write_text(json.dumps({"seeds": []}))
    with pytest.raises(tool["ReadmeError"], match="not a make bench-gpu result"):
        check(repo)


def test_gpu_block_renders_each_device_familys_file_after_bench_gpu_json(repo):
    """Another family's run (bench-gpu-h200.json) is its own group of lines after the
    H100's bench-gpu.json (auto decides per family, so the files are never merged); one
    round is "1 round"; an edited figure in the second group is named."""
    (repo / "results" / "bench-gpu.json").write_text(json.dumps(gpu_result()))
    h200 = gpu_result()
    h200["provenance"]["device"] = "NVIDIA H200"
    train = h200["parts"]["train"]
    train["fp16"]["ratios"]["rela_g_triton"].update(min=0.89, max=0.89, rounds=1, median=0.89)
    train["bf16"] = {"ratios": {"rela_g_triton": {"median": 1.131, "min": 1.063, "max": 1.223, "rounds": 3}}}
    (repo / "results" / "bench-gpu-h200.json").write_text(json.dumps(h200))
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    assert check(repo) == []
    first, second = text.index("GPU: NVIDIA H100 80GB HBM3"), text.index("GPU: NVIDIA H200,")
    assert first < second and "`docs/results/bench-gpu-h200.json`." in text[second:]
    assert text[:second].endswith(".\n\n")  # a paragraph of its own, not part of the H100 list
    assert "rela_g_triton 0.89× [0.89–0.89, 1 round];" in text[second:]
    assert "bf16 rela_g_triton 1.13× [1.06–1.22, 3 rounds]." in text[second:]
    (repo / "README.md").write_text(text[:second] + text[second:].replace("1.13×", "1.23×"))
    problems = check(repo)
    assert len(problems) == 1
    assert "docs/results/bench-gpu-h200.json: bf16 rela_g_triton updates/s ratio is 1.23 in the README" in problems[0]
    # no bench-gpu.json: its "not measured" line still comes first
    (repo / "results" / "bench-gpu.json").unlink()
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    assert text.index("Not measured yet: `docs/results/bench-gpu.json`") < text.index("\n\nGPU: NVIDIA H200,")


def test_gpu_block_renders_a_recorded_train_ab_part(repo):
    """A result with train_ab.py's paired blocks (parts -> train_ab -> dtype) gets a line of
    its own: per preset the median and 95% interval of its per-block ratios to softmax, and
    for the kernels their wins against eager with the sign test; an edited figure is named."""
    result = gpu_result()
    ratio = {"median": 0.962, "ci95_low": 0.951, "ci95_high": 0.975, "min": 0.9, "max": 1.02, "rounds": 40}
    result["parts"]["train_ab"] = {
        "fp16": {
            "blocks": [{"round": r + 1, "ups": {}} for r in range(40)],
            "summary": {
                "softmax": {"ups_median": 14.0, "ratio_to_softmax": {**ratio, "median": 1.0}},
                "rela_g": {"ups_median": 13.4, "ratio_to_softmax": ratio},
                "rela_g_triton": {
                    "ups_median": 13.9,
                    "ratio_to_softmax": {**ratio, "median": 0.991, "ci95_low": 0.98, "ci95_high": 1.004},
                    "against_rela_g": {"faster_blocks": 31, "blocks": 40, "sign_test_p": 0.00027},
                },
                "reluformer_triton": {
                    "ups_median": 14.1,
                    "ratio_to_softmax": {**ratio, "median": 1.01},
                    "against_reluformer": {"faster_blocks": 22, "blocks": 40, "sign_test_p": 0.318},
                },
            },
        }
    }
    (repo / "results" / "bench-gpu.json").write_text(json.dumps(result))
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    assert check(repo) == []
    assert (
        "fp16, 40 rounds: rela_g 0.96× [0.95–0.97], rela_g_triton 0.99× [0.98–1.00] (faster than eager in 31 "
        "of 40, sign test p < 0.001), reluformer_triton 1.01× [0.95–0.97] (faster than eager in 22 of 40, "
        "sign test p = 0.318)." in text
    )
    (repo / "README.md").write_text(text.replace("in 31 of 40", "in 33 of 40"))
    problems = check(repo)
    assert len(problems) == 1 and "fp16 rela_g_triton train_ab ratio wins is 33 in the README, 31" in problems[0]


def block_text(text, block):
    return text.split(f"<!-- BEGIN {block} -->\n", 1)[1].split(f"<!-- END {block} -->", 1)[0]


def test_demo_block_line_by_line(repo):
    """Every line of a two-seed GPU demo block, written out by hand from RESULTS: the regime
    as a sentence, the baseline named in the header and the footnote, "–" for the
    baseline's own p-value, the CI as low–high, the null rates in encoder / decoder / cross
    order, and a mean row per model (sacreBLEU, valid loss, repetition, length ratio,
    null rates) after the seeds."""
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    assert block_text(text, "demo-cuda").splitlines() == [
        "Real budget on a GPU.",
        "Device NVIDIA H100 80GB HBM3, torch 2.5.1, fairseq 0.12.3; 2026-11-25; commit `0123456789`; "
        "`Multi30k test_2016_flickr`, 1000 sentences; sacreBLEU `nrefs:1|bs:1000`.",
        "",
        "| seed | model | sacreBLEU | 95% CI | p vs softmax | valid loss | repetition rate | length ratio "
        "| null rate enc / dec / cross |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        "| 1 | softmax | 27.99 | 27.1–28.9 | – | 3.100 | 0.220 | 1.006 | 0.000 / 0.000 / 0.000 |",
        "| 1 | rela_g | 31.66 | 30.8–32.5 | 0.001 | 3.000 | 0.310 | 1.046 | 0.200 / 0.300 / 0.123 |",
        "| 2 | softmax | 29.83 | 28.9–30.7 | – | 3.200 | 0.250 | 1.000 | 0.000 / 0.000 / 0.000 |",
        "| 2 | rela_g | 30.42 | 29.5–31.3 | 0.031 | 3.050 | 0.300 | 1.040 | 0.200 / 0.300 / 0.100 |",
        "| mean | softmax | 28.91 | | | 3.000 | 0.300 | 1.000 | 0.000 / 0.000 / 0.000 |",
        "| mean | rela_g | 31.04 | | | 3.000 | 0.300 | 1.000 | 0.000 / 0.000 / 0.000 |",
        "",
        "p: paired bootstrap against softmax of the same seed (sacreBLEU, 1000 resamples).  "
        "Command: `scripts/demo.py --out demo_out --recipe auto`.",
    ]


def test_mean_row_figures_each_come_from_their_own_field(repo):
    """The mean row's valid loss, repetition rate, length ratio and null rates are each
    read from their own field (distinct values here, so a swapped field shows)."""
    results = copy.deepcopy(RESULTS)
    results["models"]["rela_g"].update(final_valid_loss_mean=3.111, repetition_rate_mean=0.222, length_ratio_mean=1.033)
    results["models"]["rela_g"]["attention_mean"] = {k: {"null_rate": v} for k, v in zip(KINDS, (0.101, 0.202, 0.303))}
    (repo / "results" / "demo-cuda.json").write_text(json.dumps(results))
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    assert "| mean | rela_g | 31.04 | | | 3.111 | 0.222 | 1.033 | 0.101 / 0.202 / 0.303 |\n" in text


def test_cpu_device_names_threads_and_cores(repo):
    """A demo run on the CPU is described by its threads and cores (the provenance's
    ``threads`` and ``cpu_count``), a GPU by its name."""
    cpu = copy.deepcopy(RESULTS)
    cpu.update(recipe="cpu", seeds=[1], per_seed={"1": RESULTS["per_seed"]["1"]})
    cpu["provenance"].update(device="cpu", threads=2, cpu_count=16)
    (repo / "results" / "demo-cpu.json").write_text(json.dumps(cpu))
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    assert "Device CPU (2 threads of 16 cores), torch 2.5.1" in block_text(text, "demo-cpu")
    assert "Device NVIDIA H100 80GB HBM3, torch" in block_text(text, "demo-cuda")


def test_every_end_marker_keeps_a_line_of_its_own_and_no_temporary_file_is_left(repo):
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    for block in ("demo-cpu", "demo-cuda", "bench-gpu"):
        assert f"\n<!-- END {block} -->\n" in text
    assert sorted(p.name for p in repo.iterdir()) == ["README.md", "results"]


def test_a_line_with_more_text_than_the_rendering_differs(repo):
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    line = "| 2 | rela_g | 30.42 | 29.5–31.3 | 0.031 | 3.050 | 0.300 | 1.040 | 0.200 / 0.300 / 0.100 |"
    (repo / "README.md").write_text(text.replace(line, line + " (best)"))
    problems = check(repo)
    assert len(problems) == 1 and "the text differs from the JSON's rendering" in problems[0]


def test_markers_in_the_wrong_order_are_one_line(repo, capsys):
    (repo / "README.md").write_text(
        README.replace(
            "<!-- BEGIN demo-cpu -->\nold\n<!-- END demo-cpu -->", "<!-- END demo-cpu -->\nold\n<!-- BEGIN demo-cpu -->"
        )
    )
    assert tool["main"](["--write", "--readme", str(repo / "README.md"), "--results", str(repo / "results")]) == 1
    assert "no <!-- BEGIN demo-cpu --> ... <!-- END demo-cpu --> pair" in capsys.readouterr().err


@pytest.mark.parametrize("block", ["demo-cuda", "bench-gpu"])
def test_a_result_without_provenance_is_refused(repo, block, capsys):
    """A published figure names where it was measured: a results file without provenance
    is refused in one line, for the demo blocks and the GPU block alike."""
    data = copy.deepcopy(RESULTS) if block == "demo-cuda" else gpu_result()
    del data["provenance"]
    (repo / "results" / f"{block}.json").write_text(json.dumps(data))
    assert tool["main"](["--write", "--readme", str(repo / "README.md"), "--results", str(repo / "results")]) == 1
    err = capsys.readouterr().err
    assert f"{block}.json: not a" in err and "provenance" in err and "Traceback" not in err
    assert (repo / "README.md").read_text() == README


def test_a_malformed_field_is_one_line_naming_the_file(repo, capsys):
    results = copy.deepcopy(RESULTS)
    results["per_seed"]["1"]["rela_g"]["bleu_ci95"] = None
    (repo / "results" / "demo-cuda.json").write_text(json.dumps(results))
    assert tool["main"](["--readme", str(repo / "README.md"), "--results", str(repo / "results")]) == 1
    err = capsys.readouterr().err
    assert "demo-cuda.json: missing or malformed field" in err and "re-run make publish-demo" in err
    assert len(err.strip().splitlines()) == 1


def test_an_unreadable_readme_is_one_line(repo, capsys):
    assert tool["main"](["--readme", str(repo / "missing.md"), "--results", str(repo / "results")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "missing.md" in err and "Traceback" not in err


def test_publishing_a_gpu_demo_writes_the_cuda_table_only(repo, tmp_path):
    """What the next GPU session does: the cuda recipe's results.json, from a GPU, goes to
    demo-cuda.json, and the cpu table's JSON is left as it was."""
    cpu = copy.deepcopy(RESULTS)
    cpu.update(recipe="cpu", seeds=[1], per_seed={"1": RESULTS["per_seed"]["1"]})
    cpu["provenance"]["device"] = "cpu"
    (repo / "results" / "demo-cpu.json").write_text(json.dumps(cpu))
    (repo / "results" / "demo-cuda.json").unlink()
    gpu = copy.deepcopy(RESULTS)
    gpu["per_seed"]["1"]["rela_g"]["bleu"] = 33.33
    (tmp_path / "results.json").write_text(json.dumps(gpu))
    args = ["--readme", str(repo / "README.md"), "--results", str(repo / "results")]
    assert tool["main"](["--publish", str(tmp_path / "results.json"), *args]) == 0
    assert json.loads((repo / "results" / "demo-cuda.json").read_text()) == gpu
    assert json.loads((repo / "results" / "demo-cpu.json").read_text()) == cpu
    text = (repo / "README.md").read_text()
    assert "| 1 | rela_g | 33.33 |" in block_text(text, "demo-cuda")
    assert "| 1 | rela_g | 31.66 |" in block_text(text, "demo-cpu") and check(repo) == []


@pytest.mark.parametrize("recipe", [None, "gpu"])
def test_publishing_a_result_of_no_known_recipe_is_refused(repo, tmp_path, recipe, capsys):
    data = copy.deepcopy(RESULTS)
    if recipe is None:
        del data["recipe"]
    else:
        data["recipe"] = recipe
    (tmp_path / "results.json").write_text(json.dumps(data))
    args = ["--readme", str(repo / "README.md"), "--results", str(repo / "results")]
    assert tool["main"](["--publish", str(tmp_path / "results.json"), *args]) == 1
    assert f"recipe is {recipe!r}, expected cpu or cuda" in capsys.readouterr().err
    assert sorted(p.name for p in (repo / "results").iterdir()) == ["demo-cuda.json"]


def gpu_line(text, start):
    return next(line for line in text.splitlines() if line.startswith(start))


def test_gpu_block_lines_in_full(repo):
    """The kernel-speed line takes the non-causal fp16 rows only, and ends there; a failed
    loss-scale run as bench_gpu.py records it (overflows counted, no median) says so."""
    result = gpu_result()
    result["parts"]["loss_scale"]["presets"]["rela_g_triton"] = {
        "returncode": "timed out at --budget",
        "scales": [],
        "overflows": 0,
        "median": None,
    }
    (repo / "results" / "bench-gpu.json").write_text(json.dumps(result))
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    assert check(repo) == []
    assert gpu_line(text, "- ReLU attention forward+backward") == (
        "- ReLU attention forward+backward (Triton) against SDPA flash, head dim 64, fp16: 0.41× [0.40–0.42] at "
        "1,024 tokens, 0.68× at 4,096 tokens (mean [min–max] of paired repeats; target ≥ 1.15× from 1,024)."
    )
    assert gpu_line(text, "- fp16 loss scale") == (
        "- fp16 loss scale over 1,000 updates: softmax 64 (1 overflows); rela_g 16 (3 overflows); "
        "rela_g_triton not measured (its run failed)."
    )


def test_gpu_spread_needs_both_ends_and_an_invalid_dtype_is_not_measured(repo):
    """A ratio with a minimum and no maximum gets no [min–max]; a dtype whose training part
    is marked invalid says "not measured" with its reason, even with ratios recorded."""
    result = gpu_result()
    result["parts"]["kernels"]["timing"][0]["speedup_vs_flash"] = {"mean": 0.41, "min": 0.40}
    result["parts"]["train"]["bf16"] = {
        "valid": False,
        "why_short": "a round was cut off",
        "ratios": {"rela_g": {"median": 1.2, "min": 1.1, "max": 1.3, "rounds": 3}},
    }
    (repo / "results" / "bench-gpu.json").write_text(json.dumps(result))
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    assert check(repo) == []
    assert "fp16: 0.41× at 1,024 tokens, 0.68× at 4,096 tokens (" in text
    assert "; bf16 not measured (a round was cut off)." in text and "1.20×" not in text


@pytest.mark.parametrize("p, printed", [(0.0009, "p < 0.001"), (0.004, "p = 0.004"), (0.001, "p = 0.001")])
def test_train_ab_sign_test_p_is_bounded_only_below_a_thousandth(repo, p, printed):
    result = gpu_result()
    result["parts"]["train_ab"] = {
        "fp16": {
            "blocks": [{"round": r + 1} for r in range(12)],
            "summary": {
                "rela_g_triton": {
                    "ratio_to_softmax": {"median": 0.99, "ci95_low": 0.98, "ci95_high": 1.0},
                    "against_rela_g": {"faster_blocks": 11, "blocks": 12, "sign_test_p": p},
                }
            },
        }
    }
    (repo / "results" / "bench-gpu.json").write_text(json.dumps(result))
    tool["write"](repo / "README.md", repo / "results")
    assert f"(faster than eager in 11 of 12, sign test {printed})." in (repo / "README.md").read_text()


def test_gpu_family_files_render_in_name_order(repo):
    (repo / "results" / "bench-gpu.json").write_text(json.dumps(gpu_result()))
    for family, device in (("h200", "NVIDIA H200"), ("a100", "NVIDIA A100")):
        result = gpu_result()
        result["provenance"]["device"] = device
        (repo / "results" / f"bench-gpu-{family}.json").write_text(json.dumps(result))
    tool["write"](repo / "README.md", repo / "results")
    text = (repo / "README.md").read_text()
    order = [text.index(f"GPU: {d},") for d in ("NVIDIA H100 80GB HBM3", "NVIDIA A100", "NVIDIA H200")]
    assert order == sorted(order)
