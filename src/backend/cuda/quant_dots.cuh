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
#include <type_traits>

#include "numerics/blocks.h"
#include "numerics/iq2_xxs_grid.h"
#include "numerics/quant_ref_iq2_xxs.h"
#include "numerics/quant_ref_k.h"

namespace dsv4::cuda::qdot {

// N little-endian words from a 2-byte aligned address in any memory space (a Q8_0 block in a warp's
// shared-memory stage): N aligned 32-bit loads from the word at or below p, the 16 bits at p + 4N − 2
// and funnel shifts by 0 or 16 bits — no byte outside [p − 2, p + 4N) is read. (Pointer arithmetic, not
// an integer cast, so that the compiler keeps the loads in the pointer's own space.)
template <int N>
__device__ __forceinline__ void load_words_align2(const uint8_t* p, uint32_t (&q)[N]) {
  const uint32_t sh = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) & 3) * 8;  // 0 or 16
  const uint32_t* base = reinterpret_cast<const uint32_t*>(p - (sh >> 3));
  uint32_t w[N + 1];
#pragma unroll
  for (int k = 0; k < N; ++k) w[k] = base[k];
  w[N] = *reinterpret_cast<const uint16_t*>(p + 4 * N - 2);
#pragma unroll
  for (int k = 0; k < N; ++k) q[k] = __funnelshift_r(w[k], w[k + 1], sh);
}

// Σ_{i<32} w.qs[i]·a.qs[i] (dot_block_q8_0's isum): the 32 weight bytes (2-byte aligned: a block is 34
// bytes) by eight 32-bit loads and a 16-bit one, not sixteen 16-bit loads.
__device__ __forceinline__ int32_t q8_0_isum(const uint8_t* wblk, const BlockQ8_0Act& a) {
  uint32_t q[8];
  load_words_align2<8>(wblk + 2, q);  // BlockQ8_0: u16 d, i8 qs[32]
  const int* a32 = reinterpret_cast<const int*>(a.qs);
  int32_t s = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) s = __dp4a(static_cast<int>(q[k]), a32[k], s);
  return s;
}

// Byte j of the result is 0xff where bit 8j+7 of `spread` is set, else 0 (prmt's sign-replicate
// selector, 0x8 | j per byte, copies each byte's top bit across the byte).
__device__ __forceinline__ uint32_t top_bits_to_bytes(uint32_t spread) {
  uint32_t m;
  asm("prmt.b32 %0, %1, 0, 0xBA98;" : "=r"(m) : "r"(spread));
  return m;
}

// IQ2_XXS signs without a table. The sign pattern of index s (7 bits) is kIq2xxsSigns[s] = s | parity(s) << 7
// (checked below): bit j of the pattern negates weight j of the 8. Spread to bit 8j+7 of two words, the
// prmt above turns them into byte masks (0xff: negative):
//   low four:  s · (2^7 + 2^14 + 2^21 + 2^28): bit j lands at 8j+7; the partial products fill bits
//              7-13, 14-20, 21-27 and 28-31, which do not overlap, so nothing carries;
//   high four: s · (2^3 + 2^10 + 2^17) puts bits 4, 5, 6 at 7, 15, 23 (partial products at 3-9, 10-16,
//              17-23: no carries, bits 24-31 zero) and popc(s) · 2^31 the parity at 31.
// Two multiplies, a popc and an add instead of masking, or-ing and shifting (the routed products are
// bound by instruction issue: ~22 integer operations per 8 weights before).
__host__ __device__ constexpr uint32_t iq2_sign_spread_lo(uint32_t s) { return s * 0x10204080u; }
__host__ __device__ constexpr uint32_t iq2_sign_spread_hi(uint32_t s) {
  uint32_t ones = 0;
#ifdef __CUDA_ARCH__
  if (!std::is_constant_evaluated()) {
    ones = static_cast<uint32_t>(__popc(s));
  } else
#endif
  {
    for (uint32_t v = s; v != 0; v &= v - 1) ++ones;
  }
  return s * 0x00020408u + ones * 0x80000000u;
}

