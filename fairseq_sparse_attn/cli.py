"""Wrapper commands that run fairseq's CLIs with ``--user-dir`` set to the installed
plugin, so it can be used from any directory:

    fsa-train data-bin --arch rela_transformer_wmt_en_de ...   ==   fairseq-train --user-dir <pkg> ...
    fsa-user-dir                                                prints <pkg>

``fsa-generate`` and ``fsa-validate`` also take ``--mask-encoder-heads 0,7``: the encoder
self-attention heads to disable in every layer (Raganato et al. 2020, Table 4), passed to
the model as ``--model-overrides "{'encoder_masked_heads': '0,7'}"`` (merged with any
``--model-overrides`` given).

The commands log like fairseq's own (``2026-01-01 12:00:00 | INFO | name | message``;
``LOGLEVEL`` sets the level); the plugin's own start-up lines (the compat patch list,
fairseq's "--user-dir ... has already been imported") are DEBUG, and fairseq's dump of
the whole configuration is not shown, unless ``-v`` / ``--verbose`` (or ``FSA_VERBOSE=1``).
A bad flag is one line (argparse's error without its usage block).  ``--help`` lists the plugin's flags in a "sparse
attention" group (:func:`print_help`).  They report bad input (:class:`fairseq_sparse_attn.errors.
UsageError`, a checkpoint that does not load, a diverged run, a CPU world that cannot be
formed) as one line, ``fsa-train: error: ...``, exit status 1; ``FSA_TRACEBACK=1`` shows
the traceback instead.
"""

import argparse
import ast
import logging
import os
import sys

LOG_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"  # fairseq_cli's
LOG_DATEFMT = "%Y-%m-%d %H:%M:%S"


VERBOSE_FLAGS = ("-v", "--verbose")
USER_DIR_NOTICE = "--user-dir="  # fairseq.utils: "--user-dir=PATH has already been imported."


class _UserDirNotice(logging.Filter):
    """fairseq logs at INFO that a --user-dir "has already been imported" when its package
    is (``--user-dir`` naming the ``fairseq_sparse_attn`` folder, which the wrapper has
    imported): shown only when verbose."""

    def filter(self, record):
        if str(record.msg).startswith(USER_DIR_NOTICE) and "already been imported" in str(record.msg):
            from fairseq_sparse_attn.compat import verbose

            return verbose()
        return True


class _ConfigDump(logging.Filter):
    """fairseq_cli's train / generate / interactive / validate log their whole configuration
    (``logger.info(cfg)``, about 6,000 characters on one line) before any work: shown only
    when verbose (``-v``); every checkpoint keeps it (``cfg``)."""

    def filter(self, record):
        if isinstance(record.msg, str):
            return True
        if isinstance(record.msg, (dict, argparse.Namespace)) or type(record.msg).__name__ == "DictConfig":
            from fairseq_sparse_attn.compat import verbose

            return verbose()
        return True


CONFIG_LOGGERS = ("fairseq_cli.train", "fairseq_cli.generate", "fairseq_cli.interactive", "fairseq_cli.validate")


def configure_logging(stream=None):
    """fairseq_cli's logging set-up.  It replaces the one made on import by one of
    fairseq's modules (wav2vec2_classification: ``logging.basicConfig(level=DEBUG)``, no
    timestamps, hydra DEBUG lines), which would otherwise win over fairseq_cli's."""
    logging.basicConfig(
        format=LOG_FORMAT,
        datefmt=LOG_DATEFMT,
        level=os.environ.get("LOGLEVEL", "INFO").upper(),
        stream=stream or sys.stdout,
        force=True,
    )
    notices = logging.getLogger("fairseq.utils")
    if not any(isinstance(f, _UserDirNotice) for f in notices.filters):
        notices.addFilter(_UserDirNotice())
    for name in CONFIG_LOGGERS:
        cli_logger = logging.getLogger(name)
        if not any(isinstance(f, _ConfigDump) for f in cli_logger.filters):
            cli_logger.addFilter(_ConfigDump())


