#!/usr/bin/env python3
"""WMT18 English-Finnish (en-fi) for fairseq; used by: ReLA (Table 3).

WMT18 constrained En-Fi corpora without the Finnish monolingual data (about 3.3M pairs
as in the paper); newstest2017 / newstest2018.

Files (download, or local copies in --raw-dir):
    training-parallel-ep-v8.wmt18.tgz
    paracrawl-release1.en-fi.zipporah0-dedup-clean.tgz
    rapid2016.en-fi.tmx.zip
    wiki-titles.tgz
    wmt19-dev.tgz

    python data_prep/prepare_wmt18_en_fi.py --out data/wmt18_en_fi [--raw-dir DIR] [--src fi --tgt en]

The pipeline and its options: data_prep/prepare_corpus.py (--help).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpora import CORPORA  # noqa: E402
from prepare_corpus import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(CORPORA["wmt18_en_fi"]))
