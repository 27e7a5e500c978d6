#!/usr/bin/env bash
# make install, step 1b: Triton at the version the installed torch pins, on CPU machines too:
# the fused kernels (fairseq_sparse_attn/kernels) run on GPUs, and through Triton's
# interpreter in the CPU tests.  torch's CUDA wheels declare the version, its CPU wheels do
# not: scripts/triton_pin.py reads torch's metadata, else maps torch's minor version
# (TRITON_VERSION=X.Y.Z overrides).  Idempotent: nothing is installed when that version is.
# FSA_INSTALL_DRY_RUN=1 prints the pip command instead of running it.
set -euo pipefail
PY=${PYTHON:-python3}
PIP=("$PY" -m pip install --disable-pip-version-check)
[[ -n "${FSA_INSTALL_DRY_RUN:-}" ]] && PIP=(echo "[dry-run]" "${PIP[@]}")
cd "$(dirname "$0")/.."

say() { echo "[install] $*"; }

if ! pin=$("$PY" scripts/triton_pin.py); then
  say "skipping triton (see the line above): the triton attention backend and its tests need it"
  exit 0
fi
# the kernels run with the Triton versions fairseq_sparse_attn/kernels/served.py names: say so
# for another (a cluster's own torch 2.7-2.9 pins Triton 3.3-3.5)
unserved=$("$PY" -c 'import sys; from fairseq_sparse_attn.kernels.served import triton_unserved
print(triton_unserved(sys.argv[1]) or "")' "${pin#triton==}" 2>/dev/null || true)
if [[ -n "$unserved" ]]; then
  say "note: $unserved: --attn-backend triton is refused under it, and auto runs the other backends"
fi
have=$("$PY" -c 'import importlib.metadata as m; print("triton==" + m.version("triton"))' 2>/dev/null || true)
if [[ "$have" == "$pin" ]]; then
  say "keeping installed $pin (the version torch pins)"
else
  say "installing $pin (for torch $("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))'))"
  "${PIP[@]}" "$pin"
fi
