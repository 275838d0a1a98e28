// tests/unit/model/verify_backend_test.cpp — `--verify cpu` (backend/registry/verify_backend.h): a
// whole forward pass through the verifying backend gives the plain backend's logits and no error when
// the two sides agree, and when one op of the checked backend is off by one bit the step fails with
// that op named (step, op index, layer, output, element), not some later one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/registry/registry.h"
#include "backend/registry/verify_backend.h"
#include "model/model.h"
#include "tools/synth.h"

namespace dsv4::model {
namespace {

using backend::Backend;
using backend::Tensor;

std::unique_ptr<Backend> cpu_backend(bool verify) {
  backend::BackendOptions o;
  o.kind = backend::BackendKind::kCpu;
  o.threads = 2;
  o.verify = verify;
  auto b = backend::create_backend(o);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return b.ok() ? std::move(*b) : nullptr;
}

// The tiny model, written once per process and removed when it exits.
struct TempModel {
  std::string path;
  ~TempModel() { std::remove(path.c_str()); }
};

const std::string& model_path() {
  static const TempModel model = [] {
    const std::string p = ::testing::TempDir() + "/verify_tiny_" + std::to_string(getpid()) + ".gguf";
    ThreadPool pool(2);
    const tools::SynthPlan plan = tools::plan_synth(*tools::synth_preset("tiny"), QuantMix::kQ8_0);
    EXPECT_TRUE(tools::write_synth(plan, 5, p, pool).ok());
    return TempModel{p};
  }();
  return model.path;
}

std::vector<int32_t> tokens(int64_t n) {
  std::mt19937 rng(3);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& v : t) v = static_cast<int32_t>(rng() % 90);  // the tiny vocabulary is 97
  return t;
}

// A CPU backend whose k-th rms_norm call (counting from 0 over its life) flips the lowest bit of its
// first output element: a kernel bug in one op, for the verifier to find.
class OneBitOffBackend final : public Backend {
 public:
  OneBitOffBackend(std::unique_ptr<Backend> inner, int64_t bad_call) : in_(std::move(inner)), bad_(bad_call) {}
  std::string_view name() const override { return "one-bit-off"; }
  std::string describe() const override { return "test backend"; }
  bool supports(backend::Op op, TensorType t) const override { return in_->supports(op, t); }
  Result<backend::Buffer> allocate(int64_t bytes) override { return in_->allocate(bytes); }
  Result<Tensor> load_weight(const Tensor& h, std::vector<backend::Buffer>& k) override { return in_->load_weight(h, k); }
  Result<Tensor> load_weight_f32(const Tensor& h, std::vector<backend::Buffer>& k) override {
    return in_->load_weight_f32(h, k);
  }
  Status reserve(const backend::StepBounds& b) override { return in_->reserve(b); }
  void upload(const Tensor& d, const void* s, int64_t n) override { in_->upload(d, s, n); }
  Status download(const Tensor& s, void* d, int64_t n) override { return in_->download(s, d, n); }
  Status finish() override { return in_->finish(); }
  Result<backend::BackendLimits> measure_limits() override { return in_->measure_limits(); }
  int64_t memory_in_use() const override { return in_->memory_in_use(); }
  int64_t memory_peak() const override { return in_->memory_peak(); }
  void begin_step() override { in_->begin_step(); }
  Status end_step() override { return in_->end_step(); }
  void embed(const Tensor& a, const Tensor& b, int64_t c, const Tensor& d) override { in_->embed(a, b, c, d); }
  void matmul(const Tensor& w, const Tensor& x, const Tensor& y) override { in_->matmul(w, x, y); }
  void matmul_batch(std::span<const backend::MatmulJob> j) override { in_->matmul_batch(j); }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& y) override {
    in_->rms_norm(x, w, eps, y);
    if (calls_++ != bad_) return;
    float v;
    ASSERT_TRUE(in_->download(y, &v, 4).ok());
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    bits ^= 1u;
    std::memcpy(&v, &bits, 4);
    in_->upload(y, &v, 4);
  }
  void rope(const Tensor& x, int64_t r, int64_t p0, int64_t n, const Tensor& f, bool inv) override {
    in_->rope(x, r, p0, n, f, inv);
  }
  void hc_pre(const Tensor& m, const Tensor& s, const Tensor& b, float e, int64_t it, const Tensor& X, const Tensor& x,
              const Tensor& p, const Tensor& c) override {
    in_->hc_pre(m, s, b, e, it, X, x, p, c);
  }
  void hc_post(const Tensor& X, const Tensor& y, const Tensor& p, const Tensor& c, const Tensor& o) override {
    in_->hc_post(X, y, p, c, o);
  }
  void hc_head(const Tensor& m, const Tensor& s, const Tensor& b, float e, const Tensor& X, const Tensor& y) override {
    in_->hc_head(m, s, b, e, X, y);
  }
  void compressor_update(const backend::CompressorUpdate& u, const backend::CompressorTensors& s) override {
    in_->compressor_update(u, s);
  }
  void indexer_topk(const Tensor& q, const Tensor& g, float a, float b, const Tensor& k, int64_t p0, int64_t r,
                    const Tensor& o) override {
    in_->indexer_topk(q, g, a, b, k, p0, r, o);
  }
  void attention(const backend::AttentionArgs& a) override { in_->attention(a); }
  void kv_store(const Tensor& kv, int64_t p0, const Tensor& ring) override { in_->kv_store(kv, p0, ring); }
  void route(const backend::RouteArgs& r) override { in_->route(r); }
  void moe(const backend::MoeArgs& m) override { in_->moe(m); }
  void argmax(const Tensor& l, const Tensor& i) override { in_->argmax(l, i); }
  void sample(const backend::SampleArgs& a) override { in_->sample(a); }

