// backend/cpu/k_quants_avx512.cpp — AVX-512 (F/BW/VL/DQ/VNNI) Q2_K / Q4_K x Q8_K vec_dot and
// vec_dot_rows (1-4 rows per activation pass), bit-identical to the scalar references (orders written
// at their definitions in k_quants.cpp). Only exact int32 arithmetic differs from the scalar code.
//
// Per super-block, isum_sc accumulates in two independent 16 x int32 chains:
//   Q2_K: vpshufb looks up q·sc (≤ 45) in a per-super-block table, vpdpbusd adds q·sc·x;
//   Q4_K: vpmaddubsw (nibbles x q8 -> exact int16 pair sums, |pair| ≤ 3840), vpdpwssd with the 6-bit
//         scales (int16, broadcast per 128-bit lane by vpshufb).
// isum_m is vpmaddwd(mins, bsums). Both are folded to 8 lanes and packed into one vector [isum_sc |
// isum_m]. Super-blocks go in chunks of 16 (chunk c = super-blocks 16c .. 16c+15 -> accumulator c % 2,
// lane j = super-block 16c + j, i.e. partial b % 32); one transposing reduction (in-lane unpacks, then
// 128-bit shuffles) turns the 16 packed vectors into isum_sc and isum_m vectors, then
// v = d_x·(d·isum_sc − dmin·isum_m) lane-wise (masked tails), and the final tree is acc0 + acc1 then
// halving folds. The multi-row form runs each chunk of the activation against every row (separate
// accumulators per row); per-chunk d/dmin and d_x are collected through small stack buffers (one
// masked vector load each; gathers are slow on Zen 4).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/k_quants.h"
#include "backend/cpu/q2_k_avx512.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/simd_reduce.h"

