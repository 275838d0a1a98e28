// tests/unit/numerics/det_math_test.cpp — accuracy of numerics/det_math.h against long double
// references (expl, log1pl, sinl, cosl; x87 80-bit, 11 bits more than double), measured over dense
// sweeps of the float range and exhaustively where the functions change regime (subnormal results,
// overflow/underflow limits). Each test prints the largest error it saw and asserts a bound just
// above it, so a change that makes any function less accurate fails here.
//
// Error of a float result: |got − ref| / ulp(ref), ulp(ref) the spacing of floats at |ref| (2^-149
// below 2^-126; +inf counts as 2^128, so an overflow to +inf of a value just below 2^128 costs < 1 ulp).
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "numerics/det_math.h"

namespace dsv4::det {
namespace {

constexpr long double kInfL = std::numeric_limits<long double>::infinity();

float from_bits(uint32_t u) { return hd::f32_from_bits(u); }
uint32_t bits_of(float f) { return hd::f32_bits(f); }

// Spacing of floats at |ref| (ref finite; capped at the spacing of the top binade, 2^104).
long double float_ulp(long double ref) {
  ref = fabsl(ref);
  if (ref < 0x1p-126L) return 0x1p-149L;
  int e = 0;
  frexpl(ref, &e);  // ref = m·2^e, m in [0.5, 1)
  if (e > 128) e = 128;
  return ldexpl(1.0L, e - 1 - 23);
}

long double float_ulp_err(float got, long double ref) {
  if (std::isnan(ref) || std::isnan(got)) return std::isnan(ref) && std::isnan(got) ? 0.0L : kInfL;
  long double g = got;
  if (std::isinf(got)) g = copysignl(0x1p128L, g);
  if (fabsl(ref) >= 0x1p128L) ref = copysignl(0x1p128L, ref);  // beyond the floats: rounds to ±inf
  return fabsl(g - ref) / float_ulp(ref);
}

// A dense sweep of every float bit pattern: step `step` through [0, 2^32), with a pseudo-random
// offset inside each step so that all mantissa bits vary.
template <typename F>
void sweep_all_floats(uint32_t step, F&& f) {
  for (uint64_t base = 0; base < (1ull << 32); base += step) {
    const uint32_t jitter = static_cast<uint32_t>((base / step) * 2654435761ull) & (step - 1);
    f(from_bits(static_cast<uint32_t>(base) + jitter));
  }
}

// Every float of [lo, hi] (same sign, lo closer to zero in magnitude or equal).
template <typename F>
void every_float_between(float lo, float hi, F&& f) {
  uint32_t a = bits_of(lo), b = bits_of(hi);
  if (a > b) std::swap(a, b);
  for (uint64_t u = a; u <= b; ++u) f(from_bits(static_cast<uint32_t>(u)));
}

struct MaxErr {
  long double err = 0;
  float at = 0;
  uint64_t n = 0;
  void add(float x, long double e) {
    ++n;
    if (e > err || std::isnan(e)) {
      err = e;
      at = x;
    }
  }
};

TEST(DetMath, ExpUlpError) {
  MaxErr m;
  auto check = [&](float x) {
    const float got = det::exp(x);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(got));
      return;
    }
    m.add(x, float_ulp_err(got, expl(static_cast<long double>(x))));
  };
  sweep_all_floats(256, check);                 // 2^24 values, every binade, NaN and ±inf patterns
  every_float_between(-87.0f, -104.5f, check);  // subnormal results and the underflow limit (all 2.2M)
  every_float_between(88.0f, 89.0f, check);     // the overflow limit (all)
  every_float_between(0.6f, 0.7f, check);       // around k = 0 -> 1 of the range reduction (all)
  check(std::numeric_limits<float>::infinity());
  check(-std::numeric_limits<float>::infinity());
  check(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(det::exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(det::exp(0.0f), 1.0f);
  std::printf("det::exp: max error %.4Lf ulp at x = %.9g (%" PRIu64 " arguments)\n", m.err, m.at, m.n);
  EXPECT_LE(m.err, 2.0L);  // the header's claim
}

TEST(DetMath, Log1pPosUlpError) {
  MaxErr m;
  auto check = [&](float u) {
    if (!(u >= 0.0f) || std::isinf(u)) return;  // domain: finite u >= 0 (softplus passes u in [0, 1])
    m.add(u, float_ulp_err(det::log1p_pos(u), log1pl(static_cast<long double>(u))));
  };
  sweep_all_floats(128, check);                 // 2^25 patterns, the 2^24 non-negative ones count
  every_float_between(0.9e-4f, 1.1e-4f, check);  // around the series / log switch at 1e-4 (all)
  every_float_between(0.40f, 0.42f, check);      // around 1 + u = √2, the log's m switch (all)
  std::printf("det::log1p_pos: max error %.4Lf ulp at u = %.9g (%" PRIu64 " arguments)\n", m.err, m.at, m.n);
  EXPECT_LE(m.err, 0.5001L);  // computed in double, rounded once
}

TEST(DetMath, SoftplusSigmoidSiluUlpError) {
  MaxErr sp, sg, sl;
  // Absolute error where sigmoid's true result is below 2^-126, and where silu's is or sigmoid is 0.
  long double sg_sub_abs = 0, sl_sub_abs = 0;
  auto check = [&](float x) {
    if (std::isnan(x)) {
      // sigmoid, silu and softplus pass a NaN through (softplus once returned ≈ 710: log_pos read
      // the NaN's exponent field as 2^1024).
      EXPECT_TRUE(std::isnan(det::softplus(x)));
      EXPECT_TRUE(std::isnan(det::sigmoid(x)));
      EXPECT_TRUE(std::isnan(det::silu(x)));
      return;
    }
    const long double lx = x;
    const long double e = expl(-fabsl(lx));
    sp.add(x, float_ulp_err(det::softplus(x), (lx > 0 ? lx : 0.0L) + log1pl(e)));
    const long double rs = lx >= 0 ? 1.0L / (1.0L + e) : e / (1.0L + e);
    const long double rl = lx * rs;
    if (rs >= 0x1p-126L) {
      sg.add(x, float_ulp_err(det::sigmoid(x), rs));
    } else {
      sg_sub_abs = std::max(sg_sub_abs, fabsl(static_cast<long double>(det::sigmoid(x)) - rs));
    }
    if (std::isinf(x)) {
      // silu(+inf) = +inf; silu(-inf) = -inf · 0 = NaN (the limit is 0).
      EXPECT_EQ(det::silu(x) == det::silu(x), x > 0);
    } else if (x > -88.7228394f && (fabsl(rl) >= 0x1p-126L || rl == 0)) {
      sl.add(x, float_ulp_err(det::silu(x), rl));
    } else {
      sl_sub_abs = std::max(sl_sub_abs, fabsl(static_cast<long double>(det::silu(x)) - rl));
    }
  };
  sweep_all_floats(256, check);                 // 2^24 values
  every_float_between(-85.0f, -104.5f, check);  // sigmoid/silu results near and below 2^-126 (all)
  std::printf("det::softplus: max error %.4Lf ulp at x = %.9g (%" PRIu64 " arguments)\n", sp.err, sp.at, sp.n);
  std::printf("det::sigmoid: max error %.4Lf ulp at x = %.9g where the result is >= 2^-126; below that "
              "(x < -87.3; 0 from x <= -88.72 since e^-x overflows) absolute error %.3Lg <= 2^-126\n",
              sg.err, sg.at, sg_sub_abs);
  std::printf("det::silu: max error %.4Lf ulp at x = %.9g where |result| >= 2^-126 and x > -88.72; elsewhere "
              "(-0 from x <= -88.72, as sigmoid) absolute error %.3Lg\n", sl.err, sl.at, sl_sub_abs);
  EXPECT_LE(sp.err, 1.5L);
  EXPECT_LE(sg.err, 2.4L);
  // silu's worst case: sigmoid's result subnormal (x < -87.3), then x· scales it back to a normal float.
  EXPECT_LE(sl.err, 4.1L);
  EXPECT_LE(sg_sub_abs, 0x1p-126L);
  EXPECT_LE(sl_sub_abs, 0x1p-121L);  // |x·e^x| at x = -88.72
}

// sincos on double angles: the largest absolute error of sin and cos, and the error after rounding to
// float (what RoPE uses) in float ulps. (Relative error means little here: near a zero of sin or cos
// the result is tiny while the reduction's absolute error stays.)
//
// Measured, not intended: the reduction's absolute error grows as ≈ 2.02e-21 · |a|·2/π, because the
// 3-part constant is fdlibm's pio2_1, pio2_1t and pio2_2t: pio2_1 + pio2_1t is already π/2 to ~86 bits,
// so adding pio2_2t (the tail after fdlibm's *33-bit* pio2_2) makes the constant π/2 + 2.02e-21.
// Harmless for RoPE (≤ 1.4e-15 for positions up to 2^20; every sampled angle still rounds to the
// correctly rounded float), 1.29e-12 at |a| = 1e9. Changing it changes bits, so it is left as is here.
struct SinCosErr {
  long double abs_err = 0, float_ulp = 0;
  double at_abs = 0, at_float = 0;
  uint64_t n = 0;
  void check(double a) {
    double s = 0, c = 0;
    det::sincos(a, &s, &c);
    const long double la = a, rs = sinl(la), rc = cosl(la);
    ++n;
    for (int i = 0; i < 2; ++i) {
      const double got = i == 0 ? s : c;
      const long double ref = i == 0 ? rs : rc;
      const long double d = fabsl(static_cast<long double>(got) - ref);
      if (d > abs_err) abs_err = d, at_abs = a;
      const long double fe = float_ulp_err(static_cast<float>(got), ref);
      if (fe > float_ulp) float_ulp = fe, at_float = a;
    }
  }
  void print(const char* what) const {
    std::printf("det::sincos %s (%" PRIu64 " angles): max abs error %.4Lg = %.3Lf · 2^-53 (at a = %.17g); "
                "rounded to float: max %.6Lf float ulp (at a = %.9g)\n",
                what, n, abs_err, abs_err / 0x1p-53L, at_abs, float_ulp, at_float);
  }
};

TEST(DetMath, SinCosRopeAngles) {
  // The RoPE angles of backend rope_tail: float(position) · freq_k in f32, freq_k = f32(theta^(-2k/64))
  // (model/session.cpp rope_freqs, main and compress bases), positions up to 1M.
  SinCosErr e;
  for (double theta : {10000.0, 160000.0}) {
    for (int k = 0; k < 32; ++k) {
      const float freq = static_cast<float>(std::pow(theta, -2.0 * k / 64.0));
      const int64_t step = k == 0 ? 1 : 61;
      if (k == 0 && theta != 10000.0) continue;  // freq 1: the same angles for both bases
      for (int64_t pos = 0; pos <= (1 << 20); pos += step) {
        const float angle = static_cast<float>(pos) * freq;
        e.check(static_cast<double>(angle));
      }
    }
  }
  e.print("RoPE angles, positions 0..2^20");
  EXPECT_LE(e.abs_err, 13 * 0x1p-53L);
  EXPECT_LE(e.float_ulp, 0.5L + 0x1p-20L);  // every sampled RoPE angle rounds correctly to float
}

TEST(DetMath, SinCosWideRange) {
  // Log-uniform magnitudes 2^-30 .. 1e9 of both signs, and the doubles nearest to multiples of π/2
  // (the reduction's hard cases: results near zero) up to 1e9.
  SinCosErr wide, near_zero;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return state;
  };
  const double lo = std::log(0x1p-30), hi = std::log(1e9);
  for (int i = 0; i < (1 << 20); ++i) {
    const double t = static_cast<double>(next() >> 11) * 0x1p-53;
    const double a = std::exp(lo + (hi - lo) * t);
    wide.check((next() & 1) ? -a : a);
  }
  const long double pio2 = 1.5707963267948966192313216916397514L;
  for (int i = 0; i < (1 << 18); ++i) {
    const uint64_t q = next() % 636619772ull;  // q·π/2 <= 1e9
    near_zero.check(static_cast<double>(static_cast<long double>(q) * pio2));
  }
  wide.print("|a| in [2^-30, 1e9]");
  near_zero.print("a nearest to q·pi/2 <= 1e9");
  // The reduction constant's 2.02e-21 excess times |a|·2/π <= 6.4e8, plus rounding.
  EXPECT_LE(wide.abs_err, 1.3e-12L);
  EXPECT_LE(wide.float_ulp, 0.55L);
  EXPECT_LE(near_zero.abs_err, 1.3e-12L);  // (its float ulps are relative to results near 0: printed only)
}

}  // namespace
}  // namespace dsv4::det
