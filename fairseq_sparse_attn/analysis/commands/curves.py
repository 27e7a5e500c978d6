"""``fsa-analyze curves``: per-layer sparsity / null rate / entropy / JS / AER of several
results (``stats.json``, ``align.json`` or directories holding them) on the same axes."""

import json
from pathlib import Path
from typing import Dict, List, Tuple

from ..results import SCHEMA_VERSION, Output
from .base import KINDS, UsageError

NAME = "curves"
HELP = "per-layer curves of several checkpoints on the same axes"


def add_arguments(p) -> None:
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="[LABEL=]RESULT",
        help="stats.json / align.json of fsa-analyze, or an --output-dir holding them",
    )
    p.add_argument("--output-dir", required=True, metavar="DIR")
    p.add_argument("--kind", choices=KINDS, default="cross")
    p.add_argument(
        "--metrics", nargs="+", choices=CURVE_METRICS, default=None, help="default: every one the inputs have"
    )
    p.add_argument("--tau", type=float, default=1.0, help="temperature of the JS of ReLU-type attention (default 1)")
    p.add_argument("--align-method", choices=("weights", "norms"), default="weights")
    p.add_argument("--align-setting", choices=("awo", "awi"), default="awi")


CURVE_METRICS = ("sparsity", "null_rate", "entropy", "js", "aer")


def _read_result(spec: str) -> Tuple[str, Dict[str, Dict]]:
    """``[LABEL=]PATH``: a stats.json / align.json, or a directory holding them.
    Returns (label, {command: result})."""
    if Path(spec).exists() or "=" not in spec:  # a path may contain "=" (out/lr=3e-3)
        label, path = "", spec
    else:
        label, _, path = spec.partition("=")
    p = Path(path)
    files = [p / "stats.json", p / "align.json"] if p.is_dir() else [p]
    results = {}
    for f in files:
        if not f.is_file():
            if p.is_dir():
                continue
            raise FileNotFoundError(f"result file not found: {f}")
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise UsageError(f"{f}, line {e.lineno}, column {e.colno}: malformed JSON ({e.msg})") from None
        command = data.get("command") if isinstance(data, dict) else None
        if command not in ("stats", "align"):
            raise UsageError(
                f"{f}: not a result of 'fsa-analyze stats' or 'fsa-analyze align' (its \"command\" is {command!r})"
            )
        results[command] = data
    if not results:
        raise FileNotFoundError(f"{p}: no stats.json or align.json in this directory")
    if not label:
        label = p.name if p.is_dir() else (p.parent.name or p.stem)
    return label, results


def run(args) -> Dict:
    from ..plots import layer_curves

    inputs: List[Tuple[str, Dict[str, Dict]]] = []
    for spec in args.inputs:  # one label may collect a stats.json and an align.json
        label, results = _read_result(spec)
        merged = dict(inputs).get(label)
        if merged is None:
            inputs.append((label, results))
            continue
        clash = sorted(set(merged) & set(results))
        if clash:
            raise UsageError(
                f"label {label!r} is given two {clash[0]} results; name the inputs LABEL=PATH with different labels"
            )
        merged.update(results)
    for label, results in inputs:  # one label is one checkpoint
        checkpoints = {c: (r.get("model") or {}).get("checkpoint") for c, r in results.items()}
        if len(set(checkpoints.values())) > 1:
            raise UsageError(
                f"label {label!r} joins results of different checkpoints ("
                + ", ".join(f"{c}: {path}" for c, path in sorted(checkpoints.items()))
                + "); give each checkpoint's results a label of its own"
            )
    tau = format(float(args.tau), "g")
    wanted = args.metrics or list(CURVE_METRICS)
    series: Dict[str, Dict[str, List]] = {}
    for label, results in inputs:
        stats = results.get("stats")
        if stats is not None:
            for e in stats["attention"].get(args.kind, []):
                for metric in ("sparsity", "null_rate", "entropy"):
                    series.setdefault(metric, {}).setdefault(label, []).append((e["layer"], e[metric]))
                temps = e.get("js_temperatures")
                if temps is not None and tau not in temps:
                    raise UsageError(f"--tau {args.tau}: {label}'s stats were computed at temperatures {sorted(temps)}")
                value = e["js"] if temps is None else temps[tau]
                series.setdefault("js", {}).setdefault(label, []).append((e["layer"], value))
        align = results.get("align")
        if align is not None and args.kind == "cross":
            for entry in align["results"]:
                if entry["method"] == args.align_method and entry["setting"] == args.align_setting:
                    points = [(r["layer"], r.get("aer")) for r in entry["rows"] if r["head"] is None]
                    if any(v is not None for _, v in points):
                        series.setdefault("aer", {})[label] = points
    missing = [m for m in (args.metrics or []) if m not in series]
    if missing:
        raise UsageError(
            f"no input has {', '.join(missing)} for {args.kind} attention"
            + (" (AER needs an align.json made with --gold, and --kind cross)" if "aer" in missing else "")
        )
    series = {m: series[m] for m in wanted if m in series}
    if not series:
        raise UsageError(f"nothing to plot: the inputs have no {args.kind} per-layer statistics")
    out = Output(args.output_dir, argv=getattr(args, "argv", None))
    names = {
        "sparsity": "sparsity rate",
        "null_rate": "null rate",
        "entropy": "entropy H(ŝ)",
        "js": f"JS divergence (ReLU: τ={tau})",
        "aer": f"AER ({args.align_method}, {args.align_setting})",
    }
    layer_curves(series, out / "curves.png", title=f"{args.kind} attention", ylabels={m: names[m] for m in series})
    report = {
        "command": NAME,
        "schema_version": SCHEMA_VERSION,
        "kind": args.kind,
        "tau": tau,
        "align_method": args.align_method,
        "align_setting": args.align_setting,
        "inputs": {label: {c: r.get("model", {}).get("checkpoint") for c, r in res.items()} for label, res in inputs},
        "series": {
            m: {label: [{"layer": layer, "value": v} for layer, v in pts] for label, pts in d.items()}
            for m, d in series.items()
        },
        "image": "curves.png",
    }
    out.wrote(out / "curves.png")
    out.json("curves.json", report)
    out.tsv(
        "curves.tsv",
        ("statistic", "label", "layer", "value"),
        [(m, label, layer, v) for m, d in series.items() for label, pts in d.items() for layer, v in pts],
    )
    return report