def one_line_usage_errors(command):
    """argparse reports a bad flag (an invalid choice, a missing value) with the whole usage
    block first, 183 lines for fsa-train: here it is the error line alone, and where the
    flags are listed."""

    def error(self, message):
        from .attention.core import REMOVED_BACKENDS, unknown_backend_message
        from .errors import usage_error_line

        for name in REMOVED_BACKENDS:  # a removed value: what to use instead
            if f"--attn-backend: invalid choice: '{name}'" in message:
                message = unknown_backend_message(name)
        self.exit(2, usage_error_line(command, message))

    argparse.ArgumentParser.error = error  # type: ignore[method-assign]


def _pop_verbose(argv):
    """argv without ``-v`` / ``--verbose``; when given, ``FSA_VERBOSE=1`` (for this process
    and the workers it starts)."""
    if any(a in VERBOSE_FLAGS for a in argv):
        os.environ["FSA_VERBOSE"] = "1"
    return [a for a in argv if a not in VERBOSE_FLAGS]


def _with_user_dir(argv):
    from fairseq_sparse_attn import user_dir

    if any(a == "--user-dir" or a.startswith("--user-dir=") for a in argv):
        return argv
    return argv + ["--user-dir", user_dir()]


def _pop_option(argv, name, command="fsa", example=""):
    """(argv without ``name VALUE`` / ``name=VALUE``, VALUE or None)."""
    out, value, i = [], None, 0
    while i < len(argv):
        arg = argv[i]
        if arg == name:
            if i + 1 >= len(argv):
                raise SystemExit(
                    f"{command}: error: {name} needs a value" + (f", e.g. {name} {example}" if example else "")
                )
            value = argv[i + 1]
            i += 2
            continue
        if arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
        else:
            out.append(arg)
        i += 1
    return out, value


def _model_overrides(command, argv):
    """The dict of ``--model-overrides`` (fairseq ends in a traceback on anything else)."""
    _, overrides = _pop_option(argv, "--model-overrides", command, "\"{'attn_backend': 'auto'}\"")
    try:
        merged = ast.literal_eval(overrides) if overrides else {}
    except (ValueError, SyntaxError):
        merged = None
    if not isinstance(merged, dict):
        raise SystemExit(f"{command}: error: --model-overrides must be a Python dict literal, got {overrides!r}")
    return merged


def with_head_masking(argv, command="fsa-generate"):
    """Turn ``--mask-encoder-heads H`` into fairseq's ``--model-overrides``; a bad value is
    one line, ``<command>: error: ...``, before anything is loaded."""
    from fairseq_sparse_attn.options.cli import parse_head_list

    argv, heads = _pop_option(argv, "--mask-encoder-heads", command, "0,7")
    if heads is None:
        return argv
    try:
        parse_head_list(heads)
    except ValueError as e:
        raise SystemExit(f"{command}: error: --mask-encoder-heads {heads}: {e}") from None
    merged = _model_overrides(command, argv)
    argv, _ = _pop_option(argv, "--model-overrides")
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
    _check_user_dir(command, argv)
    _check_values(command, argv)
    _check_combinations(command, argv)
    if command == "fsa-train" and not _flag_given(argv, "--arch", "-a"):
        raise SystemExit(
            "fsa-train: error: --arch is required, e.g. --arch "
            "rela_transformer_wmt_en_de (the presets are listed in the README, "
            "or `fsa-train --help` after --arch)"
        )
    if command == "fsa-train" and not _flag_given(argv, "--optimizer"):
        raise SystemExit(
            "fsa-train: error: --optimizer is required (fairseq has no default), e.g. --optimizer adam "
            "--lr 5e-4 (before: fairseq's 'ValueError: optimizer is required!' traceback after the model was built)"
        )
    if command in ("fsa-train", "fsa-validate") and not _flag_given(
        argv, "--max-tokens", "--batch-size", "--max-sentences"
    ):
        raise SystemExit(
            f"{command}: error: --max-tokens N or --batch-size N is required (the size of a "
            "batch, in tokens or in sentences; e.g. --max-tokens 4096)"
        )
    if command in ("fsa-generate", "fsa-interactive"):
        _check_tokenizer_languages(command, argv)
    if command in ("fsa-generate", "fsa-interactive", "fsa-validate"):
        _model_overrides(command, argv)
    if command in ("fsa-generate", "fsa-validate") and not _flag_given(argv, "--path"):
        raise SystemExit(f"{command}: error: --path CHECKPOINT is required")
    if command == "fsa-validate" and not _flag_given(argv, "--task"):
        task = _checkpoint_task(_option_value(argv, "--path"))
        raise SystemExit(
            "fsa-validate: error: --task is required (fairseq-validate has no "
            "default): " + (f"the checkpoint was trained with --task {task}" if task else "e.g. --task translation")
        )


