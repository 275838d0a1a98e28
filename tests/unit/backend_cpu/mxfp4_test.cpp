// tests/unit/backend_cpu/mxfp4_test.cpp — MXFP4 (type 39): layout, dequantize, quantizer, vec_dot at
// every SIMD level (bit-identical to the scalar reference) and against an f64 dot.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/mxfp4.h"
#include "backend/cpu/quant.h"
#include "base/cpu_features.h"
#include "unit/backend_cpu/iq_test_util.h"
#include "unit/backend_cpu/kernel_test_util.h"

namespace dsv4::cpu {
namespace {

using iqtest::bits_of;

const TypeKernels& kernels() {
  const TypeKernels* k = type_kernels(TensorType::kMXFP4);
  EXPECT_NE(k, nullptr);
  return *k;
}

std::vector<BlockMxfp4> random_blocks(std::mt19937& rng, int64_t nb, int e_lo, int e_hi) {
  std::uniform_int_distribution<int> eb(e_lo, e_hi), byte(0, 255);
  std::vector<BlockMxfp4> v(static_cast<size_t>(nb));
  for (auto& b : v) {
    b.e = static_cast<uint8_t>(eb(rng));
    for (auto& q : b.qs) q = static_cast<uint8_t>(byte(rng));
  }
  return v;
}

std::vector<BlockQ8_0Act> random_act(std::mt19937& rng, int64_t nb, float d_lo, float d_hi) {
  std::uniform_real_distribution<float> dd(d_lo, d_hi);
  std::uniform_int_distribution<int> q(-128, 127);
  std::vector<BlockQ8_0Act> v(static_cast<size_t>(nb));
  for (auto& b : v) {
    b.d = dd(rng);
    for (auto& x : b.qs) x = static_cast<int8_t>(q(rng));
  }
  return v;
}

std::vector<float> dequant(const void* blocks, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  kernels().dequantize_row(blocks, out.data(), n);
  return out;
}

std::vector<float> act_values(const std::vector<BlockQ8_0Act>& a) {
  std::vector<float> v;
  for (const auto& b : a)
    for (int8_t q : b.qs) v.push_back(b.d * static_cast<float>(q));
  return v;
}

TEST(Mxfp4, Registered) {
  const TypeKernels& k = kernels();
  EXPECT_EQ(k.act, ActFormat::kQ8_0);
  EXPECT_NE(k.dequantize_row, nullptr);
  EXPECT_NE(k.quantize_row, nullptr);
  for (auto* f : k.vec_dot) EXPECT_NE(f, nullptr);  // a VBMI kernel, and a plain AVX-512 one below it
  EXPECT_NE(k.vec_dot[static_cast<int>(SimdLevel::kAvx512)], k.vec_dot[static_cast<int>(SimdLevel::kAvx512Vbmi)]);
}

TEST(Mxfp4, E8m0Half) {
  EXPECT_EQ(e8m0_half(0), std::ldexp(1.0f, -128));
  EXPECT_EQ(e8m0_half(1), std::ldexp(1.0f, -127));
  EXPECT_EQ(e8m0_half(2), std::ldexp(1.0f, -126));
  EXPECT_EQ(e8m0_half(127), 0.5f);
  EXPECT_EQ(e8m0_half(128), 1.0f);
  EXPECT_EQ(e8m0_half(254), std::ldexp(1.0f, 126));
  EXPECT_EQ(e8m0_half(255), std::ldexp(1.0f, 127));
}

TEST(Mxfp4, HandBuiltBlock) {
  // e = 127 -> half scale 0.5: element values are the plain E2M1 values.
  BlockMxfp4 b{};
  b.e = 127;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
  const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  const auto y = dequant(&b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], e2m1[j]) << j;
    EXPECT_EQ(y[16 + j], e2m1[15 - j]) << j;
  }
  // e = 130 -> scale 4: nibble 7 (12) -> 48, nibble 15 (-12) -> -48.
  b.e = 130;
  b.qs[0] = 0xf7;
  const auto z = dequant(&b, 32);
  EXPECT_EQ(z[0], 48.0f);
  EXPECT_EQ(z[16], -48.0f);
  // e = 0: 2^-128 * 12 (subnormal, exact).
  b.e = 0;
  const auto s = dequant(&b, 32);
  EXPECT_EQ(s[0], std::ldexp(12.0f, -128));
}

