// tools/synth.h — random-weight DS4 GGUFs of any shape (`dsv4 synth`).
//
// Streams tensor by tensor, a bounded chunk of rows at a time (memory stays O(chunk), so the full
// 284 B Flash can be written), and is deterministic for a seed: row r of tensor t is drawn from its
// own counter-based stream seeded by (seed, t, r), so the bytes do not depend on the thread count.
// Value scales keep activations finite: projections ~ N(0, 1/fan_in), norms ~ 1 + N(0, 0.1²),
// small 1-D parameters ~ N(0, 0.5²), tid2eid rows are distinct experts (routing spread out).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/quant_policy.h"
#include "model/shape.h"

namespace dsv4::tools {

// "tiny" (the HF-validated tiny config of docs/spec/architecture.md §12), "flash" (the real model),
// "flash-4l" (real per-layer shape, first 4 layers of the real schedule: sliding, sliding, CSA, HCA).
std::optional<model::Ds4Shape> synth_preset(const std::string& name);
// Truncates or extends a shape to n layers, keeping the real schedule rule for new layers.
model::Ds4Shape with_layers(model::Ds4Shape s, int64_t n_layers);

struct SynthTensor {
  std::string name;
  TensorType type;
  int n_dims;
  int64_t ne[4];
  int64_t bytes;
  bool fell_back;  // the mix's type could not hold the row length (type is the fallback)
};

struct SynthPlan {
  model::Ds4Shape shape;
  model::QuantMix mix;
  std::vector<SynthTensor> tensors;
  int64_t total_params = 0;
  int64_t total_bytes = 0;  // tensor data, unpadded (what the published sizes count)
  // 0: every row of every tensor is drawn and quantized on its own. N > 0: the rows of each 3-D
  // routed-expert tensor are copies of N distinct quantized rows (row r takes pool row
  // hash(seed, tensor, r) mod N); tensors of the same type, row length and role share one pool. The error-minimising IQ2/K quantizers run at ~1 M weights/s,
  // so a distinct full Flash would take days; speed benchmarks do not need distinct rows.
  int64_t expert_row_pool = 0;
  // Optional tokenizer (tokenizer.json path): its keys are written and n_vocab follows it
  // (the embedding and output rows match the tokenizer's vocabulary). Set via with_tokenizer().
  std::string tokenizer_json;
};

// Sets the plan's vocabulary size to the tokenizer's token count (so embedding and output rows
// match it) and re-plans the tensors; write_synth then also writes the tokenizer keys.
Status with_tokenizer(SynthPlan& plan, const std::string& tokenizer_json);

SynthPlan plan_synth(const model::Ds4Shape& shape, model::QuantMix mix);

struct SynthProgress {
  int64_t bytes_done, bytes_total;
  size_t tensor_index, tensor_count;
};

// Writes the plan to `path` (via <path>.tmp; nothing is left behind on error).
Status write_synth(const SynthPlan& plan, uint64_t seed, const std::string& path, ThreadPool& pool,
                   const std::function<void(const SynthProgress&)>& progress = {});

}  // namespace dsv4::tools
