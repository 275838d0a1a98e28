// tests/unit/model/cuda_model_test.cpp — the whole DS4 forward pass on the CUDA backend gives the CPU
// backend's bits: logits of every position compared with memcmp on tiny synthetic models (f32,
// q8_0, and a q2 mix whose experts really are IQ2_XXS / Q2_K), for a whole-prompt prefill, token by
// token, chunk sizes around the 128-token boundaries and larger than the CPU's default step, three
// runs back to back, two sessions interleaved on one backend, and after reset. Also: a decode step
// on CUDA makes exactly one host synchronisation.
//
// Without CUDA in the build or without a usable device every test is SKIPPED with the reason
// (ctest -L cuda shows it as skipped, never passed). DSV4_CUDA_TEST_TOKENS=<n> shortens the prompt
// (scripts/test-cuda.sh uses it for the compute-sanitizer runs).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/registry/registry.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "tools/synth.h"

namespace dsv4::model {
namespace {

// The marker ctest's SKIP_REGULAR_EXPRESSION matches (tests/CMakeLists.txt).
constexpr const char* kSkip = "SKIPPED (no CUDA): ";

int64_t prompt_tokens() {
  const char* e = std::getenv("DSV4_CUDA_TEST_TOKENS");
  const long v = e != nullptr ? std::atol(e) : 0;
  return v > 0 ? v : 2100;
}

// Why the CUDA backend cannot be created here, or "" when it can.
std::string cuda_unavailable() {
  const std::vector<backend::BackendKind> built = backend::built_backends();
  if (std::find(built.begin(), built.end(), backend::BackendKind::kCuda) == built.end())
    return "this build has no CUDA backend (configure with -DDSV4_CUDA=ON)";
  backend::BackendOptions o;
  o.kind = backend::BackendKind::kCuda;
  auto b = backend::create_backend(o);
  return b.ok() ? "" : b.status().message();
}

std::unique_ptr<backend::Backend> make_backend(backend::BackendKind kind) {
  backend::BackendOptions o;
  o.kind = kind;
  o.threads = 2;
  auto b = backend::create_backend(o);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return b.ok() ? std::move(*b) : nullptr;
}

enum class Mix { kF32, kQ8_0, kQ2 };
std::string mix_name(Mix m) { return m == Mix::kF32 ? "F32" : m == Mix::kQ8_0 ? "Q8_0" : "Q2"; }

// A synthetic model file per mix, written once per process.
const std::string& model_path(Mix mix) {
  static std::map<Mix, std::string> paths;
  auto it = paths.find(mix);
  if (it != paths.end()) return it->second;
  const std::string path =
      ::testing::TempDir() + "/cuda_model_" + mix_name(mix) + "_" + std::to_string(getpid()) + ".gguf";
  Ds4Shape s = *tools::synth_preset("tiny");
  tools::SynthPlan plan;
  if (mix == Mix::kQ2) {
    // Rows of 256 so that the routed experts are IQ2_XXS (gate/up) and Q2_K (down), not fallbacks.
    s.n_embd = 256;
    s.n_ff_exp = 256;
    plan = tools::plan_synth(s, QuantMix::kQ2);
    plan.expert_row_pool = 32;  // the IQ2 quantizer is slow; distinct rows do not matter here
    bool iq2 = false, q2k = false;
    for (const tools::SynthTensor& t : plan.tensors) {
      iq2 = iq2 || t.type == TensorType::kIQ2_XXS;
      q2k = q2k || t.type == TensorType::kQ2_K;
    }
    EXPECT_TRUE(iq2 && q2k) << "the q2 test model should have IQ2_XXS and Q2_K experts";
  } else {
    plan = tools::plan_synth(s, mix == Mix::kF32 ? QuantMix::kF32 : QuantMix::kQ8_0);
  }
  ThreadPool pool(2);
  const Status st = tools::write_synth(plan, 11, path, pool);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return paths.emplace(mix, path).first->second;
}

struct Cleanup : ::testing::Environment {
  void TearDown() override {
    for (Mix m : {Mix::kF32, Mix::kQ8_0, Mix::kQ2})
      std::remove((::testing::TempDir() + "/cuda_model_" + mix_name(m) + "_" + std::to_string(getpid()) + ".gguf").c_str());
  }
};
const ::testing::Environment* const kCleanup = ::testing::AddGlobalTestEnvironment(new Cleanup);

// "" when equal bit for bit, else where and how they first differ.
std::string diff(const std::vector<float>& got, const std::vector<float>& want, int64_t vocab) {
  if (got.size() != want.size()) return "sizes differ: " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0) return "";
  int64_t n = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++n;
    }
  std::ostringstream os;
  os.precision(9);
  os << n << " of " << got.size() << " logits differ; first at position " << first / vocab << ", token "
     << first % vocab << ": cuda " << got[static_cast<size_t>(first)] << " vs cpu " << want[static_cast<size_t>(first)];
  return os.str();
}

