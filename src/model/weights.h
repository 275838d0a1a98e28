// model/weights.h — binds a DS4 GGUF's tensors (by the manifest) into typed per-layer views.
//
// Large weights go to the backend with Backend::load_weight (the CPU keeps using the mapping,
// zero-copy; a GPU uploads them). Small parameters that the elementwise ops read directly (norm
// weights, HC scale/base, sinks, position biases, router bias) are dequantized once to F32 backend
// tensors: a few MB for the real model. Every manifest tensor must be present with exactly the
// manifest's shape and a type the backend can compute with, and every hash-routing table entry must
// name an expert; any violation is an error naming the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "base/status.h"
#include "model/shape.h"

namespace dsv4::gguf {
class GgufFile;
}

namespace dsv4::model {

using Weight = backend::Tensor;

struct LayerWeights {
  // attention
  Weight hc_attn_fn, q_a, q_b, kv, out_a, out_b;
  Weight comp_kv, comp_gate;                    // CSA/HCA
  Weight idx_q_b, idx_proj, idx_kv, idx_gate;   // CSA
  // MoE
  Weight hc_ffn_fn, router, tid2eid, gate_exps, up_exps, down_exps, gate_sh, up_sh, down_sh;
  // small, F32 on the backend (router_bias invalid when the file has none)
  Weight hc_attn_scale, hc_attn_base, attn_norm, q_a_norm, kv_norm, sinks;
  Weight comp_ape, comp_norm, idx_ape, idx_norm;  // ape [ratio][width]
  Weight hc_ffn_scale, hc_ffn_base, ffn_norm, router_bias;
};

struct ModelWeights {
  Weight tok_embd, out_hc_fn, output;
  Weight out_hc_base, out_hc_scale, out_norm;  // small, F32
  std::vector<LayerWeights> layers;
};

// Loads every manifest tensor onto `backend`; backend memory goes to `storage`.
Result<ModelWeights> bind_weights(const gguf::GgufFile& f, const Ds4Shape& shape, backend::Backend& backend,
                                  std::vector<backend::Buffer>& storage);

}  // namespace dsv4::model
