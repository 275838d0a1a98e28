// tools/hf_tensors.cpp — the name table, source/shape checks and the row decoders.
#include "tools/hf_tensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "numerics/half.h"

namespace dsv4::tools {
namespace {

// GGUF suffix -> candidate source suffixes (official first, then the transformers names). Per-layer
// entries are relative to "layers.N."; every candidate is also tried with a "model." prefix and,
// when it has no ".weight", with one.
struct NameRule {
  const char* gguf;
  std::vector<const char*> sources;
};

const std::vector<NameRule>& global_rules() {
  static const std::vector<NameRule> r = {
      {"token_embd.weight", {"embed.weight", "embed_tokens.weight"}},
      {"output_norm.weight", {"norm.weight"}},
      {"output.weight", {"head.weight", "lm_head.weight"}},
      {"output_hc_fn.weight", {"hc_head_fn", "hc_head.hc_fn", "hc_head.fn"}},
      {"output_hc_base.weight", {"hc_head_base", "hc_head.hc_base", "hc_head.base"}},
      {"output_hc_scale.weight", {"hc_head_scale", "hc_head.hc_scale", "hc_head.scale"}},
  };
  return r;
}

const std::vector<NameRule>& layer_rules() {
  static const std::vector<NameRule> r = {
      {"hc_attn_fn.weight", {"hc_attn_fn", "attn_hc.fn"}},
      {"hc_attn_scale.weight", {"hc_attn_scale", "attn_hc.scale"}},
      {"hc_attn_base.weight", {"hc_attn_base", "attn_hc.base"}},
      {"attn_norm.weight", {"attn_norm.weight", "input_layernorm.weight"}},
      {"attn_q_a.weight", {"attn.wq_a.weight", "self_attn.q_a_proj.weight"}},
      {"attn_q_a_norm.weight", {"attn.q_norm.weight", "self_attn.q_a_norm.weight"}},
      {"attn_q_b.weight", {"attn.wq_b.weight", "self_attn.q_b_proj.weight"}},
      {"attn_kv.weight", {"attn.wkv.weight", "self_attn.kv_proj.weight"}},
      {"attn_kv_a_norm.weight", {"attn.kv_norm.weight", "attn.norm.weight", "self_attn.kv_norm.weight"}},
      {"attn_sinks.weight", {"attn.attn_sink", "self_attn.sinks"}},
      {"attn_output_a.weight", {"attn.wo_a.weight", "self_attn.o_a_proj.weight"}},
      {"attn_output_b.weight", {"attn.wo_b.weight", "self_attn.o_b_proj.weight"}},
      {"attn_compressor_ape.weight", {"attn.compressor.ape", "self_attn.compressor.position_bias"}},
      {"attn_compressor_kv.weight", {"attn.compressor.wkv.weight", "self_attn.compressor.kv_proj.weight"}},
      {"attn_compressor_gate.weight", {"attn.compressor.wgate.weight", "self_attn.compressor.gate_proj.weight"}},
      {"attn_compressor_norm.weight", {"attn.compressor.norm.weight", "self_attn.compressor.kv_norm.weight"}},
      {"indexer.attn_q_b.weight", {"attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight"}},
      {"indexer.proj.weight",
       {"attn.indexer.weights_proj.weight", "self_attn.compressor.indexer.scorer.weights_proj.weight",
        "self_attn.compressor.indexer.weights_proj.weight"}},
      {"indexer_compressor_ape.weight",
       {"attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"}},
      {"indexer_compressor_kv.weight",
       {"attn.indexer.compressor.wkv.weight", "self_attn.compressor.indexer.kv_proj.weight"}},
      {"indexer_compressor_gate.weight",
       {"attn.indexer.compressor.wgate.weight", "self_attn.compressor.indexer.gate_proj.weight"}},
      {"indexer_compressor_norm.weight",
       {"attn.indexer.compressor.norm.weight", "self_attn.compressor.indexer.kv_norm.weight"}},
      {"hc_ffn_fn.weight", {"hc_ffn_fn", "ffn_hc.fn"}},
      {"hc_ffn_scale.weight", {"hc_ffn_scale", "ffn_hc.scale"}},
      {"hc_ffn_base.weight", {"hc_ffn_base", "ffn_hc.base"}},
      {"ffn_norm.weight", {"ffn_norm.weight", "post_attention_layernorm.weight"}},
      {"ffn_gate_inp.weight", {"ffn.gate.weight", "mlp.gate.weight"}},
      {"ffn_gate_tid2eid.weight", {"ffn.gate.tid2eid", "mlp.gate.tid2eid"}},
      {"exp_probs_b.bias", {"ffn.gate.bias", "mlp.gate.e_score_correction_bias", "mlp.gate.bias"}},
      {"ffn_gate_shexp.weight", {"ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"}},
      {"ffn_up_shexp.weight", {"ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"}},
      {"ffn_down_shexp.weight", {"ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"}},
  };
  return r;
}

// Routed experts: per-expert names (official w1/w3/w2, older HF gate/up/down_proj) or one stacked
// tensor (HF gate_up_proj = cat(w1, w3) on the output dim, down_proj).
struct ExpertRule {
  const char* gguf;
  const char* official;   // "ffn.experts.{e}.<x>.weight"
  const char* hf_single;  // "mlp.experts.{e}.<x>.weight"
  const char* stacked;    // "mlp.experts.<x>"
  int stack_mult;         // stacked rows = mult * ne[1]
  int stack_index;        // which ne[1]-row slice of the stacked matrix
};
constexpr ExpertRule kExpertRules[] = {
    {"ffn_gate_exps.weight", "w1", "gate_proj", "gate_up_proj", 2, 0},
    {"ffn_up_exps.weight", "w3", "up_proj", "gate_up_proj", 2, 1},
    {"ffn_down_exps.weight", "w2", "down_proj", "down_proj", 1, 0},
};

struct Tables {
  float e4m3[256];
  float e8m0[256];
  Tables() {
    for (int b = 0; b < 256; ++b) {
      const int sign = b >> 7, e = (b >> 3) & 15, m = b & 7;
      float v;
      if ((b & 0x7f) == 0x7f) v = std::numeric_limits<float>::quiet_NaN();
      else if (e == 0) v = std::ldexp(static_cast<float>(m), -9);
      else v = std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
      e4m3[b] = sign ? -v : v;
      e8m0[b] = b == 255 ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(1.0f, b - 127);
    }
  }
};
const Tables& tables() {
  static const Tables t;
  return t;
}
constexpr float kE2M1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

class Mapper {
 public:
  explicit Mapper(const SafetensorsSet& st) : st_(st) {}

