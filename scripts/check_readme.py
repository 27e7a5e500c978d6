#!/usr/bin/env python3
"""The README's demo tables, rendered from the results JSON they come from, and checked
against it (``make check-readme``; ``make publish-demo`` writes them).

Blocks (README.md, between ``<!-- BEGIN name -->`` and ``<!-- END name -->``):

===========  ===============================  ==========================================
block        JSON                             written by
===========  ===============================  ==========================================
demo-cpu     docs/results/demo-cpu.json       ``make demo`` (cpu recipe), then ``make publish-demo``
demo-cuda    docs/results/demo-cuda.json      ``make demo`` on a CUDA machine, then ``make publish-demo``
bench-gpu    docs/results/bench-gpu.json      ``make bench-gpu`` (``benchmarks/gpu_session.sh``), copied;
             and bench-gpu-<family>.json      then one group of lines per other device family's file
===========  ===============================  ==========================================

``--write`` renders every block from its JSON (a missing JSON renders as "not measured"
with the command that measures it).  ``--check`` (the default) renders the same way and
compares the README's block line by line: the words must be the same, and every figure (a
number the JSON supplies: BLEU, CI bounds, p-values, losses, rates) must be within half a
unit of its last printed digit of the JSON's value (``6.16`` stands for any value in
[6.155, 6.165]).  A disagreement exits 1 with one line per figure or line naming it.

    python scripts/check_readme.py [--check | --write] [--readme README.md] [--results docs/results]
    python scripts/check_readme.py --publish demo_out/results.json    # copy by recipe, then --write

Standard library only: CI runs it without torch or fairseq.
"""

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BLOCKS = ("demo-cpu", "demo-cuda", "bench-gpu")
COMMANDS = {
    "demo-cpu": "`make demo DEMO_RECIPE=cpu && make publish-demo` (about 15 minutes on 2 CPU cores)",
    "demo-cuda": "`make demo && make publish-demo` on a machine where torch sees a CUDA GPU (about 7 minutes "
    "on one H200)",
    "bench-gpu": '`make bench-gpu` on a CUDA machine (docs/performance.md "GPU")',
}
KINDS = ("encoder_self", "decoder_self", "cross")
NUMBER = r"(-?\d+(?:\.\d+)?)"
PROG = "check-readme"


class ReadmeError(Exception):
    pass


class Figure:
    """A number in the README that comes from the JSON: its value there and how it is printed."""

    def __init__(self, value, fmt, name):
        self.value, self.fmt, self.name = float(value), fmt, name

    def __str__(self):
        return format(self.value, self.fmt)


def decimals(text):
    return len(text.split(".", 1)[1]) if "." in text else 0


def agrees(printed, value):
    """Is the printed figure within half a unit of its last printed digit of ``value``?"""
    return abs(float(printed) - value) <= 0.5 * 10 ** -decimals(printed) + 1e-9


# ----------------------------------------------------------------------------- rendering


def _fig(value, fmt, name):
    return "–" if value is None else Figure(value, fmt, name)


def short_date(iso):
    return (iso or "?")[:10]