class CudaModelTest : public ::testing::TestWithParam<Mix> {
 protected:
  static constexpr int64_t kCtx = 2304;

  void SetUp() override {
    static const std::string why = cuda_unavailable();
    if (!why.empty()) GTEST_SKIP() << kSkip << why;
    cpu_ = make_backend(backend::BackendKind::kCpu);
    cuda_ = make_backend(backend::BackendKind::kCuda);
    ASSERT_NE(cpu_, nullptr);
    ASSERT_NE(cuda_, nullptr);
    const std::string& path = model_path(GetParam());
    auto a = Model::load(path, *cpu_);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    cpu_model_ = std::move(*a);
    auto b = Model::load(path, *cuda_);
    ASSERT_TRUE(b.ok()) << "cuda: " << b.status().to_string();
    cuda_model_ = std::move(*b);
    vocab_ = cpu_model_->shape().n_vocab;
  }

  std::vector<int32_t> tokens(int64_t n, uint32_t seed) const {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& v : t) v = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab_));
    return t;
  }

  // Logits of every position, fed to `s` in forward calls of `chunk` tokens (0: one call).
  std::vector<float> run(Session& s, const std::vector<int32_t>& t, int64_t chunk = 0) {
    std::vector<float> out(t.size() * static_cast<size_t>(vocab_));
    const size_t step = chunk > 0 ? static_cast<size_t>(chunk) : t.size();
    for (size_t i = 0; i < t.size(); i += step) {
      const size_t m = std::min(t.size() - i, step);
      const Status st = s.forward(std::span<const int32_t>(t.data() + i, m), out.data() + i * static_cast<size_t>(vocab_), true);
      EXPECT_TRUE(st.ok()) << st.to_string();
      if (!st.ok()) break;
    }
    return out;
  }

  // A second CUDA backend with options `o` (kind cuda) and this test's model loaded on it; the model
  // is null (with a failure recorded) when either step fails.
  struct OtherCuda {
    std::unique_ptr<backend::Backend> backend;
    std::unique_ptr<Model> model;
  };
  OtherCuda other_cuda(backend::BackendOptions o) {
    o.kind = backend::BackendKind::kCuda;
    OtherCuda c;
    auto b = backend::create_backend(o);
    if (!b.ok()) {
      ADD_FAILURE() << b.status().to_string();
      return c;
    }
    c.backend = std::move(*b);
    auto m = Model::load(model_path(GetParam()), *c.backend);
    if (!m.ok()) {
      ADD_FAILURE() << m.status().to_string();
      return c;
    }
    c.model = std::move(*m);
    return c;
  }

  // This test's CUDA model (`a`) against `other` and the CPU, bit for bit: a prompt of prompt_n tokens
  // (seed) in chunks of `chunk`, then `steps` decode steps of tokens tok = (tok·mul + add) % vocab from
  // tok0; after_prefill runs between the two phases (e.g. to read launch statistics).
  template <typename F>
  void expect_same_bits(Model& other, const char* a, const char* b, int64_t prompt_n, uint32_t seed, int64_t chunk,
                        int steps, int32_t tok0, int32_t mul, int32_t add, F&& after_prefill) {
    Session sa(*cuda_model_, 1024, chunk), sb(other, 1024, chunk), cpu(*cpu_model_, 1024, chunk);
    ASSERT_TRUE(sa.status().ok() && sb.status().ok() && cpu.status().ok());
    const auto prompt = tokens(prompt_n, seed);
    const auto la = run(sa, prompt, chunk), lb = run(sb, prompt, chunk), lc = run(cpu, prompt, chunk);
    EXPECT_EQ(diff(la, lb, vocab_), "") << "prefill: " << a << " vs " << b;
    EXPECT_EQ(diff(la, lc, vocab_), "") << "prefill: " << a << " vs cpu";
    after_prefill();
    std::vector<float> ga(static_cast<size_t>(vocab_)), gb(ga.size()), gc(ga.size());
    int32_t tok = tok0;
    for (int i = 0; i < steps; ++i) {
      tok = static_cast<int32_t>((tok * mul + add) % vocab_);
      const std::span<const int32_t> t(&tok, 1);
      ASSERT_TRUE(sa.forward(t, ga.data(), false).ok());
      ASSERT_TRUE(sb.forward(t, gb.data(), false).ok());
      ASSERT_TRUE(cpu.forward(t, gc.data(), false).ok());
      EXPECT_EQ(diff(ga, gb, vocab_), "") << "decode step " << i << ": " << a << " vs " << b;
      EXPECT_EQ(diff(ga, gc, vocab_), "") << "decode step " << i << ": " << a << " vs cpu";
    }
  }

  // The CPU backend's logits of every position of `t` (one whole-prompt forward).
  std::vector<float> cpu_ref(const std::vector<int32_t>& t) {
    Session s(*cpu_model_, kCtx);
    EXPECT_TRUE(s.status().ok()) << s.status().to_string();
    return run(s, t);
  }

  std::unique_ptr<backend::Backend> cpu_, cuda_;
  std::unique_ptr<Model> cpu_model_, cuda_model_;
  int64_t vocab_ = 0;
};

