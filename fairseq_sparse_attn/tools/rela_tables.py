"""ReLA Tables 5 and 6 (Zhang, Titov & Sennrich 2021, §5.2) from ``fsa-analyze`` results of
several models: ``python -m fairseq_sparse_attn.tools.rela_tables --out DIR LABEL=RUN_DIR ...``.

Each ``RUN_DIR`` holds ``stats/stats.json`` (``fsa-analyze stats``) and, for Table 5,
``align/align.json`` (``fsa-analyze align --gold ...``); ``scripts/rela/analyses.sh`` writes
them so.

* Table 5, "average AER scores over layers": for the attention weights (``--method
  weights``), per setting (``awo``: the paper's normal attention α, ``awi``: its shifted
  attention α[1:]), AoL (the mean over layers of the layer attention's AER) and AoH (the
  mean over layers of each layer's best head's AER), as ``align.json`` reports them;
* Table 6, "average head diversity score over layers": the mean over layers of the heads'
  Jensen-Shannon divergence, per attention kind (enc, dec, cross); for ReLU-type attention at
  each re-normalization temperature τ (``stats.json``'s ``js_temperatures``), for the other
  models (distributions already) their one value (τ "-").

Writes ``DIR/table5.tsv`` and ``DIR/table6.tsv`` (and prints them); a run without the file a
table needs is left out of that table with a note on stderr.
"""

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

#: the attention kinds as ``stats.json`` names them, and Table 6's column names
KINDS = (("encoder_self", "enc"), ("decoder_self", "dec"), ("cross", "cross"))
#: align.json's settings and the paper's names for them
SETTINGS = (("awo", "normal"), ("awi", "shifted"))


def _mean(values: Sequence[Optional[float]]) -> Optional[float]:
    kept = [v for v in values if v is not None and not math.isnan(v)]
    return sum(kept) / len(kept) if kept and len(kept) == len(values) else None


def table5_rows(label: str, align: Dict) -> List[Tuple]:
    """(model, setting, AoL, AoH) of the weights' alignments in one ``align.json``."""
    rows = []
    for setting, name in SETTINGS:
        for entry in align.get("results", []):
            if entry.get("method") == "weights" and entry.get("setting") == setting:
                if "layer_mean_aer" not in entry:
                    raise ValueError(f"{label}: align.json has no AER (was it run with --gold?)")
                rows.append((label, name, entry["layer_mean_aer"], entry["best_head_mean_aer"]))
    return rows


def table6_rows(label: str, stats: Dict) -> List[Tuple]:
    """(model, kind, τ, mean JS over layers) of one ``stats.json``."""
    rows = []
    attention = stats.get("attention") or {}
    for kind, short in KINDS:
        layers = attention.get(kind)
        if not layers:
            continue
        by_tau = [e.get("js_temperatures") for e in layers]
        if all(by_tau):
            for tau in by_tau[0]:
                rows.append((label, short, tau, _mean([t.get(tau) for t in by_tau])))
        else:
            rows.append((label, short, "-", _mean([e.get("js") for e in layers])))
    return rows


def _cell(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def write(path: Path, header: Sequence[str], rows: Sequence[Tuple]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("\t".join(header) + "\n" + "".join("\t".join(_cell(v) for v in r) + "\n" for r in rows))
    tmp.replace(path)
    print(f"wrote {path}")
    print(path.read_text(), end="")


def parse_run(spec: str) -> Tuple[str, Path]:
    label, sep, where = spec.partition("=")
    if not sep or not label or not where:
        raise argparse.ArgumentTypeError(f"{spec!r}: expected LABEL=RUN_DIR")
    path = Path(where)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{spec!r}: {where} is not a directory")
    return label, path


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="directory for table5.tsv and table6.tsv (created)")
    p.add_argument("runs", nargs="+", type=parse_run, metavar="LABEL=RUN_DIR")
    args = p.parse_args(argv)
    five: List[Tuple] = []
    six: List[Tuple] = []
    for label, run in args.runs:
        for name, table, rows, parse in (
            ("align/align.json", "Table 5", five, table5_rows),
            ("stats/stats.json", "Table 6", six, table6_rows),
        ):
            f = run / name
            if not f.is_file():
                print(f"rela_tables: {label}: no {f}, left out of {table}", file=sys.stderr)
                continue
            try:
                rows += parse(label, json.loads(f.read_text()))
            except (ValueError, KeyError, AttributeError) as e:
                print(f"rela_tables: error: {f}: {e}", file=sys.stderr)
                return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write(out / "table5.tsv", ("model", "attention", "AoL", "AoH"), five)
    write(out / "table6.tsv", ("model", "kind", "tau", "js_mean_over_layers"), six)
    return 0


if __name__ == "__main__":
    sys.exit(main())
