#!/usr/bin/env bash
# Raganato et al. (2020) Table 2: low-resource 6+6 models (8L, 7F_token+1L, 7F_word+1L)
# with the paper's adaptations: 1k-token batches, dropout 0.3, tied embeddings.
#   scripts/fixed_patterns/table2_low_resource.sh DATA_DIR NUM_GPUS OUT_DIR
# DATA_DIR: prepare_iwslt14_de_en.py, prepare_iwslt15_en_vi.py (--src vi --tgt en for
# Vi->En) or prepare_korean_en.py output; run once per language pair.  CONFIGS selects.
# Writes OUT_DIR/<config>/... and OUT_DIR/table2.tsv.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fsa_init "Raganato et al. Table 2; env: CONFIGS, MAX_UPDATE, SMOKE" "$@"
fp_base_args
FP_TARGET=1000
if [[ "$SMOKE" != "1" ]]; then
  gpus=$NGPUS; [[ $gpus -ge 1 ]] || gpus=1
  MAX_TOKENS=$(( (1000 + gpus - 1) / gpus ))  # 1k tokens per update in all
fi
TSV="$OUT/table2.tsv.partial"
rm -f "$TSV" "${TSV%.partial}"
for config in ${CONFIGS:-8L 7Ftoken 7Fword}; do
  FSA_BASELINE=low_8L  # against the 8-learned-head encoder
  fp_run "low_$config" "$TSV" "Table 2 ($SRC-$TGT)" "$config" "6+6" low
done
fsa_publish "$TSV"
