// tests/unit/model/session_test.cpp — Session state: reset returns exactly the initial state,
// snapshots restore exactly, chunking never changes bits, bad inputs are clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/registry/registry.h"
#include "base/cpu_features.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "tools/synth.h"

namespace dsv4::model {
namespace {

std::unique_ptr<backend::Backend> cpu_backend(bool amx) {
  backend::BackendOptions o;
  o.kind = backend::BackendKind::kCpu;
  o.threads = 2;
  o.simd = detected_simd_level();
  o.amx = amx;
  auto b = backend::create_backend(o);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return b.ok() ? std::move(*b) : nullptr;
}

class SessionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Per process: ctest runs each test as its own process, in parallel with -j.
    path_ = new std::string(::testing::TempDir() + "/session_tiny_" + std::to_string(getpid()) + ".gguf");
    ThreadPool pool(2);
    const tools::SynthPlan plan = tools::plan_synth(*tools::synth_preset("tiny"), QuantMix::kF32);
    ASSERT_TRUE(tools::write_synth(plan, 7, *path_, pool).ok());
  }
  static void TearDownTestSuite() {
    std::remove(path_->c_str());
    delete path_;
  }
  void SetUp() override {
    backend_ = cpu_backend(/*amx=*/true);
    auto m = Model::load(*path_, *backend_);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
  }
  std::vector<int32_t> tokens(int n, uint32_t seed) const {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& v : t) v = static_cast<int32_t>(rng() % static_cast<uint32_t>(model_->shape().n_vocab));
    return t;
  }
  std::vector<float> run(Session& s, const std::vector<int32_t>& t, int chunk) {
    const int64_t V = model_->shape().n_vocab;
    std::vector<float> out(t.size() * static_cast<size_t>(V));
    for (size_t i = 0; i < t.size(); i += static_cast<size_t>(chunk)) {
      const size_t m = std::min(t.size() - i, static_cast<size_t>(chunk));
      EXPECT_TRUE(s.forward(std::span<const int32_t>(t.data() + i, m), out.data() + i * static_cast<size_t>(V), true).ok());
    }
    return out;
  }
  static bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }

  static std::string* path_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<Model> model_;
};
std::string* SessionTest::path_ = nullptr;

TEST_F(SessionTest, ChunkingAndResetNeverChangeBits) {
  const auto a = tokens(70, 1), b = tokens(41, 2);
  Session s(*model_, 256);
  const auto ref_a = run(s, a, 70);
  for (int chunk : {1, 3, 7, 13, 64}) {
    s.reset();
    EXPECT_TRUE(same_bits(run(s, a, chunk), ref_a)) << "chunk " << chunk;
  }
  // Second sequence after reset equals the same sequence in a fresh session.
  s.reset();
  const auto b_after = run(s, b, 5);
  Session fresh(*model_, 256);
  EXPECT_TRUE(same_bits(run(fresh, b, 41), b_after));
  EXPECT_EQ(s.snapshot(), fresh.snapshot());
  s.reset();
  Session empty(*model_, 256);
  EXPECT_EQ(s.snapshot(), empty.snapshot());  // reset is the initial state, byte for byte
}

// forward_greedy = forward + sampling::argmax of the last logits, and leaves the same state: a greedy
// decode driven by it follows the logits path token for token (ids and every later logit equal), and
// a prompt longer than one step picks the argmax of its last row.
TEST_F(SessionTest, ForwardGreedyIsTheArgmaxOfForward) {
  const int64_t V = model_->shape().n_vocab;
  Session greedy(*model_, 256, 16), logits(*model_, 256, 16);
  ASSERT_TRUE(greedy.status().ok() && logits.status().ok());
  const std::vector<int32_t> prompt = tokens(37, 11);  // three steps of 16
  std::vector<float> lg(static_cast<size_t>(V));
  int32_t next = -1;
  ASSERT_TRUE(greedy.forward_greedy(prompt, &next).ok());
  ASSERT_TRUE(logits.forward(prompt, lg.data(), false).ok());
  int32_t want = sampling::argmax(lg);
  ASSERT_EQ(next, want) << "after the prompt";
  for (int i = 0; i < 20; ++i) {
    int32_t tok = next;
    ASSERT_TRUE(greedy.forward_greedy(std::span<const int32_t>(&tok, 1), &next).ok());
    ASSERT_TRUE(logits.forward(std::span<const int32_t>(&tok, 1), lg.data(), false).ok());
    want = sampling::argmax(lg);
    ASSERT_EQ(next, want) << "decode step " << i;
  }
  EXPECT_EQ(greedy.position(), logits.position());
  EXPECT_FALSE(greedy.forward_greedy(prompt, nullptr).ok());
  const int32_t bad = static_cast<int32_t>(V);
  EXPECT_FALSE(greedy.forward_greedy(std::span<const int32_t>(&bad, 1), &next).ok());
}

