"""``fsa-analyze aer-table``: the rows of Kobayashi et al. (2020) Table 3 from the results
of one or more runs (seeds), each a directory holding the ``align.json`` of
``fsa-analyze align --gold ... --method weights norms`` and the ``norms.json`` of
``fsa-analyze norms --kinds cross`` on the same checkpoint and data.

Rows, per setting (AWO, AWI):

* weight-based and norm-based **layer mean** (the mean over layers of the layer
  alignment's AER) and **best layer** (the lowest layer AER; its layer per run);
* norm-based, **layer with the highest average ‖αf(x)‖**: the layer whose sum over heads
  of the mean ‖α^h f^h(x)‖ is largest (the paper's footnote 15), scored with its
  norm-based layer alignment (‖Σ_h α f‖);
* norm-based, **head with the highest average ‖αf(x)‖**: the (layer, head) with the
  largest mean ‖α^h f^h(x)‖, scored with that head's norm-based alignment.

The mean ‖αf(x)‖ is ``norms.json``'s ``alpha_f_norm`` of the cross attention (over real
target queries × source keys of the analysed data).  Ties go to the lower layer, then the
lower head.  Over runs: the mean AER and the sample standard deviation (n − 1; ``null``
for one run), as Table 3's "AER ±SD" over five seeds.  AER is a fraction (Table 3 prints
percent).
"""

import json
import math
import os
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..results import SCHEMA_VERSION, Output
from .base import UsageError

NAME = "aer-table"
HELP = "Kobayashi et al. Table 3 rows (layer mean, best layer, layer/head with the highest ‖αf‖) over runs"
SETTINGS = ("awo", "awi")
ROWS = (
    ("weights", "layer mean"),
    ("weights", "best layer"),
    ("norms", "layer mean"),
    ("norms", "best layer"),
    ("norms", "layer with the highest average ‖αf(x)‖"),
    ("norms", "head with the highest average ‖αf(x)‖"),
)


def add_arguments(p) -> None:
    p.add_argument(
        "runs",
        nargs="+",
        metavar="RUN_DIR",
        help="directories with align.json (--gold, --method weights norms) and norms.json "
        "(--kinds cross) of one checkpoint each (one per seed)",
    )
    p.add_argument("--output-dir", required=True, metavar="DIR")


def _load(path: Path, command: str) -> Dict:
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found (the run directory needs align.json and norms.json: "
            f"fsa-analyze align --gold ... and fsa-analyze norms --kinds cross)"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}, line {e.lineno}, column {e.colno}: malformed JSON ({e.msg})") from None
    if not isinstance(data, dict) or data.get("command") != command:
        raise UsageError(f"{path}: not a result of 'fsa-analyze {command}'")
    return data


def highest_norm_choices(norms: Dict, where: str) -> Tuple[int, Tuple[int, int]]:
    """(layer with the largest Σ_h mean ‖α^h f^h‖, (layer, head) with the largest mean
    ‖α^h f^h‖) of the cross attention in a norms.json; ties to the lower index."""
    layers = norms.get("layers", {}).get("cross")
    if not layers:
        raise UsageError(f"{where}: norms.json has no cross attention (run fsa-analyze norms --kinds cross)")
    best_layer, best_sum, best_head, best_value = None, -math.inf, None, -math.inf
    for e in sorted(layers, key=lambda e: e["layer"]):
        values = e["alpha_f_norm"]
        total = sum(values)
        if total > best_sum:
            best_layer, best_sum = e["layer"], total
        for h, v in enumerate(values):
            if v > best_value:
                best_head, best_value = (e["layer"], h), v
    return best_layer, best_head


#: what a result's ``data`` block says about the sentences it read (paths compared resolved)
DATA_KEYS = (
    "data_bin",
    "split",
    "raw_source",
    "raw_target",
    "tokenizer",
    "bpe_codes",
    "target_bpe_codes",
    "source_lang",
    "target_lang",
    "sentences",
)
_PATHS = ("data_bin", "raw_source", "raw_target", "bpe_codes", "target_bpe_codes")


def _data_of(run: Dict, name: str, where: str) -> Dict:
    """The sentences a result was computed on, as its ``data`` block records them."""
    data = run.get("data")
    if not isinstance(data, dict) or "sentences" not in data:
        raise UsageError(f"{where}: {name} does not record its data (a 'data' block with 'sentences')")
    return {
        k: (os.path.realpath(data[k]) if k in _PATHS and isinstance(data[k], str) else data[k])
        for k in DATA_KEYS
        if k in data
    }


