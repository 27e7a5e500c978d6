"""Learning curves of several training runs on one plot: validation loss (and BLEU where
fairseq computed it, ``--eval-bleu``) against updates, read from ``fairseq-train`` logs.
Where a run trained with ReLUFormer's regularized criterion (its validations log ``reg``),
every run's NLL is drawn instead of its loss (:func:`loss_panel`).

    python -m fairseq_sparse_attn.tools.learning_curves --out OUT/curves \\
        softmax=OUT/softmax/train.log rela_g=OUT/rela_g/train.log

writes ``OUT/curves.csv`` (one row per variant and validation; the ``valid_bleu`` column only
when a log has validation BLEU, i.e. the run trained with ``--eval-bleu``), ``OUT/curves.json`` (the
same points per variant, with provenance) and ``OUT/curves.png``.  The logs are fairseq's
``simple`` format (``--log-format simple``, and ``tqdm``, which logs its validations the
same way), a validation line ``... | valid | epoch 001 | valid on 'valid' subset | loss 7.1
| nll_loss 6.5 | ... | num_updates 50`` (``| test |`` ... ``'test' subset`` for another
``--valid-subset``), or ``json`` (``... | valid | {"epoch": 1, "valid_loss": "7.1", ...,
"valid_num_updates": "50"}``).  ``--log-format none`` logs no validation at all.  Runs
validate at regular intervals with ``--validate-interval-updates N``.
"""

import csv
import json
import math
import re
import sys
from pathlib import Path

from ..errors import OneLineErrorParser
from ..writers import unwritable_file

_VALID = re.compile(r"\| [^|]+ \| .*?valid on '([^']+)' subset(.*)$")  # simple: "| <subset> | ..."
_JSON = re.compile(r"\| ([^|\s]+) \| (\{.*\})\s*$")  # json: "| <subset> | {"<subset>_loss": ...}"
_FIELD = re.compile(r"\|\s*([a-z_]+)\s+(-?[\d.]+(?:e[-+]?\d+)?|nan|inf)\s*(?=\||$)")
COLUMNS = ("num_updates", "loss", "nll_loss", "ppl", "reg", "bleu")
#: columns written only when some validation logged them: ``bleu`` (``--eval-bleu``) and
#: ``reg`` (ReLUFormer's regularized criterion, whose ``loss`` adds lambda * reg)
OPTIONAL = ("reg", "bleu")


def _validation_fields(line, subset):
    """{stat: value} of a validation of ``subset`` logged on ``line`` (simple or json
    format), else None."""
    m = _VALID.search(line)
    if m is not None:
        return {k: float(v) for k, v in _FIELD.findall(m.group(2))} if m.group(1) == subset else None
    m = _JSON.search(line)
    if m is None or m.group(1) != subset:
        return None
    try:
        record = json.loads(m.group(2))
    except json.JSONDecodeError:
        return None
    prefix = subset + "_"
    fields = {}
    for key, value in record.items():
        if key.startswith(prefix):
            try:
                fields[key[len(prefix) :]] = float(value)
            except (TypeError, ValueError):
                pass
    return fields


def parse_validation(log, subset="valid"):
    """[{num_updates, loss, nll_loss, ppl, reg?, bleu?}] of every validation of ``subset`` in a
    fairseq-train log, in log order (a run that resumed may repeat an update count; the last
    one wins)."""
    points = {}
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = _validation_fields(line, subset)
            if fields is None:
                continue
            if "num_updates" not in fields or "loss" not in fields:
                continue
            point = {k: fields[k] for k in COLUMNS if k in fields}
            point["num_updates"] = int(point["num_updates"])
            points[point["num_updates"]] = point
    return [points[u] for u in sorted(points)]