  // First present of the candidates (each also with "model." and an added ".weight").
  const StTensor* find_any(const std::vector<std::string>& cands) const {
    for (const std::string& c : cands) {
      for (const std::string& n : {c, "model." + c}) {
        if (const StTensor* t = st_.find(n)) return t;
        if (c.size() < 7 || c.compare(c.size() - 7, 7, ".weight") != 0)
          if (const StTensor* t = st_.find(n + ".weight")) return t;
      }
    }
    return nullptr;
  }

  const StTensor* find_scale(const StTensor& t) const {
    std::vector<std::string> c;
    const std::string& n = t.name;
    if (n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0) c.push_back(n.substr(0, n.size() - 7) + ".scale");
    c.push_back(n + ".scale");
    c.push_back(n + "_scale_inv");
    c.push_back(n + ".weight_scale_inv");
    for (const std::string& x : c)
      if (const StTensor* s = st_.find(x)) return s;
    return nullptr;
  }

  // Classifies the encoding, checks the scale and returns the logical shape.
  Status describe(const StTensor& t, SourcePart& p, std::vector<int64_t>& logical) {
    logical = t.shape;
    p.tensor = &t;
    const std::string where = *t.file + ": tensor '" + t.name + "'";
    switch (t.dtype) {
      case StDtype::kF32:
      case StDtype::kF16:
      case StDtype::kBF16: p.encoding = SourceEncoding::kPlain; return ok_status();
      case StDtype::kI32:
      case StDtype::kI64: p.encoding = SourceEncoding::kIndex; return ok_status();
      case StDtype::kF8_E8M0: return unsupported(where + ": F8_E8M0 is a scale dtype, not a weight dtype");
      case StDtype::kF8_E4M3:
      case StDtype::kI8:
      case StDtype::kU8: break;
    }
    const StTensor* sc = find_scale(t);
    if (sc == nullptr)
      return not_found(where + ": " + st_dtype_name(t.dtype) + " weights need a scale tensor ('" + t.name +
                       "' without .weight + '.scale', or '_scale_inv'), none found");
    consumed_.insert(sc);
    p.scale = sc;
    const std::string swhere = *sc->file + ": scale '" + sc->name + "' of '" + t.name + "'";
    if (t.shape.size() < 2 || t.shape.size() > 3) return corrupt(where + ": expected 2 or 3 dims, got " + t.shape_string());
    if (sc->shape.size() != t.shape.size())
      return corrupt(swhere + ": shape " + sc->shape_string() + " does not match weight " + t.shape_string());
    const size_t nd = t.shape.size();
    const int64_t m = t.shape[nd - 2];
    std::vector<int64_t> want(t.shape.begin(), t.shape.end());
    if (t.dtype == StDtype::kF8_E4M3) {
      p.encoding = SourceEncoding::kFp8Block;
      if (sc->dtype != StDtype::kF8_E8M0 && sc->dtype != StDtype::kU8 && sc->dtype != StDtype::kF32 &&
          sc->dtype != StDtype::kBF16)
        return unsupported(swhere + ": dtype " + st_dtype_name(sc->dtype) + " (want F8_E8M0, F32 or BF16)");
      const int64_t b = p.fp8_block;
      want[nd - 2] = (m + b - 1) / b;
      want[nd - 1] = (t.shape[nd - 1] + b - 1) / b;
    } else {
      p.encoding = SourceEncoding::kFp4;
      if (sc->dtype != StDtype::kF8_E8M0 && sc->dtype != StDtype::kU8)
        return unsupported(swhere + ": dtype " + st_dtype_name(sc->dtype) + " (FP4 group scales are F8_E8M0)");
      logical[nd - 1] = 2 * t.shape[nd - 1];
      if (logical[nd - 1] % 32 != 0)
        return corrupt(where + ": FP4 row of " + std::to_string(logical[nd - 1]) + " values is not a multiple of 32");
      want[nd - 1] = logical[nd - 1] / 32;
    }
    if (sc->shape != want)
      return corrupt(swhere + ": shape " + sc->shape_string() + ", expected " + shape_str(want) + " for weight " +
                     t.shape_string());
    return ok_status();
  }

