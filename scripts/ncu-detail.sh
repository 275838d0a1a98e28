#!/usr/bin/env bash
# scripts/ncu-detail.sh — why a decode kernel takes the time it takes: Nsight Compute's speed-of-light,
# occupancy, launch, scheduler, warp-state and memory sections for the first kernels whose names match
# a regular expression, in a decode-shaped step (a 1-token prompt: its step runs the decode forms),
# kernels launched one by one (--cuda-graphs off), clocks as found. Needs ncu and a built dsv4.
# --source DIR: instead, the warp-stall samples per SASS instruction (SourceCounters): the raw source
# page as DIR/<n>.csv per kernel and, printed, each kernel's 30 instructions with the most samples
# (where a latency-bound kernel waits, instruction by instruction).
# Usage: scripts/ncu-detail.sh [--source DIR] MODEL.gguf REGEX [kernels, default 24] [launches skipped, default 0]
# Environment: BUILD_DIR (default build-cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
source_dir=""
if [ "${1:-}" = "--source" ]; then source_dir=$2; shift 2; fi
model=${1:?usage: scripts/ncu-detail.sh [--source DIR] MODEL.gguf REGEX [kernels] [skip]}
regex=${2:?usage: scripts/ncu-detail.sh [--source DIR] MODEL.gguf REGEX [kernels] [skip]}
count=${3:-24}
skip=${4:-0}
dsv4=${BUILD_DIR:-build-cuda}/dsv4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "[1000]" > "$tmp/tokens.json"
run_dsv4=("$dsv4" generate --backend cuda -m "$model" --tokens-file "$tmp/tokens.json" -n 1 --greedy)
if [ -z "$source_dir" ]; then
  DSV4_CUDA_GRAPHS=off ncu --clock-control none -k "regex:$regex" --launch-skip "$skip" --launch-count "$count" \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
    --section WarpStateStats --section MemoryWorkloadAnalysis "${run_dsv4[@]}" 2>&1 |
    grep -vE '^==PROF==|^\s*$|^\s*-+\s*$'
  exit 0
fi
mkdir -p "$source_dir"
DSV4_CUDA_GRAPHS=off ncu --clock-control none -k "regex:$regex" --launch-skip "$skip" --launch-count "$count" \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight -o "$tmp/rep" "${run_dsv4[@]}" > "$tmp/run.log" 2>&1 ||
  { tail -20 "$tmp/run.log"; exit 1; }
ncu -i "$tmp/rep.ncu-rep" --page source --csv --print-source sass > "$source_dir/source.csv" 2> "$source_dir/source.err" || true
ncu -i "$tmp/rep.ncu-rep" --page details --csv > "$source_dir/details.csv" 2>/dev/null || true
python3 - "$source_dir/source.csv" <<'PY'
import csv, sys
# The source page holds one table per kernel; each starts with a header row naming "Address"/"Source".
rows, header, tables = [], None, []
for rec in csv.reader(open(sys.argv[1], errors="replace")):
    if any(c in ("Address", "# Address") for c in rec) and "Source" in rec:
        header = rec
        tables.append([])
        continue
    if header and len(rec) == len(header):
        tables[-1].append(dict(zip(header, rec)))
for k, t in enumerate(tables):
    key = next((h for h in (header or []) if h.startswith("Warp Stall Sampling (All")), None)
    if key is None or not t:
        print(f"kernel {k}: no stall samples ({len(t)} rows)"); continue
    num = lambda r: float((r.get(key) or "0").replace(",", "") or 0)
    total = sum(num(r) for r in t) or 1.0
    print(f"== kernel {k}: {len(t)} SASS instructions, {total:.0f} stall samples")
    for r in sorted(t, key=num, reverse=True)[:30]:
        print(f"{100 * num(r) / total:5.1f}%  {r.get('Address', r.get('# Address', '')):>6}  {r['Source'][:110]}")
PY