def read_runs(named_logs, subset="valid", skip_empty=False):
    """{name: points} for ``name=path`` strings; a log without validations is an error
    (``skip_empty``: left out with a note on stderr, an error only when every log is)."""
    runs, given = {}, {}
    for item in named_logs:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"expected NAME=TRAIN_LOG, got {item!r}")
        if name in given:
            raise ValueError(f"the name {name!r} is given twice ({given[name]} and {path}): one curve per name")
        given[name] = path
        if not Path(path).is_file():
            raise ValueError(f"{path}: no such training log (variant {name})")
        points = parse_validation(path, subset)
        if not points and skip_empty:
            print(f"learning_curves: {path}: no '{subset}' validation lines, left out", file=sys.stderr)
            continue
        if not points:
            raise ValueError(
                f"{path}: no '{subset}' validation lines (train with validation, e.g. "
                f"--validate-interval-updates N, and --log-format simple or json; 'none' logs none)"
            )
        runs[name] = points
    if not runs:
        raise ValueError(f"none of {len(named_logs)} training logs has '{subset}' validation lines")
    return runs


def csv_columns(runs):
    """The CSV's columns of :data:`COLUMNS`: ``bleu`` and ``reg`` only when some validation
    logged them (fairseq-train ``--eval-bleu``; ReLUFormer's regularized criterion); an
    empty column would read as "BLEU was not computed yet".  A run or a validation without
    one among others with it leaves its cell empty."""
    logged = {k for points in runs.values() for p in points for k in p}
    return tuple(k for k in COLUMNS if k not in OPTIONAL or k in logged)


def loss_panel(runs):
    """(key, axis label) of the loss panel.  The validation ``loss`` is the criterion's
    objective in bits: with ReLUFormer's regularized criterion it is label-smoothed cross
    entropy + lambda * reg / ln 2, so beside a plain run it would not compare like with
    like; when some run logs ``reg``, every run is drawn by its ``nll_loss`` (the NLL alone,
    base 2, what both criteria log the same way)."""
    if any("reg" in p for points in runs.values() for p in points):
        return "nll_loss", "validation NLL (base 2, no label smoothing, no regularizer)"
    return "loss", "validation loss (the criterion's, base 2)"


def write_curves(runs, prefix, title=None, seed=None):
    """``prefix``.csv / .json / .png of ``runs`` ({name: points}); returns the three paths."""
    from ..provenance import write_json

    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    csv_path, json_path, png_path = (prefix.with_name(prefix.name + ext) for ext in (".csv", ".json", ".png"))
    columns = csv_columns(runs)
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["variant", "num_updates"] + [f"valid_{k}" for k in columns[1:]])
        for name, points in runs.items():
            for p in points:
                w.writerow([name, p["num_updates"]] + [p.get(k, "") for k in columns[1:]])
    finite = {
        n: [{k: v for k, v in p.items() if not (isinstance(v, float) and not math.isfinite(v))} for p in pts]
        for n, pts in runs.items()
    }
    write_json(json_path, {"title": title, "metric_x": "num_updates", "variants": finite}, seed=seed)
    plot(runs, png_path, title)
    return csv_path, json_path, png_path


def plot(runs, path, title=None):
    import logging

    import matplotlib

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_bleu = any("bleu" in p for pts in runs.values() for p in pts)
    fig, axes = plt.subplots(1, 2 if has_bleu else 1, figsize=(11 if has_bleu else 6, 4), squeeze=False)
    panels = [loss_panel(runs)] + ([("bleu", "validation BLEU")] if has_bleu else [])
    for ax, (key, label) in zip(axes[0], panels):
        for name, pts in runs.items():
            xs = [p["num_updates"] for p in pts if key in p]
            ys = [p[key] for p in pts if key in p]
            ax.plot(xs, ys, marker="o", markersize=3, label=name)
        ax.set_xlabel("updates")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = OneLineErrorParser(
        prog="learning_curves",
        help_command="python -m fairseq_sparse_attn.tools.learning_curves",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("logs", nargs="+", metavar="NAME=TRAIN_LOG")
    p.add_argument("--out", required=True, help="output prefix: PREFIX.csv, PREFIX.json, PREFIX.png")
    p.add_argument("--subset", default="valid")
    p.add_argument("--title")
    p.add_argument("--skip-empty", action="store_true", help="leave out logs without validation lines")
    args = p.parse_args(argv)
    try:
        reason = unwritable_file(args.out + ".csv", "--out")
        if reason:
            raise ValueError(reason)
        runs = read_runs(args.logs, args.subset, args.skip_empty)
    except ValueError as e:
        print(f"learning_curves: error: {e}", file=sys.stderr)
        return 1
    for path in write_curves(runs, args.out, args.title):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
