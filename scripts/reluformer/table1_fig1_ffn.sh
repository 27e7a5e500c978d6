#!/usr/bin/env bash
# ReLUFormer Table 1 and Figure 1: FFN (ReLU) vs key-value memory Softmax(XK^T)V, without
# and with LayerNorm, on IWSLT14 De-En, FFN hidden size 32..4096 (Table 1 = 1024, the
# IWSLT size).  Softmax attention everywhere; only the FFN changes.
#   scripts/reluformer/table1_fig1_ffn.sh DATA_DIR NUM_GPUS OUT_DIR
# DATA_DIR: data_prep/prepare_iwslt14_de_en.py output.  TYPES / SIZES select.
# Writes OUT_DIR/ffn_<type>_<size>/... and OUT_DIR/table1_fig1.tsv (tokenized BLEU).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fsa_init "ReLUFormer Table 1 / Figure 1; env: TYPES, SIZES, MAX_UPDATE, SMOKE" "$@"
rf_base_args iwslt14
TSV="$OUT/table1_fig1.tsv.partial"
rm -f "$TSV" "${TSV%.partial}"
declare -A PAPER=([standard.1024]=34.22 [softmax.1024]=33.08 [softmax_layernorm.1024]=34.21)
for type in ${TYPES:-standard softmax softmax_layernorm}; do
  for size in ${SIZES:-32 64 128 256 512 1024 2048 3072 4096}; do
    name="ffn_${type}_$size"
    FSA_BASELINE="ffn_standard_$size"  # against the standard FFN of the same size
    if fsa_train "$name" "$RF_TARGET_TOKENS" --arch softmax_transformer_iwslt_de_en "${CE[@]}" "${RF_ARGS[@]}" \
        "${FSA_SMOKE_MODEL[@]}" --ffn-type "$type" --encoder-ffn-embed-dim "$size" --decoder-ffn-embed-dim "$size"; then
      fsa_eval_row "$name" "$TSV" "ffn=$type" "hidden=$size" "paper_tok_bleu=${PAPER[$type.$size]:-fig. 1}"
    else
      fsa_result "$TSV" "ffn=$type" "hidden=$size" "paper_tok_bleu=${PAPER[$type.$size]:-fig. 1}" \
        "sacrebleu=diverged" "tok_bleu=diverged" "signature=-" "checkpoint=-"
    fi
  done
done
fsa_publish "$TSV"
