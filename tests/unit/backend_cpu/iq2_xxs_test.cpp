// tests/unit/backend_cpu/iq2_xxs_test.cpp — IQ2_XXS (type 16): tables, layout, dequantize, quantizer,
// vec_dot at every SIMD level (bit-identical to the scalar reference) and against an f64 dot.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/iq2_xxs.h"
#include "backend/cpu/iq2_xxs_tables.h"
#include "backend/cpu/quant.h"
#include "base/cpu_features.h"
#include "numerics/half.h"
#include "unit/backend_cpu/iq_test_util.h"
#include "unit/backend_cpu/kernel_test_util.h"

namespace dsv4::cpu {
namespace {

using iqtest::bits_of;

const TypeKernels& kernels() {
  const TypeKernels* k = type_kernels(TensorType::kIQ2_XXS);
  EXPECT_NE(k, nullptr);
  return *k;
}

std::vector<float> dequant(const void* blocks, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  kernels().dequantize_row(blocks, out.data(), n);
  return out;
}

std::vector<float> act_values(const std::vector<BlockQ8_K>& a) {
  std::vector<float> v;
  for (const auto& b : a)
    for (int8_t q : b.qs) v.push_back(b.d * static_cast<float>(q));
  return v;
}

std::vector<BlockIq2Xxs> random_blocks(std::mt19937& rng, int64_t nb) {
  std::uniform_real_distribution<float> dd(-0.01f, 0.01f);
  std::vector<BlockIq2Xxs> v(static_cast<size_t>(nb));
  for (auto& b : v) {
    b.d = f32_to_f16(dd(rng));
    for (auto& q : b.qs) q = static_cast<uint16_t>(rng());
  }
  return v;
}

std::vector<BlockQ8_K> random_act(std::mt19937& rng, int64_t nb, float d_lo, float d_hi) {
  std::uniform_real_distribution<float> dd(d_lo, d_hi);
  std::uniform_int_distribution<int> q(-128, 127);
  std::vector<BlockQ8_K> v(static_cast<size_t>(nb));
  for (auto& b : v) {
    b.d = dd(rng);
    for (auto& x : b.qs) x = static_cast<int8_t>(q(rng));
    for (int k = 0; k < 16; ++k) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += b.qs[16 * k + i];
      b.bsums[k] = static_cast<int16_t>(s);
    }
  }
  return v;
}

TEST(Iq2Xxs, Registered) {
  const TypeKernels& k = kernels();
  EXPECT_EQ(k.act, ActFormat::kQ8_K);
  EXPECT_NE(k.dequantize_row, nullptr);
  EXPECT_NE(k.quantize_row, nullptr);
  // Scalar, AVX2 and VBMI kernels; plain AVX-512 runs the AVX2 ones (faster than its own were).
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512Vbmi})
    EXPECT_NE(k.vec_dot[static_cast<int>(level)], nullptr);
  EXPECT_EQ(k.vec_dot[static_cast<int>(SimdLevel::kAvx512)], nullptr);
  EXPECT_EQ(effective_simd_level(k, SimdLevel::kAvx512), SimdLevel::kAvx2);
}

