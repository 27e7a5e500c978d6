"""Common mistakes of a new user, each through the real command (issue 24; the table is
docs/errors.md, sections Flags, Data, Interactive, Generation): one line through the
plugin's error type naming the flag / file / input line, before any work, nothing written
(no crash.pt, an empty save dir).

The data is a tiny synthetic corpus (40 training pairs over a 24-word vocabulary),
binarized here by fairseq-preprocess; the models are trained for one update.
"""

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import model_size_flags

REPO = Path(__file__).resolve().parents[2]
WORDS = [f"w{i}" for i in range(24)]
TINY = [
    *model_size_flags(layers=1, dim=16, ffn=32, heads=2),
    "--share-all-embeddings",
    "--max-source-positions",
    "32",
    "--max-target-positions",
    "32",
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--max-tokens",
    "500",
    "--num-workers",
    "0",
    "--log-format",
    "simple",
    "--no-epoch-checkpoints",
    "--max-update",
    "1",
    "--seed",
    "1",
]


def env(first_on_path=()):
    out = {k: v for k, v in os.environ.items() if k not in ("FSA_COMPAT_OFF", "FSA_TRACEBACK")}
    out.update(PYTHONPATH=os.pathsep.join([*map(str, first_on_path), str(REPO)]), OMP_NUM_THREADS="1")
    return out


def fsa(command, *args, input=None, first_on_path=()):
    """``fsa-<command> args`` as the console script runs it, from this checkout (with the
    folders ``first_on_path`` before it on the import path)."""
    code = f"import sys; sys.argv[0] = 'fsa-{command}'; from fairseq_sparse_attn.cli import {command}; {command}()"
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        env=env(first_on_path),
        capture_output=True,
        input=input,
        timeout=600,
    )


def text(proc):
    return proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")


def one_line_error(proc, prefix, *fragments):
    """Exit status 1, no traceback, and the last line of stderr is the error."""
    out, err = text(proc)
    assert proc.returncode == 1, (out + err)[-3000:]
    assert "Traceback" not in err, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith(prefix), last
    for fragment in fragments:
        assert fragment in last, last
    return last


def empty(directory):
    return not Path(directory).exists() or not any(Path(directory).iterdir())


def sentences(n, seed, min_len=3, max_len=8):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(min_len, max_len))) for _ in range(n)]


def translate(line):
    """The 'target language': each word mapped to another, order reversed."""
    return " ".join(f"w{(int(w[1:]) * 7 + 3) % len(WORDS)}" for w in reversed(line.split()))


def write_raw(directory, splits):
    """splits: {name: (source lines, target lines)} -> directory/name.de, name.en."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, (src, tgt) in splits.items():
        (directory / f"{name}.de").write_text("".join(s + "\n" for s in src))
        (directory / f"{name}.en").write_text("".join(t + "\n" for t in tgt))


def preprocess(raw, dest, splits=("train", "valid", "test"), srcdict=None):
    args = [
        sys.executable,
        "-m",
        "fairseq_cli.preprocess",
        "--source-lang",
        "de",
        "--target-lang",
        "en",
        "--destdir",
        str(dest),
        "--workers",
        "1",
    ]
    for split, flag in (("train", "--trainpref"), ("valid", "--validpref"), ("test", "--testpref")):
        if split in splits:
            args += [flag, str(raw / split)]
    args += ["--srcdict", str(srcdict), "--joined-dictionary"] if srcdict else ["--joined-dictionary"]
    proc = subprocess.run(args, env=env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dest


def corpus(n_train=40, n_valid=6, seed=0):
    train = sentences(n_train, seed)
    valid = sentences(n_valid, seed + 1)
    test = sentences(n_valid, seed + 2)
    return {
        "train": (train, [translate(s) for s in train]),
        "valid": (valid, [translate(s) for s in valid]),
        "test": (test, [translate(s) for s in test]),
    }


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """raw/ (text) and data-bin/ (fairseq-preprocess, joined dictionary) of the corpus."""
    root = tmp_path_factory.mktemp("tiny")
    write_raw(root / "raw", corpus())
    preprocess(root / "raw", root / "data-bin")
    return root


@pytest.fixture
def databin(tiny, tmp_path):
    d = tmp_path / "data-bin"
    shutil.copytree(tiny / "data-bin", d)
    return d


def train(data, save, *flags, arch="rela_transformer_wmt_en_de", first_on_path=()):
    return fsa("train", data, "--arch", arch, *TINY, *flags, "--save-dir", save, first_on_path=first_on_path)


@pytest.fixture(scope="module")
def rela_checkpoint(tiny):
    save = tiny / "rela"
    proc = train(tiny / "data-bin", save)
    assert proc.returncode == 0, text(proc)[1][-3000:]
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def stock_checkpoint(tiny):
    """fairseq's own transformer (no plugin attention), trained through fsa-train."""
    save = tiny / "stock"
    proc = train(tiny / "data-bin", save, arch="transformer")
    assert proc.returncode == 0, text(proc)[1][-3000:]
    return save / "checkpoint_last.pt"


