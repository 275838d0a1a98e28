// backend/cpu/det_math.h — the project's own elementwise functions (exp, log1p, softplus, sigmoid,
// SiLU, sin/cos), written as fixed sequences of IEEE operations (explicit fma, no library calls
// except sqrt, which IEEE rounds exactly) so the CUDA backend can reproduce them bit for bit
// (fmaf → __fmaf_rn, double ops → *_rn intrinsics). Accuracy: exp ≤ 2 ulp, log1p/sin/cos computed
// in double and rounded once to float.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace dsv4::cpu::det {

inline float bits_to_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline double bits_to_double(uint64_t u) { double f; std::memcpy(&f, &u, 8); return f; }

// e^x. Range reduction x = k·ln2 + r (k = round-to-nearest-even via the 1.5·2^23 trick,
// r = x − k·ln2_hi − k·ln2_lo with fma), degree-7 Taylor polynomial in Horner form with fma,
// then exact scaling by 2^k in two steps (subnormal results stay correct).
inline float exp(float x) {
  if (x != x) return x;
  if (x > 88.7228394f) return std::numeric_limits<float>::infinity();
  if (x < -103.972084f) return 0.0f;
  const float shifter = 12582912.0f;  // 1.5 · 2^23
  const float kf = (x * 1.44269502f + shifter) - shifter;
  float r = std::fma(-kf, 0.693145752f, x);   // ln2 high part (exact product for |k| < 2^9)
  r = std::fma(-kf, 1.42860677e-06f, r);      // ln2 low part
  float p = 1.98412698e-04f;                  // 1/5040
  p = std::fma(p, r, 1.38888889e-03f);        // 1/720
  p = std::fma(p, r, 8.33333333e-03f);        // 1/120
  p = std::fma(p, r, 4.16666667e-02f);        // 1/24
  p = std::fma(p, r, 1.66666667e-01f);        // 1/6
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  int k = static_cast<int>(kf);
  // 2^k as two factors so that k down to -149 works: 2^(k/2) · 2^(k - k/2).
  const int k1 = k / 2, k2 = k - k1;
  const float s1 = bits_to_float(static_cast<uint32_t>(k1 + 127) << 23);
  const float s2 = bits_to_float(static_cast<uint32_t>(k2 + 127) << 23);
  return (p * s1) * s2;
}

// ln(y) for finite y > 0 in double: y = m·2^e with m in [√½, √2), s = (m−1)/(m+1),
// ln m = 2(s + s³/3 + … + s¹⁵/15) (Horner in s², fma), + e·ln2 (hi/lo).
inline double log_pos(double y) {
  uint64_t u;
  std::memcpy(&u, &y, 8);
  int e = static_cast<int>((u >> 52) & 0x7ff) - 1023;
  u = (u & 0x000fffffffffffffull) | 0x3ff0000000000000ull;  // m in [1, 2)
  double m = bits_to_double(u);
  if (m > 1.4142135623730951) {
    m = m * 0.5;
    e += 1;
  }
  const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  double p = 1.0 / 15;
  p = std::fma(p, s2, 1.0 / 13);
  p = std::fma(p, s2, 1.0 / 11);
  p = std::fma(p, s2, 1.0 / 9);
  p = std::fma(p, s2, 1.0 / 7);
  p = std::fma(p, s2, 1.0 / 5);
  p = std::fma(p, s2, 1.0 / 3);
  p = std::fma(p, s2, 1.0);
  const double ln_m = 2.0 * s * p;
  return std::fma(static_cast<double>(e), 6.93147180369123816490e-01, ln_m) +
         static_cast<double>(e) * 1.90821492927058770002e-10;
}

// ln(1 + u) for u >= 0 (softplus argument), double inside, one rounding to float.
inline float log1p_pos(float u) {
  const double du = u;
  if (du < 1e-4) return static_cast<float>(du * (1.0 - du * (0.5 - du * (1.0 / 3.0))));
  return static_cast<float>(log_pos(1.0 + du));
}

// softplus(x) = max(x, 0) + ln(1 + e^−|x|).
inline float softplus(float x) {
  const float ax = x < 0 ? -x : x;
  return (x > 0 ? x : 0.0f) + log1p_pos(exp(-ax));
}

inline float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }
inline float silu(float x) { return x * sigmoid(x); }

// sin and cos of a double angle (|a| up to ~1e9): Cody-Waite reduction by π/2 with a 3-part
// constant, then the classic minimax kernels on [−π/4, π/4] (fdlibm coefficients, as data).
inline void sincos(double a, double* s_out, double* c_out) {
  const double inv_pio2 = 6.36619772367581382433e-01;
  const double pio2_1 = 1.57079632673412561417e+00, pio2_2 = 6.07710050650619224932e-11,
               pio2_3 = 2.02226624879595063154e-21;
  const double kd = std::nearbyint(a * inv_pio2);
  double r = std::fma(-kd, pio2_1, a);
  r = std::fma(-kd, pio2_2, r);
  r = std::fma(-kd, pio2_3, r);
  const double z = r * r;
  // sin kernel
  double ps = 1.58969099521155010221e-10;
  ps = std::fma(ps, z, -2.50507602534068634195e-08);
  ps = std::fma(ps, z, 2.75573137070700676789e-06);
  ps = std::fma(ps, z, -1.98412698298579493134e-04);
  ps = std::fma(ps, z, 8.33333333332248946124e-03);
  ps = std::fma(ps, z, -1.66666666666666324348e-01);
  const double sn = std::fma(r * z, ps, r);
  // cos kernel
  double pc = -1.13596475577881948265e-11;
  pc = std::fma(pc, z, 2.08757232129817482790e-09);
  pc = std::fma(pc, z, -2.75573143513906633035e-07);
  pc = std::fma(pc, z, 2.48015872894767294178e-05);
  pc = std::fma(pc, z, -1.38888888888741095749e-03);
  pc = std::fma(pc, z, 4.16666666666666019037e-02);
  const double cs = std::fma(z * z, pc, 1.0 - 0.5 * z);
  const int64_t q = static_cast<int64_t>(kd) & 3;
  switch (q) {
    case 0: *s_out = sn; *c_out = cs; break;
    case 1: *s_out = cs; *c_out = -sn; break;
    case 2: *s_out = -sn; *c_out = -cs; break;
    default: *s_out = -cs; *c_out = sn; break;
  }
}

}  // namespace dsv4::cpu::det