def _number(text):
    try:
        return float(text)
    except ValueError:
        return None


#: (commands, flag, test, what the value must be): fairseq takes these values and fails
#: after the model or the data loaded (a traceback), or does something else with nothing
#: said (--lr -1 exits 0 without training; --max-update -5 trains one update; a
#: --label-smoothing above 1 trains); a flag fairseq gives a list (--lr, --update-freq)
#: is checked per entry
_VALUE_RULES = (
    (("fsa-train",), "--lr", lambda x: x > 0, "> 0"),
    (("fsa-train",), "--max-update", lambda x: x >= 0 and x == int(x), "a whole number >= 0"),
    (("fsa-train",), "--max-epoch", lambda x: x >= 0 and x == int(x), "a whole number >= 0"),
    (("fsa-train",), "--update-freq", lambda x: x >= 1 and x == int(x), "a whole number >= 1"),
    (("fsa-train",), "--label-smoothing", lambda x: 0 <= x < 1, "in [0, 1)"),
    (("fsa-train", "fsa-validate", "fsa-generate"), "--max-tokens", lambda x: x >= 1, ">= 1"),
    (("fsa-train", "fsa-validate", "fsa-generate", "fsa-interactive"), "--batch-size", lambda x: x >= 1, ">= 1"),
    (("fsa-train", "fsa-validate", "fsa-generate", "fsa-interactive"), "--max-sentences", lambda x: x >= 1, ">= 1"),
    (("fsa-generate", "fsa-interactive"), "--beam", lambda x: x >= 1 and x == int(x), "a whole number >= 1"),
    (("fsa-generate", "fsa-interactive"), "--nbest", lambda x: x >= 1 and x == int(x), "a whole number >= 1"),
    (("fsa-generate", "fsa-interactive"), "--temperature", lambda x: x > 0, "> 0"),
    (("fsa-generate", "fsa-interactive"), "--sampling-topp", lambda x: x <= 1, "<= 1 (0 or below: off)"),
    (("fsa-generate", "fsa-interactive"), "--min-len", lambda x: x >= 0 and x == int(x), "a whole number >= 0"),
    (("fsa-generate", "fsa-interactive"), "--diverse-beam-groups", lambda x: x == int(x), "a whole number"),
    (("fsa-train",), "--warmup-updates", lambda x: x >= 0 and x == int(x), "a whole number >= 0"),
)


def _flag_number(argv, flag, default):
    """The number the last ``flag`` of ``argv`` gives (``default`` without one or for a
    value that is not a number: argparse reports that itself)."""
    value = _number(_option_value(argv, flag, last=True) or "")
    return default if value is None else value


