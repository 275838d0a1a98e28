#!/usr/bin/env bash
# scripts/bench-cuda.sh — the CUDA benchmark on a fresh GPU machine, as one command:
#   1. builds dsv4 with the CUDA backend (scripts/test-cuda.sh --build-only; skip with --skip-build),
#   2. writes the full-size synthetic DS4 Flash q2 model (the published file's tensor names, types and
#      80.76 GiB; random weights, seed 1) into a RAM-backed tmpfs unless it is already there,
#   3. runs `dsv4 bench --backend cuda -m <model> <bench args>`.
# Usage: scripts/bench-cuda.sh [--skip-build] [--model PATH] [--preset flash|flash-4l] [--layers N]
#                             [-- bench args…]   (--layers N: the preset's first N layers)
# Environment: BUILD_DIR (default build-cuda), SYNTH_DIR (default /dev/shm).
# The synthetic file needs ~81 GiB free in SYNTH_DIR (an H200 machine's /dev/shm holds 128 GiB); the
# write takes about two minutes with 16 cores (docs/cuda.md has measured times).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-cuda}
SYNTH_DIR=${SYNTH_DIR:-/dev/shm}
build=1 preset=flash layers="" model=""
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-build) build=0 ;;
    --model) model=$2; shift ;;
    --preset) preset=$2; shift ;;
    --layers) layers=$2; shift ;;
    --) shift; break ;;
    *) echo "bench-cuda.sh: unknown option $1 (see the header)" >&2; exit 2 ;;
  esac
  shift
done
if [ "$build" = 1 ]; then BUILD_DIR=$BUILD_DIR scripts/test-cuda.sh --build-only; fi
dsv4=$BUILD_DIR/dsv4
[ -x "$dsv4" ] || { echo "bench-cuda.sh: $dsv4 not built" >&2; exit 1; }
if [ -z "$model" ]; then
  model=$SYNTH_DIR/dsv4-$preset${layers:+-${layers}l}-q2-seed1.gguf
  if [ ! -s "$model" ]; then
    echo "bench-cuda.sh: writing $model"
    start=$SECONDS
    "$dsv4" synth --preset "$preset" ${layers:+--layers "$layers"} --type q2 --seed 1 --out "$model.part"
    mv "$model.part" "$model"
    echo "bench-cuda.sh: synth took $((SECONDS - start)) s"
  fi
fi
exec "$dsv4" bench --backend cuda -m "$model" "$@"
