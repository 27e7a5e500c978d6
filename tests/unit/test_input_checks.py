"""Issue 14's checks, in this process: the compat switch, checkpoint integrity, binarized
data, model flags, quiet logs.  The real commands: tests/integration/test_errors.py and
test_resume.py."""

import argparse
import gzip
import logging
import os
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary, indexed_dataset

import fairseq_sparse_attn.plugin  # noqa: F401  (installs the patches)
from fairseq_sparse_attn import compat, validation
from fairseq_sparse_attn.compat import quiet_logs
from fairseq_sparse_attn.compat.crash_safe_checkpoints import atomic_copy, atomic_write, checkpoint_problem
from fairseq_sparse_attn.compat.data_checks import DataError, check_indexed_pair
from fairseq_sparse_attn.errors import UsageError
from fairseq_sparse_attn.options.resolve import resolve_model

REPO = Path(__file__).resolve().parents[2]


# --- the switch ----------------------------------------------------------------------


def test_compat_switch_names_patches():
    behaviour = {n for n, m in compat.PATCHES.items() if m.BEHAVIOUR_CHANGE}
    assert {
        "exact_resume",
        "crash_safe_checkpoints",
        "epoch_end_save_points",
        "batching",
        "divergence_guard",
        "cpu_distributed",
        "resume_config_check",
        "save_dir_lock",
        "checkpoint_record",
        "preemption",
        "bf16_not_tpu",
    } == behaviour
    assert compat.patches_off({}) == set()
    assert compat.patches_off({"FSA_COMPAT_OFF": "behaviour"}) == behaviour
    assert compat.patches_off({"FSA_COMPAT_OFF": "all"}) == behaviour
    assert compat.patches_off({"FSA_COMPAT_OFF": " exact_resume, quiet_logs"}) == {"exact_resume", "quiet_logs"}
    with pytest.raises(ValueError, match="unknown patch 'exact'"):
        compat.patches_off({"FSA_COMPAT_OFF": "exact"})
    # this process installed all of them (no switch set in the test environment)
    assert compat.active_patches() == list(compat.PATCHES)


# --- checkpoints ---------------------------------------------------------------------


def test_checkpoint_problem_finds_truncation_and_damage(tmp_path):
    path = tmp_path / "c.pt"
    torch.save({"model": {"w": torch.arange(5000.0)}}, path)
    assert checkpoint_problem(path) is None
    data = path.read_bytes()
    for cut in (0, 100, len(data) // 2, len(data) - 10):
        bad = tmp_path / f"cut{cut}.pt"
        bad.write_bytes(data[:cut])
        problem = checkpoint_problem(bad)
        assert problem is not None and ("truncated" in problem or "empty" in problem)
        with pytest.raises(Exception):  # torch agrees the file is unreadable
            torch.load(bad, weights_only=False)
    # one flipped byte inside the tensor data: the zip CRC catches it
    i = data.index(np.arange(5000, dtype=np.float32)[1000:1002].tobytes())
    flipped = bytearray(data)
    flipped[i] ^= 0xFF
    bad = tmp_path / "flipped.pt"
    bad.write_bytes(bytes(flipped))
    assert "CRC" in checkpoint_problem(bad)


def test_atomic_copy_replaces_whole_file(tmp_path):
    src, dst = tmp_path / "a.pt", tmp_path / "b.pt"
    src.write_bytes(b"new" * 1000)
    dst.write_bytes(b"old")
    assert atomic_copy(str(src), str(dst))
    assert dst.read_bytes() == b"new" * 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt", "b.pt"]


def test_fairseq_copy_and_save_go_through_a_temporary_file(tmp_path, monkeypatch):
    """checkpoint_utils' copy and save write NAME.<pid>@<host>.tmp and rename it (stock
    fairseq copies in place): a file opened for writing under the final name would be
    visible half-done."""
    import builtins
    import os
    import socket

    from fairseq import checkpoint_utils

    opened = []
    real_open = builtins.open

    def spy_open(file, mode="r", *args, **kwargs):
        if "w" in str(mode):
            opened.append(Path(file).name)
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy_open)  # also what shutil.copyfile opens
    checkpoint_utils.torch_persistent_save({"x": torch.ones(3)}, str(tmp_path / "checkpoint_1_5.pt"))
    checkpoint_utils.PathManager.copy(
        str(tmp_path / "checkpoint_1_5.pt"), str(tmp_path / "checkpoint_last.pt"), overwrite=True
    )
    writer = f"{os.getpid()}@{socket.gethostname()}"
    assert opened == [f"checkpoint_1_5.pt.{writer}.tmp", f"checkpoint_last.pt.{writer}.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint_1_5.pt", "checkpoint_last.pt"]
    assert torch.equal(torch.load(tmp_path / "checkpoint_last.pt")["x"], torch.ones(3))


