#!/usr/bin/env bash
# One call on a lent GPU for issue 31's figures (docs/performance.md "GPU"): every step has
# its own time limit and writes as it goes, so a cut-off call keeps the steps that ended.
# Run from the repository root on the GPU machine:
#
#   OUT=/some/dir bash benchmarks/gpu_session.sh STEP[,STEP...] [TOTAL_SECONDS]
#
# Steps (in the order given):
#   kernels     CUDA correctness of the Triton kernels (fp16/bf16 through the one-pass and
#               the two-pass backward, the long tier's tiles, dropout and row sums: 280 checks, in
#               $SHARDS processes (default 6) that share out the compiles; each writes how many
#               it planned first, so a shard cut off shows as incomplete), then their time
#               against SDPA flash (both backwards; at every length both tile tiers; and
#               replayed from a CUDA graph: the GPU's time without the host's), while
#               the fp16 loss-scale runs (softmax, ReLA-g eager, ReLA-g triton; 1,000 updates
#               on Multi30k, ~200 s) share the GPU; limits 240 s + 180 s, each cut to what
#               the total leaves (2026-11-27's code, 66 checks in one process: ~200 s)
#   train-fp16  fairseq-train updates/s of softmax, rela_g, rela_g_triton, three alternating
#               rounds (~6 min: the pair decides auto for ReLA's relu only from at least 3
#               rounds, the kernels faster in all 3; a round starts only when the time left
#               holds it whole); ReLUFormer's pair in a call of its own:
#               TRAIN_PRESETS=reluformer,reluformer_triton
#   train-bf16  the same in bf16
#               ($TRAIN_PRESETS: another comma list of bench_gpu.PRESETS, for either step,
#               e.g. rela_g_dropout,rela_g_triton_dropout or rela_g_base,rela_g_triton_base:
#               each preset's softmax baseline is added)
#   ab-fp16     benchmarks/train_ab.py: fairseq's own Trainer for softmax, ReLA-g (eager and
#               triton) and ReLUFormer (eager and triton) in one process, blocks of 10 updates
#               in alternating order, as many rounds as the time allows (up to $AB_BLOCKS,
#               default 60): tens of paired ratios where train-fp16 gets three, and without
#               a process start per run; train_ab.json comes back as ab-fp16.json (its
#               parts.train_ab goes into docs/results/bench-gpu*.json beside a kernels part;
#               auto's rule reads it) ($AB_PRESETS: another comma list; not measured yet:
#               ~1 min of set-up and compiles, then ~3 s a round of five presets)
#   ab-bf16     the same in bf16
#   sweep       the ReLU kernels' tiles of gpu_kernels.SWEEP (fp16, head dim 64, at 4,096 and
#               1,024 tokens, $SWEEP_LENGTHS), each checked once then timed against flash at
#               each length, the backward's tiles first: ~4 min (not measured; 1,024 alone
#               with 20 tiles: ~3 min)
#   host        benchmarks/launch_costs.py first (~15 s): the host time of one kernel op's
#               pieces (the dispatch, the implementation, the plan, the C launcher,
#               Triton's own path) against one aten op; then
#               benchmarks/bench_host.py on the GPU (real kernels, fp16, wall clock): a
#               forward + backward of every preset against stock fairseq, at the base size
#               (8 heads, d 512, 8 x 24 tokens) and at the CPU proxy's shape (1 head, d 32,
#               2 x 6 tokens): whether the CPU's host-time ratios (docs/performance.md,
#               "Host time of a training step") predict the GPU's, and at the base size
#               where each preset's host time goes (--profile 5: aten ops, the kernels' ops,
#               CUDA launches and syncs, Python between ops; benchmarks/host_profile.py)
#               (~2.5 min with compiles; JSON in logs.tar.gz, the tables in session.log)
#   demo        make demo's cuda recipe (scripts/demo.py --recipe cuda: softmax against ReLA-g,
#               iwslt size, 1,500 updates, seeds 1 and 2, its four runs side by side), from the
#               carried shipped Multi30k; results.json comes back as demo-results.json, for
#               make publish-demo here (~5-7 min, not measured yet; $DEMO_ARGS: extra flags)
#   fp32-probe  the fp32 forward's tiles of gpu_kernels.FP32_PROBE (head dims 64, 128), IEEE
#               and TF32 dots, correctness only: which setting gives the wrong fp32 forward
#               seen on the H100, which rows (query positions, heads) are wrong, and whether
#               a rerun on the same inputs moves the error (a race) (~1 min with compiles)
#
# A call returns at most 8 files from $OUT (seen 2026-11-26: files in subfolders and past
# the count came back as "left out"): session.log and logs.tar.gz (every log, without
# checkpoints) always, and one file per step: kernels.json with loss_scale.json (kernels),
# train-fp16.json, train-bf16.json (the bench_gpu.json of each step), ab-fp16.json,
# ab-bf16.json, sweep.json, fp32probe.json, demo-results.json: so a call runs at most six
# steps (five with kernels).  A train or ab step also writes each run or round to
# train-*.jsonl / ab-*.jsonl as it ends and removes that file once its JSON is there: only a
# call cut off inside the step returns it (with what ended).
# Every command's exit status is in session.log (124: its time limit), with its log's tail
# when it failed.  Back here, `python benchmarks/record_gpu_session.py <returned *.json>`
# writes them as the device family's docs/results/bench-gpu*.json (with kernels.json).
#
# It needs, carried with the checkout (ignored paths), what benchmarks/gpu_session_prepare.sh
# makes on a machine with PyPI: gpu_wheels/ (the cp312 wheels the GPU image lacks) and
# gpu_data/multi30k/data-bin (Multi30k binarized, for the loss-scale runs) and
# gpu_data/multi30k_shipped (the shipped Multi30k files, for the demo step).
set -u
STEPS=${1:?usage: gpu_session.sh kernels,train-fp16,train-bf16 [TOTAL_SECONDS]}
TOTAL=${2:-560}
OUT=${OUT:-gpu_session_out}
WORK=$(mktemp -d /tmp/gpu_session.XXXX)
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1
T0=$(date +%s)
left() { echo $(( TOTAL - ($(date +%s) - T0) )); }
# a step's time limit: at most $1 seconds, and $2 seconds (default 10) short of the total
limit() { local t=$(( $(left) - ${2:-10} )); (( t > $1 )) && t=$1; (( t < 1 )) && t=1; echo $t; }
say() { echo "[gpu-session +$(( $(date +%s) - T0 ))s] $*"; }
# a command's exit status in the session log (124: its time limit), and its log's tail on failure
status() { local rc=$1 log=$2; echo "exit status $rc${3:+ ($3)}"; (( rc != 0 )) && [[ -f $log ]] && tail -15 "$log"; return 0; }
keep() { [[ -f "$WORK/$1/bench_gpu.json" ]] && cp "$WORK/$1/bench_gpu.json" "$OUT/$2"; \
         tar -czf "$OUT/logs.tar.gz" --exclude='*.pt' --exclude='./demo/multi30k' -C "$WORK" . 2>/dev/null; }
