#!/usr/bin/env bash
# scripts/fetch-debs.sh — downloads (never installs) the Debian packages a GPU machine without network
# may lack for building dsv4 — none today: the HTTP server (src/server/http) and the tokenizer's
# pre-tokenizer are this project's own code, so cpp-httplib (with brotli/OpenSSL/zlib) and PCRE2 are
# no longer needed. Add a package to DEV below if a dependency comes back; with DEV empty the script
# says so and downloads nothing. It downloads the packages, the runtime libraries they link to and
# pkgconf (used only where the machine has no pkg-config), into .debs/ (git-
# ignored). Run it where apt works, with the same distribution as the GPU machine (Debian 12 here);
# carry .debs/ to the GPU machine with the tree; scripts/test-cuda.sh unpacks them with dpkg -x into a
# private prefix (never into /) and points CMake at it.
#   scripts/fetch-debs.sh            the packages below and their direct library dependencies
# Needs apt-get and apt-cache; no root (apt-get download writes to the current directory only).
set -euo pipefail
cd "$(dirname "$0")/.."

DEV=()
TOOLS=(pkgconf-bin libpkgconf3)

if [ ${#DEV[@]} -eq 0 ]; then
  echo "fetch-debs: nothing to fetch (the build needs no package beyond cmake, g++, gtest, nlohmann-json, CLI11)"
  exit 0
fi

# The dev packages and their direct Depends, without virtual packages, the C library and compilers
# (the GPU machine has a toolchain: it builds everything else).
want=("${DEV[@]}" "${TOOLS[@]}")
for p in "${DEV[@]}"; do
  while read -r dep; do
    want+=("$dep")
  done < <(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
             --no-enhances "$p" | awk '/^ *Depends: [^<]/ {print $2}' | grep -Ev '^(libc6|libc6-dev|libc-dev|linux-libc-dev)$')
done
mapfile -t want < <(printf '%s\n' "${want[@]}" | sort -u)

mkdir -p .debs
cd .debs
rm -f ./*.deb
echo "fetch-debs: downloading ${#want[@]} packages into .debs/: ${want[*]}"
apt-get download "${want[@]}"
ls -1 ./*.deb | sed 's|^\./|  |'
echo "fetch-debs: ok ($(du -sh . | cut -f1)); scripts/test-cuda.sh unpacks them into its prefix"
