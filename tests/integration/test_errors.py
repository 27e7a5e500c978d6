"""Bad input gets one line naming the file / flag and what was expected, before any work
starts, and nothing half-written is left (issue 14; the table is docs/errors.md).

Every case runs the real command (``fsa-train`` / ``fsa-generate`` / ``fsa-validate`` of this
checkout, ``data_prep/prepare_multi30k.py``).  Most fail before training, so they are
cheap; one tiny ReLA checkpoint (2 updates) is shared.
"""

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import TINY_TRAIN_ARGS  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TINY = list(TINY_TRAIN_ARGS)


def env():
    out = {k: v for k, v in os.environ.items() if k not in ("FSA_COMPAT_OFF", "FSA_TRACEBACK")}
    out.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return out


def fsa(command, *args):
    """``fsa-<command> args`` as the console script runs it, from this checkout."""
    code = f"import sys; sys.argv[0] = 'fsa-{command}'; from fairseq_sparse_attn.cli import {command}; {command}()"
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], env=env(), capture_output=True, text=True, timeout=600
    )


def one_line_error(proc, prefix, *fragments):
    """Exit status 1, no traceback, and the last line of stderr is the error."""
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(prefix), last
    for fragment in fragments:
        assert fragment in last, last
    return last


def empty(directory):
    """Nothing written (fairseq creates --save-dir before it loads anything)."""
    return not Path(directory).exists() or not any(Path(directory).iterdir())


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def databin(small_data, tmp_path):
    d = tmp_path / "data-bin"
    shutil.copytree(small_data / "data-bin", d)
    return d


@pytest.fixture(scope="module")
def rela_run(small_data, tmp_path_factory):
    """A ReLA model trained for 2 updates: checkpoint_last.pt / checkpoint_best.pt."""
    save = tmp_path_factory.mktemp("rela") / "ckpt"
    proc = fsa("train", small_data / "data-bin", "--arch", "rela_transformer_wmt_en_de", *TINY, "--save-dir", save)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (save / "train.log").write_text(proc.stdout + proc.stderr)
    return save


def test_logs_are_quiet_and_timestamped(rela_run):
    """No tensorboardX line, no warning attributed to a plugin file (hydra's deprecations
    used to name cli.py), fairseq's timestamped format; the plugin's start-up lines (compat
    patches, user dir) only with -v (tests/integration/test_cli_help.py)."""
    log = (rela_run / "train.log").read_text()
    assert "tensorboardX" not in log
    assert not re.search(r"fairseq_sparse_attn/\S+\.py:\d+: \w*Warning", log), log[-3000:]
    assert "hydra" not in log
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| INFO \| fairseq_cli\.train \| ", log, re.M)
    assert "compat patches" not in log and "has already been imported" not in log
    # (checkpoint files in the save dir: the two fairseq writes, no temporary file)
    assert sorted(p.name for p in rela_run.glob("*.pt*")) == ["checkpoint_best.pt", "checkpoint_last.pt"]


# --- data ---------------------------------------------------------------------------


def test_missing_dictionary(databin, tmp_path):
    (databin / "dict.en.txt").unlink()
    proc = fsa("train", databin, "--arch", "softmax_transformer_wmt_en_de", *TINY, "--save-dir", tmp_path / "ckpt")
    one_line_error(proc, "fsa-train: error: ", f"{databin / 'dict.en.txt'} is missing")
    assert empty(tmp_path / "ckpt")


@pytest.mark.parametrize("damage", ["truncated_bin", "overwritten_idx"])
def test_damaged_binarized_data(databin, tmp_path, damage):
    """A .bin cut in half (stock: "offset must be non-negative", no file named); an index
    with 64 bytes overwritten (stock: one update, then 22 GB and the kernel's OOM killer)."""
    if damage == "truncated_bin":
        path = databin / "train.de-en.en.bin"
        size = path.stat().st_size
        os.truncate(path, size // 2)
        expected = (f"{path} is truncated: {size // 2} bytes", f"describes {size}")
    else:
        path = databin / "train.de-en.de.idx"
        with open(path, "r+b") as f:
            f.seek(200)
            f.write(b"\xff" * 64)
        expected = (f"{path} is damaged",)
    proc = fsa("train", databin, "--arch", "softmax_transformer_wmt_en_de", *TINY, "--save-dir", tmp_path / "ckpt")
    one_line_error(proc, "fsa-train: error: ", *expected)
    assert empty(tmp_path / "ckpt")


def test_prepare_multi30k_truncated_gz(multi30k_raw, tmp_path):
    raw = tmp_path / "raw"
    shutil.copytree(multi30k_raw, raw)
    gz = raw / "train.de.gz"
    os.truncate(gz, gz.stat().st_size // 2)
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "data_prep" / "prepare_multi30k.py"),
            "--raw-dir",
            str(raw),
            "--out",
            str(out),
            "--max-train-lines",
            "300",
        ],
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    one_line_error(proc, "[multi30k] error: ", f"{gz} is truncated or not a gzip file")
    assert not [p for p in out.rglob("*") if p.is_file()]


# --- flags ----------------------------------------------------------------------------


def test_train_without_arch(small_data, tmp_path):
    proc = fsa("train", small_data / "data-bin", "--save-dir", tmp_path / "ckpt")
    one_line_error(proc, "fsa-train: error: --arch is required")
    assert not (tmp_path / "ckpt").exists()


def test_validate_without_task(small_data, rela_run):
    proc = fsa("validate", small_data / "data-bin", "--path", rela_run / "checkpoint_last.pt", "--batch-size", "8")
    one_line_error(
        proc, "fsa-validate: error: --task is required", "the checkpoint was trained with --task translation"
    )


