// tests/unit/tools/convert_test_util.h — builds tiny DS4 checkpoints for the convert tests.
//
// A safetensors writer (single file or sharded with an index) and a checkpoint generator that walks
// the manifest of a shape and writes each tensor's source(s) in one of two naming schemes:
//   kOfficial  layers.N.attn.wq_a.weight + .scale (FP8 E4M3 × E8M0 128×128), routed experts FP4
//              (I8, two per byte) + per-32 E8M0 .scale, norms/embeddings BF16, hc/sinks/ape F32,
//              tid2eid I64; optional "model." prefix
//   kHf        model.layers.N.self_attn.q_a_proj.weight ..., stacked mlp.experts.gate_up_proj /
//              down_proj, BF16 and F32 only
// It records the expected decoded f32 values of every GGUF tensor (GGUF row order), computed with
// the test's own decoders (not the converter's).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "model/tensor_manifest.h"
#include "numerics/half.h"

namespace dsv4::tools::testutil {

struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

inline void write_safetensors(const std::string& path, const std::vector<RawTensor>& ts) {
  nlohmann::json h = nlohmann::json::object();
  h["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (const RawTensor& t : ts) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string hs = h.dump();
  while (hs.size() % 8) hs += ' ';
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = hs.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(hs.data(), static_cast<std::streamsize>(hs.size()));
  for (const RawTensor& t : ts) f.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
}

// Splits tensors over `shards` files plus model.safetensors.index.json (shards == 0: model.safetensors).
inline void write_checkpoint_files(const std::string& dir, const std::vector<RawTensor>& ts, int shards) {
  std::filesystem::create_directories(dir);
  if (shards <= 0) {
    write_safetensors(dir + "/model.safetensors", ts);
    return;
  }
  nlohmann::json wm = nlohmann::json::object();
  std::vector<std::vector<RawTensor>> parts(static_cast<size_t>(shards));
  for (size_t i = 0; i < ts.size(); ++i) parts[i % static_cast<size_t>(shards)].push_back(ts[i]);
  for (int s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
    write_safetensors(dir + "/" + name, parts[static_cast<size_t>(s)]);
    for (const RawTensor& t : parts[static_cast<size_t>(s)]) wm[t.name] = name;
  }
  std::ofstream(dir + "/model.safetensors.index.json") << nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", wm}}.dump(1);
}

// The test's own decoders (written from the spec formulas, independent of hf_tensors.cpp).
inline float ref_e4m3(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  const double v = e == 0 ? m * std::pow(2.0, -9) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return static_cast<float>(s ? -v : v);
}
inline float ref_e8m0(uint8_t e) { return static_cast<float>(std::pow(2.0, e - 127)); }
inline float ref_e2m1(uint8_t n) {
  static const float mag[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  return (n & 8) ? -mag[n & 7] : mag[n & 7];
}

enum class Scheme { kOfficial, kOfficialModelPrefix, kHf };

struct Checkpoint {
  std::vector<RawTensor> tensors;
  std::map<std::string, std::vector<float>> expected;  // GGUF name -> values in GGUF order
  std::map<std::string, std::vector<int32_t>> expected_ids;
};

class Generator {
 public:
  Generator(const model::Ds4Shape& s, Scheme scheme, uint32_t seed, bool keep_expected = true)
      : s_(s), scheme_(scheme), rng_(seed), keep_(keep_expected) {}

  Checkpoint build() {
    for (const model::TensorSpec& t : model::ds4_tensor_manifest(s_)) {
      add(t);
      if (!keep_) ck_.expected.clear();
    }
    return std::move(ck_);
  }

 private:
  float normal(float sd) { return std::normal_distribution<float>(0.0f, sd)(rng_); }
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  std::string off(const std::string& suffix, int64_t layer) const {
    const std::string p = scheme_ == Scheme::kOfficialModelPrefix ? "model." : "";
    return p + (layer >= 0 ? "layers." + std::to_string(layer) + "." : std::string()) + suffix;
  }
  std::string hf(const std::string& suffix, int64_t layer) const {
    return layer >= 0 ? "model.layers." + std::to_string(layer) + "." + suffix : suffix;
  }

  // Plain tensors: BF16 or F32 values; returns the decoded values.
  std::vector<float> plain(const std::string& name, std::vector<int64_t> shape, bool bf16) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    RawTensor t{name, bf16 ? "BF16" : "F32", shape, {}};
    std::vector<float> v(static_cast<size_t>(n));
    t.bytes.resize(static_cast<size_t>(n) * (bf16 ? 2 : 4));
    for (int64_t i = 0; i < n; ++i) {
      float x = normal(0.5f);
      if (bf16) {
        const uint16_t b = f32_to_bf16(x);
        std::memcpy(t.bytes.data() + 2 * i, &b, 2);
        x = bf16_to_f32(b);
      } else {
        std::memcpy(t.bytes.data() + 4 * i, &x, 4);
      }
      v[static_cast<size_t>(i)] = x;
    }
    ck_.tensors.push_back(std::move(t));
    return v;
  }

  std::vector<float> fp8(const std::string& weight_name, int64_t out, int64_t in) {
    RawTensor w{weight_name, "F8_E4M3", {out, in}, std::vector<uint8_t>(static_cast<size_t>(out * in))};
    const int64_t sr = (out + 127) / 128, sc = (in + 127) / 128;
    RawTensor s{weight_name.substr(0, weight_name.size() - 7) + ".scale", "F8_E8M0", {sr, sc},
                std::vector<uint8_t>(static_cast<size_t>(sr * sc))};
    for (auto& b : s.bytes) b = static_cast<uint8_t>(uniform(120, 128));
    std::vector<float> v(static_cast<size_t>(out * in));
    for (int64_t r = 0; r < out; ++r)
      for (int64_t c = 0; c < in; ++c) {
        uint8_t b;
        do b = static_cast<uint8_t>(uniform(0, 255)); while ((b & 0x7f) == 0x7f);
        w.bytes[static_cast<size_t>(r * in + c)] = b;
        v[static_cast<size_t>(r * in + c)] = ref_e4m3(b) * ref_e8m0(s.bytes[static_cast<size_t>((r / 128) * sc + c / 128)]);
      }
    ck_.tensors.push_back(std::move(w));
    ck_.tensors.push_back(std::move(s));
    return v;
  }

  std::vector<float> fp4(const std::string& weight_name, int64_t out, int64_t in) {
    RawTensor w{weight_name, "I8", {out, in / 2}, std::vector<uint8_t>(static_cast<size_t>(out * in / 2))};
    RawTensor s{weight_name.substr(0, weight_name.size() - 7) + ".scale", "F8_E8M0", {out, in / 32},
                std::vector<uint8_t>(static_cast<size_t>(out * in / 32))};
    for (auto& b : s.bytes) b = static_cast<uint8_t>(uniform(122, 130));
    std::vector<float> v(static_cast<size_t>(out * in));
    for (int64_t r = 0; r < out; ++r)
      for (int64_t c = 0; c < in; c += 2) {
        const uint8_t b = static_cast<uint8_t>(uniform(0, 255));
        w.bytes[static_cast<size_t>((r * in + c) / 2)] = b;
        const float sc = ref_e8m0(s.bytes[static_cast<size_t>(r * (in / 32) + c / 32)]);
        v[static_cast<size_t>(r * in + c)] = ref_e2m1(b & 15) * sc;
        v[static_cast<size_t>(r * in + c + 1)] = ref_e2m1(b >> 4) * sc;
      }
    ck_.tensors.push_back(std::move(w));
    ck_.tensors.push_back(std::move(s));
    return v;
  }

  void add(const model::TensorSpec& t);

  model::Ds4Shape s_;
  Scheme scheme_;
  std::mt19937 rng_;
  bool keep_;
  Checkpoint ck_;
};

// The test's own name table: GGUF suffix -> {official suffix, HF suffix}.
inline const std::map<std::string, std::pair<std::string, std::string>>& test_names() {
  static const std::map<std::string, std::pair<std::string, std::string>> m = {
      {"token_embd.weight", {"embed.weight", "model.embed_tokens.weight"}},
      {"output_norm.weight", {"norm.weight", "model.norm.weight"}},
      {"output.weight", {"head.weight", "lm_head.weight"}},
      {"output_hc_fn.weight", {"hc_head_fn", "model.hc_head.hc_fn"}},
      {"output_hc_base.weight", {"hc_head_base", "model.hc_head.hc_base"}},
      {"output_hc_scale.weight", {"hc_head_scale", "model.hc_head.hc_scale"}},
      {"hc_attn_fn.weight", {"hc_attn_fn", "attn_hc.fn"}},
      {"hc_attn_scale.weight", {"hc_attn_scale", "attn_hc.scale"}},
      {"hc_attn_base.weight", {"hc_attn_base", "attn_hc.base"}},
      {"attn_norm.weight", {"attn_norm.weight", "input_layernorm.weight"}},
      {"attn_q_a.weight", {"attn.wq_a.weight", "self_attn.q_a_proj.weight"}},
      {"attn_q_a_norm.weight", {"attn.q_norm.weight", "self_attn.q_a_norm.weight"}},
      {"attn_q_b.weight", {"attn.wq_b.weight", "self_attn.q_b_proj.weight"}},
      {"attn_kv.weight", {"attn.wkv.weight", "self_attn.kv_proj.weight"}},
      {"attn_kv_a_norm.weight", {"attn.kv_norm.weight", "self_attn.kv_norm.weight"}},
      {"attn_sinks.weight", {"attn.attn_sink", "self_attn.sinks"}},
      {"attn_output_a.weight", {"attn.wo_a.weight", "self_attn.o_a_proj.weight"}},
      {"attn_output_b.weight", {"attn.wo_b.weight", "self_attn.o_b_proj.weight"}},
      {"attn_compressor_ape.weight", {"attn.compressor.ape", "self_attn.compressor.position_bias"}},
      {"attn_compressor_kv.weight", {"attn.compressor.wkv.weight", "self_attn.compressor.kv_proj.weight"}},
      {"attn_compressor_gate.weight", {"attn.compressor.wgate.weight", "self_attn.compressor.gate_proj.weight"}},
      {"attn_compressor_norm.weight", {"attn.compressor.norm.weight", "self_attn.compressor.kv_norm.weight"}},
      {"indexer.attn_q_b.weight", {"attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight"}},
      {"indexer.proj.weight", {"attn.indexer.weights_proj.weight", "self_attn.compressor.indexer.scorer.weights_proj.weight"}},
      {"indexer_compressor_ape.weight", {"attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"}},
      {"indexer_compressor_kv.weight", {"attn.indexer.compressor.wkv.weight", "self_attn.compressor.indexer.kv_proj.weight"}},
      {"indexer_compressor_gate.weight", {"attn.indexer.compressor.wgate.weight", "self_attn.compressor.indexer.gate_proj.weight"}},
      {"indexer_compressor_norm.weight", {"attn.indexer.compressor.norm.weight", "self_attn.compressor.indexer.kv_norm.weight"}},
      {"hc_ffn_fn.weight", {"hc_ffn_fn", "ffn_hc.fn"}},
      {"hc_ffn_scale.weight", {"hc_ffn_scale", "ffn_hc.scale"}},
      {"hc_ffn_base.weight", {"hc_ffn_base", "ffn_hc.base"}},
      {"ffn_norm.weight", {"ffn_norm.weight", "post_attention_layernorm.weight"}},
      {"ffn_gate_inp.weight", {"ffn.gate.weight", "mlp.gate.weight"}},
      {"ffn_gate_tid2eid.weight", {"ffn.gate.tid2eid", "mlp.gate.tid2eid"}},
      {"exp_probs_b.bias", {"ffn.gate.bias", "mlp.gate.e_score_correction_bias"}},
      {"ffn_gate_shexp.weight", {"ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"}},
      {"ffn_up_shexp.weight", {"ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"}},
      {"ffn_down_shexp.weight", {"ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"}},
  };
  return m;
}

inline void Generator::add(const model::TensorSpec& t) {
  using R = model::TensorRole;
  const bool official = scheme_ != Scheme::kHf;
  std::string suffix = t.name;
  if (t.layer >= 0) suffix = t.name.substr(("blk." + std::to_string(t.layer) + ".").size());
  if (t.n_dims == 3) {  // routed experts
    const int64_t in = t.ne[0], out = t.ne[1], E = t.ne[2];
    std::vector<float>& exp = ck_.expected[t.name];
    const char* w = suffix == "ffn_gate_exps.weight" ? "w1" : suffix == "ffn_up_exps.weight" ? "w3" : "w2";
    if (official) {
      for (int64_t e = 0; e < E; ++e) {
        std::vector<float> v = fp4(off("ffn.experts." + std::to_string(e) + "." + w + ".weight", t.layer), out, in);
        exp.insert(exp.end(), v.begin(), v.end());
      }
      return;
    }
    if (suffix == "ffn_up_exps.weight") return;  // written with the gate
    if (suffix == "ffn_gate_exps.weight") {
      std::vector<float> v = plain(hf("mlp.experts.gate_up_proj", t.layer), {E, 2 * out, in}, true);
      std::vector<float>& up = ck_.expected["blk." + std::to_string(t.layer) + ".ffn_up_exps.weight"];
      for (int64_t e = 0; e < E; ++e) {
        const float* m = v.data() + e * 2 * out * in;
        exp.insert(exp.end(), m, m + out * in);
        up.insert(up.end(), m + out * in, m + 2 * out * in);
      }
      return;
    }
    exp = plain(hf("mlp.experts.down_proj", t.layer), {E, out, in}, true);
    return;
  }
  const auto& names = test_names().at(suffix);
  const std::string name = official ? off(names.first, t.layer) : hf(names.second, t.layer);
  std::vector<int64_t> shape;
  for (int d = t.n_dims - 1; d >= 0; --d) shape.push_back(t.ne[d]);
  if (t.role == R::kHashTable) {
    RawTensor r{name, "I64", shape, std::vector<uint8_t>(static_cast<size_t>(t.n_elements()) * 8)};
    std::vector<int32_t>& ids = ck_.expected_ids[t.name];
    for (int64_t i = 0; i < t.n_elements(); ++i) {
      const int64_t id = uniform(0, static_cast<int>(s_.n_expert) - 1);
      std::memcpy(r.bytes.data() + 8 * i, &id, 8);
      ids.push_back(static_cast<int32_t>(id));
    }
    ck_.tensors.push_back(std::move(r));
    return;
  }
  const bool fp8_role = t.role == R::kAttnProj || t.role == R::kIndexerQ || t.role == R::kSharedExpert;
  if (official && fp8_role) {
    ck_.expected[t.name] = fp8(name, t.ne[1], t.ne[0]);
    return;
  }
  const bool f32_role = t.role == R::kHcFn || t.role == R::kHcSmall || t.role == R::kAttnSinks ||
                        t.role == R::kCompressorApe || t.role == R::kRouterBias;
  ck_.expected[t.name] = plain(name, shape, !f32_role);
}

// config.json for a shape, in the current transformers keys or the legacy shipped keys.
inline std::string config_json(const model::Ds4Shape& s, bool legacy) {
  nlohmann::json j = {
      {"architectures", {"DeepseekV4ForCausalLM"}}, {"model_type", "deepseek_v4"},
      {"vocab_size", s.n_vocab}, {"hidden_size", s.n_embd}, {"moe_intermediate_size", s.n_ff_exp},
      {"num_hidden_layers", s.n_layer}, {"num_attention_heads", s.n_head}, {"num_key_value_heads", 1},
      {"head_dim", s.head_dim}, {"q_lora_rank", s.q_lora_rank}, {"num_experts_per_tok", s.n_expert_used},
      {"n_routed_experts", s.n_expert}, {"n_shared_experts", s.n_expert_shared},
      {"routed_scaling_factor", s.expert_weights_scale}, {"scoring_func", "sqrtsoftplus"}, {"norm_topk_prob", true},
      {"sliding_window", s.n_swa}, {"o_groups", s.o_groups}, {"o_lora_rank", s.o_lora_rank},
      {"index_n_heads", s.idx_n_head}, {"index_head_dim", s.idx_head_dim}, {"index_topk", s.idx_topk},
      {"hc_mult", s.hc_mult}, {"hc_sinkhorn_iters", s.hc_sinkhorn_iters}, {"hc_eps", s.hc_eps},
      {"rms_norm_eps", s.rms_eps}, {"swiglu_limit", s.swiglu_clamp_exp.at(0)}, {"rope_theta", s.rope_base},
      {"compress_rope_theta", s.compress_rope_base}, {"max_position_embeddings", s.n_ctx_train},
      {"tie_word_embeddings", false}, {"num_nextn_predict_layers", 1}};
  nlohmann::json yarn = {{"factor", s.yarn_factor}, {"original_max_position_embeddings", s.yarn_orig_ctx},
                         {"beta_fast", s.yarn_beta_fast}, {"beta_slow", s.yarn_beta_slow}};
  if (legacy) {
    std::vector<int64_t> r = s.compress_ratio;
    r.push_back(0);  // the MTP layer
    j["compress_ratios"] = r;
    j["num_hash_layers"] = s.n_hash_layers;
    j["qk_rope_head_dim"] = s.n_rot;
    if (s.yarn_orig_ctx > 0) {
      yarn["type"] = "yarn";
      yarn["mscale"] = 1.0;
      j["rope_scaling"] = yarn;
    }
    j["topk_method"] = "noaux_tc";
    return j.dump(2);
  }
  nlohmann::json lt = nlohmann::json::array(), mt = nlohmann::json::array();
  int64_t hca = 128;
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const int64_t r = s.compress_ratio[static_cast<size_t>(il)];
    lt.push_back(r == 0 ? "sliding_attention" : r == 4 ? "compressed_sparse_attention" : "heavily_compressed_attention");
    if (r != 0 && r != 4) hca = r;
    mt.push_back(il < s.n_hash_layers ? "hash_moe" : "moe");
  }
  j["layer_types"] = lt;
  j["mlp_layer_types"] = mt;
  j["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", hca}};
  const double prf = static_cast<double>(s.n_rot) / static_cast<double>(s.head_dim);
  j["partial_rotary_factor"] = prf;
  nlohmann::json main = {{"rope_type", "default"}, {"rope_theta", s.rope_base}, {"partial_rotary_factor", prf}};
  nlohmann::json comp = yarn;
  comp["rope_type"] = s.yarn_orig_ctx > 0 ? "yarn" : "default";
  comp["rope_theta"] = s.compress_rope_base;
  comp["attention_factor"] = 1.0;
  j["rope_parameters"] = {{"main", main}, {"compress", comp}};
  return j.dump(2);
}

inline void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

}  // namespace dsv4::tools::testutil
