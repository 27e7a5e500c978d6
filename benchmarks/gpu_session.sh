#!/usr/bin/env bash
# One lent GPU session of issue 31 item 8, in one call of at most ~9.5 minutes: every step
# has its own time limit and writes under $OUT as it goes (a cut-off call keeps the steps
# that ended).  Run from the repository root on the GPU machine:
#
#   OUT=/some/dir bash benchmarks/gpu_session.sh [TOTAL_SECONDS]
#
# It needs, carried with the checkout (ignored paths): gpu_wheels/ (the 8 wheels the GPU
# image lacks, cp312: docs/performance.md "GPU session") and gpu_data/multi30k/data-bin
# (Multi30k binarized by data_prep/prepare_multi30k.py, for the loss-scale runs).
#
# Steps: 1. install the wheels into /tmp/site; 2. the fp16 loss-scale runs (softmax,
# ReLA-g eager, ReLA-g triton; 1,000 updates on Multi30k) in the background while
# 3. the kernels' CUDA correctness runs; 4. kernel timing against SDPA flash (after the
# loss-scale runs end: nothing else on the GPU); 5. fairseq-train updates/s, fp16 then
# bf16, alternating rounds, until the time is spent.
set -u
OUT=${OUT:-gpu_session_out}
TOTAL=${1:-560}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/session.log") 2>&1
T0=$(date +%s)
left() { echo $(( TOTAL - ($(date +%s) - T0) )); }
say() { echo "[gpu-session +$(( $(date +%s) - T0 ))s] $*"; }
PY=${PYTHON:-python3}

say "1. environment and wheels"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/nvidia-smi.csv" 2>&1
timeout 60 $PY -m pip install -q --no-index --no-deps --target /tmp/site gpu_wheels/*.whl > "$OUT/pip.log" 2>&1 \
  || { say "pip install failed:"; tail -20 "$OUT/pip.log"; }
export PYTHONPATH=/tmp/site:$PWD
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
$PY - > "$OUT/versions.txt" 2>&1 <<'EOF'
import sys, torch, triton, fairseq, numpy
print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__,
      "fairseq", fairseq.__version__, "numpy", numpy.__version__, "device", torch.cuda.get_device_name(0))
import fairseq_sparse_attn.kernels.relu_attention, fairseq_sparse_attn.kernels.output_norm
print("plugin kernels import ok")
EOF
cat "$OUT/versions.txt"

say "2. loss-scale runs in the background (fp16, 1000 updates, Multi30k)"
timeout 190 $PY benchmarks/bench_gpu.py --parts loss_scale --loss-scale-data gpu_data/multi30k/data-bin \
  --budget 175 --out "$OUT/loss_scale" > "$OUT/loss_scale.log" 2>&1 &
LS=$!

say "3. kernel correctness (CUDA, head dims 32-256, fp32/fp16/bf16)"
timeout 200 $PY benchmarks/gpu_kernels.py --parts correctness --out "$OUT/kernels_correctness.json" 2>&1 \
  | grep -v " ok (" ; say "correctness: $(grep -c '"ok": true' "$OUT/kernels_correctness.json" 2>/dev/null) ok, $(grep -c '"ok": false' "$OUT/kernels_correctness.json" 2>/dev/null) failed"

say "waiting for the loss-scale runs"
wait $LS; tail -4 "$OUT/loss_scale.log"

say "4. kernel timing against SDPA flash (head dim 64)"
timeout 120 $PY benchmarks/gpu_kernels.py --parts timing --out "$OUT/kernels_timing.json"

say "5. fairseq-train updates/s, fp16 ($(left)s left)"
B=$(( $(left) * 62 / 100 )); (( B > 20 )) && timeout $(( B + 40 )) $PY benchmarks/bench_gpu.py --parts train --dtypes fp16 \
  --presets softmax,rela_g,rela_g_triton,rela_i,reluformer --max-update 30 --budget $B --out "$OUT/train_fp16" \
  > "$OUT/train_fp16.log" 2>&1; tail -12 "$OUT/train_fp16.log"
say "5b. bf16 ($(left)s left)"
B=$(( $(left) - 25 )); (( B > 20 )) && timeout $(( B + 20 )) $PY benchmarks/bench_gpu.py --parts train --dtypes bf16 \
  --presets softmax,rela_g,rela_g_triton --max-update 30 --budget $B --out "$OUT/train_bf16" \
  > "$OUT/train_bf16.log" 2>&1; tail -10 "$OUT/train_bf16.log"
say "done"
