#!/usr/bin/env bash
# RHE Table 2 (RHE on Rel_Pos / Localness; pruning the identified redundant heads),
# Figure 4 (dynamic gate vs fixed gates 0.1..0.5) and Table 3 (clipping distance k of
# LPEA, 0..6), all on WMT16 NC v11 En-De.
#   scripts/rhe/table2_gate_k.sh DATA_DIR NUM_GPUS OUT_DIR
# DATA_DIR: prepare_nc11_en_de.py output parsed with data_prep/parse_source.py.
# PARTS="table2 gate k" and ROWS select; SEEDS="1 2 3" trains every row per seed (+ .mean.tsv).
# Writes OUT_DIR/{table2,gate,k}.tsv; 95% CI and paired-bootstrap p-value of each row against
# its baseline: X_rhe vs X, the pruned model vs the unpruned one, fixed gates vs the dynamic
# gate, every k vs k=K.
# Needs the RHE flags (another branch): see scripts/rhe/common.sh.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fsa_init "RHE Table 2 / Fig. 4 / Table 3; env: PARTS, ROWS, K, REL_POS_K, MAX_UPDATE, SMOKE" "$@"
rhe_check
rhe_base_args
K="${K:-6}"
PARTS="${PARTS:-table2 gate k}"
fsa_check_selection PARTS "$PARTS" table2 gate k
# shellcheck disable=SC2046
fsa_check_selection ROWS "${ROWS:-}" rel_pos rel_pos_rhe localness localness_rhe lpea_rhe lpea_rhe_pruned \
  $(printf 'gate_%s ' dynamic 0.1 0.2 0.3 0.4 0.5) $(printf 'k%s ' "$K" $(seq 0 6))
if fsa_selected table2 "$PARTS"; then
  rm -f "$OUT/table2.tsv" "$OUT/table2.tsv.partial"
  # the paper gives differences: RHE lifts Rel_Pos by +0.28 and Localness by +0.20;
  # pruning the redundant heads (of the lpea_rhe model, at test time) costs 0.1 BLEU
  rhe_rows "$OUT/table2.tsv.partial" \
    "rel_pos=$REL_POS|25.49" \
    "rel_pos_rhe=$REL_POS --rhe --rhe-gate dynamic|25.49+0.28|rel_pos" \
    "localness=--encoder-localness|25.53" \
    "localness_rhe=--encoder-localness --rhe --rhe-gate dynamic|25.53+0.20|localness" \
    "lpea_rhe=--encoder-syntax-attention lpea --lpea-max-distance $K --rhe --rhe-gate dynamic|26.28" \
    "lpea_rhe_pruned@lpea_rhe=--encoder-syntax-attention lpea --lpea-max-distance $K --rhe --rhe-gate dynamic|26.28-0.1|lpea_rhe"
fi
if fsa_selected gate "$PARTS"; then
  rm -f "$OUT/gate.tsv" "$OUT/gate.tsv.partial"
  rows=()
  for g in dynamic 0.1 0.2 0.3 0.4 0.5; do
    rows+=("gate_$g=--encoder-syntax-attention lpea --lpea-max-distance $K --rhe --rhe-gate $g|fig. 4|gate_dynamic")
  done
  rhe_rows "$OUT/gate.tsv.partial" "${rows[@]}"
fi
if fsa_selected k "$PARTS"; then
  rm -f "$OUT/k.tsv" "$OUT/k.tsv.partial"
  rows=()
  # k=$K (the distance every other part uses) first: every k is compared with it
  for k in "$K" $(seq 0 6); do
    [[ "$k" == "$K" && ${#rows[@]} -gt 0 ]] && continue
    rows+=("k$k=--encoder-syntax-attention lpea --lpea-max-distance $k --rhe --rhe-gate dynamic|Table 3|k$K")
  done
  rhe_rows "$OUT/k.tsv.partial" "${rows[@]}"
fi
for t in table2 gate k; do fsa_publish "$OUT/$t.tsv.partial"; fsa_seed_summary "$OUT/$t.tsv"; done
