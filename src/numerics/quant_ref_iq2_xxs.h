// numerics/quant_ref_iq2_xxs.h — IQ2_XXS (type 16) scalar reference: one-block dequantizer (gguf-py's
// IQ2_XXS.dequantize_blocks operation for operation) and the dot with BlockQ8_K activations. Host C++
// and CUDA device code alike; the CPU backend's dequantize_row / vec_dot[0] entries call these.
//
// The grid and sign tables are data (numerics/iq2_xxs_grid.h) passed in as an Iq2xxsTables: the host
// passes kIq2xxsHostTables; CUDA copies kIq2xxsGrid / kIq2xxsSigns to __constant__ or device memory
// once and passes those pointers (a DSV4_HD function never touches a host-only global).
//
// Block layout (numerics/blocks.h, gguf.md §5.5): { f16 d; u16 qs[32]; } per 256 weights, eight groups
// of 32. Group g reads a0 = u32 from qs[4g], qs[4g+1] (four grid indices, byte l for sub-group l of 8
// weights) and a1 = u32 from qs[4g+2], qs[4g+3] (bits 7l..7l+6: sign index of sub-group l; bits
// 28..31: group scale ls); little-endian u16 pairs.
#pragma once

#include <cstdint>

#include "numerics/accumulate.h"
#include "numerics/blocks.h"
#include "numerics/half.h"
#include "numerics/hd.h"
#include "numerics/iq2_xxs_grid.h"

namespace dsv4::qref {

// grid: 256 entries (kIq2xxsGrid's layout); signs: 128 entries (kIq2xxsSigns's).
struct Iq2xxsTables {
  const uint64_t* grid;
  const uint8_t* signs;
};
// Host-side tables (host code only; device code passes pointers to its own copies).
inline constexpr Iq2xxsTables kIq2xxsHostTables = {kIq2xxsGrid, kIq2xxsSigns};

// The two u32 words of group g (g < 8): a[0] grid indices, a[1] signs and scale.
DSV4_HD void iq2_xxs_group_words(const BlockIq2Xxs& w, int g, uint32_t* a) {
  a[0] = static_cast<uint32_t>(w.qs[4 * g]) | static_cast<uint32_t>(w.qs[4 * g + 1]) << 16;
  a[1] = static_cast<uint32_t>(w.qs[4 * g + 2]) | static_cast<uint32_t>(w.qs[4 * g + 3]) << 16;
}

// 256 outputs: per group g, db = (d * (0.5f + (float)ls)) * 0.25f; element 32g + 8l + j is
// (db * (float)grid_byte_j) * (sign_j ? -1.0f : 1.0f) (f32, no fma).
DSV4_HD void dequantize_block_iq2_xxs(const BlockIq2Xxs* w, float* out, const Iq2xxsTables& t) {
  const float d = f16_to_f32(w->d);
  for (int g = 0; g < 8; ++g) {
    uint32_t a[2];
    iq2_xxs_group_words(*w, g, a);
    const float db = (d * (0.5f + static_cast<float>(a[1] >> 28))) * 0.25f;
    for (int l = 0; l < 4; ++l) {
      const uint64_t grid = t.grid[(a[0] >> (8 * l)) & 0xff];
      const uint8_t signs = t.signs[(a[1] >> (7 * l)) & 127];
      for (int j = 0; j < 8; ++j) {
        const float gv = static_cast<float>((grid >> (8 * j)) & 0xff);
        out[32 * g + 8 * l + j] = (db * gv) * (((signs >> j) & 1) ? -1.0f : 1.0f);
      }
    }
  }
}

// Super-block contribution (IQ2_XXS x Q8_K):
//   isum = Σ_{g<8} (2·ls_g + 1) · Σ_{i<32} signed_grid[32g+i] · a.qs[32g+i]   (exact int32)
//   v    = ((f16_to_f32(w.d) · a.d) · (float)isum) · 0.125f                  (f32, no fma)
// The integer sum over groups [g0, g1) (any split adds up to the same integer) and the float part.
DSV4_HD int32_t iq2_xxs_isum(const BlockIq2Xxs& w, const BlockQ8_K& a, const Iq2xxsTables& t, int g0, int g1) {
  int32_t isum = 0;
  for (int g = g0; g < g1; ++g) {
    uint32_t aw[2];
    iq2_xxs_group_words(w, g, aw);
    int32_t gsum = 0;
    for (int l = 0; l < 4; ++l) {
      const uint64_t grid = t.grid[(aw[0] >> (8 * l)) & 0xff];
      const uint8_t signs = t.signs[(aw[1] >> (7 * l)) & 127];
      for (int j = 0; j < 8; ++j) {
        const int32_t gv = static_cast<int32_t>((grid >> (8 * j)) & 0xff);
        const int32_t prod = gv * a.qs[32 * g + 8 * l + j];
        gsum += ((signs >> j) & 1) ? -prod : prod;
      }
    }
    isum += static_cast<int32_t>(2 * (aw[1] >> 28) + 1) * gsum;
  }
  return isum;
}
DSV4_HD float iq2_xxs_finish(const BlockIq2Xxs& w, const BlockQ8_K& a, int32_t isum) {
  return ((f16_to_f32(w.d) * a.d) * static_cast<float>(isum)) * 0.125f;
}
DSV4_HD float dot_block_iq2_xxs(const BlockIq2Xxs& w, const BlockQ8_K& a, const Iq2xxsTables& t) {
  return iq2_xxs_finish(w, a, iq2_xxs_isum(w, a, t, 0, 8));
}

// ACCUMULATION ORDER: partial[b % 32] += dot_block_iq2_xxs(w[b], x[b], t) for super-block b
// ascending, then Partials32::reduce().
DSV4_HD float vec_dot_iq2_xxs(int64_t n, const BlockIq2Xxs* w, const BlockQ8_K* x, const Iq2xxsTables& t) {
  Partials32 acc;
  for (int64_t b = 0; b < n / 256; ++b) acc.add(b, dot_block_iq2_xxs(hd::load_unaligned(w + b), x[b], t));
  return acc.reduce();
}

}  // namespace dsv4::qref
