// apps/dsv4/serve_common.h — what `dsv4 serve` and `dsv4 chat` share: loading the engine from the
// command line (model path default, --ctx default, progress on a terminal).
#pragma once

#include <memory>
#include <string>

#include "dsv4/engine.h"

namespace dsv4::app {

struct EngineLoadArgs {
  std::string model;             // empty = the build's default model (random weights)
  int64_t ctx = 0;               // 0 = min(the model's training context, 32768)
  int64_t prefill_chunk = 512;
  int64_t checkpoint_interval = 2048;
  int64_t max_checkpoints = 16;
  bool timing = false;
};

// The model the build generates (tiny DS4 shape, random weights, the real tokenizer).
std::string default_model_path();
Result<std::unique_ptr<Engine>> load_engine(const EngineLoadArgs& a, const char* cmd);

}  // namespace dsv4::app