# --- Flags ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--attn-activation", "relu_scaled", "--relu-scale-gamma", "-1"], "--relu-scale-gamma -1.0: must be > 0"),
        (["--attn-activation", "entmax_bisect", "--entmax-bisect-iters", "0"], "--entmax-bisect-iters 0: must be >= 1"),
        (["--encoder-attention-heads", "3"], "--encoder-embed-dim 16 is not divisible by --encoder-attention-heads 3"),
        (["--attention-dropout", "1.5"], "--attention-dropout 1.5: must be in [0, 1]"),
    ],
    ids=["negative_gamma", "zero_bisect_iters", "heads_not_dividing", "attention_dropout_above_1"],
)
def test_invalid_flag_refused_before_training(tiny, tmp_path, flags, message):
    """The real command for a few of the cases of tests/unit/test_flag_validation.py (the
    bisection iterations and the dropout used to fail inside the first training step, where
    fairseq's trainer wrote crash.pt)."""
    save = tmp_path / "ckpt"
    proc = train(tiny / "data-bin", save, *flags)
    one_line_error(proc, "fsa-train: error: ", message)
    out, err = text(proc)
    assert "begin training" not in out + err
    assert empty(save) and not (save / "crash.pt").exists()


def test_backend_refusal_at_first_forward_leaves_no_crash_dump(tiny, tmp_path):
    """``--attn-backend query_block`` in training can only be refused inside the first
    training step (it depends on gradients); fairseq's trainer used to dump crash.pt."""
    save = tmp_path / "ckpt"
    proc = train(tiny / "data-bin", save, "--attn-backend", "query_block", "--cpu")
    one_line_error(
        proc,
        "fsa-train: error: ",
        "attention backend 'query_block' (--attn-backend) cannot serve this configuration",
        "--attn-backend auto",
    )
    assert not (save / "crash.pt").exists()
    assert not list(save.glob("*.pt"))


@pytest.mark.kernels
def test_print_alignment_on_a_triton_model_is_one_line_naming_the_override(tiny, tmp_path):
    """fsa-generate --print-alignment on a model whose backend is triton (here by
    --model-overrides; a checkpoint trained with --attn-backend triton keeps it): one line
    before decoding, naming the override that works (before: IndexError inside fairseq after
    the first batch); with that override the alignments are printed."""
    save = tmp_path / "ckpt"
    proc = train(tiny / "data-bin", save, *model_size_flags(layers=1, dim=64, ffn=64, heads=2))  # head dim 32
    assert proc.returncode == 0, text(proc)[1][-3000:]
    generate = [tiny / "data-bin", "--path", save / "checkpoint_last.pt", "--beam", "2", "--print-alignment"]
    proc = fsa("generate", *generate, "--model-overrides", "{'attn_backend': 'triton'}")
    one_line_error(
        proc,
        "fsa-generate: error: --print-alignment needs the cross-attention weights, and decoder.layers.0.encoder_attn",
        "--model-overrides \"{'attn_backend': 'auto'}\"",
    )
    assert "H-" not in text(proc)[0]  # nothing translated
    proc = fsa("generate", *generate, "--model-overrides", "{'attn_backend': 'auto'}")
    out, err = text(proc)
    assert proc.returncode == 0, err[-3000:]
    assert sum(line.startswith("A-") for line in out.splitlines()) == 6  # the 6 test sentences


