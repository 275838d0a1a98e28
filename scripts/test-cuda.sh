#!/usr/bin/env bash
# scripts/test-cuda.sh — the GPU test command (docs/cuda.md). Needs an NVIDIA GPU of compute capability
# ≥ 9.0, its driver, and cmake, g++, nvcc, gtest, nlohmann-json, CLI11. Works offline: packages the
# machine lacks (none today; see scripts/fetch-debs.sh) come from .debs/ (scripts/fetch-debs.sh, run where apt
# works), unpacked with dpkg -x into a private prefix that CMake is pointed at (never into /).
#   1. configure build-cuda with -DDSV4_CUDA=ON -DDSV4_WERROR=ON (Release, CUDA -lineinfo); build what the
#      GPU tests run (unit_backend, unit_model, dsv4; --build-all: every target, as CI does without a GPU)
#   2. ctest -L cuda: the conformance suite's cuda instances (every op, zero-bit bound) and the
#      CUDA-vs-CPU model tests (bit-identical logits, one sync per decode step)
#   3. compute-sanitizer memcheck (with leak check), racecheck and synccheck over the same two tests
#      (the model tests with a shorter prompt: DSV4_CUDA_TEST_TOKENS, default 260)
#   4. a summary table: test, result, seconds. Exit status 0 only if nothing failed.
# Options:
#   --configure-only    only configure             --build-only      stop after step 1
#   --skip-build        start at step 2 (build-cuda exists)       --build-all       build every target
#   --no-sanitizers     skip step 3                --sanitizers-only only step 3 (build-cuda exists)
#   --tools LIST        sanitizer tools, comma-separated (default memcheck,racecheck,synccheck)
# Environment: JOBS (default nproc), BUILD_DIR (default build-cuda), DSV4_PREFIX (default
# $BUILD_DIR/deps), DSV4_SANITIZER_TIMEOUT (seconds per sanitizer run, default 1200),
# DSV4_CUDA_TEST_TOKENS (model-test prompt under the sanitizers, default 260), DSV4_RACECHECK_MODEL=1 (also
# racecheck the model tests: over 200 s per mix) with DSV4_RACECHECK_MODEL_FILTER (default *CudaModelTest*/Q2).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-$(nproc)}
BUILD=${BUILD_DIR:-build-cuda}
case "$BUILD" in /*) BUILD_ABS=$BUILD ;; *) BUILD_ABS=$ROOT/$BUILD ;; esac
PREFIX=${DSV4_PREFIX:-$BUILD_ABS/deps}
SAN_TIMEOUT=${DSV4_SANITIZER_TIMEOUT:-1200}
SAN_TOKENS=${DSV4_CUDA_TEST_TOKENS:-260}
TOOLS=memcheck,racecheck,synccheck
do_build=1 do_ctest=1 do_san=1 configure_only=0 build_all=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build-only) do_ctest=0; do_san=0 ;;
    --configure-only) configure_only=1 ;;
    --skip-build) do_build=0 ;;
    --build-all) build_all=1 ;;
    --no-sanitizers) do_san=0 ;;
    --sanitizers-only) do_build=0; do_ctest=0 ;;
    --tools) TOOLS=$2; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "test-cuda: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

ROWS=()   # "name|result|seconds"
failed=0 skipped=0
row() { ROWS+=("$1|$2|$3"); case "$2" in FAIL*) failed=1 ;; SKIP*) skipped=$((skipped + 1)) ;; esac; }
summary() {
  echo
  echo "== summary"
  printf '%-24s %-54s %8s\n' test result seconds
  printf '%-24s %-54s %8s\n' "------------------------" "------------------------------------------------------" "--------"
  for r in "${ROWS[@]}"; do
    IFS='|' read -r n res t <<<"$r"
    printf '%-24s %-54s %8s\n' "$n" "$res" "$t"
  done
  if [ $failed -ne 0 ]; then echo "test-cuda: FAILED"
  elif [ $skipped -ne 0 ]; then echo "test-cuda: no failures, but $skipped SKIPPED (nothing of those was checked on a GPU)"
  else echo "test-cuda: ok"; fi
}
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# --- the machine ----------------------------------------------------------------------------------
echo "== machine"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/  gpu: /'
else
  echo "  nvidia-smi not found: the cuda tests will report SKIPPED (no device)"
fi
devices=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$NVCC" ] && echo "  nvcc: $NVCC ($("$NVCC" --version | tail -1))"

# --- offline dependencies: .debs/*.deb unpacked into $PREFIX -----------------------------------------
CMAKE_DEPS=()
shopt -s nullglob
debs=(.debs/*.deb)
if [ ${#debs[@]} -gt 0 ]; then
  stamp=$PREFIX/.debs.sha256
  want=$(sha256sum "${debs[@]}" | sha256sum | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "== unpacking ${#debs[@]} packages from .debs/ into $PREFIX"
    rm -rf "$PREFIX"
    mkdir -p "$PREFIX"
    for d in "${debs[@]}"; do dpkg -x "$d" "$PREFIX" || { echo "test-cuda: dpkg -x $d failed" >&2; exit 1; }; done
    # The .pc files say prefix=/usr: point them at the prefix.
    find "$PREFIX" -name '*.pc' -exec sed -i -E "s#^(prefix|exec_prefix|libdir|includedir)=/usr#\1=$PREFIX/usr#" {} +
    echo "$want" > "$stamp"
  fi
  ARCH_LIB=$(ls -d "$PREFIX"/usr/lib/*-linux-gnu 2>/dev/null | head -1)
  ARCH=$(basename "${ARCH_LIB:-x86_64-linux-gnu}")
  export PKG_CONFIG_PATH="$ARCH_LIB/pkgconfig:$PREFIX/usr/lib/pkgconfig:$PREFIX/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  # No pkg-config on the machine: the prefix's pkgconf, through a wrapper that finds its library.
  if ! command -v pkg-config >/dev/null 2>&1 && [ -x "$PREFIX/usr/bin/pkgconf" ]; then
    mkdir -p "$PREFIX/bin"
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
      "$ARCH_LIB" "$PREFIX/usr/bin/pkgconf" > "$PREFIX/bin/pkg-config"
    chmod +x "$PREFIX/bin/pkg-config"
    export PATH="$PREFIX/bin:$PATH"
    CMAKE_DEPS+=("-DPKG_CONFIG_EXECUTABLE=$PREFIX/bin/pkg-config")
  fi
  # Headers: pkg-config gives -I$PREFIX/usr/include; the multiarch dir only after the system's own.
  # Libraries: the executables carry an RPATH (not RUNPATH, so it also serves the libraries'
  # own dependencies) to the prefix.
  CMAKE_DEPS+=("-DCMAKE_PREFIX_PATH=$PREFIX/usr"
               "-DCMAKE_CXX_FLAGS=-idirafter $PREFIX/usr/include/$ARCH -idirafter $PREFIX/usr/include"
               "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags -Wl,-rpath,$ARCH_LIB -Wl,-rpath-link,$ARCH_LIB")
  echo "  dependencies: pkg-config files from $PREFIX first ($(ls "$PREFIX"/usr/include | tr '\n' ' '))"
fi

# --- 1. configure and build -----------------------------------------------------------------------
if [ $do_build -eq 1 ]; then
  echo "== configure $BUILD (DSV4_CUDA=ON, Release, -Werror)"
  t=$(now)
  mkdir -p "$BUILD"
  if cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DDSV4_CUDA=ON -DDSV4_WERROR=ON \
       -DCMAKE_CUDA_FLAGS=-lineinfo "${CMAKE_DEPS[@]}" >"$BUILD/configure.log" 2>&1 ||
     { cat "$BUILD/configure.log"; false; }; then
    grep -E "dsv4: CUDA|CUDA compiler identification" "$BUILD/configure.log" | sed 's/^/  /'
    row configure PASS "$(secs "$t")"
  else
    row configure FAIL "$(secs "$t")"; summary; exit 1
  fi
  if [ $configure_only -eq 1 ]; then
    summary; exit $failed
  fi
  targets=(--target unit_backend unit_model dsv4)
  [ $build_all -eq 1 ] && targets=()
  echo "== build (-j$JOBS${targets[*]:+ ${targets[*]}})"
  t=$(now)
  if cmake --build "$BUILD" -j"$JOBS" "${targets[@]}"; then
    row build PASS "$(secs "$t")"
  else
    row build FAIL "$(secs "$t")"; summary; exit 1
  fi
  [ $do_ctest -eq 0 ] && [ $do_san -eq 0 ] && { summary; exit $failed; }
fi
if [ ! -x "$BUILD/tests/unit_backend" ] || [ ! -x "$BUILD/tests/unit_model" ]; then
  echo "test-cuda: $BUILD/tests/unit_backend and unit_model not built (run without --skip-build first)" >&2
  exit 1
fi
grep -q "^DSV4_CUDA:BOOL=ON" "$BUILD/CMakeCache.txt" || echo "test-cuda: WARNING: $BUILD was configured without DSV4_CUDA: the cuda tests will skip"

# --- 2. ctest -L cuda -------------------------------------------------------------------------------
if [ $do_ctest -eq 1 ]; then
  echo "== ctest -L cuda"
  t=$(now)
  ctest --test-dir "$BUILD" -L cuda --output-on-failure -V 2>&1 | tee "$BUILD/ctest-cuda.log" |
    grep -E "^ *[0-9]+/[0-9]+ Test|\[conformance\]|\[  FAILED  \]|Failure|differ" || true
  n=0
  while IFS='|' read -r num name status time; do
    n=$((n + 1))
    case "$status" in
      Passed) row "$name" PASS "$time" ;;
      Skipped)
        why=$(grep -m1 -E "^$num: SKIPPED(:| \(no CUDA\):) " "$BUILD/ctest-cuda.log" | sed -E "s/^$num: SKIPPED(:| \(no CUDA\):) //")
        # A GPU is there but the test did not use it: that is a failure, not a skip.
        if [ "${devices:-0}" -gt 0 ]; then row "$name" "FAIL (skipped: ${why:0:48})" "$time"
        else row "$name" "SKIPPED (${why:0:48})" "$time"; fi ;;
      *) row "$name" "FAIL ($status)" "$time" ;;
    esac
  done < <(awk '/^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: / {
      line = $0; sub(/^.*Test +#/, "", line); num = line; sub(/:.*/, "", num); sub(/^[0-9]+: /, "", line)
      name = line; sub(/ .*/, "", name)
      rest = line; sub(/^[^ ]+ \.*/, "", rest); gsub(/\*/, "", rest)
      t = rest; sub(/ sec.*/, "", t); sub(/.* /, "", t)
      st = rest; sub(/ +[0-9.]+ sec.*/, "", st); gsub(/^ +| +$/, "", st)
      print num "|" name "|" st "|" t }' "$BUILD/ctest-cuda.log")
  [ $n -eq 0 ] && row "ctest -L cuda" "FAIL (no cuda tests ran)" "$(secs "$t")"
