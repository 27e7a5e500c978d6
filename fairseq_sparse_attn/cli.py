"""Wrapper commands that run fairseq's CLIs with ``--user-dir`` set to the installed
plugin, so it can be used from any directory:

    fsa-train data-bin --arch rela_transformer_wmt_en_de ...   ==   fairseq-train --user-dir <pkg> ...
    fsa-user-dir                                                prints <pkg>

``fsa-generate`` and ``fsa-validate`` also take ``--mask-encoder-heads 0,7``: the encoder
self-attention heads to disable in every layer (Raganato et al. 2020, Table 4), passed to
the model as ``--model-overrides "{'encoder_masked_heads': '0,7'}"`` (merged with any
``--model-overrides`` given).
"""

import ast
import sys


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
        raise SystemExit(f"--mask-encoder-heads: {e}")
    argv, overrides = _pop_option(argv, "--model-overrides")
    merged = ast.literal_eval(overrides) if overrides else {}
    if not isinstance(merged, dict):
        raise SystemExit(f"--model-overrides must be a Python dict literal, got {overrides!r}")
    merged["encoder_masked_heads"] = heads
    return argv + ["--model-overrides", repr(merged)]


def _run(module_name, mask_heads=False):
    import importlib

    argv = sys.argv[1:]
    if mask_heads:
        argv = with_head_masking(argv)
    sys.argv = [sys.argv[0]] + _with_user_dir(argv)
    importlib.import_module(module_name).cli_main()


def print_user_dir():
    from fairseq_sparse_attn import user_dir

    print(user_dir())


def train():
    _run("fairseq_cli.train")


def generate():
    _run("fairseq_cli.generate", mask_heads=True)


def interactive():
    _run("fairseq_cli.interactive")


def validate():
    _run("fairseq_cli.validate", mask_heads=True)