def test_a_triton_the_kernels_do_not_run_with_is_named_in_one_line(tiny, tmp_path):
    """A cluster's own torch 2.7-2.9 brings Triton 3.3-3.5 (make install keeps the
    installed torch and installs the Triton it pins); the kernels do not run there (under
    3.4 an ImportError from inside them).  ``--attn-backend triton`` is one line naming the
    installed version, before any work; auto trains.  (That auto on CUDA neither takes nor
    imports the kernels there is tests/unit/test_triton_backend.py's: on this CPU it never
    would.)"""
    old = tmp_path / "old_triton"  # the installed Triton, saying it is 3.4.0 (sitecustomize runs first)
    old.mkdir()
    (old / "sitecustomize.py").write_text('import triton\n\ntriton.__version__ = "3.4.0"\n')
    save = tmp_path / "ckpt"
    head_dim_32 = model_size_flags(layers=1, dim=64, ffn=64, heads=2)
    proc = train(tiny / "data-bin", save, *head_dim_32, "--attn-backend", "triton", first_on_path=[old])
    one_line_error(
        proc,
        "fsa-train: error: attention backend 'triton' (--attn-backend) cannot serve the ",
        "Triton 3.4.0 is installed; the kernels run with Triton 3.6 or 3.7",
        "use --attn-backend auto",
    )
    assert "begin training" not in "".join(text(proc)) and (not save.exists() or empty(save))
    proc = train(tiny / "data-bin", save, *head_dim_32, "--max-update", "2", first_on_path=[old])
    assert proc.returncode == 0, text(proc)[1][-3000:]


def test_removed_flex_backend_says_what_to_use(tiny, tmp_path):
    """``--attn-backend flex`` (removed, issue 31.6): one line naming the flag and what to
    use instead, before any work."""
    save = tmp_path / "ckpt"
    proc = train(tiny / "data-bin", save, "--attn-backend", "flex", "--cpu")
    out, err = text(proc)
    assert proc.returncode == 2 and "Traceback" not in err, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("fsa-train: error: --attn-backend flex: ") and "use --attn-backend triton" in last, last
    assert not save.exists() or empty(save)


# --- Data -----------------------------------------------------------------------------


def test_source_and_target_with_different_sentence_counts(tmp_path):
    """fairseq-preprocess binarizes the two sides without comparing them; fairseq-train
    then failed with an AssertionError naming no file."""
    splits = corpus()
    src, tgt = splits["train"]
    splits["train"] = (src, tgt[:-1])
    write_raw(tmp_path / "raw", splits)
    data = preprocess(tmp_path / "raw", tmp_path / "data-bin")
    proc = train(data, tmp_path / "ckpt")
    one_line_error(
        proc,
        "fsa-train: error: ",
        f"{data / 'train.de-en.de.idx'} has 40 sentences but {data / 'train.de-en.en.idx'} has 39",
        "line-aligned",
    )
    assert empty(tmp_path / "ckpt")


def test_empty_train_split(tiny, tmp_path):
    splits = corpus()
    splits["train"] = ([], [])
    write_raw(tmp_path / "raw", splits)
    data = preprocess(tmp_path / "raw", tmp_path / "data-bin", srcdict=tiny / "data-bin" / "dict.de.txt")
    proc = train(data, tmp_path / "ckpt")
    one_line_error(
        proc, "fsa-train: error: ", f"{data / 'train.de-en.de.idx'} holds no sentences: split 'train' is empty"
    )
    assert empty(tmp_path / "ckpt")