def render(block, data, json_name):
    """The block's lines, each a list of text pieces and Figures."""
    if data is None:
        return [[f"Not measured yet: `{json_name}` does not exist.  Measure it with {COMMANDS[block]}."]]
    prov = data.get("provenance") or {}
    versions = prov.get("versions") or {}
    commit = (prov.get("git_commit") or "unknown")[:10] + (" (uncommitted changes)" if prov.get("git_dirty") else "")
    device = prov.get("device", "?")
    if device == "cpu":
        device = f"CPU ({prov.get('threads', '?')} threads of {prov.get('cpu_count', '?')} cores)"
    names = data["models_compared"]
    base = names[0]
    lines = [
        [f"{data['regime'][0].upper()}{data['regime'][1:]}."],
        [
            f"Device {device}, torch {versions.get('torch', '?')}, fairseq {versions.get('fairseq', '?')}; "
            f"{short_date(prov.get('date'))}; commit `{commit}`; `{data.get('test_set', '?')}`, "
            f"{data.get('test_sentences', '?')} sentences; sacreBLEU `{data.get('signature', '?')}`."
        ],
        [],
        [
            "| seed | model | sacreBLEU | 95% CI | p vs " + base + " | valid loss | repetition rate | length ratio "
            "| null rate enc / dec / cross |"
        ],
        ["| --- | --- | --- | --- | --- | --- | --- | --- | --- |"],
    ]
    for seed in data["seeds"]:
        for name in names:
            r = data["per_seed"][str(seed)][name]
            at = f"seed {seed} {name}"
            lo, hi = r["bleu_ci95"]
            row = [
                f"| {seed} | {name} | ",
                _fig(r["bleu"], ".2f", f"{at} sacreBLEU"),
                " | ",
                _fig(lo, ".1f", f"{at} CI low"),
                "–",
                _fig(hi, ".1f", f"{at} CI high"),
                " | ",
                _fig(r["p_value_vs_baseline"], ".3f", f"{at} p-value"),
                " | ",
                _fig(r["final_valid_loss"], ".3f", f"{at} valid loss"),
                " | ",
                _fig(r["repetition_rate"], ".3f", f"{at} repetition rate"),
                " | ",
                _fig(r["length_ratio"], ".3f", f"{at} length ratio"),
                " | ",
            ]
            for i, kind in enumerate(KINDS):
                row += [" / " if i else "", _fig(r["attention"][kind]["null_rate"], ".3f", f"{at} {kind} null rate")]
            lines.append(row + [" |"])
    if len(data["seeds"]) > 1:
        for name in names:
            m = data["models"][name]
            at = f"mean {name}"
            row = [
                f"| mean | {name} | ",
                _fig(m["bleu_mean"], ".2f", f"{at} sacreBLEU"),
                " | | | ",
                _fig(m["final_valid_loss_mean"], ".3f", f"{at} valid loss"),
                " | ",
                _fig(m["repetition_rate_mean"], ".3f", f"{at} repetition rate"),
                " | ",
                _fig(m["length_ratio_mean"], ".3f", f"{at} length ratio"),
                " | ",
            ]
            for i, kind in enumerate(KINDS):
                row += [
                    " / " if i else "",
                    _fig(m["attention_mean"][kind]["null_rate"], ".3f", f"{at} {kind} null rate"),
                ]
            lines.append(row + [" |"])
    lines += [
        [],
        [
            f"p: paired bootstrap against {base} of the same seed (sacreBLEU, "
            f"{data.get('paired_bootstrap_resamples', '?')} resamples).  Command: `{prov.get('command', '?')}`."
        ],
    ]
    return lines


def _times(value, name):
    return ["–"] if value is None else [Figure(value, ".2f", name), "×"]


def _spread(stats, name, rounds=False):
    """`` [min–max]`` (with ``, N rounds``) of a ratio's statistics, nothing when it has none."""
    if not stats or stats.get("min") is None or stats.get("max") is None:
        return []
    out = [" [", Figure(stats["min"], ".2f", f"{name} min"), "–", Figure(stats["max"], ".2f", f"{name} max")]
    if rounds and stats.get("rounds"):
        n = stats["rounds"]
        out += [", ", Figure(n, ".0f", f"{name} rounds"), " round" if n == 1 else " rounds"]
    return out + ["]"]


#: a ``make bench-gpu`` train part's ``window``: updates/s after each run's first epoch
#: (benchmarks/bench_gpu.py ``steady_updates_per_second``)
AFTER_FIRST_EPOCH = "after_first_epoch"


