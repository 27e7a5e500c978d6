#!/usr/bin/env bash
# ReLA Table 1: ablations on WMT14 En-De (sacreBLEU and tokenized BLEU).
#   scripts/rela/table1.sh DATA_DIR NUM_GPUS OUT_DIR
# DATA_DIR: data_prep/prepare_wmt14_en_de.py --out DATA_DIR.  ROWS="1 7" runs some rows;
# SEEDS="1 2 3" trains each row once per seed (OUT_DIR/row7_seed2, ...) and adds
# table1.mean.tsv (mean ± std); every row has sacreBLEU's 95% CI and the paired-bootstrap
# p-value against row 1 (softmax) of the same seed.
# Writes OUT_DIR/<row>/{train.log,checkpoints,gen.test.txt,bleu.test.json} and
# OUT_DIR/table1.tsv (row, model, sacreBLEU, tokenized BLEU, the paper's two numbers).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fsa_init "ReLA Table 1 (WMT14 En-De ablations); env: ROWS, MAX_UPDATE, MAX_TOKENS, SMOKE" "$@"
rela_base_args
# every row's CI and paired-bootstrap p-value are against softmax (row 1) of the same seed
TSV="$OUT/table1.tsv.partial"
rm -f "$TSV" "${TSV%.partial}"

# row|name|flags|paper sacreBLEU|paper tokenized BLEU
ROWS_SPEC=(
  "1|softmax|--arch softmax_transformer_wmt_en_de|26.9|27.59"
  "2|sparsemax|--arch sparsemax_transformer_wmt_en_de|26.4|27.02"
  "3|1.5-entmax|--arch entmax15_transformer_wmt_en_de|26.7|27.39"
  "4|ReLU alone|--arch sparse_transformer --attn-activation relu --attn-output-norm none|-|-"
  "5|ReLU + RMSNorm|--arch sparse_transformer --attn-activation relu --attn-output-norm rmsnorm|26.0|26.60"
  "6|ReLA-i|--arch rela_transformer_wmt_en_de --attn-output-norm rmsnorm_i|26.5|27.16"
  "7|ReLA-g|--arch rela_transformer_wmt_en_de|26.6|27.31"
  "8|ReLA-g + LayerNorm|--arch rela_transformer_wmt_en_de --attn-output-norm gated_layernorm|26.6|27.18"
  "9|ReLA-g + GeLU|--arch rela_transformer_wmt_en_de --attn-activation gelu|26.5|27.14"
  "10|ReLA-g + leaky ReLU|--arch rela_transformer_wmt_en_de --attn-activation leaky_relu|26.5|27.13"
  "11|ReLA-g encoder attention only|--arch softmax_transformer_wmt_en_de --encoder-self-attn-activation relu --encoder-self-attn-output-norm gated_rmsnorm|26.3|27.00"
  "12|ReLA-g decoder attention only|--arch softmax_transformer_wmt_en_de --decoder-self-attn-activation relu --decoder-self-attn-output-norm gated_rmsnorm|27.0|27.70"
  "13|ReLA-g cross attention only|--arch softmax_transformer_wmt_en_de --cross-attn-activation relu --cross-attn-output-norm gated_rmsnorm|27.0|27.69"
)
# shellcheck disable=SC2046  # the rows' ids, one word each
fsa_check_selection ROWS "${ROWS:-}" $(printf '%s\n' "${ROWS_SPEC[@]}" | cut -d'|' -f1)
for spec in "${ROWS_SPEC[@]}"; do
  IFS='|' read -r row name flags paper_sb paper_tok <<< "$spec"
  fsa_selected "$row" "${ROWS:-}" || continue
  # shellcheck disable=SC2206
  model=($flags)
  for seed in $(fsa_seeds); do
    fsa_use_seed "$seed" "row$row" row1  # SEED, run name, baseline of the same seed
    rela_base_args
    run=$FSA_RUN
    if fsa_train "$run" "$RELA_TARGET_TOKENS" "${model[@]}" "${RELA_ARGS[@]}" "${FSA_SMOKE_MODEL[@]}"; then
      fsa_eval_row "$run" "$TSV" "row=$row" "model=$name" "seed=$seed" "paper_sacrebleu=$paper_sb" "paper_tok_bleu=$paper_tok"
    else
      fsa_result "$TSV" "row=$row" "model=$name" "seed=$seed" "paper_sacrebleu=$paper_sb" "paper_tok_bleu=$paper_tok" \
        "sacrebleu=diverged" "tok_bleu=diverged" "signature=-" "checkpoint=-"
    fi
  done
done
fsa_publish "$TSV"
fsa_seed_summary "${TSV%.partial}"
