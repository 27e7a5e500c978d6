"""Every error line of the ``fsa-*`` commands comes first (issue 34): the error cases of
docs/errors.md that stop before any work, through the real commands, several cases per
process (tests/error_cases.py).  For each: the error is the first line of stderr that is
not a log line, it starts with ``fsa-<command>: error:`` and holds the row's message, and
there is no traceback and no usage block (in stdout or stderr).  The
message of each case is also in docs/errors.md, so the table and this test cannot drift
apart."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import TINY_TRAIN_ARGS  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "checkpoints"
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| (DEBUG|INFO|WARNING) \| ")
USAGE = re.compile(r"^usage: ", re.M)

TRAIN = ["--arch", "rela_transformer_wmt_en_de", *TINY_TRAIN_ARGS]


def cases(data_bin, tmp):
    """(command, args, the message of its docs/errors.md row)."""
    notes = tmp / "notes.txt"
    notes.write_text("not a directory\n")
    truncated = tmp / "model.pt"
    truncated.write_bytes((FIXTURES / "rela_g.pt").read_bytes()[:4096])
    ckpt = tmp / "ckpt"
    ckpt.mkdir(exist_ok=True)
    d, f, model = str(data_bin), str(FIXTURES / "data-bin"), str(FIXTURES / "rela_g.pt")
    no_batch = [a for a in TRAIN if a not in ("--max-tokens", "1000")]
    no_optimizer = [a for a in TRAIN if a not in ("--optimizer", "adam")]

    def train(*extra, data=d, base=TRAIN):  # a save dir of its own: a case that trained must not hide the next
        save = tmp / f"save{len(saves)}"
        saves.append(save)
        return ["train", [data, *base, "--save-dir", str(save), *extra]]

    saves = []
    out = [
        (*train(base=no_batch), "--max-tokens N or --batch-size N is required"),
        (*train(base=no_optimizer), "--optimizer is required (fairseq has no default)"),
        (*train(data="/nonexistent/data-bin"), "does not exist: expected the output folder of fairseq-preprocess"),
        (*train("--attn-activation", "relu6"), "argument --attn-activation: invalid choice: 'relu6'"),
        ("train", [d, "--max-tokens", "1000"], "--arch is required"),
        (
            *train("--attn-activation", "relu_scaled", "--relu-scale-gamma", "-1"),
            "--relu-scale-gamma -1.0: must be > 0",
        ),
        (*train("--attn-activation", "entmax_bisect", "--entmax-alpha", "1"), "--entmax-alpha 1.0: must be > 1"),
        (
            *train("--attn-activation", "entmax_bisect", "--entmax-alpha-learned", "--entmax-alpha", "2"),
            "when learned per head, got 2.0",
        ),
        (
            *train("--attn-activation", "entmax_bisect", "--entmax-bisect-iters", "0"),
            "--entmax-bisect-iters 0: must be >= 1",
        ),
        (*train("--encoder-attention-heads", "0"), "--encoder-attention-heads 0: must be >= 1"),
        (
            *train("--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-attention-heads", "3"),
            "--encoder-embed-dim 16 is not divisible by --encoder-attention-heads 3",
        ),
        (*train("--attention-dropout", "1.5"), "--attention-dropout 1.5: must be in [0, 1]"),
        (*train("--dropout", "2"), "--dropout 2.0: must be in [0, 1]"),
        (*train("--encoder-rel-pos-k", "-1"), "--encoder-rel-pos-k -1: must be >= 0"),
        (*train("--attn-key-block-size", "-16"), "--attn-key-block-size -16: must be >= 0"),
        (
            *train("--attn-activation", "leaky_relu", "--leaky-relu-slope", "-0.1"),
            "--leaky-relu-slope -0.1: must be in [0, 1)",
        ),
        (*train("--encoder-embed-dim", "0"), "--encoder-embed-dim 0: must be >= 1"),
        (*train("--lr", "-1"), "--lr -1: must be > 0"),
        ("generate", [f, "--path", model, "--beam", "0"], "--beam 0: must be a whole number >= 1"),
        (
            *train("--fp16", "--cpu"),
            "--fp16 trains on a CUDA GPU (fairseq's FP16Optimizer, flat fp32 master weights), and ",
        ),
        (*train("--rhe", "--rhe-gate", "1.5"), "--rhe-gate must be 'dynamic' or a number in (0, 1], got 1.5"),
        (*train("--decoder-embed-dim", "64"), "--share-all-embeddings needs --encoder-embed-dim"),
        ("train", [d, *TRAIN, "--save-dir", str(notes)], "is a file, not a directory"),
        (
            *train("--restore-file", "nope_best.pt"),
            "(a relative path is taken from the current directory, not --save-dir)",
        ),
        (*train("--finetune-from-model", "nope_pretrained.pt"), "pretrained.pt does not exist"),
        ("generate", [f], "--path CHECKPOINT is required"),
        ("generate", [f, "--path", str(ckpt)], "is a directory, not a checkpoint file"),
        ("generate", [f, "--path", model, "--mask-encoder-heads", "first"], "--mask-encoder-heads first"),
        (
            "generate",
            [f, "--path", model, "--model-overrides", "[1]"],
            "--model-overrides must be a Python dict literal",
        ),
        ("generate", [f, "--path", model, "--mask-encoder-heads", "0,9"], "head 9 is out of range"),
        ("generate", [f, "--path", model, "--gen-subset", "valid"], "split 'valid' not found in"),
        ("generate", [f, "--path", str(truncated)], "is truncated or not a torch checkpoint"),
        ("generate", [f, "--path", model, "--beam", "four"], "invalid int value: 'four'"),
        ("interactive", [f, "--path", model, "--tokenizer", "moses"], "--tokenizer moses needs"),
        ("validate", [f, "--path", model, "--max-tokens", "100"], "--task is required"),
        ("validate", [f, "--path", model, "--task", "translation"], "--max-tokens N or --batch-size N is required"),
        (
            "validate",
            [f, "--path", str(ckpt / "checkpoint_9.pt"), "--task", "translation", "--max-tokens", "100"],
            "does not exist: expected a checkpoint file written by fsa-train / fairseq-train",
        ),
    ]
    return out


def first_other_line(output):
    """The first line that is not a log line."""
    for line in output.splitlines():
        if line.strip() and not LOG_LINE.match(line):
            return line
    return None


def env():
    out = {k: v for k, v in os.environ.items() if k not in ("FSA_COMPAT_OFF", "FSA_TRACEBACK", "FSA_VERBOSE")}
    out.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return out


@pytest.fixture(scope="module")
def tiny_bin(tmp_path_factory):
    """A joined-dictionary data-bin of the fixtures' 6 raw sentences (train = valid = test)."""
    out = tmp_path_factory.mktemp("tiny") / "data-bin"
    raw = str(FIXTURES / "raw" / "test")
    subprocess.run(
        [sys.executable, "-m", "fairseq_cli.preprocess", "-s", "de", "-t", "en", "--trainpref", raw, "--validpref",
         raw, "--joined-dictionary", "--destdir", str(out), "--workers", "1"],
        env=env(), check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def results(tiny_bin, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("errors_first")
    todo = cases(tiny_bin, tmp)
    (tmp / "cases.json").write_text(json.dumps([[c, a] for c, a, _ in todo]))
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "error_cases.py"), tmp / "cases.json", tmp / "results.json"],
        env=env(),
        cwd=tmp,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for save in tmp.glob("save*"):
        shutil.rmtree(save)
    return list(zip(todo, json.loads((tmp / "results.json").read_text())))


