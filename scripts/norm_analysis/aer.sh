#!/usr/bin/env bash
# Kobayashi et al. (2020) Table 3: alignment error rate of attention weights vs norms
# ||alpha f(x)||, alignment with output (AWO) / input (AWI), per layer and head, on
# Europarl v7 De-En with the RWTH gold alignments; transformer_iwslt_de_en, five seeds.
#   scripts/norm_analysis/aer.sh DATA_DIR NUM_GPUS OUT_DIR
# DATA_DIR: data_prep/prepare_europarl_de_en_align.py output (DATA_DIR/gold/test.talp).
# Uses the analysis CLI: fsa-analyze align DATA_BIN --path CKPT --split test --gold GOLD.talp
#   --method weights norms --setting awo awi --output-dir DIR   (writes DIR/align.tsv: method,
#   setting, layer, head ("layer" = the layer-level alignment), aer, precision, recall, ...).
# Hyper-parameters: the paper's Table 5 (lr 1e-3, warmup 4000 from 1e-7, 4000 tokens x
# update-freq 8 x 2 GPUs = 64k tokens, 100 epochs, dropout 0.1, label smoothing 0.1,
# no weight decay or clipping), the best checkpoint on the validation set.
# SEEDS (default "1 2 3 4 5") selects.  Writes OUT_DIR/seed<S>/... and OUT_DIR/aer.tsv.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
fsa_init "Kobayashi et al. Table 3; env: SEEDS, MAX_EPOCH, SMOKE" "$@"
FSA_ANALYZE="${FSA_ANALYZE:-fsa-analyze}"
command -v "$FSA_ANALYZE" > /dev/null 2>&1 || fsa_die "'$FSA_ANALYZE' not found: install the plugin \
(make install, or pip install -e .) or set FSA_ANALYZE"
GOLD="$DATA/gold/test.talp"
[[ -f "$GOLD" ]] || fsa_die "$GOLD not found: prepare DATA_DIR with data_prep/prepare_europarl_de_en_align.py"
MAX_TOKENS="${MAX_TOKENS:-4000}"
[[ "$SMOKE" == "1" ]] && MAX_TOKENS=1024
TSV="$OUT/aer.tsv.partial"
rm -f "$TSV" "${TSV%.partial}"
for seed in ${SEEDS:-1 2 3 4 5}; do
  name="seed$seed"
  fsa_train "$name" 64000 --arch softmax_transformer_iwslt_de_en --optimizer adam --adam-betas '(0.9,0.98)' \
    --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 4000 --warmup-init-lr 1e-7 --weight-decay 0.0 \
    --clip-norm 0.0 --dropout 0.1 --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
    --max-epoch "${MAX_EPOCH:-100}" --seed "$seed" --no-epoch-checkpoints "${FSA_SMOKE_MODEL[@]}" \
    || fsa_die "$name: training failed"
  ckpt="$OUT/$name/checkpoints/checkpoint_best.pt"
  [[ -f "$ckpt" ]] || ckpt="$OUT/$name/checkpoints/checkpoint_last.pt"
  d="$OUT/$name/align"
  "$FSA_ANALYZE" align "$DATA_BIN" --path "$ckpt" --split test -s de -t en --gold "$GOLD" \
    --method weights norms --setting awo awi --no-progress --output-dir "$d" > "$d.log" 2>&1 \
    || fsa_die "fsa-analyze align failed (see $d.log)"
  [[ -f "$d/align.tsv" ]] || fsa_die "fsa-analyze wrote no $d/align.tsv (see $d.log)"
  [[ -f "$TSV" ]] || printf 'seed\t%s\n' "$(head -1 "$d/align.tsv")" > "$TSV"
  awk -v s="$seed" 'NR > 1 { print s "\t" $0 }' "$d/align.tsv" >> "$TSV"
done
fsa_publish "$TSV"
fsa_log "(paper, 5-seed means: AWO weights layer mean 68.4, best layer 47.7; AWO norms layer mean 62.9, best layer 41.4; AWI norms layer mean 60.4, best layer 25.0)"
