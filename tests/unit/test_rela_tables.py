"""ReLA Tables 5 and 6 and Fig. 4's curves (fairseq_sparse_attn/tools/rela_tables.py) from
hand-made ``fsa-analyze`` results: the means over layers and over seeds computed here by
hand."""

import json

import pytest

from fairseq_sparse_attn.tools import rela_tables


def write_run(root, name, stats=None, align=None):
    run = root / name
    if stats is not None:
        (run / "stats").mkdir(parents=True)
        (run / "stats" / "stats.json").write_text(json.dumps(stats))
    if align is not None:
        (run / "align").mkdir(parents=True)
        (run / "align" / "align.json").write_text(json.dumps(align))
    return run


def layer(js, taus=None):
    return {"js": js, "js_temperatures": taus}


def read(path):
    lines = path.read_text().splitlines()
    return [dict(zip(lines[0].split("\t"), line.split("\t"))) for line in lines[1:]]


def aer_entry(setting, layer_aers, best_heads, method="weights"):
    """An align.json entry: layer attention AERs per layer, (head, AER) of each layer's best."""
    rows = [{"layer": i, "head": None, "aer": a} for i, a in enumerate(layer_aers)]
    rows += [{"layer": i, "head": h, "aer": a} for i, (h, a) in enumerate(best_heads)]
    return {
        "method": method,
        "setting": setting,
        "rows": rows,
        "layer_mean_aer": sum(layer_aers) / len(layer_aers),
        "best_head_mean_aer": sum(a for _, a in best_heads) / len(best_heads),
        "best_head_per_layer": [{"layer": i, "head": h, "aer": a} for i, (h, a) in enumerate(best_heads)],
    }


def test_tables_five_and_six_and_fig_four(tmp_path, capsys):
    relu_stats = {
        "attention": {
            "encoder_self": [layer(0.1, {"1": 0.2, "0.5": 0.4}), layer(0.3, {"1": 0.4, "0.5": 0.8})],
            "cross": [layer(0.5, {"1": 0.6, "0.5": 0.1})],
        }
    }
    softmax_stats = {"attention": {"encoder_self": [layer(0.2), layer(0.6)], "decoder_self": [layer(0.1)]}}
    seed1 = {
        "results": [
            aer_entry("awo", [0.5, 0.3], [(2, 0.4), (1, 0.2)]),
            aer_entry("awi", [0.4, 0.4], [(0, 0.3), (0, 0.3)]),
        ]
    }
    seed1["results"].insert(0, aer_entry("awo", [0.9, 0.9], [(0, 0.9), (0, 0.9)], method="norms"))
    seed2 = {
        "results": [
            aer_entry("awo", [0.3, 0.1], [(2, 0.2), (1, 0.2)]),
            aer_entry("awi", [0.2, 0.2], [(0, 0.1), (0, 0.1)]),
        ]
    }
    relu1 = write_run(tmp_path, "relu1", relu_stats, seed1)
    relu2 = write_run(tmp_path, "relu2", relu_stats, seed2)
    softmax = write_run(tmp_path, "softmax", softmax_stats)  # no align.json: left out of Table 5
    runs = [f"ReLA-g={relu1}", f"ReLA-g={relu2}", f"softmax={softmax}"]
    assert rela_tables.main(["--out", str(tmp_path / "out"), *runs]) == 0
    assert "softmax: no" in capsys.readouterr().err
    five = read(tmp_path / "out" / "table5.tsv")
    assert five == [  # in %, the mean of the two seeds
        {"model": "ReLA-g", "attention": "normal", "AoL_percent": "30.0000", "AoH_percent": "25.0000", "runs": "2"},
        {"model": "ReLA-g", "attention": "shifted", "AoL_percent": "30.0000", "AoH_percent": "20.0000", "runs": "2"},
    ]
    four = {(r["attention"], r["layer"]): (r["layer_attention_aer_percent"], r["best_head_aer_percent"])
            for r in read(tmp_path / "out" / "fig4.tsv")}  # fmt: skip
    assert four[("normal", "0")] == ("40.0000", "30.0000") and four[("normal", "1")] == ("20.0000", "20.0000")
    six = {
        (r["model"], r["kind"], r["tau"]): (r["js_mean_over_layers"], r["runs"])
        for r in read(tmp_path / "out" / "table6.tsv")
    }
    assert six == {
        ("ReLA-g", "enc", "1"): ("0.3000", "2"),  # (0.2 + 0.4) / 2
        ("ReLA-g", "enc", "0.5"): ("0.6000", "2"),
        ("ReLA-g", "cross", "1"): ("0.6000", "2"),
        ("ReLA-g", "cross", "0.5"): ("0.1000", "2"),
        ("softmax", "enc", "-"): ("0.4000", "1"),  # a distribution: its one JS
        ("softmax", "dec", "-"): ("0.1000", "1"),
    }


