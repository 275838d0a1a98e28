// model/tensor_manifest.cpp — builds the list from the shape (docs/spec/gguf.md §3.1-3.4).
#include "model/tensor_manifest.h"

namespace dsv4::model {

const char* tensor_role_name(TensorRole role) {
  switch (role) {
    case TensorRole::kEmbedding: return "embedding";
    case TensorRole::kOutput: return "output";
    case TensorRole::kNorm: return "norm";
    case TensorRole::kHcFn: return "hc_fn";
    case TensorRole::kHcSmall: return "hc_small";
    case TensorRole::kAttnProj: return "attn_proj";
    case TensorRole::kAttnSinks: return "attn_sinks";
    case TensorRole::kCompressorApe: return "compressor_ape";
    case TensorRole::kCompressorProj: return "compressor_proj";
    case TensorRole::kIndexerQ: return "indexer_q";
    case TensorRole::kIndexerProj: return "indexer_proj";
    case TensorRole::kRouter: return "router";
    case TensorRole::kRouterBias: return "router_bias";
    case TensorRole::kHashTable: return "hash_table";
    case TensorRole::kExpertGateUp: return "expert_gate_up";
    case TensorRole::kExpertDown: return "expert_down";
    case TensorRole::kSharedExpert: return "shared_expert";
  }
  return "?";
}

namespace {

struct Builder {
  std::vector<TensorSpec> out;
  void add(std::string name, TensorRole role, int64_t layer, std::initializer_list<int64_t> ne) {
    TensorSpec t;
    t.name = std::move(name);
    t.role = role;
    t.layer = layer;
    t.n_dims = static_cast<int>(ne.size());
    int i = 0;
    for (int64_t d : ne) t.ne[i++] = d;
    out.push_back(std::move(t));
  }
};

}  // namespace

std::vector<TensorSpec> ds4_tensor_manifest(const Ds4Shape& s) {
  using R = TensorRole;
  Builder b;
  const int64_t D = s.n_embd, hc = s.hc_dim(), mix = s.hc_mix();
  b.add("token_embd.weight", R::kEmbedding, -1, {D, s.n_vocab});
  b.add("output_hc_base.weight", R::kHcSmall, -1, {s.hc_mult});
  b.add("output_hc_fn.weight", R::kHcFn, -1, {hc, s.hc_mult});
  b.add("output_hc_scale.weight", R::kHcSmall, -1, {1});
  b.add("output_norm.weight", R::kNorm, -1, {D});
  b.add("output.weight", R::kOutput, -1, {D, s.n_vocab});
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const AttentionKind kind = s.attention_kind(il);
    b.add(p + "hc_attn_fn.weight", R::kHcFn, il, {hc, mix});
    b.add(p + "hc_attn_scale.weight", R::kHcSmall, il, {3});
    b.add(p + "hc_attn_base.weight", R::kHcSmall, il, {mix});
    b.add(p + "attn_norm.weight", R::kNorm, il, {D});
    b.add(p + "attn_q_a.weight", R::kAttnProj, il, {D, s.q_lora_rank});
    b.add(p + "attn_q_a_norm.weight", R::kNorm, il, {s.q_lora_rank});
    b.add(p + "attn_q_b.weight", R::kAttnProj, il, {s.q_lora_rank, s.q_dim()});
    b.add(p + "attn_kv.weight", R::kAttnProj, il, {D, s.head_dim});
    b.add(p + "attn_kv_a_norm.weight", R::kNorm, il, {s.head_dim});
    b.add(p + "attn_sinks.weight", R::kAttnSinks, il, {s.n_head});
    b.add(p + "attn_output_a.weight", R::kAttnProj, il, {s.wo_a_in(), s.wo_a_out()});
    b.add(p + "attn_output_b.weight", R::kAttnProj, il, {s.wo_a_out(), D});
    if (kind != AttentionKind::kSliding) {
      const int64_t ratio = s.compress_ratio[static_cast<size_t>(il)], width = s.compressor_width(il);
      b.add(p + "attn_compressor_ape.weight", R::kCompressorApe, il, {width, ratio});
      b.add(p + "attn_compressor_kv.weight", R::kCompressorProj, il, {D, width});
      b.add(p + "attn_compressor_gate.weight", R::kCompressorProj, il, {D, width});
      b.add(p + "attn_compressor_norm.weight", R::kNorm, il, {s.head_dim});
    }
    if (kind == AttentionKind::kCsa) {
      const int64_t iw = 2 * s.idx_head_dim;  // the indexer's compressor overlaps too
      b.add(p + "indexer.attn_q_b.weight", R::kIndexerQ, il, {s.q_lora_rank, s.idx_n_head * s.idx_head_dim});
      b.add(p + "indexer.proj.weight", R::kIndexerProj, il, {D, s.idx_n_head});
      b.add(p + "indexer_compressor_ape.weight", R::kCompressorApe, il, {iw, 4});
      b.add(p + "indexer_compressor_kv.weight", R::kCompressorProj, il, {D, iw});
      b.add(p + "indexer_compressor_gate.weight", R::kCompressorProj, il, {D, iw});
      b.add(p + "indexer_compressor_norm.weight", R::kNorm, il, {s.idx_head_dim});
    }
    b.add(p + "hc_ffn_fn.weight", R::kHcFn, il, {hc, mix});
    b.add(p + "hc_ffn_scale.weight", R::kHcSmall, il, {3});
    b.add(p + "hc_ffn_base.weight", R::kHcSmall, il, {mix});
    b.add(p + "ffn_norm.weight", R::kNorm, il, {D});
    b.add(p + "ffn_gate_inp.weight", R::kRouter, il, {D, s.n_expert});
    if (s.is_hash_layer(il)) {
      b.add(p + "ffn_gate_tid2eid.weight", R::kHashTable, il, {s.n_expert_used, s.n_vocab});
    } else {
      b.add(p + "exp_probs_b.bias", R::kRouterBias, il, {s.n_expert});
    }
    b.add(p + "ffn_gate_exps.weight", R::kExpertGateUp, il, {D, s.n_ff_exp, s.n_expert});
    b.add(p + "ffn_up_exps.weight", R::kExpertGateUp, il, {D, s.n_ff_exp, s.n_expert});
    b.add(p + "ffn_down_exps.weight", R::kExpertDown, il, {s.n_ff_exp, D, s.n_expert});
    if (s.n_expert_shared > 0) {
      b.add(p + "ffn_gate_shexp.weight", R::kSharedExpert, il, {D, s.n_ff_exp});
      b.add(p + "ffn_up_shexp.weight", R::kSharedExpert, il, {D, s.n_ff_exp});
      b.add(p + "ffn_down_shexp.weight", R::kSharedExpert, il, {s.n_ff_exp, D});
    }
  }
  return std::move(b.out);
}

}  // namespace dsv4::model
