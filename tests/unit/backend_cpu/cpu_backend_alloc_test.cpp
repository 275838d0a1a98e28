// tests/unit/backend_cpu/cpu_backend_alloc_test.cpp — CpuBackend's steady state is heap-free: after
// one warm-up call of a shape, calling an op again with that shape calls no operator new (on any
// thread). This binary replaces the global operator new / delete (unit/common/counting_new.h);
// allocations are counted only while a test counts, so the rest of the test binary is unaffected.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/quant.h"
#include "unit/common/counting_new.h"

namespace dsv4::cpu {
namespace {

using backend::make_2d;
using backend::Tensor;

// Calls fn twice: once to warm up, then counting operator new calls (returned).
template <typename F>
int64_t allocs_of_second_call(F&& fn) {
  fn();
  return testing_alloc::allocations_during(fn);
}

class CpuBackendAlloc : public ::testing::Test {
 protected:
  CpuBackendAlloc() : be_(CpuBackendOptions{3, detected_simd_level(), true}) {}

  std::vector<float> random(int64_t n, float sigma = 1.0f) {
    std::normal_distribution<float> g(0.0f, sigma);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = g(rng_);
    return v;
  }
  static Tensor f32(std::vector<float>& v, int64_t cols, int64_t rows) {
    return make_2d(TensorType::kF32, v.data(), cols, rows);
  }
  static Tensor i32(std::vector<int32_t>& v, int64_t cols, int64_t rows) {
    return make_2d(TensorType::kI32, v.data(), cols, rows);
  }
  // A random weight [in, out, experts] of `type` (bytes kept by the fixture).
  Tensor weight(TensorType type, int64_t in, int64_t out, int64_t experts = 1) {
    const TypeKernels* k = type_kernels(type);
    const int64_t rb = tensor_row_bytes(type, in);
    keep_.emplace_back(static_cast<size_t>(rb * out * experts));
    for (int64_t r = 0; r < out * experts; ++r) {
      std::vector<float> f = random(in, 0.1f);
      k->quantize_row(f.data(), keep_.back().data() + r * rb, in, nullptr);
    }
    const int64_t ne[3] = {in, out, experts};
    return backend::make_nd(type, keep_.back().data(), experts > 1 ? 3 : 2, ne);
  }
  void TearDown() override { EXPECT_TRUE(be_.end_step().ok()); }