def _check_combinations(command, argv):
    """Values that are fine alone and fail together, in fairseq after the model loaded (an
    AssertionError, a ValueError or a ZeroDivisionError traceback); fairseq's defaults
    where a flag is not given."""
    if command in ("fsa-generate", "fsa-interactive"):
        beam, groups = _flag_number(argv, "--beam", 5), _flag_number(argv, "--diverse-beam-groups", -1)
        if groups > 0 and beam % groups:
            raise SystemExit(
                f"{command}: error: --diverse-beam-groups {groups:g}: --beam {beam:g} must be a multiple of it"
            )
        nbest = _flag_number(argv, "--nbest", 1)
        if nbest > beam:  # the search keeps --beam hypotheses: fairseq printed fewer with nothing said
            raise SystemExit(
                f"{command}: error: --nbest {nbest:g}: at most --beam {beam:g} (the search keeps --beam hypotheses)"
            )
        min_len, a, b = (
            _flag_number(argv, f, d) for f, d in (("--min-len", 1), ("--max-len-a", 0), ("--max-len-b", 200))
        )
        if a == 0 and min_len > b:  # with --max-len-a 0 every output is at most --max-len-b long
            raise SystemExit(
                f"{command}: error: --min-len {min_len:g} is above the longest output --max-len-a {a:g} "
                f"--max-len-b {b:g} allow ({b:g})"
            )
    if command == "fsa-train" and _option_value(argv, "--lr-scheduler", last=True) == "inverse_sqrt":
        if _flag_number(argv, "--warmup-updates", 4000) == 0:
            raise SystemExit(
                "fsa-train: error: --warmup-updates 0: --lr-scheduler inverse_sqrt needs at least 1 "
                "(its decay starts from the warmup's last learning rate)"
            )


def _check_values(command, argv):
    """One line naming the flag for a value fairseq would take and then fail on, or
    misuse, after the work began (:data:`_VALUE_RULES`); and files the wrappers read or
    write that cannot be (``--input``, ``--results-path``)."""
    for commands, flag, ok, must in _VALUE_RULES:
        value = _option_value(argv, flag, last=True) if command in commands else None
        if value is None:
            continue
        listed = flag in ("--lr", "--update-freq")  # fairseq evals these (a list): a word is a NameError
        for entry in value.strip("[]() ").split(",") if listed else [value]:
            number = _number(entry)
            if number is None and not listed:
                continue  # argparse names a value of the wrong type itself
            if number is None or not ok(number):
                raise SystemExit(f"{command}: error: {flag} {value}: must be {must}")
    source = _option_value(argv, "--input", last=True) if command == "fsa-interactive" else None
    if source not in (None, "-") and (os.path.isdir(source) or not os.path.exists(source)):
        why = "is a directory" if os.path.isdir(source) else "does not exist"  # a pipe (<(zcat ...)) is read
        raise SystemExit(f"{command}: error: --input {source} {why} (a text file, or - for standard input)")
    results = _option_value(argv, "--results-path", last=True) if command == "fsa-generate" else None
    if results is not None:
        target = existing = os.path.abspath(results)
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        why = None
        if not os.path.isdir(existing):
            why = "is a file" if existing == target else f"is inside {existing}, a file"
        elif not os.access(existing, os.W_OK | os.X_OK):
            why = f"cannot be written: {existing} is not writable"
        if why is not None:
            raise SystemExit(f"{command}: error: --results-path {results} {why} (a directory, created when missing)")


def _check_user_dir(command, argv):
    """A ``--user-dir`` that fairseq cannot find (it also looks beside its own package)
    ends in fairseq's FileNotFoundError traceback: one line instead."""
    user_dir = _option_value(argv, "--user-dir")
    if user_dir is None:
        return
    import importlib.util

    fairseq_dir = os.path.dirname(os.path.dirname(importlib.util.find_spec("fairseq").origin))
    tried = (user_dir, os.path.join(fairseq_dir, "fairseq", user_dir), os.path.join(fairseq_dir, user_dir))
    if not any(os.path.exists(p) for p in tried) and not os.path.isfile(os.path.dirname(os.path.abspath(user_dir))):
        raise SystemExit(
            f"{command}: error: --user-dir {user_dir} does not exist; the fsa-* commands add "
            "the installed plugin themselves (leave --user-dir out)"
        )