@pytest.mark.parametrize(
    "flags,message",
    [
        (
            ["--arch", "fixed_pattern_transformer_wmt_en_de", "--encoder-fixed-patterns", "current,bogus"],
            "--encoder-fixed-patterns current,bogus: unknown fixed attention "
            "pattern 'bogus'; valid names: current, previous",
        ),
        (
            ["--arch", "rela_transformer_wmt_en_de", "--attn-key-block-size", "16", "--attention-dropout", "0.1"],
            "--attn-key-block-size 16 needs --attention-dropout 0",
        ),
        (
            [
                "--arch",
                "fixed_pattern_word_transformer_wmt_en_de",
                "--encoder-attention-heads",
                "8",
                "--encoder-subword-style",
                "sentencepiece",
            ],
            "--encoder-subword-style sentencepiece, but the source dictionary has "
            "no '\u2581' word-start pieces (it has subword-nmt '@@' pieces: use "
            "--encoder-subword-style bpe)",
        ),
    ],
)
def test_model_flags_fail_before_training(small_data, tmp_path, flags, message):
    proc = fsa("train", small_data / "data-bin", *TINY, *flags, "--save-dir", tmp_path / "ckpt")
    one_line_error(proc, "fsa-train: error: ", message)
    assert "begin training" not in proc.stdout + proc.stderr
    assert empty(tmp_path / "ckpt")


def test_mask_encoder_heads_out_of_range(small_data, rela_run):
    proc = fsa(
        "generate",
        small_data / "data-bin",
        "--path",
        rela_run / "checkpoint_last.pt",
        "--mask-encoder-heads",
        "0,9",
        "--max-tokens",
        "2000",
    )
    one_line_error(
        proc,
        "fsa-generate: error: ",
        "--mask-encoder-heads 0,9: head 9 is out of range, the encoder has 2 heads per layer (0..1)",
    )
    assert "H-" not in proc.stdout


def test_rhe_model_with_too_few_syntax_inputs():
    """An LPEA+RHE model (needs src_dep and src_rp) generated with --task
    parse_annotated_translation --syntax-inputs dep: the message names what is missing and
    the fix, not the task the user already passed (the fixture checkpoint of
    tests/fixtures/checkpoints and its parsed test split)."""
    fixtures = REPO / "tests" / "fixtures" / "checkpoints"
    proc = fsa(
        "generate",
        fixtures / "data-bin",
        "--path",
        fixtures / "lpea_rhe.pt",
        "--task",
        "parse_annotated_translation",
        "-s",
        "en",
        "-t",
        "de",
        "--gen-subset",
        "test",
        "--syntax-inputs",
        "dep",
        "--batch-size",
        "6",
    )
    line = one_line_error(
        proc,
        "fsa-generate: error: ",
        "needs src_dep, src_rp",
        "--syntax-inputs dep builds src_dep only",
        "use --syntax-inputs dep,rp",
    )
    assert "--task parse_annotated_translation" not in line
    assert "H-" not in proc.stdout
    # with both inputs the same command translates
    proc = fsa(
        "generate",
        fixtures / "data-bin",
        "--path",
        fixtures / "lpea_rhe.pt",
        "--task",
        "parse_annotated_translation",
        "-s",
        "en",
        "-t",
        "de",
        "--gen-subset",
        "test",
        "--syntax-inputs",
        "dep,rp",
        "--batch-size",
        "6",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("\nH-") + proc.stdout.startswith("H-") == 6


# --- checkpoints ---------------------------------------------------------------------


def test_resume_with_other_attention_flags(small_data, rela_run, tmp_path):
    save = tmp_path / "ckpt"
    shutil.copytree(rela_run, save)
    before = sha(save / "checkpoint_last.pt")
    args = [
        small_data / "data-bin",
        "--arch",
        "rela_transformer_wmt_en_de",
        *TINY,
        "--save-dir",
        save,
        "--attn-activation",
        "sparsemax",
    ]
    args[args.index("--max-update") + 1] = "3"
    proc = fsa("train", *args)
    line = one_line_error(
        proc,
        "fsa-train: error: ",
        f"{save / 'checkpoint_last.pt'} was trained with other attention options",
        "--attn-activation: checkpoint 'relu', given 'sparsemax'",
        "--allow-attention-change",
    )
    assert "begin training" not in proc.stdout
    assert sha(save / "checkpoint_last.pt") == before and not list(save.glob("*.tmp")), line
    # the explicit override resumes with the new flags
    proc = fsa("train", *args, "--allow-attention-change")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "(epoch 1 @ 2 updates)" in proc.stdout and "num_updates 3" in proc.stdout


def test_truncated_checkpoint_in_generate(small_data, rela_run, tmp_path):
    path = tmp_path / "model.pt"
    data = (rela_run / "checkpoint_best.pt").read_bytes()
    path.write_bytes(data[: len(data) // 3])
    proc = fsa("generate", small_data / "data-bin", "--path", path, "--max-tokens", "2000")
    one_line_error(proc, "fsa-generate: error: ", f"{path} is truncated or not a torch checkpoint")


def test_restart_with_no_loadable_checkpoint(small_data, rela_run, tmp_path):
    save = tmp_path / "ckpt"
    shutil.copytree(rela_run, save)
    for name in ("checkpoint_last.pt", "checkpoint_best.pt"):
        os.truncate(save / name, 1000)
    proc = fsa("train", small_data / "data-bin", "--arch", "rela_transformer_wmt_en_de", *TINY, "--save-dir", save)
    one_line_error(
        proc,
        "fsa-train: error: ",
        f"{save / 'checkpoint_last.pt'} is truncated",
        f"no other checkpoint in {save} loads",
    )
    assert sorted(p.name for p in save.glob("*.pt*")) == ["checkpoint_best.pt", "checkpoint_last.pt"]
