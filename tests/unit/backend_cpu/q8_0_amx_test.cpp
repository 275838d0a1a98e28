// tests/unit/backend_cpu/q8_0_amx_test.cpp — the AMX tile matrix × matrix (q8_0_amx.cpp) equals the
// scalar vec_dot bit for bit: raw blocks with every int8 value (−128 included) on both sides, row and
// column counts that leave partial tiles and groups, 1-3 threads, matmul and matmul_batch. Skipped
// (and said so) on CPUs or kernels without AMX.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/q8_0.h"
#include "base/half.h"

namespace dsv4::cpu {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// rows × n Q8_0 weights and cols Q8_0 activation rows, every byte random (qs cover −128..127), scales
// finite and of mixed magnitude.
struct RawProblem {
  RawProblem(int64_t n_, int64_t rows_, int64_t cols_, std::mt19937& rng) : n(n_), rows(rows_), cols(cols_) {
    const int64_t nb = n / 32;
    w.resize(static_cast<size_t>(rows * nb * sizeof(BlockQ8_0)));
    act.resize(static_cast<size_t>(cols * nb * sizeof(BlockQ8_0Act)));
    std::uniform_real_distribution<float> scale(-4.0f, 4.0f);
    for (int64_t i = 0; i < rows * nb; ++i) {
      BlockQ8_0 b;
      b.d = dsv4::f32_to_f16(std::ldexp(scale(rng), static_cast<int>(rng() % 9) - 12));
      for (auto& q : b.qs) q = static_cast<int8_t>(rng());
      std::memcpy(w.data() + i * sizeof(BlockQ8_0), &b, sizeof(b));
    }
    for (int64_t i = 0; i < cols * nb; ++i) {
      BlockQ8_0Act b;
      b.d = std::ldexp(scale(rng), static_cast<int>(rng() % 9) - 10);
      for (auto& q : b.qs) q = static_cast<int8_t>(rng());
      std::memcpy(act.data() + i * sizeof(BlockQ8_0Act), &b, sizeof(b));
    }
  }
  int64_t w_row() const { return n / 32 * static_cast<int64_t>(sizeof(BlockQ8_0)); }
  int64_t a_row() const { return n / 32 * static_cast<int64_t>(sizeof(BlockQ8_0Act)); }
  float ref(int64_t r, int64_t c) const {
    return vec_dot_q8_0_scalar(n, w.data() + r * w_row(), act.data() + c * a_row());
  }
  int64_t n, rows, cols;
  std::vector<uint8_t> w, act;
};

bool amx_ready(const TypeKernels** k) {
  *k = type_kernels(TensorType::kQ8_0);
  return amx_int8_usable() && *k != nullptr && (*k)->amx.matmul != nullptr;
}

TEST(Q8_0Amx, MatmulEqualsScalarOnRawBlocks) {
  const TypeKernels* k = nullptr;
  if (!amx_ready(&k)) GTEST_SKIP() << "no AMX int8 on this CPU/OS";
  std::mt19937 rng(41);
  for (const int64_t n : {int64_t{32}, int64_t{64}, int64_t{96}, int64_t{32 * 37}, int64_t{4096}}) {
    for (const int64_t rows : {int64_t{1}, int64_t{16}, int64_t{17}, int64_t{37}}) {
      const RawProblem p(n, rows, 33, rng);
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        CpuContext ctx;
        ctx.pool = &pool;
        ctx.use_amx = true;
        for (const int64_t nc : {kAmxMinCols, int64_t{16}, int64_t{17}, p.cols}) {
          std::vector<float> y(static_cast<size_t>(rows * nc), -1.0f);
          ASSERT_TRUE(matmul_quantized(ctx, *k, p.w.data(), rows, n, p.act.data(), nc, y.data()).ok());
          for (int64_t c = 0; c < nc; ++c)
            for (int64_t r = 0; r < rows; ++r)
              ASSERT_EQ(bits(y[static_cast<size_t>(c * rows + r)]), bits(p.ref(r, c)))
                  << "n=" << n << " rows=" << rows << " cols=" << nc << " threads=" << threads << " r=" << r
                  << " c=" << c;
        }
      }
    }
  }
}

// Float activations through matmul (quantized by the reference quantizer), and matmul_batch with a
// shared and a strided input and interleaved outputs: the same bits with and without AMX.
TEST(Q8_0Amx, MatmulAndBatchEqualVectorKernels) {
  const TypeKernels* k = nullptr;
  if (!amx_ready(&k)) GTEST_SKIP() << "no AMX int8 on this CPU/OS";
  std::mt19937 rng(43);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int64_t n = 512, cols = 21, rows_a = 29, rows_b = 40;
  auto quantized = [&](int64_t rows) {
    std::vector<uint8_t> w(static_cast<size_t>(rows * tensor_row_bytes(TensorType::kQ8_0, n)));
    std::vector<float> wf(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& e : wf) e = g(rng);
      k->quantize_row(wf.data(), w.data() + r * tensor_row_bytes(TensorType::kQ8_0, n), n, nullptr);
    }
    return w;
  };
  const std::vector<uint8_t> wa = quantized(rows_a), wb = quantized(rows_b);
  std::vector<float> x(static_cast<size_t>(cols * 2 * n));  // column c: two halves of n floats
  for (auto& e : x) e = g(rng);
  auto run = [&](bool amx, int threads) {
    ThreadPool pool(threads);
    CpuContext ctx;
    ctx.pool = &pool;
    ctx.use_amx = amx;
    const int64_t total = rows_a + 2 * rows_b;
    std::vector<float> y(static_cast<size_t>(total * cols), -1.0f);
    const std::vector<MatmulJob> jobs = {
        {TensorType::kQ8_0, wa.data(), rows_a, n, x.data(), cols, y.data(), 2 * n, total},
        {TensorType::kQ8_0, wb.data(), rows_b, n, x.data(), cols, y.data() + rows_a, 2 * n, total},  // shares x
        {TensorType::kQ8_0, wb.data(), rows_b, n, x.data() + n, cols, y.data() + rows_a + rows_b, 2 * n, total},
    };
    EXPECT_TRUE(matmul_batch(ctx, jobs).ok());
    std::vector<float> single(static_cast<size_t>(rows_b * cols));
    std::vector<float> xs(static_cast<size_t>(cols * n));
    for (int64_t c = 0; c < cols; ++c) std::memcpy(&xs[static_cast<size_t>(c * n)], &x[static_cast<size_t>(c * 2 * n + n)], n * 4);
    EXPECT_TRUE(matmul(ctx, TensorType::kQ8_0, wb.data(), rows_b, n, xs.data(), cols, single.data()).ok());
    y.insert(y.end(), single.begin(), single.end());
    return y;
  };
  const std::vector<float> ref = run(false, 1);
  for (int threads : {1, 2, 3}) {
    const std::vector<float> y = run(true, threads);
    ASSERT_EQ(y.size(), ref.size());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(bits(y[i]), bits(ref[i])) << "threads=" << threads << " i=" << i;
  }
}

}  // namespace
}  // namespace dsv4::cpu
