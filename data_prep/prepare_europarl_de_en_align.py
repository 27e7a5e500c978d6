#!/usr/bin/env python3
"""Europarl v7 German-English + RWTH gold alignments (de-en) for fairseq; used by: Kobayashi et al. (Table 3, AER).

As lilt/alignment-scripts (Zenkel et al. 2019, Ding et al. 2019): training side Moses-
tokenized without escaping, test pairs removed from training, lowercased, empty lines
removed; the 508 gold sentences are latin-1 (converted to UTF-8) and already tokenized;
last 1,000 training pairs -> valid; BPE 10k merges per language (subword-nmt; the
alignment scripts used SentencePiece BPE of the same size). The gold file cannot be
downloaded automatically (a form): put DeEnGoldAlignment.tar.gz into --raw-dir.

Files (download, or local copies in --raw-dir):
    europarl-v7.de-en.tgz
    DeEnGoldAlignment.tar.gz

    python data_prep/prepare_europarl_de_en_align.py --out data/europarl_de_en_align [--raw-dir DIR] [--src en --tgt de]

The pipeline and its options: data_prep/prepare_corpus.py (--help).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpora import CORPORA  # noqa: E402
from prepare_corpus import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(CORPORA["europarl_de_en_align"]))