namespace dsv4::cpu {
namespace {

constexpr int64_t kABytes = 292;  // sizeof(BlockQ8_K): d at 0, qs at 4, bsums at 260

// v[16]: super-block i packed as [isum_sc partials (lanes 0-7) | isum_m partials (8-15)] -> isc / ism
// lane i = Σ of those lanes of v[i] (in-lane unpacks, then 128-bit lane shuffles).
inline void reduce16(const __m512i v[16], __m512i* isc, __m512i* ism) {
  __m512i u[8], w[4];
  for (int i = 0; i < 8; ++i)
    u[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  for (int g = 0; g < 4; ++g)
    w[g] = _mm512_add_epi32(_mm512_unpacklo_epi64(u[2 * g], u[2 * g + 1]), _mm512_unpackhi_epi64(u[2 * g], u[2 * g + 1]));
  // w[g]: 128-bit lane L, dword t = Σ of 128-bit lane L of v[4g + t].
  const __m512i z01 = _mm512_add_epi32(_mm512_shuffle_i64x2(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i64x2(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i z23 = _mm512_add_epi32(_mm512_shuffle_i64x2(w[2], w[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i64x2(w[2], w[3], _MM_SHUFFLE(3, 1, 3, 1)));
  *isc = _mm512_shuffle_i64x2(z01, z23, _MM_SHUFFLE(2, 0, 2, 0));
  *ism = _mm512_shuffle_i64x2(z01, z23, _MM_SHUFFLE(3, 1, 3, 1));
}

// The same for v[0..7] only: lanes 0-7 of isc / ism (lanes 8-15 repeat them).
inline void reduce8(const __m512i v[8], __m512i* isc, __m512i* ism) {
  __m512i u[4];
  for (int i = 0; i < 4; ++i)
    u[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  const __m512i w0 = _mm512_add_epi32(_mm512_unpacklo_epi64(u[0], u[1]), _mm512_unpackhi_epi64(u[0], u[1]));
  const __m512i w1 = _mm512_add_epi32(_mm512_unpacklo_epi64(u[2], u[3]), _mm512_unpackhi_epi64(u[2], u[3]));
  const __m512i z01 = _mm512_add_epi32(_mm512_shuffle_i64x2(w0, w1, _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i64x2(w0, w1, _MM_SHUFFLE(3, 1, 3, 1)));
  *isc = _mm512_shuffle_i64x2(z01, z01, _MM_SHUFFLE(2, 0, 2, 0));
  *ism = _mm512_shuffle_i64x2(z01, z01, _MM_SHUFFLE(3, 1, 3, 1));
}

inline float reduce_partials(__m512 acc0, __m512 acc1) {
  return reduce_partials32_avx512(acc0, acc1);
}

// [fold(isum_sc lanes) | isum_m lanes], each 8 int32 lanes.
inline __m512i pack(__m512i sc_acc, __m256i m8) {
  const __m256i sc8 = _mm256_add_epi32(_mm512_castsi512_si256(sc_acc), _mm512_extracti64x4_epi64(sc_acc, 1));
  return _mm512_inserti64x4(_mm512_castsi256_si512(sc8), m8, 1);
}

// vpshufb control: int16 lanes of 128-bit lane i = byte k[i] of that lane of the source.
inline __m512i bcast16(int k0, int k1, int k2, int k3) {
  auto c = [](int k) { return static_cast<short>(0x8000 | k); };
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(c(k1)), _mm_set1_epi16(c(k0)))),
      _mm256_set_m128i(_mm_set1_epi16(c(k3)), _mm_set1_epi16(c(k2))), 1);
}

// Q2_K: isum_sc by vpdpbusd of the scaled quants (q2_k_avx512.h) with the activation, two chains;
// isum_m by vpmaddwd of the mins and bsums.
inline __m512i q2_k_super_block(const uint8_t* w, const uint8_t* a) {
  __m512i qs[4];
  q2_k_scaled_quants(w, qs);
  const __m256i mn16 = q2_k_mins16(w);
  const uint8_t* aq = a + 4;
  __m512i acc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};  // two chains (latency)
  for (int p = 0; p < 4; ++p) acc[p & 1] = _mm512_dpbusd_epi32(acc[p & 1], qs[p], _mm512_loadu_si512(aq + 64 * p));
  const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 260));
  return pack(_mm512_add_epi32(acc[0], acc[1]), _mm256_madd_epi16(mn16, bs));
}

inline __m512i q4_k_super_block(const uint8_t* w, const uint8_t* a) {
  uint64_t sc8, m8;
  q4_k_unpack_scales(w + 4, &sc8, &m8);
  const __m512i scs = _mm512_set1_epi64(static_cast<long long>(sc8));
  const __m128i mb = _mm_cvtsi64_si128(static_cast<long long>(m8));
  const __m256i mdup = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mb, mb));  // m0 m0 m1 m1 ... m7 m7
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const uint8_t* aq = a + 4;
  __m512i acc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};  // two chains (latency)
  for (int half = 0; half < 2; ++half) {
    const __m512i v = _mm512_loadu_si512(w + 16 + 64 * half);  // chunks c0 = 2·half, c1 = c0 + 1
    const __m512i lo = _mm512_and_si512(v, m4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    for (int t = 0; t < 2; ++t) {
      const int c = 2 * half + t;  // elements 64c .. 64c+63 = sub-blocks 2c (low nibbles), 2c+1 (high)
      const __m512i q = t == 0 ? _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0))
                               : _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
      const __m512i scales = _mm512_shuffle_epi8(scs, bcast16(2 * c, 2 * c, 2 * c + 1, 2 * c + 1));
      const __m512i x = _mm512_loadu_si512(aq + 64 * c);
      acc[t] = _mm512_dpwssd_epi32(acc[t], _mm512_maddubs_epi16(q, x), scales);
    }
  }
  const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 260));
  return pack(_mm512_add_epi32(acc[0], acc[1]), _mm256_madd_epi16(mdup, bs));
}