def test_a_train_split_smaller_than_the_batch_multiple(tiny, tmp_path):
    """6 sentences and --required-batch-size-multiple 8 (fairseq's default): its training
    batches leave out all 6, then 'The dataset is empty ... Try increasing the max number of
    allowed tokens' (a traceback, and advice that does not help)."""
    splits = corpus()
    splits["train"] = (splits["train"][0][:6], splits["train"][1][:6])
    write_raw(tmp_path / "raw", splits)
    data = preprocess(tmp_path / "raw", tmp_path / "data-bin", srcdict=tiny / "data-bin" / "dict.de.txt")
    proc = train(data, tmp_path / "ckpt")
    one_line_error(
        proc,
        "fsa-train: error: training split 'train' gave no batch: it has 6 sentences, fewer than "
        "--required-batch-size-multiple 8",
        "give --required-batch-size-multiple 1",
    )
    assert not list((tmp_path / "ckpt").glob("*.pt"))
    proc = train(data, tmp_path / "ckpt", "--required-batch-size-multiple", "1")
    assert proc.returncode == 0, text(proc)[1][-3000:]


def test_missing_valid_split(databin, tmp_path):
    for f in databin.glob("valid.*"):
        f.unlink()
    proc = train(databin, tmp_path / "ckpt")
    one_line_error(
        proc, "fsa-train: error: ", f"split 'valid' not found in {databin}", "valid.de-en.de.idx", "--validpref"
    )
    assert empty(tmp_path / "ckpt")


def test_duplicated_dictionary_symbol(databin, tmp_path):
    path = databin / "dict.en.txt"
    lines = path.read_text().splitlines()
    lines.append(lines[2].split()[0] + " 1")
    path.write_text("\n".join(lines) + "\n")
    proc = train(databin, tmp_path / "ckpt")
    one_line_error(
        proc, "fsa-train: error: ", f"{path}:{len(lines)}: duplicate symbol '{lines[2].split()[0]}', already on line 3"
    )
    assert empty(tmp_path / "ckpt")


def test_special_symbol_in_dictionary(databin, tmp_path):
    path = databin / "dict.de.txt"
    path.write_text(path.read_text() + "</s> 3\n")
    proc = train(databin, tmp_path / "ckpt")
    one_line_error(proc, "fsa-train: error: ", f"{path}:", "duplicate symbol fairseq's special symbol '</s>'")


def test_malformed_dictionary_line(databin, tmp_path):
    path = databin / "dict.en.txt"
    path.write_text(path.read_text() + "w5\n")
    proc = train(databin, tmp_path / "ckpt")
    one_line_error(proc, "fsa-train: error: ", f"{path}:", "expected '<symbol> <count>', got 'w5'")


@pytest.mark.parametrize("symbol", ["</s>", "<pad>", "<s>"])
def test_special_symbols_inside_training_sentences(tiny, tmp_path, symbol):
    """A raw line holding '</s>' / '<pad>' / '<s>' literally: fairseq-preprocess maps it to
    the special id and fairseq trained on it without a word."""
    splits = corpus()
    src, tgt = splits["train"]
    src = list(src)
    words = src[6].split()
    src[6] = " ".join(words[:2] + [symbol] + words[2:])
    splits["train"] = (src, tgt)
    write_raw(tmp_path / "raw", splits)
    data = preprocess(tmp_path / "raw", tmp_path / "data-bin", srcdict=tiny / "data-bin" / "dict.de.txt")
    proc = train(data, tmp_path / "ckpt")
    one_line_error(
        proc,
        "fsa-train: error: ",
        f"{data / 'train.de-en.de.bin'}: sentence 6 (line "
        f"7 of the text it was binarized from) holds the special symbol '{symbol}'",
        "at token 2",
    )
    assert empty(tmp_path / "ckpt")


