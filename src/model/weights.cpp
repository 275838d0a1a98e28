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
  std::vector<float> LayerWeights::*small = nullptr;
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

Result<Weight> view_of(const gguf::GgufFile& f, const TensorSpec& spec) {
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
  if (is_table ? t->type != TensorType::kI32 : !tensor_type_info(t->type).has_kernels || t->type == TensorType::kI32)
    return unsupported(f.name() + ": tensor '" + spec.name + "' has type " + std::string(tensor_type_name(t->type)) +
                       (is_table ? ", expected i32" : ", which dsv4 cannot compute with"));
  Weight w;
  w.type = t->type;
  w.n_dims = static_cast<int>(t->n_dims);
  for (int d = 0; d < 4; ++d) w.ne[d] = t->ne[d];
  w.data = t->data;
  return w;
}

}  // namespace

Result<ModelWeights> bind_weights(const gguf::GgufFile& f, const Ds4Shape& shape, backend::Ops& ops) {
  ModelWeights mw;
  mw.layers.resize(static_cast<size_t>(shape.n_layer));
  auto small = [&](const Weight& w, std::vector<float>& out) -> Status {
    out.resize(static_cast<size_t>(w.ne[0] * w.ne[1] * w.ne[2] * w.ne[3]));
    return ops.dequantize(w, out.data());
  };
  for (const TensorSpec& spec : ds4_tensor_manifest(shape)) {
    DSV4_ASSIGN_OR_RETURN(Weight w, view_of(f, spec));
    if (spec.layer < 0) {
      if (spec.name == "token_embd.weight") mw.tok_embd = w;
      else if (spec.name == "output.weight") mw.output = w;
      else if (spec.name == "output_hc_fn.weight") mw.out_hc_fn = w;
      else if (spec.name == "output_hc_base.weight") DSV4_RETURN_IF_ERROR(small(w, mw.out_hc_base));
      else if (spec.name == "output_hc_scale.weight") DSV4_RETURN_IF_ERROR(small(w, mw.out_hc_scale));
      else if (spec.name == "output_norm.weight") DSV4_RETURN_IF_ERROR(small(w, mw.out_norm));
      continue;
    }
    const std::string prefix = "blk." + std::to_string(spec.layer) + ".";
    const std::string suffix = spec.name.substr(prefix.size());
    auto it = layer_slots().find(suffix);
    if (it == layer_slots().end()) return internal_error("no binding for manifest tensor '" + spec.name + "'");
    LayerWeights& lw = mw.layers[static_cast<size_t>(spec.layer)];
    if (it->second.view != nullptr) {
      lw.*(it->second.view) = w;
    } else {
      DSV4_RETURN_IF_ERROR(small(w, lw.*(it->second.small)).with_context(spec.name));
    }
  }
  return mw;
}

}  // namespace dsv4::model
