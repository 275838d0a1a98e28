// tests/unit/backend_cpu/q8_0_test.cpp — Q8_0 kernels and the Q8_0 activation quantizer: layout
// decoding, quantizer semantics and error, SIMD == scalar bit for bit, vec_dot vs an f64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/quant.h"
#include "numerics/half.h"
#include "unit/backend_cpu/kernel_test_util.h"

namespace dsv4::cpu {
namespace {

using test::same_float;

constexpr int64_t kBlockBytes = 34;

const TypeKernels& q8_0() {
  const TypeKernels* k = type_kernels(TensorType::kQ8_0);
  EXPECT_NE(k, nullptr);
  return *k;
}

TEST(Q8_0, Registered) {
  const TypeKernels& k = q8_0();
  EXPECT_EQ(k.act, ActFormat::kQ8_0);
  EXPECT_NE(k.dequantize_row, nullptr);
  EXPECT_NE(k.quantize_row, nullptr);
  for (int level = 0; level <= static_cast<int>(SimdLevel::kAvx512); ++level) EXPECT_NE(k.vec_dot[level], nullptr);
}

TEST(Q8_0, DequantizeHandBuiltBlock) {
  uint8_t blk[kBlockBytes];
  test::put_u16(blk, 0x3800);  // f16 0.5
  const int8_t qs[32] = {-128, -127, -1, 0, 1, 2, 3, 127, 64, -64, 5, 6, 7, 8, 9, 10,
                         11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, -2};
  std::memcpy(blk + 2, qs, 32);
  float out[32];
  q8_0().dequantize_row(blk, out, 32);
  EXPECT_EQ(out[0], -64.0f);
  EXPECT_EQ(out[1], -63.5f);
  EXPECT_EQ(out[2], -0.5f);
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_EQ(out[7], 63.5f);
  EXPECT_EQ(out[8], 32.0f);
  EXPECT_EQ(out[31], -1.0f);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0.5f * qs[i]);
}

TEST(Q8_0, QuantizeMatchesGgmlReference) {
  // x = i - 10 for i < 32: amax = 21, d = 21/127, q = round_half_away(x * (1/d)).
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i - 10);
  uint8_t blk[kBlockBytes];
  q8_0().quantize_row(x, blk, 32, nullptr);
  uint16_t d16;
  std::memcpy(&d16, blk, 2);
  const float d = 21.0f / 127.0f;
  EXPECT_EQ(d16, f32_to_f16(d));
  const float id = 1.0f / d;
  for (int i = 0; i < 32; ++i) EXPECT_EQ(static_cast<int8_t>(blk[2 + i]), static_cast<int>(std::round(x[i] * id))) << i;
  EXPECT_EQ(static_cast<int8_t>(blk[2 + 31]), 127);
}

TEST(Q8_0, QuantizeZerosAndNonFinite) {
  std::vector<float> x(64, 0.0f);
  x[33] = std::numeric_limits<float>::quiet_NaN();
  x[34] = std::numeric_limits<float>::infinity();
  x[40] = -2.0f;
  std::vector<uint8_t> q(2 * kBlockBytes);
  q8_0().quantize_row(x.data(), q.data(), 64, nullptr);
  std::vector<float> y(64);
  q8_0().dequantize_row(q.data(), y.data(), 64);
  for (int i = 0; i < 64; ++i) {
    EXPECT_TRUE(std::isfinite(y[i]));
    if (i != 40) {
      EXPECT_EQ(y[i], 0.0f) << i;
    }
  }
  EXPECT_NEAR(y[40], -2.0f, 1e-3f);
  // Beyond the f16 range: d is clamped instead of becoming inf.
  std::vector<float> big(32, 1e30f);
  q8_0().quantize_row(big.data(), q.data(), 32, nullptr);
  q8_0().dequantize_row(q.data(), y.data(), 32);
  EXPECT_TRUE(std::isfinite(y[0]));
}

TEST(Q8_0, RoundTripErrorBound) {
  std::mt19937 rng(1);
  const int64_t n = 32 * 256;
  auto x = test::gaussian_row(rng, n, 3.0f);
  std::vector<uint8_t> q(static_cast<size_t>(n / 32 * kBlockBytes));
  std::vector<float> y(static_cast<size_t>(n));
  q8_0().quantize_row(x.data(), q.data(), n, nullptr);
  q8_0().dequantize_row(q.data(), y.data(), n);
  double se = 0, sx = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float d = amax / 127.0f;
    uint16_t d16;
    std::memcpy(&d16, q.data() + b * kBlockBytes, 2);
    const float dq = f16_to_f32(d16);
    // Rounding against the unrounded d (≤ d/2) plus the f16 rounding of d times |q| ≤ 127.
    const double bound = 0.5 * d * (1 + 1e-6) + 127.0 * std::fabs(dq - d) + 1e-7;
    for (int i = 0; i < 32; ++i) {
      const double e = std::fabs(static_cast<double>(y[b * 32 + i]) - x[b * 32 + i]);
      EXPECT_LE(e, bound);
      se += e * e;
      sx += static_cast<double>(x[b * 32 + i]) * x[b * 32 + i];
    }
  }
  EXPECT_LT(std::sqrt(se / sx), 0.01);  // ~ 1/(127·sqrt(12)) relative to amax
}