 protected:
  void release(void*, int64_t) override {}  // every buffer belongs to the inner backend

 private:
  std::unique_ptr<Backend> in_;
  int64_t bad_, calls_ = 0;
};

TEST(VerifyBackend, AgreeingBackendsGiveThePlainLogits) {
  auto plain = cpu_backend(false), verified = cpu_backend(true);
  ASSERT_TRUE(plain && verified);
  EXPECT_NE(verified->describe().find("--verify"), std::string::npos) << verified->describe();
  auto a = Model::load(model_path(), *plain);
  auto b = Model::load(model_path(), *verified);
  ASSERT_TRUE(a.ok() && b.ok());
  const int64_t vocab = (*a)->shape().n_vocab;
  const auto t = tokens(40);
  std::vector<float> la(t.size() * static_cast<size_t>(vocab)), lb(la.size());
  Session sa(**a, 64, 7), sb(**b, 64, 7);
  for (size_t i = 0; i < t.size(); i += 7) {
    const size_t m = std::min<size_t>(7, t.size() - i);
    ASSERT_TRUE(sa.forward(std::span<const int32_t>(t.data() + i, m), la.data() + i * vocab, true).ok());
    const Status st = sb.forward(std::span<const int32_t>(t.data() + i, m), lb.data() + i * vocab, true);
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0);
}

TEST(VerifyBackend, NamesTheFirstOpWhoseBitsDiffer) {
  // rms_norm calls of a prefill step: per layer, hc_pre's stream norm, attn_norm, q_a norm, q heads, kv
  // norm, …; call 9 falls inside layer 1. The verifier must stop there, not at the logits.
  auto primary = std::make_unique<OneBitOffBackend>(cpu_backend(false), 9);
  auto be = backend::make_verifying_backend(std::move(primary), cpu_backend(false));
  auto m = Model::load(model_path(), *be);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  Session s(**m, 64);
  std::vector<float> logits(static_cast<size_t>((*m)->shape().n_vocab) * 8);
  const auto t = tokens(8);
  const Status st = s.forward(t, logits.data(), true);
  ASSERT_FALSE(st.ok()) << "a one-bit error in one rms_norm went unnoticed";
  const std::string msg = st.message();
  std::printf("%s\n", msg.c_str());
  EXPECT_NE(msg.find("(rms_norm)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("output y"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1 of "), std::string::npos) << "exactly one element differs: " << msg;
  EXPECT_NE(msg.find("row 0, column 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("step 1"), std::string::npos) << msg;
}

}  // namespace
}  // namespace dsv4::model
