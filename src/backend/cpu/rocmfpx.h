// backend/cpu/rocmfpx.h — internals of the lucebox ROCmFPx family (tensor types 100-107) shared by the
// scalar reference (rocmfpx.cpp), the quantizer (rocmfpx_quant.cpp) and the SIMD kernels
// (rocmfpx_avx2.cpp, rocmfpx_avx512.cpp). Not a public header: other rooms go through quant.h.
//
// Block layouts (32 weights each; codes first, scale byte(s) last; gguf.md §5.8):
//   100 Q4_0_ROCMFP4      18 B  qs[16] e[2]  element j<16 low nibble of qs[j] (scale e[0]),
//                                            element j+16 high nibble (scale e[1])
//   101 Q4_0_ROCMFP4_FAST 17 B  qs[16] e     same nibbles, one scale
//   102 Q6_0_ROCMFPX      26 B  qs[24] e[2]  6-bit code i at bit 6i (LSB first); bit 5 sign, 0..31 mag
//   103 Q8_0_ROCMFPX      33 B  qs[32] e     int8 level
//   104 Q3_0_ROCMFPX      14 B  qs[12] e[2]  3-bit code i at bit 3i; bit 2 sign, mag {0,1,2,4}[c&3]
//   107 Q2_0_ROCMFP2      10 B  qs[8]  e[2]  2-bit code i at bit 2i; level {-1,0,1,2}[c]
// Two-scale types use e[0] for elements 0..15 and e[1] for 16..31.
//
// Scale byte "UE4M3 at half scale": e <= 0x7E valid, 0x7F and e >= 0x80 decode to 0; E = e >> 3,
// M = e & 7; scale = M * 2^-10 (E == 0) or (8 + M) * 2^(E - 11). Every value is exact in f32.
#pragma once

#include <cstdint>

#include "numerics/quant_ref_rocmfpx.h"

namespace dsv4::cpu::rocmfpx {

inline constexpr int64_t kBlock = 32;
inline constexpr int kValidScales = 127;  // e = 0x00 .. 0x7E

inline constexpr int64_t kBytes100 = 18;
inline constexpr int64_t kBytes101 = 17;
inline constexpr int64_t kBytes102 = 26;
inline constexpr int64_t kBytes103 = 33;
inline constexpr int64_t kBytes104 = 14;
inline constexpr int64_t kBytes107 = 10;

// The UE4M3 decode, computed by the formula (numerics/quant_ref_rocmfpx.h, shared with CUDA).
constexpr float ue4m3_decode(uint8_t e) { return qref::ue4m3_decode(e); }

// 256-entry decode table (index = scale byte).
const float* ue4m3_table();

// Signed level tables of the small formats (index = code).
inline constexpr int8_t kFp4Level[16] = {0, 1, 2, 3, 4, 6, 8, 10, 0, -1, -2, -3, -4, -6, -8, -10};
inline constexpr int8_t kFp3Level[8] = {0, 1, 2, 4, 0, -1, -2, -4};
inline constexpr int8_t kFp2Level[4] = {-1, 0, 1, 2};

// Scalar vec_dots (the references) and the SIMD kernels. Signatures as VecDotFn.
float vec_dot_100_scalar(int64_t n, const void* w, const void* act);
float vec_dot_101_scalar(int64_t n, const void* w, const void* act);
float vec_dot_102_scalar(int64_t n, const void* w, const void* act);
float vec_dot_103_scalar(int64_t n, const void* w, const void* act);
float vec_dot_104_scalar(int64_t n, const void* w, const void* act);
float vec_dot_107_scalar(int64_t n, const void* w, const void* act);

float vec_dot_100_avx2(int64_t n, const void* w, const void* act);
float vec_dot_101_avx2(int64_t n, const void* w, const void* act);
float vec_dot_102_avx2(int64_t n, const void* w, const void* act);
float vec_dot_103_avx2(int64_t n, const void* w, const void* act);
float vec_dot_104_avx2(int64_t n, const void* w, const void* act);
float vec_dot_107_avx2(int64_t n, const void* w, const void* act);

float vec_dot_100_avx512(int64_t n, const void* w, const void* act);
float vec_dot_101_avx512(int64_t n, const void* w, const void* act);
float vec_dot_102_avx512(int64_t n, const void* w, const void* act);
float vec_dot_103_avx512(int64_t n, const void* w, const void* act);
float vec_dot_104_avx512(int64_t n, const void* w, const void* act);
float vec_dot_107_avx512(int64_t n, const void* w, const void* act);

// Multi-row forms (VecDotRowsFn): out[i] == vec_dot_*(n, w + i * w_stride, act) bit for bit.
void vec_dot_rows_101_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out);
void vec_dot_rows_104_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out);
void vec_dot_rows_107_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out);

// kAvx512Vbmi level (also needs VBMI): the same bits through the VBMI multi-row kernels.
float vec_dot_101_avx512vbmi(int64_t n, const void* w, const void* act);
float vec_dot_104_avx512vbmi(int64_t n, const void* w, const void* act);
float vec_dot_107_avx512vbmi(int64_t n, const void* w, const void* act);
void vec_dot_rows_101_avx512vbmi(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out);
void vec_dot_rows_104_avx512vbmi(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out);
void vec_dot_rows_107_avx512vbmi(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out);

// AVX2 prepared-activation forms (rocmfpx_avx2.cpp): prepare_act once per column, then matrix x vector
// (vec_dot_rows_prepared, row by row) and the tile (4 rows x up to 8 columns, each weight block decoded
// once for every column); vec_dot_rows_*_avx2 is the unprepared multi-row form (row by row).
#define DSV4_ROCMFPX_AVX2_PREPARED_DECL(ID)                                                                         \
  int64_t prepared_act_bytes_##ID##_avx2(int64_t n);                                                              \
  void prepare_act_##ID##_avx2(const void* act, int64_t n, void* out);                                            \
  void vec_dot_rows_##ID##_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out); \
  void vec_dot_rows_prepared_##ID##_avx2(int64_t n, const void* w, int64_t w_stride, const void* prepared, int nr, \
                                         float* out);                                                             \
  void vec_dot_tile_##ID##_avx2(int64_t n, const void* w, int64_t w_stride, const void* prepared, int64_t x_stride, \
                                int nr, int nc, float* out, int64_t out_stride);
DSV4_ROCMFPX_AVX2_PREPARED_DECL(100)
DSV4_ROCMFPX_AVX2_PREPARED_DECL(101)
DSV4_ROCMFPX_AVX2_PREPARED_DECL(102)
DSV4_ROCMFPX_AVX2_PREPARED_DECL(103)
DSV4_ROCMFPX_AVX2_PREPARED_DECL(104)
DSV4_ROCMFPX_AVX2_PREPARED_DECL(107)
#undef DSV4_ROCMFPX_AVX2_PREPARED_DECL

// Quantizers (rocmfpx_quant.cpp). Signatures as QuantizeRowFn.
void quantize_row_100(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_101(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_102(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_103(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_104(const float* src, void* dst, int64_t n, const float* importance);
void quantize_row_107(const float* src, void* dst, int64_t n, const float* importance);

}  // namespace dsv4::cpu::rocmfpx
