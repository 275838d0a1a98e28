// tools/metadata.cpp — the deepseek4.* key writer.
#include "tools/metadata.h"

#include <string>
#include <vector>

namespace dsv4::tools {

Status write_ds4_metadata(gguf::GgufWriter& w, const model::Ds4Shape& s, std::string_view general_name) {
  auto u32 = [&](const char* k, int64_t v) { return w.add_u32(std::string("deepseek4.") + k, static_cast<uint32_t>(v)); };
  auto f32 = [&](const char* k, double v) { return w.add_f32(std::string("deepseek4.") + k, static_cast<float>(v)); };
  DSV4_RETURN_IF_ERROR(w.add_string("general.architecture", "deepseek4"));
  DSV4_RETURN_IF_ERROR(w.add_string("general.name", general_name));
  DSV4_RETURN_IF_ERROR(u32("block_count", s.n_layer));
  DSV4_RETURN_IF_ERROR(u32("context_length", s.n_ctx_train));
  DSV4_RETURN_IF_ERROR(u32("embedding_length", s.n_embd));
  DSV4_RETURN_IF_ERROR(u32("vocab_size", s.n_vocab));
  DSV4_RETURN_IF_ERROR(u32("attention.head_count", s.n_head));
  DSV4_RETURN_IF_ERROR(u32("attention.head_count_kv", 1));
  DSV4_RETURN_IF_ERROR(u32("attention.key_length", s.head_dim));
  DSV4_RETURN_IF_ERROR(u32("attention.value_length", s.head_dim));
  DSV4_RETURN_IF_ERROR(u32("rope.dimension_count", s.n_rot));
  DSV4_RETURN_IF_ERROR(f32("rope.freq_base", s.rope_base));
  DSV4_RETURN_IF_ERROR(f32("attention.compress_rope_freq_base", s.compress_rope_base));
  if (s.yarn_orig_ctx > 0) {
    DSV4_RETURN_IF_ERROR(w.add_string("deepseek4.rope.scaling.type", "yarn"));
    DSV4_RETURN_IF_ERROR(f32("rope.scaling.factor", s.yarn_factor));
    DSV4_RETURN_IF_ERROR(u32("rope.scaling.original_context_length", s.yarn_orig_ctx));
    DSV4_RETURN_IF_ERROR(f32("rope.scaling.yarn_beta_fast", s.yarn_beta_fast));
    DSV4_RETURN_IF_ERROR(f32("rope.scaling.yarn_beta_slow", s.yarn_beta_slow));
  }
  DSV4_RETURN_IF_ERROR(f32("attention.layer_norm_rms_epsilon", s.rms_eps));
  DSV4_RETURN_IF_ERROR(u32("attention.q_lora_rank", s.q_lora_rank));
  DSV4_RETURN_IF_ERROR(u32("attention.output_lora_rank", s.o_lora_rank));
  DSV4_RETURN_IF_ERROR(u32("attention.output_group_count", s.o_groups));
  DSV4_RETURN_IF_ERROR(u32("attention.sliding_window", s.n_swa));
  std::vector<int32_t> ratios(s.compress_ratio.begin(), s.compress_ratio.end());
  DSV4_RETURN_IF_ERROR(w.add_array_i32("deepseek4.attention.compress_ratios", ratios));
  DSV4_RETURN_IF_ERROR(u32("attention.indexer.head_count", s.idx_n_head));
  DSV4_RETURN_IF_ERROR(u32("attention.indexer.key_length", s.idx_head_dim));
  DSV4_RETURN_IF_ERROR(u32("attention.indexer.top_k", s.idx_topk));
  DSV4_RETURN_IF_ERROR(u32("expert_count", s.n_expert));
  DSV4_RETURN_IF_ERROR(u32("expert_used_count", s.n_expert_used));
  DSV4_RETURN_IF_ERROR(u32("expert_shared_count", s.n_expert_shared));
  DSV4_RETURN_IF_ERROR(u32("expert_feed_forward_length", s.n_ff_exp));
  DSV4_RETURN_IF_ERROR(f32("expert_weights_scale", s.expert_weights_scale));
  DSV4_RETURN_IF_ERROR(w.add_bool("deepseek4.expert_weights_norm", s.expert_weights_norm));
  DSV4_RETURN_IF_ERROR(u32("expert_gating_func", 4));
  DSV4_RETURN_IF_ERROR(u32("hash_layer_count", s.n_hash_layers));
  std::vector<float> clamp(s.swiglu_clamp_exp.begin(), s.swiglu_clamp_exp.end());
  DSV4_RETURN_IF_ERROR(w.add_array_f32("deepseek4.swiglu_clamp_exp", clamp));
  std::vector<float> clamp_sh(s.swiglu_clamp_shexp.begin(), s.swiglu_clamp_shexp.end());
  DSV4_RETURN_IF_ERROR(w.add_array_f32("deepseek4.swiglu_clamp_shexp", clamp_sh));
  DSV4_RETURN_IF_ERROR(u32("hyper_connection.count", s.hc_mult));
  DSV4_RETURN_IF_ERROR(u32("hyper_connection.sinkhorn_iterations", s.hc_sinkhorn_iters));
  DSV4_RETURN_IF_ERROR(f32("hyper_connection.epsilon", s.hc_eps));
  return ok_status();
}

}  // namespace dsv4::tools
