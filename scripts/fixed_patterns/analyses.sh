#!/usr/bin/env bash
# Raganato et al. (2020) analyses with the models of table1.sh (same OUT_DIR):
# BLEU by reference length (Fig. 2, fsa-length-bleu) and contrastive test suites
# (subject-verb agreement / LingEval97 Fig. 3, ContraWSD and MuCoW Table 6, fsa-contrastive)
# for 8L, 7F_token+1L and 7F_token+1L with the learned head (H8) masked.
#   CONTRASTIVE="--format lingeval97 suite.json" scripts/fixed_patterns/analyses.sh DATA_DIR NUM_GPUS OUT_DIR
# CONTRASTIVE: the fsa-contrastive inputs and options (repeat the script per suite, with
# DATA_DIR in that suite's direction: LingEval97 is English->German, ContraWSD and MuCoW
# German->English; give --tokenizer / --bpe-codes as the data was prepared, else unknown
# pieces become <unk>); empty = length analysis only.  contrastive.tsv has each model's
# overall accuracy (group "all") and one row per group of the suite (fsa-contrastive's
# by_group: LingEval97's error types, or the agreement by distance of Fig. 3 with
#   CONTRASTIVE="--format lingeval97 --error-types subj_verb_agreement --group-by distance lingeval97.json"
# (--group-by distance alone would also bin the other types with a distance field, noun
# phrase agreement among them); MuCoW's ambiguous words, or --group-by origin, its
# corpus field), and with --average-groups a row "average:G1+G2" of the mean of those
# groups' accuracies: the paper's MuCoW figure is the average of TED and Tatoeba, so
#   CONTRASTIVE="--format mucow --group-by origin --average-groups ted,tatoeba de-en.mucow.scoring.json"
# (the corpus names as the suite spells them: a name no item has is refused, naming those it has).
# CONTRASTIVE_NAME labels the suite in the TSV (default: its --format).
# LAYERS (default "6+6 6+1") and MODELS (default "8L 7Ftoken 7Ftoken_H8off") select.  Writes OUT_DIR/analyses/length.tsv and
# OUT_DIR/analyses/contrastive.tsv.  SEEDS="1 2 3" analyses the model of every seed
# (<config>_<layers>_seedS, table1.sh's with the same SEEDS), adds a seed column and
# OUT_DIR/analyses/{length,contrastive}.mean.tsv (mean ± std of BLEU per length bin and of
# the accuracy).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fsa_init "Raganato et al. Fig. 2, 3, Table 6; env: CONTRASTIVE, LAYERS, MODELS, SEEDS, SMOKE" "$@"
A="$OUT/analyses"
mkdir -p "$A"
suite_name=$(grep -o -- '--format [a-z0-9]*' <<< "${CONTRASTIVE:-}" | cut -d' ' -f2 || true)
suite_name=${suite_name:-plain}
rm -f "$A"/{length,contrastive}.tsv "$A"/{length,contrastive}.tsv.partial "$A"/{length,contrastive}.mean.tsv
for layers in ${LAYERS:-6+6 6+1}; do
  for model in ${MODELS:-8L 7Ftoken 7Ftoken_H8off}; do
    config=${model%_H8off}
    for seed in $(fsa_seeds); do
      fsa_use_seed "$seed" "${config}_$layers"
      fp_base_args
      name=$FSA_RUN
      tag=$(fsa_seed_name "${model}_$layers" "$seed")  # file names under $A
      [[ -f "$OUT/$name/.trained" ]] || fp_run "$name" "$OUT/$name.eval.tsv" "Fig. 2" "$config" "$layers"
      ckpt=$(fsa_average "$name" "$AVERAGE")
      mask=()
      gen_name=$name  # the masked model's output in a folder of its own: table1.sh's
      # $OUT/$name/gen.test.txt stays the unmasked model's, beside its bleu.test.json
      if [[ "$model" == *_H8off ]]; then
        mask=(--model-overrides "{'encoder_masked_heads': '7'}")
        gen_name="${name}_H8off"
        mkdir -p "$OUT/$gen_name"
      fi
      gen=$(fsa_generate "$gen_name" "$ckpt" test "${GEN_ARGS[@]}" "${mask[@]}")
      cp "$gen" "$A/gen.$tag.txt"
      "$PY" -m fairseq_sparse_attn.analysis.length_bleu "$A/gen.$tag.txt" --tsv "$A/length.$tag.tsv" \
        > /dev/null || fsa_die "fsa-length-bleu failed on $A/gen.$tag.txt"
      # model, layers (and seed with several seeds), then fsa-length-bleu's columns
      seed_col=$([[ ${#FSA_SEED_COL[@]} -gt 0 ]] && printf 'seed\t' || true)
      seed_val=$([[ ${#FSA_SEED_COL[@]} -gt 0 ]] && printf '%s\t' "$seed" || true)
      [[ -f "$A/length.tsv.partial" ]] || printf 'model\tlayers\t%s%s\n' "$seed_col" "$(head -1 "$A/length.$tag.tsv")" > "$A/length.tsv.partial"
      awk -v m="$model" -v l="$layers" -v s="$seed_val" 'NR > 1 { print m "\t" l "\t" s $0 }' "$A/length.$tag.tsv" >> "$A/length.tsv.partial"
      if [[ -n "${CONTRASTIVE:-}" ]]; then
        # shellcheck disable=SC2206
        cargs=($CONTRASTIVE)
        [[ "$NGPUS" -eq 0 ]] && cargs+=(--cpu)
        "$PY" -m fairseq_sparse_attn.analysis.contrastive "$DATA_BIN" "${cargs[@]}" --path "$ckpt" \
          -s "$SRC" -t "$TGT" "${mask[@]}" --no-progress --output-json "$A/contrastive.$tag.json" \
          > "$A/contrastive.$tag.log" 2>&1 || fsa_die "fsa-contrastive failed (see $A/contrastive.$tag.log)"
        # "group accuracy" lines: the overall accuracy ("all"), then each group's
        while read -r group acc; do
          fsa_result "$A/contrastive.tsv.partial" "model=$model" "layers=$layers" "${FSA_SEED_COL[@]}" "group=$group" \
            "accuracy=$acc" "suite=${CONTRASTIVE_NAME:-$suite_name}" "paper=see Fig. 3 / Table 6"
        done < <("$PY" -c "
import json, sys
r = json.load(open(sys.argv[1]))
print('all', r.get('accuracy', r.get('overall', {}).get('accuracy', '-')))
for g, c in (r.get('by_group') or {}).items():
    print(str(g).replace(' ', '_') or '-', c.get('accuracy', '-'))
if 'average' in r:  # --average-groups: the mean of those groups' accuracies (MuCoW's TED + Tatoeba)
    print('average:' + '+'.join(r['average']['groups']).replace(' ', '_'), r['average']['accuracy'])" "$A/contrastive.$tag.json")
      fi
    done
  done
done
fsa_publish "$A/length.tsv.partial"
fsa_publish "$A/contrastive.tsv.partial"
fsa_seed_summary "$A/length.tsv" bleu
fsa_seed_summary "$A/contrastive.tsv" accuracy
