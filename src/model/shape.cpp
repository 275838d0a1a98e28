// model/shape.cpp — the Flash preset, validation and the GGUF metadata reader.
#include "model/shape.h"

#include "gguf/reader.h"

namespace dsv4::model {

Ds4Shape ds4_flash_shape() {
  Ds4Shape s;
  s.n_layer = 43;
  s.n_ctx_train = 1048576;
  s.n_embd = 4096;
  s.n_vocab = 129280;
  s.n_head = 64;
  s.head_dim = 512;
  s.n_rot = 64;
  s.q_lora_rank = 1024;
  s.o_lora_rank = 1024;
  s.o_groups = 8;
  s.n_swa = 128;
  for (int64_t il = 0; il < s.n_layer; ++il) s.compress_ratio.push_back(il < 2 ? 0 : il % 2 == 0 ? 4 : 128);
  s.idx_n_head = 64;
  s.idx_head_dim = 128;
  s.idx_topk = 512;
  s.n_expert = 256;
  s.n_expert_used = 6;
  s.n_expert_shared = 1;
  s.n_ff_exp = 2048;
  s.n_hash_layers = 3;
  s.expert_weights_scale = 1.5;
  s.expert_weights_norm = true;
  s.swiglu_clamp_exp.assign(43, 10.0);
  s.swiglu_clamp_shexp.assign(43, 10.0);
  s.hc_mult = 4;
  s.hc_sinkhorn_iters = 20;
  s.hc_eps = 1e-6;
  s.rms_eps = 1e-6;
  s.rope_base = 10000;
  s.compress_rope_base = 160000;
  s.yarn_factor = 16;
  s.yarn_beta_fast = 32;
  s.yarn_beta_slow = 1;
  s.yarn_orig_ctx = 65536;
  return s;
}

bool is_ds4_flash(const Ds4Shape& s) {
  const Ds4Shape f = ds4_flash_shape();
  return s.n_layer == f.n_layer && s.n_embd == f.n_embd && s.n_vocab == f.n_vocab && s.n_head == f.n_head &&
         s.head_dim == f.head_dim && s.n_rot == f.n_rot && s.q_lora_rank == f.q_lora_rank &&
         s.o_lora_rank == f.o_lora_rank && s.o_groups == f.o_groups && s.n_swa == f.n_swa &&
         s.compress_ratio == f.compress_ratio && s.idx_n_head == f.idx_n_head && s.idx_head_dim == f.idx_head_dim &&
         s.idx_topk == f.idx_topk && s.n_expert == f.n_expert && s.n_expert_used == f.n_expert_used &&
         s.n_expert_shared == f.n_expert_shared && s.n_ff_exp == f.n_ff_exp && s.n_hash_layers == f.n_hash_layers &&
         s.hc_mult == f.hc_mult;
}

Status validate_shape(const Ds4Shape& s) {
  auto positive = [](const char* name, int64_t v) -> Status {
    if (v <= 0 || v > (int64_t{1} << 40)) return invalid_argument(std::string(name) + " must be positive, got " + std::to_string(v));
    return ok_status();
  };
  DSV4_RETURN_IF_ERROR(positive("block_count", s.n_layer));
  DSV4_RETURN_IF_ERROR(positive("embedding_length", s.n_embd));
  DSV4_RETURN_IF_ERROR(positive("vocab_size", s.n_vocab));
  DSV4_RETURN_IF_ERROR(positive("attention.head_count", s.n_head));
  DSV4_RETURN_IF_ERROR(positive("attention.key_length", s.head_dim));
  DSV4_RETURN_IF_ERROR(positive("rope.dimension_count", s.n_rot));
  DSV4_RETURN_IF_ERROR(positive("attention.q_lora_rank", s.q_lora_rank));
  DSV4_RETURN_IF_ERROR(positive("attention.output_lora_rank", s.o_lora_rank));
  DSV4_RETURN_IF_ERROR(positive("attention.output_group_count", s.o_groups));
  DSV4_RETURN_IF_ERROR(positive("attention.sliding_window", s.n_swa));
  DSV4_RETURN_IF_ERROR(positive("expert_count", s.n_expert));
  DSV4_RETURN_IF_ERROR(positive("expert_used_count", s.n_expert_used));
  DSV4_RETURN_IF_ERROR(positive("expert_feed_forward_length", s.n_ff_exp));
  DSV4_RETURN_IF_ERROR(positive("hyper_connection.count", s.hc_mult));
  DSV4_RETURN_IF_ERROR(positive("hyper_connection.sinkhorn_iterations", s.hc_sinkhorn_iters));
  if (s.n_rot % 2 != 0 || s.n_rot > s.head_dim)
    return invalid_argument("rope.dimension_count " + std::to_string(s.n_rot) + " must be even and <= key_length " +
                            std::to_string(s.head_dim));
  if ((s.n_head * s.head_dim) % s.o_groups != 0 || s.n_head % s.o_groups != 0)
    return invalid_argument("attention.output_group_count " + std::to_string(s.o_groups) + " must divide head_count " +
                            std::to_string(s.n_head));
  if (s.n_expert_used > s.n_expert)
    return invalid_argument("expert_used_count " + std::to_string(s.n_expert_used) + " exceeds expert_count " +
                            std::to_string(s.n_expert));
  if (s.n_expert_shared < 0 || s.n_expert_shared > 1)
    return unsupported("expert_shared_count must be 0 or 1, got " + std::to_string(s.n_expert_shared));
  if (s.n_hash_layers < 0 || s.n_hash_layers > s.n_layer)
    return invalid_argument("hash_layer_count " + std::to_string(s.n_hash_layers) + " outside [0, block_count]");
  if (static_cast<int64_t>(s.compress_ratio.size()) != s.n_layer)
    return invalid_argument("attention.compress_ratios has " + std::to_string(s.compress_ratio.size()) +
                            " entries for " + std::to_string(s.n_layer) + " layers");
  bool any_csa = false;
  for (size_t i = 0; i < s.compress_ratio.size(); ++i) {
    if (s.compress_ratio[i] < 0 || s.compress_ratio[i] > 65536)
      return invalid_argument("attention.compress_ratios[" + std::to_string(i) + "] = " +
                              std::to_string(s.compress_ratio[i]) + " is out of range");
    any_csa |= s.compress_ratio[i] == 4;
  }
  if (any_csa) {
    DSV4_RETURN_IF_ERROR(positive("attention.indexer.head_count", s.idx_n_head));
    DSV4_RETURN_IF_ERROR(positive("attention.indexer.key_length", s.idx_head_dim));
    DSV4_RETURN_IF_ERROR(positive("attention.indexer.top_k", s.idx_topk));
    if (s.n_rot > s.idx_head_dim)
      return invalid_argument("rope.dimension_count exceeds attention.indexer.key_length");
  }
  if (static_cast<int64_t>(s.swiglu_clamp_exp.size()) != s.n_layer ||
      static_cast<int64_t>(s.swiglu_clamp_shexp.size()) != s.n_layer)
    return invalid_argument("swiglu_clamp_exp / swiglu_clamp_shexp need one entry per layer");
  if (!(s.hc_eps > 0) || !(s.rms_eps > 0)) return invalid_argument("epsilons must be positive");
  if (!(s.rope_base > 0) || !(s.compress_rope_base > 0)) return invalid_argument("rope bases must be positive");
  return ok_status();
}

namespace {

Result<int64_t> req_int(const gguf::GgufFile& f, const std::string& key) { return f.get_int("deepseek4." + key); }
Result<double> req_float(const gguf::GgufFile& f, const std::string& key) { return f.get_float("deepseek4." + key); }
int64_t opt_int(const gguf::GgufFile& f, const std::string& key, int64_t def) {
  auto r = f.get_int("deepseek4." + key);
  return r.ok() ? *r : def;
}
double opt_float(const gguf::GgufFile& f, const std::string& key, double def) {
  auto r = f.get_float("deepseek4." + key);
  return r.ok() ? *r : def;
}

}  // namespace

Result<Ds4Shape> shape_from_gguf(const gguf::GgufFile& f) {
  auto arch = f.get_string("general.architecture");
  if (!arch.ok()) return arch.status().with_context(f.name());
  if (*arch != "deepseek4")
    return unsupported(f.name() + ": general.architecture is '" + std::string(*arch) + "', expected 'deepseek4'");
  Ds4Shape s;
  auto fail = [&](const Status& st) { return st.with_context(f.name()); };
#define DSV4_REQ_INT(field, key)            \
  {                                         \
    auto r = req_int(f, key);               \
    if (!r.ok()) return fail(r.status());   \
    s.field = *r;                           \
  }
#define DSV4_REQ_FLOAT(field, key)          \
  {                                         \
    auto r = req_float(f, key);             \
    if (!r.ok()) return fail(r.status());   \
    s.field = *r;                           \
  }
  DSV4_REQ_INT(n_layer, "block_count");
  DSV4_REQ_INT(n_embd, "embedding_length");
  DSV4_REQ_INT(n_vocab, "vocab_size");
  DSV4_REQ_INT(n_head, "attention.head_count");
  DSV4_REQ_INT(head_dim, "attention.key_length");
  DSV4_REQ_INT(n_rot, "rope.dimension_count");
  DSV4_REQ_INT(q_lora_rank, "attention.q_lora_rank");
  DSV4_REQ_INT(o_lora_rank, "attention.output_lora_rank");
  DSV4_REQ_INT(o_groups, "attention.output_group_count");
  DSV4_REQ_INT(n_swa, "attention.sliding_window");
  DSV4_REQ_INT(n_expert, "expert_count");
  DSV4_REQ_INT(n_expert_used, "expert_used_count");
  DSV4_REQ_INT(n_ff_exp, "expert_feed_forward_length");
  DSV4_REQ_INT(hc_mult, "hyper_connection.count");
  DSV4_REQ_INT(hc_sinkhorn_iters, "hyper_connection.sinkhorn_iterations");
  DSV4_REQ_FLOAT(rms_eps, "attention.layer_norm_rms_epsilon");
  DSV4_REQ_FLOAT(rope_base, "rope.freq_base");
#undef DSV4_REQ_INT
#undef DSV4_REQ_FLOAT
  s.n_ctx_train = opt_int(f, "context_length", 0);
  s.idx_n_head = opt_int(f, "attention.indexer.head_count", 0);
  s.idx_head_dim = opt_int(f, "attention.indexer.key_length", 0);
  s.idx_topk = opt_int(f, "attention.indexer.top_k", 0);
  s.n_expert_shared = opt_int(f, "expert_shared_count", 1);
  s.n_hash_layers = opt_int(f, "hash_layer_count", 0);
  s.expert_weights_scale = opt_float(f, "expert_weights_scale", 1.0);
  if (auto norm = f.get_bool("deepseek4.expert_weights_norm"); norm.ok()) s.expert_weights_norm = *norm;
  s.hc_eps = opt_float(f, "hyper_connection.epsilon", 1e-6);
  s.compress_rope_base = opt_float(f, "attention.compress_rope_freq_base", s.rope_base);
  s.yarn_factor = opt_float(f, "rope.scaling.factor", 1.0);
  s.yarn_orig_ctx = opt_int(f, "rope.scaling.original_context_length", 0);
  s.yarn_beta_fast = opt_float(f, "rope.scaling.yarn_beta_fast", 32.0);
  s.yarn_beta_slow = opt_float(f, "rope.scaling.yarn_beta_slow", 1.0);
  if (auto g = f.get_int("deepseek4.expert_gating_func"); g.ok() && *g != 4)
    return unsupported(f.name() + ": deepseek4.expert_gating_func is " + std::to_string(*g) +
                       ", expected 4 (sqrt(softplus))");
  {
    auto r = f.get_int_array("deepseek4.attention.compress_ratios");
    if (!r.ok()) return fail(r.status());
    if (static_cast<int64_t>(r->size()) < s.n_layer)
      return invalid_argument(f.name() + ": deepseek4.attention.compress_ratios has " + std::to_string(r->size()) +
                              " entries, expected at least block_count = " + std::to_string(s.n_layer));
    s.compress_ratio.assign(r->begin(), r->begin() + s.n_layer);  // a trailing MTP entry is ignored
  }
  auto clamp_array = [&](const char* key, std::vector<double>& out) -> Status {
    auto r = f.get_float_array(std::string("deepseek4.") + key);
    if (!r.ok()) return r.status();
    if (static_cast<int64_t>(r->size()) < s.n_layer)
      return invalid_argument(std::string("deepseek4.") + key + " has " + std::to_string(r->size()) +
                              " entries, expected block_count = " + std::to_string(s.n_layer));
    out.assign(r->begin(), r->begin() + s.n_layer);
    return ok_status();
  };
  if (Status st = clamp_array("swiglu_clamp_exp", s.swiglu_clamp_exp); !st.ok()) return fail(st);
  if (f.has("deepseek4.swiglu_clamp_shexp")) {
    if (Status st = clamp_array("swiglu_clamp_shexp", s.swiglu_clamp_shexp); !st.ok()) return fail(st);
  } else {
    s.swiglu_clamp_shexp = s.swiglu_clamp_exp;
  }
  if (Status st = validate_shape(s); !st.ok()) return fail(st);
  return s;
}

}  // namespace dsv4::model
