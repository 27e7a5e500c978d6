#!/usr/bin/env python3
"""WMT18 Chinese-English (zh-en) for fairseq; used by: ReLA (Table 3).

News Commentary v13 + UN v1.0 + CWMT (about 25M pairs); Chinese segmented with jieba
(pip install jieba), English with Moses; separate BPE per language (different scripts).
The paper does not say how it segmented Chinese.

Files (download, or local copies in --raw-dir):
    training-parallel-nc-v13.tgz
    UNv1.0.en-zh.tar.gz
    casia2015.zip
    casict2011.zip
    casict2015.zip
    datum2015.zip
    datum2017.zip
    neu2017.zip
    wmt19-dev.tgz

    python data_prep/prepare_wmt18_zh_en.py --out data/wmt18_zh_en [--raw-dir DIR] [--src en --tgt zh]

The pipeline and its options: data_prep/prepare_corpus.py (--help).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpora import CORPORA  # noqa: E402
from prepare_corpus import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(CORPORA["wmt18_zh_en"]))