  std::mt19937 rng_{5};
  std::vector<std::vector<uint8_t>> keep_;
  CpuBackend be_;
};

// The counter sees allocations on the calling thread and on pool workers.
TEST_F(CpuBackendAlloc, CounterSeesAllocations) {
  std::vector<int>* volatile sink = nullptr;
  EXPECT_GT(allocs_of_second_call([&] {
              sink = new std::vector<int>(100);
              delete sink;
            }),
            0);
  std::atomic<int64_t> sum{0};
  EXPECT_GE(testing_alloc::allocations_during([&] {
              be_.pool().parallel_for(be_.pool().size(), [&](int64_t b, int64_t e, int) {
                std::vector<int64_t> v(static_cast<size_t>(e - b + 10), 1);
                sum += v[0];
              });
            }),
            be_.pool().size());
  EXPECT_EQ(sum.load(), be_.pool().size());
}

TEST_F(CpuBackendAlloc, MatmulAndMatmulBatch) {
  for (const TypeKernels* k : all_type_kernels()) {
    const int64_t in = 256, out = 24;
    Tensor w1 = weight(k->type, in, out), w2 = weight(k->type, in, out + 8);
    for (int64_t n : {1, 5, 19}) {
      auto x = random(in * n), xw = random((in + 32) * n);
      std::vector<float> y1(out * n), y2((out + 8) * n), y3(out * n);
      const backend::MatmulJob jobs[] = {{w1, f32(x, in, n), f32(y1, out, n)},
                                         {w2, f32(x, in, n), f32(y2, out + 8, n)},
                                         {w1, f32(xw, in + 32, n).cols(32, in), f32(y3, out, n)}};
      EXPECT_EQ(allocs_of_second_call([&] { be_.matmul_batch(jobs); }), 0)
          << tensor_type_name(k->type) << " " << n << " columns";
      EXPECT_EQ(allocs_of_second_call([&] { be_.matmul(w1, f32(x, in, n), f32(y1, out, n)); }), 0)
          << tensor_type_name(k->type) << " " << n << " columns";
    }
  }
}

TEST_F(CpuBackendAlloc, CompressorIndexerAttentionKvStore) {
  const int64_t r = 4, d = 64, n_rot = 16, cap = 32, W = 8, H = 4, nI = 2, top_k = 3, n = 11, p0 = 50;
  auto ape = random(r * 2 * d), norm = random(d), freqs = random(n_rot / 2, 0.3f), sinks = random(H);
  for (int64_t coff : {1, 2}) {
    const int64_t width = coff * d;
    auto a = random(n * width), z = random(n * width);
    std::vector<float> ring_a(coff * r * width), ring_z(coff * r * width), entries = random(cap * d);
    backend::CompressorUpdate u{f32(a, width, n), f32(z, width, n), f32(ape, width, r), f32(norm, d, 1),
                                f32(freqs, n_rot / 2, 1), p0, r, coff, d, n_rot, 1e-6f};
    backend::CompressorTensors st{f32(ring_a, width, coff * r), f32(ring_z, width, coff * r), f32(entries, d, cap)};
    EXPECT_EQ(allocs_of_second_call([&] { be_.compressor_update(u, st); }), 0) << "coff " << coff;
  }
  auto qI = random(n * nI * d), g = random(n * nI), keys = random(cap * d);
  std::vector<int32_t> idx(n * top_k);
  EXPECT_EQ(allocs_of_second_call([&] {
              be_.indexer_topk(f32(qI, nI * d, n), f32(g, nI, n), 0.125f, 0.5f, f32(keys, d, cap), p0, r,
                               i32(idx, top_k, n));
            }),
            0);
  auto q = random(n * H * d), kv = random(n * d), ring = random(W * d);
  std::vector<float> o(n * H * d);
  backend::AttentionArgs aa;
  aa.q = f32(q, H * d, n);
  aa.kv = f32(kv, d, n);
  aa.ring = f32(ring, d, W);
  aa.comp = f32(keys, d, cap);
  aa.comp_index = i32(idx, top_k, n);
  aa.sinks = f32(sinks, H, 1);
  aa.o = f32(o, H * d, n);
  aa.p0 = p0;
  aa.n_head = H;
  aa.window = W;
  aa.ratio = r;
  aa.scale = 0.125f;
  EXPECT_EQ(allocs_of_second_call([&] { be_.attention(aa); }), 0) << "CSA";
  aa.comp_index = Tensor();
  EXPECT_EQ(allocs_of_second_call([&] { be_.attention(aa); }), 0) << "HCA";
  aa.comp = Tensor();
  EXPECT_EQ(allocs_of_second_call([&] { be_.attention(aa); }), 0) << "sliding";
  EXPECT_EQ(allocs_of_second_call([&] { be_.kv_store(f32(kv, d, n), p0, f32(ring, d, W)); }), 0);
}

TEST_F(CpuBackendAlloc, RouteAndMoe) {
  const int64_t D = 256, E = 8, K = 3, I = 64, vocab = 20, n = 7;
  auto logits = random(n * E), bias = random(E, 0.1f), x = random(n * D);
  std::vector<int32_t> tokens(n), table(vocab * K), ids(n * K);
  for (auto& t : tokens) t = static_cast<int32_t>(rng_() % vocab);
  for (int64_t v = 0; v < vocab; ++v)
    for (int64_t k = 0; k < K; ++k) table[v * K + k] = static_cast<int32_t>((v + 3 * k) % E);
  std::vector<float> weights(n * K), out(n * D);
  backend::RouteArgs ra;
  ra.logits = f32(logits, E, n);
  ra.tokens = i32(tokens, n, 1);
  ra.ids = i32(ids, K, n);
  ra.weights = f32(weights, K, n);
  ra.k = K;
  ra.scale = 1.5f;
  ra.tid2eid = i32(table, K, vocab);
  EXPECT_EQ(allocs_of_second_call([&] { be_.route(ra); }), 0) << "hash";
  ra.tid2eid = Tensor();
  ra.bias = f32(bias, E, 1);
  EXPECT_EQ(allocs_of_second_call([&] { be_.route(ra); }), 0) << "biased top-k";
  weights[4] = 1.0f;
  for (TensorType type : {TensorType::kQ8_0, TensorType::kQ2_K, TensorType::kIQ2_XXS}) {
    backend::MoeArgs m;
    m.x = f32(x, D, n);
    m.ids = i32(ids, K, n);
    m.weights = f32(weights, K, n);
    m.gate_exps = weight(type, D, I, E);
    m.up_exps = weight(type, D, I, E);
    m.down_exps = weight(TensorType::kQ8_0, I, D, E);
    m.gate_sh = weight(TensorType::kQ8_0, D, I);
    m.up_sh = weight(TensorType::kQ8_0, D, I);
    m.down_sh = weight(TensorType::kQ8_0, I, D);
    m.out = f32(out, D, n);
    m.limit_exp = 7.0f;
    m.limit_sh = 7.0f;
    EXPECT_EQ(allocs_of_second_call([&] { be_.moe(m); }), 0) << tensor_type_name(type);
  }
}

TEST_F(CpuBackendAlloc, DenseOps) {
  const int64_t n = 6, D = 64, hc = 4, nm = (2 + hc) * hc, vocab = 10;
  auto X = random(n * hc * D), mix = random(n * nm), scale = random(3), base = random(nm), w = random(D);
  auto freqs = random(8, 0.3f), xr = random(n * D);
  std::vector<float> x(n * D), post(n * hc), comb(n * hc * hc), X2(n * hc * D), y(n * D);
  std::vector<int32_t> tokens = {1, 3, 5, 7, 9, 0};
  Tensor table = weight(TensorType::kQ8_0, D, vocab);
  EXPECT_EQ(allocs_of_second_call([&] { be_.embed(table, i32(tokens, n, 1), hc, f32(X2, hc * D, n)); }), 0);
  EXPECT_EQ(allocs_of_second_call([&] { be_.rms_norm(f32(xr, D, n), f32(w, D, 1), 1e-6f, f32(y, D, n)); }), 0);
  EXPECT_EQ(allocs_of_second_call([&] { be_.rope(f32(y, 16, n * 4), 4, 100, 16, f32(freqs, 8, 1), false); }), 0);
  EXPECT_EQ(allocs_of_second_call([&] {
              be_.hc_pre(f32(mix, nm, n), f32(scale, 3, 1), f32(base, nm, 1), 1e-6f, 20, f32(X, hc * D, n),
                         f32(x, D, n), f32(post, hc, n), f32(comb, hc * hc, n));
            }),
            0);
  EXPECT_EQ(allocs_of_second_call([&] {
              be_.hc_post(f32(X, hc * D, n), f32(y, D, n), f32(post, hc, n), f32(comb, hc * hc, n),
                          f32(X2, hc * D, n));
            }),
            0);
  EXPECT_EQ(allocs_of_second_call([&] {
              be_.hc_head(f32(mix, hc, n), f32(scale, 3, 1), f32(base, hc, 1), 1e-6f, f32(X, hc * D, n), f32(y, D, n));
            }),
            0);
}

}  // namespace
}  // namespace dsv4::cpu
