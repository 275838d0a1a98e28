// backend/cpu/iq2_xxs.h — the per-level IQ2_XXS kernels (internal to backend/cpu).
//
// Block BlockIq2Xxs (numerics/blocks.h, gguf.md §5.5): { f16 d; u16 qs[32]; } = 66 bytes per 256
// weights, eight groups of 32. Group g reads a0 = u32 at qs+4g (four grid indices, one byte each, one per 8 weights) and a1 = u32 at
// qs+4g+2 (bits 7l..7l+6: sign index of sub-group l; bits 28..31: group scale ls).
//
// vec_dot accumulation order (every level, bit-identical):
//   for super-block b (increasing):
//     isum_b = Σ_{g<8} (2·ls_g + 1) · Σ_{i<32} signed_grid[32g+i] · q8[32g+i]   (exact int32)
//     v_b    = ((d_w · d_x) · (float)isum_b) · 0.125f                           (f32, no fma)
//     partial[b % 32] += v_b
//   result = Partials32::reduce() (tree s = 16, 8, 4, 2, 1: p[i] = p[i] + p[i+s]).
#pragma once

#include <cstdint>

#include "numerics/blocks.h"

namespace dsv4::cpu {

float iq2_xxs_vec_dot_scalar(int64_t n, const void* w, const void* act);
float iq2_xxs_vec_dot_avx2(int64_t n, const void* w, const void* act);
void iq2_xxs_vec_dot_rows_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out);
// The AVX2 prepared-activation form (|q8|, sign-compare bytes and q8 + 128 per chunk of 8 super-blocks, built once).
int64_t iq2_xxs_prepared_act_bytes_avx2(int64_t n);
void iq2_xxs_prepare_act_avx2(const void* act, int64_t n, void* out);
void iq2_xxs_vec_dot_rows_prepared_avx2(int64_t n, const void* w, int64_t w_stride, const void* prepared, int nr,
                                        float* out);
// The AVX2 tile form (quant.h VecDotTileFn) on those prepared columns: each weight block decoded once per nc columns
// (up to kIq2XxsAvx2TileCols: a block's decode costs about as much as 8 columns' dots).
constexpr int kIq2XxsAvx2TileCols = 16;
void iq2_xxs_vec_dot_tile_prepared_avx2(int64_t n, const void* w, int64_t w_stride, const void* prepared,
                                        int64_t prep_stride, int nr, int nc, float* out, int64_t out_stride);
// kAvx512 level (no VBMI): none of its own; the AVX2 kernels run there (faster, measured).
// kAvx512Vbmi level: also VBMI, VBMI2, BITALG and GFNI (call only where the CPU has them).
float iq2_xxs_vec_dot_avx512vbmi(int64_t n, const void* w, const void* act);
void iq2_xxs_vec_dot_rows_avx512vbmi(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out);
// The prepared-activation form (quant.h): the VBMI kernel's per-chunk activation layout, built once.
// iq2_xxs_prepared_act_bytes is the larger of the VBMI and AVX2 layouts (one size serves every level).
int64_t iq2_xxs_prepared_act_bytes(int64_t n);
void iq2_xxs_prepare_act_avx512vbmi(const void* act, int64_t n, void* out);
void iq2_xxs_vec_dot_rows_prepared_avx512vbmi(int64_t n, const void* w, int64_t w_stride, const void* prepared, int nr,
                                              float* out);
// The tile form (quant.h VecDotTileFn) on prepared columns: each weight pair decoded once per nc columns.
void iq2_xxs_vec_dot_tile_prepared_avx512vbmi(int64_t n, const void* w, int64_t w_stride, const void* prepared,
                                              int64_t prep_stride, int nr, int nc, float* out, int64_t out_stride);

}  // namespace dsv4::cpu