TEST(Mxfp4, QuantizeRepresentableRoundTripsExactly) {
  std::mt19937 rng(1);
  for (int rep = 0; rep < 20; ++rep) {
    const int64_t nb = 64;
    auto blocks = random_blocks(rng, nb, 10, 240);
    const auto x = dequant(blocks.data(), 32 * nb);
    std::vector<BlockMxfp4> q(static_cast<size_t>(nb));
    kernels().quantize_row(x.data(), q.data(), 32 * nb, nullptr);
    const auto y = dequant(q.data(), 32 * nb);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << rep << " " << i;
  }
}

TEST(Mxfp4, QuantizeGaussianError) {
  std::mt19937 rng(2);
  const int64_t n = 32 * 1024;
  const auto x = iqtest::gaussian_row(rng, n, 0.02f);
  std::vector<BlockMxfp4> q(n / 32);
  kernels().quantize_row(x.data(), q.data(), n, nullptr);
  const auto y = dequant(q.data(), n);
  double se = 0, sx = 0;
  for (int64_t i = 0; i < n; ++i) {
    se += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    sx += double(x[i]) * x[i];
  }
  const double rel = std::sqrt(se / sx);
  EXPECT_LT(rel, 0.12);
  EXPECT_GT(rel, 0.02);
}

TEST(Mxfp4, ImportanceNeverHurtsWeightedError) {
  std::mt19937 rng(3);
  const int64_t n = 32 * 512;
  const auto x = iqtest::gaussian_row(rng, n);
  std::vector<float> imp(n);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (auto& v : imp) v = u(rng) < 0.1f ? 50.0f : 0.1f;
  std::vector<BlockMxfp4> qa(n / 32), qb(n / 32);
  kernels().quantize_row(x.data(), qa.data(), n, imp.data());
  kernels().quantize_row(x.data(), qb.data(), n, nullptr);
  const auto ya = dequant(qa.data(), n), yb = dequant(qb.data(), n);
  for (int64_t b = 0; b < n / 32; ++b) {
    double ea = 0, eb = 0;
    for (int j = 0; j < 32; ++j) {
      const int64_t i = 32 * b + j;
      ea += imp[i] * (double(x[i]) - ya[i]) * (double(x[i]) - ya[i]);
      eb += imp[i] * (double(x[i]) - yb[i]) * (double(x[i]) - yb[i]);
    }
    ASSERT_LE(ea, eb) << b;
  }
}

TEST(Mxfp4, QuantizeZerosAndNonFinite) {
  std::vector<float> x(64, 0.0f);
  std::vector<BlockMxfp4> q(2);
  kernels().quantize_row(x.data(), q.data(), 64, nullptr);
  for (float v : dequant(q.data(), 64)) EXPECT_EQ(v, 0.0f);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[5] = std::numeric_limits<float>::infinity();
  x[7] = 1.0f;
  x[40] = -std::numeric_limits<float>::infinity();
  kernels().quantize_row(x.data(), q.data(), 64, nullptr);
  const auto y = dequant(q.data(), 64);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[5], 0.0f);
  EXPECT_EQ(y[7], 1.0f);
  for (float v : y) EXPECT_TRUE(std::isfinite(v));
}

void expect_levels_match(int64_t nb, const std::vector<BlockMxfp4>& w, const std::vector<BlockQ8_0Act>& a) {
  const TypeKernels& k = kernels();
  const float ref = k.vec_dot[0](32 * nb, w.data(), a.data());
  for (int level = 1; level <= static_cast<int>(detected_simd_level()); ++level) {
    const float got = select_vec_dot(k, static_cast<SimdLevel>(level))(32 * nb, w.data(), a.data());
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(got)) << "level " << level << " nb " << nb;
    } else {
      EXPECT_EQ(bits_of(ref), bits_of(got)) << "level " << level << " nb " << nb << " ref " << ref << " got " << got;
    }
  }
}

