#!/usr/bin/env bash
# Raganato et al. (2020) Table 5: eight fixed heads (8F: the 7 patterns + "last token")
# against 8L and 7F_token+1L; the paper's En->De (mid-sized) and En->Vi (low resource).
#   scripts/fixed_patterns/table5_8f.sh DATA_DIR NUM_GPUS OUT_DIR
# DATA_DIR: prepare_wmt19_de_en.py --src en --tgt de, or prepare_iwslt15_en_vi.py output
# (LOW=1 for the low-resource settings).  CONFIGS / LAYERS select (default 6+6 6+1).
# Writes OUT_DIR/table5.tsv (with the parameter counts); every row has sacreBLEU's 95% CI and
# the paired-bootstrap p-value against 8L of the same depth.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fsa_init "Raganato et al. Table 5; env: CONFIGS, LAYERS, LOW, MAX_UPDATE, SMOKE" "$@"
fp_base_args
low=""
if [[ "${LOW:-0}" == "1" ]]; then
  low=low; FP_TARGET=1000
  if [[ "$SMOKE" != "1" ]]; then gpus=$NGPUS; [[ $gpus -ge 1 ]] || gpus=1; MAX_TOKENS=$(( (1000 + gpus - 1) / gpus )); fi
fi
TSV="$OUT/table5.tsv.partial"
rm -f "$TSV" "${TSV%.partial}"
for config in ${CONFIGS:-8L 7Ftoken 8F}; do
  for layers in ${LAYERS:-6+6 6+1}; do
    name="${config}_$layers"
    [[ -n "$low" ]] && name="low_${config}_$layers"
    rm -f "$OUT/$name.row.tsv"
    # every row against the 8-learned-head encoder of the same depth (it runs first)
    FSA_BASELINE="8L_$layers"
    [[ -n "$low" ]] && FSA_BASELINE="low_8L_$layers"
    fp_run "$name" "$OUT/$name.row.tsv" "Table 5" "$config" "$layers" $low
    params=$(grep -o 'num. shared model params: [0-9,]*' "$OUT/$name/train.log" | head -1 | grep -o '[0-9,]*$' || echo -)
    r="$OUT/$name.row.tsv"
    fsa_result "$TSV" "config=$config" "layers=$layers" "params=$params" "sacrebleu=$(fsa_tsv_last "$r" sacrebleu)" \
      "sacrebleu_ci95=$(fsa_tsv_last "$r" sacrebleu_ci95)" "p_vs_baseline=$(fsa_tsv_last "$r" p_vs_baseline)" \
      "baseline=$(fsa_tsv_last "$r" baseline)" "signature=$(fsa_tsv_last "$r" signature)" "paper=see Table 5"
  done
done
fsa_publish "$TSV"
