"""The batching patch (compat/batching.py) against stock fairseq, real runs (issue 30).

A synthetic corpus (random words, lengths 3-30) binarized by fairseq-preprocess; every
run is a subprocess: stock ``python -m fairseq_cli.train`` / ``generate`` without the
plugin (nothing of it imported), and the same command with ``--user-dir`` naming the
plugin, as ``--user-dir "$(fsa-user-dir)"`` does.
"""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGIN_DIR = str(REPO / "fairseq_sparse_attn_plugin")
WORDS = [f"w{i}" for i in range(40)]


def write_split(raw, split, n, rng, long_every=0):
    """n pairs; every ``long_every``-th source sentence has 40 words (too long for
    --max-source-positions 32)."""
    src, tgt = [], []
    for k in range(n):
        length = 40 if long_every and k % long_every == 0 else rng.randint(3, 30)
        src.append(" ".join(rng.choice(WORDS) for _ in range(length)))
        tgt.append(" ".join(rng.choice(WORDS) for _ in range(max(2, length - rng.randint(0, 2)))))
    (raw / f"{split}.src").write_text("\n".join(src) + "\n")
    (raw / f"{split}.tgt").write_text("\n".join(tgt) + "\n")


def run(*args, **env):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FSA_")}
    full_env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1", **env)
    proc = subprocess.run([sys.executable, "-m", *args], env=full_env, capture_output=True, text=True, timeout=600)
    # stock fairseq (no plugin in these runs) may abort at exit after a run cut by
    # --max-update: its batch-prefetch threads (compat/clean_exit.py stops them in plugin
    # runs); seen once in a loaded CI rehearsal, after the checkpoint was written
    exit_abort = (
        proc.returncode == -6
        and "done training" in proc.stdout + proc.stderr
        and "terminate called without an active exception" in proc.stderr
    )
    assert proc.returncode == 0 or exit_abort, (proc.stdout + proc.stderr)[-4000:]
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """train 203 pairs, valid 45 (every 5th too long), test 447 (the generate case)."""
    root = tmp_path_factory.mktemp("stock_batching")
    raw = root / "raw"
    raw.mkdir()
    rng = random.Random(7)
    write_split(raw, "train", 203, rng, long_every=9)
    write_split(raw, "valid", 45, rng, long_every=5)
    write_split(raw, "test", 447, rng)
    run(
        "fairseq_cli.preprocess",
        "--source-lang", "src", "--target-lang", "tgt",
        "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"), "--testpref", str(raw / "test"),
        "--destdir", str(root / "data-bin"), "--joined-dictionary", "--workers", "1",
    )  # fmt: skip
    return root


def train_flags(data, save_dir, *extra):
    return [
        str(data / "data-bin"),
        "--arch", "transformer",
        "--encoder-layers", "1", "--decoder-layers", "1",
        "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
        "--optimizer", "adam", "--lr", "1e-3", "--dropout", "0.1",
        "--seed", "1", "--num-workers", "0",
        "--log-format", "json", "--log-interval", "1",
        "--save-dir", str(save_dir), "--no-epoch-checkpoints",
        *extra,
    ]  # fmt: skip


def updates(log):
    """(update, loss, bsz, wpb) of every train_inner line of a json log."""
    rows = []
    for line in log.splitlines():
        if "| train_inner |" in line:
            r = json.loads(line.split("| train_inner | ", 1)[1])
            rows.append((int(r["num_updates"]), r["loss"], r["bsz"], r["wpb"]))
    return rows


def test_stock_transformer_trains_as_without_the_plugin(corpus, tmp_path):
    """A stock transformer, 2 epochs with --batch-size 8 (203 pairs: fairseq's batching
    drops 3 each epoch): the same updates, batch sizes and losses with the plugin loaded as
    stock fairseq without it.  FSA_COMPLETE_TRAIN_BATCHES=1 asks for the completed
    batches: one update more per epoch (the comparison sees batching changes)."""
    flags = ["--batch-size", "8", "--max-epoch", "2", "--no-save", "--max-source-positions", "64"]
    stock = updates(run("fairseq_cli.train", *train_flags(corpus, tmp_path / "a", *flags)))
    plugin = updates(run("fairseq_cli.train", *train_flags(corpus, tmp_path / "b", *flags, "--user-dir", PLUGIN_DIR)))
    assert len(stock) == 2 * (200 // 8)
    assert plugin == stock
    complete = run(
        "fairseq_cli.train",
        *train_flags(corpus, tmp_path / "c", *flags, "--user-dir", PLUGIN_DIR),
        FSA_COMPLETE_TRAIN_BATCHES="1",
    )
    assert len(updates(complete)) == 2 * (200 // 8 + 1)


@pytest.mark.parametrize("complete", ["0", "1"])
def test_training_with_size_filtering_runs(corpus, tmp_path, complete):
    """Sentences longer than --max-source-positions, skipped with
    --skip-invalid-size-inputs-valid-test, in training (23 of 203) and validation (9 of
    45): the filtered training runs (the patch once read lengths by dataset id and crashed
    with IndexError), stock training batches or completed ones."""
    log = run(
        "fairseq_cli.train",
        *train_flags(
            corpus, tmp_path / "ckpt",
            "--max-tokens", "200", "--max-epoch", "1", "--skip-invalid-size-inputs-valid-test",
            "--max-source-positions", "32", "--max-target-positions", "64",
            "--user-dir", PLUGIN_DIR,
        ),
        FSA_COMPLETE_TRAIN_BATCHES=complete,
    )  # fmt: skip
    assert "23 samples have invalid sizes and will be skipped" in log
    assert "9 samples have invalid sizes and will be skipped" in log
    assert updates(log)
    assert '"epoch": 1' in log and "| valid |" in log


def test_generate_translates_all_447_documents(corpus, tmp_path):
    """fairseq-generate --batch-size 32 on a 447-sentence test set: stock fairseq
    translates 440 (447 % 8 dropped by its batching), the plugin all 447."""
    save = tmp_path / "ckpt"
    run(
        "fairseq_cli.train",
        *train_flags(corpus, save, "--batch-size", "32", "--max-update", "1", "--no-save-optimizer-state"),
    )
    gen = [str(corpus / "data-bin"), "--path", str(save / "checkpoint_last.pt"), "--gen-subset", "test"]
    gen += ["--batch-size", "32", "--beam", "1", "--max-len-b", "5"]

    logs = []

    def hypotheses(*extra):
        out = run("fairseq_cli.generate", *gen, *extra)
        logs.append(out)
        return sorted(int(line.split("\t")[0][2:]) for line in out.splitlines() if line.startswith("H-"))

    assert len(hypotheses()) == 440  # stock fairseq (the case the patch was written for)
    assert hypotheses("--user-dir", PLUGIN_DIR) == list(range(447))
    # said where it happens: the figures differ from stock fairseq's
    assert "left out" not in logs[0]
    assert "fairseq's batch_by_size left out 7 of 447 examples (--required-batch-size-multiple 8)" in logs[1]
