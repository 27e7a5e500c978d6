"""tools/learning_curves.py on a hand-written fairseq-train log: the points it reads, the
CSV / JSON (provenance) / PNG it writes, and its errors."""

import csv
import json

import pytest

from fairseq_sparse_attn.provenance import check_provenance
from fairseq_sparse_attn.tools import learning_curves as lc

LOG = """\
2026-11-23 15:14:20 | INFO | train_inner | epoch 001:     25 / 247 loss=12.064, nll_loss=11.836, ppl=3657.07, wps=528.9, num_updates=25
2026-11-23 15:17:04 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.659 | nll_loss 7.951 | ppl 247.45 | wps 677.5 | wpb 1278.2 | bsz 84.5 | num_updates 50
2026-11-23 15:20:04 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.859 | nll_loss 6.98 | ppl 126.28 | wps 220.2 | wpb 1278.2 | bsz 84.5 | num_updates 100 | best_loss 7.859
2026-11-23 15:21:04 | INFO | valid | epoch 001 | valid on 'test' subset | loss 7.5 | nll_loss 6.5 | ppl 90.5 | num_updates 100
2026-11-23 15:23:04 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 7.1 | nll_loss 6.2 | ppl 73.5 | bleu 4.21 | num_updates 150 | best_loss 7.1
2026-11-23 15:23:05 | INFO | train | epoch 002 | loss 9.0 | nll_loss 8.5 | num_updates 150
"""


