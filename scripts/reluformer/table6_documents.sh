#!/usr/bin/env bash
# ReLUFormer Table 6: document-level translation on Europarl7 En-De with documents packed
# to L = 128..2048 BPE tokens: Transformer, Sparsemax, ReLUFormer.
#   scripts/reluformer/table6_documents.sh DATA_DIR NUM_GPUS OUT_DIR
# DATA_DIR: data_prep/prepare_europarl_docs.py --raw-dir DOCS --out DATA_DIR --max-doc-length 128 256 512 1024 2048
# (DOCS: the document-level Europarl7 train/dev/test.{en,de}; the training split is not
# published, Maruf et al. send it on request)
# (one DATA_DIR/L<L>/data-bin per length).  LENGTHS / MODELS select; KEY_BLOCK=N runs the
# ReLUFormer with the memory-bounded key-block path (--attn-key-block-size N, attention
# dropout 0).  BLEU is tokenized BLEU over whole documents (H- against T- lines), with its
# 95% CI and the paired-bootstrap p-value against the Transformer of the same L.
# Translations may be 1.2 x the document + 10 tokens long (DOC_MAX_LEN_A, DOC_MAX_LEN_B).
# Writes OUT_DIR/L<L>/<model>/... and OUT_DIR/table6.tsv.  SEEDS="1 2 3" trains every
# model once per seed (OUT_DIR/L<L>/<model>_seed2, ..., compared with the Transformer of the
# same L and seed), adds a seed column and OUT_DIR/table6.mean.tsv (mean ± std).
FSA_DATA_IS_ROOT=1
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
fsa_init "ReLUFormer Table 6; env: LENGTHS, MODELS, SEEDS, KEY_BLOCK, MAX_UPDATE, SMOKE" "$@"
TSV="$OUT/table6.tsv.partial"
rm -f "$TSV" "${TSV%.partial}" "${TSV%.tsv.partial}.mean.tsv"
declare -A PAPER=(
  [transformer.128]=31.19 [transformer.256]=31.94 [transformer.512]=31.81 [transformer.1024]=31.74 [transformer.2048]=31.89
  [sparsemax.128]=31.04 [sparsemax.256]=31.70 [sparsemax.512]=- [sparsemax.1024]=- [sparsemax.2048]=-
  [reluformer.128]=31.22 [reluformer.256]=32.09 [reluformer.512]=32.69 [reluformer.1024]=32.89 [reluformer.2048]=32.58
)
ROOT_OUT=$OUT
BASE_MAX_TOKENS=$MAX_TOKENS
# a translation may be as long as 1.2 x its document + 10 tokens (the model's positions cap
# it too): fairseq-generate's own default, 200 tokens whatever the source, cut most
# documents from L = 256 on (2026-11-27: 61-86% of the test set's target words)
DOC_MAX_LEN_A=${DOC_MAX_LEN_A:-1.2}
DOC_MAX_LEN_B=${DOC_MAX_LEN_B:-10}
for L in ${LENGTHS:-128 256 512 1024 2048}; do
  [[ -d "$DATA/L$L/data-bin" ]] || fsa_die "$DATA/L$L/data-bin not found: run data_prep/prepare_europarl_docs.py --out $DATA --max-doc-length $L"
  fsa_data_dir "$DATA/L$L"
  OUT="$ROOT_OUT/L$L"
  mkdir -p "$OUT"
  # a batch must hold the longest document
  longest=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['longest_document'])" "$DATA_BIN/doc_info.json")
  MAX_TOKENS=$(( BASE_MAX_TOKENS > longest + 2 ? BASE_MAX_TOKENS : longest + 2 ))
  FSA_MIN_MAX_TOKENS=$(( longest + 2 ))  # fsa_train's per-GPU share of the batch holds it too
  for model in ${MODELS:-transformer sparsemax reluformer}; do
    case $model in
      transformer) flags=(--arch softmax_transformer_wmt_en_de "${CE[@]}") ;;
      sparsemax)   flags=(--arch sparsemax_transformer_wmt_en_de "${CE[@]}") ;;
      reluformer)  flags=(--arch reluformer_wmt_en_de "${REG[@]}")
                   [[ -n "${KEY_BLOCK:-}" ]] && flags+=(--attn-key-block-size "$KEY_BLOCK") ;;
      *) fsa_die "unknown model '$model' (transformer sparsemax reluformer)" ;;
    esac
    extra=()
    [[ "$model" == reluformer && -n "${KEY_BLOCK:-}" ]] && extra=(--attention-dropout 0)
    for seed in $(fsa_seeds); do
      # against the softmax Transformer of the same length limit and seed (when it ran first)
      fsa_use_seed "$seed" "$model" transformer
      rf_base_args wmt14
      name=$FSA_RUN
      tok=diverged
      if fsa_train "$name" "$RF_TARGET_TOKENS" --task document_translation --max-doc-length "$L" \
          "${flags[@]}" "${RF_ARGS[@]}" "${FSA_SMOKE_MODEL[@]}" "${extra[@]}"; then
        ckpt=$(fsa_average "$name" "${AVERAGE}")
        gen="$OUT/$name/gen.test.txt"
        gextra=()
        [[ "$NGPUS" -eq 0 ]] && gextra=(--cpu)
        gextra+=("${FSA_SMOKE_GEN[@]}")
        fsa_watched generate "$name: test" "$gen" "$OUT/$name/gen.test.log" \
          "$PY" -m fairseq_cli.generate "$DATA_BIN" --user-dir "$FSA_USER_DIR" --task document_translation \
          --max-doc-length "$L" --path "$ckpt" --gen-subset test --remove-bpe --beam 5 --lenpen 0.6 \
          --max-len-a "$DOC_MAX_LEN_A" --max-len-b "$DOC_MAX_LEN_B" --batch-size "${GEN_BATCH:-16}" "${gextra[@]}" \
          || fsa_die "L$L/$name: fairseq-generate failed (see $OUT/$name/gen.test.log)"
        base=()
        [[ -f "$OUT/$FSA_BASELINE/gen.test.txt" ]] && base=(--baseline "$OUT/$FSA_BASELINE/gen.test.txt")
        "$PY" -m fairseq_sparse_attn.tools.score "$gen" --t-lines "${base[@]}" --seed "$SEED" \
          --json "$OUT/$name/bleu.test.json" > /dev/null || fsa_die "L$L/$name: scoring failed"
        j="$OUT/$name/bleu.test.json"
        tok=$(fsa_json "$j" tok_bleu); ci=$(fsa_json "$j" significance.ci95); p=$(fsa_json "$j" significance.p_value)
        baseline=$([[ ${#base[@]} -gt 0 ]] && echo "$FSA_BASELINE" || echo -)
      else
        ci=-; p=-; baseline=-
      fi
      fsa_result "$TSV" "length=$L" "model=$model" "${FSA_SEED_COL[@]}" "tok_bleu=$tok" "tok_bleu_ci95=$ci" \
        "p_vs_baseline=$p" "baseline=$baseline" "paper_tok_bleu=${PAPER[$model.$L]}"
    done
  done
done
fsa_publish "$TSV"
fsa_seed_summary "${TSV%.partial}"