TEST(Iq2Xxs, GridSha256AndBytes) {
  uint8_t bytes[2048];
  for (int k = 0; k < 256; ++k)
    for (int j = 0; j < 8; ++j) bytes[8 * k + j] = static_cast<uint8_t>(iq2xxs_grid[k] >> (8 * j));
  EXPECT_EQ(iqtest::sha256_hex(bytes, sizeof(bytes)), "05826b5d3e472a3a78f196be62ac78acf81df0f909626e12ab9fa2a5d490dd54");
  for (uint8_t b : bytes) EXPECT_TRUE(b == 0x08 || b == 0x19 || b == 0x2b);
  // SHA-256 self-check on the standard "abc" vector.
  const uint8_t abc[3] = {'a', 'b', 'c'};
  EXPECT_EQ(iqtest::sha256_hex(abc, 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Iq2Xxs, KsignsParityAndMasks) {
  for (int s = 0; s < 128; ++s) {
    EXPECT_EQ(ksigns_iq2xs[s] & 127, s);
    EXPECT_EQ(std::popcount(static_cast<unsigned>(ksigns_iq2xs[s])) % 2, 0) << s;
    for (int j = 0; j < 8; ++j)
      EXPECT_EQ((ksigns_mask64[s] >> (8 * j)) & 0xff, ((ksigns_iq2xs[s] >> j) & 1) ? 0xffu : 0u);
  }
  // Spot values from gguf-py's table.
  EXPECT_EQ(ksigns_iq2xs[1], 0x81);
  EXPECT_EQ(ksigns_iq2xs[3], 0x03);
  EXPECT_EQ(ksigns_iq2xs[127], 0xff);
}

TEST(Iq2Xxs, HandBuiltBlock) {
  BlockIq2Xxs b{};
  b.d = f32_to_f16(1.0f);
  // Group 0: grid indices 0, 1, 2, 3; sign indices 0, 1, 3, 127; ls = 3 -> db = 3.5 * 0.25 = 0.875.
  const uint32_t a0 = 0u | 1u << 8 | 2u << 16 | 3u << 24;
  const uint32_t a1 = 0u | 1u << 7 | 3u << 14 | 127u << 21 | 3u << 28;
  std::memcpy(b.qs, &a0, 4);
  std::memcpy(b.qs + 2, &a1, 4);
  const auto y = dequant(&b, 256);
  // Sub-group 0: grid[0] = all 8, no signs -> 7.
  for (int j = 0; j < 8; ++j) EXPECT_EQ(y[j], 7.0f);
  // Sub-group 1: grid[1] = 0x080808080808082b (element 0 = 43), ksigns[1] = 0x81 (elements 0, 7 negative).
  EXPECT_EQ(y[8], -37.625f);
  for (int j = 1; j < 7; ++j) EXPECT_EQ(y[8 + j], 7.0f);
  EXPECT_EQ(y[15], -7.0f);
  // Sub-group 2: grid[2] = 0x0808080808081919 (elements 0, 1 = 25), ksigns[3] = 0x03.
  EXPECT_EQ(y[16], -21.875f);
  EXPECT_EQ(y[17], -21.875f);
  for (int j = 2; j < 8; ++j) EXPECT_EQ(y[16 + j], 7.0f);
  // Sub-group 3: grid[3] = 0x0808080808082b08 (element 1 = 43), all negative.
  EXPECT_EQ(y[24], -7.0f);
  EXPECT_EQ(y[25], -37.625f);
  for (int j = 2; j < 8; ++j) EXPECT_EQ(y[24 + j], -7.0f);
  // Groups 1..7 are all-zero words: grid[0], no signs, ls = 0 -> db = 0.125 -> 1.0.
  for (int i = 32; i < 256; ++i) EXPECT_EQ(y[i], 1.0f) << i;
}

double rel_rms(const std::vector<float>& x, const std::vector<float>& y) {
  double se = 0, sx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    se += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    sx += double(x[i]) * x[i];
  }
  return std::sqrt(se / sx);
}

TEST(Iq2Xxs, QuantizeGaussianError) {
  std::mt19937 rng(11);
  const int64_t n = 256 * 64;
  const auto x = iqtest::gaussian_row(rng, n, 0.02f);
  std::vector<BlockIq2Xxs> q(n / 256);
  kernels().quantize_row(x.data(), q.data(), n, nullptr);
  const auto y = dequant(q.data(), n);
  const double rel = rel_rms(x, y);
  EXPECT_LT(rel, 0.40);  // measured 0.347 (0.330 with flat importance)
  // Deterministic: a second run gives the same bytes.
  std::vector<BlockIq2Xxs> q2(n / 256);
  kernels().quantize_row(x.data(), q2.data(), n, nullptr);
  EXPECT_EQ(std::memcmp(q.data(), q2.data(), q.size() * sizeof(BlockIq2Xxs)), 0);
}

TEST(Iq2Xxs, ImportanceLowersErrorWhereWeighted) {
  std::mt19937 rng(12);
  const int64_t n = 256 * 64;
  const auto x = iqtest::gaussian_row(rng, n);
  std::vector<float> imp(n, 1.0f), flat(n, 1.0f);
  for (int64_t i = 0; i < n; ++i)
    if (i % 32 < 4) imp[i] = 100.0f;  // the first 4 of every 32 matter much more
  std::vector<BlockIq2Xxs> qa(n / 256), qb(n / 256);
  kernels().quantize_row(x.data(), qa.data(), n, imp.data());
  kernels().quantize_row(x.data(), qb.data(), n, flat.data());
  const auto ya = dequant(qa.data(), n), yb = dequant(qb.data(), n);
  double ea = 0, eb = 0, wa = 0, wb = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double da = (double(x[i]) - ya[i]) * (double(x[i]) - ya[i]);
    const double db = (double(x[i]) - yb[i]) * (double(x[i]) - yb[i]);
    if (i % 32 < 4) { ea += da; eb += db; }
    wa += imp[i] * da;
    wb += imp[i] * db;
  }
  EXPECT_LT(ea, 0.7 * eb);  // error on the heavy elements clearly lower
  EXPECT_LT(wa, wb);        // and the weighted total lower
}

