"""Wrapper commands that run fairseq's CLIs with ``--user-dir`` set to the installed
plugin, so it can be used from any directory:

    fsa-train data-bin --arch rela_transformer_wmt_en_de ...   ==   fairseq-train --user-dir <pkg> ...
    fsa-user-dir                                                prints <pkg>

``fsa-generate`` and ``fsa-validate`` also take ``--mask-encoder-heads 0,7``: the encoder
self-attention heads to disable in every layer (Raganato et al. 2020, Table 4), passed to
the model as ``--model-overrides "{'encoder_masked_heads': '0,7'}"`` (merged with any
``--model-overrides`` given).

The commands log like fairseq's own (``2026-01-01 12:00:00 | INFO | name | message``;
``LOGLEVEL`` sets the level) and report bad input (:class:`fairseq_sparse_attn.errors.
UsageError`, a checkpoint that does not load, a diverged run, a CPU world that cannot be
formed) as one line, ``fsa-train: error: ...``, exit status 1; ``FSA_TRACEBACK=1`` shows
the traceback instead.
"""

import ast
import logging
import os
import sys

LOG_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"  # fairseq_cli's
LOG_DATEFMT = "%Y-%m-%d %H:%M:%S"


def configure_logging(stream=None):
    """fairseq_cli's logging set-up.  It replaces the one made on import by one of
    fairseq's modules (wav2vec2_classification: ``logging.basicConfig(level=DEBUG)``, no
    timestamps, hydra DEBUG lines), which would otherwise win over fairseq_cli's."""
    logging.basicConfig(format=LOG_FORMAT, datefmt=LOG_DATEFMT,
                        level=os.environ.get("LOGLEVEL", "INFO").upper(),
                        stream=stream or sys.stdout, force=True)


def _with_user_dir(argv):
    from fairseq_sparse_attn import user_dir

    if any(a == "--user-dir" or a.startswith("--user-dir=") for a in argv):
        return argv
    return argv + ["--user-dir", user_dir()]


def _pop_option(argv, name):
    """(argv without ``name VALUE`` / ``name=VALUE``, VALUE or None)."""
    out, value, i = [], None, 0
    while i < len(argv):
        arg = argv[i]
        if arg == name:
            if i + 1 >= len(argv):
                raise SystemExit(f"{name} needs a value, e.g. {name} 0,7")
            value = argv[i + 1]
            i += 2
            continue
        if arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
        else:
            out.append(arg)
        i += 1
    return out, value


def with_head_masking(argv):
    """Turn ``--mask-encoder-heads H`` into fairseq's ``--model-overrides``."""
    from fairseq_sparse_attn.attention.fixed_patterns import parse_head_list

    argv, heads = _pop_option(argv, "--mask-encoder-heads")
    if heads is None:
        return argv
    try:
        parse_head_list(heads)
    except ValueError as e:
        raise SystemExit(f"--mask-encoder-heads: {e}") from None
    argv, overrides = _pop_option(argv, "--model-overrides")
    merged = ast.literal_eval(overrides) if overrides else {}
    if not isinstance(merged, dict):
        raise SystemExit(f"--model-overrides must be a Python dict literal, got {overrides!r}")
    merged["encoder_masked_heads"] = heads
    return argv + ["--model-overrides", repr(merged)]


def _user_errors():
    from fairseq_sparse_attn.compat import DistributedSetupError, TrainingDivergedError
    from fairseq_sparse_attn.errors import UsageError

    return (UsageError, DistributedSetupError, TrainingDivergedError)


def _flag_given(argv, *names):
    return any(a in names or any(a.startswith(n + "=") for n in names) for a in argv)


def _required_flags(command, argv):
    """Flags fairseq needs but reports badly when missing (a bare RuntimeError)."""
    if _flag_given(argv, "-h", "--help"):
        return
    if command == "fsa-train" and not _flag_given(argv, "--arch", "-a"):
        raise SystemExit("fsa-train: error: --arch is required, e.g. --arch "
                         "rela_transformer_wmt_en_de (the presets are listed in the README, "
                         "or `fsa-train --help` after --arch)")
    if command in ("fsa-generate", "fsa-validate") and not _flag_given(argv, "--path"):
        raise SystemExit(f"{command}: error: --path CHECKPOINT is required")
    if command == "fsa-validate" and not _flag_given(argv, "--task"):
        task = _checkpoint_task(_option_value(argv, "--path"))
        raise SystemExit("fsa-validate: error: --task is required (fairseq-validate has no "
                         "default): " + (f"the checkpoint was trained with --task {task}"
                                         if task else "e.g. --task translation"))


def _option_value(argv, name):
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _checkpoint_task(path):
    """The task name saved in a checkpoint (first of a ':'-separated list), or None."""
    try:
        from fairseq_sparse_attn.compat.resume_config_check import read_checkpoint_config

        cfg = read_checkpoint_config(path.split(":")[0])
        task = cfg.get("task") if cfg is not None else None
        return task.get("_name") if task is not None else None
    except Exception:  # any unreadable checkpoint: the error message suggests an example
        return None


def _run(module_name, mask_heads=False, log_stream=None):
    import importlib

    command = os.path.basename(sys.argv[0]) or "fsa"
    configure_logging(log_stream)
    argv = sys.argv[1:]
    _required_flags(command, argv)
    if mask_heads:
        argv = with_head_masking(argv)
    sys.argv = [sys.argv[0]] + _with_user_dir(argv)
    errors = _user_errors()
    try:
        importlib.import_module(module_name).cli_main()
    except errors as e:
        if os.environ.get("FSA_TRACEBACK") == "1":
            raise
        raise SystemExit(f"{command}: error: {' '.join(str(e).split())}") from None


def print_user_dir():
    from fairseq_sparse_attn import user_dir

    print(user_dir())


def train():
    _run("fairseq_cli.train")


def generate():
    _run("fairseq_cli.generate", mask_heads=True, log_stream=sys.stderr)


def interactive():
    from fairseq_sparse_attn import interactive_input

    interactive_input.install()  # input split on \n only; a bad line is reported and skipped
    _run("fairseq_cli.interactive", log_stream=sys.stderr)


def validate():
    _run("fairseq_cli.validate", mask_heads=True)
