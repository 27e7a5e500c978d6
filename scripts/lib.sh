# Shared shell functions of the reproduction scripts (scripts/<paper>/*.sh).
# Source it after setting nothing; it parses "DATA_DIR NUM_GPUS OUT_DIR" with fsa_init.
#
#   source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
#   fsa_init "usage text" "$@"          # DATA, NGPUS, OUT, DATA_BIN, SRC, TGT, SMOKE
#   fsa_train NAME TARGET_TOKENS ARGS   # fairseq-train, --update-freq from the target batch
#   fsa_average NAME 5                  # average the last 5 checkpoints
#   fsa_generate NAME CKPT SUBSET ARGS  # fairseq-generate -> $OUT/NAME/gen.<SUBSET>.txt
#   fsa_score NAME SUBSET               # sacreBLEU (signature) + tokenized BLEU -> JSON
#   fsa_result TSV col=value ...        # append a row to a results table
#   fsa_publish TSV.partial             # final name + $OUT/learning_curves.{png,csv,json}
#   fsa_watched KIND LABEL OUT ERR CMD  # CMD > OUT 2> ERR with a status line on stderr every 20 s
#
# Environment: SMOKE=1 (tiny model 2+2 layers d=64, 10 updates of 2 x 512 tokens, beam 1,
# short outputs: the test suite's mode),
# MAX_TOKENS (per GPU and step, default 4096), MAX_UPDATE (each script's paper value),
# VALIDATE_INTERVAL (validate every N updates for the learning curves, default 1000; 5 in
# SMOKE), FSA_BASELINE (set by each script: the run every row's BLEU is compared with,
# paired bootstrap), TENSORBOARD_DIR (also log every run to tensorboard under it),
# SEEDS="1 2 3" (every table script: every row once per seed, runs NAME_seedS compared with
# BASELINE_seedS, a seed column and a .mean.tsv with mean ± std; SEED=S alone, or SEEDS
# with one seed, keeps the one-seed names and columns), PYTHON (python3), FSA_STATUS_INTERVAL
# (seconds between the status lines of training and decoding, default 20).
# Effective batch = MAX_TOKENS x GPUs x --update-freq.

set -euo pipefail

FSA_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FSA_USER_DIR="$FSA_REPO/fairseq_sparse_attn"
export PYTHONPATH="$FSA_REPO${PYTHONPATH:+:$PYTHONPATH}"
# a save point (--save-interval-updates) on an epoch's last update keeps its
# checkpoint_<epoch>_<updates>.pt under --no-epoch-checkpoints: "the last 5 checkpoints" are
# the last 5 save points (compat patch epoch_end_save_points)
export FSA_SAVE_POINTS_AT_EPOCH_ENDS=1
PY="${PYTHON:-python3}"
SMOKE="${SMOKE:-0}"

fsa_log() { echo "[$(basename "$0" .sh)] $*" >&2; }
fsa_die() { echo "[$(basename "$0" .sh)] error: $*" >&2; exit 1; }

# fsa_watched KIND LABEL OUT ERR CMD...: runs CMD in the foreground with stdout in OUT and
# stderr in ERR (the same file when OUT == ERR) while fairseq_sparse_attn/tools/progress.py
# prints a status line on stderr every $FSA_STATUS_INTERVAL s (default 20): updates
# (KIND train) or sentences (KIND generate) done of the total, rate, time left; on a
# terminal, fairseq's tqdm progress bar with the same figures instead.  Returns
# CMD's exit status.  The watcher also ends by itself when this shell ends (Ctrl-C).
fsa_watched() {
  local kind=$1 label=$2 out=$3 err=$4; shift 4
  local rc=0 wpid
  "$PY" "$FSA_USER_DIR/tools/progress.py" --pid "$BASHPID" --kind "$kind" --label "$label" "$out" "$err" >&2 &
  wpid=$!
  if [[ "$out" == "$err" ]]; then
    PYTHONUNBUFFERED=1 "$@" > "$out" 2>&1 || rc=$?
  else
    PYTHONUNBUFFERED=1 "$@" > "$out" 2> "$err" || rc=$?
  fi
  kill "$wpid" 2>/dev/null || true
  wait "$wpid" 2>/dev/null || true
  return "$rc"
}

