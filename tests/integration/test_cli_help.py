"""The fsa-* commands' --help lists the plugin's flags, and the commands are quiet by
default: the compat patch list and fairseq's "--user-dir ... has already been imported"
only with -v / FSA_VERBOSE=1; fsa-user-dir --help is help.  Each command runs as its console script does, from this
checkout."""

import os
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from fairseq_sparse_attn.options import HELP_GROUP, OPTION_FIELDS, PluginOptions

REPO = Path(__file__).resolve().parents[2]


ENTRY = {
    "train": "train",
    "generate": "generate",
    "validate": "validate",
    "interactive": "interactive",
    "user-dir": "print_user_dir",
}  # setup.py's console scripts


def fsa(command, *args, **env):
    code = (
        f"import sys; sys.argv[0] = 'fsa-{command}'; "
        f"from fairseq_sparse_attn.cli import {ENTRY[command]}; {ENTRY[command]}()"
    )
    environ = dict(
        os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1", **env
    )
    if "FSA_VERBOSE" not in env:
        environ.pop("FSA_VERBOSE", None)
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], env=environ, capture_output=True, text=True, timeout=600
    )


def group(help_text, title):
    """The lines of one argument group of argparse's help (title line to the next title)."""
    lines = help_text.splitlines()
    start = lines.index(title + ":")
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"^\S.*:$", lines[i])), len(lines))
    return "\n".join(lines[start:end])


def entries(group_text):
    """{--flag: its help text (joined lines)} of a help group."""
    out, flag = {}, None
    for line in group_text.splitlines()[1:]:
        m = re.match(r"^  (?:-\w, )?(--[\w-]+)(?: \S+)?(?:\s{2,}(.*))?$", line)
        if m:
            flag = m.group(1)
            out[flag] = m.group(2) or ""
        elif flag and line.startswith(" " * 10):
            out[flag] += " " + line.strip()
    return {k: " ".join(v.split()) for k, v in out.items()}


def quiet(proc):
    log = proc.stdout + proc.stderr  # fsa-train logs to stdout, as fairseq-train
    assert "fairseq_sparse_attn compat patches:" not in log, log[-2000:]
    assert "has already been imported" not in log, log[-2000:]
    assert "Warning" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def train_help_rela():
    proc = fsa("train", "--arch", "rela_transformer_wmt_en_de", "--help")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_train_help_with_arch_lists_every_plugin_option_with_the_presets_defaults(train_help_rela):
    text = train_help_rela.stdout
    flags = entries(group(text, HELP_GROUP))
    assert set(flags) == {"--" + name.replace("_", "-") for name in OPTION_FIELDS}
    # the preset's defaults (rela_transformer_wmt_en_de: ReLU + gated RMSNorm), read from
    # the architecture function itself
    import argparse

    from fairseq.models import ARCH_CONFIG_REGISTRY

    import fairseq_sparse_attn.plugin  # noqa: F401

    filled = argparse.Namespace()
    ARCH_CONFIG_REGISTRY["rela_transformer_wmt_en_de"](filled)
    assert filled.attn_activation == "relu"
    assert flags["--attn-activation"].endswith("[default: relu]")
    assert flags["--attn-output-norm"].endswith(f"[default: {filled.attn_output_norm}]")
    assert flags["--attn-init"].endswith("[default: fairseq]")
    # choices: listed (here not in the help sentence itself)
    assert "[choices: token, word; default: token]" in flags["--encoder-fixed-pattern-unit"]
    assert "[choices: none, dea, lpea; default: none]" in flags["--encoder-syntax-attention"]
    for name in ("softmax", "relu", "sparsemax", "entmax15"):
        assert name in flags["--cross-attn-activation"]
    # the model's own flags are still listed by fairseq, the plugin's only once
    assert "--encoder-layers" in group(text, "Model-specific configuration")
    assert text.count("--attn-activation NAME\n") == 1
    quiet(train_help_rela)


