#!/usr/bin/env bash
# make wheelhouse: every wheel the plugin needs beyond torch, for a GPU node without internet.
#
#   make wheelhouse PYTHON_VERSION=3.12 [WHEELHOUSE=wheelhouse]   (on a machine with PyPI)
#   copy wheelhouse/ to the node, then: make install OFFLINE=wheelhouse/
#
# Three kinds of wheels (docs/distributed.md "Offline install"):
#   1. binary wheels for the node (--only-binary=:all: --python-version --platform), with
#      their dependencies: fairseq's runtime deps, the plugin's install_requires, tensorboardX;
#   2. binary wheels WITHOUT dependencies for the two packages that require torch
#      (fairseq-fixed also requires torchaudio): resolving them would download a torch
#      (and its CUDA libraries) that the node already has;
#   3. wheels built here from source: antlr4-python3-runtime 4.9.3 (omegaconf's dependency,
#      only an sdist on PyPI; pure Python, so one py3-none-any wheel serves every node) and
#      the plugin itself (pure Python).
set -euo pipefail
PY=${PYTHON:-python3}
PYTHON_VERSION=${PYTHON_VERSION:?set PYTHON_VERSION, e.g. make wheelhouse PYTHON_VERSION=3.12}
OUT=${WHEELHOUSE:-wheelhouse}
cd "$(dirname "$0")/.."
[[ "$PYTHON_VERSION" =~ ^3\.[0-9]+$ ]] || {
  echo "make wheelhouse: error: PYTHON_VERSION must look like 3.12, got '$PYTHON_VERSION'" >&2; exit 2; }
PIP="$PY -m pip --disable-pip-version-check"
TARGET=(--only-binary=:all: --python-version "$PYTHON_VERSION"
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64
        --platform manylinux_2_17_x86_64 --platform any)
say() { echo "[wheelhouse] $*"; }
mkdir -p "$OUT"

# the package lists (the pinned versions scripts/install.sh installs online)
source scripts/offline_packages.sh
WITH_DEPS=("${FSA_OFFLINE_WITH_DEPS[@]}")
NO_DEPS=("${FSA_OFFLINE_NO_DEPS[@]}")

say "3a. antlr4-python3-runtime 4.9.3 (sdist only) -> wheel"
$PIP wheel --no-deps -w "$OUT" antlr4-python3-runtime==4.9.3
say "1. binary wheels for python $PYTHON_VERSION manylinux x86_64, with dependencies"
$PIP download "${TARGET[@]}" --find-links "$OUT" -d "$OUT" "${WITH_DEPS[@]}"
say "2. fairseq-fixed and entmax without dependencies (they require torch: the node's stays)"
$PIP download "${TARGET[@]}" --no-deps -d "$OUT" "${NO_DEPS[@]}"
say "3b. the plugin's own wheel"
had_build=$([[ -e build ]] && echo 1 || true)
$PIP wheel --no-deps --no-build-isolation -w "$OUT" .
[[ -n "$had_build" ]] || rm -rf build  # setuptools' in-tree build/ (a stale copy otherwise)
if ls "$OUT"/torch-* >/dev/null 2>&1; then
  echo "make wheelhouse: error: a torch wheel got into $OUT (a dependency asked for torch)" >&2; exit 1
fi
say "$(ls "$OUT"/*.whl | wc -l) wheels in $OUT/ ($(du -sh "$OUT" | cut -f1)); on the node: make install OFFLINE=$OUT/"
