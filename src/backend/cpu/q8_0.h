// backend/cpu/q8_0.h — internal to backend/cpu: the SIMD vec_dot entry points of Q8_0 (defined in
// q8_0_avx2.cpp / q8_0_avx512.cpp, registered by q8_0.cpp); the block is BlockQ8_0 (numerics/blocks.h).
#pragma once

#include <cstdint>

#include "numerics/blocks.h"

namespace dsv4::cpu {

// Q8_0 weights x BlockQ8_0Act activations; bit-identical to vec_dot_q8_0_scalar (q8_0.cpp).
float vec_dot_q8_0_scalar(int64_t n, const void* w, const void* act);
float vec_dot_q8_0_avx2(int64_t n, const void* w, const void* act);
float vec_dot_q8_0_avx512(int64_t n, const void* w, const void* act);
void vec_dot_rows_q8_0_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out);
// Tile forms (quant.h VecDotTileFn) for matmul.
void vec_dot_tile_q8_0_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                              int nc, float* out, int64_t out_stride);
// nr up to 8 (AVX2) / 16 (AVX-512) (TypeKernels::tile_rows), the rows in vector lanes; activation
// quants in [-127, 127] (quantize_act's range) for the AVX2 one, which takes up to kQ8_0Avx2TileCols
// columns per call (TypeKernels::tile_cols: a block's transpose then serves twice the columns).
constexpr int kQ8_0Avx2TileCols = 16;
void vec_dot_tile8_q8_0_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                             int nc, float* out, int64_t out_stride);
void vec_dot_tile16_q8_0_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride,
                                int nr, int nc, float* out, int64_t out_stride);

// AMX tile form (quant.h AmxKernels), q8_0_amx.cpp.
int64_t q8_0_amx_group_bytes(int64_t n);
void q8_0_amx_pack_group(const uint8_t* act, int64_t act_stride, int64_t n, int nc, uint8_t* out);
void q8_0_amx_matmul(int64_t n, const void* w, int64_t w_stride, int64_t rows, const uint8_t* packed, int64_t cols,
                     float* y, int64_t y_stride);

}  // namespace dsv4::cpu
