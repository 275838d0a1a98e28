// tests/unit/model/decode_step_test.cpp — the backend seam's budget for one decode step after
// warm-up: no heap allocation on the host (counted by replacing the global operator new in this
// test binary, unit/common/counting_new.h) and exactly one host-visible synchronisation (the logits
// download), counted by the backend. Also: the step's results do not depend on the session's max_chunk.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/registry/registry.h"
#include "model/model.h"
#include "tools/synth.h"
#include "unit/common/counting_new.h"

namespace dsv4::model {
namespace {

std::unique_ptr<backend::Backend> cpu_backend(int threads, SimdLevel level) {
  backend::BackendOptions o;
  o.kind = backend::BackendKind::kCpu;
  o.threads = threads;
  o.simd = level;
  auto b = backend::create_backend(o);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return b.ok() ? std::move(*b) : nullptr;
}

class DecodeStepTest : public ::testing::TestWithParam<QuantMix> {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/decode_step_" + std::to_string(getpid()) + ".gguf";
    ThreadPool pool(2);
    ASSERT_TRUE(tools::write_synth(tools::plan_synth(*tools::synth_preset("tiny"), GetParam()), 3, path_, pool).ok());
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
};

TEST_P(DecodeStepTest, NoAllocationAndOneSyncPerStepAfterWarmUp) {
  for (int threads : {1, 2}) {
    auto be = cpu_backend(threads, detected_simd_level());
    ASSERT_NE(be, nullptr);
    auto m = Model::load(path_, *be);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const Ds4Shape& s = (*m)->shape();
    Session session(**m, 1024, 64);
    ASSERT_TRUE(session.status().ok()) << session.status().to_string();
    std::mt19937 rng(1);
    std::vector<int32_t> prompt(100);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(s.n_vocab));
    std::vector<float> logits(static_cast<size_t>(s.n_vocab));
    ASSERT_TRUE(session.forward(prompt, logits.data(), false).ok());
    int32_t tok = 1;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(session.forward(std::span<const int32_t>(&tok, 1), logits.data(), false).ok());

    // 40 more steps cross sliding-window and compressor-window boundaries of the tiny shape.
    for (int i = 0; i < 40; ++i) {
      tok = static_cast<int32_t>((tok * 31 + 7) % s.n_vocab);
      const int64_t syncs_before = be->syncs();
      Status st;
      const int64_t allocations = testing_alloc::allocations_during(
          [&] { st = session.forward(std::span<const int32_t>(&tok, 1), logits.data(), false); });
      ASSERT_TRUE(st.ok()) << st.to_string();
      EXPECT_EQ(allocations, 0) << "heap allocations in decode step " << i << " (threads " << threads << ")";
      EXPECT_EQ(be->syncs() - syncs_before, 1) << "host synchronisations in decode step " << i;
    }
  }
}

// A step's bits do not depend on how big the session's steps may be (its activation arena).
TEST_P(DecodeStepTest, MaxChunkNeverChangesBits) {
  auto be = cpu_backend(2, detected_simd_level());
  ASSERT_NE(be, nullptr);
  auto m = Model::load(path_, *be);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const int64_t V = (*m)->shape().n_vocab;
  std::mt19937 rng(2);
  std::vector<int32_t> prompt(150);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
  std::vector<float> ref;
  for (int64_t max_chunk : {150, 1, 7, 64, 149}) {
    Session session(**m, 256, max_chunk);
    ASSERT_TRUE(session.status().ok());
    std::vector<float> out(prompt.size() * static_cast<size_t>(V));
    ASSERT_TRUE(session.forward(prompt, out.data(), true).ok());
    if (ref.empty()) {
      ref = out;
    } else {
      EXPECT_EQ(std::memcmp(out.data(), ref.data(), ref.size() * sizeof(float)), 0) << "max_chunk " << max_chunk;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Mixes, DecodeStepTest, ::testing::Values(QuantMix::kF32, QuantMix::kQ8_0),
                         [](const ::testing::TestParamInfo<QuantMix>& i) {
                           return i.param == QuantMix::kF32 ? std::string("F32") : std::string("Q8_0");
                         });

}  // namespace
}  // namespace dsv4::model
