// model/weights.h — binds a DS4 GGUF's tensors (by the manifest) into typed per-layer views.
//
// Large weights stay in the mapping (backend::Weight views, zero-copy). Small parameters that the
// elementwise ops read directly (norm weights, HC scale/base, sinks, position biases, router bias)
// are dequantized once to f32 here: a few MB for the real model. Every manifest tensor must be
// present with exactly the manifest's shape and a type the kernels support; any violation is an
// error naming the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "base/status.h"
#include "model/shape.h"

namespace dsv4::gguf {
class GgufFile;
}

namespace dsv4::model {

using backend::Weight;

struct LayerWeights {
  // attention
  Weight hc_attn_fn, q_a, q_b, kv, out_a, out_b;
  Weight comp_kv, comp_gate;                    // CSA/HCA
  Weight idx_q_b, idx_proj, idx_kv, idx_gate;   // CSA
  // MoE
  Weight hc_ffn_fn, router, tid2eid, gate_exps, up_exps, down_exps, gate_sh, up_sh, down_sh;
  // small, dequantized
  std::vector<float> hc_attn_scale, hc_attn_base, attn_norm, q_a_norm, kv_norm, sinks;
  std::vector<float> comp_ape, comp_norm, idx_ape, idx_norm;  // ape [ratio][width]
  std::vector<float> hc_ffn_scale, hc_ffn_base, ffn_norm, router_bias;
};

struct ModelWeights {
  Weight tok_embd, out_hc_fn, output;
  std::vector<float> out_hc_base, out_hc_scale, out_norm;
  std::vector<LayerWeights> layers;
};

// `ops` dequantizes the small tensors (so any stored type works).
Result<ModelWeights> bind_weights(const gguf::GgufFile& f, const Ds4Shape& shape, backend::Ops& ops);

}  // namespace dsv4::model