TEST_P(CudaModelTest, PrefillAnyChunkingEqualsCpu) {
  const auto prompt = tokens(prompt_tokens(), 1);
  const auto ref = cpu_ref(prompt);
  {
    Session s(*cuda_model_, kCtx);  // the default step size (512): whole prompt in one call
    ASSERT_TRUE(s.status().ok()) << s.status().to_string();
    const std::string d = diff(run(s, prompt), ref, vocab_);
    EXPECT_EQ(d, "") << "whole prompt";
  }
  for (int64_t chunk : {1, 3, 64, 127, 128, 129, 1000, 2048}) {
    Session s(*cuda_model_, kCtx, chunk);  // one step per forward call
    ASSERT_TRUE(s.status().ok()) << s.status().to_string();
    const std::string d = diff(run(s, prompt, chunk), ref, vocab_);
    EXPECT_EQ(d, "") << "chunks of " << chunk;
  }
}

TEST_P(CudaModelTest, BackToBackRunsAndResetEqualCpu) {
  const int64_t n = std::min<int64_t>(prompt_tokens(), 300);
  const auto a = tokens(n, 2), b = tokens(n / 2 + 17, 3);
  const auto ref_a = cpu_ref(a);
  Session s(*cuda_model_, kCtx, 64);
  ASSERT_TRUE(s.status().ok()) << s.status().to_string();
  for (int i = 0; i < 3; ++i) {
    s.reset();
    EXPECT_EQ(diff(run(s, a, 64), ref_a, vocab_), "") << "run " << i << " after reset";
  }
  for (int i = 0; i < 3; ++i) {  // fresh sessions back to back (buffers freed and allocated again)
    Session f(*cuda_model_, kCtx, 100);
    EXPECT_EQ(diff(run(f, a, 100), ref_a, vocab_), "") << "fresh session " << i;
  }
  // Another sequence, then reset: the session is as new.
  run(s, b, 13);  // continues after a: position n
  s.reset();
  run(s, b, 13);
  s.reset();
  EXPECT_EQ(diff(run(s, a, 7), ref_a, vocab_), "") << "after another sequence and reset";
}

