// tools/synth.cpp — presets, the plan (manifest + mix) and the streaming writer.
#include "tools/synth.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "backend/cpu/quant.h"
#include "gguf/writer.h"
#include "model/tensor_manifest.h"
#include "tools/vocab.h"
#include "tools/metadata.h"

namespace dsv4::tools {
namespace {

// splitmix64: seeds the per-row stream; xoshiro-like quality is not needed, only determinism and
// decent spread.
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct RowRng {
  uint64_t state;
  RowRng(uint64_t seed, uint64_t tensor, uint64_t row) : state(seed * 0x2545F4914F6CDD1Dull ^ (tensor << 40) ^ row) {
    (void)splitmix64(state);
  }
  double uniform() { return (static_cast<double>(splitmix64(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  // Box-Muller; uses two uniforms per value (simple and exactly reproducible).
  float normal() {
    const double u1 = uniform(), u2 = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
};

// Fills one row of ne[0] values for tensor `t`.
void fill_row(const model::TensorSpec& t, const model::Ds4Shape& s, RowRng& rng, float* out) {
  using R = model::TensorRole;
  const int64_t n = t.ne[0];
  float mean = 0.0f, std = 0.5f;
  switch (t.role) {
    case R::kNorm: mean = 1.0f; std = 0.1f; break;
    case R::kHcSmall:
    case R::kAttnSinks:
    case R::kRouterBias: std = 0.5f; break;
    case R::kEmbedding: std = 1.0f; break;
    case R::kCompressorApe: std = 0.5f; break;
    case R::kHashTable: {  // n = n_expert_used distinct experts for token `row`
      std::vector<int32_t> pick;
      while (static_cast<int64_t>(pick.size()) < n) {
        const auto e = static_cast<int32_t>(rng.uniform() * static_cast<double>(s.n_expert));
        if (std::find(pick.begin(), pick.end(), e) == pick.end()) pick.push_back(e);
      }
      std::memcpy(out, pick.data(), static_cast<size_t>(n) * 4);
      return;
    }
    default: std = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n))); break;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = mean + std * rng.normal();
}

}  // namespace

std::optional<model::Ds4Shape> synth_preset(const std::string& name) {
  if (name == "flash") return model::ds4_flash_shape();
  if (name == "flash-4l") return with_layers(model::ds4_flash_shape(), 4);
  if (name == "tiny") {
    model::Ds4Shape s = model::ds4_flash_shape();
    s.n_layer = 4;
    s.n_ctx_train = 1024;
    s.n_embd = 64;
    s.n_vocab = 97;
    s.n_head = 4;
    s.head_dim = 32;
    s.n_rot = 16;
    s.q_lora_rank = 24;
    s.o_lora_rank = 12;
    s.o_groups = 2;
    s.n_swa = 8;
    s.compress_ratio = {0, 4, 8, 4};
    s.idx_n_head = 8;
    s.idx_head_dim = 32;
    s.idx_topk = 3;
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff_exp = 32;
    s.n_hash_layers = 1;
    s.swiglu_clamp_exp.assign(4, 10.0);
    s.swiglu_clamp_shexp.assign(4, 10.0);
    s.yarn_orig_ctx = 64;
    return s;
  }
  return std::nullopt;
}

model::Ds4Shape with_layers(model::Ds4Shape s, int64_t n) {
  s.compress_ratio.resize(static_cast<size_t>(n));
  for (int64_t il = s.n_layer; il < n; ++il)
    s.compress_ratio[static_cast<size_t>(il)] = il < 2 ? 0 : il % 2 == 0 ? 4 : 128;
  s.swiglu_clamp_exp.resize(static_cast<size_t>(n), 10.0);
  s.swiglu_clamp_shexp.resize(static_cast<size_t>(n), 10.0);
  s.n_layer = n;
  s.n_hash_layers = std::min(s.n_hash_layers, n);
  return s;
}

SynthPlan plan_synth(const model::Ds4Shape& shape, model::QuantMix mix) {
  SynthPlan p;
  p.shape = shape;
  p.mix = mix;
  for (const model::TensorSpec& t : model::ds4_tensor_manifest(shape)) {
    const model::TypeChoice c = model::choose_tensor_type(mix, t);
    const int64_t bytes = tensor_row_bytes(c.type, t.ne[0]) * t.ne[1] * t.ne[2] * t.ne[3];
    p.tensors.push_back({t.name, c.type, t.n_dims, {t.ne[0], t.ne[1], t.ne[2], t.ne[3]}, bytes, c.fell_back});
    p.total_params += t.n_elements();
    p.total_bytes += bytes;
  }
  return p;
}

Status with_tokenizer(SynthPlan& plan, const std::string& tokenizer_json) {
  DSV4_ASSIGN_OR_RETURN(Vocab v, load_vocab(tokenizer_json, "", 0));
  model::Ds4Shape shape = plan.shape;
  shape.n_vocab = static_cast<int64_t>(v.tokens.size());
  SynthPlan p = plan_synth(shape, plan.mix);
  p.expert_row_pool = plan.expert_row_pool;
  p.tokenizer_json = tokenizer_json;
  plan = std::move(p);
  return ok_status();
}

Status write_synth(const SynthPlan& plan, uint64_t seed, const std::string& path, ThreadPool& pool,
                   const std::function<void(const SynthProgress&)>& progress) {
  DSV4_RETURN_IF_ERROR(model::validate_shape(plan.shape));
  const std::vector<model::TensorSpec> specs = model::ds4_tensor_manifest(plan.shape);
  gguf::GgufWriter w(path);
  DSV4_RETURN_IF_ERROR(write_ds4_metadata(w, plan.shape, std::string("dsv4 synthetic (") + model::quant_mix_name(plan.mix) +
                                                           ", seed " + std::to_string(seed) + ")"));
  if (!plan.tokenizer_json.empty()) {
    DSV4_ASSIGN_OR_RETURN(Vocab v, load_vocab(plan.tokenizer_json, "", plan.shape.n_vocab));
    DSV4_RETURN_IF_ERROR(write_vocab_metadata(w, v));
  }
  for (const SynthTensor& t : plan.tensors)
    DSV4_RETURN_IF_ERROR(w.add_tensor(t.name, t.type, std::span<const int64_t>(t.ne, static_cast<size_t>(t.n_dims))));
  DSV4_RETURN_IF_ERROR(w.begin());
  int64_t done = 0;
  using PoolKey = std::tuple<TensorType, int64_t, int, int64_t>;
  std::map<PoolKey, std::vector<uint8_t>> pools;
  constexpr int64_t kChunkBytes = int64_t{32} << 20;
  for (size_t ti = 0; ti < plan.tensors.size(); ++ti) {
    const SynthTensor& t = plan.tensors[ti];
    const model::TensorSpec& spec = specs[ti];
    const int64_t n = t.ne[0], rows = t.ne[1] * t.ne[2] * t.ne[3];
    const int64_t row_bytes = tensor_row_bytes(t.type, n);
    const cpu::TypeKernels* k = cpu::type_kernels(t.type);
    if (t.type != TensorType::kI32 && (k == nullptr || k->quantize_row == nullptr))
      return unsupported("synth: no quantizer for type " + std::string(tensor_type_name(t.type)) + " (tensor " + t.name + ")");
    const int64_t chunk_rows = std::max<int64_t>(1, kChunkBytes / std::max<int64_t>(row_bytes, n * 4));
    const int64_t pool_rows = t.n_dims == 3 && plan.expert_row_pool > 0 ? std::min(plan.expert_row_pool, rows) : 0;
    // One pool per (type, row length, role): every layer's routed gate/up share one, the downs
    // another (quantizing a pool costs ~n·pool_rows/1e6 s of CPU; per tensor that was minutes for
    // the full Flash).
    const std::vector<uint8_t>* row_pool = nullptr;
    if (pool_rows > 0) {
      const PoolKey key{t.type, n, static_cast<int>(spec.role), pool_rows};
      auto it = pools.find(key);
      if (it == pools.end()) {
        std::vector<uint8_t> fresh(static_cast<size_t>(pool_rows * row_bytes));
        const uint64_t pool_id = 0x9000 + pools.size();  // rng stream apart from every tensor index
        pool.parallel_for(pool_rows, [&](int64_t b, int64_t e, int) {
          std::vector<float> row(static_cast<size_t>(n));
          for (int64_t r = b; r < e; ++r) {
            RowRng rng(seed, pool_id, static_cast<uint64_t>(r));
            fill_row(spec, plan.shape, rng, row.data());
            k->quantize_row(row.data(), fresh.data() + r * row_bytes, n, nullptr);
          }
        });
        it = pools.emplace(key, std::move(fresh)).first;
      }
      row_pool = &it->second;
    }
    std::vector<uint8_t> chunk;
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const int64_t nr = std::min(chunk_rows, rows - r0);
      chunk.resize(static_cast<size_t>(nr * row_bytes));
      pool.parallel_for(nr, [&](int64_t b, int64_t e, int) {
        std::vector<float> row(static_cast<size_t>(n));
        for (int64_t r = b; r < e; ++r) {
          RowRng rng(seed, ti, static_cast<uint64_t>(r0 + r));
          uint8_t* dst = chunk.data() + r * row_bytes;
          if (pool_rows > 0) {
            uint64_t h = seed ^ (static_cast<uint64_t>(ti) << 32) ^ static_cast<uint64_t>(r0 + r);
            const uint64_t pick = splitmix64(h) % static_cast<uint64_t>(pool_rows);
            std::memcpy(dst, row_pool->data() + static_cast<int64_t>(pick) * row_bytes, static_cast<size_t>(row_bytes));
          } else if (t.type == TensorType::kI32) {
            fill_row(spec, plan.shape, rng, reinterpret_cast<float*>(dst));  // writes int32 ids
          } else {
            fill_row(spec, plan.shape, rng, row.data());
            k->quantize_row(row.data(), dst, n, nullptr);
          }
        }
      });
      DSV4_RETURN_IF_ERROR(w.write_tensor_chunk(chunk));
      done += nr * row_bytes;
      if (progress) progress({done, plan.total_bytes, ti, plan.tensors.size()});
    }
  }
  return w.finish();
}

}  // namespace dsv4::tools
