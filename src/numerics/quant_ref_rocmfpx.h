// numerics/quant_ref_rocmfpx.h — the lucebox ROCmFPx family (tensor types 100-107, gguf.md §5.8) scalar
// reference: scale and level decode, one-block dequantizers and the dots with BlockQ8_0Act activations
// (numerics/quant_ref.h's quantize_act_q8_0_block). Host C++ and CUDA device code alike (no tables:
// every decode is a formula or a packed constant); the CPU backend's dequantize_row / vec_dot[0]
// entries call these.
//
// Block layouts (32 weights each, byte-addressed; codes first, scale byte(s) last):
//   100 Q4_0_ROCMFP4      18 B  qs[16] e[2]  element j<16 low nibble of qs[j] (scale e[0]),
//                                            element j+16 high nibble (scale e[1])
//   101 Q4_0_ROCMFP4_FAST 17 B  qs[16] e     same nibbles, one scale
//   102 Q6_0_ROCMFPX      26 B  qs[24] e[2]  6-bit code i at bit 6i (LSB first); bit 5 sign, 0..31 mag
//   103 Q8_0_ROCMFPX      33 B  qs[32] e     int8 level
//   104 Q3_0_ROCMFPX      14 B  qs[12] e[2]  3-bit code i at bit 3i; bit 2 sign, mag {0,1,2,4}[c&3]
//   107 Q2_0_ROCMFP2      10 B  qs[8]  e[2]  2-bit code i at bit 2i; level {-1,0,1,2}[c]
// Two-scale types (100, 102, 104, 107) use e[0] for elements 0..15 and e[1] for 16..31.
//
// ACCUMULATION ORDER (every type; the CPU SIMD kernels reproduce it bit for bit):
//   for block b ascending: isum0 = Σ_{i<16} level_i·xq_i, isum1 = Σ_{i>=16} level_i·xq_i (exact int32)
//     single scale (101, 103), s = ue4m3_decode(e):  v = (s * d_x) * (float)(isum0 + isum1)
//     two scales, s0, s1:  v = d_x * (s0 * (float)isum0 + s1 * (float)isum1)   (left to right, no fma)
//     partial[b % 32] += v;   result = Partials32::reduce().
#pragma once

#include <cstdint>

#include "numerics/accumulate.h"
#include "numerics/blocks.h"
#include "numerics/hd.h"

