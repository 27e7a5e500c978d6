# ReLA (Zhang, Titov & Sennrich 2021) settings shared by its scripts (sourced).
# Transformer base, dropout 0.1 (residual and attention), Adam (0.9, 0.98), label smoothing
# 0.1, Vaswani et al.'s schedule with 4k warmup (fairseq inverse_sqrt peaking at 7e-4 =
# 512^-0.5 x 4000^-0.5), ~25k target tokens per batch, average of the last 5 checkpoints,
# beam 4, length penalty 0.6.  The paper does not give the number of steps: MAX_UPDATE
# (default 100000) sets it.  Embeddings: the target's tied to the output layer, the
# source's apart (the paper's 72.31M parameters; its code, zero/models/transformer_rela.py,
# ties only those): --share-decoder-input-output-embed.  Until 2026-11-27 the scripts tied
# all three on a joined dictionary (62M parameters).  fairseq's --lenpen 0.6 divides by
# length^0.6 where the paper's code uses GNMT's ((5 + length) / 6)^0.6: a choice.
RELA_TARGET_TOKENS=25000
MAX_UPDATE="${MAX_UPDATE:-100000}"
rela_base_args() {
  RELA_ARGS=(--optimizer adam --adam-betas '(0.9,0.98)' --lr 7e-4 --lr-scheduler inverse_sqrt
             --warmup-updates 4000 --warmup-init-lr 1e-7 --dropout 0.1 --attention-dropout 0.1
             --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --share-decoder-input-output-embed
             --max-update "$MAX_UPDATE" --save-interval-updates "${SAVE_INTERVAL:-1000}"
             --keep-interval-updates 5 --no-epoch-checkpoints --seed "${SEED:-1}")
  GEN_ARGS=(--beam 4 --lenpen 0.6 --batch-size "${GEN_BATCH:-128}")
  SCORE_ARGS=()
}
# model name -> flags
rela_model_args() {
  case $1 in
    softmax)    echo --arch softmax_transformer_wmt_en_de ;;
    sparsemax)  echo --arch sparsemax_transformer_wmt_en_de ;;
    entmax15)   echo --arch entmax15_transformer_wmt_en_de ;;
    rela_g)     echo --arch rela_transformer_wmt_en_de ;;
    rela_i)     echo --arch rela_transformer_wmt_en_de --attn-output-norm rmsnorm_i ;;
    *) fsa_die "unknown model '$1' (softmax sparsemax entmax15 rela_g rela_i)" ;;
  esac
}
