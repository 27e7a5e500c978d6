#!/usr/bin/env python3
"""WMT16 Romanian-English (ro-en) for fairseq; used by: ReLA (Table 3).

Europarl v8 + SETIMES2 (608k pairs); newsdev2016 / newstest2016; no Romanian diacritic
normalisation (the paper mentions none).

Files (download, or local copies in --raw-dir):
    training-parallel-ep-v8.wmt16.tgz
    setimes2.en-ro.tmx.gz
    wmt19-dev.tgz

    python data_prep/prepare_wmt16_ro_en.py --out data/wmt16_ro_en [--raw-dir DIR] [--src en --tgt ro]

The pipeline and its options: data_prep/prepare_corpus.py (--help).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpora import CORPORA  # noqa: E402
from prepare_corpus import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(CORPORA["wmt16_ro_en"]))
