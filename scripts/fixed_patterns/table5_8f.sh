#!/usr/bin/env bash
# Raganato et al. (2020) Table 5: eight fixed heads (8F: the 7 patterns + "last token")
# against 8L and 7F_token+1L; the paper's En->De (mid-sized) and En->Vi (low resource).
#   scripts/fixed_patterns/table5_8f.sh DATA_DIR NUM_GPUS OUT_DIR
# DATA_DIR: prepare_wmt19_de_en.py --src en --tgt de, or prepare_iwslt15_en_vi.py output
# (LOW=1 for the low-resource settings).  CONFIGS / LAYERS select (default 6+6 6+1).
# Writes OUT_DIR/table5.tsv (with the parameter counts); every row has sacreBLEU's 95% CI and
# the paired-bootstrap p-value against 8L of the same depth.  SEEDS="1 2 3" trains every
# row once per seed (OUT_DIR/<config>_<layers>_seed2, ..., compared with 8L_<layers> of the
# same seed), adds a seed column and OUT_DIR/table5.mean.tsv (mean ± std).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fsa_init "Raganato et al. Table 5; env: CONFIGS, LAYERS, LOW, SEEDS, MAX_UPDATE, MERGES_OK, SMOKE" "$@"
low=""
if [[ "${LOW:-0}" == "1" ]]; then
  low=low; FP_TARGET=1000  # fsa_train gives each GPU its share of the 1k tokens
  fp_require_merges 30000  # Sec. 4.2's BPE
fi
TSV="$OUT/table5.tsv.partial"
rm -f "$TSV" "${TSV%.partial}" "${TSV%.tsv.partial}.mean.tsv"
prefix=""
[[ -n "$low" ]] && prefix=low_
for config in ${CONFIGS:-8L 7Ftoken 8F}; do
  for layers in ${LAYERS:-6+6 6+1}; do
    for seed in $(fsa_seeds); do
      # every row against the 8-learned-head encoder of the same depth and seed (it runs first)
      fsa_use_seed "$seed" "${prefix}${config}_$layers" "${prefix}8L_$layers"
      fp_base_args
      name=$FSA_RUN
      r="$OUT/$name.row.tsv"
      rm -f "$r"
      fp_run "$name" "$r" "Table 5" "$config" "$layers" $low
      params=$(grep -o 'num. shared model params: [0-9,]*' "$OUT/$name/train.log" | head -1 | grep -o '[0-9,]*$' | tr -d , || echo -)
      fsa_result "$TSV" "config=$config" "layers=$layers" "${FSA_SEED_COL[@]}" "params=$params" \
        "sacrebleu=$(fsa_tsv_last "$r" sacrebleu)" "sacrebleu_ci95=$(fsa_tsv_last "$r" sacrebleu_ci95)" \
        "p_vs_baseline=$(fsa_tsv_last "$r" p_vs_baseline)" "baseline=$(fsa_tsv_last "$r" baseline)" \
        "signature=$(fsa_tsv_last "$r" signature)" "paper=see Table 5"
    done
  done
done
fsa_publish "$TSV"
fsa_seed_summary "${TSV%.partial}"
