// model/weights.cpp — manifest-driven binding and validation.
#include "model/weights.h"

#include <functional>
#include <map>

#include "gguf/reader.h"
#include "model/tensor_manifest.h"

namespace dsv4::model {
namespace {

// The GGUF suffix after "blk.N." → where it goes in LayerWeights (a view or a small f32 copy).
struct Slot {
  Weight LayerWeights::*view = nullptr;
  Weight LayerWeights::*small = nullptr;
};

const std::map<std::string, Slot>& layer_slots() {
  static const std::map<std::string, Slot> m = {
      {"hc_attn_fn.weight", {&LayerWeights::hc_attn_fn, nullptr}},
      {"hc_attn_scale.weight", {nullptr, &LayerWeights::hc_attn_scale}},
      {"hc_attn_base.weight", {nullptr, &LayerWeights::hc_attn_base}},
      {"attn_norm.weight", {nullptr, &LayerWeights::attn_norm}},
      {"attn_q_a.weight", {&LayerWeights::q_a, nullptr}},
      {"attn_q_a_norm.weight", {nullptr, &LayerWeights::q_a_norm}},
      {"attn_q_b.weight", {&LayerWeights::q_b, nullptr}},
      {"attn_kv.weight", {&LayerWeights::kv, nullptr}},
      {"attn_kv_a_norm.weight", {nullptr, &LayerWeights::kv_norm}},
      {"attn_sinks.weight", {nullptr, &LayerWeights::sinks}},
      {"attn_output_a.weight", {&LayerWeights::out_a, nullptr}},
      {"attn_output_b.weight", {&LayerWeights::out_b, nullptr}},
      {"attn_compressor_ape.weight", {nullptr, &LayerWeights::comp_ape}},
      {"attn_compressor_kv.weight", {&LayerWeights::comp_kv, nullptr}},
      {"attn_compressor_gate.weight", {&LayerWeights::comp_gate, nullptr}},
      {"attn_compressor_norm.weight", {nullptr, &LayerWeights::comp_norm}},
      {"indexer.attn_q_b.weight", {&LayerWeights::idx_q_b, nullptr}},
      {"indexer.proj.weight", {&LayerWeights::idx_proj, nullptr}},
      {"indexer_compressor_ape.weight", {nullptr, &LayerWeights::idx_ape}},
      {"indexer_compressor_kv.weight", {&LayerWeights::idx_kv, nullptr}},
      {"indexer_compressor_gate.weight", {&LayerWeights::idx_gate, nullptr}},
      {"indexer_compressor_norm.weight", {nullptr, &LayerWeights::idx_norm}},
      {"hc_ffn_fn.weight", {&LayerWeights::hc_ffn_fn, nullptr}},
      {"hc_ffn_scale.weight", {nullptr, &LayerWeights::hc_ffn_scale}},
      {"hc_ffn_base.weight", {nullptr, &LayerWeights::hc_ffn_base}},
      {"ffn_norm.weight", {nullptr, &LayerWeights::ffn_norm}},
      {"ffn_gate_inp.weight", {&LayerWeights::router, nullptr}},
      {"exp_probs_b.bias", {nullptr, &LayerWeights::router_bias}},
      {"ffn_gate_tid2eid.weight", {&LayerWeights::tid2eid, nullptr}},
      {"ffn_gate_exps.weight", {&LayerWeights::gate_exps, nullptr}},
      {"ffn_up_exps.weight", {&LayerWeights::up_exps, nullptr}},
      {"ffn_down_exps.weight", {&LayerWeights::down_exps, nullptr}},
      {"ffn_gate_shexp.weight", {&LayerWeights::gate_sh, nullptr}},
      {"ffn_up_shexp.weight", {&LayerWeights::up_sh, nullptr}},
      {"ffn_down_shexp.weight", {&LayerWeights::down_sh, nullptr}},
  };
  return m;
}

// The host view of a manifest tensor, checked against the manifest's shape and what `backend` can
// compute with: large weights need its matmul (or embedding) kernels, small ones its dequantizer.
Result<Weight> view_of(const gguf::GgufFile& f, const TensorSpec& spec, const backend::Backend& backend, bool small) {
  const gguf::TensorInfo* t = f.find_tensor(spec.name);
  if (t == nullptr) return not_found(f.name() + ": missing tensor '" + spec.name + "'");
  for (int d = 0; d < 4; ++d) {
    if (t->ne[d] != spec.ne[d]) {
      std::string want, got;
      for (int i = 0; i < spec.n_dims; ++i) {
        if (i) want += ',';
        want += std::to_string(spec.ne[i]);
      }
      for (uint32_t i = 0; i < t->n_dims; ++i) {
        if (i) got += ',';
        got += std::to_string(t->ne[i]);
      }
      return invalid_argument(f.name() + ": tensor '" + spec.name + "' has shape [" + got + "], expected [" + want + "]");
    }
  }
  const bool is_table = spec.role == TensorRole::kHashTable;
  const backend::Op use = small || spec.name == "token_embd.weight" ? backend::Op::kEmbed : backend::Op::kMatmul;
  if (is_table ? t->type != TensorType::kI32 : t->type == TensorType::kI32 || !backend.supports(use, t->type))
    return unsupported(f.name() + ": tensor '" + spec.name + "' has type " + std::string(tensor_type_name(t->type)) +
                       (is_table ? ", expected i32" : ", which dsv4 cannot compute with"));
  return backend::make_nd(t->type, const_cast<uint8_t*>(t->data), static_cast<int>(t->n_dims), t->ne);
}

// Hash routing reads table[token][k] on the backend without checks: every entry must name an expert.
Status check_hash_table(const std::string& name, const Weight& table, int64_t n_expert) {
  const int32_t* v = static_cast<const int32_t*>(table.data);
  const int64_t n = table.ne[0] * table.ne[1];
  for (int64_t i = 0; i < n; ++i)
    if (v[i] < 0 || v[i] >= n_expert)
      return corrupt(name + ": entry " + std::to_string(i) + " (token " + std::to_string(i / table.ne[0]) +
                     ") names expert " + std::to_string(v[i]) + ", outside [0, " + std::to_string(n_expert) + ")");
  return ok_status();
}

}  // namespace

Result<ModelWeights> bind_weights(const gguf::GgufFile& f, const Ds4Shape& shape, backend::Backend& backend,
                                  std::vector<backend::Buffer>& storage) {
  ModelWeights mw;
  mw.layers.resize(static_cast<size_t>(shape.n_layer));
  for (const TensorSpec& spec : ds4_tensor_manifest(shape)) {
    const std::string prefix = "blk." + std::to_string(spec.layer) + ".";
    const auto it = spec.layer < 0 ? layer_slots().end() : layer_slots().find(spec.name.substr(prefix.size()));
    const bool small = spec.role == TensorRole::kNorm || spec.role == TensorRole::kHcSmall ||
                       spec.role == TensorRole::kAttnSinks || spec.role == TensorRole::kCompressorApe ||
                       spec.role == TensorRole::kRouterBias;
    DSV4_ASSIGN_OR_RETURN(Weight host, view_of(f, spec, backend, small));
    if (spec.role == TensorRole::kHashTable) DSV4_RETURN_IF_ERROR(check_hash_table(f.name() + ": " + spec.name, host, shape.n_expert));
    auto load = [&](Weight& dst) -> Status {
      auto w = small ? backend.load_weight_f32(host, storage) : backend.load_weight(host, storage);
      if (!w.ok()) return w.status().with_context(spec.name);
      dst = *w;
      return ok_status();
    };
    if (spec.layer < 0) {
      Weight* dst = spec.name == "token_embd.weight"        ? &mw.tok_embd
                    : spec.name == "output.weight"          ? &mw.output
                    : spec.name == "output_hc_fn.weight"    ? &mw.out_hc_fn
                    : spec.name == "output_hc_base.weight"  ? &mw.out_hc_base
                    : spec.name == "output_hc_scale.weight" ? &mw.out_hc_scale
                    : spec.name == "output_norm.weight"     ? &mw.out_norm
                                                            : nullptr;
      if (dst == nullptr) return internal_error("no binding for manifest tensor '" + spec.name + "'");
      DSV4_RETURN_IF_ERROR(load(*dst));
      continue;
    }
    if (it == layer_slots().end()) return internal_error("no binding for manifest tensor '" + spec.name + "'");
    LayerWeights& lw = mw.layers[static_cast<size_t>(spec.layer)];
    DSV4_RETURN_IF_ERROR(load(lw.*(it->second.view != nullptr ? it->second.view : it->second.small)));
  }
  return mw;
}

}  // namespace dsv4::model
