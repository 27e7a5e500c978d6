#!/usr/bin/env bash
# ReLA §5.2 analyses of Table 1's models (Zhang, Titov & Sennrich 2021) on the WMT14 En-De
# test set: sparsity rate (Fig. 3), AER of the cross attention's normal α and shifted α[1:]
# (Fig. 4, Table 5: AoL, AoH), head diversity at each re-normalization temperature (Fig. 5,
# Table 6), null rate, and null rate on the hallucinated test set (Fig. 6); with FILTER=1,
# the training pairs ranked by null rate (App. B).
#   scripts/rela/analyses.sh DATA_DIR NUM_GPUS OUT_DIR
# DATA_DIR: data_prep/prepare_wmt14_en_de.py's output; OUT_DIR: table1.sh's (the models are
# its rows' checkpoints, averaged over the last 5 as Table 1 evaluates them, whatever
# NUM_GPUS table1.sh ran with; a row not trained there is trained first, with table1.sh's
# flags).  ROWS (default "1 2 3 7": softmax, sparsemax, 1.5-entmax, ReLA-g, the models of
# the paper's figures).  SEEDS="1 2 3" (as table1.sh: runs rowN_seedS): every seed's model
# is analysed and the tables give the mean over seeds (the paper averages three runs; the
# figures have one curve per seed); a seed whose training diverged is left out, with a note
# (the tables' runs column counts the seeds averaged).
# ALIGN_DIR: data_prep/prepare_europarl_de_en_align.py's output (ALIGN_DIR/gold/test.talp,
# the RWTH De-En gold alignments the paper scores, and their sentences ALIGN_DIR/tok/test.de,
# .en); without it the AER is left out (said on stderr).  The gold sentences are encoded with
# the WMT14 data's BPE codes (DATA_DIR/bpe/codes) and their links reversed (the gold is de-en,
# the models en->de).  The WMT14 models are cased, so the sentences are read as released
# (ALIGN_DIR/tok_cased/test.*; data prepared before 2026-11-27 has only the lowercased
# ALIGN_DIR/tok/test.*, Kobayashi et al.'s setting, taken then with a note).  ALIGN_TEXT_DIR
# (test.de, test.en: the same tokenized sentences) overrides.
# MAX_SENTENCES: analyse the first N test pairs only (all 3,003 by default).
# Writes OUT_DIR/analyses/<run>/{stats,align,hallucination[,filter]}/ (fsa-analyze's
# files), OUT_DIR/analyses/figures/<figure>/curves.png (fsa-analyze curves: the models per
# layer on the same axes; Fig. 6 is ReLA-g's, its hallucinated-set curve of the cross
# attention in <run>/hallucination/), and OUT_DIR/analyses/table5.tsv (AER in %),
# table6.tsv and fig4.tsv (per layer: the layer attention's AER and the best head's, the
# figure's dashed and solid curves; fig4_aer_*/curves.png draws the layer attention's) from
# tools/rela_tables.py, each the mean over seeds (the figures draw one curve per seed).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fsa_init "ReLA §5.2 analyses (Figs. 3-6, Tables 5-6); env: ROWS, ALIGN_DIR, ALIGN_TEXT_DIR, MAX_SENTENCES, FILTER, SMOKE" "$@"
FSA_ANALYZE="${FSA_ANALYZE:-fsa-analyze}"
command -v "$FSA_ANALYZE" > /dev/null 2>&1 || fsa_die "'$FSA_ANALYZE' not found: install the plugin \
(make install, or pip install -e .) or set FSA_ANALYZE"
[[ "$SRC" == en && "$TGT" == de ]] || fsa_die "the data is $SRC-$TGT: ReLA's analyses are of the En->De models (Table 1)"
ANA="$OUT/analyses"
mkdir -p "$ANA/figures"

