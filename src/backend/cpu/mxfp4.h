// backend/cpu/mxfp4.h — the MXFP4 value table and the per-level kernels (internal).
//
// Block BlockMxfp4 and the E8M0 half-scale e8m0_half are in numerics/blocks.h (gguf.md §5.6):
// { u8 e; u8 qs[16]; } = 17 bytes per 32 weights. Element j < 16 is the low nibble of qs[j],
// element j + 16 the high nibble; x = kvalues[nibble] · e8m0_half(e), kvalues the doubled E2M1 values
// {0,1,2,3,4,6,8,12, 0,-1,-2,-3,-4,-6,-8,-12}.
//
// vec_dot accumulation order (every level, bit-identical; activation BlockQ8_0Act):
//   for block b (increasing):
//     isum_b = Σ_{j<32} kvalues[nibble_j] · q8[j]                 (exact int32)
//     v_b    = (e8m0_half(e_b) · d_x) · (float)isum_b             (f32, no fma)
//     partial[b % 32] += v_b
//   result = Partials32::reduce() (tree s = 16, 8, 4, 2, 1: p[i] = p[i] + p[i+s]).
#pragma once

#include <cstdint>

#include "numerics/blocks.h"
#include "numerics/quant_ref_mxfp4.h"

namespace dsv4::cpu {

inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// The shared reference (numerics/quant_ref_mxfp4.h) computes the same values without a table.
constexpr bool mxfp4_values_match() {
  for (uint32_t k = 0; k < 16; ++k)
    if (qref::mxfp4_value(k) != kMxfp4Values[k]) return false;
  return true;
}
static_assert(mxfp4_values_match());

float mxfp4_vec_dot_scalar(int64_t n, const void* w, const void* act);
float mxfp4_vec_dot_avx2(int64_t n, const void* w, const void* act);
// Tile form (quant.h VecDotTileFn) for matmul at the AVX2 level: nr 1..8 rows (in vector lanes) x nc
// 1..kMxfp4Avx2TileCols columns; activation quants in [-127, 127] (quantize_act's range: vpsignb).
constexpr int kMxfp4Avx2TileCols = 16;
// Matrix x vector at the AVX2 level: vec_dot_rows (row by row) and, on prepared activations (quant.h
// prepare_act: the blocks unchanged, then per block 12·Σq and d_x), the same bits with less work per block.
void mxfp4_vec_dot_rows_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out);
int64_t mxfp4_prepared_act_bytes(int64_t n);
void mxfp4_prepare_act_avx2(const void* act, int64_t n, void* out);
void mxfp4_vec_dot_rows_prepared_avx2(int64_t n, const void* w, int64_t w_stride, const void* prepared, int nr,
                                      float* out);
void mxfp4_vec_dot_tile8_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                              int nc, float* out, int64_t out_stride);
float mxfp4_vec_dot_avx512(int64_t n, const void* w, const void* act);
// Multi-row form (VecDotRowsFn): out[i] == mxfp4_vec_dot_avx512(n, w + i * w_stride, act) bit for bit.
void mxfp4_vec_dot_rows_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out);
// kAvx512Vbmi level (also needs VBMI): the same bits through the VBMI multi-row kernel.
float mxfp4_vec_dot_avx512vbmi(int64_t n, const void* w, const void* act);
void mxfp4_vec_dot_rows_avx512vbmi(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out);

}  // namespace dsv4::cpu
