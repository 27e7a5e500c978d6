#!/usr/bin/env python3
"""WMT19 German-English (mid-sized) (de-en) for fairseq; used by: Raganato et al. (Tables 1, 4, 5, Fig. 2, Tables 5/6 analyses).

The paper reports 2.9M training pairs from WMT19 without naming the corpora; we take
Europarl v9 + News Commentary v14 + Rapid 2019 (no CommonCrawl / ParaCrawl), 35k joint
BPE merges as the paper; newstest2018 / newstest2019.

Files (download, or local copies in --raw-dir):
    europarl-v9.de-en.tsv.gz
    news-commentary-v14.de-en.tsv.gz
    rapid2019.de-en.zip
    wmt19-dev.tgz
    wmt19-test.tgz

    python data_prep/prepare_wmt19_de_en.py --out data/wmt19_de_en [--raw-dir DIR] [--src en --tgt de]

The pipeline and its options: data_prep/prepare_corpus.py (--help).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpora import CORPORA  # noqa: E402
from prepare_corpus import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(CORPORA["wmt19_de_en"]))
