# RHE ("Enlivening Redundant Heads in Multi-head Self-attention for MT") settings shared
# by its scripts (sourced).  Transformer base, 32k BPE, BLEU: the paper's "4-gram NIST
# BLEU" is mteval-v13a's on detokenized text, which sacreBLEU's 13a (our sacrebleu column)
# reproduces; tok_bleu is Moses-tokenized BLEU and does not.  Embeddings untied: the paper
# builds on OpenNMT (whose default ties nothing), and its Table 1 parameter counts (71.82M
# on NC11 En-De, 88.00M on WMT14 with 32k merges) leave room for three embedding matrices,
# not for one shared one (44.1M + 512 V: an 86k vocabulary for 88.00M).  The
# paper's training hyper-parameters are in an appendix our copy lacks: Adam (0.9, 0.98),
# LR 7e-4, inverse-sqrt with 4k warmup, label smoothing 0.1, 25k tokens per batch,
# MAX_UPDATE (default 100000), beam 4, length penalty 0.6 are our choices.
# Every row trains --arch sparse_transformer (Transformer base, softmax everywhere) with its
# own flags: the rhe_transformer_* presets switch LPEA and RHE on by default, and `--rhe`
# cannot be switched off, so on that preset the Transformer, +Rel_Pos, +Localness, +DEA
# and +LPEA rows trained LPEA + RHE models (fixed 2026-11-27).
# Uses the RHE flags and task: --task parse_annotated_translation --encoder-syntax-attention {dea,lpea} --rhe
# --rhe-gate {dynamic,0.1..0.5} --lpea-max-distance K --encoder-rel-pos-k 16 --encoder-rel-pos-values
# --encoder-localness, --prune-redundant-heads at generation (model override), and
# data_prep/parse_source.py (DATA_DIR/data-bin/<split>.<src>.{dep,tree}).
RHE_TARGET_TOKENS=25000
RHE_ARCH=sparse_transformer
# Rel_Pos baseline: Shaw et al. (2018)'s setting (clipping distance 16, keys and values),
# which the paper cites without changing; REL_POS_K overrides k (docs/rhe.md "Baselines")
REL_POS="--encoder-rel-pos-k ${REL_POS_K:-16} --encoder-rel-pos-values"
MAX_UPDATE="${MAX_UPDATE:-100000}"
rhe_check() {
  [[ -f "$FSA_REPO/data_prep/parse_source.py" ]] || fsa_die "data_prep/parse_source.py not found: the RHE scripts \
need the syntax branch (source parsing, --task parse_annotated_translation, the RHE flags)"
  fsa_require "import fairseq_sparse_attn.plugin
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.tasks import TASK_REGISTRY
assert 'rhe_transformer_wmt_en_de' in ARCH_MODEL_REGISTRY and 'parse_annotated_translation' in TASK_REGISTRY" \
    "the RHE preset rhe_transformer_wmt_en_de / --task parse_annotated_translation are not registered by $FSA_USER_DIR: \
the RHE scripts need the syntax branch"
}
rhe_base_args() {
  RHE_ARGS=(--task parse_annotated_translation --optimizer adam --adam-betas '(0.9,0.98)' --lr "${LR:-7e-4}"
            --lr-scheduler inverse_sqrt --warmup-updates 4000 --warmup-init-lr 1e-7 --dropout 0.1
            --attention-dropout 0.1 --criterion label_smoothed_cross_entropy --label-smoothing 0.1
            --max-update "$MAX_UPDATE" --save-interval-updates "${SAVE_INTERVAL:-1000}"
            --keep-interval-updates 5 --no-epoch-checkpoints --seed "${SEED:-1}")
  GEN_ARGS=(--task parse_annotated_translation --beam 4 --lenpen 0.6 --batch-size "${GEN_BATCH:-128}")
  SCORE_ARGS=()
  AVERAGE="${AVERAGE:-5}"
}
# rhe_rows TSV NAME=FLAGS|PAPER[|BASELINE] ... : train and evaluate each row.
# BASELINE: the row every BLEU of this row is compared with (sacreBLEU's 95% CI and the
# paired-bootstrap p-value; default $RHE_BASELINE); it must have run earlier in OUT_DIR.
# A row without one gets its own CI and no p-value (lib.sh's fsa_score).
# NAME@MODEL=FLAGS|PAPER: no training of its own; evaluates the model of row MODEL (trained
# here with FLAGS, or reused from OUT_DIR when MODEL's row ran with the same command) with
# test-time pruning of the redundant heads: --prune-redundant-heads is a test-time flag
# (given to fairseq-train it would prune while training), so it goes to fairseq-generate as
# --model-overrides "{'prune_redundant_heads': True}".
# SEEDS="1 2 3": every row once per seed (runs NAME_seedS, compared with BASELINE_seedS),
# and TSV's .mean.tsv with mean ± std (fsa_seed_summary, after fsa_publish).
rhe_rows() {
  local tsv=$1; shift
  local spec name rest flags paper model base seed run mrun
  for spec in "$@"; do
    name=${spec%%=*}; rest=${spec#*=}
    IFS='|' read -r flags paper base <<< "$rest"
    base=${base:-${RHE_BASELINE:-}}
    model=$name
    [[ "$name" == *@* ]] && { model=${name#*@}; name=${name%%@*}; }
    fsa_selected "$name" "${ROWS:-}" || continue
    # shellcheck disable=SC2206
    local f=($flags)
    for seed in $(fsa_seeds); do
      fsa_use_seed "$seed" "$name" "$base"  # SEED, run name, baseline of the same seed (if any)
      rhe_base_args
      run=$FSA_RUN; mrun=$(fsa_seed_name "$model" "$seed")
      if ! fsa_train "$mrun" "$RHE_TARGET_TOKENS" --arch "$RHE_ARCH" "${RHE_ARGS[@]}" "${FSA_SMOKE_MODEL[@]}" "${f[@]}"; then
        fsa_result "$tsv" "row=$name" "flags=$flags" "seed=$seed" "paper_bleu=$paper" "sacrebleu=diverged" "tok_bleu=diverged" "signature=-" "checkpoint=-"
      elif [[ "$model" == "$name" ]]; then
        fsa_eval_row "$run" "$tsv" "row=$name" "flags=$flags" "seed=$seed" "paper_bleu=$paper"
      else
        mkdir -p "$OUT/$run"
        local ckpt j
        ckpt=$(fsa_average "$mrun" "$AVERAGE")
        fsa_generate "$run" "$ckpt" test "${GEN_ARGS[@]}" --model-overrides "{'prune_redundant_heads': True}" > /dev/null
        fsa_score "$run" test "${SCORE_ARGS[@]}" > /dev/null
        j="$OUT/$run/bleu.test.json"
        fsa_result "$tsv" "row=$name" "flags=$flags --prune-redundant-heads (test time)" "seed=$seed" "paper_bleu=$paper" \
          "sacrebleu=$(fsa_json "$j" sacrebleu)" "tok_bleu=$(fsa_json "$j" tok_bleu)" \
          "sacrebleu_ci95=$(fsa_json "$j" significance.ci95)" "p_vs_baseline=$(fsa_json "$j" significance.p_value)" \
          "baseline=$( [[ -n "$FSA_BASELINE" && -f "$OUT/$FSA_BASELINE/gen.test.txt" ]] && echo "$FSA_BASELINE" || echo -)" \
          "signature=$(fsa_json "$j" signature)" "checkpoint=$ckpt"
      fi
    done
  done
}
