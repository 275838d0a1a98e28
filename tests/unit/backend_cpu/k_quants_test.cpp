// tests/unit/backend_cpu/k_quants_test.cpp — Q2_K / Q4_K kernels and the Q8_K activation quantizer:
// hand-decoded blocks, quantizer error (plain and importance-weighted), SIMD == scalar bit for bit,
// vec_dot_rows (1-4 rows) == vec_dot bit for bit, vec_dot vs an f64 reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/k_quants.h"
#include "backend/cpu/quant.h"
#include "numerics/half.h"
#include "unit/backend_cpu/kernel_test_util.h"

namespace dsv4::cpu {
namespace {

using test::same_float;

const TypeKernels& kernels(TensorType t) {
  const TypeKernels* k = type_kernels(t);
  EXPECT_NE(k, nullptr);
  return *k;
}

int64_t block_bytes(TensorType t) { return t == TensorType::kQ2_K ? 84 : 144; }

TEST(KQuants, Registered) {
  for (TensorType t : {TensorType::kQ2_K, TensorType::kQ4_K}) {
    const TypeKernels& k = kernels(t);
    EXPECT_EQ(k.act, ActFormat::kQ8_K);
    EXPECT_NE(k.dequantize_row, nullptr);
    EXPECT_NE(k.quantize_row, nullptr);
    for (int level = 0; level <= static_cast<int>(SimdLevel::kAvx512); ++level) EXPECT_NE(k.vec_dot[level], nullptr);
  }
}

TEST(KQuants, Q2KDequantizeHandBuiltBlock) {
  BlockQ2_K blk;
  for (int k = 0; k < 16; ++k) blk.scales[k] = static_cast<uint8_t>(k | (15 - k) << 4);  // sc_k = k, m_k = 15 - k
  std::memset(blk.qs, 0xe4, 64);  // 0b11'10'01'00: plane j holds q = j
  blk.d = 0x3c00;                 // 1.0
  blk.dmin = 0x3800;              // 0.5
  float y[256];
  kernels(TensorType::kQ2_K).dequantize_row(&blk, y, 256);
  EXPECT_EQ(y[0], -7.5f);     // k 0, q 0: 0 - 0.5·15
  EXPECT_EQ(y[37], -4.5f);    // j 1, k 2: 2·1 - 0.5·13
  EXPECT_EQ(y[200], 22.5f);   // h 1, j 2, k 12: 12·2 - 0.5·3
  EXPECT_EQ(y[255], 45.0f);   // h 1, j 3, k 15: 15·3 - 0
  for (int e = 0; e < 256; ++e) {
    const int j = (e / 32) % 4, k = e / 16;
    EXPECT_EQ(y[e], static_cast<float>(k * j) - 0.5f * static_cast<float>(15 - k)) << e;
  }
}

// Packs eight 6-bit (sc, m) pairs the way gguf.md §5.4 decodes them.
void pack_q4_k_scales(const int sc[8], const int m[8], uint8_t s[12]) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
    s[j + 4] = static_cast<uint8_t>((m[j] & 63) | (m[j + 4] >> 4) << 6);
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
  }
}

