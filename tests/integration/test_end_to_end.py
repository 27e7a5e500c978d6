"""Real runs, small: fairseq-train -> fairseq-generate subprocesses with --user-dir on a
Multi30k slice, sacreBLEU on detokenized output; checkpoint loading with torch >= 2.6 in
generate / validate / interactive / hub_utils; divergence handling; bad input."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import model_size_flags

REPO = Path(__file__).resolve().parents[2]
USER_DIR = str(REPO / "fairseq_sparse_attn")

TINY = [
    *model_size_flags(layers=2, dim=64, ffn=256, heads=4),
    "--share-all-embeddings",
    "--dropout",
    "0.1",
]
CONFIGS = {
    "softmax": ["--arch", "softmax_transformer_wmt_en_de"],
    "rela_g": ["--arch", "rela_transformer_wmt_en_de"],
    "sparsemax": ["--arch", "sparsemax_transformer_wmt_en_de"],
    "entmax15": ["--arch", "entmax15_transformer_wmt_en_de"],
}
UPDATES = int(os.environ.get("FSA_E2E_UPDATES", 300))


def run(cmd, **kw):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    return proc


def train(data, name, save_dir, extra=(), updates=UPDATES):
    return run(
        [
            sys.executable,
            "-m",
            "fairseq_cli.train",
            data / "data-bin",
            "--user-dir",
            USER_DIR,
            *CONFIGS.get(name, []),
            *TINY,
            "--optimizer",
            "adam",
            "--adam-betas",
            "(0.9,0.98)",
            "--lr",
            "3e-3",
            "--lr-scheduler",
            "inverse_sqrt",
            "--warmup-updates",
            "60",
            "--criterion",
            "label_smoothed_cross_entropy",
            "--label-smoothing",
            "0.1",
            "--max-tokens",
            "2048",
            "--max-update",
            str(updates),
            "--save-dir",
            save_dir,
            "--no-epoch-checkpoints",
            "--num-workers",
            "0",
            "--seed",
            "1",
            "--validate-interval-updates",
            str(updates),
            "--log-format",
            "simple",
            *extra,
        ]
    )


def generate_and_score(data, checkpoint, extra=()):
    import sacrebleu

    proc = run(
        [
            sys.executable,
            "-m",
            "fairseq_cli.generate",
            data / "data-bin",
            "--user-dir",
            USER_DIR,
            "--path",
            checkpoint,
            "--gen-subset",
            "test",
            "--beam",
            "2",
            "--batch-size",
            "128",
            "--max-len-a",
            "1.2",
            "--max-len-b",
            "10",
            "--remove-bpe",
            "--tokenizer",
            "moses",
            "--source-lang",
            "de",
            "--target-lang",
            "en",
            *extra,
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    hyps = {}
    for line in proc.stdout.splitlines():
        if line.startswith("D-"):
            idx, _, hyp = line[2:].split("\t", 2)
            hyps[int(idx)] = hyp
    refs = (data / "raw" / "test.en").read_text().splitlines()
    assert len(hyps) == len(refs) == 1000
    bleu = sacrebleu.corpus_bleu([hyps[i] for i in range(len(refs))], [refs])
    return bleu, proc.stdout


@pytest.mark.parametrize("name", list(CONFIGS))
def test_train_generate_bleu(data, name, tmp_path):
    proc = train(data, name, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    valid_loss = float(re.findall(r"valid on 'valid' subset \| loss ([\d.]+)", log)[-1])
    assert valid_loss < 9.0, f"{name}: validation loss {valid_loss} after {UPDATES} updates"
    extra = ["--print-alignment"] if name == "rela_g" else []
    bleu, out = generate_and_score(data, tmp_path / "checkpoint_best.pt", extra)
    print(f"{name}: {bleu} (valid loss {valid_loss})")
    assert bleu.score > 0, f"{name}: {bleu}"
    if name == "rela_g":
        aligns = [line for line in out.splitlines() if line.startswith("A-")]
        assert len(aligns) == 1000 and re.match(r"A-\d+\t(\d+-\d+ ?)+$", aligns[0])


@pytest.mark.kernels
def test_the_triton_backend_trains_as_the_materialized_one_with_update_freq(data, tmp_path):
    """fairseq-train's own loop (its trainer, fp32 Adam, --update-freq 2, so every
    parameter's gradient is accumulated over two backwards) on the fused kernels (Triton's
    interpreter on a CPU; the gated norm's two parameter gradients come out of one op as
    one tensor) logs the same losses and gradient norms as on the materialized backend."""
    logs = {}
    for backend in ("triton", "materialized"):
        proc = run(
            [
                sys.executable, "-m", "fairseq_cli.train", data / "data-bin", "--user-dir", USER_DIR,
                "--arch", "rela_transformer_wmt_en_de", "--attn-backend", backend,
                *model_size_flags(layers=1, dim=64, ffn=64, heads=2),  # head dim 32: the kernels' smallest
                "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "300", "--update-freq", "2",
                "--max-update", "3", "--no-save", "--disable-validation", "--num-workers", "0", "--seed", "3",
                "--log-format", "simple", "--log-interval", "1", "--save-dir", tmp_path / backend,
            ]
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        logs[backend] = re.findall(r"loss=([\d.]+).*?gnorm=([\d.]+)", proc.stdout + proc.stderr)
    assert len(logs["triton"]) == 3 and logs["triton"] == logs["materialized"], logs


@pytest.fixture(scope="session")
def rela_checkpoint(data, tmp_path_factory):
    save = tmp_path_factory.mktemp("rela_ckpt")
    proc = train(data, "rela_g", save, updates=30)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return save / "checkpoint_last.pt"


def test_validate_interactive_and_hub_load_plugin_checkpoints(data, rela_checkpoint):
    import torch

    assert int(torch.__version__.split(".")[0]) >= 2
    proc = run(
        [
            sys.executable,
            "-m",
            "fairseq_cli.validate",
            data / "data-bin",
            "--user-dir",
            USER_DIR,
            "--task",
            "translation",
            "--path",
            rela_checkpoint,
            "--valid-subset",
            "valid",
            "--max-tokens",
            "4096",
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "valid on 'valid' subset" in proc.stdout + proc.stderr
    proc = run(
        [
            sys.executable,
            "-m",
            "fairseq_cli.interactive",
            data / "data-bin",
            "--user-dir",
            USER_DIR,
            "--path",
            rela_checkpoint,
            "--source-lang",
            "de",
            "--target-lang",
            "en",
            "--beam",
            "2",
        ],
        input="ein Mann\n",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"^H-0\t", proc.stdout, re.M)
    code = (
        "from fairseq.hub_utils import from_pretrained\n"
        f"x = from_pretrained({str(rela_checkpoint.parent)!r}, checkpoint_file={rela_checkpoint.name!r}, "
        f"data_name_or_path={str(data / 'data-bin')!r}, user_dir={USER_DIR!r})\n"
        "print(type(x['models'][0]).__name__)\n"
    )
    proc = run([sys.executable, "-c", code], cwd=str(data))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SparseTransformerModel" in proc.stdout


def test_diverging_run_stops_and_saves_no_best_checkpoint(data, tmp_path):
    """ReLU without output norm at an absurd learning rate: the run must stop with a
    message saying it diverged and leave no checkpoint_best.pt."""
    proc = train(
        data,
        "relu_alone",
        tmp_path,
        updates=40,
        extra=[
            "--arch",
            "sparse_transformer",
            "--attn-activation",
            "relu",
            "--attn-output-norm",
            "none",
            "--lr",
            "1e4",
            "--warmup-updates",
            "1",
            "--clip-norm",
            "0",
            "--validate-interval-updates",
            "5",
        ],
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log[-2000:]
    assert "diverged" in log
    assert not (tmp_path / "checkpoint_best.pt").exists()


def test_bad_input_messages(data, tmp_path):
    proc = run(
        [
            sys.executable,
            "-m",
            "fairseq_cli.train",
            tmp_path / "no-such-dir",
            "--user-dir",
            USER_DIR,
            "--arch",
            "sparse_transformer",
            "--max-tokens",
            "100",
        ]
    )
    assert proc.returncode != 0
    assert "no-such-dir" in proc.stderr and "does not exist" in proc.stderr
    for flag in ("--attn-activation", "--cross-attn-output-norm"):
        proc = run(
            [
                sys.executable,
                "-m",
                "fairseq_cli.train",
                data / "data-bin",
                "--user-dir",
                USER_DIR,
                "--arch",
                "sparse_transformer",
                flag,
                "nonsense",
                "--max-tokens",
                "100",
            ]
        )
        assert proc.returncode == 2
        assert "invalid choice: 'nonsense'" in proc.stderr
        assert ("sparsemax" in proc.stderr) if "activation" in flag else ("gated_rmsnorm" in proc.stderr)