# alignment input: the gold sentences as text, encoded with this data's BPE codes
align_input=()
if [[ -n "${ALIGN_DIR:-}" ]]; then
  GOLD="$ALIGN_DIR/gold/test.talp"
  TEXT="${ALIGN_TEXT_DIR:-$ALIGN_DIR/tok_cased}"
  if [[ -z "${ALIGN_TEXT_DIR:-}" && ! -d "$TEXT" ]]; then
    TEXT="$ALIGN_DIR/tok"
    fsa_log "note: $ALIGN_DIR has no tok_cased/ (prepared before 2026-11-27): the gold sentences are read lowercased from $TEXT, the models are cased"
  fi
  CODES="$DATA/bpe/codes"
  for f in "$GOLD" "$TEXT/test.en" "$TEXT/test.de" "$CODES"; do
    [[ -f "$f" ]] || fsa_die "$f not found (ALIGN_DIR: prepare_europarl_de_en_align.py's output; DATA_DIR: prepare_wmt14_en_de.py's, with bpe/codes)"
  done
  align_input=(--raw-source "$TEXT/test.en" --raw-target "$TEXT/test.de" --bpe-codes "$CODES"
               --gold "$GOLD" --reverse-links)
else
  fsa_log "ALIGN_DIR not set: the AER (Fig. 4, Table 5) is left out"
fi
limit=()
[[ -n "${MAX_SENTENCES:-}" ]] && limit=(--max-sentences "$MAX_SENTENCES")
[[ "$SMOKE" == "1" ]] && limit=(--max-sentences "${MAX_SENTENCES:-8}")
device=()
[[ "$NGPUS" -eq 0 ]] && device=(--device cpu)

# row|name|flags: table1.sh's rows (the same flags, so a row trained there is reused)
declare -A MODEL=(
  [1]="softmax|--arch softmax_transformer_wmt_en_de"
  [2]="sparsemax|--arch sparsemax_transformer_wmt_en_de"
  [3]="1.5-entmax|--arch entmax15_transformer_wmt_en_de"
  [7]="ReLA-g|--arch rela_transformer_wmt_en_de"
)
for row in ${ROWS:-1 2 3 7}; do
  [[ -n "${MODEL[$row]:-}" ]] || fsa_die "ROWS: row $row is not one of the analysed models (1 softmax, 2 sparsemax, 3 1.5-entmax, 7 ReLA-g)"
