#!/usr/bin/env python3
"""Korean-English news (Korean Parallel Corpora) (ko-en) for fairseq; used by: Raganato et al. (Table 2, low resource).

The automatically aligned Korean-English news corpus of Sennrich & Zhang (2019) (~94k
pairs); separate BPE per language ('independent for Korean-English'), 30k merges.

Files (download, or local copies in --raw-dir):
    korean-english-park.train.tar.gz
    korean-english-park.dev.tar.gz
    korean-english-park.test.tar.gz

    python data_prep/prepare_korean_en.py --out data/korean_en [--raw-dir DIR] [--src en --tgt ko]

The pipeline and its options: data_prep/prepare_corpus.py (--help).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpora import CORPORA  # noqa: E402
from prepare_corpus import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(CORPORA["korean_en"]))
