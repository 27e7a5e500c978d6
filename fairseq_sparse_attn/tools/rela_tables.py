"""ReLA Tables 5 and 6 and Fig. 4's curves (Zhang, Titov & Sennrich 2021, §5.2) from
``fsa-analyze`` results of several models:
``python -m fairseq_sparse_attn.tools.rela_tables --out DIR LABEL=RUN_DIR ...``.

Each ``RUN_DIR`` holds ``stats/stats.json`` (``fsa-analyze stats``) and, for Table 5 and
Fig. 4, ``align/align.json`` (``fsa-analyze align --gold ...``); ``scripts/rela/analyses.sh``
writes them so.  A label given more than once (one run per training seed) is one row: the
mean over its runs (the paper averages three runs), with their number in ``runs``.

* Table 5, "average AER scores over layers", in % as the paper prints them: for the
  attention weights (``--method weights``), per setting (``awo``: the paper's normal
  attention α, ``awi``: its shifted attention α[1:]), AoL (the mean over layers of the layer
  attention's AER) and AoH (the mean over layers of each layer's best head's AER), as
  ``align.json`` reports them;
* Fig. 4, per layer: the layer attention's AER (the figure's dashed curves) and the best
  head's (its solid curves), in %;
* Table 6, "average head diversity score over layers": the mean over layers of the heads'
  Jensen-Shannon divergence, per attention kind (enc, dec, cross); for ReLU-type attention at
  each re-normalization temperature τ (``stats.json``'s ``js_temperatures``), for the other
  models (distributions already) their one value (τ "-").

Writes ``DIR/table5.tsv``, ``DIR/fig4.tsv`` and ``DIR/table6.tsv`` (and prints them); a run
without the file a table needs is left out of that table with a note on stderr.
"""

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import OneLineErrorParser
from ..writers import unwritable_file

#: the attention kinds as ``stats.json`` names them, and Table 6's column names
KINDS = (("encoder_self", "enc"), ("decoder_self", "dec"), ("cross", "cross"))
#: align.json's settings and the paper's names for them
SETTINGS = (("awo", "normal"), ("awi", "shifted"))

Row = Tuple[str, ...]  # the key columns of a table row
Values = Dict[Row, List[Optional[float]]]  # key -> one value per run


def _mean(values: Sequence[Optional[float]]) -> Optional[float]:
    """The mean, or None when a value is missing (a mean over fewer runs or layers than
    there are would be another quantity)."""
    if not values or any(v is None or math.isnan(v) for v in values):
        return None
    return sum(values) / len(values)  # type: ignore[arg-type]


def _percent(value: Optional[float]) -> Optional[float]:
    return None if value is None else 100.0 * value


def _weights_entries(label: str, align: Dict):
    for setting, name in SETTINGS:
        for entry in align.get("results", []):
            if entry.get("method") == "weights" and entry.get("setting") == setting:
                if "layer_mean_aer" not in entry:
                    raise ValueError(f"{label}: align.json has no AER (was it run with --gold?)")
                yield name, entry


def table5_values(label: str, align: Dict) -> Dict[Row, Tuple[Optional[float], Optional[float]]]:
    """(model, attention) -> (AoL, AoH) in % of one ``align.json``."""
    return {
        (label, name): (_percent(entry["layer_mean_aer"]), _percent(entry["best_head_mean_aer"]))
        for name, entry in _weights_entries(label, align)
    }


def fig4_values(label: str, align: Dict) -> Dict[Row, Tuple[Optional[float], Optional[float]]]:
    """(model, attention, layer) -> (layer attention's AER, best head's AER) in %."""
    out = {}
    for name, entry in _weights_entries(label, align):
        layer_aer = {r["layer"]: r.get("aer") for r in entry.get("rows", []) if r.get("head") is None}
        best = {b["layer"]: b["aer"] for b in entry.get("best_head_per_layer", [])}
        for layer in sorted(set(layer_aer) | set(best)):
            out[(label, name, str(layer))] = (_percent(layer_aer.get(layer)), _percent(best.get(layer)))
    return out


