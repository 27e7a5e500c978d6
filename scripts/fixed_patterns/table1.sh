#!/usr/bin/env bash
# Raganato et al. (2020) Table 1: 8L, 7F_token+1L, 7F_word+1L, 1L encoders, each with 6+6
# and N+1 (N = 6..1) encoder+decoder layers, WMT19 German-English (sacreBLEU).
#   scripts/fixed_patterns/table1.sh DATA_DIR NUM_GPUS OUT_DIR
# DATA_DIR: data_prep/prepare_wmt19_de_en.py output (or --src en --tgt de for En->De).
# CONFIGS="8L 7Ftoken" and LAYERS="6+6 6+1" select.  Writes OUT_DIR/<config>_<layers>/...
# and OUT_DIR/table1.tsv; every row has sacreBLEU's 95% CI and the paired-bootstrap p-value
# against 8L of the same depth.  SEEDS="1 2 3" trains every row once per seed
# (OUT_DIR/<config>_<layers>_seed2, ..., compared with 8L_<layers> of the same seed), adds a
# seed column and OUT_DIR/table1.mean.tsv (mean ± std).  The models are reused by
# table4_ablation.sh and analyses.sh when they share OUT_DIR (and SEEDS).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fsa_init "Raganato et al. Table 1; env: CONFIGS, LAYERS, SEEDS, MAX_UPDATE, SMOKE" "$@"
TSV="$OUT/table1.tsv.partial"
rm -f "$TSV" "${TSV%.partial}" "${TSV%.tsv.partial}.mean.tsv"
for config in ${CONFIGS:-8L 7Ftoken 7Fword 1L}; do
  for layers in ${LAYERS:-6+6 6+1 5+1 4+1 3+1 2+1 1+1}; do
    for seed in $(fsa_seeds); do
      # against the 8-learned-head encoder of the same depth and seed
      fsa_use_seed "$seed" "${config}_$layers" "8L_$layers"
      fp_base_args
      fp_run "$FSA_RUN" "$TSV" "Table 1" "$config" "$layers"
    done
  done
done
fsa_publish "$TSV"
fsa_seed_summary "${TSV%.partial}"
