"""Average the parameters of the last N checkpoints of a fairseq run (ReLA: "we average
the last 5 checkpoints").

fairseq's own ``scripts/average_checkpoints.py`` is not installed with the fairseq wheels
(fairseq-fixed 0.12.3.1 included), so the plugin carries this one:

    python -m fairseq_sparse_attn.tools.average_checkpoints --inputs SAVE_DIR --num 5 \\
        --output SAVE_DIR/checkpoint_avg5.pt
    python -m fairseq_sparse_attn.tools.average_checkpoints --inputs a.pt b.pt --output avg.pt

With a directory, the update checkpoints ``checkpoint_<epoch>_<updates>.pt``
(``--save-interval-updates``) are used, the N with the most updates; without any, the
epoch checkpoints ``checkpoint<epoch>.pt``; fewer than N is an error, as in fairseq's script
(``--allow-fewer``: average those there are, said in the output line; the scripts' smoke
runs, which save 2).  The output is the newest input's checkpoint
(configuration, optimizer history) with ``model`` replaced by the element-wise mean of the
models' tensors, computed in float64 and cast back to each tensor's dtype; integer
tensors (buffers such as step counters) must be equal and are copied.
"""

import os
import re
import sys
from collections import OrderedDict
from pathlib import Path
from typing import List

from ..errors import OneLineErrorParser
from ..writers import temporary_name, unwritable_file

_UPDATE = re.compile(r"^checkpoint_(\d+)_(\d+)\.pt$")
_EPOCH = re.compile(r"^checkpoint(\d+)\.pt$")


def last_checkpoints(directory: Path, n: int, allow_fewer: bool = False) -> List[Path]:
    """The n newest update checkpoints of ``directory`` (else epoch checkpoints), oldest
    first; raises ValueError when it has none, or fewer than n (unless ``allow_fewer``)."""
    if n < 1:
        raise ValueError(f"--num {n}: average at least 1 checkpoint")
    names = os.listdir(directory)
    updates = sorted((int(m.group(2)), name) for name in names if (m := _UPDATE.match(name)))
    epochs = sorted((int(m.group(1)), name) for name in names if (m := _EPOCH.match(name)))
    found, kind = (
        (updates, "update checkpoints checkpoint_<epoch>_<updates>.pt")
        if updates
        else (epochs, "epoch checkpoints checkpoint<epoch>.pt")
    )
    if found and len(found) < n and not allow_fewer:
        raise ValueError(
            f"{directory}: --num {n} but it has {len(found)} {kind} "
            "(keep more with --keep-interval-updates, or average fewer)"
        )
    if found:
        return [directory / name for _, name in found[-n:]]
    raise ValueError(
        f"{directory}: no checkpoint_<epoch>_<updates>.pt or checkpoint<epoch>.pt files "
        "(train with --save-interval-updates N --keep-interval-updates K)"
    )


def average(paths: List[Path]):
    import torch

    states = []
    for p in paths:
        try:
            state = torch.load(p, map_location="cpu", weights_only=False)
        except Exception as e:  # a truncated or foreign file: torch's error names no file
            raise ValueError(
                f"{p}: not a readable checkpoint ({type(e).__name__}: {e}); a run killed while saving?"
            ) from None
        if not isinstance(state, dict) or "model" not in state:
            raise ValueError(f"{p}: not a fairseq checkpoint (no 'model' entry)")
        states.append(state)
    keys = list(states[0]["model"].keys())
    for p, s in zip(paths[1:], states[1:]):
        if list(s["model"].keys()) != keys:
            missing = set(keys) ^ set(s["model"].keys())
            raise ValueError(f"{p}: different parameters than {paths[0]} ({sorted(missing)[:5]})")
    averaged = OrderedDict()
    for k in keys:
        tensors = [s["model"][k] for s in states]
        first = tensors[0]
        if first.is_floating_point():
            total = torch.zeros_like(first, dtype=torch.float64)
            for t in tensors:
                if t.shape != first.shape:
                    raise ValueError(
                        f"{k}: shapes differ between checkpoints ({tuple(first.shape)} vs {tuple(t.shape)})"
                    )
                total += t.to(torch.float64)
            averaged[k] = (total / len(tensors)).to(first.dtype)
        else:
            for p, t in zip(paths, tensors):
                if not torch.equal(t, first):
                    raise ValueError(f"{k}: integer tensor differs in {p}; cannot average")
            averaged[k] = first.clone()
    out = states[-1]
    out["model"] = averaged
    return out


def main(argv=None):
    p = OneLineErrorParser(
        prog="average_checkpoints",
        help_command="python -m fairseq_sparse_attn.tools.average_checkpoints",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--inputs", nargs="+", required=True, help="a save directory, or checkpoint files")
    p.add_argument("--num", type=int, default=5, help="with a directory: how many of the newest checkpoints")
    p.add_argument(
        "--allow-fewer",
        action="store_true",
        help="with a directory: average the checkpoints there are when fewer than --num",
    )
    p.add_argument("--output", required=True)
    args = p.parse_args(argv)
    import torch

    try:
        reason = unwritable_file(args.output, "--output")
        if reason:
            raise ValueError(reason)
        if len(args.inputs) == 1 and Path(args.inputs[0]).is_dir():
            paths = last_checkpoints(Path(args.inputs[0]), args.num, args.allow_fewer)
        else:
            paths = [Path(x) for x in args.inputs]
            missing = [str(x) for x in paths if not x.is_file()]
            if missing:
                raise ValueError(f"checkpoint(s) not found: {', '.join(missing)}")
        state = average(paths)
    except ValueError as e:
        print(f"average_checkpoints: error: {e}", file=sys.stderr)
        return 1
    Path(args.output).absolute().parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(args.output)
    try:
        torch.save(state, tmp)
        os.replace(tmp, args.output)
    finally:  # a failed or interrupted save leaves no part behind
        if os.path.exists(tmp):
            os.unlink(tmp)
    from_directory = len(args.inputs) == 1 and Path(args.inputs[0]).is_dir()
    fewer = from_directory and len(paths) < args.num
    asked = f" (of --num {args.num}: the directory has no more)" if fewer else ""
    print(f"averaged {len(paths)} checkpoints{asked}: {' '.join(x.name for x in paths)} -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
