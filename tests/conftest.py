import os
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
