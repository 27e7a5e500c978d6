#!/usr/bin/env bash
# Headless Chromium for the explorer's browser test (tests/integration/test_explorer.py):
# Debian's `chromium` package, installed only where /usr/bin/chromium is missing.
# Needs root (or sudo) and the Debian archive; without them the browser test is skipped
# with its reason.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  echo "[install_chromium] /usr/bin/chromium is there: $(/usr/bin/chromium --version 2>/dev/null || echo '?')"
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
    echo "[install_chromium] not root and no sudo: cannot install chromium" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium
echo "[install_chromium] installed: $(/usr/bin/chromium --version 2>/dev/null || echo '?')"
