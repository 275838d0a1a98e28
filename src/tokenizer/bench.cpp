// tokenizer/bench.cpp — single-thread encode throughput timing.
#include "tokenizer/bench.h"

#include <chrono>

namespace dsv4::tokenizer {

EncodeBenchResult bench_encode(const Tokenizer& tok, std::string_view text, int min_iterations, double min_seconds) {
  EncodeBenchResult r;
  (void)tok.encode(text);  // warm-up: page in the tables
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (r.iterations < min_iterations || elapsed < min_seconds) {
    r.tokens += tok.encode(text).size();
    r.bytes += text.size();
    ++r.iterations;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (text.empty() && r.iterations >= min_iterations) break;
  }
  r.seconds = elapsed;
  if (elapsed > 0) {
    r.mb_per_s = static_cast<double>(r.bytes) / elapsed / 1e6;
    r.tokens_per_s = static_cast<double>(r.tokens) / elapsed;
  }
  return r;
}

}  // namespace dsv4::tokenizer
