// tools/convert.h — `dsv4 convert`: an official/HF DeepSeek V4 checkpoint → DS4 GGUF, streaming.
//
// Owns: the conversion pipeline. config.json → Ds4Shape (hf_config.h), safetensors → manifest
// sources (hf_tensors.h), tokenizer.json → tokenizer keys (vocab.h), then for each manifest tensor
// in order: decode a bounded chunk of source rows to f32 (expert by expert for 3-D tensors), quantize
// with the mix's type (model::choose_tensor_type; fallbacks reported through `note`), optionally
// weighted by a llama.cpp imatrix, and stream it into GgufWriter. Memory is O(chunk), never a whole
// tensor; source pages are released after each tensor. Output goes to <out>.tmp and is renamed only
// when complete, so a failure leaves nothing that looks like a model.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/quant_policy.h"

namespace dsv4::tools {

struct ConvertOptions {
  std::string hf_dir;
  std::string out;
  model::QuantMix mix = model::QuantMix::kQ8_0;
  std::string tokenizer;  // empty: <hf_dir>/tokenizer.json if present
  std::string imatrix;    // empty: none
  bool vocab_only = false;
  int64_t chunk_bytes = int64_t{16} << 20;  // f32 bytes decoded per step
};

struct ConvertProgress {
  uint64_t bytes_done, bytes_total;  // output tensor bytes
  size_t tensor_index, tensor_count;
  const std::string* tensor_name;
};

struct ConvertCallbacks {
  std::function<void(const ConvertProgress&)> progress;
  std::function<void(const std::string&)> note;  // fallbacks, ignored tensors, missing tokenizer
};

// Imatrix (llama.cpp legacy .dat): per GGUF tensor name, the mean squared activation per column
// (values already divided by ncall). Per-expert entries "<name>.expert.<x>" / "<name>.expert_<x>"
// are kept under their own names.
using Imatrix = std::map<std::string, std::vector<float>>;
Result<Imatrix> load_imatrix(const std::string& path);

struct ConvertSummary {
  size_t tensor_count = 0;
  uint64_t bytes = 0;
  size_t fallbacks = 0;
  size_t ignored_sources = 0;
  size_t imatrix_used = 0;
};

Result<ConvertSummary> convert_checkpoint(const ConvertOptions& opts, ThreadPool& pool, const ConvertCallbacks& cb = {});

}  // namespace dsv4::tools