def render_gpu(data, json_name):
    """The README's GPU lines from a ``make bench-gpu`` result: kernel correctness, kernel
    time against SDPA flash, the fp16 loss scale, fairseq-train updates/s."""
    if data is None:
        return [[f"Not measured yet: `{json_name}` does not exist.  Measure it with {COMMANDS['bench-gpu']}."]]
    prov = data.get("provenance") or {}
    versions = prov.get("versions") or {}
    parts = data.get("parts") or {}
    lines = [
        [
            f"GPU: {prov.get('device', '?')}, torch {versions.get('torch', '?')}, Triton {versions.get('triton', '?')}; "
            f"{short_date(prov.get('date'))}; commit `{(prov.get('git_commit') or '?')[:10]}`; `{json_name}`."
        ]
    ]
    kernels = parts.get("kernels") or {}
    checks = kernels.get("correctness") or []
    if checks:
        wrong = sorted({(r["dtype"], r["head_dim"]) for r in checks if not r["ok"] and r.get("head_dim")})
        dims = ", ".join(str(d) for _, d in wrong)
        dtypes = sorted({dt for dt, _ in wrong})
        # a shard that wrote nothing: its plan is unknown; a result from before plans were
        # recorded: what ran
        planned = None if kernels.get("shards_missing") else kernels.get("expected_checks", len(checks))
        ran = (
            ""
            if planned == len(checks)
            else f", of {planned if planned is not None else 'more'} planned: the part was cut off, so it decides nothing"
        )
        line = [
            f"- Triton kernels on CUDA: {sum(r['ok'] for r in checks)} of {len(checks)} correctness checks pass "
            f"(output and gradients against float64{ran})"
        ]
        line.append(
            f"; {'/'.join(dtypes)} failed at head dims {dims}, so the triton backend does not serve it on CUDA."
            if wrong
            else "."
        )
        lines.append(line)
    timing = [
        r for r in (parts.get("kernels") or {}).get("timing") or [] if r.get("dtype") == "fp16" and not r["causal"]
    ]
    if timing:
        line = ["- ReLU attention forward+backward (Triton) against SDPA flash, head dim 64, fp16: "]
        for i, r in enumerate(timing):
            s = r.get("speedup_vs_flash")
            name = f"kernel speed at {r['length']} tokens"
            line += [", " if i else "", *_times(s and s["mean"], name), *_spread(s, name)]
            line.append(f" at {r['length']:,} tokens")
        lines.append(line + [" (mean [min–max] of paired repeats; target ≥ 1.15× from 1,024)."])
    ls = parts.get("loss_scale") or {}
    if ls.get("presets"):
        line = [f"- fp16 loss scale over {ls.get('updates', '?'):,} updates: "]
        for i, (name, r) in enumerate(ls["presets"].items()):
            line.append("; " if i else "")
            if r.get("median") is None:
                line.append(f"{name} not measured ({r.get('why_short', 'its run failed')})")
            else:
                line += [f"{name} ", Figure(r["median"], ".0f", f"{name} loss scale"), " ("]
                line += [Figure(r["overflows"], ".0f", f"{name} overflows"), " overflows)"]
        lines.append(line + ["."])
    train = parts.get("train") or {}
    if train:
        if all(r.get("window") == AFTER_FIRST_EPOCH for r in train.values()):
            window = "each run's updates/s after its first epoch"
        else:  # (results recorded before bench_gpu measured after the first epoch, 2026-11-29)
            window = (
                "each run's updates/s from its second log interval, its first epoch included, in which stock "
                "softmax ran 2–3× slower than later in the H200's fp16 paired blocks (docs/performance.md)"
            )
        line = [
            "- `fairseq-train` updates/s against stock softmax of the same size and attention dropout "
            f"(`*_dropout`: 0.1 on both sides, `*_base`: `transformer_wmt_en_de`; {window}; "
            "median [min–max] of per-round ratios): "
        ]
        for i, (dtype, r) in enumerate(train.items()):
            line.append("; " if i else "")
            ratios = {k: v for k, v in (r.get("ratios") or {}).items() if v and not k.startswith("softmax")}
            if not r.get("valid", True) or not ratios:
                line.append(f"{dtype} not measured ({r.get('why_short', 'no complete round')})")
                continue
            line.append(f"{dtype} ")
            for j, (name, v) in enumerate(ratios.items()):
                what = f"{dtype} {name} updates/s ratio"
                line += [", " if j else "", f"{name} ", *_times(v["median"], what), *_spread(v, what, rounds=True)]
        lines.append(line + ["."])
    ab = parts.get("train_ab") or {}
    if ab:
        line = [
            "- Paired training blocks in one process (`benchmarks/train_ab.py`: fairseq's `Trainer`, blocks of "
            "updates in alternating order; median [95% CI] of per-block ratios to softmax of the same size): "
        ]
        for i, (dtype, r) in enumerate(ab.items()):
            line.append("; " if i else "")
            summary = {k: v for k, v in (r.get("summary") or {}).items() if not k.startswith("softmax")}
            if not summary:
                line.append(f"{dtype} not measured (no complete round)")
                continue
            line += [f"{dtype}, ", Figure(len(r.get("blocks") or []), ".0f", f"{dtype} train_ab rounds"), " rounds: "]
            for j, (name, e) in enumerate(summary.items()):
                v = next((x for k, x in e.items() if k.startswith("ratio_to_")), None)
                what = f"{dtype} {name} train_ab ratio"
                line += [", " if j else "", f"{name} ", *_times(v and v["median"], what)]
                if v:
                    line += [" [", Figure(v["ci95_low"], ".2f", f"{what} low"), "–"]
                    line += [Figure(v["ci95_high"], ".2f", f"{what} high"), "]"]
                k = next((x for key, x in e.items() if key.startswith("against_")), None)
                if k:
                    line += [" (faster than eager in ", Figure(k["faster_blocks"], ".0f", f"{what} wins"), " of "]
                    line += [Figure(k["blocks"], ".0f", f"{what} blocks"), ", sign test p "]
                    p = k["sign_test_p"]
                    line += ["< 0.001)"] if p < 0.001 else ["= ", Figure(p, ".3f", f"{what} p"), ")"]
        lines.append(line + ["."])
    for line in lines:  # a figure named with its file: the block renders several
        for part in line:
            if isinstance(part, Figure):
                part.name = f"{json_name}: {part.name}"
    return lines


