#!/usr/bin/env bash
# scripts/setup.sh — installs everything dsv4 needs to build and test on Debian 12. Idempotent.
#   scripts/setup.sh            build dependencies (apt) + Python test tools (.venv, from requirements-test.lock)
#   scripts/setup.sh --no-venv  apt packages only
# Nothing else is downloaded at configure or build time.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake g++ pkg-config python3 python3-venv python3-pip
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  nlohmann-json3-dev libcli11-dev
  clang libclang-rt-dev
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "${1:-}" != "--no-venv" ]; then
  PY=python3
  # Prefer a python3 that has venv working (Debian's, or a pyenv one).
  if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
  # requirements-test.lock: every package, transitive ones included, pinned with its hashes
  # (scripts/lock-requirements.sh writes it from requirements-test.txt); anything else fails the install.
  stamp=.venv/.requirements.sha
  want=$(sha256sum requirements-test.lock | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    .venv/bin/pip install -q --disable-pip-version-check --require-hashes -r requirements-test.lock
    echo "$want" > "$stamp"
  fi
fi
echo "setup: ok"
