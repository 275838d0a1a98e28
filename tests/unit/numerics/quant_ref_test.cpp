// tests/unit/numerics/quant_ref_test.cpp — numerics/quant_ref.h's helpers and activation quantizers
// against the <cmath> formulation they replace (std::round, std::nearbyint, std::fmax/fmin,
// std::fabs, std::isfinite), bit for bit, including NaN/inf inputs, ties and subnormal block maxima.
// (The row dots and dequantizers are checked through backend_cpu, whose scalar references call them
// and whose SIMD kernels are compared to those bit for bit.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "numerics/quant_ref.h"

namespace dsv4 {
namespace {

uint32_t bits(float f) { return hd::f32_bits(f); }

// Floats spread over every exponent: bit patterns on a stride, plus the special values and ties.
std::vector<float> sample_floats() {
  std::vector<float> v;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 65521) v.push_back(hd::f32_from_bits(static_cast<uint32_t>(u)));
  const float inf = std::numeric_limits<float>::infinity();
  for (float f : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 8388607.5f, 8388608.0f,
                  -8388607.5f, 0.49999997f, -0.49999997f, 1e-45f, -1e-45f})
    v.push_back(f);
  for (int k = -300; k <= 300; ++k) {
    v.push_back(static_cast<float>(k) + 0.5f);  // ties
    v.push_back(static_cast<float>(k) * 0.25f);
    v.push_back(std::nextafter(static_cast<float>(k) + 0.5f, 0.0f));
    v.push_back(std::nextafter(static_cast<float>(k) + 0.5f, 1000.0f));
  }
  return v;
}

TEST(QuantRef, HelpersMatchCmath) {
  const std::vector<float> xs = sample_floats();
  for (float x : xs) {
    EXPECT_EQ(bits(qref::f32_abs(x)), bits(std::fabs(x))) << x;
    EXPECT_EQ(qref::is_finite(x), std::isfinite(x)) << x;
    const float r = qref::round_half_away(x), e = std::round(x);
    if (std::isnan(e)) EXPECT_TRUE(std::isnan(r));
    else EXPECT_EQ(bits(r), bits(e)) << x;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float a : {-127.0f, 127.0f, -128.0f, 0.0f, 3.5f, nan})
    for (float x : xs) {
      // Signaling NaNs are outside the contract (glibc's fmax returns NaN for them; arithmetic only
      // ever produces quiet NaNs, and the quantizers feed fmax_c/fmin_c arithmetic results only).
      if (std::isnan(x) && (bits(x) & 0x00400000u) == 0) continue;
      const float mx = qref::fmax_c(a, x), mn = qref::fmin_c(a, x);
      const float smx = std::fmax(a, x), smn = std::fmin(a, x);
      if (std::isnan(smx)) EXPECT_TRUE(std::isnan(mx));
      else EXPECT_EQ(mx, smx) << a << " " << x;  // equal values; the sign of equal zeros may differ
      if (std::isnan(smn)) EXPECT_TRUE(std::isnan(mn));
      else EXPECT_EQ(mn, smn) << a << " " << x;
    }
}

// The activation quantizers as they were written with <cmath> (backend/cpu/act_quant.cpp before they
// moved to numerics/quant_ref.h).
float finite_or_zero(float x) { return std::isfinite(x) ? x : 0.0f; }

BlockQ8_0Act cmath_q8_0(const float* x) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(finite_or_zero(x[i])));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ8_0Act blk;
  blk.d = d;
  for (int i = 0; i < 32; ++i) {
    float q = std::round(finite_or_zero(x[i]) * id);
    q = std::fmin(127.0f, std::fmax(-127.0f, q));
    blk.qs[i] = static_cast<int8_t>(q);
  }
  return blk;
}

BlockQ8_K cmath_q8_k(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < 256; ++i) {
    const float v = finite_or_zero(x[i]);
    const float ax = std::fabs(v);
    if (ax > amax) { amax = ax; max = v; }
  }
  BlockQ8_K blk;
  std::memset(&blk, 0, sizeof(blk));
  if (amax != 0.0f) {
    const float iscale = -127.0f / max;
    for (int i = 0; i < 256; ++i) {
      float q = std::nearbyint(iscale * finite_or_zero(x[i]));
      q = std::fmin(127.0f, std::fmax(-128.0f, q));
      blk.qs[i] = static_cast<int8_t>(q);
    }
    for (int k = 0; k < 16; ++k) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += blk.qs[16 * k + i];
      blk.bsums[k] = static_cast<int16_t>(s);
    }
    blk.d = 1.0f / iscale;
  }
  return blk;
}

// Blocks of 256 with ordinary, tie-producing, special and subnormal contents.
std::vector<std::vector<float>> sample_blocks() {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> blocks;
  for (int t = 0; t < 200; ++t) {
    std::vector<float> x(256);
    const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 300) - 150);
    for (float& v : x) v = normal(rng) * scale;
    if (t % 4 == 1) for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 255) - 127);  // ties
    if (t % 4 == 2) { x[3] = nan; x[40] = inf; x[77] = -inf; x[200] = -nan; }
    if (t % 7 == 3) for (int i = 0; i < 256; i += 2) x[i] = 0.0f;
    blocks.push_back(x);
  }
  for (float tiny : {1e-45f, -1e-45f, 1e-40f, -3e-39f, 1.1754942e-38f}) {  // subnormal maxima: 1/d overflows
    std::vector<float> x(256, 0.0f);
    x[5] = tiny;
    x[100] = tiny * 0.5f;
    x[130] = -tiny;
    blocks.push_back(x);
  }
  blocks.emplace_back(256, 0.0f);
  blocks.emplace_back(256, -0.0f);
  blocks.emplace_back(256, std::numeric_limits<float>::quiet_NaN());
  return blocks;
}

TEST(QuantRef, ActQuantizersMatchCmathFormulation) {
  for (const std::vector<float>& x : sample_blocks()) {
    for (int b = 0; b < 8; ++b) {
      BlockQ8_0Act got;
      qref::quantize_act_q8_0_block(x.data() + 32 * b, &got);
      const BlockQ8_0Act want = cmath_q8_0(x.data() + 32 * b);
      EXPECT_EQ(std::memcmp(&got, &want, sizeof(got)), 0) << x[32 * b];
    }
    BlockQ8_K got;
    std::memset(&got, 0x5a, sizeof(got));
    qref::quantize_act_q8_k_block(x.data(), &got);
    const BlockQ8_K want = cmath_q8_k(x.data());
    EXPECT_EQ(std::memcmp(&got, &want, sizeof(got)), 0) << x[0];
  }
}

TEST(QuantRef, Mxfp4Values) {
  const int want[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  for (uint32_t k = 0; k < 16; ++k) EXPECT_EQ(qref::mxfp4_value(k), want[k]) << k;
}

TEST(QuantRef, Iq2xxsSignsHaveEvenParity) {
  for (int s = 0; s < 128; ++s) {
    EXPECT_EQ(qref::kIq2xxsSigns[s] & 127, s);
    EXPECT_EQ(__builtin_popcount(qref::kIq2xxsSigns[s]) % 2, 0) << s;
  }
}

}  // namespace
}  // namespace dsv4