TEST_P(CudaModelTest, InterleavedSessionsEqualCpu) {
  const int64_t n = std::min<int64_t>(prompt_tokens(), 400);
  const auto a = tokens(n, 4), b = tokens(n - 31, 5);
  const auto ref_a = cpu_ref(a), ref_b = cpu_ref(b);
  Session sa(*cuda_model_, kCtx, 64), sb(*cuda_model_, kCtx, 50);
  ASSERT_TRUE(sa.status().ok() && sb.status().ok());
  std::vector<float> out_a(a.size() * static_cast<size_t>(vocab_)), out_b(b.size() * static_cast<size_t>(vocab_));
  size_t ia = 0, ib = 0;
  const size_t ca = 37, cb = 1;  // a prefills in odd chunks while b decodes token by token, alternately
  while (ia < a.size() || ib < b.size()) {
    if (ia < a.size()) {
      const size_t m = std::min(ca, a.size() - ia);
      ASSERT_TRUE(sa.forward(std::span<const int32_t>(a.data() + ia, m), out_a.data() + ia * static_cast<size_t>(vocab_), true).ok());
      ia += m;
    }
    for (int k = 0; k < 5 && ib < b.size(); ++k, ++ib)
      ASSERT_TRUE(sb.forward(std::span<const int32_t>(b.data() + ib, cb), out_b.data() + ib * static_cast<size_t>(vocab_), true).ok());
  }
  EXPECT_EQ(diff(out_a, ref_a, vocab_), "") << "session a";
  EXPECT_EQ(diff(out_b, ref_b, vocab_), "") << "session b";
}

// After warm-up a decode step on CUDA makes exactly one host-visible synchronisation (its logits
// download), and its logits are the CPU's.
TEST_P(CudaModelTest, DecodeStepSynchronisesOnceAndEqualsCpu) {
  Session gpu(*cuda_model_, 1024, 64), cpu(*cpu_model_, 1024, 64);
  ASSERT_TRUE(gpu.status().ok() && cpu.status().ok());
  const auto prompt = tokens(100, 6);
  std::vector<float> lg(static_cast<size_t>(vocab_)), lc(static_cast<size_t>(vocab_));
  ASSERT_TRUE(gpu.forward(prompt, lg.data(), false).ok());
  ASSERT_TRUE(cpu.forward(prompt, lc.data(), false).ok());
  EXPECT_EQ(diff(lg, lc, vocab_), "") << "prefill";
  int32_t tok = 1;
  for (int i = 0; i < 3; ++i) {  // warm-up
    ASSERT_TRUE(gpu.forward(std::span<const int32_t>(&tok, 1), lg.data(), false).ok());
    ASSERT_TRUE(cpu.forward(std::span<const int32_t>(&tok, 1), lc.data(), false).ok());
  }
  // 40 steps cross sliding-window and compressor-window boundaries of the tiny shape.
  for (int i = 0; i < 40; ++i) {
    tok = static_cast<int32_t>((tok * 31 + 7) % vocab_);
    const int64_t before = cuda_->syncs();
    const Status st = gpu.forward(std::span<const int32_t>(&tok, 1), lg.data(), false);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(cuda_->syncs() - before, 1) << "host synchronisations in decode step " << i;
    ASSERT_TRUE(cpu.forward(std::span<const int32_t>(&tok, 1), lc.data(), false).ok());
    EXPECT_EQ(diff(lg, lc, vocab_), "") << "decode step " << i;
  }
}