TEST(Iq2Xxs, QuantizeZerosAndNonFinite) {
  std::vector<float> x(512, 0.0f);
  std::vector<BlockIq2Xxs> q(2);
  kernels().quantize_row(x.data(), q.data(), 512, nullptr);
  for (float v : dequant(q.data(), 512)) EXPECT_EQ(v, 0.0f);
  std::mt19937 rng(13);
  x = iqtest::gaussian_row(rng, 512);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[100] = std::numeric_limits<float>::infinity();
  x[300] = -std::numeric_limits<float>::infinity();
  std::vector<float> imp(512, 1.0f);
  imp[5] = std::numeric_limits<float>::quiet_NaN();
  imp[6] = -3.0f;
  for (const float* im : {static_cast<const float*>(nullptr), static_cast<const float*>(imp.data())}) {
    kernels().quantize_row(x.data(), q.data(), 512, im);
    const auto y = dequant(q.data(), 512);
    for (float v : y) EXPECT_TRUE(std::isfinite(v));
    std::vector<float> xf = x;
    for (float& v : xf)
      if (!std::isfinite(v)) v = 0.0f;
    EXPECT_LT(rel_rms(xf, y), 0.6);
  }
  // Zero importance everywhere still quantizes sensibly (falls back to weight 1).
  std::vector<float> zero_imp(512, 0.0f);
  kernels().quantize_row(x.data(), q.data(), 512, zero_imp.data());
  for (float v : dequant(q.data(), 512)) EXPECT_TRUE(std::isfinite(v));
}

void expect_levels_match(int64_t nb, const std::vector<BlockIq2Xxs>& w, const std::vector<BlockQ8_K>& a) {
  const TypeKernels& k = kernels();
  const float ref = k.vec_dot[0](256 * nb, w.data(), a.data());
  auto expect_same = [&](float got, const char* what, int level) {
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(got)) << what << " level " << level << " nb " << nb;
    } else {
      EXPECT_EQ(bits_of(ref), bits_of(got)) << what << " level " << level << " nb " << nb << " ref " << ref << " got " << got;
    }
  };
  for (int level = 1; level <= static_cast<int>(detected_simd_level()); ++level) {
    expect_same(select_vec_dot(k, static_cast<SimdLevel>(level))(256 * nb, w.data(), a.data()), "vec_dot", level);
    if (const VecDotRowsFn rows = select_vec_dot_rows(k, static_cast<SimdLevel>(level))) {
      float out = 0.0f;
      rows(256 * nb, w.data(), 0, a.data(), 1, &out);
      expect_same(out, "vec_dot_rows nr=1", level);
    }
  }
}

