// numerics/quant_ref.h — the SCALAR REFERENCE quantization arithmetic, shared by the CPU backend
// (its vec_dot[0] / quantize_act / dequantize_row table entries call these functions) and CUDA device
// code (DSV4_HD, numerics/hd.h), so every backend computes from one source and the CPU test suite, which
// checks every SIMD kernel against the scalar reference bit for bit, proves this source too.
//
// Contents (namespace dsv4::qref):
//   helpers         f32_abs, is_finite, finite_or_zero, fmax_c / fmin_c (C fmax/fmin NaN rule written
//                   out), round_half_away (std::round)
//   activations     quantize_act_q8_0_block (32 floats -> BlockQ8_0Act),
//                   quantize_act_q8_k_block (256 floats -> BlockQ8_K)
//   float weights   load_f32 / load_f16 / load_bf16 (element i of a row; also the dequantizers),
//                   vec_dot_f32 / vec_dot_f16 / vec_dot_bf16 (one row x f32 activations)
//   Q8_0            dot_block_q8_0 (one block's scaled contribution), vec_dot_q8_0, dequantize_block_q8_0
//   K-quants        numerics/quant_ref_k.h (Q2_K, Q4_K with BlockQ8_K activations)
//   IQ2_XXS         numerics/quant_ref_iq2_xxs.h (grid/sign tables passed in: numerics/iq2_xxs_grid.h)
//   MXFP4           numerics/quant_ref_mxfp4.h (BlockQ8_0Act activations)
//   ROCmFPx         numerics/quant_ref_rocmfpx.h (types 100-107, templates on the type id; BlockQ8_0Act)
//
// Row dots: every quantized type has dot_block_<type>(w_block, act_block) = v_b, the scaled float
// contribution of block b (exact integer dot, then a fixed sequence of f32 multiplies/subtracts), and
// vec_dot_<type>(n, w, x) = Σ v_b folded as numerics/accumulate.h: partial[b % 32] += v_b for b
// ascending, then Partials32's fixed tree (a warp: lane = b % 32, shuffle-down 16..1). Float types fold
// element i into partial[i % 32] with one fma (numerics/dot.h's order). n is a multiple of the type's
// block size; pointers are to the type's block struct (aligned as that struct).
#pragma once

#include <cstdint>
#include <cstring>

#include "numerics/accumulate.h"
#include "numerics/blocks.h"
#include "numerics/half.h"
#include "numerics/hd.h"
#include "numerics/quant_ref_iq2_xxs.h"
#include "numerics/quant_ref_k.h"
#include "numerics/quant_ref_mxfp4.h"
#include "numerics/quant_ref_rocmfpx.h"

namespace dsv4::qref {

// ---- helpers -----------------------------------------------------------------------------------------

// |x| (clears the sign bit; NaN stays NaN): std::fabs.
DSV4_HD float f32_abs(float x) { return hd::f32_from_bits(hd::f32_bits(x) & 0x7fffffffu); }
// Neither NaN nor ±inf: std::isfinite.
DSV4_HD bool is_finite(float x) { return (hd::f32_bits(x) & 0x7f800000u) != 0x7f800000u; }
// Non-finite activations/weights read as 0 (a NaN/inf would otherwise poison a whole block's scale).
DSV4_HD float finite_or_zero(float x) { return is_finite(x) ? x : 0.0f; }
// C fmax/fmin: a NaN operand yields the other operand (both NaN: NaN); otherwise the larger/smaller.
// (The sign of an equal pair of zeros is whichever the comparison picks; every use below feeds a
// non-negative maximum or an integer conversion, where it cannot matter. A signaling NaN operand is
// treated like a quiet one — glibc would return NaN — but the operands here are arithmetic results,
// which are never signaling.)
DSV4_HD float fmax_c(float a, float b) {
  if (a != a) return b;
  if (b != b) return a;
  return a > b ? a : b;
}
DSV4_HD float fmin_c(float a, float b) {
  if (a != a) return b;
  if (b != b) return a;
  return a < b ? a : b;
}
// std::round(float): nearest integer, ties away from zero; NaN and ±inf unchanged. Built on
// hd::round_even: r = nearest-even(x); x − r is exact (Sterbenz), and a tie that went toward zero
// (x − r = ±0.5 on x's side) steps one further out.
DSV4_HD float round_half_away(float x) {
  float r = static_cast<float>(hd::round_even(static_cast<double>(x)));
  const float diff = x - r;
  if (diff == 0.5f && x > 0.0f) r = r + 1.0f;
  if (diff == -0.5f && x < 0.0f) r = r - 1.0f;
  return r;
}

// ---- activation quantizers ---------------------------------------------------------------------------

// One BlockQ8_0Act from 32 floats (the activation format of Q8_0 and MXFP4 weights):
//   amax = max |finite_or_zero(x)| (fmax from +0); d = amax / 127 (f32, stored exactly);
//   id = d != 0 ? 1 / d : 0; q_i = clamp(round_half_away(finite_or_zero(x_i) * id), -127, 127)
//   (x * id, not x / d — ggml's choice; clamp = fmin(127, fmax(-127, q)), so a NaN product — 0 * inf
//   when d is subnormal and 1/d overflows — gives -127, +inf gives 127).
DSV4_HD void quantize_act_q8_0_block(const float* x32, BlockQ8_0Act* out) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = fmax_c(amax, f32_abs(finite_or_zero(x32[i])));
  const float d = hd::div(amax, 127.0f);
  const float id = d != 0.0f ? hd::div(1.0f, d) : 0.0f;
  out->d = d;
  for (int i = 0; i < 32; ++i) {
    float q = round_half_away(finite_or_zero(x32[i]) * id);
    q = fmin_c(127.0f, fmax_c(-127.0f, q));
    out->qs[i] = static_cast<int8_t>(q);
  }
}

