"""What a new user meets (issue 34), with the real commands of this checkout on the
300-pair Multi30k slice: no silent ``<unk>`` (the BPE codes recorded in the checkpoint,
the warnings of ``fsa-interactive`` / ``fsa-generate``).  The checks in this process:
tests/unit/test_unk_check.py."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import TINY_TRAIN_ARGS  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def env():
    out = {k: v for k, v in os.environ.items() if k not in ("FSA_COMPAT_OFF", "FSA_TRACEBACK", "FSA_VERBOSE")}
    out.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return out


def fsa(command, *args, stdin=None):
    code = f"import sys; sys.argv[0] = 'fsa-{command}'\nfrom fairseq_sparse_attn.cli import {command}; {command}()"
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        env=env(),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,
    )


def warnings_of(proc, command):
    return [line for line in proc.stderr.splitlines() if line.startswith(f"{command}: warning: ")]


@pytest.fixture(scope="module")
def model(small_data, tmp_path_factory):
    """A ReLA-g model trained for 2 updates on BPE input (codes in small_data/bpe/codes)."""
    save = tmp_path_factory.mktemp("newuser") / "ckpt"
    proc = fsa(
        "train", small_data / "data-bin", "--arch", "rela_transformer_wmt_en_de", *TINY_TRAIN_ARGS, "--save-dir", save
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return save / "checkpoint_last.pt"


def test_checkpoint_records_the_bpe_codes(small_data, model):
    codes = small_data / "bpe" / "codes"
    record = torch.load(model, map_location="cpu", weights_only=False)["fsa_record"]
    assert record["bpe"] == {"path": str(codes.resolve()), "sha256": hashlib.sha256(codes.read_bytes()).hexdigest()}


def test_interactive_without_bpe_warns_before_and_per_input(small_data, model, tmp_path):
    """Without --bpe: one line before the first translation naming the codes, and one per input
    line with more than a third of its words <unk> (not for one that fits)."""
    codes = str((small_data / "bpe" / "codes").resolve())
    known = " ".join((small_data / "data-bin" / "dict.de.txt").read_text().split()[0:8:2][:3])
    text = f"Ein Hundexyz läuftqq Wiesenzzz Baumkkk .\n{known}\n"
    base = [small_data / "data-bin", "-s", "de", "-t", "en", "--path", model, "--beam", "1"]
    proc = fsa("interactive", *base, stdin=text)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warned = warnings_of(proc, "fsa-interactive")
    assert len(warned) == 2, proc.stderr
    assert "was trained on BPE input" in warned[0] and f"--bpe-codes {codes}" in warned[0]
    assert warned[1].startswith("fsa-interactive: warning: input line 1: 4 of its 6 words map to <unk>")
    assert "Hundexyz" in warned[1] and "no --bpe/--bpe-codes given" in warned[1]
    assert proc.stderr.index(warned[0]) < proc.stderr.index(warned[1])

    other = tmp_path / "codes"
    other.write_text("#version: 0.2\ne n\n")
    proc = fsa("interactive", *base, "--bpe", "subword_nmt", "--bpe-codes", other, stdin=text)
    warned = warnings_of(proc, "fsa-interactive")
    assert warned and f"--bpe-codes {other} is not the codes file" in warned[0] and codes in warned[0], proc.stderr

    proc = fsa("interactive", *base, "--bpe", "subword_nmt", "--bpe-codes", codes, stdin=f"{known}\n")
    assert proc.returncode == 0 and warnings_of(proc, "fsa-interactive") == [], proc.stderr


def test_generate_warns_on_a_data_bin_of_unknown_words(small_data, model, tmp_path):
    """A test split binarized without BPE (most words <unk>): fsa-generate names the first
    such sentence, once."""
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "test.de").write_text("Zweiundzwanzig Schwarzwälder Kirschtorten .\nDonaudampfschiff Kapitän .\n")
    (raw / "test.en").write_text("a b .\nc d .\n")
    binned = tmp_path / "bin"
    prep = subprocess.run(
        [sys.executable, "-m", "fairseq_cli.preprocess", "-s", "de", "-t", "en", "--testpref", raw / "test",
         "--srcdict", small_data / "data-bin" / "dict.de.txt", "--tgtdict", small_data / "data-bin" / "dict.en.txt",
         "--destdir", binned, "--workers", "1"],
        env=env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert prep.returncode == 0, prep.stderr[-2000:]
    proc = fsa("generate", binned, "--path", model, "--beam", "1", "--max-len-b", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    warned = warnings_of(proc, "fsa-generate")
    assert len(warned) == 1, proc.stderr
    assert "words map to <unk>" in warned[0] and "later sentences are not checked" in warned[0]


DEMO_STEPS = """
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("demo", sys.argv[1])
demo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(demo)
demo.quiet_fairseq()
fixtures, out = Path(sys.argv[2]), Path(sys.argv[3])
panels = []
for name in ("softmax", "rela_g"):
    model, task = demo.load(fixtures / f"{name}.pt", fixtures / "data-bin")
    demo.attention_statistics(model, task)
    panels.append((name, *demo.cross_attention_of(model, task, 1)))
demo.heatmap(panels, out / "cross_attention_heatmap.png")
from fairseq_sparse_attn.tools.learning_curves import write_curves
write_curves({"softmax": [{"num_updates": 1, "loss": 3.0}, {"num_updates": 2, "loss": 2.0}]}, out / "curves", seed=1, title="t")
print("done")
"""


def test_demo_steps_after_training_print_no_debug_lines(tmp_path):
    """The demo's in-process steps (loading both models, statistics, heatmap, curves) on the
    fixture checkpoints: nothing on stderr (the demo ended with 7 stray DEBUG lines: the
    compat patch list and matplotlib's start-up)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            DEMO_STEPS,
            REPO / "scripts" / "demo.py",
            REPO / "tests" / "fixtures" / "checkpoints",
            tmp_path,
        ],
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr[-3000:]
    assert "DEBUG" not in proc.stderr, proc.stderr
    assert (tmp_path / "cross_attention_heatmap.png").exists()
