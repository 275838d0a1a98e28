// tools/hf_config.cpp — key lookup with clear errors, the legacy/current folds, validation.
#include "tools/hf_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

namespace dsv4::tools {
namespace {

using Json = nlohmann::json;

class Cfg {
 public:
  Cfg(const Json& j, const std::string& name) : j_(j), name_(name) {}

  Status err(const std::string& key, const std::string& what) const {
    return invalid_argument(name_ + ": '" + key + "' " + what);
  }
  const Json* find(const Json& obj, const std::string& key) const {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  const Json* find(const std::string& key) const { return find(j_, key); }

  Result<int64_t> as_int(const Json& v, const std::string& key) const {
    if (v.is_number_integer()) {
      if (v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t{1} << 62)) return err(key, "is too large");
      return v.get<int64_t>();
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
    }
    return err(key, "must be an integer");
  }
  Result<double> as_num(const Json& v, const std::string& key) const {
    if (v.is_number()) return v.get<double>();
    return err(key, "must be a number");
  }
  Result<int64_t> req_int(const std::string& key) const {
    const Json* v = find(key);
    if (!v) return invalid_argument(name_ + ": required key '" + key + "' is missing");
    return as_int(*v, key);
  }
  // The first present key of `keys`, or an error naming all of them.
  Result<int64_t> req_int_any(std::initializer_list<const char*> keys) const {
    std::string names;
    for (const char* k : keys) {
      if (const Json* v = find(k)) return as_int(*v, k);
      names += std::string(names.empty() ? "" : " / ") + "'" + k + "'";
    }
    return invalid_argument(name_ + ": required key " + names + " is missing");
  }
  Result<int64_t> opt_int(const std::string& key, int64_t def) const {
    const Json* v = find(key);
    return v ? as_int(*v, key) : Result<int64_t>(def);
  }
  Result<double> opt_num(const Json& obj, const std::string& key, double def, const std::string& path) const {
    const Json* v = find(obj, key);
    return v ? as_num(*v, path) : Result<double>(def);
  }
  Result<double> opt_num(const std::string& key, double def) const { return opt_num(j_, key, def, key); }

  const std::string& name() const { return name_; }

