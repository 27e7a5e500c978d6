#!/usr/bin/env bash
# ReLA Table 2: parameters and speed relative to softmax on WMT14 En-De: training speed
# (words/s over 500 steps of ~25k target tokens) and decoding speed (newstest2014, batch
# size 1, beam 4).  Run it on one GPU (NUM_GPUS=1) as the paper (a GTX 1080 Ti).
# Decoding speed is generated tokens per second: the models have trained 500 updates, so
# their outputs' lengths differ by model (and run into fairseq's 200-token cap), which
# sentences/s would measure instead of the attention's cost (until 2026-11-27 it was
# sentences/s); decode_sent_per_s stays in the table.
#   scripts/rela/table2_speed.sh DATA_DIR NUM_GPUS OUT_DIR      (MODELS="softmax rela_g")
# Writes OUT_DIR/table2.tsv (params, train words/s, decode sentences/s, ratios to softmax).
MAX_UPDATE="${MAX_UPDATE:-500}"  # before common.sh, whose default is the 100k of Table 1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fsa_init "ReLA Table 2 (speed); env: MODELS, MAX_UPDATE (500), SMOKE" "$@"
rela_base_args
TSV="$OUT/table2.tsv.partial"
rm -f "$TSV" "${TSV%.partial}"
declare -A PAPER_TRAIN=([softmax]=1.00 [sparsemax]=0.26 [entmax15]=0.27 [rela_g]=0.93)
declare -A PAPER_DECODE=([softmax]=1.00 [sparsemax]=0.54 [entmax15]=0.49 [rela_g]=0.98)
declare -A PAPER_PARAMS=([softmax]=72.31M [sparsemax]=72.31M [entmax15]=72.31M [rela_g]=72.34M)
MODELS="${MODELS:-softmax sparsemax entmax15 rela_g}"
[[ " $MODELS " == *" softmax "* ]] || fsa_die "MODELS must include softmax (the speeds are relative to it)"
declare -A WPS DEC SENT PARAMS
for model in $MODELS; do
  # shellcheck disable=SC2207
  flags=($(rela_model_args "$model"))
  fsa_train "speed_$model" "$RELA_TARGET_TOKENS" "${flags[@]}" "${RELA_ARGS[@]}" "${FSA_SMOKE_MODEL[@]}" \
    --log-format json --log-interval "$( [[ $SMOKE == 1 ]] && echo 2 || echo 10 )" || fsa_die "speed_$model: training failed"
  log="$OUT/speed_$model/train.log"
  WPS[$model]=$("$PY" - "$log" <<'PY'
import json, statistics, sys
wps = []
for line in open(sys.argv[1]):
    i = line.find("{")
    if "train_inner" in line and i >= 0:
        wps.append(float(json.loads(line[i:])["wps"]))
print(statistics.median(wps[1:] or wps) if wps else "nan")
PY
)
  PARAMS[$model]=$(grep -o 'num. shared model params: [0-9,]*' "$log" | head -1 | grep -o '[0-9,]*$' | tr -d , || echo nan)
  fsa_generate "speed_$model" "$OUT/speed_$model/checkpoints/checkpoint_last.pt" test --beam 4 --lenpen 0.6 \
    --batch-size 1 > /dev/null
  DEC[$model]=$(grep -o '[0-9.]* tokens/s' "$OUT/speed_$model/gen.test.log" | tail -1 | cut -d' ' -f1)
  SENT[$model]=$(grep -o '[0-9.]* sentences/s' "$OUT/speed_$model/gen.test.log" | tail -1 | cut -d' ' -f1)
done
for model in $MODELS; do
  tr=$("$PY" -c "print(f'{$( echo "${WPS[$model]}" ) / ${WPS[softmax]}:.2f}')")
  de=$("$PY" -c "print(f'{${DEC[$model]} / ${DEC[softmax]}:.2f}')")
  fsa_result "$TSV" "model=$model" "params=${PARAMS[$model]}" "train_wps=${WPS[$model]}" "decode_tokens_per_s=${DEC[$model]}" \
    "decode_sent_per_s=${SENT[$model]}" \
    "train_speedup=$tr" "decode_speedup=$de" "paper_params=${PAPER_PARAMS[$model]:--}" \
    "paper_train_speedup=${PAPER_TRAIN[$model]:--}" "paper_decode_speedup=${PAPER_DECODE[$model]:--}"
done
fsa_publish "$TSV"
