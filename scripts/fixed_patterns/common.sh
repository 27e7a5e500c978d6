# Fixed encoder self-attention patterns (Raganato, Scherrer & Tiedemann 2020): settings
# shared by the scripts (sourced).  Transformer base (the paper trains with OpenNMT-py's
# base settings and does not list steps or learning rate): Adam (0.9, 0.98), inverse-sqrt
# schedule, 4k warmup, LR 7e-4, label smoothing 0.1, 4k tokens per batch (1k tokens,
# dropout 0.3 and tied embeddings in the low-resource setting: the paper's Sec. 4.2
# adaptations, so the standard setting ties nothing), MAX_UPDATE (default 100000), beam 5,
# sacreBLEU.  Tied embeddings: --share-all-embeddings with one joined dictionary, else
# (Korean-English: independent BPE) the decoder's input and output embeddings.  The
# low-resource rows train the base presets with those flags rather than the
# *_iwslt_de_en fixed-pattern presets, which tie all embeddings and so refuse Ko-En's two
# dictionaries (fixed 2026-11-27, with the standard rows' tying).
FP_TARGET_TOKENS=4096
MAX_UPDATE="${MAX_UPDATE:-100000}"
fp_base_args() {
  FP_ARGS=(--optimizer adam --adam-betas '(0.9,0.98)' --lr "${LR:-7e-4}" --lr-scheduler inverse_sqrt
           --warmup-updates 4000 --warmup-init-lr 1e-7 --attention-dropout 0.1
           --criterion label_smoothed_cross_entropy --label-smoothing 0.1
           --max-update "$MAX_UPDATE" --save-interval-updates "${SAVE_INTERVAL:-1000}"
           --keep-interval-updates 5 --no-epoch-checkpoints --seed "${SEED:-1}")
  GEN_ARGS=(--beam 5 --batch-size "${GEN_BATCH:-128}")
  SCORE_ARGS=()
  AVERAGE="${AVERAGE:-1}"  # the paper does not average checkpoints
  # smoke: the tiny model keeps 8 encoder heads (7 fixed + 1 learned, head size 8)
  FP_SMOKE=()
  [[ "$SMOKE" == "1" ]] && FP_SMOKE=("${FSA_SMOKE_MODEL[@]}" --encoder-attention-heads 8)
  true
}
# fp_require_merges N: the data's BPE has N merge operations (Sec. 4.2: 30,000 for the
# low-resource tasks), as data_prep recorded the number it asked for (the stamp
# DATA_ROOT/.prepare_*.json, "bpe_merges"), else counted in its codes (DATA_ROOT/bpe/codes,
# or codes.SRC and codes.TGT when learnt per language: Ko-En; subword-nmt may learn fewer when
# the data runs out of pairs, so the stamp is read first).  Other data, or data whose BPE
# cannot be told, is refused in one line before any training (prepare_iwslt14_de_en.py's
# default is fairseq's 10,000, which ReLUFormer's scripts use).  MERGES_OK=1 runs anyway;
# SMOKE skips the check (its data is a small slice).
fp_require_merges() {
  local want=$1 f n stamp found=0
  [[ "$SMOKE" == "1" || "${MERGES_OK:-0}" == "1" ]] && return 0
  for stamp in "$DATA_ROOT"/.prepare_*.json; do
    [[ -f "$stamp" ]] || continue
    n=$("$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); print((d.get("options") or d).get("bpe_merges") or "")' "$stamp")
    [[ -z "$n" ]] && continue
    [[ "$n" -eq "$want" ]] || fsa_die "$stamp: the data was prepared with $n BPE merges; Raganato et al. used $want \
(Sec. 4.2): prepare it with --bpe-merges $want (e.g. python data_prep/prepare_iwslt14_de_en.py --bpe-merges $want), or MERGES_OK=1 to run anyway"
    return 0
  done
  for f in "$DATA_ROOT/bpe/codes" "$DATA_ROOT/bpe/codes.$SRC" "$DATA_ROOT/bpe/codes.$TGT"; do
    [[ -f "$f" ]] || continue
    found=1
    n=$(grep -vc '^#version' "$f" || true)
    [[ "$n" -eq "$want" ]] || fsa_die "$f has $n BPE merges; Raganato et al. used $want (Sec. 4.2): prepare \
the data with --bpe-merges $want (e.g. python data_prep/prepare_iwslt14_de_en.py --bpe-merges $want), or MERGES_OK=1 to run anyway"
  done
  [[ $found == 1 ]] || fsa_die "$DATA_ROOT: no data_prep stamp (.prepare_*.json) and no bpe/codes: cannot tell its BPE \
merges (Raganato et al. used $want, Sec. 4.2); prepare it with data_prep/prepare_*.py --bpe-merges $want, or MERGES_OK=1 to run anyway"
}
# fp_config_args CONFIG [low]: encoder attention configuration (docs/fixed_patterns.md)
fp_config_args() {
  local low_flags=()
  # the low-resource adaptations: dropout 0.3 and tied embeddings (1k-token batches: FP_TARGET)
  # shellcheck disable=SC2207  # fsa_share_args prints flags: split into words on purpose
  [[ "${2:-}" == low ]] && low_flags=(--dropout 0.3 $(fsa_share_args))
  case $1 in
    8L)      echo --arch softmax_transformer_wmt_en_de "${low_flags[@]}" ;;
    7Ftoken) echo --arch fixed_pattern_transformer_wmt_en_de "${low_flags[@]}" ;;
    7Fword)  echo --arch fixed_pattern_word_transformer_wmt_en_de "${low_flags[@]}" ;;
    1L)      echo --arch softmax_transformer_wmt_en_de --encoder-attention-heads 1 "${low_flags[@]}" ;;
    8F)      echo --arch fixed_pattern_transformer_wmt_en_de --encoder-fixed-patterns 8F "${low_flags[@]}" ;;
    *) fsa_die "unknown configuration '$1' (8L 7Ftoken 7Fword 1L 8F)" ;;
  esac
}
# fp_layer_args E+D
fp_layer_args() {
  [[ "$1" =~ ^([0-9]+)\+([0-9]+)$ ]] || fsa_die "layers must look like 6+1, got '$1'"
  echo --encoder-layers "${BASH_REMATCH[1]}" --decoder-layers "${BASH_REMATCH[2]}"
}
# fp_run NAME TSV PAPER_TABLE CONFIG LAYERS [low]: train (or reuse) and evaluate one model
# (call fsa_use_seed, then fp_base_args, before it: the row gets the seed column FSA_SEED_COL)
fp_run() {
  local name=$1 tsv=$2 table=$3 config=$4 layers=$5 low=${6:-}
  local flags
  # shellcheck disable=SC2207
  flags=($(fp_config_args "$config" "$low") $(fp_layer_args "$layers"))
  if fsa_train "$name" "${FP_TARGET:-$FP_TARGET_TOKENS}" "${FP_ARGS[@]}" "${FP_SMOKE[@]}" "${flags[@]}"; then
    fsa_eval_row "$name" "$tsv" "config=$config" "layers=$layers" "${FSA_SEED_COL[@]}" "paper=see $table"
  else
    fsa_result "$tsv" "config=$config" "layers=$layers" "${FSA_SEED_COL[@]}" "paper=see $table" "sacrebleu=diverged" \
      "tok_bleu=diverged" "signature=-" "checkpoint=-"
  fi
}
