#!/usr/bin/env bash
# scripts/lock-requirements.sh — regenerates requirements-test.lock from requirements-test.txt: every
# package the pinned test tools pull in (transitively), each pinned to one version with the sha256 of
# every file PyPI has for it. scripts/setup.sh installs from the lock with --require-hashes, so a
# package that changed on the index, or one nobody pinned, fails the install instead of slipping in.
#
#   scripts/lock-requirements.sh     (after editing requirements-test.txt; commit both files)
#
# Resolves for this machine's Python (CI: Debian 12's python3, 3.11, x86-64) with pip-tools, installed
# into a throwaway venv (never into .venv). Needs network access to PyPI; nothing else does.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP_TOOLS_VERSION=7.4.1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q --disable-pip-version-check "pip-tools==$PIP_TOOLS_VERSION"
# --allow-unsafe: pin setuptools/pip too when something depends on them (--require-hashes needs every one).
CUSTOM_COMPILE_COMMAND="scripts/lock-requirements.sh" \
  "$tmp/venv/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
  --cache-dir "$tmp/cache" --output-file requirements-test.lock requirements-test.txt
echo "requirements-test.lock: $(grep -c '^[A-Za-z0-9]' requirements-test.lock) packages pinned with hashes"
