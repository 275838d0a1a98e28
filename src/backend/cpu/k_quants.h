// backend/cpu/k_quants.h — internal to backend/cpu: the Q4_K scale unpacking shared by every path and
// the SIMD vec_dot entry points (k_quants_avx2.cpp, k_quants_avx512.cpp; registered by k_quants.cpp).
// The blocks are BlockQ2_K / BlockQ4_K (numerics/blocks.h).
#pragma once

#include <cstdint>
#include <cstring>

#include "numerics/blocks.h"

namespace dsv4::cpu {

// The eight 6-bit scales (byte j of *sc) and mins (byte j of *m) of a Q4_K block, computed on the
// three little-endian words s0, s1, s2 of scales[12] (same values as gguf.md's per-j formulas).
inline void q4_k_unpack_scales(const uint8_t* scales, uint64_t* sc, uint64_t* m) {
  uint32_t s[3];
  std::memcpy(s, scales, 12);
  const uint32_t sc_lo = s[0] & 0x3f3f3f3fu;
  const uint32_t m_lo = s[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (s[2] & 0x0f0f0f0fu) | (((s[0] >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((s[2] >> 4) & 0x0f0f0f0fu) | (((s[1] >> 6) & 0x03030303u) << 4);
  *sc = sc_lo | static_cast<uint64_t>(sc_hi) << 32;
  *m = m_lo | static_cast<uint64_t>(m_hi) << 32;
}

// Weights x BlockQ8_K activations; bit-identical to the scalar references in k_quants.cpp.
float vec_dot_q2_k_scalar(int64_t n, const void* w, const void* act);
float vec_dot_q2_k_avx2(int64_t n, const void* w, const void* act);
float vec_dot_q2_k_avx512(int64_t n, const void* w, const void* act);
float vec_dot_q4_k_scalar(int64_t n, const void* w, const void* act);
float vec_dot_q4_k_avx2(int64_t n, const void* w, const void* act);
float vec_dot_q4_k_avx512(int64_t n, const void* w, const void* act);
// Multi-row forms (VecDotRowsFn): out[i] == the single-row dot of row i, bit for bit.
void vec_dot_rows_q2_k_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out);
void vec_dot_rows_q4_k_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out);
// Q2_K tile form (quant.h VecDotTileFn) for matmul at the AVX2 level: up to kQ2kAvx2TileCols columns per
// call (TypeKernels::tile_cols), so that each row's decoded block serves twice the columns.
constexpr int kQ2kAvx2TileCols = 16;
void vec_dot_tile_q2_k_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                            int nc, float* out, int64_t out_stride);
// Q2_K AMX tile form (quant.h AmxKernels), k_quants_amx.cpp.
int64_t q2_k_amx_group_bytes(int64_t n);
void q2_k_amx_pack_group(const uint8_t* act, int64_t act_stride, int64_t n, int nc, uint8_t* out);
void q2_k_amx_matmul(int64_t n, const void* w, int64_t w_stride, int64_t rows, const uint8_t* packed, int64_t cols,
                     float* y, int64_t y_stride);

}  // namespace dsv4::cpu
