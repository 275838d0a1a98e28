// numerics/quant_ref_mxfp4.h — MXFP4 (type 39) scalar reference: the value table, one-block dequantizer
// (gguf-py's MXFP4.dequantize_blocks) and the dot with BlockQ8_0Act activations (numerics/quant_ref.h's
// quantize_act_q8_0_block). Host C++ and CUDA device code alike; the CPU backend's dequantize_row /
// vec_dot[0] entries call these.
//
// Block (numerics/blocks.h, gguf.md §5.6): { u8 e; u8 qs[16]; } per 32 weights; element j < 16 is the
// low nibble of qs[j], element j + 16 the high nibble; x = kvalues[nibble] · e8m0_half(e), kvalues the
// doubled E2M1 values {0,1,2,3,4,6,8,12, 0,-1,-2,-3,-4,-6,-8,-12}.
#pragma once

#include <cstdint>

#include "numerics/accumulate.h"
#include "numerics/blocks.h"
#include "numerics/hd.h"

namespace dsv4::qref {

// kvalues[nib] (nib < 16) without a table: magnitudes {0,1,2,3,4,6,8,12} packed one per byte, bit 3 the sign.
DSV4_HD constexpr int mxfp4_value(uint32_t nib) {
  const int mag = static_cast<int>((0x0c08060403020100ull >> (8 * (nib & 7))) & 0xff);
  return (nib & 8) ? -mag : mag;
}

// 32 outputs: x_j = e8m0_half(e) * (float)kvalues[nibble_j] (one f32 multiply).
DSV4_HD void dequantize_block_mxfp4(const BlockMxfp4* w, float* out) {
  const float d = e8m0_half(w->e);
  for (int j = 0; j < 16; ++j) {
    out[j] = d * static_cast<float>(mxfp4_value(w->qs[j] & 0x0fu));
    out[j + 16] = d * static_cast<float>(mxfp4_value(static_cast<uint32_t>(w->qs[j]) >> 4));
  }
}

// Block contribution (MXFP4 x Q8_0Act):
//   isum = Σ_{j<16} kvalues[lo_j]·a.qs[j] + kvalues[hi_j]·a.qs[j+16]   (exact int32)
//   v    = (e8m0_half(e) · a.d) · (float)isum                         (two f32 multiplies, no fma)
DSV4_HD float dot_block_mxfp4(const BlockMxfp4& w, const BlockQ8_0Act& a) {
  int32_t isum = 0;
  for (int j = 0; j < 16; ++j) {
    isum += mxfp4_value(w.qs[j] & 0x0fu) * a.qs[j];
    isum += mxfp4_value(static_cast<uint32_t>(w.qs[j]) >> 4) * a.qs[j + 16];
  }
  return (e8m0_half(w.e) * a.d) * static_cast<float>(isum);
}

// ACCUMULATION ORDER: partial[b % 32] += dot_block_mxfp4(w[b], x[b]) for block b ascending, then
// Partials32::reduce().
DSV4_HD float vec_dot_mxfp4(int64_t n, const BlockMxfp4* w, const BlockQ8_0Act* x) {
  Partials32 acc;
  for (int64_t b = 0; b < n / 32; ++b) acc.add(b, dot_block_mxfp4(hd::load_unaligned(w + b), x[b]));
  return acc.reduce();
}

}  // namespace dsv4::qref