TEST(Q8_0, ActQuantizer) {
  float x[64];
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i) - 12.5f;  // amax 18.5 at i = 31
  for (int i = 32; i < 64; ++i) x[i] = 0.0f;
  x[40] = std::numeric_limits<float>::quiet_NaN();
  BlockQ8_0Act a[2];
  quantize_act_row(ActFormat::kQ8_0, x, a, 64);
  EXPECT_EQ(a[0].d, 18.5f / 127.0f);
  const float id = 1.0f / a[0].d;
  for (int i = 0; i < 32; ++i) EXPECT_EQ(a[0].qs[i], static_cast<int>(std::round(x[i] * id))) << i;
  EXPECT_EQ(a[0].qs[31], 127);
  EXPECT_EQ(a[0].qs[0], -86);  // round(-12.5 · 127/18.5) = round(-85.81)
  EXPECT_EQ(a[1].d, 0.0f);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(a[1].qs[i], 0);
  EXPECT_EQ(act_row_bytes(ActFormat::kQ8_0, 64), 72);
}

// Random weight rows (full int8 range, -128 included) and activation rows.
struct Rows {
  std::vector<uint8_t> w, a;
};

enum class Pattern { kRandom, kZeros, kExtremes, kAlternating, kMinusOne28, kHugeTiny };

Rows make_rows(std::mt19937& rng, int64_t nb, Pattern p) {
  Rows r;
  r.w = test::random_bytes(rng, static_cast<size_t>(nb * kBlockBytes));
  r.a.resize(static_cast<size_t>(nb * sizeof(BlockQ8_0Act)));
  std::uniform_real_distribution<float> u(0.25f, 4.0f);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* wb = r.w.data() + b * kBlockBytes;
    BlockQ8_0Act ab;
    for (auto& q : ab.qs) q = static_cast<int8_t>(rng() & 0xff);
    test::put_u16(wb, test::random_f16(rng, -12, 4));
    ab.d = u(rng) * ((rng() & 1) ? 1.0f : -1.0f) * 0.01f;
    switch (p) {
      case Pattern::kRandom: break;
      case Pattern::kZeros: std::memset(wb + 2, 0, 32); std::memset(ab.qs, 0, 32); break;
      case Pattern::kExtremes:
        for (int i = 0; i < 32; ++i) { wb[2 + i] = (i & 1) ? 0x80 : 0x7f; ab.qs[i] = (i & 2) ? -128 : 127; }
        break;
      case Pattern::kAlternating:
        for (int i = 0; i < 32; ++i) { wb[2 + i] = static_cast<uint8_t>((i & 1) ? -100 : 100); ab.qs[i] = 100; }
        break;
      case Pattern::kMinusOne28:
        for (int i = 0; i < 32; ++i) { wb[2 + i] = 0x80; ab.qs[i] = -128; }
        break;
      case Pattern::kHugeTiny:
        test::put_u16(wb, (b & 1) ? 0x7bff : 0x0001);  // 65504 or the smallest subnormal
        ab.d = (b & 2) ? 1e30f : 1e-30f;
        break;
    }
    std::memcpy(r.a.data() + b * sizeof(BlockQ8_0Act), &ab, sizeof(ab));
  }
  return r;
}

