"""Run several ``fsa-*`` command lines in one process, each as its console script runs it
(``fairseq_sparse_attn.cli.<command>()`` with ``sys.argv``), and record what each printed
(stdout and stderr), its exit status and any exception that
escaped.  For tests of commands that stop before any work: one process (one import of
fairseq) for many cases.

    python tests/error_cases.py CASES.json RESULTS.json

CASES.json: ``[[command, [arg, ...]], ...]`` (command: train, generate, interactive,
validate); RESULTS.json: ``[{"stdout", "stderr", "status", "escaped"}, ...]`` in the same order.
"""

import contextlib
import io
import json
import sys
import traceback


def run_case(command, args):
    from fairseq_sparse_attn import cli

    out, err = io.StringIO(), io.StringIO()
    status, escaped = 0, None
    sys.argv = [f"fsa-{command}", *args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            getattr(cli, command)()
        except SystemExit as e:
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
                status = 1
            else:
                status = e.code or 0
        except BaseException:  # what the console script would show as a traceback
            escaped = traceback.format_exc()
            print(escaped, file=sys.stderr)
            status = 1
    return {"stdout": out.getvalue(), "stderr": err.getvalue(), "status": status, "escaped": escaped}


def main(argv):
    cases = json.loads(open(argv[0]).read())
    results = [run_case(command, args) for command, args in cases]
    with open(argv[1], "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1:])