def test_model_and_data_dictionary_sizes_differ(tiny, rela_checkpoint, tmp_path):
    """A data-bin binarized with another (bigger) dictionary: torch's 'size mismatch for
    encoder.embed_tokens.weight' traceback before."""
    raw = tmp_path / "raw"
    splits = corpus()
    extra = " ".join(f"x{i}" for i in range(10))  # 10 new words: 8 more entries after padding
    test_src = [s + " " + extra for s in splits["test"][0]]
    splits["test"] = (test_src, [translate(s) for s in splits["test"][0]])
    splits["train"] = (splits["train"][0] + test_src, splits["train"][1] + splits["test"][1])
    write_raw(raw, splits)
    data = preprocess(raw, tmp_path / "data-bin")
    size = 4 + len((data / "dict.de.txt").read_text().splitlines())
    proc = fsa("generate", data, "--path", rela_checkpoint, "--gen-subset", "test", "--max-tokens", "500")
    one_line_error(
        proc,
        "fsa-generate: error: ",
        f"{data / 'dict.de.txt'} is not the source dictionary",
        f"it has {size} entries, the checkpoint's had",
        "Use the data-bin the model was trained on",
    )
    assert "H-" not in text(proc)[0]


def test_document_separator_may_not_be_a_special_symbol(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "data_prep" / "prepare_europarl_docs.py"),
            "--max-doc-length",
            "64",
            "--separator",
            "</s>",
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env(),
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "[europarl-docs] error: --separator </s>: fairseq's special symbol would be binarized to "
        "its id (a </s> in mid-document ends generation there); choose a plain token such as <sep>"
    )
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


# --- Generation -----------------------------------------------------------------------


def test_mask_encoder_heads_on_a_stock_checkpoint(tiny, stock_checkpoint):
    proc = fsa(
        "generate",
        tiny / "data-bin",
        "--path",
        stock_checkpoint,
        "--gen-subset",
        "test",
        "--max-tokens",
        "500",
        "--mask-encoder-heads",
        "0",
    )
    one_line_error(
        proc,
        "fsa-generate: error: ",
        "--mask-encoder-heads 0:",
        f"{stock_checkpoint} has no plugin attention",
        "--arch transformer",
    )
    assert "H-" not in text(proc)[0]


def test_plugin_model_override_on_a_stock_checkpoint(tiny, stock_checkpoint):
    proc = fsa(
        "generate",
        tiny / "data-bin",
        "--path",
        stock_checkpoint,
        "--gen-subset",
        "test",
        "--max-tokens",
        "500",
        "--model-overrides",
        "{'attn_backend': 'query_block'}",
    )
    one_line_error(
        proc, "fsa-generate: error: ", "--model-overrides 'attn_backend' query_block", "has no plugin attention"
    )


def test_mask_encoder_heads_on_a_plugin_checkpoint_changes_the_output(tiny, rela_checkpoint):
    """The refusal is only for stock models: on the plugin's model the flag applies."""
    args = [tiny / "data-bin", "--path", rela_checkpoint, "--gen-subset", "test", "--max-tokens", "500", "--beam", "1"]
    plain, masked = fsa("generate", *args), fsa("generate", *args, "--mask-encoder-heads", "0,1")
    assert plain.returncode == 0 and masked.returncode == 0, text(masked)[1][-3000:]
    hyps = [[line for line in text(p)[0].splitlines() if line.startswith("H-")] for p in (plain, masked)]
    assert len(hyps[0]) == 6 and hyps[0] != hyps[1]


