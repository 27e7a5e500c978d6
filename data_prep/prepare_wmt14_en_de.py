#!/usr/bin/env python3
"""WMT14 English-German (en-de) for fairseq; used by: ReLA (Tables 1, 2), ReLUFormer (Table 4), RHE (Table 1, WMT14 column).

Europarl v7 + CommonCrawl + News Commentary v9 (4.5M pairs) as fairseq's prepare-
wmt14en2de.sh, but dev = newstest2013 and test = newstest2014 (full, 3,003 pairs) as the
papers, and 32k joint BPE merges (ReLA, RHE).

Files (download, or local copies in --raw-dir):
    training-parallel-europarl-v7.tgz
    training-parallel-commoncrawl.tgz
    training-parallel-nc-v9.tgz
    wmt19-dev.tgz

    python data_prep/prepare_wmt14_en_de.py --out data/wmt14_en_de [--raw-dir DIR] [--src de --tgt en]

The pipeline and its options: data_prep/prepare_corpus.py (--help).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpora import CORPORA  # noqa: E402
from prepare_corpus import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(CORPORA["wmt14_en_de"]))