def run_rows(align: Dict, norms: Dict, where: str) -> List[Dict]:
    """The Table 3 rows of one run: ``{setting, method, row, layer, head, aer}``."""
    if align.get("gold") is None:
        raise UsageError(f"{where}: align.json was made without --gold (no AER)")
    if align["model"]["checkpoint"] != norms["model"]["checkpoint"]:
        raise UsageError(
            f"{where}: align.json ({align['model']['checkpoint']}) and norms.json "
            f"({norms['model']['checkpoint']}) are not of the same checkpoint"
        )
    a, n = _data_of(align, "align.json", where), _data_of(norms, "norms.json", where)
    if a != n:
        differ = "; ".join(f"{k}: {a.get(k)} against {n.get(k)}" for k in DATA_KEYS if a.get(k) != n.get(k))
        raise UsageError(
            f"{where}: align.json and norms.json are not of the same data ({differ}): the rows by "
            "highest norm would take their layer and head from other sentences than the ones "
            "aligned (run both on the same data, split or text files, and --max-sentences)"
        )
    top_layer, top_head = highest_norm_choices(norms, where)
    results = {(r["method"], r["setting"]): r for r in align["results"]}
    out = []
    for setting in SETTINGS:
        for method, row in ROWS:
            entry = results.get((method, setting))
            if entry is None:
                raise UsageError(
                    f"{where}: align.json has no {method}/{setting} result (run align "
                    f"with --method weights norms --setting awo awi)"
                )
            aer = {(r["layer"], r["head"]): r["aer"] for r in entry["rows"]}
            layer = head = None
            if row == "layer mean":
                value = entry["layer_mean_aer"]
            elif row == "best layer":
                layer, value = entry["best_layer"]["layer"], entry["best_layer"]["aer"]
            elif row.startswith("layer with"):
                layer, value = top_layer, aer[(top_layer, None)]
            else:
                (layer, head), value = top_head, aer[top_head]
            out.append({"setting": setting, "method": method, "row": row, "layer": layer, "head": head, "aer": value})
    return out


def summarize(values: List[Optional[float]]) -> Tuple[Optional[float], Optional[float]]:
    """(mean, sample standard deviation); None when undefined."""
    xs = [v for v in values if v is not None and not math.isnan(v)]
    if len(xs) != len(values) or not xs:
        return None, None
    mean = sum(xs) / len(xs)
    if len(xs) < 2:
        return mean, None
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


def _same_file(a: Optional[str], b: Optional[str]) -> bool:
    """Whether two recorded paths name the same file, or files of the same content."""
    if a is None or b is None:
        return a == b
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return Path(a).read_bytes() == Path(b).read_bytes()
    except OSError:
        return False


def check_runs_comparable(runs: List[Tuple[str, Dict]]) -> None:
    """UsageError (one line) unless the runs (RUN_DIR, align.json) are seeds of one
    experiment: each a directory and a checkpoint of its own, all of the same architecture,
    on the same data, against the same gold alignments.  A directory given twice counted
    twice (sd 0); a run of another model or data set was averaged in as a seed."""
    seen_dirs: Dict[str, str] = {}
    seen_checkpoints: Dict[str, str] = {}
    first_name, first = runs[0]
    first_data = _data_of(first, "align.json", first_name)
    for name, align in runs:
        real = os.path.realpath(name)
        if real in seen_dirs:
            raise UsageError(f"{name}: the run directory {seen_dirs[real]} is given twice; each run counts once")
        seen_dirs[real] = name
        checkpoint = align["model"]["checkpoint"]
        if checkpoint in seen_checkpoints:
            raise UsageError(
                f"{name} and {seen_checkpoints[checkpoint]} are results of the same checkpoint {checkpoint}: "
                "the runs are seeds, one checkpoint each"
            )
        seen_checkpoints[checkpoint] = name
        if name == first_name:
            continue
        if align["model"].get("arch") != first["model"].get("arch"):
            raise UsageError(
                f"{name} ({align['model'].get('arch')}) and {first_name} ({first['model'].get('arch')}) are "
                "of different architectures: the runs of one table row are seeds of one model"
            )
        if not _same_file(align.get("gold"), first.get("gold")):
            raise UsageError(
                f"{name} and {first_name} were scored against different gold alignments "
                f"({align.get('gold')} against {first.get('gold')})"
            )
        data = _data_of(align, "align.json", name)
        if data != first_data:
            differ = "; ".join(
                f"{k}: {data.get(k)} against {first_data.get(k)}" for k in DATA_KEYS if data.get(k) != first_data.get(k)
            )
            raise UsageError(f"{name} and {first_name} are not of the same data ({differ})")


def run(args) -> Dict:
    runs = []
    loaded = []
    for d in args.runs:
        p = Path(d)
        align, norms = _load(p / "align.json", "align"), _load(p / "norms.json", "norms")
        runs.append((str(p), run_rows(align, norms, str(p))))
        loaded.append((str(p), align))
    check_runs_comparable(loaded)
    table = []
    for k, first in enumerate(runs[0][1]):
        per_run = [
            {"run": name, "layer": rows[k]["layer"], "head": rows[k]["head"], "aer": rows[k]["aer"]}
            for name, rows in runs
        ]
        mean, sd = summarize([r["aer"] for r in per_run])
        table.append(
            {
                "setting": first["setting"],
                "method": first["method"],
                "row": first["row"],
                "aer": mean,
                "sd": sd,
                "runs": per_run,
            }
        )
    out = Output(args.output_dir, argv=getattr(args, "argv", None))
    report = {"command": NAME, "schema_version": SCHEMA_VERSION, "runs": [name for name, _ in runs], "rows": table}
    out.json("aer_table.json", report)

    def choice(r):
        if r["layer"] is None:
            return "-"
        return f"L{r['layer']}" + ("" if r["head"] is None else f"H{r['head']}")

    out.tsv(
        "aer_table.tsv",
        ("setting", "method", "row", "aer", "sd", "runs", "choices"),
        [
            (
                e["setting"],
                e["method"],
                e["row"],
                e["aer"],
                e["sd"],
                len(e["runs"]),
                " ".join(choice(r) for r in e["runs"]),
            )
            for e in table
        ],
    )
    return report