TEST(Q8_0, SimdMatchesScalarBitForBit) {
  const TypeKernels& k = q8_0();
  std::mt19937 rng(7);
  std::vector<int64_t> counts;
  for (int64_t nb = 1; nb <= 70; ++nb) counts.push_back(nb);
  for (int64_t nb : {96, 100, 128, 129, 255, 256, 1000}) counts.push_back(nb);
  int checked = 0;
  for (Pattern p : {Pattern::kRandom, Pattern::kZeros, Pattern::kExtremes, Pattern::kAlternating,
                    Pattern::kMinusOne28, Pattern::kHugeTiny}) {
    for (int64_t nb : counts) {
      for (int rep = 0; rep < (p == Pattern::kRandom ? 4 : 1); ++rep) {
        const Rows r = make_rows(rng, nb, p);
        const float ref = k.vec_dot[0](nb * 32, r.w.data(), r.a.data());
        for (SimdLevel level : test::runnable_simd_levels()) {
          const float got = select_vec_dot(k, level)(nb * 32, r.w.data(), r.a.data());
          ASSERT_TRUE(same_float(ref, got)) << "level " << simd_level_name(level) << " nb " << nb << " pattern "
                                            << static_cast<int>(p) << ": " << ref << " vs " << got;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 500);
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

// Tile kernels (matmul) on raw rows of every pattern: kMaxTileRows weight rows and kMaxTileCols
// activation rows of one pattern each (activation quants in quantize_act's [-127, 127]), every nr x nc,
// bit-identical to the scalar vec_dot.
TEST(Q8_0, TileMatchesScalarOnRawRows) {
  const TypeKernels& k = q8_0();
  std::mt19937 rng(13);
  for (Pattern p : {Pattern::kRandom, Pattern::kZeros, Pattern::kExtremes, Pattern::kAlternating,
                    Pattern::kMinusOne28, Pattern::kHugeTiny}) {
    for (int64_t nb : {1, 7, 8, 9, 17, 128}) {
      std::vector<uint8_t> w, a;
      // Up to kMaxTileColsAny columns: the AVX2 tile takes 16 per call (two passes of 8).
      for (int row = 0; row < std::max(kMaxTileRows, kMaxTileColsAny); ++row) {
        const Rows r = make_rows(rng, nb, p);
        if (row < kMaxTileRows) w.insert(w.end(), r.w.begin(), r.w.end());
        if (row < kMaxTileColsAny) a.insert(a.end(), r.a.begin(), r.a.end());
      }
      // Activations as quantize_act writes them (quant.h VecDotTileFn): -128 becomes -127, the
      // extreme the AVX2 tile must still get right; weights keep the full int8 range.
      for (size_t off = 0; off + sizeof(BlockQ8_0Act) <= a.size(); off += sizeof(BlockQ8_0Act))
        for (size_t i = 4; i < sizeof(BlockQ8_0Act); ++i)
          if (a[off + i] == 0x80) a[off + i] = 0x81;
      const int64_t w_stride = nb * kBlockBytes, a_stride = nb * static_cast<int64_t>(sizeof(BlockQ8_0Act));
      EXPECT_GE(test::expect_tiles_match_scalar(k, nb * 32, w.data(), w_stride, a.data(), a_stride, kMaxTileColsAny,
                                                "pattern " + std::to_string(static_cast<int>(p)), kMaxTileRows),
                1);
    }
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

TEST(Q8_0, SimdMatchesScalarOnQuantizedRows) {
  const TypeKernels& k = q8_0();
  std::mt19937 rng(11);
  for (int64_t n : {32, 64, 512, 4096, 4096 + 32 * 7, 7168}) {
    auto wx = test::gaussian_row(rng, n, 0.02f);
    auto ax = test::gaussian_row(rng, n, 2.0f);
    std::vector<uint8_t> w(static_cast<size_t>(n / 32 * kBlockBytes));
    std::vector<uint8_t> a(static_cast<size_t>(act_row_bytes(k.act, n)));
    k.quantize_row(wx.data(), w.data(), n, nullptr);
    quantize_act_row(k.act, ax.data(), a.data(), n);
    const float ref = k.vec_dot[0](n, w.data(), a.data());
    for (SimdLevel level : test::runnable_simd_levels())
      EXPECT_TRUE(same_float(ref, select_vec_dot(k, level)(n, w.data(), a.data()))) << n;
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

TEST(Q8_0, VecDotMatchesF64Reference) {
  const TypeKernels& k = q8_0();
  std::mt19937 rng(3);
  for (int64_t nb : {1, 5, 32, 33, 128, 224}) {
    const Rows r = make_rows(rng, nb, Pattern::kRandom);
    const int64_t n = nb * 32;
    std::vector<float> wd(static_cast<size_t>(n));
    k.dequantize_row(r.w.data(), wd.data(), n);
    double ref = 0, mag = 0;
    for (int64_t b = 0; b < nb; ++b) {
      BlockQ8_0Act ab;
      std::memcpy(&ab, r.a.data() + b * sizeof(ab), sizeof(ab));
      for (int i = 0; i < 32; ++i) {
        const double t = static_cast<double>(wd[b * 32 + i]) * (static_cast<double>(ab.d) * ab.qs[i]);
        ref += t;
        mag += std::fabs(t);
      }
    }
    // Per block: two roundings of the scale product and one of the int->float (≤ 3 ulp), then at most
    // nb/32 + 5 additions of partials each ≤ 1/2 ulp of a running sum bounded by mag.
    const double tol = (3.0 + static_cast<double>(nb) / 32.0 + 5.0) * std::ldexp(mag, -23);
    for (SimdLevel level : test::runnable_simd_levels())
      EXPECT_NEAR(select_vec_dot(k, level)(n, r.w.data(), r.a.data()), ref, tol) << nb;
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

}  // namespace
}  // namespace dsv4::cpu