TEST_F(SessionTest, SnapshotRestoreContinuesExactly) {
  const auto t = tokens(60, 3);
  Session straight(*model_, 128);
  const auto ref = run(straight, t, 60);
  const int64_t V = model_->shape().n_vocab;
  Session s(*model_, 128);
  const std::vector<int32_t> head(t.begin(), t.begin() + 33), tail(t.begin() + 33, t.end());
  run(s, head, 33);
  const auto snap = s.snapshot();
  const std::string file = ::testing::TempDir() + "/session.snap";
  ASSERT_TRUE(s.save(file).ok());
  Session other(*model_, 128);
  ASSERT_TRUE(other.load(file).ok());
  EXPECT_EQ(other.position(), 33);
  const auto rest = run(other, tail, 4);
  EXPECT_EQ(std::memcmp(rest.data(), ref.data() + 33 * V, rest.size() * sizeof(float)), 0);
  // Restore into a session that has moved on.
  ASSERT_TRUE(s.restore(snap).ok());
  EXPECT_TRUE(same_bits(run(s, tail, 27), rest));
  std::remove(file.c_str());
}

TEST_F(SessionTest, BadSnapshotsAndInputsAreClearErrors) {
  Session s(*model_, 16);
  auto snap = s.snapshot();
  snap[0] = 'X';
  EXPECT_EQ(s.restore(snap).code(), StatusCode::kCorrupt);
  snap = s.snapshot();
  snap.resize(snap.size() - 3);
  EXPECT_FALSE(s.restore(snap).ok());
  EXPECT_FALSE(s.load("/nonexistent/x.snap").ok());
  const std::vector<int32_t> bad = {1, 2, 1000};
  Status st = s.forward(bad, nullptr, false);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("vocabulary"), std::string::npos);
  const auto t = tokens(17, 4);
  EXPECT_NE(s.forward(t, nullptr, false).message().find("context"), std::string::npos);
  EXPECT_EQ(s.position(), 0);  // nothing consumed on error
}

TEST_F(SessionTest, MissingOrMisshapedTensorNamesIt) {
  // A GGUF lacking a tensor of the manifest.
  const std::string path = ::testing::TempDir() + "/session_bad.gguf";
  ThreadPool pool(1);
  tools::SynthPlan plan = tools::plan_synth(*tools::synth_preset("tiny"), QuantMix::kF32);
  Ds4Shape other = plan.shape;
  other.n_ff_exp = 64;  // experts twice as wide in the file than the metadata says
  tools::SynthPlan wide = tools::plan_synth(other, QuantMix::kF32);
  for (auto& t : wide.tensors)
    if (t.name.find("ffn_gate_exps") == std::string::npos) t = plan.tensors[static_cast<size_t>(&t - wide.tensors.data())];
  wide.shape = plan.shape;
  ASSERT_TRUE(tools::write_synth(wide, 1, path, pool).ok());
  auto m = Model::load(path, *backend_);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("ffn_gate_exps"), std::string::npos) << m.status().to_string();
  EXPECT_NE(m.status().message().find("expected [64,32,8]"), std::string::npos) << m.status().to_string();
  std::remove(path.c_str());
}

