#!/usr/bin/env bash
# Raganato et al. (2020) Table 4: mask one encoder head (the same index in every layer)
# at test time; BLEU change against the full 7F_token+1L model, 6+1 and 6+6 layers.
# Calls scripts/fixed_patterns/head_ablation.py on each model.
#   scripts/fixed_patterns/table4_ablation.sh DATA_DIR NUM_GPUS OUT_DIR
# Trains 7Ftoken_6+1 and 7Ftoken_6+6 into OUT_DIR unless table1.sh already did (same
# OUT_DIR).  LAYERS, CONFIG (7Ftoken | 7Fword) and HEADS="0,7" select.  LOW=1: the
# low-resource setting of Sec. 4.2 (the paper's Vi->En half: 1k-token batches, dropout
# 0.3, tied embeddings; models low_<config>_<layers>).
# Writes OUT_DIR/ablation_<config>_<layers>/{gen.*.txt,ablation.tsv} and OUT_DIR/table4.tsv.
# SEEDS="1 2 3" ablates the model of every seed (<config>_<layers>_seedS, table1.sh's with
# the same SEEDS; each masked head against the all-heads model of its seed) into
# OUT_DIR/ablation_<config>_<layers>_seedS, adds a seed column and OUT_DIR/table4.mean.tsv
# (mean ± std of BLEU and of the BLEU change per masked head): a head's effect that one
# trained model shows may not hold for another.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fsa_init "Raganato et al. Table 4; env: CONFIG, LAYERS, HEADS, LOW, SEEDS, MAX_UPDATE, MERGES_OK, SMOKE" "$@"
CONFIG="${CONFIG:-7Ftoken}"
low="" prefix=""
[[ "${LOW:-0}" == "1" ]] && { low=low; prefix=low_; FP_TARGET=1000; fp_require_merges 30000; }
TSV="$OUT/table4.tsv.partial"
rm -f "$TSV" "${TSV%.partial}" "${TSV%.tsv.partial}.mean.tsv"
for layers in ${LAYERS:-6+1 6+6}; do
  for seed in $(fsa_seeds); do
    fsa_use_seed "$seed" "${prefix}${CONFIG}_$layers"
    fp_base_args
    name=$FSA_RUN
    if [[ ! -f "$OUT/$name/.trained" ]]; then
      fp_run "$name" "$OUT/$name.eval.tsv" "Table 4" "$CONFIG" "$layers" $low
    fi
    ckpt=$(fsa_average "$name" "$AVERAGE")
    dir="$OUT/ablation_$name"
    gen=("${GEN_ARGS[@]}" --remove-bpe --tokenizer moses --source-lang "$SRC" --target-lang "$TGT")
    [[ "$NGPUS" -eq 0 ]] && gen+=(--cpu)
    gen+=("${FSA_SMOKE_GEN[@]}")
    heads=()
    [[ -n "${HEADS:-}" ]] && heads=(--heads "$HEADS")
    "$PY" "$FSA_REPO/scripts/fixed_patterns/head_ablation.py" "$DATA_BIN" --path "$ckpt" --out "$dir" \
      "${heads[@]}" -- "${gen[@]}" > "$dir.log" 2>&1 || fsa_die "head ablation of $name failed (see $dir.log)"
    tail -n +2 "$dir/ablation.tsv" | while IFS=$'\t' read -r head pattern bleu delta ci p; do
      fsa_result "$TSV" "config=$CONFIG" "layers=$layers" "${FSA_SEED_COL[@]}" "masked_head=$head" "pattern=$pattern" \
        "sacrebleu=$bleu" "sacrebleu_ci95=$ci" "delta=$delta" "p_vs_all_heads=$p" "paper=see Table 4"
    done
  done
done
fsa_publish "$TSV"
fsa_seed_summary "${TSV%.partial}" delta
