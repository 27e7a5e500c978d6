#!/usr/bin/env bash
# ReLUFormer Tables 2, 4 and 5 (sentence-level translation).
#   TASK=iwslt14 scripts/reluformer/sentence_level.sh DATA_DIR NUM_GPUS OUT_DIR   (Tables 2, 4, 5)
#   TASK=wmt14   scripts/reluformer/sentence_level.sh DATA_DIR NUM_GPUS OUT_DIR   (Table 4, WMT column)
# DATA_DIR: data_prep/prepare_iwslt14_de_en.py / prepare_wmt14_en_de.py output.
# Runs (RUNS="..." selects): softmax sparsemax entmax15 rela reluformer (Table 4);
# relu_noscale_noreg and relu_scaled_noreg (Table 2 rows 2-3, the latter also Table 5
# "- reg loss"); reluformer_noscale (Table 5 "- scale factor").  The ReLU-variant rows use
# relu_scaled in all three attention kinds (the ReLUFormer model) - the paper's Table 2
# does not say whether its SAN ablation covered the decoder too.
# Writes OUT_DIR/<run>/... and OUT_DIR/table{2,4,5}.tsv (tokenized BLEU; Table 5 also
# the attention entropy logged by the regularized criterion on the validation set).  Every
# run is compared with softmax (paired bootstrap: OUT_DIR/<run>/bleu.test.json and
# OUT_DIR/<run>/.row.tsv).  SEEDS="1 2 3" trains every run once per seed
# (OUT_DIR/<run>_seed2, ..., compared with softmax of the same seed), adds a seed column and
# OUT_DIR/table{2,4,5}.mean.tsv (mean ± std of BLEU, and of the entropy in Table 5).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fsa_init "ReLUFormer Tables 2/4/5; env: TASK (iwslt14|wmt14), RUNS, SEEDS, MAX_UPDATE, SMOKE" "$@"
TASK="${TASK:-iwslt14}"
rf_base_args "$TASK"  # RF_SIZE (and a check of TASK); again per seed below
S=$RF_SIZE
declare -A FLAGS=(
  [softmax]="--arch softmax_transformer_$S ${CE[*]}"
  [sparsemax]="--arch sparsemax_transformer_$S ${CE[*]}"
  [entmax15]="--arch entmax15_transformer_$S ${CE[*]}"
  [rela]="--arch rela_transformer_$S ${CE[*]}"
  [reluformer]="--arch reluformer_$S ${REG[*]}"
  [relu_noscale_noreg]="--arch reluformer_$S --relu-no-length-scale ${NOREG[*]}"
  [relu_scaled_noreg]="--arch reluformer_$S ${NOREG[*]}"
  [reluformer_noscale]="--arch reluformer_$S --relu-no-length-scale ${REG[*]}"
)
if [[ "$TASK" == iwslt14 ]]; then
  DEFAULT_RUNS="softmax sparsemax entmax15 rela reluformer relu_noscale_noreg relu_scaled_noreg reluformer_noscale"
  declare -A T4=([softmax]=34.22 [sparsemax]=33.98 [entmax15]=34.46 [rela]=33.59 [reluformer]=34.56)
else
  DEFAULT_RUNS="softmax sparsemax entmax15 rela reluformer"
  declare -A T4=([softmax]=27.21 [sparsemax]=27.32 [entmax15]=27.11 [rela]=26.31 [reluformer]=27.64)
fi
declare -A T2=([softmax]="Softmax, no scale factor|34.22" [relu_noscale_noreg]="ReLU, no scale factor|-"
               [relu_scaled_noreg]="ReLU, scale factor|33.19")
declare -A T5=([reluformer]="ReLUFormer|34.56|1.60" [reluformer_noscale]="- scale factor|-|-"
               [relu_scaled_noreg]="- reg loss|33.19|0.08")
rm -f "$OUT"/table{2,4,5}.tsv "$OUT"/table{2,4,5}.tsv.partial "$OUT"/table{2,4,5}.mean.tsv
for run in ${RUNS:-$DEFAULT_RUNS}; do
  [[ -n "${FLAGS[$run]:-}" ]] || fsa_die "unknown run '$run' (${!FLAGS[*]})"
  # shellcheck disable=SC2206
  flags=(${FLAGS[$run]})
  for seed in $(fsa_seeds); do
    fsa_use_seed "$seed" "$run" softmax  # every run against softmax of the same seed (paired bootstrap)
    rf_base_args "$TASK"
    name=$FSA_RUN
    bleu=diverged; tok=diverged; sig=-
    if fsa_train "$name" "$RF_TARGET_TOKENS" "${flags[@]}" "${RF_ARGS[@]}" "${FSA_SMOKE_MODEL[@]}"; then
      rm -f "$OUT/$name/.row.tsv"
      fsa_eval_row "$name" "$OUT/$name/.row.tsv" "run=$run" "${FSA_SEED_COL[@]}"
      j="$OUT/$name/bleu.test.json"
      bleu=$(fsa_json "$j" sacrebleu); tok=$(fsa_json "$j" tok_bleu); sig=$(fsa_json "$j" signature)
    fi
    # attention entropy H(s) of the last validation (encoder self-attention), if logged
    entropy=$(grep "valid on" "$OUT/$name/train.log" 2>/dev/null | tail -1 | grep -o 'entropy_encoder_self [0-9.]*' | cut -d' ' -f2 || true)
    entropy=${entropy:--}
    if [[ -n "${T4[$run]:-}" ]]; then
      fsa_result "$OUT/table4.tsv.partial" "task=$TASK" "model=$run" "${FSA_SEED_COL[@]}" "tok_bleu=$tok" "sacrebleu=$bleu" \
        "paper_tok_bleu=${T4[$run]}" "signature=$sig"
    fi
    if [[ "$TASK" == iwslt14 && -n "${T2[$run]:-}" ]]; then
      IFS='|' read -r label paper <<< "${T2[$run]}"
      fsa_result "$OUT/table2.tsv.partial" "row=$label" "run=$run" "${FSA_SEED_COL[@]}" "tok_bleu=$tok" "paper_tok_bleu=$paper"
    fi
    if [[ "$TASK" == iwslt14 && -n "${T5[$run]:-}" ]]; then
      IFS='|' read -r label paper pent <<< "${T5[$run]}"
      fsa_result "$OUT/table5.tsv.partial" "row=$label" "run=$run" "${FSA_SEED_COL[@]}" "tok_bleu=$tok" "entropy=$entropy" \
        "paper_tok_bleu=$paper" "paper_entropy=$pent"
    fi
  done
done
for t in 2 4 5; do
  fsa_publish "$OUT/table$t.tsv.partial"
done
fsa_seed_summary "$OUT/table2.tsv"
fsa_seed_summary "$OUT/table4.tsv"
fsa_seed_summary "$OUT/table5.tsv" entropy