# fsa_batch TARGET_TOKENS MAX_TOKENS GPUS [FLOOR] -> "MAX_TOKENS UPDATE_FREQ": the per-GPU
# --max-tokens and --update-freq of an effective batch (MAX_TOKENS x GPUS x UPDATE_FREQ) of
# the paper's TARGET_TOKENS: the fewest steps whose batches of at most MAX_TOKENS hold it,
# then each GPU's share of it per step (ceil(TARGET / (GPUS x UPDATE_FREQ))), not less
# than FLOOR (a batch must hold the longest example; default 1).  Before 2026-11-27 the
# update frequency was rounded with MAX_TOKENS kept: 25k-token batches were 32,768 tokens
# on 4 and 8 GPUs, a 4k-token batch 16k on 4 GPUs.
fsa_batch() {
  local target=$1 max_tokens=$2 gpus=$3 floor=${4:-1}
  [[ "$gpus" -ge 1 ]] || gpus=1
  (( max_tokens < floor )) && max_tokens=$floor
  local per_step=$(( max_tokens * gpus ))
  local uf=$(( (target + per_step - 1) / per_step ))
  [[ "$uf" -ge 1 ]] || uf=1
  local share=$(( (target + gpus * uf - 1) / (gpus * uf) ))
  (( share < floor )) && share=$floor
  (( share < max_tokens )) && max_tokens=$share
  echo "$max_tokens $uf"
}

