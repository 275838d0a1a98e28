// tests/model_forward/q2_wide_forward_test.cpp — the q2 mix inside a whole forward pass at the real
// hidden width (n_embd 4096, head_dim 512, q_lora_rank 1024): routed experts really IQ2_XXS (gate, up)
// and Q2_K (down) on rows of 4096, attention and shared experts Q8_0, as in the published q2 file.
// Two layers (sliding window + hash routing, then CSA with the lightning indexer + biased routing);
// fewer heads, experts and vocabulary than the real model so that it runs in seconds.
//
//   * Q2WideForward.CloseToF32Model: the q2 model's logits stay within a measured bound of the f32
//     model written from the same random weights (quantisation error only; see kBound* below).
//   * Q2WideForward.SameBitsAtLevel/<level>: at every SIMD level, whole-prompt prefill gives the bits
//     of scalar prefill, and of token-by-token decode at that level. Levels this CPU lacks are SKIPPED.
//
// CTest (label model) runs Q2WideModels.Write first (fixture q2_wide: writes both models into
// $DSV4_Q2_WIDE_DIR), then the tests, then Q2WideModels.Remove.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/registry/registry.h"
#include "base/cpu_features.h"
#include "model/model.h"
#include "tools/synth.h"

namespace dsv4::model {
namespace {

constexpr int64_t kPromptTokens = 24;  // 6 CSA compressions at ratio 4: the indexer keeps 4 of them
constexpr int64_t kCtx = 64;

std::string dir() {
  const char* d = std::getenv("DSV4_Q2_WIDE_DIR");
  return d != nullptr && *d != '\0' ? d : ::testing::TempDir() + "/q2_wide";
}
std::string path(const char* mix) { return dir() + "/q2_wide_" + mix + ".gguf"; }

Ds4Shape wide_shape() {
  Ds4Shape s = ds4_flash_shape();  // n_embd 4096, head_dim 512, n_rot 64, q_lora_rank 1024, o_groups 8, hc 4
  s.n_layer = 2;
  s.compress_ratio = {0, 4};  // sliding window only, then CSA (compressor + lightning indexer)
  s.n_hash_layers = 1;        // layer 0 routes by token id, layer 1 by the biased router
  s.swiglu_clamp_exp.assign(2, 10.0);
  s.swiglu_clamp_shexp.assign(2, 10.0);
  s.n_vocab = 2048;
  s.n_head = 8;
  s.o_lora_rank = 256;
  s.idx_n_head = 8;
  s.idx_topk = 4;  // fewer than the 6 compressed entries of the prompt: the top-k selection is exercised
  s.n_expert = 8;
  s.n_expert_used = 6;
  s.n_ff_exp = 256;
  return s;
}

Status write_model(QuantMix mix, const std::string& out) {
  tools::SynthPlan plan = tools::plan_synth(wide_shape(), mix);
  plan.expert_row_pool = 64;  // the IQ2 quantizer runs at ~1 M weights/s; same pool (same floats) for f32
  ThreadPool pool(2);
  return tools::write_synth(plan, 7, out, pool);
}

std::unique_ptr<backend::Backend> cpu_backend(SimdLevel level) {
  backend::BackendOptions o;
  o.kind = backend::BackendKind::kCpu;
  o.threads = 2;
  o.simd = level;
  o.amx = false;
  auto b = backend::create_backend(o);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return b.ok() ? std::move(*b) : nullptr;
}

std::vector<int32_t> prompt(int64_t n_vocab) {
  std::mt19937 rng(3);
  std::vector<int32_t> t(static_cast<size_t>(kPromptTokens));
  for (auto& v : t) v = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
  return t;
}

// Logits of every prompt position [kPromptTokens, n_vocab]: one prefill call, or one token per call.
std::vector<float> logits(const std::string& file, SimdLevel level, bool token_by_token) {
  auto backend = cpu_backend(level);
  if (backend == nullptr) return {};
  auto model = Model::load(file, *backend);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return {};
  const int64_t V = (*model)->shape().n_vocab;
  const std::vector<int32_t> t = prompt(V);
  std::vector<float> out(t.size() * static_cast<size_t>(V));
  Session s(**model, kCtx);
  const size_t step = token_by_token ? 1 : t.size();
  for (size_t i = 0; i < t.size(); i += step) {
    const Status st = s.forward(std::span<const int32_t>(t.data() + i, step), out.data() + i * static_cast<size_t>(V), true);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  return out;
}

TEST(Q2WideModels, Write) {
  std::filesystem::create_directories(dir());
  tools::SynthPlan plan = tools::plan_synth(wide_shape(), QuantMix::kQ2);
  int iq2 = 0, q2k = 0, fallbacks = 0;
  for (const tools::SynthTensor& t : plan.tensors) {
    iq2 += t.type == TensorType::kIQ2_XXS;
    q2k += t.type == TensorType::kQ2_K;
    fallbacks += t.fell_back;
  }
  EXPECT_EQ(iq2, 4);  // gate and up of both layers
  EXPECT_EQ(q2k, 2);  // down of both layers
  EXPECT_EQ(fallbacks, 0) << "every tensor in the type the q2 mix gives the real model";
  const Status a = write_model(QuantMix::kF32, path("f32"));
  ASSERT_TRUE(a.ok()) << a.to_string();
  const Status b = write_model(QuantMix::kQ2, path("q2"));
  ASSERT_TRUE(b.ok()) << b.to_string();
}

TEST(Q2WideModels, Remove) {
  std::filesystem::remove(path("f32"));
  std::filesystem::remove(path("q2"));
  std::error_code ec;
  std::filesystem::remove(dir(), ec);  // only if empty
  EXPECT_FALSE(std::filesystem::exists(path("q2")));
}

// Quantisation error of the q2 mix against the f32 weights it was made from, measured on this model
// (weights seed 7, prompt seed 3; the same on every machine, since the bits are the same at every SIMD
// level and thread count): over all 24 x 2048 logits RMS(q2 - f32) / RMS(f32) = 0.2347, the worst
// position's cosine similarity 0.9579, argmax equal at 16 of 24 positions (2026-12-04, with the
// quantizers of commit cbb0426; before it 0.2424, 0.9575, 13/24). The bounds leave room for such
// legitimate changes yet catch a wrong block decode, scale or expert index, which drive the relative
// error towards 1 (independent logits of equal spread: sqrt(2)).
constexpr double kBoundRelRms = 0.30;
constexpr double kBoundMinCos = 0.93;
constexpr int kBoundTop1 = 8;

TEST(Q2WideForward, CloseToF32Model) {
  const SimdLevel best = detected_simd_level();
  const std::vector<float> ref = logits(path("f32"), best, false);
  const std::vector<float> q2 = logits(path("q2"), best, false);
  ASSERT_FALSE(ref.empty());
  ASSERT_EQ(ref.size(), q2.size());
  const size_t V = ref.size() / static_cast<size_t>(kPromptTokens);
  double err2 = 0, ref2 = 0, min_cos = 1;
  int top1 = 0;
  for (size_t p = 0; p < static_cast<size_t>(kPromptTokens); ++p) {
    double dot = 0, a2 = 0, b2 = 0;
    size_t am = 0, bm = 0;
    for (size_t i = 0; i < V; ++i) {
      const double a = ref[p * V + i], b = q2[p * V + i];
      ASSERT_TRUE(std::isfinite(b)) << "position " << p << " token " << i;
      err2 += (a - b) * (a - b);
      ref2 += a * a;
      dot += a * b;
      a2 += a * a;
      b2 += b * b;
      if (ref[p * V + i] > ref[p * V + am]) am = i;
      if (q2[p * V + i] > q2[p * V + bm]) bm = i;
    }
    min_cos = std::min(min_cos, dot / std::sqrt(a2 * b2));
    top1 += am == bm;
  }
  const double rel_rms = std::sqrt(err2 / ref2);
  std::printf("q2 vs f32 logits: relative RMS error %.4f, worst-position cosine %.4f, argmax agrees at %d/%lld\n",
              rel_rms, min_cos, top1, static_cast<long long>(kPromptTokens));
  EXPECT_LT(rel_rms, kBoundRelRms);
  EXPECT_GT(min_cos, kBoundMinCos);
  EXPECT_GE(top1, kBoundTop1);
}

class Q2WideLevel : public ::testing::TestWithParam<SimdLevel> {};

TEST_P(Q2WideLevel, SameBitsAsScalarAndAsTokenByToken) {
  const SimdLevel level = GetParam();
  if (static_cast<int>(level) > static_cast<int>(detected_simd_level()))
    GTEST_SKIP() << "this CPU lacks SIMD level " << simd_level_name(level) << " (has up to "
                 << simd_level_name(detected_simd_level()) << ")";
  const std::vector<float> prefill = logits(path("q2"), level, false);
  ASSERT_FALSE(prefill.empty());
  const std::vector<float> scalar =
      level == SimdLevel::kScalar ? prefill : logits(path("q2"), SimdLevel::kScalar, false);
  EXPECT_EQ(std::memcmp(prefill.data(), scalar.data(), prefill.size() * sizeof(float)), 0)
      << simd_level_name(level) << " prefill differs from scalar prefill";
  const std::vector<float> stepwise = logits(path("q2"), level, true);
  EXPECT_EQ(std::memcmp(prefill.data(), stepwise.data(), prefill.size() * sizeof(float)), 0)
      << simd_level_name(level) << " prefill differs from token-by-token decode";
}

INSTANTIATE_TEST_SUITE_P(Levels, Q2WideLevel,
                         ::testing::Values(SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512,
                                           SimdLevel::kAvx512Vbmi),
                         [](const ::testing::TestParamInfo<SimdLevel>& i) { return std::string(simd_level_name(i.param)); });

}  // namespace
}  // namespace dsv4::model