done
labels=() relag=()
for row in ${ROWS:-1 2 3 7}; do
 IFS='|' read -r name flags <<< "${MODEL[$row]}"
 # shellcheck disable=SC2206
 model=($flags)
 for seed in $(fsa_seeds); do
  fsa_use_seed "$seed" "row$row"
  rela_base_args
  run=$FSA_RUN
  # table1.sh with SEEDS names its runs rowN_seedS even for one seed analysed here
  if [[ ! -e "$OUT/$run" && -f "$OUT/row${row}_seed$seed/.trained" ]]; then run="row${row}_seed$seed"; fi
  if [[ -f "$OUT/$run/.trained" ]]; then  # table1.sh's model, on any number of GPUs
    grep -q -- "${model[*]} " "$OUT/$run/train.cmd" \
      || fsa_die "$OUT/$run was not trained as row $row ($name: ${model[*]}; see its train.cmd)"
    fsa_log "$run ($name): trained already ($OUT/$run)"
  elif [[ -f "$OUT/$run/train.log" ]] && grep -q "training diverged" "$OUT/$run/train.log"; then
    fsa_log "$run ($name): diverged in training (see $OUT/$run/train.log): left out of the analyses"
    continue
  elif ! fsa_train "$run" "$RELA_TARGET_TOKENS" "${model[@]}" "${RELA_ARGS[@]}" "${FSA_SMOKE_MODEL[@]}"; then
    fsa_log "$run ($name): training diverged: left out of the analyses"
    continue
  fi
  ckpt=$(fsa_average "$run" "${AVERAGE:-5}")
  d="$ANA/$run"
  mkdir -p "$d"
  common=(--path "$ckpt" "${device[@]}" --no-progress)
  fsa_log "$run ($name): stats (sparsity, null rate, head JS at each tau)"
  "$FSA_ANALYZE" stats "$DATA_BIN" "${common[@]}" "${limit[@]}" --no-ffn --output-dir "$d/stats" \
    > "$d/stats.log" 2>&1 || fsa_die "fsa-analyze stats failed (see $d/stats.log)"
  if [[ ${#align_input[@]} -gt 0 ]]; then
    fsa_log "$run ($name): align (AER of alpha and alpha[1:], every layer and head)"
    "$FSA_ANALYZE" align "$DATA_BIN" "${common[@]}" "${align_input[@]}" -s en -t de --method weights \
      --setting awo awi --no-write-alignments --output-dir "$d/align" > "$d/align.log" 2>&1 \
      || fsa_die "fsa-analyze align failed (see $d/align.log)"
  fi
  if [[ "$row" == 7 ]]; then  # null attention: ReLA only (softmax-based rows have none)
    fsa_log "$run ($name): hallucination (null rate, real vs shuffled targets)"
    "$FSA_ANALYZE" hallucination "$DATA_BIN" "${common[@]}" "${limit[@]}" --seed "$seed" \
      --output-dir "$d/hallucination" > "$d/hallucination.log" 2>&1 \
      || fsa_die "fsa-analyze hallucination failed (see $d/hallucination.log)"
    if [[ "${FILTER:-0}" == "1" ]]; then
      fsa_log "$run ($name): filter (training pairs by null rate, the first ${FILTER_SENTENCES:-100000})"
      "$FSA_ANALYZE" filter "$DATA_BIN" "${common[@]}" --split train --max-sentences "${FILTER_SENTENCES:-100000}" \
        --k "${FILTER_K:-100}" --output-dir "$d/filter" > "$d/filter.log" 2>&1 \
        || fsa_die "fsa-analyze filter failed (see $d/filter.log)"
    fi
  fi
  labels+=("$name=$d")
  if [[ "$row" == 7 ]]; then
    if [[ $(fsa_seeds | wc -w) -gt 1 ]]; then relag+=("$name seed $seed=$d"); else relag+=("$name=$d"); fi
  fi
 done
done

[[ ${#labels[@]} -gt 0 ]] || fsa_die "no model to analyse (every run diverged)"
# the figures: every model per layer on the same axes
curves() {  # NAME ARGS...
  local name=$1; shift
  "$FSA_ANALYZE" curves "$@" --output-dir "$ANA/figures/$name" > "$ANA/figures/$name.log" 2>&1 \
    || fsa_die "fsa-analyze curves failed (see $ANA/figures/$name.log)"
}
# one curve per run: "model" with one seed, "model seed S" with several
stats_runs=() align_runs=() relag_stats=()
several=$(( $(fsa_seeds | wc -w) > 1 ))
for spec in "${labels[@]}"; do
  label=${spec%%=*}
  if [[ $several == 1 ]]; then label="$label seed $(basename "${spec#*=}" | sed 's/.*_seed//')"; fi
  stats_runs+=("$label=${spec#*=}/stats/stats.json")
  if [[ -f "${spec#*=}/align/align.json" ]]; then align_runs+=("$label=${spec#*=}/align/align.json"); fi
done
for spec in "${relag[@]}"; do relag_stats+=("${spec%%=*}=${spec#*=}/stats/stats.json"); done
for kind in encoder_self decoder_self cross; do
  curves "fig3_sparsity_$kind" "${stats_runs[@]}" --kind "$kind" --metrics sparsity
  curves "fig5_js_$kind" "${stats_runs[@]}" --kind "$kind" --metrics js
  if [[ ${#relag_stats[@]} -gt 0 ]]; then
    curves "fig6_null_rate_$kind" "${relag_stats[@]}" --kind "$kind" --metrics null_rate
  fi
done
if [[ ${#align_runs[@]} -gt 0 ]]; then
  for setting in awo awi; do
    curves "fig4_aer_$setting" "${align_runs[@]}" --metrics aer --align-method weights --align-setting "$setting"
  done
fi
"$PY" -m fairseq_sparse_attn.tools.rela_tables --out "$ANA" "${labels[@]}" > "$ANA/tables.log" 2>&1 \
  || fsa_die "the tables failed (see $ANA/tables.log)"
fsa_log "Table 5: $ANA/table5.tsv, Table 6: $ANA/table6.tsv, figures: $ANA/figures/"
