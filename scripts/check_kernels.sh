#!/usr/bin/env bash
# make check-kernels: the ahead-of-time compile check (fairseq_sparse_attn/kernels/aot.py)
# under every Triton minor version our users' torch versions pin (scripts/triton_pin.py
# TORCH_TRITON; the newest patch of each: 3.6.0 and 3.7.1):
#   * the installed Triton: fit rules, and docs/performance.md's table compared;
#   * each other minor version (3.6.0: torch 2.10/2.11, what the lent GPU machines run), installed
#     once with `pip install --target` into $KERNEL_TRITON_CACHE/triton-X.Y.Z: fit rules
#     only (registers differ between versions).  A kernel that compiles under one version
#     can crash another's compiler at launch (2026-11-26: Triton 3.6.0's pipeliner on an
#     H100, while 3.7.1 compiled it here); this finds that without a GPU.
# KERNEL_TRITONS="X.Y.Z ..." names the other versions; KERNEL_TRITONS= (empty) checks only the
# installed one (offline).  AOT_JOBS=N compiles in N processes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
JOBS=${AOT_JOBS:-1}
CACHE=${KERNEL_TRITON_CACHE:-$HOME/.cache/fairseq_sparse_attn}
installed=$("$PY" -c 'import importlib.metadata as m; print(m.version("triton"))')
if [[ -z "${KERNEL_TRITONS+set}" ]]; then
  # (a patch release of the installed minor version is not compiled again: triton_pin.py)
  KERNEL_TRITONS=$("$PY" -c 'import sys; sys.path.insert(0, "scripts"); import triton_pin; print(" ".join(triton_pin.kernel_check_versions(sys.argv[1])))' "$installed")
fi

status=0
echo "[check-kernels] Triton $installed (installed)"
env -u TRITON_INTERPRET "$PY" -m fairseq_sparse_attn.kernels.aot --jobs "$JOBS" || status=1
for version in $KERNEL_TRITONS; do
  [[ "$version" == "$installed" ]] && continue
  target="$CACHE/triton-$version"
  if [[ ! -f "$target/triton/__init__.py" ]]; then
    echo "[check-kernels] installing triton==$version into $target"
    if ! "$PY" -m pip install -q --disable-pip-version-check --no-deps --target "$target.tmp" "triton==$version"; then
      echo "check-kernels: could not install triton==$version (offline? KERNEL_TRITONS= checks only the installed Triton)" >&2
      exit 1
    fi
    rm -rf "$target" && mv "$target.tmp" "$target"
  fi
  echo "[check-kernels] Triton $version ($target)"
  env -u TRITON_INTERPRET PYTHONPATH="$target:$PWD${PYTHONPATH:+:$PYTHONPATH}" \
    "$PY" -m fairseq_sparse_attn.kernels.aot --jobs "$JOBS" || status=1
done
exit $status