def test_a_failed_generate_keeps_the_previous_results_file(tiny, rela_checkpoint, tmp_path):
    """fairseq opens --results-path's generate-test.txt before it loads anything: a typo in
    --path, or a failure in the search, left it empty (a black-box sweep, 2026-11-29)."""
    results = tmp_path / "results"
    common = ("--gen-subset", "test", "--max-tokens", "500", "--results-path", results)
    proc = fsa("generate", tiny / "data-bin", "--path", rela_checkpoint, *common)
    assert proc.returncode == 0, text(proc)[1][-3000:]
    before = (results / "generate-test.txt").read_text()
    assert "H-0" in before
    one_line_error(
        fsa("generate", tiny / "data-bin", "--path", tmp_path / "typo.pt", *common), "fsa-generate: error: ", "typo.pt"
    )
    # fails in the search, after the model loaded and the file was opened: a batch whose
    # longest source has at most 9 tokens may have outputs of 0.1 * 9 - 1 < 1 token
    proc = fsa(
        "generate", tiny / "data-bin", "--path", rela_checkpoint, *common, "--max-len-a", "0.1", "--max-len-b", "-1"
    )
    one_line_error(proc, "fsa-generate: error: --min-len is above the longest output")
    assert (results / "generate-test.txt").read_text() == before
    assert [p.name for p in results.iterdir()] == ["generate-test.txt"]


def test_restore_file_of_another_architecture(tiny, rela_checkpoint, tmp_path):
    """fairseq's bare 'Cannot load model parameters from checkpoint' Exception."""
    save = tmp_path / "ck"
    proc = train(tiny / "data-bin", save, "--restore-file", rela_checkpoint, "--reset-optimizer", arch="transformer")
    one_line_error(
        proc,
        f"fsa-train: error: --restore-file {rela_checkpoint}: cannot load its model parameters: ",
        "it holds a rela_transformer_wmt_en_de model and this run builds transformer",
        "Unexpected key(s) in state_dict",
    )
    assert not list(save.glob("*.pt"))


def test_a_swapped_direction_is_refused_for_a_checkpoint_without_a_record(tiny, tmp_path):
    """A stock fairseq checkpoint (no fsa_record) names its languages in its saved task:
    -s en -t de on a de->en model with a joined dictionary translated with nothing said."""
    import torch

    save = tmp_path / "stock"
    proc = train(tiny / "data-bin", save, "-s", "de", "-t", "en", arch="transformer")
    assert proc.returncode == 0, text(proc)[1][-3000:]
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    del state["fsa_record"]
    assert state["cfg"]["task"]["source_lang"] == "de"
    stock = tmp_path / "stock.pt"
    torch.save(state, stock)
    proc = fsa("generate", tiny / "data-bin", "--path", stock, "--gen-subset", "test", "-s", "en", "-t", "de")
    one_line_error(
        proc, "fsa-generate: error: -s en -t de: ", "was trained de->en (its saved task's source language is de)"
    )
    assert "H-" not in text(proc)[0]


