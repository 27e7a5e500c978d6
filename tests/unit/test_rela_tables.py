"""ReLA Tables 5 and 6 (fairseq_sparse_attn/tools/rela_tables.py) from hand-made
``fsa-analyze`` results: the means over layers computed here by hand."""

import json

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


def test_tables_five_and_six(tmp_path, capsys):
    relu_stats = {
        "attention": {
            "encoder_self": [layer(0.1, {"1": 0.2, "0.5": 0.4}), layer(0.3, {"1": 0.4, "0.5": 0.8})],
            "cross": [layer(0.5, {"1": 0.6, "0.5": 0.1})],
        }
    }
    softmax_stats = {"attention": {"encoder_self": [layer(0.2), layer(0.6)], "decoder_self": [layer(0.1)]}}
    align = {
        "results": [
            {"method": "norms", "setting": "awo", "layer_mean_aer": 0.9, "best_head_mean_aer": 0.9},
            {"method": "weights", "setting": "awi", "layer_mean_aer": 0.4, "best_head_mean_aer": 0.3},
            {"method": "weights", "setting": "awo", "layer_mean_aer": 0.5, "best_head_mean_aer": 0.45},
        ]
    }
    relu = write_run(tmp_path, "relu", relu_stats, align)
    softmax = write_run(tmp_path, "softmax", softmax_stats)  # no align.json: left out of Table 5
    assert rela_tables.main(["--out", str(tmp_path / "out"), f"ReLA-g={relu}", f"softmax={softmax}"]) == 0
    assert "softmax: no" in capsys.readouterr().err
    five = read(tmp_path / "out" / "table5.tsv")
    assert five == [
        {"model": "ReLA-g", "attention": "normal", "AoL": "0.5000", "AoH": "0.4500"},  # awo: α
        {"model": "ReLA-g", "attention": "shifted", "AoL": "0.4000", "AoH": "0.3000"},  # awi: α[1:]
    ]
    six = {(r["model"], r["kind"], r["tau"]): r["js_mean_over_layers"] for r in read(tmp_path / "out" / "table6.tsv")}
    assert six == {
        ("ReLA-g", "enc", "1"): "0.3000",  # (0.2 + 0.4) / 2
        ("ReLA-g", "enc", "0.5"): "0.6000",
        ("ReLA-g", "cross", "1"): "0.6000",
        ("ReLA-g", "cross", "0.5"): "0.1000",
        ("softmax", "enc", "-"): "0.4000",  # a distribution: its one JS
        ("softmax", "dec", "-"): "0.1000",
    }


def test_an_align_result_without_gold_is_one_clear_error(tmp_path, capsys):
    run = write_run(tmp_path, "r", align={"results": [{"method": "weights", "setting": "awo", "rows": []}]})
    assert rela_tables.main(["--out", str(tmp_path / "out"), f"r={run}"]) == 2
    assert "align.json has no AER (was it run with --gold?)" in capsys.readouterr().err