def _check_tokenizer_languages(command, argv):
    """``--tokenizer moses`` reads the languages from ``-s`` / ``-t``; without them fairseq
    ends in a hydra traceback (``tokenizer.source_lang=null``)."""
    if _option_value(argv, "--tokenizer") != "moses":
        return
    missing = [flag for flag in ("-s/--source-lang", "-t/--target-lang") if not _flag_given(argv, *flag.split("/"))]
    if not missing:
        return
    data = next((a for a in argv if not a.startswith("-")), None)
    langs = (
        sorted(p[len("dict.") : -len(".txt")] for p in os.listdir(data) if p.startswith("dict.") and p.endswith(".txt"))
        if data and os.path.isdir(data)
        else []
    )
    raise SystemExit(
        f"{command}: error: --tokenizer moses needs {' and '.join(missing)} (the "
        "languages of the model, e.g. -s de -t en"
        + (f"; {data} has dictionaries for: {', '.join(langs)}" if langs else "")
        + ")"
    )


def _option_value(argv, name, last=False):
    """The value of option ``name`` in ``argv`` (its first; ``last``: its last, the one
    argparse keeps), or None."""
    found = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith(name + "="):
            found = arg.split("=", 1)[1]
        else:
            continue
        if not last:
            return found
    return found


def _checkpoint_task(path):
    """The task name saved in a checkpoint (first of a ':'-separated list), or None."""
    try:
        from fairseq_sparse_attn.compat.resume_config_check import read_checkpoint_config

        cfg = read_checkpoint_config(path.split(":")[0])
        task = cfg.get("task") if cfg is not None else None
        return task.get("_name") if task is not None else None
    except Exception:  # any unreadable checkpoint: the error message suggests an example
        return None


def _first_lines(text, limit=240):
    """The first two non-empty lines of ``text`` in one (torch: "Error(s) in loading
    state_dict for M:", then the first kind of error), cut at ``limit`` characters."""
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    said = " ".join(lines[:2])
    return said if len(said) <= limit else said[:limit] + "..."


def _restore_failure(e, argv):
    """fairseq's "Cannot load model parameters from checkpoint X" (``--restore-file`` of a
    model another ``--arch`` or other model flags built) in one line, with the first line
    of what torch said and the checkpoint's architecture."""
    said = _first_lines(e.__context__)
    path = str(e).split("checkpoint ", 1)[1].split("; please", 1)[0]
    cfg = None
    try:
        from fairseq_sparse_attn.compat.resume_config_check import saved_model_args

        cfg = saved_model_args(path)
    except Exception:  # the checkpoint loaded a moment ago; its record is only a hint
        pass
    saved = getattr(cfg, "arch", None) or getattr(cfg, "_name", None)
    asked = _option_value(argv, "--arch", last=True) or _option_value(argv, "-a", last=True)
    what = f"it holds a {saved} model and this run builds {asked}" if saved and asked and saved != asked else ""
    what = what or "its model's flags differ from this run's"
    flag = "--finetune-from-model" if _option_value(argv, "--finetune-from-model") else "--restore-file"
    return (
        f"{flag} {path}: cannot load its model parameters: {what} ({said}); "
        "train with the checkpoint's --arch and model flags, or start from another checkpoint"
    )


def _load_failure(e, argv):
    """torch's "Error(s) in loading state_dict" while fsa-generate / fsa-validate /
    fsa-interactive load ``--path``: the model these flags build (``--model-overrides`` that
    change its parameters, e.g. another output norm) is not the checkpoint's."""
    path = _option_value(argv, "--path")
    if path is None:  # not a load of --path: its traceback stays
        return None
    overrides = _option_value(argv, "--model-overrides", last=True)
    if overrides:
        what = (
            f"--model-overrides {overrides} builds a model with other parameters than the checkpoint's "
            "(override only options that keep them: the activation, the backend, head masking)"
        )
    else:
        what = "the model this command builds has other parameters than the checkpoint's"
    return f"--path {path}: cannot load its model parameters: {what} ({_first_lines(e)})"