def test_checkpoint_bytes_reach_the_disk_before_the_rename(tmp_path, monkeypatch):
    """The temporary file is fsynced before it replaces the checkpoint (a power loss
    after the rename must not leave an empty checkpoint_last.pt)."""
    synced = []
    real_fsync, real_replace = os.fsync, os.replace

    def spy_fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def spy_replace(src, dst):
        assert os.path.abspath(src) in synced, "renamed before fsync"
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", spy_fsync)
    monkeypatch.setattr(os, "replace", spy_replace)
    atomic_write({"x": torch.ones(2)}, str(tmp_path / "checkpoint1.pt"))
    atomic_copy(str(tmp_path / "checkpoint1.pt"), str(tmp_path / "checkpoint_last.pt"))
    assert len(synced) == 2 and all(path.endswith(".tmp") for path in synced)


# --- binarized data --------------------------------------------------------------------


def write_indexed(prefix, sentences, dtype=np.uint16):
    """Binarize with fairseq's own writer."""
    builder = indexed_dataset.MMapIndexedDatasetBuilder(str(prefix) + ".bin", dtype=dtype)
    for s in sentences:
        builder.add_item(torch.tensor(s, dtype=torch.int64))
    builder.finalize(str(prefix) + ".idx")


SENTENCES = [[5, 6, 2], [7, 2], [8, 9, 10, 11, 2]]


def test_indexed_pair_accepts_fairseq_output(tmp_path):
    prefix = tmp_path / "train.de-en.de"
    write_indexed(prefix, SENTENCES)
    check_indexed_pair(str(prefix), vocab_size=12)
    ds = indexed_dataset.MMapIndexedDataset(str(prefix))  # fairseq reads it back
    assert [ds[i].tolist() for i in range(3)] == SENTENCES


@pytest.mark.parametrize(
    "damage,message",
    [
        ("truncate_bin", r"\.bin is truncated: 10 bytes, its index .* describes 20"),
        ("extend_bin", r"\.bin is longer than its index: 22 bytes"),
        ("truncate_idx", r"\.idx is damaged: it says 3 entries, which take 62 bytes, but the file has 61"),
        ("negative_size", r"\.idx is damaged: entry 1 has length -1"),
        ("pointer", r"\.idx is damaged: entry 2 starts at byte 7, expected 10"),
        ("magic", r"\.idx is not a fairseq mmap index"),
        ("extend_idx", r"\.idx is damaged: it says 3 entries, which take 62 bytes, but the file has 63"),
        ("vocab", r"\.bin holds token id 11 but its dictionary has 11 entries"),  # ids 0..10
    ],
)
def test_indexed_pair_damage(tmp_path, damage, message):
    prefix = tmp_path / "train.de-en.de"
    write_indexed(prefix, SENTENCES)
    idx, binf = Path(str(prefix) + ".idx"), Path(str(prefix) + ".bin")
    raw = bytearray(idx.read_bytes())
    header, n = 26, 3
    if damage == "truncate_bin":
        binf.write_bytes(binf.read_bytes()[:10])
    elif damage == "extend_bin":
        binf.write_bytes(binf.read_bytes() + b"\0\0")
    elif damage == "truncate_idx":
        idx.write_bytes(bytes(raw[:-1]))
    elif damage == "extend_idx":
        idx.write_bytes(bytes(raw) + b"\0")
    elif damage == "negative_size":
        raw[header + 4 : header + 8] = np.int32(-1).tobytes()
        idx.write_bytes(bytes(raw))
    elif damage == "pointer":
        raw[header + 4 * n + 16 : header + 4 * n + 24] = np.int64(7).tobytes()
        idx.write_bytes(bytes(raw))
    elif damage == "magic":
        raw[:4] = b"JUNK"
        idx.write_bytes(bytes(raw))
    with pytest.raises(DataError, match=message):
        check_indexed_pair(str(prefix), vocab_size=11 if damage == "vocab" else 12)


# --- model flags ---------------------------------------------------------------------