@pytest.mark.parametrize("asked", [False, True], ids=["stock", "asked"])
def test_a_save_point_on_an_epoch_end_keeps_its_update_checkpoint(tiny, tmp_path, monkeypatch, asked):
    """40 sentences in batches of 8: updates 5 and 10 end epochs 1 and 2.  fairseq names
    those saves only as epoch checkpoints, and with --no-epoch-checkpoints nowhere: the
    scripts' averaging had nothing (a smoke run) or other update counts (a long run).
    FSA_SAVE_POINTS_AT_EPOCH_ENDS=1 (scripts/lib.sh) keeps them; --keep-interval-updates
    prunes them as fairseq's own."""
    if asked:
        monkeypatch.setenv("FSA_SAVE_POINTS_AT_EPOCH_ENDS", "1")
    save = tmp_path / "ck"
    flags = ["--batch-size", "8", "--required-batch-size-multiple", "1", "--max-update", "10"]
    proc = train(tiny / "data-bin", save, *flags, "--save-interval-updates", "5", "--keep-interval-updates", "5")
    assert proc.returncode == 0, text(proc)[1][-3000:]
    log = "".join(text(proc))
    assert (
        "end of epoch 1 (average epoch stats below)" in log and "(epoch 1 @ 5 updates" in log
    )  # saved at an epoch end
    assert "(epoch 2 @ 10 updates" in log
    names = sorted(p.name for p in save.glob("checkpoint_*_*.pt"))
    assert names == (["checkpoint_1_5.pt", "checkpoint_2_10.pt"] if asked else [])
    if asked:
        import torch

        for name, updates in (("checkpoint_1_5.pt", 5), ("checkpoint_2_10.pt", 10)):
            state = torch.load(save / name, map_location="cpu", weights_only=False)
            assert state["optimizer_history"][-1]["num_updates"] == updates
        last = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
        assert all(torch.equal(last["model"][k], state["model"][k]) for k in last["model"])
        save = tmp_path / "ck1"
        proc = train(tiny / "data-bin", save, *flags, "--save-interval-updates", "5", "--keep-interval-updates", "1")
        assert proc.returncode == 0, text(proc)[1][-3000:]
        assert sorted(p.name for p in save.glob("checkpoint_*_*.pt")) == ["checkpoint_2_10.pt"]


# --- Interactive ----------------------------------------------------------------------


def interactive(tiny, checkpoint, data: bytes, *flags):
    return fsa(
        "interactive",
        tiny / "data-bin",
        "--path",
        checkpoint,
        "--source-lang",
        "de",
        "--target-lang",
        "en",
        "--beam",
        "1",
        *flags,
        input=data,
    )


def source_lines(out):
    """{id: S- text} of fsa-interactive's output."""
    found = {}
    for line in out.splitlines():
        if line.startswith("S-"):
            key, _, value = line.partition("\t")
            found[int(key[2:])] = value
    return found


def test_interactive_lone_cr_is_not_a_line_break(tiny, rela_checkpoint):
    data = b"w1 w2\rw3 w4\nw5 w6\r\nw7\n"
    proc = interactive(tiny, rela_checkpoint, data)
    out, err = text(proc)
    assert proc.returncode == 0, err[-3000:]
    assert source_lines(out) == {0: "w1 w2 w3 w4", 1: "w5 w6", 2: "w7"}


def test_interactive_invalid_utf8_line_is_skipped(tiny, rela_checkpoint):
    data = b"w1 w2\nw3 \xff\xfe w4\nw5 w6\n"
    proc = interactive(tiny, rela_checkpoint, data)
    out, err = text(proc)
    # every other line translated; the status and a last line say one was left out
    assert proc.returncode == 1, err[-3000:]
    assert err.splitlines()[-1] == (
        "fsa-interactive: error: 1 input line left out, without a translation (line 2; see above)"
    )
    assert "Traceback" not in err
    assert (
        "fsa-interactive: error: input line 2: not valid UTF-8 (invalid start byte at byte 3); skipped"
    ) in err.splitlines()
    assert source_lines(out) == {0: "w1 w2", 2: "w5 w6"}
    assert sum(line.startswith("H-") for line in out.splitlines()) == 2


def test_interactive_line_longer_than_max_positions_is_skipped(tiny, rela_checkpoint):
    long_line = " ".join(["w3"] * 40)
    data = f"w1 w2\n{long_line}\nw5 w6\n".encode()
    proc = interactive(tiny, rela_checkpoint, data, "--buffer-size", "2", "--batch-size", "2")
    out, err = text(proc)
    assert proc.returncode == 1, err[-3000:]
    assert err.splitlines()[-1].endswith("1 input line left out, without a translation (line 2; see above)")
    assert (
        "fsa-interactive: error: input line 2: 41 tokens (with the end of sentence), more "
        "than the model's 32 source positions; skipped"
    ) in err.splitlines()
    assert source_lines(out) == {0: "w1 w2", 2: "w5 w6"}
