// backend/cuda/quant_dots.cuh — the exact int32 parts of the quantized block dots with dp4a (four
// int8 products per instruction) instead of numerics/quant_ref*.h's byte-at-a-time loops. Integer
// sums are order-free, so these are the same integers as the scalar references; the float parts stay
// the references' own (q8_0_finish, q2_k_finish, iq2_xxs_finish). The conformance suite compares every
// product with the scalar reference at zero bits. Included by matmul_types.cuh only (the TypeOps table
// of matmul.cu and matmul_decode.cu).
//
// Alignment: activations are this backend's own scratch (BlockQ8_0Act / BlockQ8_K rows, qs 4-byte
// aligned); Q8_0 and IQ2_XXS weights are read as 16-bit words (their blocks are 2-byte aligned);
// Q2_K as 32-bit words where the block is 4-byte aligned (the caller checks and otherwise uses the
// reference).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "numerics/blocks.h"
#include "numerics/iq2_xxs_grid.h"
#include "numerics/quant_ref_iq2_xxs.h"
#include "numerics/quant_ref_k.h"

namespace dsv4::cuda::qdot {

// Σ_{i<32} w.qs[i]·a.qs[i] (dot_block_q8_0's isum).
__device__ __forceinline__ int32_t q8_0_isum(const uint8_t* wblk, const BlockQ8_0Act& a) {
  const uint16_t* q16 = reinterpret_cast<const uint16_t*>(wblk + 2);  // BlockQ8_0: u16 d, i8 qs[32]
  const int* a32 = reinterpret_cast<const int*>(a.qs);
  int32_t s = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const uint32_t w = static_cast<uint32_t>(q16[2 * k]) | (static_cast<uint32_t>(q16[2 * k + 1]) << 16);
    s = __dp4a(static_cast<int>(w), a32[k], s);
  }
  return s;
}

// Byte j of the result is 0xff where bit j of the low four bits of b is set: b·0x10204080 moves bit j
// of the nibble to bit 8j+7 (the four partial products occupy bits 7-10, 14-17, 21-24, 28-31: no carries),
// then prmt's sign-replicate selector (0x8 | j per byte) copies each byte's top bit across the byte.
__device__ __forceinline__ uint32_t sign_bytes(uint32_t b) {
  const uint32_t spread = (b & 0xfu) * 0x10204080u;
  uint32_t m;
  asm("prmt.b32 %0, %1, 0, 0xBA98;" : "=r"(m) : "r"(spread));
  return m;
}

// The grid bytes with their signs: byte j of g is a magnitude (8, 25 or 43) and byte j of m is 0xff
// (negative) or 0. (g ^ m) + (m & 1 per byte) is the two's complement −g where m is 0xff and g where it is
// 0; no byte carries into the next since g ^ 0xff ≤ 0xf7 (the grid has no zero byte: checked below).
__device__ __forceinline__ uint32_t signed_grid(uint32_t g, uint32_t m) { return (g ^ m) + (m & 0x01010101u); }

consteval bool iq2_xxs_tables_fit_signed_grid() {
  for (uint64_t e : qref::kIq2xxsGrid)
    for (int j = 0; j < 8; ++j)
      if (((e >> (8 * j)) & 0xff) == 0 || ((e >> (8 * j)) & 0xff) > 0x7f) return false;
  for (int s = 0; s < 128; ++s)
    if ((qref::kIq2xxsSigns[s] & 0x7f) != s) return false;
  return true;
}
static_assert(iq2_xxs_tables_fit_signed_grid(),
              "signed_grid needs grid magnitudes in 1..127; the low sign nibble is read from the index");

// iq2_xxs_isum over groups [g0, g1): grid bytes get their signs per byte (signed_grid), then dp4a
// against the activation words. The low four signs are the index's own bits (kIq2xxsSigns[s] & 0x7f ==
// s); the high four come from the table (bit 7 is the parity).
__device__ __forceinline__ int32_t iq2_xxs_isum(const BlockIq2Xxs& w, const BlockQ8_K& a, const uint64_t* grid,
                                               const uint8_t* signs, int g0, int g1) {
  int32_t isum = 0;
  for (int g = g0; g < g1; ++g) {
    uint32_t aw[2];
    qref::iq2_xxs_group_words(w, g, aw);
    const int* a32 = reinterpret_cast<const int*>(a.qs + 32 * g);
    int32_t gsum = 0;
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint32_t s_idx = (aw[1] >> (7 * l)) & 127;
      const uint64_t gr = grid[(aw[0] >> (8 * l)) & 0xff];
      const uint32_t m_lo = sign_bytes(s_idx), m_hi = sign_bytes(static_cast<uint32_t>(signs[s_idx]) >> 4);
      gsum = __dp4a(static_cast<int>(signed_grid(static_cast<uint32_t>(gr), m_lo)), a32[2 * l], gsum);
      gsum = __dp4a(static_cast<int>(signed_grid(static_cast<uint32_t>(gr >> 32), m_hi)), a32[2 * l + 1], gsum);
    }
    isum += static_cast<int32_t>(2 * (aw[1] >> 28) + 1) * gsum;
  }
  return isum;
}

// q2_k_isums over sub-blocks [k0, k1) for a 4-byte aligned block: sub-block k's 16 quants are bits
// 2j of qs[32h + 16(k mod 2) + i], h = k / 8, j = (k / 2) mod 4.
__device__ __forceinline__ qref::KQuantIsums q2_k_isums(const BlockQ2_K& w, const BlockQ8_K& a, int k0, int k1) {
  qref::KQuantIsums s;
  for (int k = k0; k < k1; ++k) {
    const int h = k / 8, j = (k / 2) % 4;
    const uint32_t* q32 = reinterpret_cast<const uint32_t*>(w.qs + 32 * h + 16 * (k % 2));
    const int* a32 = reinterpret_cast<const int*>(a.qs + 16 * k);
    int32_t sub = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) sub = __dp4a(static_cast<int>((q32[i] >> (2 * j)) & 0x03030303u), a32[i], sub);
    s.sc += (w.scales[k] & 15) * sub;
    s.m += (w.scales[k] >> 4) * static_cast<int32_t>(a.bsums[k]);
  }
  return s;
}

}  // namespace dsv4::cuda::qdot