def table6_values(label: str, stats: Dict) -> Dict[Row, Tuple[Optional[float]]]:
    """(model, kind, τ) -> (mean JS over layers,) of one ``stats.json``."""
    out: Dict[Row, Tuple[Optional[float]]] = {}
    attention = stats.get("attention") or {}
    for kind, short in KINDS:
        layers = attention.get(kind)
        if not layers:
            continue
        by_tau = [e.get("js_temperatures") for e in layers]
        if all(by_tau):
            for tau in by_tau[0]:
                out[(label, short, tau)] = (_mean([t.get(tau) for t in by_tau]),)
        else:
            out[(label, short, "-")] = (_mean([e.get("js") for e in layers]),)
    return out


def _cell(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


class Table:
    """Rows keyed by their label columns, each value column a list over runs."""

    def __init__(self, header: Sequence[str]):
        self.header = tuple(header)
        self.runs: Dict[Row, List[Tuple]] = {}

    def add(self, values: Dict[Row, Tuple]) -> None:
        for key, v in values.items():
            self.runs.setdefault(key, []).append(v)

    def rows(self) -> List[Tuple]:
        out = []
        for key, runs in self.runs.items():
            means = tuple(_mean([r[i] for r in runs]) for i in range(len(runs[0])))
            out.append((*key, *means, len(runs)))
        return out

    def write(self, path: Path) -> None:
        text = "\t".join((*self.header, "runs")) + "\n"
        text += "".join("\t".join(_cell(v) for v in r) + "\n" for r in self.rows())
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
        print(f"wrote {path}")
        print(text, end="")


def parse_run(spec: str) -> Tuple[str, Path]:
    label, sep, where = spec.partition("=")
    if not sep or not label or not where:
        raise argparse.ArgumentTypeError(f"{spec!r}: expected LABEL=RUN_DIR")
    path = Path(where)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{spec!r}: {where} is not a directory")
    return label, path


def main(argv: Optional[List[str]] = None) -> int:
    p = OneLineErrorParser(
        prog="rela_tables",
        help_command="python -m fairseq_sparse_attn.tools.rela_tables",
        description=__doc__.split("\n")[0],
    )
    p.add_argument("--out", required=True, help="directory for table5.tsv, fig4.tsv and table6.tsv (created)")
    p.add_argument("runs", nargs="+", type=parse_run, metavar="LABEL=RUN_DIR")
    args = p.parse_args(argv)
    out = Path(args.out)  # a directory to create or fill, checked before any reading
    if not out.exists():
        reason = unwritable_file(out, "--out")  # its missing folders can be made
        if reason:
            p.error(reason)
    elif not out.is_dir():
        p.error(f"--out {args.out} is a file, not a directory")
    elif not os.access(out, os.W_OK | os.X_OK):
        p.error(f"--out {args.out} is not writable")
    seen: dict = {}
    for label, run in args.runs:  # a run given twice counted twice in its label's mean
        real = run.resolve()
        if real in seen:
            p.error(f"{label}={run}: the run directory {seen[real]} is given twice; each run counts once")
        seen[real] = f"{label}={run}"
    five = Table(("model", "attention", "AoL_percent", "AoH_percent"))
    four = Table(("model", "attention", "layer", "layer_attention_aer_percent", "best_head_aer_percent"))
    six = Table(("model", "kind", "tau", "js_mean_over_layers"))
    read = 0
    for label, run in args.runs:
        for name, title, tables in (
            ("align/align.json", "Table 5 and Fig. 4", ((five, table5_values), (four, fig4_values))),
            ("stats/stats.json", "Table 6", ((six, table6_values),)),
        ):
            f = run / name
            if not f.is_file():
                print(f"rela_tables: {label}: no {f}, left out of {title}", file=sys.stderr)
                continue
            try:
                data = json.loads(f.read_text())
                for table, values in tables:
                    table.add(values(label, data))
            except (ValueError, KeyError, AttributeError) as e:
                print(f"rela_tables: error: {f}: {e}", file=sys.stderr)
                return 2
            read += 1
    if not read:  # header-only tables would read as results
        print(
            f"rela_tables: error: none of the {len(args.runs)} run(s) has align/align.json or stats/stats.json "
            "(fsa-analyze align / stats --output-dir RUN_DIR/align, RUN_DIR/stats): nothing to tabulate",
            file=sys.stderr,
        )
        return 2
    out.mkdir(parents=True, exist_ok=True)
    five.write(out / "table5.tsv")
    four.write(out / "fig4.tsv")
    six.write(out / "table6.tsv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
