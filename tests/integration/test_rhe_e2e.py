"""Redundant head enlivening end to end: a tiny English->German LPEA+RHE model trained with
fairseq-train on the parse-annotated Multi30k slice (spaCy dependencies, trees derived from
them), the redundant-head fraction logged in training and validation, fairseq-generate
with beam search on the annotated test set scored with sacreBLEU, and the same checkpoint
with redundant heads pruned at test time."""

import re
import sys

import pytest

from test_end_to_end import TINY, USER_DIR, run

UPDATES = 200


def train(data_bin, save_dir, extra=()):
    return run(
        [
            sys.executable,
            "-m",
            "fairseq_cli.train",
            data_bin,
            "--user-dir",
            USER_DIR,
            "--task",
            "parse_annotated_translation",
            "-s",
            "en",
            "-t",
            "de",
            "--arch",
            "rhe_transformer_iwslt_de_en",
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
            str(UPDATES),
            "--save-dir",
            save_dir,
            "--no-epoch-checkpoints",
            "--num-workers",
            "0",
            "--seed",
            "1",
            "--validate-interval-updates",
            str(UPDATES),
            "--log-format",
            "simple",
            "--log-interval",
            "50",
            *extra,
        ]
    )


def generate(data_bin, checkpoint, extra=()):
    proc = run(
        [
            sys.executable,
            "-m",
            "fairseq_cli.generate",
            data_bin,
            "--user-dir",
            USER_DIR,
            "--task",
            "parse_annotated_translation",
            "-s",
            "en",
            "-t",
            "de",
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
            *extra,
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^D-(\d+)\t\S+\t(.*)$", proc.stdout, re.M)}


@pytest.fixture(scope="module")
def rhe_checkpoint(parsed_data, tmp_path_factory):
    save = tmp_path_factory.mktemp("rhe_lpea")
    proc = train(parsed_data / "data-bin", save)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return save / "checkpoint_best.pt", proc.stdout + proc.stderr


def test_train_logs_redundant_fraction_and_generates(parsed_data, rhe_checkpoint):
    import sacrebleu

    checkpoint, log = rhe_checkpoint
    valid_lines = [line for line in log.splitlines() if "valid on 'valid' subset" in line]
    assert valid_lines, log[-3000:]
    valid = dict(re.findall(r"\| (\w+) ([\d.]+)", valid_lines[-1]))
    valid_loss = float(valid["loss"])
    assert valid_loss < 9.5, f"LPEA+RHE: validation loss {valid_loss} after {UPDATES} updates"
    # the fraction of heads identified redundant in encoder layer 0, in training and validation
    train_frac = [float(x) for x in re.findall(r"\| rhe_redundant_l0 ([\d.]+)", log)]
    assert train_frac and "rhe_redundant_l0" in valid, log[-3000:]
    assert all(0.0 <= f <= 1.0 for f in train_frac)
    valid_frac = [valid["rhe_redundant_l0"]]

    hyps = generate(parsed_data / "data-bin", checkpoint)
    refs = (parsed_data / "raw" / "test.de").read_text().splitlines()
    assert len(hyps) == len(refs) == 1000
    bleu = sacrebleu.corpus_bleu([hyps[i] for i in range(len(refs))], [refs])
    print(f"LPEA+RHE en-de: {bleu}; valid loss {valid_loss}; redundant (valid) {valid_frac[-1]}")
    assert bleu.score > 0

    # Table 2's pruning row: the same checkpoint with redundant heads zeroed at test time
    pruned = generate(parsed_data / "data-bin", checkpoint, ["--model-overrides", "{'prune_redundant_heads': True}"])
    assert len(pruned) == 1000
    if float(valid_frac[-1]) > 0:
        assert sum(pruned[i] != hyps[i] for i in hyps) > 0


def test_model_without_annotations_fails_clearly(parsed_data, rhe_checkpoint, tmp_path):
    """The plain translation task has no src_dep/src_rp: a clear error, not a crash deep inside."""
    checkpoint, _ = rhe_checkpoint
    proc = run(
        [
            sys.executable,
            "-m",
            "fairseq_cli.generate",
            parsed_data / "data-bin",
            "--user-dir",
            USER_DIR,
            "--task",
            "translation",
            "-s",
            "en",
            "-t",
            "de",
            "--path",
            checkpoint,
            "--gen-subset",
            "valid",
            "--max-sentences",
            "8",
            "--beam",
            "1",
        ]
    )
    assert proc.returncode != 0
    assert "src_dep" in proc.stderr and "parse_annotated_translation" in proc.stderr