def test_every_error_comes_first_as_one_line(results):
    """Each case: nonzero status, no traceback, no usage block, and the first line that is
    not a log line is ``fsa-<command>: error: ...`` with the row's message."""
    failures = []
    for (command, args, message), got in results:
        output = got["stdout"] + got["stderr"]
        first = first_other_line(got["stderr"])
        problems = []
        if got["status"] == 0:
            problems.append("exit status 0")
        if got["escaped"] or "Traceback" in output:
            problems.append("a traceback")
        if USAGE.search(output):
            problems.append("a usage block")
        if first is None or not first.startswith(f"fsa-{command}: error: ") or message not in first:
            problems.append(f"first line that is not a log line: {first!r}")
        if problems:
            failures.append(f"fsa-{command} {' '.join(args[1:])}: {'; '.join(problems)}\n{output[-1500:]}")
    assert not failures, "\n\n".join(failures)


def test_every_case_is_a_row_of_the_errors_table(tmp_path):
    table = (REPO / "docs" / "errors.md").read_text()
    missing = [message for _, _, message in cases(tmp_path / "data-bin", tmp_path) if message not in table]
    assert not missing, missing


def test_configuration_dump_only_when_verbose(tiny_bin, tmp_path):
    """fairseq's configuration dump (one ~6,000-character log line) is left out of the fsa-*
    commands, and shown with -v."""
    todo = [
        # 6 sentences: fairseq's own batching (kept for training) drops a batch smaller than
        # --required-batch-size-multiple, which would leave it nothing to train on
        ["train", [str(tiny_bin), *TRAIN, "--required-batch-size-multiple", "1", "--save-dir", str(tmp_path / "a")]],
        [
            "train",
            [str(tiny_bin), *TRAIN, "--required-batch-size-multiple", "1", "--save-dir", str(tmp_path / "b"), "-v"],
        ],
    ]
    (tmp_path / "cases.json").write_text(json.dumps(todo))
    subprocess.run(
        [sys.executable, str(REPO / "tests" / "error_cases.py"), tmp_path / "cases.json", tmp_path / "results.json"],
        env=env(),
        check=True,
        timeout=600,
    )
    quiet, verbose = json.loads((tmp_path / "results.json").read_text())
    assert quiet["status"] == 0 and verbose["status"] == 0, quiet["stderr"][-2000:]
    assert "'common': {" not in quiet["stdout"] + quiet["stderr"], quiet["stdout"][-2000:]
    assert "'common': {" in verbose["stdout"]