PY=${PYTHON:-python3}
SHARDS=${SHARDS:-6}  # correctness processes (the machine's 16 cores compile their kernels: 6, since the
# dropout and row-sums forms (twelfth session) quadrupled the configurations a shard may compile)

say "environment and wheels"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
timeout 60 $PY -m pip install -q --no-index --no-deps --target /tmp/site gpu_wheels/*.whl > "$WORK/pip.log" 2>&1 \
  || { say "pip install failed:"; tail -20 "$WORK/pip.log"; }
export PYTHONPATH=/tmp/site:$PWD
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
$PY -c "import sys, torch, triton, fairseq, numpy; print('python', sys.version.split()[0], 'torch', torch.__version__, \
'triton', triton.__version__, 'fairseq', fairseq.__version__, 'numpy', numpy.__version__, torch.cuda.get_device_name(0))" 2>&1 | tail -1
# the SDPA backend of a call like stock fairseq's training attention (fp16, a float mask, head
# dim 128): one that builds a plan per new shape, as cuDNN's does, would slow stock softmax's
# first updates (2026-11-28's paired blocks: its first three blocks at a third to a half of its speed)
$PY -c "import torch; from torch.nn.attention import SDPBackend; q = torch.randn(8, 4, 24, 128, device='cuda', \
dtype=torch.half); m = torch.zeros(8, 1, 24, 24, device='cuda', dtype=torch.half); \
print('sdpa backend of a masked fp16 call:', SDPBackend(torch._fused_sdp_choice(q, q, q, m, 0.0, False)).name)" 2>&1 | tail -1

for step in ${STEPS//,/ }; do
  case $step in
    kernels)
      say "kernels: fp16 loss-scale runs in the background, CUDA correctness ($SHARDS processes) and timing ($(left)s left)"
      timeout "$(limit 215)" $PY benchmarks/bench_gpu.py --parts loss_scale --loss-scale-data gpu_data/multi30k/data-bin \
        --budget 185 --out "$WORK/loss_scale" > "$WORK/loss_scale.log" 2>&1 &
      LS=$!
      # the checks' compiles take most of their time: shards, one (head dim, dtype) group each
      # at a time, share them out over the machine's cores (gpu_kernels.py --shard)
      pids=()
      for (( k = 0; k < SHARDS; k++ )); do
        timeout "$(limit 240)" $PY benchmarks/gpu_kernels.py --parts correctness --shard $k/$SHARDS \
          --out "$WORK/kernels_correctness_$k.json" > "$WORK/kernels_correctness_$k.log" 2>&1 &
        pids+=($!)
      done
      for (( k = 0; k < SHARDS; k++ )); do
        wait ${pids[$k]}; status $? "$WORK/kernels_correctness_$k.log" "correctness shard $k/$SHARDS"
        grep -v " ok (" "$WORK/kernels_correctness_$k.log" | grep "^\[kernels\]"
      done
      wait $LS; status $? "$WORK/loss_scale.log" "loss scale"
      grep "loss scale" "$WORK/loss_scale.log" | cut -c1-300; keep loss_scale loss_scale.json
      timeout "$(limit 180)" $PY benchmarks/gpu_kernels.py --parts timing --out "$WORK/kernels_timing.json" \
        > "$WORK/kernels_timing.log" 2>&1; status $? "$WORK/kernels_timing.log" timing
      grep "^\[kernels\] time" "$WORK/kernels_timing.log"
      $PY -c 'import sys; sys.path.insert(0, "benchmarks"); import gpu_kernels; gpu_kernels.merge_results(*sys.argv[1:])' \
        "$WORK" "$OUT/kernels.json" "$SHARDS"
      keep none none ;;
    train-fp16|train-bf16)
      dtype=${step#train-}
      presets=softmax,rela_g,rela_g_triton  # 3 whole rounds fit one call (9 runs of ~40 s)
      presets=${TRAIN_PRESETS:-$presets}
      B=$(( $(left) - 20 ))
      say "$step: $presets, budget ${B}s"
      if (( B > 60 )); then
        # every run in $OUT as it ends (a call cut off keeps them); removed once the step's
        # JSON is there (a call returns at most 8 files)
        timeout $(( B + 15 )) $PY benchmarks/bench_gpu.py --parts train --dtypes "$dtype" \
          --presets "$presets" --budget "$B" --out "$WORK/$step" --progress "$OUT/$step.jsonl" \
          > "$WORK/$step.log" 2>&1; status $? "$WORK/$step.log" "$step"
      else
        echo "$step: not run (${B}s left)"
      fi
      grep "updates/s\|not started\|failed\|Error" "$WORK/$step.log" 2>/dev/null | cut -c1-200 | tail -20
      keep "$step" "$step.json"; [[ -f "$OUT/$step.json" ]] && rm -f "$OUT/$step.jsonl" ;;
    ab-fp16|ab-bf16)
      dtype=${step#ab-}
      presets=${AB_PRESETS:-softmax,rela_g,rela_g_triton,reluformer,reluformer_triton}
      B=$(( $(left) - 20 ))
      say "$step: $presets, budget ${B}s"
      if (( B > 60 )); then
        # every round in $OUT as it ends (a call cut off keeps them); removed once the JSON is there
        timeout $(( B + 15 )) $PY benchmarks/train_ab.py --dtype "$dtype" --presets "$presets" \
          --blocks "${AB_BLOCKS:-60}" --block-updates 10 --budget "$B" --out "$WORK/$step" \
          --progress "$OUT/$step.jsonl" > "$WORK/$step.log" 2>&1; status $? "$WORK/$step.log" "$step"
      else
        echo "$step: not run (${B}s left)"
      fi
      grep "^|\|^paired\|not started\|Error" "$WORK/$step.log" 2>/dev/null | cut -c1-200 | tail -12
      [[ -f "$WORK/$step/train_ab.json" ]] && cp "$WORK/$step/train_ab.json" "$OUT/$step.json" && rm -f "$OUT/$step.jsonl"
      keep none none ;;
    sweep)
      say "sweep: kernel tiles ($(left)s left)"
      timeout "$(limit 600)" $PY benchmarks/gpu_kernels.py --parts sweep --sweep-lengths "${SWEEP_LENGTHS:-4096,1024}" \
        --out "$OUT/sweep.json" > "$WORK/sweep.log" 2>&1; status $? "$WORK/sweep.log" sweep
      grep "^\[kernels\] sweep" "$WORK/sweep.log"; keep none none ;;
    host)
      say "host: launch_costs, then bench_host on CUDA, base size and proxy shape ($(left)s left)"
      timeout "$(limit 60)" $PY benchmarks/launch_costs.py --device cuda --rounds 9 --min-time 0.05 \
        --json "$OUT/launch-costs.json" \
        > "$WORK/launch-costs.log" 2>&1; status $? "$WORK/launch-costs.log" launch-costs
      grep "^|\|^launch costs\|Error\|error" "$WORK/launch-costs.log" | cut -c1-300
      for shape in base proxy; do
        args="--heads 1 --batch 2 --length 6" lim=80
        [[ $shape == base ]] && args="--heads 8 --width 512 --batch 8 --length 24 --profile 5" lim=110
        timeout "$(limit $lim)" $PY benchmarks/bench_host.py --device cuda $args \
          --presets stock,softmax,rela_g,rela_g_triton,rela_i,reluformer,reluformer_triton --rounds 11 \
          --json "$WORK/host-$shape.json" > "$WORK/host-$shape.log" 2>&1
        grep -v "^round" "$WORK/host-$shape.log" | grep "^|\|^host\|^where\|top host:\|one warm step:\|Error\|error" | cut -c1-400
      done
      keep none none ;;
    demo)
      say "demo: make demo's cuda recipe, its runs side by side ($(left)s left)"
      timeout "$(limit 600)" $PY scripts/demo.py --recipe cuda --raw-dir gpu_data/multi30k_shipped \
        --out "$WORK/demo" ${DEMO_ARGS:-} > "$WORK/demo.log" 2>&1
      echo "demo exit status $?"
      grep -v "training: update\|translating test: sentence\|^\[demo .*\] .* \.\.\. (log:" "$WORK/demo.log" | tail -40
      [[ -f "$WORK/demo/results.json" ]] && cp "$WORK/demo/results.json" "$OUT/demo-results.json"
      keep none none ;;
    fp32-probe)
      say "fp32-probe: the fp32 forward's tiles, IEEE and TF32 dots ($(left)s left)"
      timeout "$(limit 600)" $PY benchmarks/gpu_kernels.py --parts fp32probe --out "$OUT/fp32probe.json" \
        > "$WORK/fp32probe.log" 2>&1; status $? "$WORK/fp32probe.log" fp32-probe
      grep "^\[kernels\] fp32probe" "$WORK/fp32probe.log"; keep none none ;;
    *) say "unknown step $step (kernels, train-fp16, train-bf16, ab-fp16, ab-bf16, sweep, host, demo, fp32-probe)" ;;
  esac
done
say "done"