// Greedy decode with the argmax on the device: one synchronisation per step (4 bytes), the CPU's ids.
TEST_P(CudaModelTest, GreedyDecodeOnDeviceEqualsCpu) {
  Session gpu(*cuda_model_, 1024, 64), cpu(*cpu_model_, 1024, 64);
  ASSERT_TRUE(gpu.status().ok() && cpu.status().ok());
  const auto prompt = tokens(150, 8);
  int32_t g = -1, c = -1;
  ASSERT_TRUE(gpu.forward_greedy(prompt, &g).ok());
  ASSERT_TRUE(cpu.forward_greedy(prompt, &c).ok());
  ASSERT_EQ(g, c) << "after the prompt";
  for (int i = 0; i < 40; ++i) {
    const int32_t tg = g, tc = c;
    const int64_t before = cuda_->syncs();
    ASSERT_TRUE(gpu.forward_greedy(std::span<const int32_t>(&tg, 1), &g).ok());
    EXPECT_EQ(cuda_->syncs() - before, 1) << "host synchronisations in decode step " << i;
    ASSERT_TRUE(cpu.forward_greedy(std::span<const int32_t>(&tc, 1), &c).ok());
    ASSERT_EQ(g, c) << "decode step " << i;
  }
}

// Sampled decode with the choice on the device (Session::forward_sample: temperature, min-p, top-k,
// top-p, penalties and bias, the Sampler's own draws): the ids of a CPU session sampled on the host,
// one synchronisation per step, and the device really choosing (not handing every step back).
TEST_P(CudaModelTest, SampledDecodeOnDeviceEqualsCpu) {
  struct Config {
    const char* name;
    float t, top_p, min_p, rep, presence;
    int32_t top_k;
  };
  const Config configs[] = {{"min_p", 0.8f, 1.0f, 0.05f, 1.0f, 0.0f, 0},
                            {"top_k_top_p_penalties", 1.1f, 0.9f, 0.0f, 1.3f, 0.4f, 40},
                            {"walk", 1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0}};
  for (const Config& cf : configs) {
    SCOPED_TRACE(cf.name);
    sampling::SamplerConfig sc;
    sc.temperature = cf.t;
    sc.top_p = cf.top_p;
    sc.min_p = cf.min_p;
    sc.top_k = cf.top_k;
    sc.repetition_penalty = cf.rep;
    sc.presence_penalty = cf.presence;
    sc.logit_bias = {{3, 2.0f}, {5, -1.0f}};
    sc.seed = 77;
    sampling::Sampler on_gpu(sc, static_cast<int32_t>(vocab_)), on_cpu(sc, static_cast<int32_t>(vocab_));
    Session gpu(*cuda_model_, 1024, 64), cpu(*cpu_model_, 1024, 64);
    ASSERT_TRUE(gpu.status().ok() && cpu.status().ok());
    std::vector<float> lg(static_cast<size_t>(vocab_)), lc(lg.size());
    std::vector<int32_t> next = tokens(100, 10);
    int64_t on_device = 0;
    for (int i = 0; i < 30; ++i) {
      const sampling::Sampler::Draw d = on_gpu.take_draw();
      backend::SampleArgs a;
      a.temperature = sc.temperature;
      a.top_k = sc.top_k;
      a.top_p = sc.top_p;
      a.min_p = sc.min_p;
      a.repetition_penalty = sc.repetition_penalty;
      a.presence_penalty = sc.presence_penalty;
      a.u = d.u;
      a.logit_bias = sc.logit_bias;
      a.seen_ids = d.seen_ids;
      a.seen_counts = d.seen_counts;
      int32_t g = -1;
      const int64_t before = cuda_->syncs();
      ASSERT_TRUE(gpu.forward_sample(next, a, &g, lg.data()).ok());
      if (g == backend::kSampleOnHost) {
        g = on_gpu.sample_drawn(lg, d);
      } else {
        ++on_device;
        EXPECT_EQ(cuda_->syncs() - before, 1) << "host synchronisations in step " << i;
      }
      ASSERT_TRUE(cpu.forward(next, lc.data(), false).ok());
      const int32_t c = on_cpu.sample(lc);
      ASSERT_EQ(g, c) << "step " << i;
      on_gpu.accept(g);
      on_cpu.accept(c);
      next.assign(1, g);
    }
    EXPECT_GT(on_device, 20) << "steps the device sampled itself";
  }
}

