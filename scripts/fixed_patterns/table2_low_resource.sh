#!/usr/bin/env bash
# Raganato et al. (2020) Table 2: low-resource 6+6 models (8L, 7F_token+1L, 7F_word+1L)
# with the paper's adaptations: 1k-token batches, dropout 0.3, tied embeddings.
#   scripts/fixed_patterns/table2_low_resource.sh DATA_DIR NUM_GPUS OUT_DIR
# DATA_DIR: prepare_iwslt14_de_en.py --bpe-merges 30000 (the paper's; the default is
# fairseq's 10k), prepare_iwslt15_en_vi.py (--src vi --tgt en for Vi->En) or
# prepare_korean_en.py output; run once per language pair.  CONFIGS selects.
# Writes OUT_DIR/low_<config>/... and OUT_DIR/table2.tsv (every row against low_8L: 95% CI
# and paired-bootstrap p-value).  SEEDS="1 2 3" trains every row once per seed
# (OUT_DIR/low_<config>_seed2, ..., compared with low_8L of the same seed), adds a seed
# column and OUT_DIR/table2.mean.tsv (mean ± std).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fsa_init "Raganato et al. Table 2; env: CONFIGS, SEEDS, MAX_UPDATE, MERGES_OK, SMOKE" "$@"
fp_require_merges 30000  # Sec. 4.2's BPE (IWSLT14: prepare with --bpe-merges 30000)
FP_TARGET=1000  # 1k tokens per update in all: fsa_train gives each GPU its share
TSV="$OUT/table2.tsv.partial"
rm -f "$TSV" "${TSV%.partial}" "${TSV%.tsv.partial}.mean.tsv"
for config in ${CONFIGS:-8L 7Ftoken 7Fword}; do
  for seed in $(fsa_seeds); do
    fsa_use_seed "$seed" "low_$config" low_8L  # against the 8-learned-head encoder of the same seed
    fp_base_args
    fp_run "$FSA_RUN" "$TSV" "Table 2 ($SRC-$TGT)" "$config" "6+6" low
  done
done
fsa_publish "$TSV"
fsa_seed_summary "${TSV%.partial}"