TEST(KQuants, Q4KDequantizeHandBuiltBlock) {
  const int sc[8] = {1, 63, 17, 32, 48, 5, 60, 33};
  const int m[8] = {0, 1, 62, 63, 16, 31, 47, 9};
  BlockQ4_K blk;
  pack_q4_k_scales(sc, m, blk.scales);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) blk.qs[32 * c + l] = static_cast<uint8_t>((l % 16) | (15 - l % 16) << 4);
  blk.d = 0x3400;     // 0.25
  blk.dmin = 0x3c00;  // 1.0
  float y[256];
  kernels(TensorType::kQ4_K).dequantize_row(&blk, y, 256);
  EXPECT_EQ(y[0], 0.0f);                  // j 0: 0.25·1·0 - 0
  EXPECT_EQ(y[5], 1.25f);                 // j 0: 0.25·1·5
  EXPECT_EQ(y[32 + 1], 0.25f * 63 * 14 - 1);   // j 1 (high nibble of qs[1] = 14)
  EXPECT_EQ(y[64 + 3], 0.25f * 17 * 3 - 62);   // j 2
  EXPECT_EQ(y[128 + 10], 12.0f * 10 - 16);     // j 4: sc 48 -> dl 12
  EXPECT_EQ(y[224 + 31], 0.25f * 33 * 0 - 9);  // j 7: high nibble of qs[127] = 0
  for (int j = 0; j < 8; ++j)
    for (int l = 0; l < 32; ++l) {
      const int q = (j % 2 == 0) ? l % 16 : 15 - l % 16;
      EXPECT_EQ(y[32 * j + l], (0.25f * static_cast<float>(sc[j])) * static_cast<float>(q) - static_cast<float>(m[j]));
    }
  uint64_t sc8, m8;
  q4_k_unpack_scales(blk.scales, &sc8, &m8);
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(static_cast<int>((sc8 >> (8 * j)) & 0xff), sc[j]);
    EXPECT_EQ(static_cast<int>((m8 >> (8 * j)) & 0xff), m[j]);
  }
}

TEST(KQuants, Q8KActQuantizer) {
  std::vector<float> x(512);
  for (int i = 0; i < 256; ++i) x[i] = static_cast<float>(i) - 100.0f;  // max magnitude 155 at i = 255
  x[7] = -300.0f;                                                        // ... now -300 at i = 7
  x[8] = std::numeric_limits<float>::infinity();                          // counts as 0
  for (int i = 256; i < 512; ++i) x[i] = 0.0f;
  std::vector<BlockQ8_K> a(2);
  quantize_act_row(ActFormat::kQ8_K, x.data(), a.data(), 512);
  const float iscale = -127.0f / -300.0f;
  EXPECT_EQ(a[0].d, 1.0f / iscale);
  EXPECT_EQ(a[0].qs[7], -127);
  EXPECT_EQ(a[0].qs[8], 0);
  EXPECT_EQ(a[0].qs[255], static_cast<int>(std::nearbyint(iscale * 155.0f)));
  for (int i = 0; i < 256; ++i) {
    if (i != 7 && i != 8) {
      EXPECT_EQ(a[0].qs[i], static_cast<int>(std::nearbyint(iscale * x[i]))) << i;
    }
  }
  for (int k = 0; k < 16; ++k) {
    int s = 0;
    for (int i = 0; i < 16; ++i) s += a[0].qs[16 * k + i];
    EXPECT_EQ(a[0].bsums[k], s);
  }
  EXPECT_EQ(a[1].d, 0.0f);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(a[1].qs[i], 0);
  // Positive max: maps to -127 as well (d negative).
  std::vector<float> p(256, 1.0f);
  p[3] = 50.0f;
  quantize_act_row(ActFormat::kQ8_K, p.data(), a.data(), 256);
  EXPECT_EQ(a[0].qs[3], -127);
  EXPECT_LT(a[0].d, 0.0f);
  EXPECT_EQ(act_row_bytes(ActFormat::kQ8_K, 512), 584);
}

// Weighted relative RMS error of quantize -> dequantize.
double rel_rms(const std::vector<float>& x, const std::vector<float>& y, const std::vector<float>* w = nullptr) {
  double se = 0, sx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double wi = w != nullptr ? (*w)[i] : 1.0;
    se += wi * (static_cast<double>(y[i]) - x[i]) * (static_cast<double>(y[i]) - x[i]);
    sx += wi * static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(se / sx);
}

std::vector<float> round_trip(const TypeKernels& k, const std::vector<float>& x, const float* imp) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(static_cast<size_t>(n / 256 * block_bytes(k.type)));
  std::vector<float> y(x.size());
  k.quantize_row(x.data(), q.data(), n, imp);
  k.dequantize_row(q.data(), y.data(), n);
  return y;
}