def flags(**kw):
    base = dict(
        encoder_attention_heads=4,
        attention_dropout=0.0,
        attn_key_block_size=0,
        attn_activation="softmax",
        encoder_fixed_patterns="none",
        encoder_masked_heads="",
        encoder_syntax_attention="none",
        rhe=False,
        encoder_fixed_pattern_unit="token",
        encoder_subword_style="bpe",
    )
    return argparse.Namespace(**{**base, **kw})


def test_fixed_pattern_and_head_flags():
    validation.validate_model_args(flags(encoder_fixed_patterns="7F", encoder_attention_heads=8))
    validation.validate_model_args(flags(encoder_fixed_patterns="7F", encoder_attention_heads=7))  # 7F, no learned head
    with pytest.raises(UsageError, match="7 fixed patterns do not fit in --encoder-attention-heads 6"):
        validation.validate_model_args(
            flags(encoder_fixed_patterns="7F", encoder_attention_heads=6, encoder_embed_dim=12)
        )
    with pytest.raises(UsageError, match="7 fixed patterns do not fit in --encoder-attention-heads 4"):
        validation.validate_model_args(flags(encoder_fixed_patterns="7F"))
    with pytest.raises(UsageError, match="unknown fixed attention pattern 'bogus'"):
        validation.validate_model_args(flags(encoder_fixed_patterns="current,bogus"))
    validation.validate_model_args(flags(encoder_masked_heads="0,3"))
    with pytest.raises(UsageError, match="head 4 is out of range, the encoder has 4 heads"):
        validation.validate_model_args(flags(encoder_masked_heads="0,4"))
    with pytest.raises(UsageError, match="expected comma-separated head indices"):
        validation.validate_model_args(flags(encoder_masked_heads="zero"))


def test_key_blocks_with_attention_dropout():
    # softmax never takes the key-block path: the flag is inert there
    validation.validate_model_args(flags(attn_key_block_size=16, attention_dropout=0.1))
    validation.validate_model_args(flags(attn_activation="relu", attn_key_block_size=16))
    with pytest.raises(UsageError, match="--attn-key-block-size 16 needs --attention-dropout 0"):
        validation.validate_model_args(flags(attn_activation="relu", attn_key_block_size=16, attention_dropout=0.1))


@pytest.mark.parametrize("backend", ["triton", "materialized", "query_block", "sdpa"])
def test_key_blocks_with_another_named_backend_are_refused(backend):
    """A named backend other than key_block never takes the key-block path: the flag would be
    ignored without a word, so the pair is one usage error naming both flags."""
    validation.validate_model_args(flags(attn_activation="relu", attn_key_block_size=16, attn_backend="key_block"))
    with pytest.raises(
        UsageError, match=f"--attn-key-block-size 16 takes effect with --attn-backend auto or key_block, not {backend}"
    ):
        validation.validate_model_args(flags(attn_activation="relu", attn_key_block_size=16, attn_backend=backend))


def task_with(syntax_inputs=None, symbols=()):
    d = Dictionary()
    for s in symbols:
        d.add_symbol(s)
    cfg = SimpleNamespace(syntax_inputs=syntax_inputs) if syntax_inputs else SimpleNamespace()
    return SimpleNamespace(cfg=cfg, source_dictionary=d)


def test_syntax_inputs_for_the_encoder_biases():
    lpea_rhe = flags(encoder_syntax_attention="lpea", rhe=True)
    assert validation.syntax_inputs_needed(resolve_model(lpea_rhe)) == ["dep", "rp"]
    assert validation.syntax_inputs_needed(resolve_model(flags(encoder_syntax_attention="dea"))) == ["dep"]
    validation.validate_model_args(lpea_rhe, task_with("dep,rp"))
    with pytest.raises(
        UsageError,
        match=r"needs src_dep, src_rp, but --syntax-inputs dep builds "
        r"src_dep only: use --syntax-inputs dep,rp",
    ):
        validation.validate_model_args(lpea_rhe, task_with("dep"))
    with pytest.raises(UsageError, match="--task parse_annotated_translation"):
        validation.validate_model_args(lpea_rhe, task_with(None))
    # build_standalone_model's stand-in task (no cfg): Python use, nothing to check
    validation.validate_model_args(lpea_rhe, SimpleNamespace(source_dictionary=Dictionary()))


BPE = ["the", "ca@@", "t", "sat", "."]
SPM = ["\u2581the", "\u2581ca", "t", "\u2581sat", "."]