TEST_F(SessionTest, RewindToCheckpointContinuesExactly) {
  // One timeline A (prefix + tail_a), checkpoints along it, then rewinds to each and runs a
  // different tail B: the logits equal a fresh session fed prefix + tail_b, bit for bit. Several
  // positions, so some land inside open compressor windows and some on window boundaries.
  const std::vector<int32_t> a = tokens(300, 11), b = tokens(90, 12);
  const int64_t V = model_->shape().n_vocab;
  for (int64_t cut : {1, 4, 37, 128, 129, 200, 255}) {
    Session s(*model_, 512);
    std::vector<float> scratch(static_cast<size_t>(V) * a.size());
    ASSERT_TRUE(s.forward(std::span<const int32_t>(a.data(), static_cast<size_t>(cut)), nullptr, false).ok());
    const SessionCheckpoint cp = s.checkpoint();
    EXPECT_EQ(cp.pos, cut);
    EXPECT_GT(cp.bytes(), 0);
    ASSERT_TRUE(s.forward(std::span<const int32_t>(a.data() + cut, a.size() - static_cast<size_t>(cut)), nullptr, false).ok());
    ASSERT_TRUE(s.rewind(cp).ok());
    EXPECT_EQ(s.position(), cut);
    std::vector<float> got(static_cast<size_t>(V) * b.size());
    ASSERT_TRUE(s.forward(b, got.data(), true).ok());

    Session fresh(*model_, 512);
    ASSERT_TRUE(fresh.forward(std::span<const int32_t>(a.data(), static_cast<size_t>(cut)), nullptr, false).ok());
    std::vector<float> want(static_cast<size_t>(V) * b.size());
    ASSERT_TRUE(fresh.forward(b, want.data(), true).ok());
    EXPECT_TRUE(same_bits(got, want)) << "cut " << cut;
    // And the full state equals the fresh one's.
    EXPECT_EQ(s.snapshot(), fresh.snapshot()) << "cut " << cut;
  }
}

TEST_F(SessionTest, RewindRejectsForeignCheckpoints) {
  Session s(*model_, 512);
  ASSERT_TRUE(s.forward(tokens(40, 3), nullptr, false).ok());
  const SessionCheckpoint ahead = s.checkpoint();
  s.reset();
  ASSERT_TRUE(s.forward(tokens(10, 3), nullptr, false).ok());
  EXPECT_FALSE(s.rewind(ahead).ok());  // ahead of the position
  SessionCheckpoint wrong = s.checkpoint();
  wrong.rings.pop_back();
  EXPECT_FALSE(s.rewind(wrong).ok());
}

// A Q8_0 model's logits, every prompt position, for prefill chunks of `chunk` tokens: chunks of 70
// and 16 run the Q8_0 matrices on AMX tiles (where the backend uses them), 7 on the vector tile
// kernels, 1 on matrix x vector.
std::vector<float> q8_0_logits(bool amx, size_t chunk) {
  const std::string path = ::testing::TempDir() + "/session_q8_" + std::to_string(getpid()) + ".gguf";
  ThreadPool pool(2);
  EXPECT_TRUE(tools::write_synth(tools::plan_synth(*tools::synth_preset("tiny"), QuantMix::kQ8_0), 9, path, pool).ok());
  auto backend = cpu_backend(amx);
  auto model = Model::load(path, *backend);
  std::remove(path.c_str());
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return {};
  const int64_t V = (*model)->shape().n_vocab;
  std::mt19937 rng(5);
  std::vector<int32_t> t(70);
  for (auto& v : t) v = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
  Session s(**model, 256);
  std::vector<float> out(t.size() * static_cast<size_t>(V));
  for (size_t i = 0; i < t.size(); i += chunk) {
    const size_t n = std::min(t.size() - i, chunk);
    EXPECT_TRUE(s.forward(std::span<const int32_t>(t.data() + i, n), out.data() + i * static_cast<size_t>(V), true).ok());
  }
  return out;
}

// Without AMX: every prefill path (matrix x matrix tiles, matrix x vector) gives the bits of token-by-token decode.
TEST(SessionQ8_0, VectorPrefillEqualsTokenByToken) {
  const std::vector<float> ref = q8_0_logits(/*amx=*/false, 1);
  ASSERT_FALSE(ref.empty());
  for (size_t chunk : {size_t{70}, size_t{16}, size_t{7}})
    EXPECT_EQ(std::memcmp(q8_0_logits(false, chunk).data(), ref.data(), ref.size() * sizeof(float)), 0) << chunk;
}

// With AMX tiles: the same bits as token-by-token decode without AMX. SKIPPED (shown by ctest) where the
// CPU or OS has no usable AMX, since the AMX backend then runs exactly the vector paths tested above.
TEST(SessionQ8_0, AmxPrefillEqualsVectorPaths) {
  if (!amx_int8_usable()) GTEST_SKIP() << "no AMX int8 on this CPU/OS";
  const std::vector<float> ref = q8_0_logits(/*amx=*/false, 1);
  ASSERT_FALSE(ref.empty());
  for (size_t chunk : {size_t{70}, size_t{16}, size_t{7}})
    EXPECT_EQ(std::memcmp(q8_0_logits(true, chunk).data(), ref.data(), ref.size() * sizeof(float)), 0) << chunk;
}

}  // namespace
}  // namespace dsv4::model
