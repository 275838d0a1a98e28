#!/usr/bin/env bash
# scripts/run_fuzz.sh — builds the libFuzzer targets with clang (build-fuzz/) and fuzzes the GGUF
# reader, the DSML output parser and the HTTP request parser for a bounded total time (1/2 GGUF,
# 1/4 DSML, 1/4 HTTP), failing on any crash, sanitizer report, leak or timeout.
#   scripts/run_fuzz.sh [SECONDS=60]
# New interesting inputs go to build-fuzz/corpus/{gguf,dsml,http} (the committed seeds in
# tests/fuzz/corpus/{gguf,dsml,http} are read, never written); crash files land in build-fuzz/crashes/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN="${1:-60}"
JOBS="${JOBS:-2}"
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDSV4_FUZZ=ON -DDSV4_WERROR=ON >/dev/null
cmake --build build-fuzz -j"$JOBS" --target gguf_reader_fuzz dsml_parser_fuzz http_request_fuzz
mkdir -p build-fuzz/corpus/gguf build-fuzz/corpus/dsml build-fuzz/corpus/http build-fuzz/crashes
GGUF_SECONDS=$(( SECONDS_TO_RUN / 2 ))
[ "$GGUF_SECONDS" -ge 1 ] || GGUF_SECONDS=1
DSML_SECONDS=$(( SECONDS_TO_RUN / 4 ))
[ "$DSML_SECONDS" -ge 1 ] || DSML_SECONDS=1
HTTP_SECONDS=$(( SECONDS_TO_RUN - GGUF_SECONDS - DSML_SECONDS ))
[ "$HTTP_SECONDS" -ge 1 ] || HTTP_SECONDS=1
./build-fuzz/tests/fuzz/gguf_reader_fuzz -max_total_time="$GGUF_SECONDS" -max_len=65536 -rss_limit_mb=2048 \
  -timeout=10 -print_final_stats=1 -artifact_prefix=build-fuzz/crashes/ \
  build-fuzz/corpus/gguf tests/fuzz/corpus/gguf
./build-fuzz/tests/fuzz/dsml_parser_fuzz -max_total_time="$DSML_SECONDS" -max_len=16384 -rss_limit_mb=2048 \
  -timeout=10 -print_final_stats=1 -artifact_prefix=build-fuzz/crashes/ \
  build-fuzz/corpus/dsml tests/fuzz/corpus/dsml
./build-fuzz/tests/fuzz/http_request_fuzz -max_total_time="$HTTP_SECONDS" -max_len=8192 -rss_limit_mb=2048 \
  -timeout=10 -print_final_stats=1 -artifact_prefix=build-fuzz/crashes/ \
  build-fuzz/corpus/http tests/fuzz/corpus/http
echo "run_fuzz: no crashes in ${SECONDS_TO_RUN}s"