#: fairseq exceptions that a user's flags cause, raised after the work began: (type, start
#: of the message, the one line to say instead)
_FAIRSEQ_FAILURES = (
    (
        AssertionError,
        "min_len cannot be larger than max_len",
        lambda e, argv: (
            "--min-len is above the longest output that --max-len-a / --max-len-b allow for a "
            "sentence of this data (max_len_a * source length + max_len_b): lower --min-len or raise --max-len-b"
        ),
    ),
    (Exception, "Cannot load model parameters from checkpoint", _restore_failure),
    (RuntimeError, "Error(s) in loading state_dict", _load_failure),
    (
        AssertionError,
        "--replace-unk requires a raw text dataset",
        lambda e, argv: (
            "--replace-unk copies source words, which a binarized data-bin does not keep: binarize with "
            "fairseq-preprocess --dataset-impl raw and generate with --dataset-impl raw, or leave --replace-unk out"
        ),
    ),
    (
        Exception,
        "Size of sample #",
        lambda e, argv: (
            f"{' '.join(str(e).split())} (a sentence longer than --max-source-positions / "
            "--max-target-positions in a validation or test split; or raise those limits)"
        ),
    ),
)


def _known_failure(e, argv):
    """The one line for an exception of :data:`_FAIRSEQ_FAILURES`, or None."""
    for kind, start, say in _FAIRSEQ_FAILURES:
        if type(e) is kind and str(e).startswith(start):
            return say(e, argv)
    return None