def test_parse_validation_reads_the_valid_lines_only(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(LOG)
    points = lc.parse_validation(log)
    assert points == [
        {"num_updates": 50, "loss": 8.659, "nll_loss": 7.951, "ppl": 247.45},
        {"num_updates": 100, "loss": 7.859, "nll_loss": 6.98, "ppl": 126.28},
        {"num_updates": 150, "loss": 7.1, "nll_loss": 6.2, "ppl": 73.5, "bleu": 4.21},
    ]
    assert lc.parse_validation(log, subset="test") == [{"num_updates": 100, "loss": 7.5, "nll_loss": 6.5, "ppl": 90.5}]


def test_write_curves_csv_json_png(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(LOG)
    b.write_text(LOG.replace("loss 8.659", "loss 9.5"))
    runs = lc.read_runs([f"softmax={a}", f"rela_g={b}"])
    csv_path, json_path, png_path = lc.write_curves(runs, tmp_path / "out" / "curves", title="t", seed=4)
    with open(csv_path, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [(r["variant"], r["num_updates"], r["valid_loss"], r["valid_bleu"]) for r in rows] == [
        ("softmax", "50", "8.659", ""),
        ("softmax", "100", "7.859", ""),
        ("softmax", "150", "7.1", "4.21"),
        ("rela_g", "50", "9.5", ""),
        ("rela_g", "100", "7.859", ""),
        ("rela_g", "150", "7.1", "4.21"),
    ]
    data = json.loads(json_path.read_text())
    assert check_provenance(data)["seed"] == 4
    assert data["variants"]["rela_g"][0] == {"num_updates": 50, "loss": 9.5, "nll_loss": 7.951, "ppl": 247.45}
    import matplotlib.image

    image = matplotlib.image.imread(png_path)  # BLEU present: two panels side by side
    assert image.shape[1] > 1.5 * image.shape[0]


def test_bleu_column_only_when_some_validation_logged_it(tmp_path):
    """No --eval-bleu anywhere (the demo's training): no valid_bleu column at all; with it,
    the column holds the logged values."""
    plain = tmp_path / "plain.log"
    plain.write_text(LOG.replace(" | bleu 4.21", ""))
    runs = lc.read_runs([f"softmax={plain}"])
    csv_path, json_path, _ = lc.write_curves(runs, tmp_path / "plain" / "curves")
    with open(csv_path, encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == ["variant", "num_updates", "valid_loss", "valid_nll_loss", "valid_ppl"]
    assert [(r["num_updates"], r["valid_loss"], r["valid_ppl"]) for r in rows] == [
        ("50", "8.659", "247.45"),
        ("100", "7.859", "126.28"),
        ("150", "7.1", "73.5"),
    ]
    logged = tmp_path / "bleu.log"
    logged.write_text(LOG.replace("| num_updates 50", "| bleu 1.5 | num_updates 50"))
    csv_path, _, _ = lc.write_curves(lc.read_runs([f"rela_g={logged}"]), tmp_path / "bleu" / "curves")
    with open(csv_path, encoding="utf-8") as f:
        assert [r["valid_bleu"] for r in csv.DictReader(f)] == ["1.5", "", "4.21"]


def test_a_regularized_run_is_drawn_by_its_nll_beside_a_plain_one(tmp_path):
    """ReLUFormer's regularized criterion logs loss = (label-smoothed CE + lambda reg) / ln 2
    and reg (nats): beside a plain run its loss is not the same quantity, so the panel
    draws every run's nll_loss, and the CSV gains valid_reg (empty for the plain run)."""
    plain, reg = tmp_path / "plain.log", tmp_path / "reg.log"
    plain.write_text(LOG.replace(" | bleu 4.21", ""))
    reg.write_text(LOG.replace(" | bleu 4.21", "").replace("| ppl 247.45 |", "| ppl 247.45 | reg 1.1619 |"))
    runs = lc.read_runs([f"softmax={plain}", f"reluformer={reg}"])
    assert lc.loss_panel(runs) == ("nll_loss", "validation NLL (base 2, no label smoothing, no regularizer)")
    assert lc.loss_panel({"softmax": runs["softmax"]})[0] == "loss"
    csv_path, _, _ = lc.write_curves(runs, tmp_path / "out" / "curves")
    with open(csv_path, encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == ["variant", "num_updates", "valid_loss", "valid_nll_loss", "valid_ppl", "valid_reg"]
    assert [(r["variant"], r["num_updates"], r["valid_reg"]) for r in rows][:4] == [
        ("softmax", "50", ""),
        ("softmax", "100", ""),
        ("softmax", "150", ""),
        ("reluformer", "50", "1.1619"),
    ]


def test_other_subsets_and_the_json_log_format(tmp_path):
    """fairseq logs a validation of --valid-subset X under the logger name X ("| test |"),
    and with --log-format json as one JSON record whose keys carry the subset's prefix."""
    simple = tmp_path / "simple.log"
    simple.write_text(
        "2026-11-27 21:56:56 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 10.7 | nll_loss 10.5 | ppl 1462 | num_updates 10\n"
        "2026-11-27 21:56:56 | INFO | test | epoch 001 | valid on 'test' subset | loss 10.6 | nll_loss 10.4 | ppl 1300 | num_updates 10\n"
    )
    assert lc.parse_validation(simple, subset="test") == [
        {"num_updates": 10, "loss": 10.6, "nll_loss": 10.4, "ppl": 1300.0}
    ]
    js = tmp_path / "json.log"
    js.write_text(
        "2026-11-27 21:53:21 | INFO | fairseq_cli.train | {'_name': None}\n"
        '2026-11-27 21:53:30 | INFO | train_inner | {"epoch": 1, "update": 0.5, "loss": "11.0", "num_updates": "5"}\n'
        '2026-11-27 21:53:38 | INFO | valid | {"epoch": 1, "valid_loss": "10.684", "valid_nll_loss": "10.514", '
        '"valid_ppl": "1461.96", "valid_wps": "1889.9", "valid_num_updates": "10"}\n'
        '2026-11-27 21:53:41 | INFO | valid | {"epoch": 1, "valid_loss": "10.005", "valid_nll_loss": "9.757", '
        '"valid_ppl": "865.52", "valid_reg": "1.16", "valid_num_updates": "20", "valid_best_loss": "10.005"}\n'
    )
    assert lc.parse_validation(js) == [
        {"num_updates": 10, "loss": 10.684, "nll_loss": 10.514, "ppl": 1461.96},
        {"num_updates": 20, "loss": 10.005, "nll_loss": 9.757, "ppl": 865.52, "reg": 1.16},
    ]
    assert lc.parse_validation(js, subset="test") == []


def test_errors(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("2026-11-23 | INFO | train_inner | epoch 001: 25 / 247 loss=1.0, num_updates=25\n")
    with pytest.raises(ValueError, match="empty.log: no 'valid' validation lines"):
        lc.read_runs([f"x={empty}"])
    with pytest.raises(ValueError, match="expected NAME=TRAIN_LOG"):
        lc.read_runs([str(empty)])
    with pytest.raises(ValueError, match="missing.log: no such training log"):
        lc.read_runs([f"x={tmp_path / 'missing.log'}"])
    good = tmp_path / "good.log"
    good.write_text(LOG)
    assert list(lc.read_runs([f"x={empty}", f"y={good}"], skip_empty=True)) == ["y"]
    assert lc.main(["--out", str(tmp_path / "c"), f"x={empty}"]) == 1 and not (tmp_path / "c.csv").exists()


def test_a_name_given_twice_or_an_unwritable_prefix_is_one_line(tmp_path, capsys):
    """The second log of a name replaced the first with nothing said; an --out under a file
    failed after the logs were read, in a traceback."""
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(LOG)
    b.write_text(LOG)
    with pytest.raises(ValueError, match=rf"the name 'base' is given twice \({a} and {b}\)"):
        lc.read_runs([f"base={a}", f"base={b}"])
    assert lc.main(["--out", str(tmp_path / "lc"), f"base={a}", f"base={b}"]) == 1
    assert "the name 'base' is given twice" in capsys.readouterr().err
    assert lc.main(["--out", str(a / "lc"), f"base={a}"]) == 1
    assert f"--out {a}/lc.csv: {a} is a file, not a directory" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.log", "b.log"]


def test_a_resumed_run_s_repeated_update_count_takes_the_last_validation(tmp_path):
    """A run resumed from a checkpoint before its last validation logs that update count
    again: the curve keeps the later value (the one of the run that went on)."""
    log = tmp_path / "train.log"
    line = "2026-11-23 15:17:04 | INFO | valid | epoch 001 | valid on 'valid' subset | loss {} | num_updates {}\n"
    log.write_text(line.format(5.0, 50) + line.format(9.9, 100) + "(resumed)\n" + line.format(4.0, 100))
    assert lc.parse_validation(log) == [{"num_updates": 50, "loss": 5.0}, {"num_updates": 100, "loss": 4.0}]
