#!/usr/bin/env bash
# Prepare, on a machine with PyPI, what benchmarks/gpu_session.sh needs on the lent GPU
# machine (no package registry there; Python 3.12, torch 2.11, triton 3.6 installed):
#   gpu_wheels/                  the cp312 wheels its image lacks (~22 MB)
#   gpu_data/multi30k/data-bin   Multi30k binarized (~3 MB), for the loss-scale runs
#   gpu_data/multi30k_shipped    the shipped Multi30k files (1.3 MB), for the demo step
#                                (scripts/demo.py prepares its own data from them)
# All are ignored paths: carry them with the call (carry: gpu_wheels,
# gpu_data/multi30k/data-bin, gpu_data/multi30k_shipped; ~45 MB of the 64 MiB a call carries).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
mkdir -p gpu_wheels
# hydra-core 1.3.2 / omegaconf 2.3.0 as scripts/offline_packages.sh pins them (1.0.7 does
# not import on Python 3.12); antlr4 4.9.3 is an sdist only: built here (pure Python)
$PY -m pip wheel -q --no-deps -w gpu_wheels antlr4-python3-runtime==4.9.3
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform any -d gpu_wheels fairseq-fixed==0.12.3.1 hydra-core==1.3.2 omegaconf==2.3.0 bitarray \
  "entmax>=1.1" subword-nmt sacremoses
# the demo's plots (scripts/demo.py: learning curves, heatmap): matplotlib and what it imports
# (numpy and packaging are on the GPU image)
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform any -d gpu_wheels matplotlib contourpy cycler fonttools kiwisolver pillow pyparsing \
  python-dateutil six
# the shipped Multi30k files: $MULTI30K_DIR, else ../shared/data/multi30k (as the Makefile);
# without either, data_prep downloads them
shipped=${MULTI30K_DIR:-../shared/data/multi30k}
if [[ ! -d gpu_data/multi30k/data-bin ]]; then
  raw=(); [[ -d $shipped ]] && raw=(--raw-dir "$shipped")
  PYTHONPATH=$PWD $PY data_prep/prepare_multi30k.py --out gpu_data/multi30k --src en --tgt de "${raw[@]}"
fi
if [[ ! -d gpu_data/multi30k_shipped ]]; then
  [[ -d $shipped ]] || { echo "gpu_session_prepare: no Multi30k files at $shipped (set MULTI30K_DIR)" >&2; exit 1; }
  mkdir -p gpu_data/multi30k_shipped && cp "$shipped"/* gpu_data/multi30k_shipped/
fi
echo "[gpu-session-prepare] $(ls gpu_wheels/*.whl | wc -l) wheels ($(du -sh gpu_wheels | cut -f1)), data $(du -sh gpu_data/multi30k/data-bin | cut -f1), shipped Multi30k $(du -sh gpu_data/multi30k_shipped | cut -f1)"