// The float steps of one lane (a super-block): d_x·(d·isum_sc − dmin·isum_m), with dd = (f16 d |
// f16 dmin << 16) per lane.
inline __m512 scaled_values(__m512i dd, __m512i isc, __m512i ism, __m512 dx) {
  const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
  const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
  const __m512 t_sc = _mm512_mul_ps(d, _mm512_cvtepi32_ps(isc));
  const __m512 t_m = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(ism));
  return _mm512_mul_ps(dx, _mm512_sub_ps(t_sc, t_m));
}

// One chunk of up to 16 super-blocks (cnt of them) of one row -> acc[c & 1] (lane j = super-block
// 16c + j). dx: the chunk's activation scales (shared by every row). No software prefetch (see
// stream_prefetch.h: on the Zen 4 VM it cost 1-thread Q4_K 68-70 % -> 54-57 % of the read bandwidth).
// kGather: d/dmin by one vpgatherdd (best for a single row, where the stack buffer's failed store
// forwarding sits on the critical path) instead of the stack buffer (best for several rows).
template <int64_t kWBytes, int kDOffset, __m512i (*SuperBlock)(const uint8_t*, const uint8_t*), bool kGather>
inline __m512 chunk_values(const uint8_t* wc, const uint8_t* ac, int cnt, __m512 dx) {
  __m512i v[16];
  alignas(64) uint32_t dbuf[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) {
    if (i < cnt) {
      const uint8_t* wb = wc + i * kWBytes;
      v[i] = SuperBlock(wb, ac + i * kABytes);
      if constexpr (!kGather) std::memcpy(&dbuf[i], wb + kDOffset, 4);
    } else {
      v[i] = _mm512_setzero_si512();
    }
  }
  __m512i isc, ism;
  if (cnt > 8) {
    reduce16(v, &isc, &ism);
  } else {
    reduce8(v, &isc, &ism);  // lanes 8-15 are masked off by the caller
  }
  const __mmask16 m = static_cast<__mmask16>(cnt == 16 ? 0xffff : (1u << cnt) - 1);
  __m512i dd;
  if constexpr (kGather) {
    dd = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, lane_offsets(kWBytes), wc + kDOffset, 1);
  } else {
    dd = _mm512_maskz_load_epi32(m, dbuf);
  }
  return scaled_values(dd, isc, ism, dx);
}

// Two rows' chunks of cnt <= 8 super-blocks (n = 2048: the DS4 expert down projection) through one
// transposition: row 0 in lanes 0-7, row 1 in lanes 8-15; every lane's float steps are chunk_values'.
// dx2: the chunk's activation scales in both halves.
template <int64_t kWBytes, int kDOffset, __m512i (*SuperBlock)(const uint8_t*, const uint8_t*)>
inline __m512 chunk_values_two_rows(const uint8_t* wc0, const uint8_t* wc1, const uint8_t* ac, int cnt, __m512 dx2) {
  __m512i v[16];
  alignas(64) uint32_t dbuf[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) {
    const int j = i & 7;
    if (j < cnt) {
      const uint8_t* wb = (i < 8 ? wc0 : wc1) + j * kWBytes;
      v[i] = SuperBlock(wb, ac + j * kABytes);
      std::memcpy(&dbuf[i], wb + kDOffset, 4);
    } else {
      v[i] = _mm512_setzero_si512();
      dbuf[i] = 0;
    }
  }
  __m512i isc, ism;
  reduce16(v, &isc, &ism);
  const __m512i dd = _mm512_load_epi32(dbuf);
  return scaled_values(dd, isc, ism, dx2);
}