def _run(module_name, mask_heads=False, log_stream=None, checks_input=False, prepare=None):
    import importlib

    command = os.path.basename(sys.argv[0]) or "fsa"
    configure_logging(log_stream)
    argv = _pop_verbose(sys.argv[1:])
    one_line_usage_errors(command)
    _required_flags(command, argv)
    import fairseq_sparse_attn.plugin  # noqa: F401  (registers the plugin; fairseq then finds it imported)

    if _flag_given(argv, "-h", "--help"):
        sys.argv = [sys.argv[0]] + _with_user_dir(argv)
        print_help(command, module_name, argv)
        return
    if mask_heads:
        argv = with_head_masking(argv, command)
    if checks_input:  # no silent <unk> (unk_check.py)
        from fairseq_sparse_attn import unk_check
        from fairseq_sparse_attn.compat.checkpoint_record import LOADED_RECORDS

        bpe, codes = _option_value(argv, "--bpe"), _option_value(argv, "--bpe-codes")
        unk_check.install(command, bpe, codes, LOADED_RECORDS)
    sys.argv = [sys.argv[0]] + _with_user_dir(argv)
    errors = _user_errors()
    module = importlib.import_module(module_name)
    if prepare is not None:
        prepare(module)
    try:
        module.cli_main()
    except errors as e:
        if os.environ.get("FSA_TRACEBACK") == "1":
            raise
        raise SystemExit(f"{command}: error: {' '.join(str(e).split())}") from None
    except KeyboardInterrupt:
        if os.environ.get("FSA_TRACEBACK") == "1" or module_name == "fairseq_cli.train":
            raise  # training: where it stopped is worth its traceback
        print(f"{command}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except Exception as e:
        said = None if os.environ.get("FSA_TRACEBACK") == "1" else _known_failure(e, argv)
        if said is None:
            raise
        raise SystemExit(f"{command}: error: {said}") from None


# ---------------------------------------------------------------------------- --help

PARSERS = {
    "fairseq_cli.train": "get_training_parser",
    "fairseq_cli.generate": "get_generation_parser",
    "fairseq_cli.interactive": "get_interactive_generation_parser",
    "fairseq_cli.validate": "get_validation_parser",
}


def _add_wrapper_args(parser, command):
    """The flags the wrapper itself reads (removed before fairseq parses the rest)."""
    group = parser.add_argument_group(
        f"sparse attention ({command})", "flags of the fsa-* wrapper (fairseq never sees them)"
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also log the plugin's start-up lines (compat patches, user dir); same as FSA_VERBOSE=1",
    )
    if command in ("fsa-generate", "fsa-validate"):
        group.add_argument(
            "--mask-encoder-heads",
            metavar="HEADS",
            help="comma-separated 0-based encoder self-attention heads whose output is zeroed "
            "in every encoder layer (test-time ablation, Raganato et al. 2020 Table 4); passed "
            "as --model-overrides \"{'encoder_masked_heads': HEADS}\" (default: none)",
        )


def print_help(command, module_name, argv):
    """fairseq's ``--help`` as it would be after parsing: the arguments of the ``--arch``
    and ``--task`` given (fairseq's own ``--help`` exits before it adds them), the
    plugin's flags gathered in the "sparse attention" group with their choices and
    defaults (the preset's, with ``--arch``), and the wrapper's own flags."""
    from fairseq import options

    from fairseq_sparse_attn.options.cli import add_help_group

    parser = getattr(options, PARSERS[module_name])()
    parser.prog = command
    argv = [a for a in argv if a not in ("-h", "--help")]

    class _Ready(Exception):
        pass

    calls = []

    def stop_when_complete(p):  # parse_args_and_arch calls it before and after adding args
        calls.append(p)
        if len(calls) == 2:
            raise _Ready()

    known, _ = parser.parse_known_args(argv)
    arch = getattr(known, "arch", None)
    # fairseq adds the arguments of the --arch and --task given; without them (fsa-train
    # has no default --arch, fsa-validate no default --task) the help is the base parser's
    if (arch is not None or not hasattr(known, "arch")) and getattr(known, "task", "") is not None:
        try:
            options.parse_args_and_arch(parser, input_args=argv, modify_parser=stop_when_complete)
        except _Ready:
            pass
    elif getattr(known, "task", None) is not None:  # no --arch: the task's flags all the same
        _add_task_args(parser, known.task)
    if module_name == "fairseq_cli.train":
        add_help_group(parser, arch)
    _add_wrapper_args(parser, command)
    parser.print_help()


def _add_task_args(parser, task):
    """The flags of ``task`` (``--max-doc-length`` of document_translation, ``--eval-bleu``
    of translation), as fairseq adds them once it has parsed ``--arch``."""
    from fairseq.tasks import TASK_REGISTRY

    if task in TASK_REGISTRY:
        TASK_REGISTRY[task].add_args(parser.add_argument_group("Task-specific configuration"))


def print_user_dir():
    from fairseq_sparse_attn import user_dir

    parser = argparse.ArgumentParser(
        prog="fsa-user-dir",
        description="Print the directory to pass to fairseq's --user-dir (the installed "
        "fairseq_sparse_attn_plugin package, which registers the plugin when fairseq imports "
        'it), e.g.  fairseq-train DATA --user-dir "$(fsa-user-dir)" --arch '
        "rela_transformer_wmt_en_de ...  The fsa-* commands add it themselves.",
    )
    parser.parse_args()
    print(user_dir())


def train():
    _run("fairseq_cli.train")


def _results_written_whole(module):
    """fairseq opens ``--results-path``'s ``generate-SUBSET.txt`` for writing before it
    loads anything: a wrong ``--path``, an error later on or a Ctrl-C left it empty or cut
    short, the previous run's results gone.  Its ``open`` (the one in fairseq_cli.generate)
    now writes under a temporary name, renamed over the file when generation completes."""
    from fairseq_sparse_attn.writers import replaced_when_complete

    module.open = replaced_when_complete


def generate():
    _run(
        "fairseq_cli.generate",
        mask_heads=True,
        log_stream=sys.stderr,
        checks_input=True,
        prepare=_results_written_whole,
    )


def interactive():
    from fairseq_sparse_attn import interactive_input

    interactive_input.install()  # input split on \n only; a bad line is reported and skipped
    _run("fairseq_cli.interactive", log_stream=sys.stderr, checks_input=True)
    summary = interactive_input.skipped_summary()
    if summary is not None:  # the other lines are translated; the status says some are not
        raise SystemExit(summary)


def validate():
    _run("fairseq_cli.validate", mask_heads=True)