def test_train_help_without_arch_lists_the_plugin_options_with_their_defaults():
    proc = fsa("train", "--help")
    assert proc.returncode == 0, proc.stderr[-3000:]
    flags = entries(group(proc.stdout, HELP_GROUP))
    assert set(flags) == {"--" + name.replace("_", "-") for name in OPTION_FIELDS}
    defaults = {f.name: f.default for f in fields(PluginOptions)}
    assert flags["--attn-activation"].endswith(f"[default: {defaults['attn_activation']}]")
    assert flags["--entmax-alpha"].endswith(f"[default: {defaults['entmax_alpha']}]")
    assert "(default 1.5)" not in flags["--entmax-alpha"]  # said once
    assert "`fsa-train --arch NAME --help`" in " ".join(group(proc.stdout, HELP_GROUP).split())
    quiet(proc)


@pytest.mark.parametrize(
    "task, flags",
    [
        ("document_translation", ["--max-doc-length"]),
        ("parse_annotated_translation", ["--parse-dir", "--syntax-inputs"]),
        ("translation", ["--eval-bleu"]),
    ],
)
def test_train_help_without_arch_lists_the_task_s_flags(task, flags):
    """fairseq adds a task's flags with the model's, after --arch: `fsa-train --task
    document_translation --help` did not list --max-doc-length, which flags.md names."""
    proc = fsa("train", "--task", task, "--help")
    assert proc.returncode == 0, proc.stderr[-3000:]
    listed = entries(group(proc.stdout, "Task-specific configuration"))
    assert set(flags) <= set(listed), sorted(listed)


def test_train_help_with_a_stock_arch_has_no_plugin_group():
    proc = fsa("train", "--arch", "transformer", "--help")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"\n{HELP_GROUP}:\n" not in proc.stdout
    assert "--attn-activation" not in proc.stdout


def test_generate_help_lists_the_generate_time_flags():
    proc = fsa("generate", "--help")
    assert proc.returncode == 0, proc.stderr[-3000:]
    flags = entries(group(proc.stdout, f"{HELP_GROUP} (fsa-generate)"))
    assert set(flags) == {"--mask-encoder-heads", "--verbose"}
    assert "encoder_masked_heads" in flags["--mask-encoder-heads"]
    assert "--source-lang SOURCE_LANG, -s SOURCE_LANG" in proc.stdout  # the task's flags, added after parsing
    quiet(proc)


@pytest.mark.parametrize(
    "command, flags", [("validate", {"--mask-encoder-heads", "--verbose"}), ("interactive", {"--verbose"})]
)
def test_validate_and_interactive_help(command, flags):
    """fsa-validate has no default --task and fsa-interactive reads stdin: both still
    answer --help (with the wrapper's flags)."""
    proc = fsa(command, "--help")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert set(entries(group(proc.stdout, f"{HELP_GROUP} (fsa-{command})"))) == flags
    quiet(proc)


def test_user_dir_help_is_help_and_plain_call_is_the_path():
    proc = fsa("user-dir", "--help")
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: fsa-user-dir")
    assert "--user-dir" in proc.stdout
    proc = fsa("user-dir")
    assert proc.returncode == 0
    assert proc.stdout.strip() == str(REPO / "fairseq_sparse_attn_plugin")


def test_start_up_lines_only_when_verbose():
    for args, env in ((("-v",), {}), ((), {"FSA_VERBOSE": "1"})):
        proc = fsa("train", *args, "--help", **env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        log = proc.stdout + proc.stderr  # fsa-train logs to stdout, as fairseq-train
        assert re.search(
            r"\| INFO \| fairseq_sparse_attn\.compat \| fairseq_sparse_attn compat "
            r"patches: quiet_logs, .*pin_memory",
            log,
        ), log[-2000:]

    # fairseq's notice for a --user-dir whose package is imported (the fairseq_sparse_attn
    # folder itself, which the wrapper has imported): only when verbose
    folder = str(REPO / "fairseq_sparse_attn")
    quiet(fsa("train", "--user-dir", folder, "--help"))
    proc = fsa("train", "-v", "--user-dir", folder, "--help")
    assert f"--user-dir={folder} has already been imported" in proc.stdout + proc.stderr