def text_of(lines):
    return "\n".join("".join(str(p) for p in line) for line in lines)


# ----------------------------------------------------------------------------- README


def markers(block):
    return f"<!-- BEGIN {block} -->", f"<!-- END {block} -->"


def find_block(readme_text, block, readme_name):
    """(start, end) character offsets of the block's content (between its marker lines)."""
    begin, end = markers(block)
    i, j = readme_text.find(begin), readme_text.find(end)
    if i < 0 or j < 0 or j < i:
        raise ReadmeError(f"{readme_name}: no {begin} ... {end} pair (add the markers around the {block} table)")
    start = readme_text.index("\n", i) + 1
    return start, j


def _read_json(path):
    """The JSON at ``path``, None when there is no file."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ReadmeError(f"{path}: not valid JSON ({e})") from None


def load_json(path):
    data = _read_json(path)
    if data is None:
        return None
    missing = [k for k in ("models_compared", "seeds", "per_seed", "regime", "provenance") if k not in data]
    if missing:
        raise ReadmeError(f"{path}: not a demo results.json (no {', '.join(missing)}); copy one with make publish-demo")
    return data


def load_gpu_json(path):
    data = _read_json(path)
    if data is not None and (not isinstance(data, dict) or "parts" not in data or "provenance" not in data):
        raise ReadmeError(f"{path}: not a make bench-gpu result (no parts / provenance)")
    return data


def gpu_results(results_dir):
    """The ``make bench-gpu`` results the bench-gpu block renders, one group of lines each:
    ``bench-gpu.json`` (always: missing, it renders as "not measured"), then every
    ``bench-gpu-<family>.json`` (another device family's run, kept apart because ``auto``
    decides per family), by name."""
    return [results_dir / "bench-gpu.json", *sorted(results_dir.glob("bench-gpu-*.json"))]


def rendered_blocks(results_dir):
    out = {}
    for block in BLOCKS:
        path = Path(results_dir) / f"{block}.json"
        try:
            if block == "bench-gpu":
                out[block] = []
                for gpu_path in gpu_results(Path(results_dir)):
                    path = gpu_path
                    # a blank line between groups: each file's lines a paragraph and list of their own
                    out[block] += ([[]] if out[block] else []) + render_gpu(
                        load_gpu_json(path), f"docs/results/{path.name}"
                    )
                continue
            out[block] = render(block, load_json(path), f"docs/results/{path.name}")
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, ReadmeError):
                raise
            again = "copy the make bench-gpu result again" if block == "bench-gpu" else "re-run make publish-demo"
            raise ReadmeError(f"{path}: missing or malformed field ({e!r}); {again}") from None
    return out


def compare(block, lines, readme_text, readme_name):
    """Every disagreement of the README's block with the rendered ``lines``, one message each."""
    start, end = find_block(readme_text, block, readme_name)
    first_line = readme_text.count("\n", 0, start) + 1
    got = readme_text[start:end].split("\n")
    if got and got[-1] == "":
        got = got[:-1]
    problems = []
    if len(got) != len(lines):
        return [
            f"{readme_name}: block {block} has {len(got)} lines, the rendering of its JSON has {len(lines)} "
            f"(run scripts/check_readme.py --write)"
        ]
    for n, (line, want) in enumerate(zip(got, lines)):
        where = f"{readme_name}:{first_line + n}"
        figures = [p for p in want if isinstance(p, Figure)]
        pattern = "".join(NUMBER if isinstance(p, Figure) else re.escape(str(p)) for p in want)
        m = re.fullmatch(pattern, line.rstrip())
        if m is None:
            problems.append(
                f"{where}: block {block}: the text differs from the JSON's rendering:\n"
                f"  README: {line.rstrip()}\n  JSON:   {text_of([want])}"
            )
            continue
        for printed, fig in zip(m.groups(), figures):
            if not agrees(printed, fig.value):
                tol = 0.5 * 10 ** -decimals(printed)
                problems.append(
                    f"{where}: block {block}: {fig.name} is {printed} in the README, {fig.value:g} in "
                    f"the JSON (tolerance ±{tol:g}: half a unit of the last printed digit)"
                )
    return problems


