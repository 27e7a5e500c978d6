import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """../shared/data beside the checkout, or $FSA_SHARED_DATA."""
    env = os.environ.get("FSA_SHARED_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def multi30k_raw():
    d = shared_data_dir() / "multi30k"
    if not (d / "train.de.gz").exists():
        pytest.skip(f"Multi30k raw data not found at {d} (set FSA_SHARED_DATA)")
    return d


@pytest.fixture(scope="session")
def data(tmp_path_factory, multi30k_raw):
    """A 4,000-pair slice of Multi30k de-en, tokenized, joint BPE (2,000 merges), binarized
    with a joined dictionary: <out>/data-bin, <out>/bpe/codes, <out>/raw/test.{de,en}."""
    return prepare_multi30k(tmp_path_factory.mktemp("multi30k"), multi30k_raw, 4000, 2000)


def prepare_multi30k(out, raw, train_lines, bpe_merges):
    proc = subprocess.run([sys.executable, str(REPO / "data_prep" / "prepare_multi30k.py"),
                           "--raw-dir", str(raw), "--out", str(out),
                           "--max-train-lines", str(train_lines), "--bpe-merges", str(bpe_merges)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def small_data(tmp_path_factory, multi30k_raw):
    """A 300-pair slice of Multi30k de-en (joint BPE, 500 merges), binarized: 12 updates an
    epoch at --max-tokens 1000, for runs that must cross epochs or only fail early."""
    return prepare_multi30k(tmp_path_factory.mktemp("multi30k_small"), multi30k_raw, 300, 500)