// One BlockQ8_K from 256 floats (ggml's Q8_K reference; the activation format of Q2_K, Q4_K, IQ2_XXS):
//   max = the signed finite_or_zero element of largest magnitude (first on ties, strict >);
//   max == 0 -> d = +0, q = 0, bsums = 0. Else iscale = -127 / max;
//   q_i = clamp(round_even(iscale * x_i), -128, 127) (fmin(127, fmax(-128, q)): NaN -> -128);
//   bsums[k] = Σ q[16k .. 16k+15]; d = 1 / iscale.
DSV4_HD void quantize_act_q8_k_block(const float* x256, BlockQ8_K* out) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < 256; ++i) {
    const float v = finite_or_zero(x256[i]);
    const float ax = f32_abs(v);
    if (ax > amax) {
      amax = ax;
      max = v;
    }
  }
  if (amax == 0.0f) {
    out->d = 0.0f;
    for (int i = 0; i < 256; ++i) out->qs[i] = 0;
    for (int k = 0; k < 16; ++k) out->bsums[k] = 0;
    return;
  }
  const float iscale = hd::div(-127.0f, max);
  for (int i = 0; i < 256; ++i) {
    float q = static_cast<float>(hd::round_even(static_cast<double>(iscale * finite_or_zero(x256[i]))));
    q = fmin_c(127.0f, fmax_c(-128.0f, q));
    out->qs[i] = static_cast<int8_t>(q);
  }
  for (int k = 0; k < 16; ++k) {
    int s = 0;
    for (int i = 0; i < 16; ++i) s += out->qs[16 * k + i];
    out->bsums[k] = static_cast<int16_t>(s);
  }
  out->d = hd::div(1.0f, iscale);
}

// ---- F32 / F16 / BF16 weights (f32 activations) --------------------------------------------------------

// Element i of a row (byte-addressed, any alignment): also the dequantizers of the float types.
DSV4_HD float load_f32(const void* w, int64_t i) {
  float v;
  std::memcpy(&v, static_cast<const uint8_t*>(w) + 4 * i, 4);
  return v;
}
DSV4_HD float load_f16(const void* w, int64_t i) {
  uint16_t h;
  std::memcpy(&h, static_cast<const uint8_t*>(w) + 2 * i, 2);
  return f16_to_f32(h);
}
DSV4_HD float load_bf16(const void* w, int64_t i) {
  uint16_t h;
  std::memcpy(&h, static_cast<const uint8_t*>(w) + 2 * i, 2);
  return bf16_to_f32(h);
}

// ACCUMULATION ORDER (float weights): partial[i % 32] = fma(w_i, x_i, partial[i % 32]) for i
// ascending (w_i converted exactly to f32), then Partials32::reduce().
DSV4_HD float vec_dot_f32(int64_t n, const void* w, const float* x) {
  Partials32 acc;
  for (int64_t i = 0; i < n; ++i) acc.p[i & 31] = hd::fma(load_f32(w, i), x[i], acc.p[i & 31]);
  return acc.reduce();
}
DSV4_HD float vec_dot_f16(int64_t n, const void* w, const float* x) {
  Partials32 acc;
  for (int64_t i = 0; i < n; ++i) acc.p[i & 31] = hd::fma(load_f16(w, i), x[i], acc.p[i & 31]);
  return acc.reduce();
}
DSV4_HD float vec_dot_bf16(int64_t n, const void* w, const float* x) {
  Partials32 acc;
  for (int64_t i = 0; i < n; ++i) acc.p[i & 31] = hd::fma(load_bf16(w, i), x[i], acc.p[i & 31]);
  return acc.reduce();
}

// ---- Q8_0 (BlockQ8_0Act activations) ------------------------------------------------------------------

// x[i] = (float)qs[i] * f16_to_f32(d), one f32 multiply (gguf-py: x * d). 32 outputs.
DSV4_HD void dequantize_block_q8_0(const BlockQ8_0* w, float* out) {
  const float d = f16_to_f32(w->d);
  for (int i = 0; i < 32; ++i) out[i] = static_cast<float>(w->qs[i]) * d;
}

// Block contribution: isum = Σ_{i<32} w.qs[i]·a.qs[i] (exact int32);
// v = (f16_to_f32(w.d) * a.d) * (float)isum (two f32 multiplies, in that order).
// The float part of a block (the integer sum from anywhere: any way of adding the 32 products).
DSV4_HD float q8_0_finish(const BlockQ8_0& w, const BlockQ8_0Act& a, int32_t isum) {
  const float scale = f16_to_f32(w.d) * a.d;
  return scale * static_cast<float>(isum);
}
DSV4_HD float dot_block_q8_0(const BlockQ8_0& w, const BlockQ8_0Act& a) {
  int32_t isum = 0;
  for (int i = 0; i < 32; ++i) isum += static_cast<int32_t>(w.qs[i]) * static_cast<int32_t>(a.qs[i]);
  return q8_0_finish(w, a, isum);
}

// ACCUMULATION ORDER (Q8_0 x Q8_0Act): partial[b % 32] += dot_block_q8_0(w[b], x[b]) for b ascending,
// then Partials32::reduce().
DSV4_HD float vec_dot_q8_0(int64_t n, const BlockQ8_0* w, const BlockQ8_0Act* x) {
  Partials32 acc;
  for (int64_t b = 0; b < n / 32; ++b) acc.add(b, dot_block_q8_0(hd::load_unaligned(w + b), x[b]));
  return acc.reduce();
}

}  // namespace dsv4::qref
