// apps/dsv4/bench_model.h — options of `dsv4 bench -m MODEL.gguf`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsv4::app {

struct BenchModelArgs {
  std::string model;
  std::vector<int64_t> prompts = {512, 4096};
  std::vector<int64_t> depths = {0, 4096};  // every prompt and the decode run at each depth (llama-bench -d)
  int64_t decode_tokens = 16;
  int64_t chunk = 512;
  bool timing = false;
  int64_t repeat = 5;  // timed repetitions per case
  int64_t warmup = 1;  // untimed repetitions per case before the timed ones (after a short global warm-up)
};

int run_bench_model(const BenchModelArgs& a);

}  // namespace dsv4::app