def test_subword_style_must_fit_the_dictionary():
    word = dict(encoder_fixed_pattern_unit="word")
    validation.validate_model_args(flags(**word), task_with(symbols=BPE))
    validation.validate_model_args(flags(encoder_subword_style="sentencepiece", **word), task_with(symbols=SPM))
    with pytest.raises(UsageError, match="has no '\u2581' word-start pieces .*use --encoder-subword-style bpe"):
        validation.validate_model_args(flags(encoder_subword_style="sentencepiece", **word), task_with(symbols=BPE))
    with pytest.raises(
        UsageError, match="no '@@' pieces and 3 SentencePiece .*use --encoder-subword-style sentencepiece"
    ):
        validation.validate_model_args(flags(**word), task_with(symbols=SPM))
    # token-based patterns do not read word boundaries
    validation.validate_model_args(flags(encoder_subword_style="sentencepiece"), task_with(symbols=BPE))


def test_resume_config_differences():
    from fairseq_sparse_attn.models.sparse_transformer import SparseTransformerModel

    names = validation.plugin_option_names(SparseTransformerModel)
    assert {"attn_activation", "attn_output_norm", "encoder_fixed_patterns"} <= set(names)
    assert "dropout" not in names and "attn_key_block_size" not in names
    # every plugin option but those the schema declares outside the configuration (how, not what)
    from fairseq_sparse_attn.options.schema import OPTION_FIELDS

    assert set(OPTION_FIELDS) - set(names) == {
        "attn_backend",
        "attn_key_block_size",
        "attn_flex_min_keys",
        "entmax_bisect_iters",
        "allow_attention_change",
        "prune_skip_in_training",
    }
    saved = argparse.Namespace(attn_activation="relu", attn_output_norm="gated_rmsnorm")
    given = argparse.Namespace(
        attn_activation="sparsemax", attn_output_norm="gated_rmsnorm", allow_attention_change=False
    )
    with pytest.raises(
        UsageError,
        match=r"ckpt\.pt was trained with other attention options .*"
        r"--attn-activation: checkpoint 'relu', given 'sparsemax'",
    ):
        validation.check_resume_config("ckpt.pt", saved, given, SparseTransformerModel)
    given.allow_attention_change = True
    validation.check_resume_config("ckpt.pt", saved, given, SparseTransformerModel)
    # the backend is how attention is computed, not what: a resume may change it
    saved.attn_backend, given.attn_backend = "auto", "triton"
    given.attn_activation, given.allow_attention_change = "relu", False
    validation.check_resume_config("ckpt.pt", saved, given, SparseTransformerModel)
    # an option the (older) checkpoint does not have is not compared
    assert validation.attention_config_differences(argparse.Namespace(), given, names) == []


# --- logs and raw data ---------------------------------------------------------------------


def test_quiet_logs_drop_only_the_noise(caplog):
    log = logging.getLogger("fairseq.tasks.text_to_speech")
    with caplog.at_level(logging.INFO, logger="fairseq.tasks.text_to_speech"):
        log.info("Please install tensorboardX: pip install tensorboardX")
        log.info("another message")
    assert [r.getMessage() for r in caplog.records] == ["another message"]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        quiet_logs.install()  # catch_warnings reset the filters: install them again
        warnings.warn("hydra.experimental.compose() is no longer experimental. Use hydra.compose()", UserWarning)
        warnings.warn("\nThe version_base parameter is not specified.", UserWarning)
        warnings.warn("something else", UserWarning)
        message = "`torch.cuda.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cuda', args...)`"
        for module in ("fairseq.tasks.fairseq_task", "mytrainer"):  # fairseq's call only
            warnings.warn_explicit(message, FutureWarning, "x.py", 1, module=module)
    assert [str(w.message) for w in seen] == ["something else", message]


def test_read_lines_truncated_gzip(tmp_path):
    sys.path.insert(0, str(REPO / "data_prep"))
    try:
        from common import PrepError, read_lines
    finally:
        sys.path.remove(str(REPO / "data_prep"))
    path = tmp_path / "train.de.gz"
    with gzip.open(path, "wt") as f:
        f.writelines(f"sentence {i} with some words\n" for i in range(5000))
    assert len(read_lines(path)) == 5000
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(PrepError, match=r"train\.de\.gz is truncated or not a gzip file \(read \d+ lines"):
        read_lines(path)
