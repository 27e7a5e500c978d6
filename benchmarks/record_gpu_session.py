#!/usr/bin/env python
"""Record a GPU session's returned files as ``docs/results/bench-gpu*.json``, the file auto
and the README read for that device family.

A ``benchmarks/gpu_session.sh`` call returns one file per step: ``kernels.json`` (the CUDA
correctness and timing, ``gpu_kernels.merge_results``), ``loss_scale.json``,
``train-fp16.json`` / ``train-bf16.json`` (``bench_gpu.py`` results) and ``ab-fp16.json`` /
``ab-bf16.json`` (``train_ab.py`` results).  This puts their parts into one result: ``kernels``,
``loss_scale``, ``train`` and ``train_ab`` (the last two per dtype), with the provenance of the
runs, and writes it as the device family's file: ``bench-gpu.json`` for the H100,
``bench-gpu-<family>.json`` for another (``bench-gpu-h200.json``).  Before, sessions put these
together by hand.

Refused, in one line, before anything is written:

* files of different commits or devices (one result has one provenance);
* no ``kernels.json`` among them: auto reads a result's rounds only beside a CUDA correctness
  part that passed in full (``triton.faster_in``), so a result without one would replace the
  family's file with one that decides nothing;
* a file that is none of these, or unreadable.

It then says whether the recorded results change what auto decides: ``MEASURED_FASTER`` in
``attention/backends/triton.py`` must equal ``measured_faster()`` (a test keeps them equal).

    python benchmarks/record_gpu_session.py /path/to/returned/*.json            # writes
    python benchmarks/record_gpu_session.py --dry-run kernels.json ab-fp16.json  # shows
"""

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

RESULTS = REPO / "docs" / "results"


class RecordError(ValueError):
    pass


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RecordError(f"{path}: cannot read it as JSON ({e})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: not a GPU session result (a JSON object expected)")
    return data


def family_file(device: str) -> str:
    """``bench-gpu.json`` for the H100 (its file since the first GPU run), else
    ``bench-gpu-<family>.json`` (``H200`` -> ``bench-gpu-h200.json``, ``H100 PCIe`` ->
    ``bench-gpu-h100-pcie.json``)."""
    from fairseq_sparse_attn.attention.backends.triton import device_family

    family = device_family(device)
    return "bench-gpu.json" if family == "H100" else f"bench-gpu-{family.lower().replace(' ', '-')}.json"


def compose(paths) -> dict:
    """One ``make bench-gpu`` result from a session's files (module docstring)."""
    return compose_data([(Path(path).name, _load(Path(path))) for path in paths])


def compose_data(named) -> dict:
    """:func:`compose` of the files' contents, ``[(file name, data), ...]``."""
    parts: dict = {}
    provenance = None
    commits, devices = {}, {}
    for name, data in named:
        if "correctness" in data and "parts" not in data:  # kernels.json (gpu_kernels.merge_results)
            parts["kernels"] = data
            if data.get("device"):
                devices[name] = data["device"]
            continue
        if not isinstance(data.get("parts"), dict) or not isinstance(data.get("provenance"), dict):
            raise RecordError(f"{name}: not a GPU session result (no parts and provenance, nor kernels.json's checks)")
        prov = data["provenance"]
        commits[name], devices[name] = prov.get("git_commit"), prov.get("device")
        provenance = provenance or dict(prov)
        for part_name, part in data["parts"].items():
            if part_name in ("train", "train_ab"):  # per dtype: several steps add to one part
                parts.setdefault(part_name, {}).update(part)
            else:
                parts[part_name] = part
    if "kernels" not in parts:
        raise RecordError(
            "no kernels.json among the files: auto reads a result's rounds only beside a CUDA correctness part "
            "that passed (record a call that ran the kernels step with the others)"
        )
    if provenance is None:
        raise RecordError("no file with a provenance (train-*.json, ab-*.json or loss_scale.json) among them")
    for what, seen in (("commits", commits), ("devices", devices)):
        if len(set(seen.values())) > 1:
            listed = ", ".join(f"{n}: {v}" for n, v in seen.items())
            raise RecordError(f"the files are of different {what} ({listed}): one result has one provenance")
    commit = parts["kernels"].get("commit")
    if commit and provenance.get("git_commit") and commit != provenance["git_commit"]:
        raise RecordError(f"kernels.json is of commit {commit}, the others of {provenance['git_commit']}")
    versions = dict(provenance.get("versions") or {})
    if parts["kernels"].get("triton"):
        versions["triton"] = parts["kernels"]["triton"]
    provenance["versions"] = versions
    provenance["note"] = "recorded by benchmarks/record_gpu_session.py from " + ", ".join(n for n, _ in named)
    return {"provenance": provenance, "parts": parts}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", help="the JSON files a gpu_session.sh call returned")
    p.add_argument("--results", default=str(RESULTS), help="where the device family's file goes (docs/results)")
    p.add_argument("--dry-run", action="store_true", help="show what would be written, write nothing")
    args = p.parse_args(argv)
    try:
        result = compose(args.files)
    except RecordError as e:
        print(f"record_gpu_session.py: error: {e}", file=sys.stderr)
        return 2
    from fairseq_sparse_attn.attention.backends import triton as tb

    target = Path(args.results) / family_file(result["provenance"]["device"])
    decides = sorted(tb.faster_in(result))
    print(
        f"{target}: parts {', '.join(sorted(result['parts']))}; auto would take the kernels for {decides or 'nothing'}"
    )
    if args.dry_run:
        return 0
    from fairseq_sparse_attn.writers import write_text

    write_text(target, json.dumps(result, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    found = tb.measured_faster(Path(args.results))
    if found != tb.MEASURED_FASTER:
        print(
            f"auto's table changes: set MEASURED_FASTER in attention/backends/triton.py to {found} "
            "(a test keeps the two equal), then python scripts/check_readme.py --write"
        )
    else:
        print("auto's decisions are unchanged; python scripts/check_readme.py --write renders the README's lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
