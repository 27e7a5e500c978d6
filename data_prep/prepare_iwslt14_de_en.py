#!/usr/bin/env python3
"""IWSLT14 German-English (fairseq's standard split) (de-en) for fairseq; used by: ReLUFormer (Tables 1, 2, 4, 5, Fig. 1), Raganato et al. (Table 2, low resource).

As fairseq's examples/translation/prepare-iwslt14.sh: Moses tokenization (escaping on),
clean-corpus-n ratio 1.5 / 1..175 tokens, lowercased, every 23rd training pair -> valid
(~7k), test = dev2010 + dev2012 + tst2010-2012 (6,750 pairs), joint BPE 10k. ReLUFormer
names 'dev2010, tst2010-2012'; Raganato et al. list dev2012 too and report 6,750 test
pairs, which is this split.

Files (download, or local copies in --raw-dir):
    de-en.tgz

    python data_prep/prepare_iwslt14_de_en.py --out data/iwslt14_de_en [--raw-dir DIR] [--src en --tgt de]

The pipeline and its options: data_prep/prepare_corpus.py (--help).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpora import CORPORA  # noqa: E402
from prepare_corpus import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(CORPORA["iwslt14_de_en"]))
