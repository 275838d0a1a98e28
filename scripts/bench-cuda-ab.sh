#!/usr/bin/env bash
# scripts/bench-cuda-ab.sh — an A/B of two dsv4 versions on one GPU machine and one model, as one
# command (a GPU session has few minutes: one call should build, write the model once and compare):
#   1. builds this tree (scripts/test-cuda.sh --build-only; --skip-build reuses BUILD_DIR) and, in
#      parallel, the base version from a source tarball (`git archive <ref> -o base.tar`, carried to the
#      machine with the tree) in /tmp/dsv4-ab-base;
#   2. writes the full-size synthetic DS4 Flash q2 (or --preset flash-4l; --layers N keeps the first N
#      layers' shape, for a card the full file does not fit) into SYNTH_DIR once, in parallel with the
#      base build;
#   3. runs `dsv4 bench -m` of base and this tree alternately, --rounds times (default 2), each with the
#      same arguments (default: --prompt 512 --depth 0,4096 --decode 32 --repeat 3);
#   4. prints every run's closing table and a summary: per case the median of the runs' medians for
#      base and this tree, and their ratio.
# Usage: scripts/bench-cuda-ab.sh --base-tar FILE [--skip-build] [--rounds N] [--preset flash|flash-4l]
#                                 [--layers N] [--model PATH] [--log-dir DIR] [-- bench args…]
# Environment: BUILD_DIR (default build-cuda), SYNTH_DIR (default /dev/shm), JOBS (default nproc),
# BACKEND (default cuda: the bench's --backend), BASE_CMAKE_ARGS (default -DDSV4_CUDA=ON -DDSV4_WERROR=ON
# -DCMAKE_CUDA_FLAGS=-lineinfo: test-cuda.sh's configuration).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-cuda}
SYNTH_DIR=${SYNTH_DIR:-/dev/shm}
JOBS=${JOBS:-$(nproc)}
BACKEND=${BACKEND:-cuda}
# The base is configured as scripts/test-cuda.sh configures this tree (Release, -Werror, CUDA -lineinfo):
# twice on 2026-12-07 (H100, 12 layers) a base built without -lineinfo decoded 2.3-3.0 % faster than a tree
# whose changes could not touch decode, and the same pair built alike measured 0.998x: the difference
# was the configuration, which an A/B would have charged to the change.
BASE_CMAKE_ARGS=${BASE_CMAKE_ARGS:--DDSV4_CUDA=ON -DDSV4_WERROR=ON -DCMAKE_CUDA_FLAGS=-lineinfo}
base_tar="" build=1 rounds=2 preset=flash layers="" model="" log_dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --base-tar) base_tar=$2; shift ;;
    --skip-build) build=0 ;;
    --rounds) rounds=$2; shift ;;
    --preset) preset=$2; shift ;;
    --layers) layers=$2; shift ;;
    --model) model=$2; shift ;;
    --log-dir) log_dir=$2; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "bench-cuda-ab.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$base_tar" ] || [ ! -f "$base_tar" ]; then
  echo "bench-cuda-ab.sh: --base-tar FILE (a git archive of the base version) is required" >&2
  exit 2
fi
bench_args=("$@")
# shellcheck disable=SC2054  # "0,4096" is one argument (the bench's list of depths)
[ ${#bench_args[@]} -gt 0 ] || bench_args=(--prompt 512 --depth 0,4096 --decode 32 --repeat 3)
log_dir=${log_dir:-$(mktemp -d)}
mkdir -p "$log_dir"
base_src=/tmp/dsv4-ab-base
synth_args=(--preset "$preset" --type q2 --seed 1)
[ -n "$layers" ] && synth_args+=(--layers "$layers")
[ -n "$model" ] || model=$SYNTH_DIR/dsv4-$preset${layers:+-${layers}l}-q2-seed1.gguf

if [ "$build" = 1 ]; then BUILD_DIR=$BUILD_DIR scripts/test-cuda.sh --build-only > "$log_dir/build.log" 2>&1 ||
  { tail -40 "$log_dir/build.log"; echo "bench-cuda-ab.sh: build failed" >&2; exit 1; }; fi
new=$BUILD_DIR/dsv4
[ -x "$new" ] || { echo "bench-cuda-ab.sh: $new not built" >&2; exit 1; }

# The base build and the model write run side by side (the model write needs this tree's dsv4). A base
# built from the same tarball earlier (the stamp holds its checksum) is reused.
want=$(sha256sum "$base_tar" | cut -d' ' -f1)
if [ -x "$base_src/b/dsv4" ] && [ "$(cat "$base_src/stamp" 2>/dev/null)" = "$want" ]; then
  true &
else
  rm -rf "$base_src" && mkdir -p "$base_src" && tar -xf "$base_tar" -C "$base_src"
  # shellcheck disable=SC2086  # BASE_CMAKE_ARGS is a list of arguments
  ( cmake -S "$base_src" -B "$base_src/b" -DCMAKE_BUILD_TYPE=Release $BASE_CMAKE_ARGS > "$log_dir/base-configure.log" 2>&1 &&
    cmake --build "$base_src/b" --target dsv4 -j "$JOBS" > "$log_dir/base-build.log" 2>&1 && echo "$want" > "$base_src/stamp" ) &
fi
base_pid=$!
if [ ! -s "$model" ]; then
  start=$SECONDS
  "$new" synth "${synth_args[@]}" --out "$model.part" > "$log_dir/synth.log" 2>&1
  mv "$model.part" "$model"
  echo "bench-cuda-ab.sh: wrote $model in $((SECONDS - start)) s"
fi
wait "$base_pid" || { tail -30 "$log_dir/base-build.log"; echo "bench-cuda-ab.sh: base build failed" >&2; exit 1; }
base=$base_src/b/dsv4

for r in $(seq 1 "$rounds"); do
  for v in base new; do
    bin=$base; [ "$v" = new ] && bin=$new
    log=$log_dir/bench-$v-$r.log
    "$bin" bench --backend "$BACKEND" -m "$model" "${bench_args[@]}" > "$log" 2>&1 ||
      { tail -20 "$log"; echo "bench-cuda-ab.sh: $v bench failed (round $r)" >&2; exit 1; }
    echo "== $v, round $r"
    grep -E '^\| (pp|tg)' "$log"
  done
done

# Summary: per case, the median over rounds of each run's median (column 2 of the closing table).
echo
echo "| test             | base tok/s | new tok/s | new / base |"
echo "|------------------|-----------:|----------:|-----------:|"
awk -F'|' '
  FNR == 1 { v = (FILENAME ~ /bench-base-/) ? "base" : "new" }
  /^\| (pp|tg)/ { c = $2; gsub(/^ +| +$/, "", c); if (!(c in seen)) { seen[c] = 1; order[++n] = c }
                  k = v SUBSEP c; vals[k] = vals[k] " " ($3 + 0) }
  function med(s,   a, m, i, j, t) { m = split(s, a, " "); for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
                                       if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                     return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
  END { for (i = 1; i <= n; i++) { c = order[i]; b = med(vals["base" SUBSEP c]); w = med(vals["new" SUBSEP c])
          printf "| %-16s | %10.2f | %9.2f | %10.3f |\n", c, b, w, (b > 0 ? w / b : 0) } }
' "$log_dir"/bench-base-*.log "$log_dir"/bench-new-*.log
echo "logs: $log_dir"
