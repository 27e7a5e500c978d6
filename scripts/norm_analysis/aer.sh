#!/usr/bin/env bash
# Kobayashi et al. (2020) Table 3: alignment error rate of attention weights vs norms
# ||alpha f(x)||, alignment with output (AWO) / input (AWI), per layer and head, on
# Europarl v7 De-En with the RWTH gold alignments; transformer_iwslt_de_en, five seeds.
#   scripts/norm_analysis/aer.sh DATA_DIR NUM_GPUS OUT_DIR
# DATA_DIR: data_prep/prepare_europarl_de_en_align.py output (DATA_DIR/gold/test.talp).
# Uses the analysis CLI: fsa-analyze align DATA_BIN --path CKPT --gold GOLD.talp
#   --method weights norms --setting awo awi --output-dir DIR   (writes DIR/align.tsv: method,
#   setting, layer, head ("layer" = the layer-level alignment), aer, precision, recall, ...),
# fsa-analyze norms --kinds cross (the mean ||alpha f(x)|| per head), and fsa-analyze
# aer-table over the seeds: Table 3's rows (layer mean, best layer, layer / head with the
# highest average ||alpha f(x)||), mean and SD.
# Words: by default the test text is read as text (DATA_DIR/tok/test.*, the tokenized
# and lowercased gold sentences) and segmented with the BPE codes (DATA_DIR/bpe/codes.LANG
# or the joint DATA_DIR/bpe/codes), so every piece keeps its "@@" and the word indices
# match the gold. ALIGN_INPUT=binarized scores the data-bin split instead: its pieces that
# became <unk> lost their "@@", so fsa-analyze leaves those sentences out (and says how many).
# Hyper-parameters: the paper's Table 5 (lr 1e-3, warmup 4000 from 1e-7, batches of at most
# 80 sentences and 4000 tokens x update-freq 8 x 2 GPUs, 100 epochs, dropout 0.1, label
# smoothing 0.1, no weight decay or clipping) and App. E.1's checkpoint: the highest BLEU on
# the validation set (fairseq's --eval-bleu at every validation: beam 5, BPE removed,
# tokenized BLEU; our choices, the paper does not say how it decoded).  MAX_TOKENS overrides
# the 4000.  The data must be De->En: the gold alignments are de-en.
# SEEDS (default "1 2 3 4 5") selects.  Writes OUT_DIR/seed<S>/..., OUT_DIR/aer.tsv (every
# layer and head of every seed) and OUT_DIR/aer_table.tsv (Table 3's rows).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
AER_MAX_TOKENS=${MAX_TOKENS:-4000}  # Table 5's; fsa_init sets its own default (4096)
fsa_init "Kobayashi et al. Table 3; env: SEEDS, MAX_EPOCH, MAX_TOKENS, SMOKE" "$@"
[[ "$SRC" == de && "$TGT" == en ]] \
  || fsa_die "the data is $SRC-$TGT: Table 3 is De->En, and the gold alignments (DATA_DIR/gold/test.talp) are de-en"
FSA_ANALYZE="${FSA_ANALYZE:-fsa-analyze}"
command -v "$FSA_ANALYZE" > /dev/null 2>&1 || fsa_die "'$FSA_ANALYZE' not found: install the plugin \
(make install, or pip install -e .) or set FSA_ANALYZE"
GOLD="$DATA/gold/test.talp"
[[ -f "$GOLD" ]] || fsa_die "$GOLD not found: prepare DATA_DIR with data_prep/prepare_europarl_de_en_align.py"
MAX_TOKENS=$AER_MAX_TOKENS
[[ "$SMOKE" == "1" ]] && MAX_TOKENS=1024
TSV="$OUT/aer.tsv.partial"
rm -f "$TSV" "${TSV%.partial}"
case "${ALIGN_INPUT:-text}" in
  text)
    if [[ -f "$DATA/bpe/codes.$SRC" ]]; then
      codes=(--bpe-codes "$DATA/bpe/codes.$SRC" --target-bpe-codes "$DATA/bpe/codes.$TGT")
    else
      codes=(--bpe-codes "$DATA/bpe/codes")
    fi
    for f in "$DATA/tok/test.$SRC" "$DATA/tok/test.$TGT" "${codes[1]}"; do
      [[ -f "$f" ]] || fsa_die "$f not found (ALIGN_INPUT=text needs the tokenized test text and the BPE codes of data_prep; ALIGN_INPUT=binarized uses the data-bin split)"
    done
    input=(--raw-source "$DATA/tok/test.$SRC" --raw-target "$DATA/tok/test.$TGT" "${codes[@]}") ;;
  binarized) input=(--split test) ;;
  *) fsa_die "ALIGN_INPUT must be 'text' or 'binarized', got '$ALIGN_INPUT'" ;;
esac
runs=()
for seed in ${SEEDS:-1 2 3 4 5}; do
  name="seed$seed"
  fsa_train "$name" 64000 --arch softmax_transformer_iwslt_de_en --optimizer adam --adam-betas '(0.9,0.98)' \
    --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 4000 --warmup-init-lr 1e-7 --weight-decay 0.0 \
    --clip-norm 0.0 --dropout 0.1 --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
    --batch-size 80 --eval-bleu --eval-bleu-remove-bpe --eval-tokenized-bleu \
    --best-checkpoint-metric bleu --maximize-best-checkpoint-metric \
    --max-epoch "${MAX_EPOCH:-100}" --seed "$seed" --no-epoch-checkpoints "${FSA_SMOKE_MODEL[@]}" \
    || fsa_die "$name: training failed"
  ckpt="$OUT/$name/checkpoints/checkpoint_best.pt"
  [[ -f "$ckpt" ]] || fsa_die "$name: no $ckpt (the checkpoint with the highest validation BLEU)"
  d="$OUT/$name/align"
  "$FSA_ANALYZE" align "$DATA_BIN" --path "$ckpt" "${input[@]}" -s "$SRC" -t "$TGT" --gold "$GOLD" \
    --method weights norms --setting awo awi --no-progress --output-dir "$d" > "$d.log" 2>&1 \
    || fsa_die "fsa-analyze align failed (see $d.log)"
  [[ -f "$d/align.tsv" ]] || fsa_die "fsa-analyze wrote no $d/align.tsv (see $d.log)"
  "$FSA_ANALYZE" norms "$DATA_BIN" --path "$ckpt" "${input[@]}" -s "$SRC" -t "$TGT" --kinds cross \
    --no-plots --no-progress --output-dir "$d" > "$d.norms.log" 2>&1 \
    || fsa_die "fsa-analyze norms failed (see $d.norms.log)"
  runs+=("$d")
  [[ -f "$TSV" ]] || printf 'seed\t%s\n' "$(head -1 "$d/align.tsv")" > "$TSV"
  awk -v s="$seed" 'NR > 1 { print s "\t" $0 }' "$d/align.tsv" >> "$TSV"
done
fsa_publish "$TSV"
"$FSA_ANALYZE" aer-table "${runs[@]}" --output-dir "$OUT/table" > "$OUT/table.log" 2>&1 \
  || fsa_die "fsa-analyze aer-table failed (see $OUT/table.log)"
cp "$OUT/table/aer_table.tsv" "$OUT/aer_table.tsv.partial"
fsa_publish "$OUT/aer_table.tsv.partial"
fsa_log "(paper, 5-seed means, as fractions like the tables': AWO weights layer mean 0.684, best layer 0.477; AWO norms layer mean 0.629, best layer 0.414; AWI norms layer mean 0.604, best layer 0.250)"