TEST(Mxfp4, SimdBitIdenticalRandom) {
  std::mt19937 rng(4);
  for (int64_t nb : {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 100, 128, 129, 255}) {
    for (int rep = 0; rep < 8; ++rep) {
      auto w = random_blocks(rng, nb, 100, 140);
      auto a = random_act(rng, nb, -0.5f, 0.5f);
      expect_levels_match(nb, w, a);
    }
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

TEST(Mxfp4, SimdBitIdenticalEdges) {
  std::mt19937 rng(5);
  for (int64_t nb : {1, 5, 16, 17, 33, 128}) {
    // zeros
    std::vector<BlockMxfp4> w(nb, BlockMxfp4{});
    std::vector<BlockQ8_0Act> a(nb, BlockQ8_0Act{});
    expect_levels_match(nb, w, a);
    // extremes: all -12 weights with q8 = -128 / 127, widest exponents
    for (auto& b : w) {
      b.e = 254;
      std::memset(b.qs, 0xff, 16);
    }
    for (auto& b : a) {
      b.d = 1e-30f;
      std::memset(b.qs, 0x80, 32);
    }
    expect_levels_match(nb, w, a);
    for (auto& b : a) std::memset(b.qs, 0x7f, 32);
    expect_levels_match(nb, w, a);
    for (auto& b : w) b.e = 0;
    for (auto& b : a) b.d = 3e38f;
    expect_levels_match(nb, w, a);
    // all-negative weights, random activations; overflow to inf with huge scales
    for (auto& b : w) {
      b.e = 200;
      for (auto& q : b.qs) q = static_cast<uint8_t>(0x88 | (rng() & 0x77));
    }
    a = random_act(rng, nb, 1e30f, 3e38f);
    expect_levels_match(nb, w, a);
    // random everything over the full exponent range
    w = random_blocks(rng, nb, 0, 255);
    a = random_act(rng, nb, -1e-3f, 1e-3f);
    expect_levels_match(nb, w, a);
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

// vec_dot_rows == scalar vec_dot bit for bit: nr = 1..4, tails, padded stride, edge inputs.
TEST(Mxfp4, VecDotRowsBitIdentical) {
  std::mt19937 rng(12);
  const TypeKernels& k = kernels();
  for (int level = 1; level <= static_cast<int>(detected_simd_level()); ++level) {
    const VecDotRowsFn rows = k.vec_dot_rows[level];
    if (rows == nullptr) continue;
    for (int64_t nb : {1, 2, 15, 16, 17, 31, 32, 33, 100, 128, 129, 255, 256, 257, 513}) {
      for (int mode = 0; mode < 3; ++mode) {
        const int64_t stride = nb * static_cast<int64_t>(sizeof(BlockMxfp4)) + (mode == 1 ? 5 : 0);
        std::vector<uint8_t> w(static_cast<size_t>(4 * stride));
        for (int r = 0; r < 4; ++r) {
          auto blocks = mode == 0 ? random_blocks(rng, nb, 100, 140) : random_blocks(rng, nb, 0, 255);
          std::memcpy(w.data() + r * stride, blocks.data(), blocks.size() * sizeof(BlockMxfp4));
        }
        auto a = random_act(rng, nb, -0.5f, 0.5f);
        if (mode == 2)
          for (auto& b : a) {
            std::memset(b.qs, 0x80, 32);  // all -128
            b.d = (rng() & 1) ? 3e38f : -1e-30f;
          }
        for (int nr = 1; nr <= 4; ++nr) {
          float out[4] = {-1.0f, -1.0f, -1.0f, -1.0f};
          rows(32 * nb, w.data(), stride, a.data(), nr, out);
          for (int r = 0; r < nr; ++r) {
            const float ref = k.vec_dot[0](32 * nb, w.data() + r * stride, a.data());
            ASSERT_EQ(bits_of(out[r]), bits_of(ref)) << "level " << level << " nb " << nb << " mode " << mode
                                                     << " nr " << nr << " row " << r;
          }
        }
      }
    }
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

// Tile kernels (quant.h VecDotTileFn; AVX2: 8 rows in vector lanes, up to 16 columns in passes of 8) ==
// scalar vec_dot bit for bit: every nr and nc, short chunks, padded strides, every exponent byte (0 and 1
// are the subnormal scales; mode 3 keeps e in 0..3 with large d so that they decide the result),
// activations at quantize_act's extremes ±127 (-128 becomes -127, as quantize_act writes them) and huge /
// tiny d.
TEST(Mxfp4, TileMatchesScalarOnRawBlocks) {
  std::mt19937 rng(14);
  for (int64_t nb : {1, 7, 8, 9, 31, 32, 33, 100}) {
    for (int mode = 0; mode < 4; ++mode) {
      const int64_t w_stride = nb * static_cast<int64_t>(sizeof(BlockMxfp4)) + (mode == 1 ? 3 : 0);
      const int64_t a_stride = nb * static_cast<int64_t>(sizeof(BlockQ8_0Act)) + (mode == 1 ? 8 : 0);
      std::vector<uint8_t> w(static_cast<size_t>(kMaxTileRows * w_stride)), a(static_cast<size_t>(kMaxTileColsAny * a_stride));
      for (int r = 0; r < kMaxTileRows; ++r) {
        auto blocks = mode == 0   ? random_blocks(rng, nb, 100, 140)
                      : mode == 3 ? random_blocks(rng, nb, 0, 3)
                                  : random_blocks(rng, nb, 0, 255);
        std::memcpy(w.data() + r * w_stride, blocks.data(), blocks.size() * sizeof(BlockMxfp4));
      }
      for (int c = 0; c < kMaxTileColsAny; ++c) {
        auto act = random_act(rng, nb, -0.5f, 0.5f);
        for (auto& b : act) {
          for (auto& x : b.qs) {
            if (mode == 2) x = (rng() & 1) ? int8_t{127} : int8_t{-127};
            if (x == -128) x = -127;
          }
          if (mode == 2) b.d = (rng() & 1) ? 3e38f : -1e-30f;
          if (mode == 3) b.d *= 1e30f;
        }
        std::memcpy(a.data() + c * a_stride, act.data(), act.size() * sizeof(BlockQ8_0Act));
      }
      EXPECT_GE(test::expect_tiles_match_scalar(kernels(), 32 * nb, w.data(), w_stride, a.data(), a_stride,
                                                kMaxTileColsAny, "nb " + std::to_string(nb) + " mode " + std::to_string(mode),
                                                kMaxTileRows),
                static_cast<int>(detected_simd_level()) >= static_cast<int>(SimdLevel::kAvx2) ? 1 : 0);
    }
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

TEST(Mxfp4, VecDotMatchesF64) {
  std::mt19937 rng(6);
  for (int64_t nb : {1, 16, 37, 128}) {
    const int64_t n = 32 * nb;
    const auto xw = iqtest::gaussian_row(rng, n);
    const auto xa = iqtest::gaussian_row(rng, n);
    std::vector<BlockMxfp4> w(nb);
    kernels().quantize_row(xw.data(), w.data(), n, nullptr);
    std::vector<BlockQ8_0Act> a(nb);
    iqtest::quantize_q8_0_local(xa.data(), a.data(), n);
    const auto wd = dequant(w.data(), n);
    const auto ad = act_values(a);
    const double ref = iqtest::dot_f64(wd, ad);
    double sabs = 0;
    for (int64_t i = 0; i < n; ++i) sabs += std::fabs(double(wd[i]) * ad[i]);
    // Per block: one rounding of (scale * isum) (dw * dx is exact: dw is a power of two), then at most
    // nb/32 + 5 rounded additions along the partial sum and the tree.
    const double tol = (static_cast<double>(nb) / 32 + 8) * std::ldexp(1.0, -24) * sabs;
    for (int level = 0; level <= static_cast<int>(detected_simd_level()); ++level) {
      const float got = select_vec_dot(kernels(), static_cast<SimdLevel>(level))(n, w.data(), a.data());
      EXPECT_NEAR(got, ref, tol) << "level " << level << " nb " << nb;
    }
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

}  // namespace
}  // namespace dsv4::cpu