TEST(Iq2Xxs, SimdBitIdenticalRandom) {
  std::mt19937 rng(14);
  for (int64_t nb : {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 65}) {
    for (int rep = 0; rep < 6; ++rep) {
      auto w = random_blocks(rng, nb);
      auto a = random_act(rng, nb, -0.5f, 0.5f);
      expect_levels_match(nb, w, a);
    }
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

TEST(Iq2Xxs, SimdBitIdenticalQuantizedRows) {
  std::mt19937 rng(15);
  for (int64_t nb : {1, 16, 19}) {
    const int64_t n = 256 * nb;
    const auto xw = iqtest::gaussian_row(rng, n), xa = iqtest::gaussian_row(rng, n);
    std::vector<BlockIq2Xxs> w(nb);
    kernels().quantize_row(xw.data(), w.data(), n, nullptr);
    std::vector<BlockQ8_K> a(nb);
    iqtest::quantize_q8_k_local(xa.data(), a.data(), n);
    expect_levels_match(nb, w, a);
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

TEST(Iq2Xxs, SimdBitIdenticalEdges) {
  std::mt19937 rng(16);
  for (int64_t nb : {1, 5, 16, 17, 33}) {
    std::vector<BlockIq2Xxs> w(nb, BlockIq2Xxs{});
    std::vector<BlockQ8_K> a(nb, BlockQ8_K{});
    expect_levels_match(nb, w, a);
    // extremes: largest grid entries, all signs negative, ls = 15, q8 = -128 everywhere.
    int kmax = 0;
    for (int k = 0; k < 256; ++k)
      if (std::popcount(iq2xxs_grid[k] & 0x2020202020202020ull) > std::popcount(iq2xxs_grid[kmax] & 0x2020202020202020ull))
        kmax = k;
    for (auto& b : w) {
      b.d = f32_to_f16(65504.0f);
      for (int g = 0; g < 8; ++g) {
        const uint32_t a0 = static_cast<uint32_t>(kmax) * 0x01010101u;
        const uint32_t a1 = 0x0fffffffu | 15u << 28;
        std::memcpy(b.qs + 4 * g, &a0, 4);
        std::memcpy(b.qs + 4 * g + 2, &a1, 4);
      }
    }
    for (auto& b : a) {
      b.d = 1e-3f;
      std::memset(b.qs, 0x80, 256);
    }
    expect_levels_match(nb, w, a);
    for (auto& b : a) std::memset(b.qs, 0x7f, 256);
    expect_levels_match(nb, w, a);
    for (auto& b : a) b.d = 3e38f;  // overflow to inf
    expect_levels_match(nb, w, a);
    // all-negative random weights with tiny (subnormal product) scales
    w = random_blocks(rng, nb);
    for (auto& b : w) {
      b.d = 0x0001;  // smallest f16 subnormal
      for (int g = 0; g < 8; ++g) b.qs[4 * g + 2] = 0xffff, b.qs[4 * g + 3] |= 0x0fff;
    }
    a = random_act(rng, nb, -1e-30f, 1e-30f);
    expect_levels_match(nb, w, a);
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

// vec_dot_rows: nr = 1..4 rows at a stride (with padding between rows), every tail length, edge
// activations (-128 / 127 everywhere, zero) — each out[i] bit-identical to vec_dot and the scalar.
void expect_rows_match(int64_t nb, const std::vector<BlockIq2Xxs>& rows4, int64_t stride_blocks, const std::vector<BlockQ8_K>& a) {
  const TypeKernels& k = kernels();
  for (int level = 0; level <= static_cast<int>(detected_simd_level()); ++level) {
    const VecDotRowsFn rows = select_vec_dot_rows(k, static_cast<SimdLevel>(level));
    if (rows == nullptr) continue;
    const VecDotFn dot = select_vec_dot(k, static_cast<SimdLevel>(level));
    for (int nr = 1; nr <= 4; ++nr) {
      float out[4] = {-1.0f, -1.0f, -1.0f, -1.0f};
      rows(256 * nb, rows4.data(), stride_blocks * static_cast<int64_t>(sizeof(BlockIq2Xxs)), a.data(), nr, out);
      for (int i = 0; i < nr; ++i) {
        const BlockIq2Xxs* wr = rows4.data() + i * stride_blocks;
        const float ref = k.vec_dot[0](256 * nb, wr, a.data());
        const float one = dot(256 * nb, wr, a.data());
        EXPECT_EQ(bits_of(one), bits_of(out[i])) << "level " << level << " nb " << nb << " nr " << nr << " row " << i;
        if (!std::isnan(ref)) {
          EXPECT_EQ(bits_of(ref), bits_of(out[i])) << "level " << level << " nb " << nb << " nr " << nr;
        }
      }
      for (int i = nr; i < 4; ++i) EXPECT_EQ(out[i], -1.0f) << "wrote past nr";
    }
  }
}

TEST(Iq2Xxs, VecDotRowsMatchesVecDot) {
  for (SimdLevel level : {SimdLevel::kAvx512, SimdLevel::kAvx512Vbmi}) {
    if (detected_simd_level() >= level) {
      EXPECT_NE(select_vec_dot_rows(kernels(), level), nullptr);
    }
  }
  std::mt19937 rng(18);
  for (int64_t nb : {1, 2, 5, 6, 8, 15, 16, 17, 24, 31, 32, 33, 48}) {  // 8, 24: two-row short chunks
    const int64_t stride = nb + 3;
    auto w = random_blocks(rng, 4 * stride);
    auto a = random_act(rng, nb, -0.5f, 0.5f);
    expect_rows_match(nb, w, stride, a);
    for (auto& b : a) std::memset(b.qs, 0x80, 256);  // q8 = -128 everywhere
    expect_rows_match(nb, w, stride, a);
    for (auto& b : a) std::memset(b.qs, 0x7f, 256);
    expect_rows_match(nb, w, stride, a);
    a = random_act(rng, nb, -0.5f, 0.5f);
    for (auto& b : a)
      for (int i = 0; i < 256; i += 3) b.qs[i] = -128;  // scattered -128 among random values
    expect_rows_match(nb, w, stride, a);
    for (auto& b : w) {  // all signs negative, ls = 15, largest magnitudes
      for (int g = 0; g < 8; ++g) b.qs[4 * g + 2] = 0xffff, b.qs[4 * g + 3] = 0xffff;
    }
    expect_rows_match(nb, w, stride, a);
    std::vector<BlockQ8_K> z(nb, BlockQ8_K{});
    expect_rows_match(nb, w, stride, z);
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

// Tile kernels on raw blocks: every grid index and sign field, ls = 15 with all signs negative, and
// activations at -128 / 127 / scattered -128 — each element bit-identical to the scalar vec_dot.
TEST(Iq2Xxs, TileMatchesScalarOnRawBlocks) {
  std::mt19937 rng(21);
  const int cols = kMaxTileColsAny;  // the AVX2 tile takes 16 columns
  for (int64_t nb : {1, 7, 8, 9, 17}) {
    const int64_t stride = nb + 1;  // padding between rows
    auto w = random_blocks(rng, 4 * stride);
    std::vector<BlockQ8_K> a;
    for (int c = 0; c < cols; ++c) {
      auto col = random_act(rng, nb, -0.5f, 0.5f);
      if (c == 1)
        for (auto& b : col) std::memset(b.qs, 0x80, 256);  // q8 = -128 everywhere
      if (c == 2)
        for (auto& b : col) std::memset(b.qs, 0x7f, 256);
      if (c == 3)
        for (auto& b : col)
          for (int i = 0; i < 256; i += 3) b.qs[i] = -128;
      a.insert(a.end(), col.begin(), col.end());
    }
    const auto* wb = reinterpret_cast<const uint8_t*>(w.data());
    const auto* ab = reinterpret_cast<const uint8_t*>(a.data());
    const int64_t w_stride = stride * static_cast<int64_t>(sizeof(BlockIq2Xxs));
    const int64_t a_stride = nb * static_cast<int64_t>(sizeof(BlockQ8_K));
    EXPECT_GE(test::expect_tiles_match_scalar(kernels(), 256 * nb, wb, w_stride, ab, a_stride, cols, "random"), 1);
    for (auto& b : w)  // all signs negative, ls = 15, largest magnitudes
      for (int g = 0; g < 8; ++g) b.qs[4 * g + 2] = 0xffff, b.qs[4 * g + 3] = 0xffff;
    test::expect_tiles_match_scalar(kernels(), 256 * nb, wb, w_stride, ab, a_stride, cols, "extremes");
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

TEST(Iq2Xxs, VecDotRowsQuantizedRows) {
  std::mt19937 rng(19);
  for (int64_t nb : {16, 19}) {
    const int64_t n = 256 * nb;
    std::vector<BlockIq2Xxs> w(4 * nb);
    for (int r = 0; r < 4; ++r) {
      const auto xw = iqtest::gaussian_row(rng, n);
      kernels().quantize_row(xw.data(), w.data() + r * nb, n, nullptr);
    }
    const auto xa = iqtest::gaussian_row(rng, n);
    std::vector<BlockQ8_K> a(nb);
    iqtest::quantize_q8_k_local(xa.data(), a.data(), n);
    expect_rows_match(nb, w, nb, a);
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

TEST(Iq2Xxs, VecDotMatchesF64) {
  std::mt19937 rng(17);
  for (int64_t nb : {1, 16, 21, 64}) {
    const int64_t n = 256 * nb;
    const auto xw = iqtest::gaussian_row(rng, n), xa = iqtest::gaussian_row(rng, n);
    std::vector<BlockIq2Xxs> w(nb);
    kernels().quantize_row(xw.data(), w.data(), n, nullptr);
    std::vector<BlockQ8_K> a(nb);
    iqtest::quantize_q8_k_local(xa.data(), a.data(), n);
    const auto wd = dequant(w.data(), n);
    const auto ad = act_values(a);
    const double ref = iqtest::dot_f64(wd, ad);
    double sabs = 0;
    for (int64_t i = 0; i < n; ++i) sabs += std::fabs(double(wd[i]) * ad[i]);
    // Per block: d_w*d_x, (float)isum (exact below 2^24, else one rounding), the product: <= 3 roundings
    // (the 0.125 is exact); the dequantized reference itself carries up to 3 roundings per element
    // (db, db*grid, d_x*q); then nb/32 + 5 additions. Bound: (nb/32 + 12) u Σ|w x|.
    const double tol = (static_cast<double>(nb) / 32 + 12) * std::ldexp(1.0, -24) * sabs;
    for (int level = 0; level <= static_cast<int>(detected_simd_level()); ++level) {
      const float got = select_vec_dot(kernels(), static_cast<SimdLevel>(level))(n, w.data(), a.data());
      EXPECT_NEAR(got, ref, tol) << "level " << level << " nb " << nb;
    }
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

}  // namespace
}  // namespace dsv4::cpu