  void add_error(const std::string& e) { errors_.push_back(e); }

  // One source matrix (or vector) for a 1-D or 2-D manifest tensor.
  void map_plain(TensorSource& ts, const std::vector<std::string>& cands) {
    const model::TensorSpec& spec = ts.spec;
    const StTensor* t = find_any(cands);
    if (t == nullptr) {
      missing_.push_back(spec.name + " (from " + cands.front() + ")");
      return;
    }
    consumed_.insert(t);
    SourcePart p;
    std::vector<int64_t> logical;
    if (Status s = describe(*t, p, logical); !s.ok()) return add_error(s.message());
    std::vector<int64_t> want;
    for (int d = spec.n_dims - 1; d >= 0; --d) want.push_back(spec.ne[d]);
    if (logical != want)
      return add_error(*t->file + ": tensor '" + t->name + "' has shape " + shape_str(logical) + ", expected " +
                       shape_str(want) + " for " + spec.name);
    const bool is_index = spec.role == model::TensorRole::kHashTable;
    if (is_index != (p.encoding == SourceEncoding::kIndex))
      return add_error(*t->file + ": tensor '" + t->name + "' has dtype " + st_dtype_name(t->dtype) + ", expected " +
                       (is_index ? "I64 or I32" : "a float dtype") + " for " + spec.name);
    p.cols = spec.ne[0];
    p.matrix_rows = spec.n_dims == 1 ? 1 : spec.ne[1];
    p.rows = p.matrix_rows;
    ts.source_bytes = t->n_bytes + (p.scale ? p.scale->n_bytes : 0);
    ts.parts.push_back(p);
  }