namespace dsv4::qref {

// Scale byte "UE4M3 at half scale": e <= 0x7E valid, 0x7F and e >= 0x80 decode to 0; E = e >> 3,
// M = e & 7; scale = M * 2^-10 (E == 0) or (8 + M) * 2^(E - 11). Every value is exact in f32 (products
// by 0.5 / 2 are exact), so a table built from this function holds the same bits.
DSV4_HD constexpr float ue4m3_decode(uint8_t e) {
  if (e > 0x7E) return 0.0f;
  const int E = e >> 3;
  const int M = e & 7;
  float p = 1.0f;
  if (E == 0) {
    for (int i = 0; i < 10; ++i) p *= 0.5f;
    return static_cast<float>(M) * p;
  }
  const int ex = E - 11;  // -10 .. 4
  if (ex < 0)
    for (int i = 0; i < -ex; ++i) p *= 0.5f;
  else
    for (int i = 0; i < ex; ++i) p *= 2.0f;
  return static_cast<float>(8 + M) * p;
}

// Signed levels per code: FP4 {0,1,2,3,4,6,8,10, 0,-1,-2,-3,-4,-6,-8,-10}, FP3 {0,1,2,4, 0,-1,-2,-4},
// FP2 {-1,0,1,2}, FP6 bit 5 sign / bits 0..4 magnitude.
DSV4_HD constexpr int rocmfpx_fp4_level(uint32_t c) {
  const int mag = static_cast<int>((0x0a08060403020100ull >> (8 * (c & 7))) & 0xff);
  return (c & 8) ? -mag : mag;
}
DSV4_HD constexpr int rocmfpx_fp3_level(uint32_t c) {
  const int mag = static_cast<int>((0x04020100u >> (8 * (c & 3))) & 0xff);
  return (c & 4) ? -mag : mag;
}
DSV4_HD constexpr int rocmfpx_fp2_level(uint32_t c) { return static_cast<int>(c & 3) - 1; }
DSV4_HD constexpr int rocmfpx_fp6_level(uint32_t c) {
  const int mag = static_cast<int>(c & 31u);
  return (c & 32u) ? -mag : mag;
}

// Bytes of one 32-weight block, and whether it has two scale bytes, per type id.
template <int kType>
DSV4_HD constexpr int rocmfpx_block_bytes() {
  static_assert(kType == 100 || kType == 101 || kType == 102 || kType == 103 || kType == 104 || kType == 107);
  return kType == 100 ? 18 : kType == 101 ? 17 : kType == 102 ? 26 : kType == 103 ? 33 : kType == 104 ? 14 : 10;
}
template <int kType>
DSV4_HD constexpr bool rocmfpx_two_scales() {
  return kType != 101 && kType != 103;
}

// `bits` bits at bit offset `pos` of an LSB-first bitstream (never reads past the byte holding the
// last bit).
DSV4_HD uint32_t rocmfpx_get_bits(const uint8_t* qs, int pos, int bits) {
  const int byte = pos >> 3;
  uint32_t v = qs[byte];
  if ((pos & 7) + bits > 8) v |= static_cast<uint32_t>(qs[byte + 1]) << 8;
  return (v >> (pos & 7)) & ((1u << bits) - 1u);
}

// The 32 signed levels of one block of type kType.
template <int kType>
DSV4_HD void rocmfpx_block_levels(const uint8_t* blk, int8_t* lv) {
  if constexpr (kType == 100 || kType == 101) {
    for (int j = 0; j < 16; ++j) {
      lv[j] = static_cast<int8_t>(rocmfpx_fp4_level(blk[j] & 15u));
      lv[j + 16] = static_cast<int8_t>(rocmfpx_fp4_level(static_cast<uint32_t>(blk[j]) >> 4));
    }
  } else if constexpr (kType == 102) {
    for (int i = 0; i < 32; ++i) lv[i] = static_cast<int8_t>(rocmfpx_fp6_level(rocmfpx_get_bits(blk, 6 * i, 6)));
  } else if constexpr (kType == 103) {
    for (int i = 0; i < 32; ++i) lv[i] = static_cast<int8_t>(blk[i]);
  } else if constexpr (kType == 104) {
    for (int i = 0; i < 32; ++i) lv[i] = static_cast<int8_t>(rocmfpx_fp3_level(rocmfpx_get_bits(blk, 3 * i, 3)));
  } else {
    static_assert(kType == 107);
    for (int i = 0; i < 32; ++i) lv[i] = static_cast<int8_t>(rocmfpx_fp2_level(blk[i >> 2] >> (2 * (i & 3))));
  }
}

// 32 outputs: x_i = (float)level_i * s (s = s0 for i < 16, s1 above; one scale: both e) — one exact
// f32 multiply.
template <int kType>
DSV4_HD void dequantize_block_rocmfpx(const uint8_t* blk, float* out) {
  constexpr int kBytes = rocmfpx_block_bytes<kType>();
  int8_t lv[32];
  rocmfpx_block_levels<kType>(blk, lv);
  const float s0 = ue4m3_decode(rocmfpx_two_scales<kType>() ? blk[kBytes - 2] : blk[kBytes - 1]);
  const float s1 = ue4m3_decode(blk[kBytes - 1]);
  for (int i = 0; i < 32; ++i) out[i] = static_cast<float>(lv[i]) * (i < 16 ? s0 : s1);
}

// Block contribution (order: see the file comment).
template <int kType>
DSV4_HD float dot_block_rocmfpx(const uint8_t* blk, const BlockQ8_0Act& a) {
  constexpr int kBytes = rocmfpx_block_bytes<kType>();
  int8_t lv[32];
  rocmfpx_block_levels<kType>(blk, lv);
  int32_t isum0 = 0, isum1 = 0;
  for (int i = 0; i < 16; ++i) isum0 += static_cast<int32_t>(lv[i]) * a.qs[i];
  for (int i = 16; i < 32; ++i) isum1 += static_cast<int32_t>(lv[i]) * a.qs[i];
  const float dx = a.d;
  if constexpr (rocmfpx_two_scales<kType>()) {
    const float t0 = ue4m3_decode(blk[kBytes - 2]) * static_cast<float>(isum0);
    const float t1 = ue4m3_decode(blk[kBytes - 1]) * static_cast<float>(isum1);
    return dx * (t0 + t1);
  } else {
    return (ue4m3_decode(blk[kBytes - 1]) * dx) * static_cast<float>(isum0 + isum1);
  }
}

// ACCUMULATION ORDER: partial[b % 32] += dot_block_rocmfpx<kType>(block b, x[b]) for b ascending, then
// Partials32::reduce(). w: a row of n/32 blocks of rocmfpx_block_bytes<kType>() bytes.
template <int kType>
DSV4_HD float vec_dot_rocmfpx(int64_t n, const void* w, const BlockQ8_0Act* x) {
  constexpr int kBytes = rocmfpx_block_bytes<kType>();
  const auto* p = static_cast<const uint8_t*>(w);
  Partials32 acc;
  for (int64_t b = 0; b < n / 32; ++b) acc.add(b, dot_block_rocmfpx<kType>(p + b * kBytes, x[b]));
  return acc.reduce();
}

}  // namespace dsv4::qref
