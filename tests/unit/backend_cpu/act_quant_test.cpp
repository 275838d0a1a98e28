// Activation quantizers: the AVX2 and AVX-512 forms (quantize_act_row picks by SIMD level) give the
// scalar reference's bytes for random rows, exact .5 ties, non-finite values, zero blocks and repeated
// maxima. A level the CPU lacks is skipped.
#include "backend/cpu/act_quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/quant.h"

namespace dsv4::cpu {
namespace {

std::vector<std::vector<float>> act_rows() {
  std::mt19937 rng(31);
  std::vector<std::vector<float>> rows;
  for (float scale : {1e-30f, 1e-3f, 1.0f, 3e4f}) {
    std::normal_distribution<float> g(0.0f, scale);
    std::vector<float> r(1024);
    for (auto& v : r) v = g(rng);
    rows.push_back(r);
  }
  // .5 ties after scaling: amax 127 gives id = 1 and d = 1 (Q8_0), iscale = -1 (Q8_K).
  std::vector<float> ties(1024);
  for (size_t i = 0; i < ties.size(); ++i) ties[i] = (i % 32 == 0) ? 127.0f : static_cast<float>(i % 255) * 0.5f - 63.5f;
  rows.push_back(ties);
  // Non-finite values, a zero block, a repeated maximum of both signs, negative maxima.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> odd(1024, 0.0f);
  for (size_t i = 256; i < 512; ++i) odd[i] = (i % 7 == 0) ? -3.0f : 3.0f;
  odd[300] = nan;
  odd[301] = inf;
  odd[302] = -inf;
  for (size_t i = 512; i < 768; ++i) odd[i] = -static_cast<float>(i % 17);
  for (size_t i = 768; i < 1024; ++i) odd[i] = std::ldexp(1.0f, -140) * static_cast<float>(i % 5);  // subnormals
  rows.push_back(odd);
  return rows;
}

using QuantizeFn = void (*)(const float*, void*, int64_t);

// The SIMD form writes the reference's bytes for every row of act_rows().
void expect_same_bytes(ActFormat format, QuantizeFn reference, QuantizeFn simd) {
  for (const auto& r : act_rows()) {
    const int64_t n = static_cast<int64_t>(r.size());
    std::vector<uint8_t> a(static_cast<size_t>(act_row_bytes(format, n))), b(a.size());
    reference(r.data(), a.data(), n);
    simd(r.data(), b.data(), n);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size()));
  }
}

TEST(ActQuant, Avx2MatchesScalarQ8_0) {
  if (static_cast<int>(detected_simd_level()) < static_cast<int>(SimdLevel::kAvx2)) GTEST_SKIP() << "no AVX2";
  expect_same_bytes(ActFormat::kQ8_0, quantize_act_q8_0, quantize_act_q8_0_avx2);
}

TEST(ActQuant, Avx2MatchesScalarQ8_K) {
  if (static_cast<int>(detected_simd_level()) < static_cast<int>(SimdLevel::kAvx2)) GTEST_SKIP() << "no AVX2";
  expect_same_bytes(ActFormat::kQ8_K, quantize_act_q8_k, quantize_act_q8_k_avx2);
}

TEST(ActQuant, Avx512MatchesScalarQ8_0) {
  if (!has_avx512(detected_simd_level())) GTEST_SKIP() << "no AVX-512";
  expect_same_bytes(ActFormat::kQ8_0, quantize_act_q8_0, quantize_act_q8_0_avx512);
}

TEST(ActQuant, Avx512MatchesScalarQ8_K) {
  if (!has_avx512(detected_simd_level())) GTEST_SKIP() << "no AVX-512";
  expect_same_bytes(ActFormat::kQ8_K, quantize_act_q8_k, quantize_act_q8_k_avx512);
}

// Q8_0 activation quants lie in [-127, 127] for every row (NaN, ±inf, ties, subnormals included), at
// every level: the AVX2 Q8_0 and MXFP4 tiles (q8_0_avx2.cpp vec_dot_tile8_q8_0_avx2, mxfp4_avx2.cpp
// mxfp4_vec_dot_tile8_avx2) negate them with vpsignb, which would wrap -128.
TEST(ActQuant, Q8_0QuantsNeverMinus128) {
  std::vector<std::vector<float>> rows = act_rows();
  std::vector<float> extremes(1024);
  for (size_t i = 0; i < extremes.size(); ++i) extremes[i] = (i % 3 == 0) ? -3.4e38f : (i % 3 == 1) ? 1e-45f : -1.0f;
  rows.push_back(extremes);
  int checked = 0;
  for (const auto& r : rows) {
    const int64_t n = static_cast<int64_t>(r.size());
    std::vector<uint8_t> a(static_cast<size_t>(act_row_bytes(ActFormat::kQ8_0, n)));
    for (int level = 0; level <= static_cast<int>(detected_simd_level()); ++level) {
      quantize_act_row(ActFormat::kQ8_0, r.data(), a.data(), n, static_cast<SimdLevel>(level));
      for (int64_t b = 0; b < n / 32; ++b) {
        BlockQ8_0Act blk;
        std::memcpy(&blk, a.data() + b * sizeof(BlockQ8_0Act), sizeof blk);
        for (int8_t q : blk.qs) {
          ASSERT_GE(q, -127) << "row of " << n << ", block " << b;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 1024 * static_cast<int>(rows.size()) * (static_cast<int>(detected_simd_level()) + 1));
}

}  // namespace
}  // namespace dsv4::cpu
