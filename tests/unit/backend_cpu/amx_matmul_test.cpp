// tests/unit/backend_cpu/amx_matmul_test.cpp — every AMX tile matrix × matrix (q8_0_amx.cpp,
// k_quants_amx.cpp) equals the scalar vec_dot bit for bit: raw blocks with every int8 value (−128
// included) on both sides, row and column counts that leave partial tiles and groups, 1-3 threads,
// matmul and matmul_batch. Skipped (and said so) on CPUs without AMX.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/q8_0.h"
#include "backend/cpu/quant.h"
#include "numerics/half.h"

namespace dsv4::cpu {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// rows × n weights of an AMX type and cols activation rows of its format, every quant byte random
// (int8 activations cover −128..127, Q2_K scales and quants every nibble and crumb, bsums any int16),
// scales finite and of mixed magnitude.
struct RawProblem {
  RawProblem(const TypeKernels& k_, int64_t n_, int64_t rows_, int64_t cols_, std::mt19937& rng)
      : k(k_), n(n_), rows(rows_), cols(cols_), w_row(tensor_row_bytes(k.type, n)), a_row(act_row_bytes(k.act, n)) {
    w.resize(static_cast<size_t>(rows * w_row));
    act.resize(static_cast<size_t>(cols * a_row));
    for (auto& byte : w) byte = static_cast<uint8_t>(rng());
    for (auto& byte : act) byte = static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> scale(-4.0f, 4.0f);
    auto f16 = [&](int lo) { return dsv4::f32_to_f16(std::ldexp(scale(rng), static_cast<int>(rng() % 9) + lo)); };
    auto put = [](uint8_t* dst, auto v) { std::memcpy(dst, &v, sizeof(v)); };
    if (k.type == TensorType::kQ8_0) {
      for (int64_t i = 0; i < rows * n / 32; ++i) put(w.data() + i * sizeof(BlockQ8_0), f16(-12));
      for (int64_t i = 0; i < cols * n / 32; ++i)
        put(act.data() + i * sizeof(BlockQ8_0Act), std::ldexp(scale(rng), static_cast<int>(rng() % 9) - 10));
    } else {  // Q2_K weights (d, dmin at byte 80), Q8_K activations (d at byte 0)
      for (int64_t i = 0; i < rows * n / 256; ++i) {
        put(w.data() + i * 84 + 80, f16(-10));
        put(w.data() + i * 84 + 82, f16(-12));
      }
      for (int64_t i = 0; i < cols * n / 256; ++i)
        put(act.data() + i * sizeof(BlockQ8_K), std::ldexp(scale(rng), static_cast<int>(rng() % 9) - 10));
    }
  }
  float ref(int64_t r, int64_t c) const { return k.vec_dot[0](n, w.data() + r * w_row, act.data() + c * a_row); }
  const TypeKernels& k;
  int64_t n, rows, cols, w_row, a_row;
  std::vector<uint8_t> w, act;
};

// The types with an AMX kernel, or none where the CPU/OS has no AMX.
std::vector<const TypeKernels*> amx_types() {
  std::vector<const TypeKernels*> out;
  if (!amx_int8_usable()) return out;
  for (const TypeKernels* k : all_type_kernels())
    if (k->amx.matmul != nullptr) out.push_back(k);
  return out;
}

TEST(AmxMatmul, EqualsScalarOnRawBlocks) {
  const auto types = amx_types();
  if (types.empty()) GTEST_SKIP() << "no AMX int8 on this CPU/OS";
  EXPECT_GE(types.size(), 2u);  // Q8_0, Q2_K
  std::mt19937 rng(41);
  for (const TypeKernels* k : types) {
    const int64_t block = k->act == ActFormat::kQ8_K ? 256 : 32;
    for (const int64_t blocks : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{37}}) {
      const int64_t n = blocks * block;
      for (const int64_t rows : {int64_t{1}, int64_t{16}, int64_t{17}, int64_t{37}}) {
        const RawProblem p(*k, n, rows, 33, rng);
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
                    << tensor_type_name(k->type) << " n=" << n << " rows=" << rows << " cols=" << nc
                    << " threads=" << threads << " r=" << r << " c=" << c;
          }
        }
      }
    }
  }
}

// Float activations through matmul (quantized by the reference quantizer), and matmul_batch with a
// shared and a strided input and interleaved outputs: the same bits with and without AMX.
TEST(AmxMatmul, MatmulAndBatchEqualVectorKernels) {
  const auto types = amx_types();
  if (types.empty()) GTEST_SKIP() << "no AMX int8 on this CPU/OS";
  std::mt19937 rng(43);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (const TypeKernels* k : types) {
    const TensorType type = k->type;
    const int64_t n = 512, cols = 21, rows_a = 29, rows_b = 40, rb = tensor_row_bytes(type, n);
    auto quantized = [&](int64_t rows) {
      std::vector<uint8_t> w(static_cast<size_t>(rows * rb));
      std::vector<float> wf(static_cast<size_t>(n));
      for (int64_t r = 0; r < rows; ++r) {
        for (auto& e : wf) e = g(rng);
        k->quantize_row(wf.data(), w.data() + r * rb, n, nullptr);
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
          {type, wa.data(), rows_a, n, x.data(), cols, y.data(), 2 * n, total},
          {type, wb.data(), rows_b, n, x.data(), cols, y.data() + rows_a, 2 * n, total},  // shares x
          {type, wb.data(), rows_b, n, x.data() + n, cols, y.data() + rows_a + rows_b, 2 * n, total},
      };
      EXPECT_TRUE(matmul_batch(ctx, jobs).ok());
      std::vector<float> single(static_cast<size_t>(rows_b * cols));
      std::vector<float> xs(static_cast<size_t>(cols * n));
      for (int64_t c = 0; c < cols; ++c)
        std::memcpy(&xs[static_cast<size_t>(c * n)], &x[static_cast<size_t>(c * 2 * n + n)], n * sizeof(float));
      EXPECT_TRUE(matmul(ctx, type, wb.data(), rows_b, n, xs.data(), cols, single.data()).ok());
      y.insert(y.end(), single.begin(), single.end());
      return y;
    };
    const std::vector<float> ref = run(false, 1);
    for (int threads : {1, 2, 3}) {
      const std::vector<float> y = run(true, threads);
      ASSERT_EQ(y.size(), ref.size());
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_EQ(bits(y[i]), bits(ref[i])) << tensor_type_name(type) << " threads=" << threads << " i=" << i;
    }
  }
}

}  // namespace
}  // namespace dsv4::cpu
