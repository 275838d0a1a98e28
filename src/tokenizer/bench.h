// tokenizer/bench.h — encode throughput measurement (used by `dsv4 bench tokenizer`).
//
// Owns: timing Tokenizer::encode on one thread. Must not: print or read files.
#pragma once

#include <cstdint>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace dsv4::tokenizer {

struct EncodeBenchResult {
  uint64_t bytes = 0;       // input bytes encoded, over all iterations
  uint64_t tokens = 0;      // tokens produced, over all iterations
  int iterations = 0;
  double seconds = 0;       // wall time of the timed iterations
  double mb_per_s = 0;      // bytes / seconds / 1e6
  double tokens_per_s = 0;
};

// Encodes `text` once untimed (warm-up), then repeatedly until both min_iterations and
// min_seconds are reached.
EncodeBenchResult bench_encode(const Tokenizer& tok, std::string_view text, int min_iterations = 3,
                               double min_seconds = 1.0);

}  // namespace dsv4::tokenizer
