#!/usr/bin/env bash
# RHE Table 1: Transformer, +Rel_Pos, +Localness, +DEA, +DEA+RHE, +LPEA, +LPEA+RHE on the
# first encoder layer; WMT16 NC v11 En-De, WMT14 En-De, WMT16 NC v11 En-Cs.
#   TASK=nc11_en_de scripts/rhe/table1.sh DATA_DIR NUM_GPUS OUT_DIR   (also wmt14_en_de, nc11_en_cs)
# DATA_DIR: data_prep/prepare_<TASK>.py output, parsed with data_prep/parse_source.py.
# ROWS selects; SEEDS="1 2 3" trains every row per seed (+ table1.mean.tsv, mean ± std).
# Writes OUT_DIR/table1.tsv (compare sacrebleu: the paper reports NIST BLEU, mteval-v13a); every row has
# sacreBLEU's 95% CI and the paired-bootstrap p-value against the Transformer row.
# Needs the RHE flags (another branch): see scripts/rhe/common.sh.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fsa_init "RHE Table 1; env: TASK (nc11_en_de | wmt14_en_de | nc11_en_cs), ROWS, K, REL_POS_K, MAX_UPDATE, SMOKE" "$@"
rhe_check
rhe_base_args
TASK="${TASK:-nc11_en_de}"
K="${K:-6}"
case $TASK in
  nc11_en_de)  P=(25.28 25.49 25.53 25.75 25.98 25.90 26.28) ;;
  wmt14_en_de) P=(27.31 27.53 27.61 27.71 27.82 27.96 28.27) ;;
  nc11_en_cs)  P=(15.46 15.60 15.65 15.84 15.96 15.97 16.27) ;;
  *) fsa_die "TASK must be nc11_en_de, wmt14_en_de or nc11_en_cs" ;;
esac
fsa_check_selection ROWS "${ROWS:-}" transformer rel_pos localness dea dea_rhe lpea lpea_rhe
rm -f "$OUT/table1.tsv" "$OUT/table1.tsv.partial"
RHE_BASELINE=transformer  # every row against the Transformer row (paired bootstrap, same seed)
rhe_rows "$OUT/table1.tsv.partial" \
  "transformer=|${P[0]}" \
  "rel_pos=$REL_POS|${P[1]}" \
  "localness=--encoder-localness|${P[2]}" \
  "dea=--encoder-syntax-attention dea|${P[3]}" \
  "dea_rhe=--encoder-syntax-attention dea --rhe --rhe-gate dynamic|${P[4]}" \
  "lpea=--encoder-syntax-attention lpea --lpea-max-distance $K|${P[5]}" \
  "lpea_rhe=--encoder-syntax-attention lpea --lpea-max-distance $K --rhe --rhe-gate dynamic|${P[6]}"
fsa_publish "$OUT/table1.tsv.partial"
fsa_seed_summary "$OUT/table1.tsv"
