#!/usr/bin/env bash
# scripts/ncu-detail.sh — why a decode kernel takes the time it takes: Nsight Compute's speed-of-light,
# occupancy, launch, scheduler, warp-state and memory sections for the first kernels whose names match
# a regular expression, in a decode-shaped step (a 1-token prompt: its step runs the decode forms),
# kernels launched one by one (--cuda-graphs off), clocks as found. Needs ncu and a built dsv4.
# Usage: scripts/ncu-detail.sh MODEL.gguf REGEX [kernels, default 24] [launches skipped, default 0]
# Environment: BUILD_DIR (default build-cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: scripts/ncu-detail.sh MODEL.gguf REGEX [kernels] [skip]}
regex=${2:?usage: scripts/ncu-detail.sh MODEL.gguf REGEX [kernels] [skip]}
count=${3:-24}
skip=${4:-0}
dsv4=${BUILD_DIR:-build-cuda}/dsv4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "[1000]" > "$tmp/tokens.json"
DSV4_CUDA_GRAPHS=off ncu --clock-control none -k "regex:$regex" --launch-skip "$skip" --launch-count "$count" \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
  --section WarpStateStats --section MemoryWorkloadAnalysis \
  "$dsv4" generate --backend cuda -m "$model" --tokens-file "$tmp/tokens.json" -n 1 --greedy 2>&1 |
  grep -vE '^==PROF==|^\s*$|^\s*-+\s*$'