// What the grid bytes and the signs must be for iq2_xxs_group_isum: every magnitude in 1..127 (so that
// g ^ 0xff is −g − 1 as a signed byte), the sign patterns s | parity(s) << 7, and the two spreads put
// pattern bit j at bit 8j+7 (the bit prmt reads) for all 128 indices.
consteval bool iq2_xxs_tables_fit_signed_grid() {
  for (uint64_t e : qref::kIq2xxsGrid)
    for (int j = 0; j < 8; ++j)
      if (((e >> (8 * j)) & 0xff) == 0 || ((e >> (8 * j)) & 0xff) > 0x7f) return false;
  for (uint32_t s = 0; s < 128; ++s) {
    int parity = 0;
    for (int j = 0; j < 7; ++j) parity ^= (s >> j) & 1;
    const uint32_t pattern = qref::kIq2xxsSigns[s];
    if (pattern != (s | static_cast<uint32_t>(parity) << 7)) return false;
    for (int j = 0; j < 4; ++j) {
      if (((iq2_sign_spread_lo(s) >> (8 * j + 7)) & 1) != ((pattern >> j) & 1)) return false;
      if (((iq2_sign_spread_hi(s) >> (8 * j + 7)) & 1) != ((pattern >> (j + 4)) & 1)) return false;
    }
  }
  return true;
}
static_assert(iq2_xxs_tables_fit_signed_grid(),
              "iq2_xxs_group_isum needs grid magnitudes in 1..127, the signs s | parity(s) << 7 and spreads "
              "that put sign j at bit 8j+7");

// Σ over one group of 32 weights (aw: its two words, iq2_xxs_group_words) of signed grid × activation
// (a32: the group's 8 activation words), times 2·ls + 1. Per 4 weights with byte masks m (0xff where
// negative): g ^ m is g or −g − 1 as signed bytes, so Σ signed·a = dp4a(g ^ m, a) − dp4a(m, a) (m's bytes
// are 0 or −1): an xor and two dp4a, the second into its own sum.
__device__ __forceinline__ int32_t iq2_xxs_group_isum(uint32_t aw0, uint32_t aw1, const uint64_t* grid, const int* a32) {
  int32_t gsum = 0, msum = 0;
#pragma unroll
  for (int l = 0; l < 4; ++l) {
    const uint32_t s_idx = (aw1 >> (7 * l)) & 127;
    const uint64_t gr = grid[(aw0 >> (8 * l)) & 0xff];
    const uint32_t m_lo = top_bits_to_bytes(iq2_sign_spread_lo(s_idx));
    const uint32_t m_hi = top_bits_to_bytes(iq2_sign_spread_hi(s_idx));
    gsum = __dp4a(static_cast<int>(static_cast<uint32_t>(gr) ^ m_lo), a32[2 * l], gsum);
    msum = __dp4a(static_cast<int>(m_lo), a32[2 * l], msum);
    gsum = __dp4a(static_cast<int>(static_cast<uint32_t>(gr >> 32) ^ m_hi), a32[2 * l + 1], gsum);
    msum = __dp4a(static_cast<int>(m_hi), a32[2 * l + 1], msum);
  }
  return static_cast<int32_t>(2 * (aw1 >> 28) + 1) * (gsum - msum);
}

// iq2_xxs_isum over groups [g0, g1).
__device__ __forceinline__ int32_t iq2_xxs_isum(const BlockIq2Xxs& w, const BlockQ8_K& a, const uint64_t* grid, int g0,
                                               int g1) {
  int32_t isum = 0;
  for (int g = g0; g < g1; ++g) {
    uint32_t aw[2];
    qref::iq2_xxs_group_words(w, g, aw);
    isum += iq2_xxs_group_isum(aw[0], aw[1], grid, reinterpret_cast<const int*>(a.qs + 32 * g));
  }
  return isum;
}