 private:
  const Json& j_;
  const std::string& name_;
};

std::string rope_type_of(const Json& d) {
  for (const char* k : {"rope_type", "type"}) {
    auto it = d.find(k);
    if (it != d.end() && it->is_string()) return it->get<std::string>();
  }
  return "default";
}

// Applies one rope dict's YaRN parameters (if it is a yarn dict) to the compress rope.
Status apply_yarn(const Cfg& c, const Json& d, const std::string& path, model::Ds4Shape& s) {
  if (!d.is_object()) return c.err(path, "must be an object");
  const std::string type = rope_type_of(d);
  if (type == "default" || type == "none") return ok_status();
  if (type != "yarn") return unsupported(c.name() + ": '" + path + "' rope type '" + type + "' (only yarn or default)");
  const Json* f = c.find(d, "factor");
  const Json* o = c.find(d, "original_max_position_embeddings");
  if (!f || !o) return c.err(path, "is a yarn rope but lacks factor / original_max_position_embeddings");
  DSV4_ASSIGN_OR_RETURN(s.yarn_factor, c.as_num(*f, path + ".factor"));
  DSV4_ASSIGN_OR_RETURN(s.yarn_orig_ctx, c.as_int(*o, path + ".original_max_position_embeddings"));
  DSV4_ASSIGN_OR_RETURN(s.yarn_beta_fast, c.opt_num(d, "beta_fast", 32.0, path + ".beta_fast"));
  DSV4_ASSIGN_OR_RETURN(s.yarn_beta_slow, c.opt_num(d, "beta_slow", 1.0, path + ".beta_slow"));
  if (s.yarn_orig_ctx <= 0) return c.err(path + ".original_max_position_embeddings", "must be positive");
  return ok_status();
}

// Rope bases, YaRN and the partial rotary factor (if a rope dict carries it).
Status read_rope(const Cfg& c, model::Ds4Shape& s, std::optional<double>& prf) {
  DSV4_ASSIGN_OR_RETURN(s.rope_base, c.opt_num("rope_theta", 10000.0));
  DSV4_ASSIGN_OR_RETURN(s.compress_rope_base, c.opt_num("compress_rope_theta", 160000.0));
  s.yarn_factor = 1.0;
  s.yarn_beta_fast = 32.0;
  s.yarn_beta_slow = 1.0;
  s.yarn_orig_ctx = 0;
  auto take_prf = [&](const Json& d, const std::string& path) -> Status {
    if (const Json* p = c.find(d, "partial_rotary_factor")) {
      DSV4_ASSIGN_OR_RETURN(double v, c.as_num(*p, path + ".partial_rotary_factor"));
      if (!prf) prf = v;
    }
    return ok_status();
  };
  if (const Json* rp = c.find("rope_parameters")) {
    if (!rp->is_object()) return c.err("rope_parameters", "must be an object");
    const Json* main = c.find(*rp, "main");
    const Json* comp = c.find(*rp, "compress");
    if (main || comp) {  // nested form
      if (main) {
        if (!main->is_object()) return c.err("rope_parameters.main", "must be an object");
        DSV4_ASSIGN_OR_RETURN(s.rope_base, c.opt_num(*main, "rope_theta", s.rope_base, "rope_parameters.main.rope_theta"));
        if (rope_type_of(*main) != "default")
          return unsupported(c.name() + ": rope_parameters.main must be a default rope (YaRN applies to 'compress' only)");
        DSV4_RETURN_IF_ERROR(take_prf(*main, "rope_parameters.main"));
      }
      if (comp) {
        DSV4_RETURN_IF_ERROR(apply_yarn(c, *comp, "rope_parameters.compress", s));
        DSV4_ASSIGN_OR_RETURN(s.compress_rope_base, c.opt_num(*comp, "rope_theta", s.compress_rope_base,
                                                              "rope_parameters.compress.rope_theta"));
        DSV4_RETURN_IF_ERROR(take_prf(*comp, "rope_parameters.compress"));
      }
      return ok_status();
    }
    // Flat form: the compress rope's YaRN; its rope_theta (if any) is the main base when the
    // top-level rope_theta is absent.
    DSV4_RETURN_IF_ERROR(apply_yarn(c, *rp, "rope_parameters", s));
    if (!c.find("rope_theta")) {
      DSV4_ASSIGN_OR_RETURN(s.rope_base, c.opt_num(*rp, "rope_theta", s.rope_base, "rope_parameters.rope_theta"));
    }
    return take_prf(*rp, "rope_parameters");
  }
  if (const Json* rs = c.find("rope_scaling")) return apply_yarn(c, *rs, "rope_scaling", s);
  return ok_status();
}

Result<std::vector<int64_t>> read_compress_ratios(const Cfg& c, int64_t n_layer) {
  std::optional<std::vector<int64_t>> from_types, from_list;
  if (const Json* lt = c.find("layer_types")) {
    if (!lt->is_array()) return c.err("layer_types", "must be an array of strings");
    if (static_cast<int64_t>(lt->size()) != n_layer)
      return c.err("layer_types", "has " + std::to_string(lt->size()) + " entries for " + std::to_string(n_layer) +
                                      " layers (num_hidden_layers)");
    int64_t csa = 4, hca = 128;
    DSV4_ASSIGN_OR_RETURN(csa, c.opt_int("compress_rate_csa", csa));
    DSV4_ASSIGN_OR_RETURN(hca, c.opt_int("compress_rate_hca", hca));
    if (const Json* cr = c.find("compress_rates")) {
      if (!cr->is_object()) return c.err("compress_rates", "must be an object {layer type: rate}");
      if (const Json* v = c.find(*cr, "compressed_sparse_attention")) {
        DSV4_ASSIGN_OR_RETURN(csa, c.as_int(*v, "compress_rates.compressed_sparse_attention"));
      }
      if (const Json* v = c.find(*cr, "heavily_compressed_attention")) {
        DSV4_ASSIGN_OR_RETURN(hca, c.as_int(*v, "compress_rates.heavily_compressed_attention"));
      }
    }
    if (csa != 4)
      return unsupported(c.name() + ": compressed_sparse_attention rate " + std::to_string(csa) + " (DS4 CSA layers use 4)");
    if (hca <= 0 || hca == 4)
      return unsupported(c.name() + ": heavily_compressed_attention rate " + std::to_string(hca) + " (must be > 0 and not 4)");
    std::vector<int64_t> r;
    for (size_t i = 0; i < lt->size(); ++i) {
      const Json& t = (*lt)[i];
      const std::string key = "layer_types[" + std::to_string(i) + "]";
      if (!t.is_string()) return c.err(key, "must be a string");
      const std::string k = t.get<std::string>();
      if (k == "sliding_attention") r.push_back(0);
      else if (k == "compressed_sparse_attention") r.push_back(csa);
      else if (k == "heavily_compressed_attention") r.push_back(hca);
      else return c.err(key, "is the unknown layer type '" + k + "'");
    }
    from_types = std::move(r);
  }
  if (const Json* cl = c.find("compress_ratios")) {
    if (!cl->is_array()) return c.err("compress_ratios", "must be an array of integers");
    if (static_cast<int64_t>(cl->size()) < n_layer)
      return c.err("compress_ratios", "has " + std::to_string(cl->size()) + " entries for " + std::to_string(n_layer) +
                                          " layers (num_hidden_layers)");
    std::vector<int64_t> r;
    for (int64_t i = 0; i < n_layer; ++i) {  // entries past n_layer are the MTP layer(s)
      DSV4_ASSIGN_OR_RETURN(int64_t v, c.as_int((*cl)[static_cast<size_t>(i)], "compress_ratios[" + std::to_string(i) + "]"));
      if (v < 0) return c.err("compress_ratios[" + std::to_string(i) + "]", "must be >= 0");
      r.push_back(v);
    }
    from_list = std::move(r);
  }
  if (from_types && from_list && *from_types != *from_list)
    return invalid_argument(c.name() + ": layer_types/compress_rates and compress_ratios disagree");
  if (from_types) return *from_types;
  if (from_list) return *from_list;
  return invalid_argument(c.name() + ": neither 'layer_types' nor 'compress_ratios' is present (the attention "
                                     "schedule must be explicit)");
}

Result<int64_t> read_hash_layers(const Cfg& c, int64_t n_layer) {
  std::optional<int64_t> from_types, from_count;
  if (const Json* mt = c.find("mlp_layer_types")) {
    if (!mt->is_array() || static_cast<int64_t>(mt->size()) != n_layer)
      return c.err("mlp_layer_types", "must be an array of " + std::to_string(n_layer) + " strings");
    int64_t n = 0;
    bool done = false;
    for (size_t i = 0; i < mt->size(); ++i) {
      const Json& t = (*mt)[i];
      const std::string key = "mlp_layer_types[" + std::to_string(i) + "]";
      if (!t.is_string()) return c.err(key, "must be a string");
      const std::string k = t.get<std::string>();
      if (k == "hash_moe") {
        if (done) return unsupported(c.name() + ": hash_moe layers must come first (" + key + ")");
        ++n;
      } else if (k == "moe") {
        done = true;
      } else {
        return c.err(key, "is the unknown MLP type '" + k + "'");
      }
    }
    from_types = n;
  }
  if (const Json* nh = c.find("num_hash_layers")) {
    DSV4_ASSIGN_OR_RETURN(int64_t n, c.as_int(*nh, "num_hash_layers"));
    from_count = n;
  }
  if (from_types && from_count && *from_types != *from_count)
    return invalid_argument(c.name() + ": mlp_layer_types and num_hash_layers disagree");
  return from_types ? *from_types : from_count ? *from_count : 0;
}

}  // namespace

Result<model::Ds4Shape> shape_from_hf_config(std::string_view json_text, const std::string& name) {
  Json j = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument(name + ": not well-formed JSON");
  if (!j.is_object()) return invalid_argument(name + ": top level is not a JSON object");
  const Cfg c(j, name);
  model::Ds4Shape s;
  DSV4_ASSIGN_OR_RETURN(s.n_layer, c.req_int("num_hidden_layers"));
  DSV4_ASSIGN_OR_RETURN(s.n_embd, c.req_int("hidden_size"));
  DSV4_ASSIGN_OR_RETURN(s.n_vocab, c.req_int("vocab_size"));
  DSV4_ASSIGN_OR_RETURN(s.n_head, c.req_int("num_attention_heads"));
  DSV4_ASSIGN_OR_RETURN(s.head_dim, c.req_int("head_dim"));
  DSV4_ASSIGN_OR_RETURN(s.q_lora_rank, c.req_int("q_lora_rank"));
  DSV4_ASSIGN_OR_RETURN(s.o_lora_rank, c.req_int("o_lora_rank"));
  DSV4_ASSIGN_OR_RETURN(s.o_groups, c.req_int("o_groups"));
  DSV4_ASSIGN_OR_RETURN(s.n_swa, c.req_int("sliding_window"));
  DSV4_ASSIGN_OR_RETURN(s.n_ctx_train, c.req_int("max_position_embeddings"));
  DSV4_ASSIGN_OR_RETURN(s.n_expert, c.req_int_any({"n_routed_experts", "num_local_experts"}));
  DSV4_ASSIGN_OR_RETURN(s.n_expert_used, c.req_int("num_experts_per_tok"));
  DSV4_ASSIGN_OR_RETURN(s.n_ff_exp, c.req_int_any({"moe_intermediate_size", "intermediate_size"}));
  DSV4_ASSIGN_OR_RETURN(s.n_expert_shared, c.opt_int("n_shared_experts", 1));
  DSV4_ASSIGN_OR_RETURN(int64_t n_kv, c.opt_int("num_key_value_heads", 1));
  if (n_kv != 1) return unsupported(name + ": num_key_value_heads is " + std::to_string(n_kv) + " (DS4 has one shared KV head)");
  if (const Json* sf = c.find("scoring_func")) {
    if (!sf->is_string() || sf->get<std::string>() != "sqrtsoftplus")
      return unsupported(name + ": scoring_func must be \"sqrtsoftplus\"");
  }
  if (const Json* tie = c.find("tie_word_embeddings"); tie && tie->is_boolean() && tie->get<bool>())
    return unsupported(name + ": tie_word_embeddings = true (DS4 has a separate LM head)");
  DSV4_ASSIGN_OR_RETURN(s.compress_ratio, read_compress_ratios(c, s.n_layer));
  DSV4_ASSIGN_OR_RETURN(s.n_hash_layers, read_hash_layers(c, s.n_layer));
  bool any_csa = false;
  for (int64_t r : s.compress_ratio) any_csa |= r == 4;
  if (any_csa) {
    DSV4_ASSIGN_OR_RETURN(s.idx_n_head, c.req_int("index_n_heads"));
    DSV4_ASSIGN_OR_RETURN(s.idx_head_dim, c.req_int("index_head_dim"));
    DSV4_ASSIGN_OR_RETURN(s.idx_topk, c.req_int("index_topk"));
  } else {
    DSV4_ASSIGN_OR_RETURN(s.idx_n_head, c.opt_int("index_n_heads", 0));
    DSV4_ASSIGN_OR_RETURN(s.idx_head_dim, c.opt_int("index_head_dim", 0));
    DSV4_ASSIGN_OR_RETURN(s.idx_topk, c.opt_int("index_topk", 0));
  }
  DSV4_ASSIGN_OR_RETURN(s.expert_weights_scale, c.opt_num("routed_scaling_factor", 1.5));
  if (const Json* nt = c.find("norm_topk_prob")) {
    if (!nt->is_boolean()) return c.err("norm_topk_prob", "must be a boolean");
    s.expert_weights_norm = nt->get<bool>();
  }
  DSV4_ASSIGN_OR_RETURN(double limit, c.opt_num("swiglu_limit", 10.0));
  s.swiglu_clamp_exp.assign(static_cast<size_t>(std::max<int64_t>(0, s.n_layer)), limit);
  s.swiglu_clamp_shexp = s.swiglu_clamp_exp;
  DSV4_ASSIGN_OR_RETURN(s.hc_mult, c.opt_int("hc_mult", 4));
  DSV4_ASSIGN_OR_RETURN(s.hc_sinkhorn_iters, c.opt_int("hc_sinkhorn_iters", 20));
  DSV4_ASSIGN_OR_RETURN(s.hc_eps, c.opt_num("hc_eps", 1e-6));
  DSV4_ASSIGN_OR_RETURN(s.rms_eps, c.opt_num("rms_norm_eps", 1e-6));

  std::optional<double> prf;
  DSV4_RETURN_IF_ERROR(read_rope(c, s, prf));
  if (const Json* p = c.find("partial_rotary_factor")) {
    DSV4_ASSIGN_OR_RETURN(double v, c.as_num(*p, "partial_rotary_factor"));
    prf = v;
  }
  std::optional<int64_t> n_rot;
  if (const Json* q = c.find("qk_rope_head_dim")) {
    DSV4_ASSIGN_OR_RETURN(int64_t v, c.as_int(*q, "qk_rope_head_dim"));
    n_rot = v;
  }
  if (prf) {
    const double r = *prf * static_cast<double>(s.head_dim);
    if (!(r > 0) || r != std::floor(r))
      return c.err("partial_rotary_factor", "× head_dim = " + std::to_string(r) + " is not a positive integer");
    if (n_rot && *n_rot != static_cast<int64_t>(r))
      return invalid_argument(name + ": qk_rope_head_dim " + std::to_string(*n_rot) + " disagrees with partial_rotary_factor");
    n_rot = static_cast<int64_t>(r);
  }
  if (!n_rot) return invalid_argument(name + ": required key 'qk_rope_head_dim' / 'partial_rotary_factor' is missing");
  s.n_rot = *n_rot;
  if (Status st = model::validate_shape(s); !st.ok()) return st.with_context(name);
  return s;
}

Result<model::Ds4Shape> load_hf_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return io_error(path + ": read error");
  return shape_from_hf_config(ss.str(), path);
}

}  // namespace dsv4::tools
