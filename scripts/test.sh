#!/usr/bin/env bash
# scripts/test.sh — the test command (README "Run the tests"; CI runs exactly this via .ci/run).
#   1. set-up (apt packages, pinned Python tools in .venv)
#   2. Release build with warnings as errors, the default CTest suite (every label but `slow` and `soak`)
#   3. ASan+UBSan build of the unit tests, run; the server soak (label soak) against it
#   4. the fuzzers (GGUF reader, DSML parser, HTTP request parser) for a bounded time (default 60 s;
#      DSV4_FUZZ_SECONDS=0 skips)
# Options: --quick skips 3 and 4.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
quick=0; [ "${1:-}" = "--quick" ] && quick=1

scripts/setup.sh

echo "== build (Release, -Werror)"
# Reuses build/ (and build-asan/) from earlier runs: only what changed is recompiled. A build/ first
# configured without -DDSV4_WERROR=ON (README's plain `cmake -S . -B build`) recompiles once here,
# since -Werror changes every compile command; DSV4_TESTS=ON undoes a fast -DDSV4_TESTS=OFF build.
if [ -f build/CMakeCache.txt ] && ! grep -q '^DSV4_WERROR:BOOL=ON' build/CMakeCache.txt; then
  echo "note: build/ was configured without -DDSV4_WERROR=ON: everything recompiles once with it (CI's setting)"
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DDSV4_WERROR=ON -DDSV4_TESTS=ON >/dev/null
cmake --build build -j"$JOBS"
echo "== tests"
ctest --test-dir build --output-on-failure -j"$JOBS" -LE 'slow|soak'

if [ $quick -eq 0 ]; then
  echo "== ASan+UBSan unit tests"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSV4_WERROR=ON -DDSV4_SANITIZE=ON -DDSV4_TESTS=ON >/dev/null
  cmake --build build-asan -j"$JOBS"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$JOBS" -L unit
  echo "== ASan+UBSan server soak"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -L soak
  secs=${DSV4_FUZZ_SECONDS:-60}
  if [ "$secs" != "0" ]; then
    echo "== fuzz GGUF reader, DSML parser, HTTP request parser (${secs}s)"
    scripts/run_fuzz.sh "$secs"
  fi
fi
echo "== all tests passed"
