#!/usr/bin/env python3
"""WMT14 English-French (en-fr) for fairseq; used by: ReLA (Table 3).

fairseq's prepare-wmt14en2fr.sh corpora (36M pairs); newstest2013 / newstest2014.

Files (download, or local copies in --raw-dir):
    training-parallel-europarl-v7.tgz
    training-parallel-commoncrawl.tgz
    training-parallel-un.tgz
    training-parallel-nc-v9.tgz
    training-giga-fren.tar
    wmt19-dev.tgz

    python data_prep/prepare_wmt14_en_fr.py --out data/wmt14_en_fr [--raw-dir DIR] [--src fr --tgt en]

The pipeline and its options: data_prep/prepare_corpus.py (--help).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpora import CORPORA  # noqa: E402
from prepare_corpus import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(CORPORA["wmt14_en_fr"]))