TEST(KQuants, QuantizeRoundTripError) {
  // Measured relative RMS on Gaussian rows: Q2_K ≈ 0.267, Q4_K ≈ 0.071; the bounds leave a margin.
  for (auto [t, bound] : {std::pair{TensorType::kQ2_K, 0.29}, std::pair{TensorType::kQ4_K, 0.078}}) {
    std::mt19937 rng(5);
    const auto x = test::gaussian_row(rng, 256 * 64, 0.05f);
    const auto y = round_trip(kernels(t), x, nullptr);
    EXPECT_LT(rel_rms(x, y), bound) << tensor_type_name(t);
  }
}

TEST(KQuants, ImportanceLowersWeightedError) {
  for (TensorType t : {TensorType::kQ2_K, TensorType::kQ4_K}) {
    std::mt19937 rng(9);
    const int64_t n = 256 * 32;
    const auto x = test::gaussian_row(rng, n);
    std::vector<float> imp(static_cast<size_t>(n), 1.0f);
    for (int64_t i = 0; i < n; i += 5) imp[static_cast<size_t>(i)] = 100.0f;
    const auto y_plain = round_trip(kernels(t), x, nullptr);
    const auto y_imp = round_trip(kernels(t), x, imp.data());
    EXPECT_LT(rel_rms(x, y_imp, &imp), 0.9 * rel_rms(x, y_plain, &imp)) << tensor_type_name(t);
  }
}

TEST(KQuants, QuantizeEdgeInputs) {
  for (TensorType t : {TensorType::kQ2_K, TensorType::kQ4_K}) {
    const TypeKernels& k = kernels(t);
    std::vector<float> x(512, 0.0f);
    auto y = round_trip(k, x, nullptr);
    for (float v : y) EXPECT_EQ(v, 0.0f);
    x[3] = std::numeric_limits<float>::quiet_NaN();
    x[4] = -std::numeric_limits<float>::infinity();
    x[300] = 1.0f;
    x[301] = -1.0f;
    std::vector<float> imp(512, 0.0f);  // all-zero importance must not break the fit
    y = round_trip(k, x, imp.data());
    for (float v : y) EXPECT_TRUE(std::isfinite(v));
    y = round_trip(k, x, nullptr);
    EXPECT_NEAR(y[300], 1.0f, 0.2f);
    EXPECT_NEAR(y[301], -1.0f, 0.2f);
    std::vector<float> big(256, 1e30f), neg(256, -3.0f);
    for (float v : round_trip(k, big, nullptr)) EXPECT_TRUE(std::isfinite(v));
    for (float v : round_trip(k, neg, nullptr)) EXPECT_NEAR(v, -3.0f, 0.01f);
  }
}

enum class Pattern { kRandom, kZeros, kMaxQuants, kMinusOne28, kHugeTiny, kAlternating };

struct Rows {
  std::vector<uint8_t> w;
  std::vector<BlockQ8_K> a;
};

