// tests/unit/backend_cpu/vec_ops_test.cpp — the elementwise fma kernels equal the scalar reference bit
// for bit: fma_axpy at every level, and weighted_rows (attention's value sum over all heads) against
// one scalar fma_axpy per (head, row) in row order, for head counts and widths that leave partial
// register blocks.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/vec_ops.h"

namespace dsv4::cpu {
namespace {

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& e : v) e = g(rng);
  return v;
}

TEST(VecOps, FmaAxpyEveryLevelEqualsScalar) {
  std::mt19937 rng(3);
  for (const int64_t n : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{100}, int64_t{512}}) {
    const auto x = random_floats(static_cast<size_t>(n), rng), y0 = random_floats(static_cast<size_t>(n), rng);
    std::vector<float> ref = y0;
    fma_axpy_scalar(ref.data(), x.data(), 0.37f, n);
    for (int level = 1; level <= static_cast<int>(detected_simd_level()); ++level) {
      std::vector<float> y = y0;
      select_fma_axpy(static_cast<SimdLevel>(level))(y.data(), x.data(), 0.37f, n);
      EXPECT_EQ(std::memcmp(y.data(), ref.data(), static_cast<size_t>(n) * sizeof(float)), 0) << "n=" << n << " level=" << level;
    }
  }
}

TEST(VecOps, WeightedRowsEqualsFmaAxpyPerRow) {
  if (detected_simd_level() != SimdLevel::kAvx512) GTEST_SKIP() << "no AVX-512";
  std::mt19937 rng(5);
  for (const int64_t d : {int64_t{7}, int64_t{64}, int64_t{100}, int64_t{512}}) {
    for (const int64_t H : {int64_t{1}, int64_t{4}, int64_t{6}, int64_t{64}}) {
      const int64_t nk = 37, stride = d + 3;
      const auto keys = random_floats(static_cast<size_t>(nk * d), rng), w = random_floats(static_cast<size_t>(H * nk), rng);
      std::vector<const float*> rows;
      for (int64_t j = 0; j < nk; ++j) rows.push_back(keys.data() + ((j * 7) % nk) * d);  // any row order
      const auto y0 = random_floats(static_cast<size_t>(H * stride), rng);
      std::vector<float> ref = y0, y = y0;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < nk; ++j) fma_axpy_scalar(ref.data() + h * stride, rows[static_cast<size_t>(j)], w[static_cast<size_t>(h * nk + j)], d);
      weighted_rows_avx512(y.data(), stride, H, rows.data(), nk, w.data(), d);
      EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)), 0) << "d=" << d << " H=" << H;
    }
  }
}

}  // namespace
}  // namespace dsv4::cpu