// nr (1..4) rows at w + r * stride. kWBytes: weight block size; kDOffset: byte offset of (f16 d,
// f16 dmin) in the block.
template <int64_t kWBytes, int kDOffset, __m512i (*SuperBlock)(const uint8_t*, const uint8_t*), int NR>
void k_quant_rows(int64_t n, const uint8_t* wp, int64_t stride, const uint8_t* ap, float* out) {
  const int64_t nb = n / 256;
  __m512 acc[NR][2];
  for (int r = 0; r < NR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t c = 0; c * 16 < nb; ++c) {
    const int64_t b0 = c * 16;
    const uint8_t* ac = ap + b0 * kABytes;
    const int cnt = static_cast<int>(std::min<int64_t>(16, nb - b0));
    const __mmask16 m = static_cast<__mmask16>(cnt == 16 ? 0xffff : (1u << cnt) - 1);
    __m512 dx;
    if constexpr (NR == 1) {
      dx = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, lane_offsets(kABytes), ac, 1);
    } else {
      alignas(64) float xbuf[16];
      for (int i = 0; i < cnt; ++i) std::memcpy(&xbuf[i], ac + i * kABytes, 4);
      dx = _mm512_maskz_load_ps(m, xbuf);
    }
    int r = 0;
    if constexpr (NR >= 2) {
      if (cnt <= 8) {
        const __m512 dx2 = _mm512_shuffle_f32x4(dx, dx, _MM_SHUFFLE(1, 0, 1, 0));
        for (; r + 1 < NR; r += 2) {
          const uint8_t* w0 = wp + r * stride + b0 * kWBytes;
          const __m512 val = chunk_values_two_rows<kWBytes, kDOffset, SuperBlock>(w0, w0 + stride, ac, cnt, dx2);
          const __m512 hi = _mm512_shuffle_f32x4(val, val, _MM_SHUFFLE(1, 0, 3, 2));
          acc[r][c & 1] = _mm512_mask_add_ps(acc[r][c & 1], m, acc[r][c & 1], val);
          acc[r + 1][c & 1] = _mm512_mask_add_ps(acc[r + 1][c & 1], m, acc[r + 1][c & 1], hi);
        }
      }
    }
    for (; r < NR; ++r) {
      const __m512 val = chunk_values<kWBytes, kDOffset, SuperBlock, NR == 1>(wp + r * stride + b0 * kWBytes, ac, cnt, dx);
      acc[r][c & 1] = _mm512_mask_add_ps(acc[r][c & 1], m, acc[r][c & 1], val);
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = reduce_partials(acc[r][0], acc[r][1]);
}

template <int64_t kWBytes, int kDOffset, __m512i (*SuperBlock)(const uint8_t*, const uint8_t*)>
void k_quant_rows_dispatch(int64_t n, const void* w, int64_t stride, const void* act, int nr, float* out) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(act);
  switch (nr) {
    case 1: k_quant_rows<kWBytes, kDOffset, SuperBlock, 1>(n, wp, stride, ap, out); break;
    case 2: k_quant_rows<kWBytes, kDOffset, SuperBlock, 2>(n, wp, stride, ap, out); break;
    case 3: k_quant_rows<kWBytes, kDOffset, SuperBlock, 3>(n, wp, stride, ap, out); break;
    default: k_quant_rows<kWBytes, kDOffset, SuperBlock, 4>(n, wp, stride, ap, out); break;
  }
}

}  // namespace

float vec_dot_q2_k_avx512(int64_t n, const void* w, const void* act) {
  float out;
  k_quant_rows<84, 80, q2_k_super_block, 1>(n, static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(act), &out);
  return out;
}

float vec_dot_q4_k_avx512(int64_t n, const void* w, const void* act) {
  float out;
  k_quant_rows<144, 0, q4_k_super_block, 1>(n, static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(act), &out);
  return out;
}

void vec_dot_rows_q2_k_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  k_quant_rows_dispatch<84, 80, q2_k_super_block>(n, w, w_stride, act, nr, out);
}

void vec_dot_rows_q4_k_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  k_quant_rows_dispatch<144, 0, q4_k_super_block>(n, w, w_stride, act, nr, out);
}

}  // namespace dsv4::cpu
