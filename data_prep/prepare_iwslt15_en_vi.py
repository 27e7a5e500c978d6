#!/usr/bin/env python3
"""IWSLT15 English-Vietnamese (Stanford preprocessed) (en-vi) for fairseq; used by: Raganato et al. (Tables 2, 4, 5, low resource).

Already Moses-tokenized by its publishers (133k pairs); tst2012 / tst2013; joint BPE 30k
merges as the paper.

Files (download, or local copies in --raw-dir):
    iwslt15.en-vi.train.en
    iwslt15.en-vi.train.vi
    iwslt15.en-vi.tst2012.en
    iwslt15.en-vi.tst2012.vi
    iwslt15.en-vi.tst2013.en
    iwslt15.en-vi.tst2013.vi

    python data_prep/prepare_iwslt15_en_vi.py --out data/iwslt15_en_vi [--raw-dir DIR] [--src vi --tgt en]

The pipeline and its options: data_prep/prepare_corpus.py (--help).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpora import CORPORA  # noqa: E402
from prepare_corpus import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(CORPORA["iwslt15_en_vi"]))
