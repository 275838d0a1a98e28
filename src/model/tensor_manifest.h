// model/tensor_manifest.h — the one list of DS4 tensors: names, shapes (ne order) and roles.
//
// Everything that binds, validates, converts or synthesises weights walks this list, so a tensor
// cannot be added in one place and forgotten in another. Names and shapes are exactly the published
// DS4 GGUF layout (docs/spec/gguf.md §3); the order (globals, then blk.0 .. blk.N-1) is ours — readers
// bind by name, never by position.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/tensor_type.h"
#include "model/shape.h"

namespace dsv4::model {

// What a tensor is for; quantization policies (quant_policy.h) pick a type per role.
enum class TensorRole {
  kEmbedding,       // token_embd
  kOutput,          // output (LM head)
  kNorm,            // every RMSNorm weight (1-D)
  kHcFn,            // hc_*_fn, output_hc_fn (2-D, F32-sourced)
  kHcSmall,         // hc_*_scale, hc_*_base, output_hc_base/scale
  kAttnProj,        // attn_q_a, attn_q_b, attn_kv, attn_output_a/b (FP8-sourced)
  kAttnSinks,       // attn_sinks
  kCompressorApe,   // attn_compressor_ape, indexer_compressor_ape
  kCompressorProj,  // attn_compressor_kv/gate, indexer_compressor_kv/gate
  kIndexerQ,        // indexer.attn_q_b (FP8-sourced)
  kIndexerProj,     // indexer.proj
  kRouter,          // ffn_gate_inp
  kRouterBias,      // exp_probs_b.bias
  kHashTable,       // ffn_gate_tid2eid (I32)
  kExpertGateUp,    // ffn_gate_exps, ffn_up_exps (3-D)
  kExpertDown,      // ffn_down_exps (3-D)
  kSharedExpert,    // ffn_{gate,up,down}_shexp (FP8-sourced)
};

struct TensorSpec {
  std::string name;      // "blk.7.attn_q_b.weight"
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};
  TensorRole role = TensorRole::kNorm;
  int64_t layer = -1;    // -1 for global tensors
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

const char* tensor_role_name(TensorRole role);

// Every tensor of a DS4 model of this shape.
std::vector<TensorSpec> ds4_tensor_manifest(const Ds4Shape& shape);

}  // namespace dsv4::model
