"""Wrapper commands that run fairseq's CLIs with ``--user-dir`` set to the installed
plugin, so it can be used from any directory:

    fsa-train data-bin --arch rela_transformer_wmt_en_de ...   ==   fairseq-train --user-dir <pkg> ...
    fsa-user-dir                                                prints <pkg>
"""

import sys


def _with_user_dir(argv):
    from fairseq_sparse_attn import user_dir

    if any(a == "--user-dir" or a.startswith("--user-dir=") for a in argv):
        return argv
    return argv + ["--user-dir", user_dir()]


def _run(module_name):
    import importlib

    sys.argv = [sys.argv[0]] + _with_user_dir(sys.argv[1:])
    importlib.import_module(module_name).cli_main()


def print_user_dir():
    from fairseq_sparse_attn import user_dir

    print(user_dir())


def train():
    _run("fairseq_cli.train")


def generate():
    _run("fairseq_cli.generate")


def interactive():
    _run("fairseq_cli.interactive")


def validate():
    _run("fairseq_cli.validate")
