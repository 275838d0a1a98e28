// backend/cpu/float_types.h — F32 / F16 / BF16 rows against f32 activations (internal to backend/cpu).
//
// Accumulation order (every level, and the CUDA port): element i's product is fused into
// partial[i % 32] with one fma, p = fma(w_i, x_i, p), elements in increasing i; then the
// Partials32 tree. Lanes past n are never touched (masked), so the bits do not depend on the
// vector width.
#pragma once

#include <cstdint>

namespace dsv4::cpu {

float vec_dot_f32_avx2(int64_t n, const void* w, const void* x);
float vec_dot_f16_avx2(int64_t n, const void* w, const void* x);
float vec_dot_bf16_avx2(int64_t n, const void* w, const void* x);
float vec_dot_f32_avx512(int64_t n, const void* w, const void* x);
float vec_dot_f16_avx512(int64_t n, const void* w, const void* x);
float vec_dot_bf16_avx512(int64_t n, const void* w, const void* x);
// Tile forms (quant.h VecDotTileFn: nr 1..4 rows, or 1..kFloatAvx2TileRows for AVX2, × nc 1..kMaxTileCols
// columns), each (row, column) exactly the dot above.
constexpr int kFloatAvx2TileRows = 12;  // TypeKernels::tile_rows of the AVX2 tiles (float_types_avx2.cpp says why)
void vec_dot_tile_f32_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                           int nc, float* out, int64_t out_stride);
void vec_dot_tile_f16_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                           int nc, float* out, int64_t out_stride);
void vec_dot_tile_bf16_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                            int nc, float* out, int64_t out_stride);
void vec_dot_tile_f32_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                             int nc, float* out, int64_t out_stride);
void vec_dot_tile_f16_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                             int nc, float* out, int64_t out_stride);
void vec_dot_tile_bf16_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                              int nc, float* out, int64_t out_stride);

}  // namespace dsv4::cpu