Rows make_rows(std::mt19937& rng, TensorType t, int64_t nb, Pattern p, bool consistent_bsums) {
  const int64_t bb = block_bytes(t);
  const int d_off = t == TensorType::kQ2_K ? 80 : 0;
  Rows r;
  r.w = test::random_bytes(rng, static_cast<size_t>(nb * bb));
  r.a.resize(static_cast<size_t>(nb));
  std::uniform_real_distribution<float> u(0.001f, 0.05f);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* wb = r.w.data() + b * bb;
    BlockQ8_K& a = r.a[static_cast<size_t>(b)];
    for (auto& q : a.qs) q = static_cast<int8_t>(rng() & 0xff);
    a.d = u(rng) * ((rng() & 1) ? 1.0f : -1.0f);
    test::put_u16(wb + d_off, test::random_f16(rng, -14, 2, false));
    test::put_u16(wb + d_off + 2, test::random_f16(rng, -14, 2, false));
    const int q_off = 16, q_len = t == TensorType::kQ2_K ? 64 : 128;
    switch (p) {
      case Pattern::kRandom: break;
      case Pattern::kZeros: std::memset(a.qs, 0, 256); std::memset(wb + q_off, 0, static_cast<size_t>(q_len)); break;
      case Pattern::kMaxQuants:
        std::memset(wb + q_off, 0xff, static_cast<size_t>(q_len));
        std::memset(t == TensorType::kQ2_K ? wb : wb + 4, 0xff, t == TensorType::kQ2_K ? 16 : 12);
        for (int i = 0; i < 256; ++i) a.qs[i] = (i & 1) ? 127 : -128;
        break;
      case Pattern::kMinusOne28:
        std::memset(wb + q_off, 0xff, static_cast<size_t>(q_len));
        std::memset(a.qs, 0x80, 256);
        break;
      case Pattern::kHugeTiny:
        test::put_u16(wb + d_off, (b & 1) ? 0x7bff : 0x0001);
        test::put_u16(wb + d_off + 2, (b & 2) ? 0x0001 : 0x7bff);
        a.d = (b & 4) ? 1e30f : 1e-30f;
        break;
      case Pattern::kAlternating:
        for (int i = 0; i < 256; ++i) a.qs[i] = static_cast<int8_t>((i & 1) ? -77 : 77);
        break;
    }
    for (int k = 0; k < 16; ++k) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += a.qs[16 * k + i];
      a.bsums[k] = consistent_bsums ? static_cast<int16_t>(s) : static_cast<int16_t>(rng() & 0xffff);
    }
  }
  return r;
}

