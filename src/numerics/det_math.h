// numerics/det_math.h — the project's own elementwise functions (exp, log1p, softplus, sigmoid,
// SiLU, sin/cos), written as fixed sequences of IEEE operations (explicit fma, no library calls
// except sqrt, which IEEE rounds exactly). Host C++ and CUDA device code alike (numerics/hd.h: fma,
// division and rounding go through hd::, the standard library on the host and the *_rn intrinsics
// on the device), so every backend computes the same bits. Accuracy, measured by
// tests/unit/numerics/det_math_test.cpp: exp ≤ 2 ulp; log1p/sin/cos computed in double and rounded
// once to float.
#pragma once

#include <cstdint>

#include "numerics/hd.h"

namespace dsv4::det {

// e^x. Range reduction x = k·ln2 + r (k = round-to-nearest-even via the 1.5·2^23 trick,
// r = x − k·ln2_hi − k·ln2_lo with fma), degree-7 Taylor polynomial in Horner form with fma,
// then exact scaling by 2^k in two steps (subnormal results stay correct).
DSV4_HD float exp(float x) {
  if (x != x) return x;
  if (x > 88.7228394f) return hd::f32_from_bits(0x7f800000u);  // +inf
  if (x < -103.972084f) return 0.0f;
  const float shifter = 12582912.0f;  // 1.5 · 2^23
  const float kf = (x * 1.44269502f + shifter) - shifter;
  float r = hd::fma(-kf, 0.693145752f, x);    // ln2 high part (exact product for |k| < 2^9)
  r = hd::fma(-kf, 1.42860677e-06f, r);       // ln2 low part
  float p = 1.98412698e-04f;                  // 1/5040
  p = hd::fma(p, r, 1.38888889e-03f);         // 1/720
  p = hd::fma(p, r, 8.33333333e-03f);         // 1/120
  p = hd::fma(p, r, 4.16666667e-02f);         // 1/24
  p = hd::fma(p, r, 1.66666667e-01f);         // 1/6
  p = hd::fma(p, r, 0.5f);
  p = hd::fma(p, r, 1.0f);
  p = hd::fma(p, r, 1.0f);
  int k = static_cast<int>(kf);
  // 2^k as two factors so that k down to -149 works: 2^(k/2) · 2^(k - k/2).
  const int k1 = k / 2, k2 = k - k1;
  const float s1 = hd::f32_from_bits(static_cast<uint32_t>(k1 + 127) << 23);
  const float s2 = hd::f32_from_bits(static_cast<uint32_t>(k2 + 127) << 23);
  return (p * s1) * s2;
}

// ln(y) for finite y > 0 in double: y = m·2^e with m in [√½, √2), s = (m−1)/(m+1),
// ln m = 2(s + s³/3 + … + s¹⁵/15) (Horner in s², fma), + e·ln2 (hi/lo).
DSV4_HD double log_pos(double y) {
  uint64_t u = hd::f64_bits(y);
  int e = static_cast<int>((u >> 52) & 0x7ff) - 1023;
  u = (u & 0x000fffffffffffffull) | 0x3ff0000000000000ull;  // m in [1, 2)
  double m = hd::f64_from_bits(u);
  if (m > 1.4142135623730951) {
    m = m * 0.5;
    e += 1;
  }
  const double s = hd::div(m - 1.0, m + 1.0), s2 = s * s;
  double p = 1.0 / 15;
  p = hd::fma(p, s2, 1.0 / 13);
  p = hd::fma(p, s2, 1.0 / 11);
  p = hd::fma(p, s2, 1.0 / 9);
  p = hd::fma(p, s2, 1.0 / 7);
  p = hd::fma(p, s2, 1.0 / 5);
  p = hd::fma(p, s2, 1.0 / 3);
  p = hd::fma(p, s2, 1.0);
  const double ln_m = 2.0 * s * p;
  return hd::fma(static_cast<double>(e), 6.93147180369123816490e-01, ln_m) +
         static_cast<double>(e) * 1.90821492927058770002e-10;
}

// ln(1 + u) for u >= 0 (softplus argument), double inside, one rounding to float.
DSV4_HD float log1p_pos(float u) {
  const double du = u;
  if (du < 1e-4) return static_cast<float>(du * (1.0 - du * (0.5 - du * (1.0 / 3.0))));
  return static_cast<float>(log_pos(1.0 + du));
}

// softplus(x) = max(x, 0) + ln(1 + e^−|x|); NaN → NaN (log_pos would read a NaN's exponent field
// as a number and return ≈ 710).
DSV4_HD float softplus(float x) {
  if (x != x) return x;
  const float ax = x < 0 ? -x : x;
  return (x > 0 ? x : 0.0f) + log1p_pos(exp(-ax));
}

DSV4_HD float sigmoid(float x) { return hd::div(1.0f, 1.0f + exp(-x)); }
DSV4_HD float silu(float x) { return x * sigmoid(x); }

// One element of the clamped SwiGLU (backend.h moe): silu(std::min(g, L)) · std::min(std::max(u, −L), L),
// with std::min/max's rule written out (the first operand unless the second compares less / greater),
// so a NaN g or u passes through (CUDA's fminf/fmaxf would drop it).
DSV4_HD float swiglu_clamp(float g, float u, float limit) {
  const float gi = limit < g ? limit : g;
  const float lo = u < -limit ? -limit : u;
  const float ui = limit < lo ? limit : lo;
  return silu(gi) * ui;
}

// sin and cos of a double angle (|a| up to ~1e9): Cody-Waite reduction by π/2 with a 3-part
// constant, then the classic minimax kernels on [−π/4, π/4] (fdlibm coefficients, as data).
DSV4_HD void sincos(double a, double* s_out, double* c_out) {
  const double inv_pio2 = 6.36619772367581382433e-01;
  const double pio2_1 = 1.57079632673412561417e+00, pio2_2 = 6.07710050650619224932e-11,
               pio2_3 = 2.02226624879595063154e-21;
  const double kd = hd::round_even(a * inv_pio2);
  double r = hd::fma(-kd, pio2_1, a);
  r = hd::fma(-kd, pio2_2, r);
  r = hd::fma(-kd, pio2_3, r);
  const double z = r * r;
  // sin kernel
  double ps = 1.58969099521155010221e-10;
  ps = hd::fma(ps, z, -2.50507602534068634195e-08);
  ps = hd::fma(ps, z, 2.75573137070700676789e-06);
  ps = hd::fma(ps, z, -1.98412698298579493134e-04);
  ps = hd::fma(ps, z, 8.33333333332248946124e-03);
  ps = hd::fma(ps, z, -1.66666666666666324348e-01);
  const double sn = hd::fma(r * z, ps, r);
  // cos kernel
  double pc = -1.13596475577881948265e-11;
  pc = hd::fma(pc, z, 2.08757232129817482790e-09);
  pc = hd::fma(pc, z, -2.75573143513906633035e-07);
  pc = hd::fma(pc, z, 2.48015872894767294178e-05);
  pc = hd::fma(pc, z, -1.38888888888741095749e-03);
  pc = hd::fma(pc, z, 4.16666666666666019037e-02);
  const double cs = hd::fma(z * z, pc, 1.0 - 0.5 * z);
  const int64_t q = static_cast<int64_t>(kd) & 3;
  switch (q) {
    case 0: *s_out = sn; *c_out = cs; break;
    case 1: *s_out = cs; *c_out = -sn; break;
    case 2: *s_out = -sn; *c_out = -cs; break;
    default: *s_out = -cs; *c_out = sn; break;
  }
}

}  // namespace dsv4::det