// A lane's 64 activation bytes, qs[64s … 64s+63] of a BlockQ8_K (its two IQ2_XXS groups 2s, 2s+1 or its
// four Q2_K sub-blocks 4s … 4s+3) and those sub-blocks' bsums: loaded once per block and used for every
// weight row a warp computes (the routed form's rows; each row re-read them from shared memory before).
struct LaneAct64 {
  int w[16];
  int32_t bsums[4];
};
__device__ __forceinline__ LaneAct64 lane_act64(const BlockQ8_K& a, int s) {
  LaneAct64 r;
  const int* a32 = reinterpret_cast<const int*>(a.qs + 64 * s);
#pragma unroll
  for (int k = 0; k < 16; ++k) r.w[k] = a32[k];
#pragma unroll
  for (int k = 0; k < 4; ++k) r.bsums[k] = a.bsums[4 * s + k];
  return r;
}

// load_words_align2<4> for weights in global memory (read-only: __ldg, the address from the integer: the
// form measured on the GPU; the generic one keeps shared-memory pointers shared instead). For IQ2_XXS
// blocks (66 bytes: their qs start 2 bytes past a word boundary in every other block): 5 loads, not 8.
__device__ __forceinline__ void load_words4_align2(const uint8_t* p, uint32_t (&q)[4]) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  const uint32_t* base = reinterpret_cast<const uint32_t*>(addr & ~uintptr_t{3});
  const uint32_t sh = static_cast<uint32_t>(addr & 3) * 8;  // 0 or 16
  uint32_t w[5];
#pragma unroll
  for (int k = 0; k < 4; ++k) w[k] = __ldg(base + k);
  w[4] = __ldg(reinterpret_cast<const unsigned short*>(p + 14));
#pragma unroll
  for (int k = 0; k < 4; ++k) q[k] = __funnelshift_r(w[k], w[k + 1], sh);
}

// iq2_xxs_isum over groups 2s, 2s+1 against a lane's activation words.
__device__ __forceinline__ int32_t iq2_xxs_isum_lane(const uint8_t* blk, const LaneAct64& act, const uint64_t* grid,
                                                    int s) {
  uint32_t q[4];
  load_words4_align2(blk + 2 + 16 * s, q);  // BlockIq2Xxs: u16 d, u16 qs[32]; groups 2s, 2s+1 = qs[8s … 8s+7]
  return iq2_xxs_group_isum(q[0], q[1], grid, act.w) + iq2_xxs_group_isum(q[2], q[3], grid, act.w + 8);
}

// iq2_xxs_isum_lane for a block in shared memory (the staged routed form): the generic loads.
__device__ __forceinline__ int32_t iq2_xxs_isum_lane_shared(const uint8_t* blk, const LaneAct64& act, const uint64_t* grid,
                                                           int s) {
  uint32_t q[4];
  load_words_align2<4>(blk + 2 + 16 * s, q);
  return iq2_xxs_group_isum(q[0], q[1], grid, act.w) + iq2_xxs_group_isum(q[2], q[3], grid, act.w + 8);
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

// q2_k_isums over sub-blocks 4s … 4s+3 (one quarter: h = s / 2, bit planes 2j for j = 2(s mod 2),
// 2(s mod 2) + 1) against a lane's activation words, for a 4-byte aligned block: its 32 bytes of qs are
// loaded once for both planes.
__device__ __forceinline__ qref::KQuantIsums q2_k_isums_lane(const BlockQ2_K& w, const LaneAct64& act, int s) {
  qref::KQuantIsums r;
  const int h = s / 2;
  uint32_t q[8];
  const uint32_t* q32 = reinterpret_cast<const uint32_t*>(w.qs + 32 * h);
#pragma unroll
  for (int i = 0; i < 8; ++i) q[i] = q32[i];
  const uint32_t sc4 = *reinterpret_cast<const uint32_t*>(w.scales + 4 * s);  // scales[4s … 4s+3]
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const int k = 4 * s + kk, j = (k / 2) % 4, half = k % 2;
    int32_t sub = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) sub = __dp4a(static_cast<int>((q[4 * half + i] >> (2 * j)) & 0x03030303u), act.w[4 * kk + i], sub);
    const int32_t sc = static_cast<int32_t>((sc4 >> (8 * kk)) & 0xff);
    r.sc += (sc & 15) * sub;
    r.m += (sc >> 4) * act.bsums[kk];
  }
  return r;
}

}  // namespace dsv4::cuda::qdot