# fsa_init USAGE "$@": DATA NGPUS OUT from the command line; checks the data dir
fsa_init() {
  local usage=$1; shift
  if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then  # asked for: on stdout, exit 0
    echo "usage: $(basename "$0") DATA_DIR NUM_GPUS OUT_DIR"
    echo "$usage"
    exit 0
  fi
  if [[ $# -lt 3 ]]; then
    echo "usage: $(basename "$0") DATA_DIR NUM_GPUS OUT_DIR" >&2
    echo "$usage" >&2
    exit 2
  fi
  DATA="$(cd "$1" 2>/dev/null && pwd)" || fsa_die "data directory not found: $1"
  NGPUS=$2
  OUT=$3
  [[ "$NGPUS" =~ ^[0-9]+$ ]] || fsa_die "NUM_GPUS must be a number (0 = CPU), got '$NGPUS'"
  mkdir -p "$OUT"
  OUT="$(cd "$OUT" && pwd)"
  FSA_OUT_ROOT=$OUT  # OUT_DIR itself: scripts that train into OUT_DIR/<part>/ move OUT there
  MAX_TOKENS="${MAX_TOKENS:-4096}"
  FSA_DEVICE_ARGS=()
  if [[ "$NGPUS" -eq 0 ]]; then
    FSA_DEVICE_ARGS=(--cpu)
  elif [[ "$NGPUS" -gt 1 ]]; then
    FSA_DEVICE_ARGS=(--distributed-world-size "$NGPUS")
  fi
  FSA_SMOKE_MODEL=()
  FSA_SMOKE_TRAIN=()
  FSA_SMOKE_GEN=()
  if [[ "$SMOKE" == "1" ]]; then
    # one intra-op thread: a tiny model on a shared CPU runs ~50x slower with thread contention
    export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
    FSA_SMOKE_GEN=(--beam 1 --max-len-a 0.5 --max-len-b 5)
    MAX_TOKENS="${MAX_TOKENS_SMOKE:-512}"
    FSA_SMOKE_MODEL=(--encoder-layers 2 --decoder-layers 2 --encoder-embed-dim 64 --decoder-embed-dim 64
                     --encoder-ffn-embed-dim 128 --decoder-ffn-embed-dim 128
                     --encoder-attention-heads 4 --decoder-attention-heads 4)
    FSA_SMOKE_TRAIN=(--max-update "${SMOKE_UPDATES:-10}" --warmup-updates 5 --lr 1e-3
                     --save-interval-updates 5 --keep-interval-updates 5
                     --num-workers 0 --validate-interval-updates "${VALIDATE_INTERVAL:-5}")
  fi
  if [[ "${FSA_DATA_IS_ROOT:-0}" == "1" ]]; then
    fsa_log "data root $DATA, $NGPUS GPU(s), output $OUT$( [[ $SMOKE == 1 ]] && echo ', SMOKE mode' )"
  else
    fsa_data_dir "$DATA"
    fsa_log "data $DATA_BIN ($SRC -> $TGT), $NGPUS GPU(s), output $OUT$( [[ $SMOKE == 1 ]] && echo ', SMOKE mode' )"
  fi
}

# fsa_data_dir DIR: DATA_BIN, SRC, TGT of a data_prep output dir (DIR/data-bin) or a data-bin
fsa_data_dir() {
  local d=$1
  if [[ -d "$d/data-bin" ]]; then DATA_BIN="$d/data-bin"; DATA_ROOT="$d"; else DATA_BIN="$d"; DATA_ROOT="$d/.."; fi
  local f
  f=$(ls "$DATA_BIN"/train.*-*.*.idx 2>/dev/null | head -1) || true
  [[ -n "$f" ]] || fsa_die "$d: no train.SRC-TGT.*.idx: expected the output of data_prep/prepare_*.py (DIR/data-bin) or a fairseq data-bin"
  local pair
  pair=$(basename "$f" | cut -d. -f2)
  SRC=${pair%-*}
  TGT=${pair#*-}
}

# fsa_share_args: tie all embeddings when the data has one joined dictionary, else only
# the decoder's input and output embeddings
fsa_share_args() {
  if cmp -s "$DATA_BIN/dict.$SRC.txt" "$DATA_BIN/dict.$TGT.txt"; then
    echo --share-all-embeddings
  else
    echo --share-decoder-input-output-embed
  fi
}

# fsa_require_python_flag ARCH_OR_FLAG_CHECK: a python expression over the plugin that
# must be true, else the message
fsa_require() {
  local check=$1 msg=$2
  "$PY" -c "$check" >/dev/null 2>&1 || fsa_die "$msg"
}

# fsa_run_command_key CMDLINE DIR NAME: a training command with its run's own paths (DIR,
# the tensorboard folder of NAME) replaced, so that two runs' commands compare
fsa_run_command_key() {
  local key=${1//"$2"/@RUN@}
  [[ -n "${TENSORBOARD_DIR:-}" ]] && key=${key//"$TENSORBOARD_DIR/$3"/@TB@}
  printf '%s' "$key"
}

# fsa_train NAME TARGET_TOKENS ARGS... : trains into $OUT/NAME.  A finished run
# ($OUT/NAME/.trained) is reused when its command was the same (scripts sharing an OUT_DIR
# share models), and refused when it differs; a run of $OUT whose command is the same but
# for the run's name lends its checkpoints (NAME/same_training_as says which).  Returns 1
# when the run diverged (the row then says so); any other failure stops the script with
# the log's last lines.
fsa_train() {
  local name=$1 target=$2; shift 2
  local dir="$OUT/$name"
  mkdir -p "$dir"
  local paper_target=$target
  # smoke runs keep update-freq > 1 but small
  [[ "$SMOKE" == "1" ]] && target="${SMOKE_TARGET_TOKENS:-1024}"
  local uf mt
  read -r mt uf <<< "$(fsa_batch "$target" "$MAX_TOKENS" "$NGPUS" "${FSA_MIN_MAX_TOKENS:-1}")"
  local gpus=$NGPUS; [[ $gpus -ge 1 ]] || gpus=1
  local tb=()
  [[ -n "${TENSORBOARD_DIR:-}" ]] && tb=(--tensorboard-logdir "$TENSORBOARD_DIR/$name")
  # validation at regular intervals: the learning curves of fsa_publish
  local cmd=("$PY" -m fairseq_cli.train "$DATA_BIN" --user-dir "$FSA_USER_DIR" --save-dir "$dir/checkpoints"
             --max-tokens "$mt" --update-freq "$uf" --log-format simple --log-interval 10
             --validate-interval-updates "${VALIDATE_INTERVAL:-1000}" "${tb[@]}"
             "${FSA_DEVICE_ARGS[@]}" "$@" "${FSA_SMOKE_TRAIN[@]}")
  local cmdline
  cmdline="$(printf '%q ' "${cmd[@]}")"
  if [[ -f "$dir/.trained" ]]; then
    if [[ "$(cat "$dir/train.cmd")" == "$cmdline" ]]; then
      fsa_log "$name: trained already ($dir)"
      return 0
    fi
    fsa_die "$name: $dir was trained with other arguments (see $dir/train.cmd); remove it or use another OUT_DIR"
  fi
  # another run of $OUT trained with this command but for its name (RHE's lpea_rhe,
  # gate_dynamic and k6 are one model): its checkpoints and log, not a second training
  local other same
  same=$(fsa_run_command_key "$cmdline" "$dir" "$name")
  [[ -e "$dir/checkpoints" ]] || for other in "$OUT"/*/.trained; do
    other=$(dirname "$other")
    [[ -f "$other/.trained" && "$other" != "$dir" && ! -L "$other/checkpoints" ]] || continue
    if [[ "$(fsa_run_command_key "$(cat "$other/train.cmd")" "$other" "$(basename "$other")")" == "$same" ]]; then
      ln -sfn "$other/checkpoints" "$dir/checkpoints"
      ln -sfn "$other/train.log" "$dir/train.log"
      echo "$cmdline" > "$dir/train.cmd"
      basename "$other" > "$dir/same_training_as"
      touch "$dir/.trained"
      fsa_log "$name: the same training as $(basename "$other") (its command but for the run name): its checkpoints, not a second training"
      return 0
    fi
  done
  echo "$cmdline" > "$dir/train.cmd"
  fsa_log "$name: training, effective batch $(( mt * gpus * uf )) tokens (max-tokens $mt x $gpus GPU(s) x update-freq $uf; paper: $paper_target) -> $dir/train.log"
  if fsa_watched train "$name" "$dir/train.log" "$dir/train.log" "${cmd[@]}"; then
    touch "$dir/.trained"
    return 0
  fi
  if grep -q "training diverged" "$dir/train.log"; then
    fsa_log "$name: $(grep -o 'training diverged.*' "$dir/train.log" | tail -1 | cut -c1-160)"
    return 1
  fi
  fsa_die "$name: training failed (see $dir/train.log):
$(tail -5 "$dir/train.log")"
}

# fsa_average NAME N: $OUT/NAME/checkpoint_avgN.pt from the last N update checkpoints
# (else the last N epoch checkpoints); prints its path
fsa_average() {
  local name=$1 n=$2 dir="$OUT/$1/checkpoints"
  local out="$dir/checkpoint_avg$n.pt"
  if [[ ! -f "$out" ]]; then
    # a smoke run saves 2 update checkpoints: it averages those; a real run with fewer than
    # N checkpoints stops here (an "avg5" of 3 checkpoints would be misnamed)
    local fewer=()
    [[ "$SMOKE" == "1" ]] && fewer=(--allow-fewer)
    "$PY" -m fairseq_sparse_attn.tools.average_checkpoints --inputs "$dir" --num "$n" --output "$out" "${fewer[@]}" \
      >> "$OUT/$name/average.log" 2>&1 || fsa_die "$name: checkpoint averaging failed (see $OUT/$name/average.log)"
  fi
  echo "$out"
}

# fsa_generate NAME CKPT SUBSET ARGS... -> $OUT/NAME/gen.SUBSET.txt
fsa_generate() {
  local name=$1 ckpt=$2 subset=$3; shift 3
  local out="$OUT/$name/gen.$subset.txt"
  local extra=()
  [[ "$NGPUS" -eq 0 ]] && extra=(--cpu)
  extra+=("${FSA_SMOKE_GEN[@]}")
  fsa_watched generate "$name: $subset" "$out" "$OUT/$name/gen.$subset.log" \
    "$PY" -m fairseq_cli.generate "$DATA_BIN" --user-dir "$FSA_USER_DIR" --path "$ckpt" --gen-subset "$subset" \
    --remove-bpe --tokenizer moses --source-lang "$SRC" --target-lang "$TGT" "$@" "${extra[@]}" || fsa_die "$name: fairseq-generate failed (see $OUT/$name/gen.$subset.log)"
  echo "$out"
}

# fsa_score NAME SUBSET [--lowercase]: sacreBLEU of the detokenized output against
# DATA/raw/SUBSET.TGT (with signature) and tokenized BLEU against DATA/tok/SUBSET.TGT
# -> $OUT/NAME/bleu.SUBSET.json (with provenance); prints "sacrebleu tok_bleu".  Adds the
# 95% CI (`significance` in the JSON, tools.score --baseline): when FSA_BASELINE names a run
# whose output of SUBSET exists, with the paired-bootstrap p-value against it; otherwise
# (no baseline, or one not run, e.g. ROWS=7) the run's own CI and no p-value
fsa_score() {
  local name=$1 subset=$2; shift 2
  local gen="$OUT/$name/gen.$subset.txt"
  local base_gen="$OUT/${FSA_BASELINE:-}/gen.$subset.txt"
  [[ -n "${FSA_BASELINE:-}" && -f "$base_gen" ]] || base_gen=$gen
  "$PY" -m fairseq_sparse_attn.tools.score "$gen" \
    --ref "$DATA_ROOT/raw/$subset.$TGT" --tok-ref "$DATA_ROOT/tok/$subset.$TGT" --baseline "$base_gen" \
    --seed "${FSA_RUN_SEED:-${SEED:-1}}" --json "$OUT/$name/bleu.$subset.json" "$@" || fsa_die "$name: scoring failed"
}

# fsa_json FILE KEY[.KEY...]: a value of a JSON file ("-" when a key is missing or null)
fsa_json() {
  "$PY" -c '
import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v.get(k) if isinstance(v, dict) else None
print("-" if v is None else "-".join(f"{x:.2f}" for x in v) if isinstance(v, list) else v)' "$1" "$2"
}

# fsa_tsv_last TSV COL: the value of column COL in the last row of TSV ("-" if absent)
fsa_tsv_last() {
  "$PY" -c '
import sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
row = dict(zip(lines[0].split("\t"), lines[-1].split("\t"))) if len(lines) > 1 else {}
print(row.get(sys.argv[2], "-"))' "$1" "$2"
}

# fsa_result TSV col=value...: append a row; the header is written with the first row, and
# a row with new columns extends the header (earlier rows get "-" there, as do columns a
# row lacks)
fsa_result() {
  local tsv=$1; shift
  "$PY" - "$tsv" "$@" <<'PYEOF'
import os, sys
tsv, pairs = sys.argv[1], [kv.partition("=") for kv in sys.argv[2:]]
row = {k: v for k, _, v in pairs}
rows, header = [], []
if os.path.exists(tsv):
    with open(tsv, encoding="utf-8") as f:
        lines = f.read().splitlines()
    header = lines[0].split("\t")
    rows = [dict(zip(header, line.split("\t"))) for line in lines[1:]]
header += [k for k, _, _ in pairs if k not in header]
rows.append(row)
tmp = tsv + ".tmp"
with open(tmp, "w", encoding="utf-8") as f:
    f.write("\t".join(header) + "\n")
    for r in rows:
        f.write("\t".join(r.get(h, "-") for h in header) + "\n")
os.replace(tmp, tsv)
PYEOF
}

# fsa_publish PATH.partial: a finished table takes its final name (rows are appended to
# PATH.partial while the script runs, so one that stops early leaves no complete-looking
# table); prints it; then fsa_curves
fsa_publish() {
  local part=$1 final=${1%.partial}
  [[ -f "$part" ]] || return 0
  mv "$part" "$final"
  fsa_log "results: $final"
  { column -t -s $'\t' "$final" || cat "$final"; } >&2 2>/dev/null
  fsa_curves "$FSA_OUT_ROOT"
}

# fsa_curves [DIR]: DIR/learning_curves.{png,csv,json} (DIR: $OUT by default): validation
# loss vs updates of every run trained under DIR, in DIR/<run>/ or one level deeper
# (DIR/<part>/<run>/, named <part>/<run>: table3's tasks, table6's lengths); runs without
# validation lines are left out, with a note
fsa_curves() {
  local dir=${1:-$OUT} logs=() f run
  for f in "$dir"/*/train.log "$dir"/*/*/train.log; do
    [[ -f "$f" ]] || continue
    run=${f#"$dir"/}
    logs+=("${run%/train.log}=$f")
  done
  [[ ${#logs[@]} -gt 0 ]] || return 0
  "$PY" -m fairseq_sparse_attn.tools.learning_curves --out "$dir/learning_curves" --skip-empty \
    --title "$(basename "$0" .sh): validation loss" "${logs[@]}" > /dev/null \
    && fsa_log "learning curves: $dir/learning_curves.png (.csv, .json)" \
    || fsa_log "warning: no learning curves written (see the message above)"
}

# fsa_eval_row NAME TSV col=value...: average last 5 checkpoints, generate the
# test set with GEN_ARGS, score, append a row with sacreBLEU, tokenized BLEU, signature and,
# against $FSA_BASELINE's row (when it ran first), sacreBLEU's 95% CI and paired-bootstrap p
fsa_eval_row() {
  local name=$1 tsv=$2; shift 2
  local ckpt
  ckpt=$(fsa_average "$name" "${AVERAGE:-5}")
  fsa_generate "$name" "$ckpt" test "${GEN_ARGS[@]}" > /dev/null
  fsa_score "$name" test "${SCORE_ARGS[@]}" > /dev/null
  local j="$OUT/$name/bleu.test.json"
  fsa_result "$tsv" "$@" "sacrebleu=$(fsa_json "$j" sacrebleu)" "tok_bleu=$(fsa_json "$j" tok_bleu)" \
    "sacrebleu_ci95=$(fsa_json "$j" significance.ci95)" "p_vs_baseline=$(fsa_json "$j" significance.p_value)" \
    "baseline=$( [[ -f "$OUT/${FSA_BASELINE:-}/gen.test.txt" ]] && echo "${FSA_BASELINE}" || echo -)" \
    "signature=$(fsa_json "$j" signature)" "checkpoint=$ckpt"
}

# fsa_seeds: the training seeds, SEEDS="1 2 3" (default: SEED, else 1)
fsa_seeds() { echo "${SEEDS:-${SEED:-1}}"; }

# fsa_seed_name NAME SEED: the run's directory name: NAME with one seed, NAME_seedS with several
fsa_seed_name() {
  local n
  n=$(fsa_seeds | wc -w)
  if [[ "$n" -gt 1 ]]; then echo "$1_seed$2"; else echo "$1"; fi
}

# fsa_use_seed SEED NAME [BASELINE]: the per-seed settings of a table's row loop
# (for seed in $(fsa_seeds); do fsa_use_seed "$seed" NAME BASELINE; <rebuild the paper's
# base args: they hold --seed>; ...): SEED and FSA_RUN_SEED (the training seed, which the
# score JSON records; the bootstrap keeps sacreBLEU's seed 12345), FSA_RUN (fsa_seed_name NAME SEED), FSA_BASELINE (fsa_seed_name BASELINE SEED: the run of
# the same seed every row is compared with; empty without BASELINE) and FSA_SEED_COL, the
# seed column for fsa_result: ("seed=SEED") with several seeds, () with one (one-seed tables
# keep their columns)
FSA_SEED_COL=()
fsa_use_seed() {
  local seed=$1 name=$2 base=${3:-}
  [[ "$seed" =~ ^[0-9]+$ ]] || fsa_die "SEEDS/SEED must be whole numbers, got '$seed' (SEEDS='$(fsa_seeds)')"
  [[ $(fsa_seeds | tr -s ' \t' '\n\n' | grep -cx "$seed") -le 1 ]] || fsa_die "SEEDS lists seed $seed more than once (SEEDS='$(fsa_seeds)')"
  SEED=$seed
  FSA_RUN_SEED=$seed
  FSA_RUN=$(fsa_seed_name "$name" "$seed")
  FSA_BASELINE=""
  [[ -n "$base" ]] && FSA_BASELINE=$(fsa_seed_name "$base" "$seed")
  FSA_SEED_COL=()
  [[ $(fsa_seeds | wc -w) -gt 1 ]] && FSA_SEED_COL=("seed=$seed")
  return 0
}

# fsa_seed_summary TSV [COLUMN...]: with several seeds, TSV's rows grouped by every column
# but the per-run ones -> TSV with .mean.tsv: n seeds, diverged seeds (counted apart), mean ±
# sample std of sacreBLEU and tokenized BLEU (the ones TSV has) and of each COLUMN (another
# per-run number: entropy, delta, ...); prints it
fsa_seed_summary() {
  local tsv=$1; shift
  [[ $(fsa_seeds | wc -w) -gt 1 && -f "$tsv" ]] || return 0
  "$PY" - "$tsv" "${tsv%.tsv}.mean.tsv" "$@" <<'PYEOF' || fsa_die "no mean ± std table for $tsv (see the message above)"
import csv, statistics, sys
src, dst, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
per_run = {"seed", "sacrebleu", "tok_bleu", "sacrebleu_ci95", "tok_bleu_ci95", "p_vs_baseline",
           "p_vs_all_heads", "baseline", "signature", "checkpoint", *extra}
with open(src, encoding="utf-8") as f:
    rows = list(csv.DictReader(f, delimiter="\t"))
if "seed" not in rows[0]:
    sys.exit(f"{src}: no seed column")
metrics = [m for m in ("sacrebleu", "tok_bleu") if m in rows[0]] + list(extra)
missing = [m for m in extra if m not in rows[0]]
if missing:
    sys.exit(f"{src}: no column {', '.join(missing)}")
keys = [k for k in rows[0] if k not in per_run]
groups = {}
for r in rows:
    groups.setdefault(tuple(r[k] for k in keys), []).append(r)
def stat(values):
    nums = [float(v) for v in values if v not in ("diverged", "-", "")]
    if not nums:
        return "-"
    sd = statistics.stdev(nums) if len(nums) > 1 else 0.0
    return f"{statistics.mean(nums):.2f} ± {sd:.2f}"
with open(dst, "w", encoding="utf-8") as f:
    f.write("\t".join(keys + ["seeds", "diverged"] + [f"{m}_mean_std" for m in metrics]) + "\n")
    for group, rs in groups.items():
        div = sum(any(r.get(m) == "diverged" for m in metrics) for r in rs)
        f.write("\t".join(list(group) + [" ".join(r["seed"] for r in rs), str(div)]
                          + [stat(r.get(m, "-") for r in rs) for m in metrics]) + "\n")
PYEOF
  fsa_log "mean ± std over seeds $(fsa_seeds): ${tsv%.tsv}.mean.tsv"
  { column -t -s $'\t' "${tsv%.tsv}.mean.tsv" || cat "${tsv%.tsv}.mean.tsv"; } >&2 2>/dev/null
}

# fsa_selected WORD LIST: is WORD in the space-separated LIST (an empty LIST selects all)
fsa_selected() { [[ -z "$2" ]] && return 0; [[ " $2 " == *" $1 "* ]]; }

# fsa_check_selection VAR VALUE KNOWN...: before any work, die unless every word of VALUE
# (a selection such as ROWS: space-separated; empty selects all) is one of KNOWN; a
# selection that matched nothing ran nothing and exited 0
fsa_check_selection() {
  local var=$1 value=$2 word
  shift 2
  for word in $value; do
    [[ " $* " == *" $word "* ]] || fsa_die "$var='$value': '$word' is not one of: $* (separate them with spaces)"
  done
}
