// numerics/quant_ref_k.h — Q2_K and Q4_K (ggml types 10, 12) scalar reference: one-block dequantizers
// (bit-identical to gguf-py) and the dots with BlockQ8_K activations (numerics/quant_ref.h's
// quantize_act_q8_k_block). Host C++ and CUDA device code alike; the CPU backend's dequantize_row /
// vec_dot[0] entries call these.
#pragma once

#include <cstdint>

#include "numerics/accumulate.h"
#include "numerics/blocks.h"
#include "numerics/half.h"
#include "numerics/hd.h"

namespace dsv4::qref {

// ---- Q2_K --------------------------------------------------------------------------------------------

// 256 outputs, gguf-py order: element e = 128h + 32j + l, k = e / 16: dl = d * (scales[k] & 15),
// ml = dmin * (scales[k] >> 4), q = (qs[32h + l] >> 2j) & 3, x = dl * q - ml (all f32, no fma).
DSV4_HD void dequantize_block_q2_k(const BlockQ2_K* w, float* out) {
  const float d = f16_to_f32(w->d);
  const float dmin = f16_to_f32(w->dmin);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e / 32) % 4, l = e % 32;
    const int k = e / 16;
    const float dl = d * static_cast<float>(w->scales[k] & 0xf);
    const float ml = dmin * static_cast<float>(w->scales[k] >> 4);
    const int q = (w->qs[32 * h + l] >> (2 * j)) & 3;
    out[e] = dl * static_cast<float>(q) - ml;
  }
}

// Super-block contribution (Q2_K x Q8_K):
//   isum_sc = Σ_{k<16} (scales[k] & 15) · Σ_{i<16} q[16k+i]·a.qs[16k+i]     (exact int32)
//   isum_m  = Σ_{k<16} (scales[k] >> 4) · a.bsums[k]                          (exact int32)
//   v = a.d · ((d · (float)isum_sc) − (dmin · (float)isum_m))   (d, dmin = f16_to_f32; 4 f32 ops)
// The integer sums are split by sub-block ranges (q2_k_isums over [k0, k1)) so that several GPU lanes
// can share a block: any split adds up to the same integers, and q2_k_finish is the one float part.
struct KQuantIsums {
  int32_t sc = 0, m = 0;
};
DSV4_HD KQuantIsums q2_k_isums(const BlockQ2_K& w, const BlockQ8_K& a, int k0, int k1) {
  KQuantIsums s;
  for (int k = k0; k < k1; ++k) {
    int32_t sub = 0;
    for (int i = 0; i < 16; ++i) {
      const int e = 16 * k + i, h = e / 128, j = (e / 32) % 4, l = e % 32;
      sub += ((w.qs[32 * h + l] >> (2 * j)) & 3) * static_cast<int32_t>(a.qs[e]);
    }
    s.sc += (w.scales[k] & 15) * sub;
    s.m += (w.scales[k] >> 4) * static_cast<int32_t>(a.bsums[k]);
  }
  return s;
}
DSV4_HD float q2_k_finish(const BlockQ2_K& w, const BlockQ8_K& a, KQuantIsums s) {
  const float t_sc = f16_to_f32(w.d) * static_cast<float>(s.sc);
  const float t_m = f16_to_f32(w.dmin) * static_cast<float>(s.m);
  return a.d * (t_sc - t_m);
}
DSV4_HD float dot_block_q2_k(const BlockQ2_K& w, const BlockQ8_K& a) { return q2_k_finish(w, a, q2_k_isums(w, a, 0, 16)); }

// ACCUMULATION ORDER: partial[b % 32] += dot_block_q2_k(w[b], x[b]) for super-block b ascending, then
// Partials32::reduce().
DSV4_HD float vec_dot_q2_k(int64_t n, const BlockQ2_K* w, const BlockQ8_K* x) {
  Partials32 acc;
  for (int64_t b = 0; b < n / 256; ++b) acc.add(b, dot_block_q2_k(hd::load_unaligned(w + b), x[b]));
  return acc.reduce();
}

// ---- Q4_K --------------------------------------------------------------------------------------------

// The 6-bit (scale, min) pair j < 8 of a Q4_K block (gguf.md §5.4's per-j formulas).
DSV4_HD void q4_k_scale_min(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// 256 outputs: sub-block j (32 elements) has dl = d * sc_j, ml = dmin * m_j; element 32j + l has
// q = (qs[32(j/2) + l] >> 4(j%2)) & 15, x = dl * q - ml (f32, no fma).
DSV4_HD void dequantize_block_q4_k(const BlockQ4_K* w, float* out) {
  const float d = f16_to_f32(w->d);
  const float dmin = f16_to_f32(w->dmin);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    q4_k_scale_min(w->scales, j, &sc, &m);
    const float dl = d * static_cast<float>(sc);
    const float ml = dmin * static_cast<float>(m);
    const int c = j / 2, hi = j % 2;
    for (int l = 0; l < 32; ++l) {
      const int q = (w->qs[32 * c + l] >> (4 * hi)) & 15;
      out[32 * j + l] = dl * static_cast<float>(q) - ml;
    }
  }
}

// Super-block contribution (Q4_K x Q8_K), with (sc_j, m_j) = q4_k_scale_min:
//   isum_sc = Σ_{j<8} sc_j · Σ_{i<32} q[32j+i]·a.qs[32j+i]                   (exact int32)
//   isum_m  = Σ_{j<8} m_j · (a.bsums[2j] + a.bsums[2j+1])                     (exact int32)
//   v = a.d · ((d · (float)isum_sc) − (dmin · (float)isum_m))   (d, dmin = f16_to_f32; 4 f32 ops;
//       (float)isum_sc rounds to nearest even when |isum_sc| > 2^24)
// Integer sums over sub-blocks j in [j0, j1) (any split adds up to the same integers), and the float part.
DSV4_HD KQuantIsums q4_k_isums(const BlockQ4_K& w, const BlockQ8_K& a, int j0, int j1) {
  KQuantIsums r;
  for (int j = j0; j < j1; ++j) {
    int sc, m;
    q4_k_scale_min(w.scales, j, &sc, &m);
    const int c = j / 2, hi = j % 2;
    int32_t s = 0;
    for (int l = 0; l < 32; ++l) s += ((w.qs[32 * c + l] >> (4 * hi)) & 15) * static_cast<int32_t>(a.qs[32 * j + l]);
    r.sc += sc * s;
    r.m += m * (static_cast<int32_t>(a.bsums[2 * j]) + static_cast<int32_t>(a.bsums[2 * j + 1]));
  }
  return r;
}
DSV4_HD float q4_k_finish(const BlockQ4_K& w, const BlockQ8_K& a, KQuantIsums s) {
  const float t_sc = f16_to_f32(w.d) * static_cast<float>(s.sc);
  const float t_m = f16_to_f32(w.dmin) * static_cast<float>(s.m);
  return a.d * (t_sc - t_m);
}
DSV4_HD float dot_block_q4_k(const BlockQ4_K& w, const BlockQ8_K& a) { return q4_k_finish(w, a, q4_k_isums(w, a, 0, 8)); }

// ACCUMULATION ORDER: partial[b % 32] += dot_block_q4_k(w[b], x[b]) for super-block b ascending, then
// Partials32::reduce().
DSV4_HD float vec_dot_q4_k(int64_t n, const BlockQ4_K* w, const BlockQ8_K* x) {
  Partials32 acc;
  for (int64_t b = 0; b < n / 256; ++b) acc.add(b, dot_block_q4_k(hd::load_unaligned(w + b), x[b]));
  return acc.reduce();
}

}  // namespace dsv4::qref