TEST(KQuants, SimdMatchesScalarBitForBit) {
  int checked = 0;
  for (TensorType t : {TensorType::kQ2_K, TensorType::kQ4_K}) {
    const TypeKernels& k = kernels(t);
    std::mt19937 rng(17);
    std::vector<int64_t> counts;
    for (int64_t nb = 1; nb <= 70; ++nb) counts.push_back(nb);
    for (int64_t nb : {96, 100, 128, 131, 256}) counts.push_back(nb);
    for (Pattern p : {Pattern::kRandom, Pattern::kZeros, Pattern::kMaxQuants, Pattern::kMinusOne28,
                      Pattern::kHugeTiny, Pattern::kAlternating}) {
      for (int64_t nb : counts) {
        for (int rep = 0; rep < (p == Pattern::kRandom ? 3 : 1); ++rep) {
          const Rows r = make_rows(rng, t, nb, p, rep != 2);
          const float ref = k.vec_dot[0](nb * 256, r.w.data(), r.a.data());
          for (SimdLevel level : test::runnable_simd_levels()) {
            const float got = select_vec_dot(k, level)(nb * 256, r.w.data(), r.a.data());
            ASSERT_TRUE(same_float(ref, got)) << tensor_type_name(t) << " level " << simd_level_name(level) << " nb "
                                              << nb << " pattern " << static_cast<int>(p) << ": " << ref << " vs "
                                              << got;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

// vec_dot_rows: nr = 1..4 rows at a stride (packed and padded), every super-block count of the chunking
// (tails), edge patterns; out[i] must be the bits of vec_dot (same level) and of the scalar reference.
TEST(KQuants, VecDotRowsMatchesVecDot) {
  int checked = 0;
  for (TensorType t : {TensorType::kQ2_K, TensorType::kQ4_K}) {
    const TypeKernels& k = kernels(t);
    const int64_t bb = block_bytes(t);
    std::mt19937 rng(31);
    std::vector<int64_t> counts;
    for (int64_t nb = 1; nb <= 34; ++nb) counts.push_back(nb);
    for (int64_t nb : {47, 48, 49, 64, 100, 131}) counts.push_back(nb);
    for (Pattern p : {Pattern::kRandom, Pattern::kZeros, Pattern::kMaxQuants, Pattern::kMinusOne28,
                      Pattern::kHugeTiny, Pattern::kAlternating}) {
      for (int64_t nb : counts) {
        for (int64_t pad : {int64_t{0}, 3 * bb + 5}) {
          const int64_t stride = nb * bb + pad;
          std::vector<uint8_t> w(static_cast<size_t>(4 * stride), 0xa5);
          Rows first;
          for (int r = 0; r < 4; ++r) {
            // Mixed rows: row 1 random even when the pattern is an edge case, so lanes differ per row.
            Rows rr = make_rows(rng, t, nb, r == 1 ? Pattern::kRandom : p, true);
            std::memcpy(w.data() + r * stride, rr.w.data(), rr.w.size());
            if (r == 0) first = std::move(rr);
          }
          const int64_t n = nb * 256;
          float ref[4];
          for (int r = 0; r < 4; ++r) ref[r] = k.vec_dot[0](n, w.data() + r * stride, first.a.data());
          for (SimdLevel level : test::runnable_simd_levels()) {
            const VecDotRowsFn rows = select_vec_dot_rows(k, level);
            if (rows == nullptr) continue;
            const VecDotFn dot = select_vec_dot(k, level);
            for (int nr = 1; nr <= 4; ++nr) {
              for (int r0 = 0; r0 + nr <= 4; ++r0) {
                float out[4] = {-1.0f, -1.0f, -1.0f, -1.0f};
                rows(n, w.data() + r0 * stride, stride, first.a.data(), nr, out);
                for (int i = 0; i < nr; ++i) {
                  const float single = dot(n, w.data() + (r0 + i) * stride, first.a.data());
                  ASSERT_TRUE(same_float(single, out[i]) && same_float(ref[r0 + i], out[i]))
                      << tensor_type_name(t) << " level " << simd_level_name(level) << " nb " << nb << " pattern "
                      << static_cast<int>(p) << " nr " << nr << " r0 " << r0 << " i " << i << ": " << out[i]
                      << " vs " << single << " / " << ref[r0 + i];
                  ++checked;
                }
                for (int i = nr; i < 4; ++i) EXPECT_EQ(out[i], -1.0f) << "wrote past nr";
              }
            }
          }
        }
      }
    }
  }
  if (has_avx512(detected_simd_level())) {
    EXPECT_GT(checked, 1000);  // the AVX-512 multi-row kernels ran
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

// Tile kernels (matmul) on raw rows of every pattern, inconsistent bsums included: 4 weight rows and
// kMaxTileCols activation rows, every nr x nc, bit-identical to the scalar vec_dot.
TEST(KQuants, TileMatchesScalarOnRawRows) {
  std::mt19937 rng(31);
  int tested = 0;
  for (TensorType t : {TensorType::kQ2_K, TensorType::kQ4_K}) {
    const TypeKernels& k = *type_kernels(t);
    for (Pattern p : {Pattern::kRandom, Pattern::kZeros, Pattern::kMaxQuants, Pattern::kMinusOne28,
                      Pattern::kHugeTiny, Pattern::kAlternating}) {
      for (int64_t nb : {1, 7, 8, 9, 17}) {
        std::vector<uint8_t> w;
        std::vector<BlockQ8_K> a;
        for (int row = 0; row < std::max(4, kMaxTileColsAny); ++row) {
          const Rows r = make_rows(rng, t, nb, p, row % 3 != 2);
          if (row < 4) w.insert(w.end(), r.w.begin(), r.w.end());
          if (row < kMaxTileColsAny) a.insert(a.end(), r.a.begin(), r.a.end());
        }
        tested += test::expect_tiles_match_scalar(k, nb * 256, w.data(), nb * block_bytes(t),
                                                  reinterpret_cast<const uint8_t*>(a.data()),
                                                  nb * static_cast<int64_t>(sizeof(BlockQ8_K)), kMaxTileColsAny,
                                                  std::string(tensor_type_name(t)) + " pattern " +
                                                      std::to_string(static_cast<int>(p)));
      }
    }
  }
  EXPECT_GT(tested, 0);
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

TEST(KQuants, SimdMatchesScalarOnQuantizedRows) {
  for (TensorType t : {TensorType::kQ2_K, TensorType::kQ4_K}) {
    const TypeKernels& k = kernels(t);
    std::mt19937 rng(23);
    for (int64_t n : {256, 512, 4096, 4096 + 256 * 3, 7168}) {
      const auto wx = test::gaussian_row(rng, n, 0.02f);
      const auto ax = test::gaussian_row(rng, n, 2.0f);
      std::vector<uint8_t> w(static_cast<size_t>(n / 256 * block_bytes(t)));
      std::vector<uint8_t> a(static_cast<size_t>(act_row_bytes(k.act, n)));
      k.quantize_row(wx.data(), w.data(), n, nullptr);
      quantize_act_row(k.act, ax.data(), a.data(), n);
      const float ref = k.vec_dot[0](n, w.data(), a.data());
      for (SimdLevel level : test::runnable_simd_levels())
        EXPECT_TRUE(same_float(ref, select_vec_dot(k, level)(n, w.data(), a.data()))) << n;
    }
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

TEST(KQuants, VecDotMatchesF64Reference) {
  for (TensorType t : {TensorType::kQ2_K, TensorType::kQ4_K}) {
    const TypeKernels& k = kernels(t);
    std::mt19937 rng(29);
    for (int64_t nb : {1, 3, 16, 17, 32, 40}) {
      const Rows r = make_rows(rng, t, nb, Pattern::kRandom, true);
      const int64_t n = nb * 256;
      std::vector<float> wd(static_cast<size_t>(n));
      k.dequantize_row(r.w.data(), wd.data(), n);
      // The scale/min split of each block, from the dequantized values: w = dl·q − ml, so
      // |dl·q·x| + |ml·x| bounds the cancellation in d·isum_sc − dmin·isum_m.
      std::vector<float> zero_w(static_cast<size_t>(n));
      double ref = 0, mag = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8_K& a = r.a[static_cast<size_t>(b)];
        for (int i = 0; i < 256; ++i) {
          const double x = static_cast<double>(a.d) * a.qs[i];
          ref += static_cast<double>(wd[b * 256 + i]) * x;
        }
      }
      // mag: Σ (|d·sc·q| + |dmin·m|)·|x| computed from the raw block fields.
      std::vector<uint8_t> wz = r.w;
      for (int64_t b = 0; b < nb; ++b) {  // dmin := 0 gives the dl·q part; its negation-free magnitude
        test::put_u16(wz.data() + b * block_bytes(t) + (t == TensorType::kQ2_K ? 82 : 2), 0);
      }
      k.dequantize_row(wz.data(), zero_w.data(), n);
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8_K& a = r.a[static_cast<size_t>(b)];
        for (int i = 0; i < 256; ++i) {
          const double x = std::fabs(static_cast<double>(a.d) * a.qs[i]);
          const double dq = zero_w[b * 256 + i];
          mag += (std::fabs(dq) + std::fabs(dq - wd[b * 256 + i])) * x;
        }
      }
      // Per block: dequantize rounds dl/ml once (ref side), the kernel rounds d·isum_sc, dmin·isum_m,
      // the difference, the d_x product and (Q4_K) the int->float of isum_sc: ≤ 8 ulp of mag, then
      // nb/32 + 5 partial additions.
      const double tol = (8.0 + static_cast<double>(nb) / 32.0 + 5.0) * std::ldexp(mag, -23);
      for (SimdLevel level : test::runnable_simd_levels())
        EXPECT_NEAR(select_vec_dot(k, level)(n, r.w.data(), r.a.data()), ref, tol) << tensor_type_name(t) << nb;
    }
  }
  DSV4_SKIP_MISSING_SIMD_LEVELS();
}

}  // namespace
}  // namespace dsv4::cpu