  void map_experts(TensorSource& ts, const ExpertRule& rule, const std::string& lp) {
    const model::TensorSpec& spec = ts.spec;
    const int64_t in = spec.ne[0], out = spec.ne[1], n_exp = spec.ne[2];
    const std::string stacked = lp + "mlp.experts." + rule.stacked;
    if (const StTensor* t = find_any({stacked})) {
      consumed_.insert(t);
      SourcePart p;
      std::vector<int64_t> logical;
      if (Status s = describe(*t, p, logical); !s.ok()) return add_error(s.message());
      const std::vector<int64_t> want = {n_exp, rule.stack_mult * out, in};
      if (logical != want || p.encoding == SourceEncoding::kIndex)
        return add_error(*t->file + ": tensor '" + t->name + "' (" + st_dtype_name(t->dtype) + ") has shape " +
                         shape_str(logical) + ", expected float " + shape_str(want) + " for " + spec.name);
      p.cols = in;
      p.matrix_rows = rule.stack_mult * out;
      p.row_begin = rule.stack_index * out;
      p.rows = out;
      for (int64_t e = 0; e < n_exp; ++e) {
        p.expert = e;
        ts.parts.push_back(p);
      }
      ts.source_bytes = (t->n_bytes + (p.scale ? p.scale->n_bytes : 0)) / static_cast<uint64_t>(rule.stack_mult);
      return;
    }
    for (int64_t e = 0; e < n_exp; ++e) {
      const std::string es = std::to_string(e);
      const std::vector<std::string> cands = {lp + "ffn.experts." + es + "." + rule.official + ".weight",
                                              lp + "mlp.experts." + es + "." + rule.hf_single + ".weight"};
      const StTensor* t = find_any(cands);
      if (t == nullptr) {
        missing_.push_back(spec.name + " expert " + es + " (from " + cands.front() + " or " + stacked + ")");
        continue;
      }
      consumed_.insert(t);
      SourcePart p;
      std::vector<int64_t> logical;
      if (Status s = describe(*t, p, logical); !s.ok()) {
        add_error(s.message());
        continue;
      }
      const std::vector<int64_t> want = {out, in};
      if (logical != want || p.encoding == SourceEncoding::kIndex) {
        add_error(*t->file + ": tensor '" + t->name + "' (" + st_dtype_name(t->dtype) + ") has shape " +
                  shape_str(logical) + ", expected float " + shape_str(want) + " for " + spec.name);
        continue;
      }
      p.cols = in;
      p.matrix_rows = out;
      p.rows = out;
      ts.parts.push_back(p);
      ts.source_bytes += t->n_bytes + (p.scale ? p.scale->n_bytes : 0);
    }
  }

  Result<SourceMap> run(const std::vector<model::TensorSpec>& manifest) {
    SourceMap m;
    for (const model::TensorSpec& spec : manifest) {
      TensorSource ts;
      ts.spec = spec;
      std::string lp, suffix = spec.name;
      if (spec.layer >= 0) {
        const std::string bp = "blk." + std::to_string(spec.layer) + ".";
        lp = "layers." + std::to_string(spec.layer) + ".";
        suffix = spec.name.substr(bp.size());
      }
      bool done = false;
      if (spec.n_dims == 3) {
        for (const ExpertRule& r : kExpertRules)
          if (suffix == r.gguf) {
            map_experts(ts, r, lp);
            done = true;
          }
      } else {
        for (const NameRule& r : spec.layer >= 0 ? layer_rules() : global_rules())
          if (suffix == r.gguf) {
            std::vector<std::string> cands;
            for (const char* c : r.sources) cands.push_back(lp + c);
            map_plain(ts, cands);
            done = true;
          }
      }
      if (!done) add_error("no source rule for manifest tensor " + spec.name + " (dsv4 bug)");
      m.tensors.push_back(std::move(ts));
    }
    std::vector<std::string> unknown;
    for (const StTensor* t : st_.all()) {
      if (consumed_.count(t)) continue;
      const std::string& n = t->name;
      if (n.rfind("mtp.", 0) == 0 || n.rfind("model.mtp.", 0) == 0 || n.find("inv_freq") != std::string::npos)
        m.ignored.push_back(n);
      else
        unknown.push_back(n);
    }
    if (!missing_.empty() || !errors_.empty() || !unknown.empty()) {
      std::string msg;
      auto list = [&](const char* what, const std::vector<std::string>& v) {
        if (v.empty()) return;
        msg += (msg.empty() ? "" : "; ") + std::to_string(v.size()) + " " + what + ": ";
        for (size_t i = 0; i < v.size() && i < 12; ++i) msg += (i ? ", " : "") + v[i];
        if (v.size() > 12) msg += ", ...";
      };
      list("missing tensor(s)", missing_);
      list("bad tensor(s)", errors_);
      list("unknown source tensor(s)", unknown);
      if (errors_.empty() && missing_.empty()) return invalid_argument("checkpoint: " + msg);
      return errors_.empty() ? not_found("checkpoint: " + msg) : corrupt("checkpoint: " + msg);
    }
    return m;
  }