fi

# --- 3. compute-sanitizer ------------------------------------------------------------------------------
if [ $do_san -eq 1 ]; then
  SAN=$(command -v compute-sanitizer || true)
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [ -z "$SAN" ] && [ -x "$c" ] && SAN=$c
  done
  IFS=',' read -r -a tools <<<"$TOOLS"
  for tool in "${tools[@]}"; do
    for target in conformance model; do
      name="$tool $target"
      if [ -z "$SAN" ]; then row "$name" "SKIPPED (no compute-sanitizer)" 0; continue; fi
      if [ "${devices:-0}" -eq 0 ]; then row "$name" "SKIPPED (no GPU)" 0; continue; fi
      extra=()
      [ "$tool" = memcheck ] && extra=(--leak-check full)
      if [ $target = conformance ]; then
        cmd=("$BUILD/tests/unit_backend" "--gtest_filter=*/cuda")
      else
        cmd=("$BUILD/tests/unit_model" "--gtest_filter=*CudaModelTest*")
        # racecheck tracks every shared-memory access: the model tests take over 200 s under it even
        # for the q2 mix alone (measured on an H200), so by default racecheck covers the kernels through
        # the conformance suite (every kernel the model runs is there) and the model tests only when
        # DSV4_RACECHECK_MODEL=1 (DSV4_RACECHECK_MODEL_FILTER picks them, default the q2 mix).
        if [ "$tool" = racecheck ]; then
          if [ "${DSV4_RACECHECK_MODEL:-0}" != 1 ]; then
            row "$name" "SKIPPED (slow under racecheck: DSV4_RACECHECK_MODEL=1)" 0; continue
          fi
          cmd=("$BUILD/tests/unit_model" "--gtest_filter=${DSV4_RACECHECK_MODEL_FILTER:-*CudaModelTest*/Q2}")
        fi
      fi
      echo "== compute-sanitizer --tool $tool ${cmd[*]}"
      log="$BUILD/sanitizer-$tool-$target.log"
      t=$(now)
      DSV4_CUDA_TEST_TOKENS=$SAN_TOKENS timeout "$SAN_TIMEOUT" "$SAN" --tool "$tool" --error-exitcode 99 "${extra[@]}" \
        "${cmd[@]}" >"$log" 2>&1
      rc=$?
      grep -E "ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED|SKIPPED) " "$log" | sed 's/^/  /'
      if [ $rc -eq 0 ]; then
        if grep -q "SKIPPED (no CUDA)\|SKIPPED: create_backend\|not in this build" "$log"; then
          row "$name" "SKIPPED (no CUDA backend/device)" "$(secs "$t")"
        else
          row "$name" PASS "$(secs "$t")"
        fi
      elif [ $rc -eq 124 ]; then
        row "$name" "FAIL (timeout ${SAN_TIMEOUT}s)" "$(secs "$t")"
      elif [ $rc -eq 99 ]; then
        row "$name" "FAIL (sanitizer errors: $log)" "$(secs "$t")"; tail -40 "$log"
      else
        row "$name" "FAIL (exit $rc: $log)" "$(secs "$t")"; tail -40 "$log"
      fi
    done
  done
fi

summary
exit $failed
