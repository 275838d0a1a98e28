#!/usr/bin/env bash
# scripts/profile-cuda.sh — where a decode step's GPU time goes, per kernel: runs `dsv4 generate`
# (greedy, a few tokens) under Nsight Compute with only the kernel-duration metric (clocks left as
# found), kernels launched one by one (--cuda-graphs off: ncu times each kernel alone), and prints a
# table of kernels by total time per decoded token. Needs ncu (Nsight Compute) and a built dsv4.
# Usage: scripts/profile-cuda.sh MODEL.gguf [decode tokens, default 4] [prompt tokens, default 64]
# Environment: BUILD_DIR (default build-cuda), OUT_CSV (keep ncu's raw CSV there).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: scripts/profile-cuda.sh MODEL.gguf [decode tokens] [prompt tokens]}
decode=${2:-4}
prompt=${3:-64}
dsv4=${BUILD_DIR:-build-cuda}/dsv4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -c "import json,random; random.seed(1); print(json.dumps([random.randrange(1000, 100000) for _ in range($prompt)]))" > "$tmp/tokens.json"
csv=${OUT_CSV:-$tmp/ncu.csv}
DSV4_CUDA_GRAPHS=off ncu --clock-control none --metrics gpu__time_duration.sum --export "$tmp/report" --force-overwrite \
  "$dsv4" generate --backend cuda -m "$model" --tokens-file "$tmp/tokens.json" -n "$decode" --greedy > "$tmp/ncu.log" 2>&1 ||
  { tail -20 "$tmp/ncu.log"; exit 1; }
ncu --import "$tmp/report.ncu-rep" --csv --print-units base > "$csv"
python3 - "$csv" "$decode" <<'PY'
import csv, sys, collections
path, decode = sys.argv[1], int(sys.argv[2])
rows = list(csv.reader(open(path)))
head = next(r for r in rows if "Kernel Name" in r)
rows = [r for r in rows if len(r) == len(head) and r[0].isdigit()]
ki, vi, gi = head.index("Kernel Name"), head.index("Metric Value"), head.index("Grid Size")
# Steps: the prefill is the first (largest) run of kernels; decode steps follow. Split where a step
# chooses its token (argmax, or the sampler's choice).
seq = [(r[ki], float(r[vi].replace(",", "")), r[gi]) for r in rows]
steps, cur = [], []
for name, ns, grid in seq:
    cur.append((name, ns, grid))
    if "argmax_fold_kernel" in name or "argmax_kernel" in name or "sample_choose_kernel" in name:
        steps.append(cur); cur = []
dec = steps[1:]
if not dec:
    sys.exit("profile: no decode steps found")
tot = collections.defaultdict(float); cnt = collections.Counter()
gtot = collections.defaultdict(float); gcnt = collections.Counter()
for st in dec:
    for name, ns, grid in st:
        short = name.replace("(anonymous namespace)::", "").replace("void ", "").replace("dsv4::cuda::", "").split("(")[0]
        tot[short] += ns; cnt[short] += 1
        gtot[(short, grid)] += ns; gcnt[(short, grid)] += 1
n = len(dec)
all_ns = sum(tot.values()) / n
print(f"decode steps profiled: {n}; kernels per step {sum(cnt.values()) / n:.0f}; kernel time per step {all_ns / 1e3:.1f} us")
print(f"{'kernel':<60} {'per step':>8} {'us/step':>9} {'us each':>8} {'share':>6}")
for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
    print(f"{k[:60]:<60} {cnt[k] / n:8.1f} {v / n / 1e3:9.1f} {v / cnt[k] / 1e3:8.2f} {100 * v / n / all_ns:5.1f}%")
print()
print(f"{'kernel, grid':<72} {'per step':>8} {'us/step':>9} {'us each':>8}")
for k, v in sorted(gtot.items(), key=lambda kv: -kv[1])[:30]:
    print(f"{(k[0][:52] + ' ' + k[1]):<72} {gcnt[k] / n:8.1f} {v / n / 1e3:9.1f} {v / gcnt[k] / 1e3:8.2f}")
PY