 private:
  const SafetensorsSet& st_;
  std::set<const StTensor*> consumed_;
  std::vector<std::string> missing_, errors_;
};

inline float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

float scale_value(const StTensor& s, int64_t idx) {
  switch (s.dtype) {
    case StDtype::kF32: return load_f32(s.data + 4 * idx);
    case StDtype::kBF16: return bf16_to_f32(load_u16(s.data + 2 * idx));
    default: return tables().e8m0[s.data[idx]];
  }
}

}  // namespace

float fp8_e4m3_to_f32(uint8_t b) { return tables().e4m3[b]; }
float e8m0_to_f32(uint8_t e) { return tables().e8m0[e]; }
float fp4_e2m1_to_f32(uint8_t nibble) { return kE2M1[nibble & 15]; }

Result<SourceMap> map_sources(const SafetensorsSet& st, const model::Ds4Shape& shape,
                              const std::vector<model::TensorSpec>& manifest) {
  (void)shape;  // the manifest already carries every size
  Mapper m(st);
  return m.run(manifest);
}

void decode_rows_f32(const SourcePart& p, int64_t r0, int64_t nr, float* out) {
  const StTensor& t = *p.tensor;
  const int64_t mat = p.expert < 0 ? 0 : p.expert;
  const int64_t C = p.cols;
  const Tables& tb = tables();
  for (int64_t i = 0; i < nr; ++i) {
    const int64_t sr = p.row_begin + r0 + i;  // row inside the source matrix
    const int64_t flat = mat * p.matrix_rows + sr;
    float* o = out + i * C;
    switch (p.encoding) {
      case SourceEncoding::kPlain: {
        const int64_t base = flat * C;
        if (t.dtype == StDtype::kF32) {
          std::memcpy(o, t.data + 4 * base, static_cast<size_t>(C) * 4);
        } else if (t.dtype == StDtype::kF16) {
          for (int64_t c = 0; c < C; ++c) o[c] = f16_to_f32(load_u16(t.data + 2 * (base + c)));
        } else {
          for (int64_t c = 0; c < C; ++c) o[c] = bf16_to_f32(load_u16(t.data + 2 * (base + c)));
        }
        break;
      }
      case SourceEncoding::kFp8Block: {
        const int64_t B = p.fp8_block;
        const int64_t sr_n = (p.matrix_rows + B - 1) / B, sc_n = (C + B - 1) / B;
        const uint8_t* src = t.data + flat * C;
        const int64_t srow = (mat * sr_n + sr / B) * sc_n;
        for (int64_t c0 = 0; c0 < C; c0 += B) {
          const float s = scale_value(*p.scale, srow + c0 / B);
          const int64_t c1 = std::min(C, c0 + B);
          for (int64_t c = c0; c < c1; ++c) o[c] = tb.e4m3[src[c]] * s;
        }
        break;
      }
      case SourceEncoding::kFp4: {
        const uint8_t* src = t.data + flat * (C / 2);
        const uint8_t* sc = p.scale->data + flat * (C / 32);
        for (int64_t g = 0; g < C / 32; ++g) {
          const float s = tb.e8m0[sc[g]];
          for (int64_t k = 0; k < 16; ++k) {
            const uint8_t b = src[g * 16 + k];
            o[g * 32 + 2 * k] = kE2M1[b & 15] * s;
            o[g * 32 + 2 * k + 1] = kE2M1[b >> 4] * s;
          }
        }
        break;
      }
      case SourceEncoding::kIndex:
        std::fill(o, o + C, 0.0f);
        break;
    }
  }
}

Status decode_rows_i32(const SourcePart& p, int64_t r0, int64_t nr, int64_t n_expert, int32_t* out) {
  const StTensor& t = *p.tensor;
  const int64_t C = p.cols;
  for (int64_t i = 0; i < nr; ++i) {
    const int64_t sr = p.row_begin + r0 + i;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t idx = sr * C + c;
      int64_t v;
      if (t.dtype == StDtype::kI64) {
        std::memcpy(&v, t.data + 8 * idx, 8);
      } else {
        int32_t w;
        std::memcpy(&w, t.data + 4 * idx, 4);
        v = w;
      }
      if (v < 0 || v >= n_expert)
        return out_of_range(*t.file + ": tensor '" + t.name + "' [" + std::to_string(sr) + ", " + std::to_string(c) +
                            "] = " + std::to_string(v) + " is not an expert id in [0, " + std::to_string(n_expert) + ")");
      out[i * C + c] = static_cast<int32_t>(v);
    }
  }
  return ok_status();
}

}  // namespace dsv4::tools
