#!/usr/bin/env bash
# scripts/gpu-check.sh — what a change to the CUDA backend needs on a GPU machine, as one command that
# fits one device call (~7-9 minutes on an H200 with 16 cores): the bits, then the speed, then where the
# time goes.
#   1. scripts/test-cuda.sh --no-sanitizers: builds build-cuda and runs the cuda tests (the conformance
#      suite's cuda instances and CudaModelTest: bit-identical to the CPU);
#   2. scripts/bench-cuda-ab.sh --skip-build --base-tar FILE: this tree against a base version on the
#      full synthetic Flash q2 (written to /dev/shm once); skipped without --base-tar (then
#      scripts/bench-cuda.sh runs this tree alone);
#   3. scripts/profile-cuda.sh on that model: 3 decoded tokens after a prompt of each --profile-prompts
#      length (default "8 4096": the step at depth 8, then at depth 4096), each while at least 90 s of
#      the --budget are left.
# --forms: after the bench, time each optional kernel form left out (`--cuda-disable F`, same bits) on the
# same model — decode at depth 0 and 4096, prefill 64 — while 70 s of the budget are left per form (the
# table that found the inline quantization's 0.73x); into forms.txt. --forms-list "none F …": only those.
# --layers N: the model keeps the first N of Flash's 43 layers (default: all; 36 where the card has less
# than 100 GiB, since the full q2 file needs ~84 GB: an H100's results are then per that shape).
# Every step's output goes to --out DIR (default $OUT when set, else a temporary folder) in at most
# six files: summary.txt (the tables), tests.txt, bench.txt, forms.txt, profile.txt (every profile,
# one after the other), ncu.csv (the first profile's raw CSV).
# Usage: scripts/gpu-check.sh [--base-tar FILE] [--out DIR] [--budget SECONDS] [--profile-prompts "N …"]
#                             [--skip-tests] [--forms | --forms-list "F …"] [--layers N] [-- bench args…]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
base_tar="" out=${OUT:-} budget=560 profile_prompts="8 4096" skip_tests=0 layers="" forms=0
forms_list="none staged-loads hc-cluster hc-side moe-side attn-decode attn-wide stream-products fused-quant norm-rope-batch indexer-tile routed-staged mma-products grouped-experts float-tiles"
while [ $# -gt 0 ]; do
  case "$1" in
    --base-tar) base_tar=$2; shift ;;
    --out) out=$2; shift ;;
    --budget) budget=$2; shift ;;
    --profile-prompts) profile_prompts=$2; shift ;;
    --skip-tests) skip_tests=1 ;;
    --layers) layers=$2; shift ;;
    --forms) forms=1 ;;
    --forms-list) forms=1; forms_list=$2; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "gpu-check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$out" ] || out=$(mktemp -d)
mkdir -p "$out"
summary=$out/summary.txt
t0=$SECONDS
note() { echo "$*" | tee -a "$summary"; }

if [ -z "$layers" ]; then
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -dc 0-9)
  if [ -n "$mib" ] && [ "$mib" -lt 102400 ]; then layers=36; fi
fi
[ -n "$layers" ] && note "model: Flash q2 with its first $layers of 43 layers (--layers; the GPU has ${mib:-?} MiB)"

note "== 1. tests ($(date -u +%H:%M:%S))"
if [ "$skip_tests" -eq 1 ]; then
  scripts/test-cuda.sh --build-only > "$out/tests.txt" 2>&1
else
  scripts/test-cuda.sh --no-sanitizers > "$out/tests.txt" 2>&1
fi
tests_rc=$?
sed -n '/^== summary/,$p' "$out/tests.txt" | tee -a "$summary"
note "tests: rc $tests_rc after $((SECONDS - t0)) s"

note "== 2. bench ($(date -u +%H:%M:%S))"
logs=$(mktemp -d)
if [ -n "$base_tar" ]; then
  scripts/bench-cuda-ab.sh --skip-build --base-tar "$base_tar" --log-dir "$logs" ${layers:+--layers "$layers"} -- "$@" > "$out/bench.txt" 2>&1
else
  scripts/bench-cuda.sh --skip-build ${layers:+--layers "$layers"} -- "$@" > "$out/bench.txt" 2>&1
fi
bench_rc=$?
grep -E '^\|' "$out/bench.txt" | tail -12 | tee -a "$summary"
note "bench: rc $bench_rc after $((SECONDS - t0)) s"

model=${SYNTH_DIR:-/dev/shm}/dsv4-flash${layers:+-${layers}l}-q2-seed1.gguf
if [ "$forms" -eq 1 ]; then
  note "== 2b. forms left out ($(date -u +%H:%M:%S)): decode d0 / d4096, prefill 64 (tok/s)"
  for form in $forms_list; do
    left=$((budget - (SECONDS - t0)))
    if [ "$left" -lt 70 ] || [ ! -s "$model" ]; then note "$form: skipped ($left s left)"; continue; fi
    echo "=== --cuda-disable $form" >> "$out/forms.txt"
    timeout "$((left - 5))" "${BUILD_DIR:-build-cuda}/dsv4" --cuda-disable "$form" bench --backend cuda -m "$model" \
      --prompt 64 --depth 0,4096 --decode 32 --repeat 2 >> "$out/forms.txt" 2>&1
    note "$form: $(awk -v h="=== --cuda-disable $form" '$0 == h { on = 1; next } /^=== / { on = 0 }
                   on && /^\| (tg32|pp64)/ { split($0, a, "|"); gsub(/ /, "", a[2]); gsub(/ /, "", a[3])
                                             printf "%s %s  ", a[2], a[3] }' "$out/forms.txt")"
  done
fi
csv=$out/ncu.csv
for prompt in $profile_prompts; do
  left=$((budget - (SECONDS - t0)))
  if [ "$left" -lt 90 ] || [ ! -s "$model" ]; then
    note "== 3. profile after $prompt prompt tokens skipped ($left s left of the budget, model $model)"
    continue
  fi
  note "== 3. profile after $prompt prompt tokens ($(date -u +%H:%M:%S))"
  echo "=== profile: 3 decode steps after $prompt prompt tokens" >> "$out/profile.txt"
  OUT_CSV=$csv timeout "$((left - 10))" scripts/profile-cuda.sh "$model" 3 "$prompt" >> "$out/profile.txt" 2>&1
  note "profile: rc $? after $((SECONDS - t0)) s"
  sed -n "/^=== profile: 3 decode steps after $prompt /,\$p" "$out/profile.txt" | head -40 >> "$summary"
  csv=""  # later profiles: their CSV stays in profile-cuda.sh's temporary folder
done
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
