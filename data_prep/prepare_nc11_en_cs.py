#!/usr/bin/env python3
"""WMT16 News Commentary v11 English-Czech (en-cs) for fairseq; used by: RHE (Tables 1-3, WMT16 columns).

News Commentary v11 cs-en (0.18M pairs in the paper); newstest2015 / newstest2016, 32k
joint BPE merges.

Files (download, or local copies in --raw-dir):
    training-parallel-nc-v11.tgz
    wmt19-dev.tgz

    python data_prep/prepare_nc11_en_cs.py --out data/nc11_en_cs [--raw-dir DIR] [--src cs --tgt en]

The pipeline and its options: data_prep/prepare_corpus.py (--help).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpora import CORPORA  # noqa: E402
from prepare_corpus import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(CORPORA["nc11_en_cs"]))
