#!/usr/bin/env bash
# ReLA Table 3: softmax, sparsemax, 1.5-entmax and ReLA-g on four more WMT tasks (sacreBLEU).
#   scripts/rela/table3.sh DATA_ROOT NUM_GPUS OUT_DIR
# DATA_ROOT holds one data_prep output per task, named as the entry points:
#   wmt14_en_fr wmt18_en_fi wmt18_zh_en wmt16_ro_en  (PAIRS="..." selects; MODELS="..." too)
# Writes OUT_DIR/<task>/<model>/... and OUT_DIR/table3.tsv.
FSA_DATA_IS_ROOT=1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fsa_init "ReLA Table 3; env: PAIRS, MODELS, MAX_UPDATE, MAX_TOKENS, SMOKE" "$@"
TSV="$OUT/table3.tsv.partial"
rm -f "$TSV" "${TSV%.partial}"
declare -A PAPER=(
  [wmt14_en_fr.softmax]=37.2 [wmt14_en_fr.sparsemax]=37.3 [wmt14_en_fr.entmax15]=37.9 [wmt14_en_fr.rela_g]=37.9
  [wmt18_en_fi.softmax]=15.5 [wmt18_en_fi.sparsemax]=15.1 [wmt18_en_fi.entmax15]=15.5 [wmt18_en_fi.rela_g]=15.4
  [wmt18_zh_en.softmax]=21.1 [wmt18_zh_en.sparsemax]=19.2 [wmt18_zh_en.entmax15]=20.8 [wmt18_zh_en.rela_g]=20.8
  [wmt16_ro_en.softmax]=32.7 [wmt16_ro_en.sparsemax]=33.5 [wmt16_ro_en.entmax15]=33.2 [wmt16_ro_en.rela_g]=32.9
)
ROOT_OUT=$OUT
# per task and seed, every model against that task's softmax (CI + paired-bootstrap p-value)
for pair in ${PAIRS:-wmt14_en_fr wmt18_en_fi wmt18_zh_en wmt16_ro_en}; do
  [[ -d "$DATA/$pair" ]] || fsa_die "$DATA/$pair not found: prepare it with data_prep/prepare_$pair.py --out $DATA/$pair"
  fsa_data_dir "$DATA/$pair"
  OUT="$ROOT_OUT/$pair"
  mkdir -p "$OUT"
  rela_base_args
  for model in ${MODELS:-softmax sparsemax entmax15 rela_g}; do
    # shellcheck disable=SC2207
    flags=($(rela_model_args "$model"))
    for seed in $(fsa_seeds); do
      fsa_use_seed "$seed" "$model" softmax  # SEED, run name, baseline of the same seed
      rela_base_args
      run=$FSA_RUN
      if fsa_train "$run" "$RELA_TARGET_TOKENS" "${flags[@]}" "${RELA_ARGS[@]}" "${FSA_SMOKE_MODEL[@]}"; then
        fsa_eval_row "$run" "$TSV" "task=$pair" "model=$model" "seed=$seed" "paper_sacrebleu=${PAPER[$pair.$model]}"
      else
        fsa_result "$TSV" "task=$pair" "model=$model" "seed=$seed" "paper_sacrebleu=${PAPER[$pair.$model]}" \
          "sacrebleu=diverged" "tok_bleu=diverged" "signature=-" "checkpoint=-"
      fi
    done
  done
  fsa_curves  # OUT_DIR/<pair>/learning_curves.{png,csv,json}
done
fsa_publish "$TSV"
fsa_seed_summary "${TSV%.partial}"
