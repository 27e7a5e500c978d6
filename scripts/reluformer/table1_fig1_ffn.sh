#!/usr/bin/env bash
# ReLUFormer Table 1 and Figure 1: FFN (ReLU) vs key-value memory Softmax(XK^T)V, without
# and with LayerNorm, on IWSLT14 De-En, FFN hidden size 32..4096 (Table 1 = 1024, the
# IWSLT size).  Softmax attention everywhere; only the FFN changes.
#   scripts/reluformer/table1_fig1_ffn.sh DATA_DIR NUM_GPUS OUT_DIR
# DATA_DIR: data_prep/prepare_iwslt14_de_en.py output.  TYPES / SIZES select.
# Writes OUT_DIR/ffn_<type>_<size>/... and OUT_DIR/table1_fig1.tsv (tokenized BLEU; every
# row with sacreBLEU's 95% CI and the paired-bootstrap p-value against the standard FFN of
# the same size).  SEEDS="1 2 3" trains every row once per seed (OUT_DIR/ffn_<type>_<size>_seed2,
# ..., compared with ffn_standard_<size> of the same seed), adds a seed column and
# OUT_DIR/table1_fig1.mean.tsv (mean ± std).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fsa_init "ReLUFormer Table 1 / Figure 1; env: TYPES, SIZES, SEEDS, MAX_UPDATE, SMOKE" "$@"
TSV="$OUT/table1_fig1.tsv.partial"
rm -f "$TSV" "${TSV%.partial}" "${TSV%.tsv.partial}.mean.tsv"
declare -A PAPER=([standard.1024]=34.22 [softmax.1024]=33.08 [softmax_layernorm.1024]=34.21)
for type in ${TYPES:-standard softmax softmax_layernorm}; do
  for size in ${SIZES:-32 64 128 256 512 1024 2048 3072 4096}; do
    paper=${PAPER[$type.$size]:-fig. 1}
    for seed in $(fsa_seeds); do
      # against the standard FFN of the same size and seed
      fsa_use_seed "$seed" "ffn_${type}_$size" "ffn_standard_$size"
      rf_base_args iwslt14
      if fsa_train "$FSA_RUN" "$RF_TARGET_TOKENS" --arch softmax_transformer_iwslt_de_en "${CE[@]}" "${RF_ARGS[@]}" \
          "${FSA_SMOKE_MODEL[@]}" --ffn-type "$type" --encoder-ffn-embed-dim "$size" --decoder-ffn-embed-dim "$size"; then
        fsa_eval_row "$FSA_RUN" "$TSV" "ffn=$type" "hidden=$size" "${FSA_SEED_COL[@]}" "paper_tok_bleu=$paper"
      else
        fsa_result "$TSV" "ffn=$type" "hidden=$size" "${FSA_SEED_COL[@]}" "paper_tok_bleu=$paper" \
          "sacrebleu=diverged" "tok_bleu=diverged" "signature=-" "checkpoint=-"
      fi
    done
  done
done
fsa_publish "$TSV"
fsa_seed_summary "${TSV%.partial}"