def check(readme, results_dir):
    text = Path(readme).read_text(encoding="utf-8")
    problems = []
    for block, lines in rendered_blocks(results_dir).items():
        problems += compare(block, lines, text, Path(readme).name)
    return problems


def write(readme, results_dir):
    readme = Path(readme)
    text = readme.read_text(encoding="utf-8")
    for block, lines in rendered_blocks(results_dir).items():
        start, end = find_block(text, block, readme.name)
        text = text[:start] + text_of(lines) + "\n" + text[end:]
    tmp = readme.with_name(f".{readme.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(readme)


def publish(results_json, results_dir):
    """Copy a demo's results.json to docs/results/demo-<recipe>.json; returns the path."""
    data = load_json(Path(results_json))
    if data is None:
        raise ReadmeError(f"{results_json}: no such file (run make demo first)")
    recipe = data.get("recipe")
    if recipe not in ("cpu", "cuda"):
        raise ReadmeError(f"{results_json}: recipe is {recipe!r}, expected cpu or cuda")
    device = (data.get("provenance") or {}).get("device", "cpu")
    if recipe == "cuda" and device == "cpu":
        raise ReadmeError(f"{results_json}: the cuda recipe ran on the CPU; the demo-cuda table is for a GPU run")
    target = Path(results_dir) / f"demo-{recipe}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(results_json, target)
    return target


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, prog=PROG)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="compare the README with the JSON (default)")
    mode.add_argument("--write", action="store_true", help="render the blocks into the README")
    mode.add_argument("--publish", metavar="RESULTS_JSON", help="copy a demo's results.json by recipe, then --write")
    p.add_argument("--readme", default=str(REPO / "README.md"))
    p.add_argument("--results", default=str(REPO / "docs" / "results"), help="folder of demo-cpu.json / demo-cuda.json")
    args = p.parse_args(argv)
    try:
        if args.publish:
            target = publish(args.publish, args.results)
            print(f"{PROG}: {args.publish} -> {target}")
            write(args.readme, args.results)
            print(f"{PROG}: wrote the demo blocks of {args.readme}")
        elif args.write:
            write(args.readme, args.results)
            print(f"{PROG}: wrote the demo blocks of {args.readme}")
        else:
            problems = check(args.readme, args.results)
            for line in problems:
                print(f"{PROG}: error: {line}", file=sys.stderr)
            if problems:
                return 1
            print(f"{PROG}: {args.readme}: the blocks {', '.join(BLOCKS)} agree with {args.results}")
    except (ReadmeError, OSError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
