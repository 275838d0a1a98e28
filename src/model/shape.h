// model/shape.h — the DS4 model shape as a value, read from GGUF metadata and validated once.
//
// Any DS4-family shape is accepted (tiny test models and the real 43-layer Flash run the same code);
// the real Flash shape is recognised by is_ds4_flash(). Layer kinds follow the compress ratio:
// 0 = sliding window only, 4 = CSA (overlapping compressor + lightning indexer), any other
// positive ratio = HCA (non-overlapping compressor, no indexer) — the rule ds4 and llama.cpp use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4::gguf {
class GgufFile;
}

namespace dsv4::model {

enum class AttentionKind { kSliding, kCsa, kHca };

struct Ds4Shape {
  int64_t n_layer = 0;        // deepseek4.block_count (trunk layers; MTP not counted)
  int64_t n_ctx_train = 0;    // deepseek4.context_length
  int64_t n_embd = 0;         // D
  int64_t n_vocab = 0;
  int64_t n_head = 0;         // query heads H
  int64_t head_dim = 0;       // d (K = V)
  int64_t n_rot = 0;          // trailing RoPE dims of each head
  int64_t q_lora_rank = 0;
  int64_t o_lora_rank = 0;    // per group
  int64_t o_groups = 0;
  int64_t n_swa = 0;          // raw sliding window (incl. current token)
  std::vector<int64_t> compress_ratio;  // [n_layer]
  int64_t idx_n_head = 0, idx_head_dim = 0, idx_topk = 0;
  int64_t n_expert = 0, n_expert_used = 0, n_expert_shared = 0, n_ff_exp = 0;
  int64_t n_hash_layers = 0;  // layers [0, n_hash_layers) route by token id (tid2eid)
  double expert_weights_scale = 1.0;
  bool expert_weights_norm = true;
  std::vector<double> swiglu_clamp_exp;    // [n_layer]
  std::vector<double> swiglu_clamp_shexp;  // [n_layer] (defaults to swiglu_clamp_exp)
  int64_t hc_mult = 0, hc_sinkhorn_iters = 0;
  double hc_eps = 1e-6, rms_eps = 1e-6;
  double rope_base = 10000, compress_rope_base = 160000;
  double yarn_factor = 1, yarn_beta_fast = 32, yarn_beta_slow = 1;
  int64_t yarn_orig_ctx = 0;  // 0: no YaRN on the compress rope

  AttentionKind attention_kind(int64_t layer) const {
    const int64_t r = compress_ratio[static_cast<size_t>(layer)];
    return r == 0 ? AttentionKind::kSliding : r == 4 ? AttentionKind::kCsa : AttentionKind::kHca;
  }
  bool is_hash_layer(int64_t layer) const { return layer < n_hash_layers; }
  int64_t hc_dim() const { return hc_mult * n_embd; }              // 4·4096
  int64_t hc_mix() const { return (2 + hc_mult) * hc_mult; }       // 4 pre + 4 post + 16 comb
  int64_t q_dim() const { return n_head * head_dim; }
  int64_t wo_a_in() const { return n_head * head_dim / o_groups; }
  int64_t wo_a_out() const { return o_groups * o_lora_rank; }
  // Compressor output width: 2·d for the overlapping CSA compressor, d for HCA.
  int64_t compressor_width(int64_t layer) const {
    return (attention_kind(layer) == AttentionKind::kCsa ? 2 : 1) * head_dim;
  }
};

// The real DeepSeek V4 Flash (docs/spec/gguf.md §2.1).
Ds4Shape ds4_flash_shape();
bool is_ds4_flash(const Ds4Shape& s);

// Internal consistency (positive sizes, divisibility, array lengths); errors name the field.
Status validate_shape(const Ds4Shape& s);

// Reads every deepseek4.* key (accepting the integer/float widths real files use) and validates.
Result<Ds4Shape> shape_from_gguf(const gguf::GgufFile& f);

}  // namespace dsv4::model
