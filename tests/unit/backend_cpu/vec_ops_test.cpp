// tests/unit/backend_cpu/vec_ops_test.cpp — the elementwise fma kernels equal the scalar reference bit
// for bit: fma_axpy at every level, and weighted_rows (attention's value sum over all heads) against
// one scalar fma_axpy per (head, row) in row order at every level the machine has, for head counts and
// widths that leave partial register blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/vec_ops.h"
#include "unit/backend_cpu/kernel_test_util.h"

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
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

TEST(VecOps, WeightedRowsEqualsFmaAxpyPerRow) {
  std::mt19937 rng(5);
  for (int level = 1; level <= static_cast<int>(detected_simd_level()); ++level) {
    const WeightedRowsFn weighted = select_weighted_rows(static_cast<SimdLevel>(level));
    ASSERT_NE(weighted, nullptr) << "level " << level;
    for (const int64_t d : {int64_t{7}, int64_t{16}, int64_t{21}, int64_t{64}, int64_t{100}, int64_t{512}}) {
      for (const int64_t H : {int64_t{1}, int64_t{4}, int64_t{6}, int64_t{8}, int64_t{64}}) {
        const int64_t nk = 37, stride = d + 3;
        const auto keys = random_floats(static_cast<size_t>(nk * d), rng), w = random_floats(static_cast<size_t>(H * nk), rng);
        std::vector<const float*> rows;
        for (int64_t j = 0; j < nk; ++j) rows.push_back(keys.data() + ((j * 7) % nk) * d);  // any row order
        const auto y0 = random_floats(static_cast<size_t>(H * stride), rng);
        std::vector<float> ref = y0, y = y0;
        for (int64_t h = 0; h < H; ++h)
          for (int64_t j = 0; j < nk; ++j) fma_axpy_scalar(ref.data() + h * stride, rows[static_cast<size_t>(j)], w[static_cast<size_t>(h * nk + j)], d);
        weighted(y.data(), stride, H, rows.data(), nk, w.data(), d);
        // Whole rows compared: the columns between d and the stride must be untouched.
        EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)), 0) << "d=" << d << " H=" << H << " level=" << level;
      }
    }
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

}  // namespace
}  // namespace dsv4::cpu

namespace dsv4::cpu {
namespace {

// Every float class through the clamp, the exp range limits (±88.72, −103.97), subnormal results,
// signed zeros, infinities and NaNs, plus random values: the AVX2 and AVX-512 forms give the scalar bits
// (NaN results compared as NaN: their sign and payload follow x86 operand order, which the compiler
// picks for commutative operations). Lengths 1000, 13 and 7 leave tails of every kind.
TEST(VecOps, SwigluClampEqualsScalar) {
  struct Form {
    SimdLevel level;
    SwigluClampFn fn;
  };
  std::vector<Form> forms;
  for (const Form f : {Form{SimdLevel::kAvx2, swiglu_clamp_avx2}, Form{SimdLevel::kAvx512, swiglu_clamp_avx512}})
    if (static_cast<int>(f.level) <= static_cast<int>(detected_simd_level())) forms.push_back(f);
  if (forms.empty()) GTEST_SKIP() << "no AVX2";
  std::vector<float> g = {0.0f, -0.0f, 1.0f, -1.0f, 9.99f, 10.0f, 10.01f, -88.7f, -88.73f, -89.0f, 103.9f, 104.0f,
                          -103.97f, -104.0f, 1e-40f, -1e-40f, 3.4e38f, -3.4e38f, __builtin_inff(), -__builtin_inff(),
                          __builtin_nanf(""), -__builtin_nanf(""), 0.5f, -20.0f, 87.0f, -150.0f};
  std::mt19937 rng(9);
  std::normal_distribution<float> wide(0.0f, 30.0f);
  while (g.size() < 1000) g.push_back(wide(rng));
  std::vector<float> u(g.rbegin(), g.rend());
  for (const float limit : {10.0f, 7.0f, 1e30f}) {
    for (const int64_t n : {static_cast<int64_t>(g.size()), int64_t{13}, int64_t{7}}) {
      for (const Form& form : forms) {
        std::vector<float> ref(static_cast<size_t>(n)), h(static_cast<size_t>(n), -1.0f);
        swiglu_clamp_scalar(g.data(), u.data(), n, limit, ref.data());
        form.fn(g.data(), u.data(), n, limit, h.data());
        for (int64_t i = 0; i < n; ++i) {
          const float hv = h[static_cast<size_t>(i)], rv = ref[static_cast<size_t>(i)];
          if (std::isnan(rv)) {  // a NaN's sign and payload follow the operand order the compiler picked
            ASSERT_TRUE(std::isnan(hv)) << "g=" << g[static_cast<size_t>(i)] << " u=" << u[static_cast<size_t>(i)];
            continue;
          }
          uint32_t a, b;
          std::memcpy(&a, &hv, 4);
          std::memcpy(&b, &rv, 4);
          ASSERT_EQ(a, b) << simd_level_name(form.level) << " limit=" << limit << " g=" << g[static_cast<size_t>(i)]
                          << " u=" << u[static_cast<size_t>(i)];
        }
      }
    }
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

}  // namespace
}  // namespace dsv4::cpu