// Each step's kernels run as one CUDA graph by default (a cached graph replayed, the nodes whose
// arguments changed patched); --cuda-graphs off launches them one by one. Same kernels, same bits:
// a prompt in chunks and 40 decode steps compared bit for bit between the two (and with the CPU), and
// the graph path really taken (decode steps mostly replay cached graphs rather than build new ones).
// The graphs have programmatic edges (--cuda-pdl on, the default); eager launches have none.
TEST_P(CudaModelTest, GraphStepsEqualEagerLaunches) {
  backend::BackendOptions o;
  o.cuda_graphs = false;
  const OtherCuda eager_cuda = other_cuda(o);
  ASSERT_NE(eager_cuda.model, nullptr);
  constexpr int kSteps = 40;
  backend::LaunchStats before;
  expect_same_bits(*eager_cuda.model, "graph", "eager", 150, 9, 64, kSteps, 5, 37, 11,
                   [&] { before = cuda_->launch_stats(); });
  const backend::LaunchStats after = cuda_->launch_stats(), eager_stats = eager_cuda.backend->launch_stats();
  const int64_t launches = after.graph_launches - before.graph_launches, built = after.graphs_built - before.graphs_built;
  std::printf("graph path, %d decode steps: %lld graph launches, %lld graphs built, %lld nodes, %lld patched\n", kSteps,
              static_cast<long long>(launches), static_cast<long long>(built),
              static_cast<long long>(after.nodes_launched - before.nodes_launched),
              static_cast<long long>(after.nodes_patched - before.nodes_patched));
  EXPECT_GE(launches, kSteps) << "every decode step should run as (at least) one graph";
  EXPECT_LE(built, kSteps / 2) << "decode steps should mostly replay cached graphs";
  EXPECT_EQ(after.eager_launches - before.eager_launches, 0) << "no kernel of a decode step should run outside the graph";
  EXPECT_EQ(eager_stats.graph_launches, 0) << "--cuda-graphs off";
  EXPECT_GT(eager_stats.eager_launches, 0);
}

// --cuda-disable staged-loads,hc-cluster,attn-decode: the optional kernel forms left out, the general
// kernels they replace run instead. Same bits: a chunked prompt and 24 decode steps compared bit for bit
// with the default backend (every form in) and the CPU.
TEST_P(CudaModelTest, OptionalFormsLeftOutGiveTheSameBits) {
  backend::BackendOptions o;
  o.cuda_staged_loads = o.cuda_hc_cluster = o.cuda_attn_decode = o.cuda_attn_wide = o.cuda_stream_products = o.cuda_fused_quant =
      o.cuda_hc_side = o.cuda_moe_side = o.cuda_norm_rope_batch = o.cuda_indexer_tile = o.cuda_routed_staged =
          o.cuda_mma_products = o.cuda_grouped_experts = o.cuda_float_tiles = false;
  const OtherCuda plain_cuda = other_cuda(o);
  ASSERT_NE(plain_cuda.model, nullptr);
  expect_same_bits(*plain_cuda.model, "all forms", "no forms", 120, 13, 48, 24, 7, 41, 3, [] {});
}

INSTANTIATE_TEST_SUITE_P(Mixes, CudaModelTest, ::testing::Values(Mix::kF32, Mix::kQ8_0, Mix::kQ2),
                         [](const ::testing::TestParamInfo<Mix>& i) { return mix_name(i.param); });

}  // namespace
}  // namespace dsv4::model