def test_an_align_result_without_gold_is_one_clear_error(tmp_path, capsys):
    run = write_run(tmp_path, "r", align={"results": [{"method": "weights", "setting": "awo", "rows": []}]})
    assert rela_tables.main(["--out", str(tmp_path / "out"), f"r={run}"]) == 2
    assert "align.json has no AER (was it run with --gold?)" in capsys.readouterr().err


def test_no_run_with_results_is_an_error_not_empty_tables(tmp_path, capsys):
    """Every run left out wrote three header-only tables with exit status 0."""
    empty = tmp_path / "empty"
    (empty / "stats").mkdir(parents=True)
    (empty / "stats.json").write_text("{}")  # at the top, not in stats/
    assert rela_tables.main(["--out", str(tmp_path / "out"), f"a={empty}"]) == 2
    assert "none of the 1 run(s) has align/align.json or stats/stats.json" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_missing_value_makes_its_mean_missing_not_a_mean_over_fewer(tmp_path):
    """An undefined JS (None: negative weights, say) in one layer, or in one run, leaves the
    Table 6 cell empty ("-"): a mean over the other layers or runs would be another
    quantity."""
    run1 = write_run(
        tmp_path,
        "a",
        {"attention": {"encoder_self": [layer(0.1, {"1": None, "0.5": 0.4}), layer(0.3, {"1": 0.4, "0.5": 0.8})]}},
    )
    run2 = write_run(
        tmp_path,
        "b",
        {"attention": {"encoder_self": [layer(0.1, {"1": 0.2, "0.5": 0.4}), layer(0.3, {"1": 0.4, "0.5": 0.8})]}},
    )
    assert rela_tables.main(["--out", str(tmp_path / "out"), f"ReLA-g={run1}", f"ReLA-g={run2}"]) == 0
    six = {(r["tau"]): r["js_mean_over_layers"] for r in read(tmp_path / "out" / "table6.tsv")}
    assert six == {"1": "-", "0.5": "0.6000"}
    assert rela_tables.table6_values("x", {"attention": {"encoder_self": [layer(0.2), layer(None)]}}) == {
        ("x", "enc", "-"): (None,)
    }


def test_a_file_as_out_or_a_run_given_twice_is_one_line_before_reading(tmp_path, capsys):
    """--out naming a file was a FileExistsError traceback after every run was read; a run
    directory given twice (under one label or two) counted twice in its label's mean."""
    run = tmp_path / "run"
    (run / "stats").mkdir(parents=True)
    blocker = tmp_path / "file"
    blocker.write_text("")
    for out, message in (
        (blocker, f"--out {blocker} is a file, not a directory"),
        (blocker / "x", f"--out {blocker}/x: {blocker} is a file, not a directory"),
    ):
        with pytest.raises(SystemExit):
            rela_tables.main(["--out", str(out), f"a={run}"])
        assert capsys.readouterr().err.splitlines()[0].startswith(f"rela_tables: error: {message}")
    with pytest.raises(SystemExit):
        rela_tables.main(["--out", str(tmp_path / "o"), f"a={run}", f"b={tmp_path}/./run"])
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"b={run}: the run directory a={run} is given twice" in err[0]
    assert not (tmp_path / "o").exists()
