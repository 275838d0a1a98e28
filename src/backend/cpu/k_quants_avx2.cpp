// backend/cpu/k_quants_avx2.cpp — AVX2 Q2_K / Q4_K x Q8_K vec_dot, bit-identical to the scalar
// references (orders written at their definitions in k_quants.cpp).
//
// Per super-block: vpmaddubsw (unsigned quants x signed q8 -> exact int16 pair sums, |pair| ≤ 3840),
// vpmaddwd with the sub-block scales (int16, broadcast by vpshufb) -> int32 isum_sc lanes; isum_m is
// vpmaddwd(mins, bsums). Both fold to 4 lanes, packed as [isum_sc | isum_m] (128-bit halves).
// Super-blocks go in chunks of 8 (chunk c = super-blocks 8c .. 8c+7 -> accumulator c % 4, lane j =
// super-block 8c + j, i.e. partial b % 32); a phaddd transpose gives isum_sc / isum_m vectors, then
// v = d_x·(d·isum_sc − dmin·isum_m) lane-wise (blended tails); final tree (acc0 + acc2) + (acc1 +
// acc3), then halving folds.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/k_quants.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/simd_reduce.h"
#include "backend/cpu/stream_prefetch.h"

namespace dsv4::cpu {
namespace {

constexpr int64_t kABytes = 292;

inline float reduce_partials(const __m256 acc[4]) {
  return reduce_partials32_avx2(acc[0], acc[1], acc[2], acc[3]);
}

inline __m128i fold(__m256i v) { return _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)); }

// vpshufb control: int16 lanes of the low 128 bits = byte k0 of the source lane, high 128 = byte k1.
inline __m256i bcast16(int k0, int k1) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(0x8000 | k1)), _mm_set1_epi16(static_cast<short>(0x8000 | k0)));
}

inline __m256i q2_k_super_block(const uint8_t* w, const uint8_t* a) {
  const __m128i scb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  const __m256i scs = _mm256_broadcastsi128_si256(_mm_and_si128(scb, m4));
  const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(scb, 4), m4));
  const __m256i m3 = _mm256_set1_epi8(3);
  const uint8_t* aq = a + 4;
  __m256i acc = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * h));
    for (int j = 0; j < 4; ++j) {
      const int k = 8 * h + 2 * j;  // int16 lanes 0-7: sub-block k, 8-15: k + 1
      const __m256i q = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * j), m3);
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq + 128 * h + 32 * j));
      const __m256i scales = _mm256_shuffle_epi8(scs, bcast16(k, k + 1));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), scales));
    }
  }
  const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 260));
  return _mm256_set_m128i(fold(_mm256_madd_epi16(mn16, bs)), fold(acc));
}

inline __m256i q4_k_super_block(const uint8_t* w, const uint8_t* a) {
  uint64_t sc8, m8;
  q4_k_unpack_scales(w + 4, &sc8, &m8);
  const __m256i scs = _mm256_set1_epi64x(static_cast<long long>(sc8));
  const __m128i mb = _mm_cvtsi64_si128(static_cast<long long>(m8));
  const __m256i mdup = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mb, mb));  // m0 m0 m1 m1 ... m7 m7
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const uint8_t* aq = a + 4;
  __m256i acc = _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * c));
    const __m256i lo = _mm256_and_si256(v, m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq + 64 * c));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq + 64 * c + 32));
    const __m256i s0 = _mm256_shuffle_epi8(scs, bcast16(2 * c, 2 * c));
    const __m256i s1 = _mm256_shuffle_epi8(scs, bcast16(2 * c + 1, 2 * c + 1));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), s0));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), s1));
  }
  const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 260));
  return _mm256_set_m128i(fold(_mm256_madd_epi16(mdup, bs)), fold(acc));
}

template <int64_t kWBytes, int kDOffset, __m256i (*SuperBlock)(const uint8_t*, const uint8_t*)>
float k_quant_dot(int64_t n, const void* w, const void* act) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(act);
  const int64_t nb = n / 256;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t c = 0; c * 8 < nb; ++c) {
    const int64_t b0 = c * 8;
    const uint8_t* wc = wp + b0 * kWBytes;
    const uint8_t* ac = ap + b0 * kABytes;
    const int cnt = static_cast<int>(std::min<int64_t>(8, nb - b0));
    prefetch_ahead(wc, cnt * kWBytes);  // stream_prefetch.h
    __m256i v[8];
    alignas(16) uint16_t dh[8] = {}, dmh[8] = {};
    alignas(32) float dxa[8] = {};
    for (int i = 0; i < cnt; ++i) {
      v[i] = SuperBlock(wc + i * kWBytes, ac + i * kABytes);
      std::memcpy(&dh[i], wc + i * kWBytes + kDOffset, 2);
      std::memcpy(&dmh[i], wc + i * kWBytes + kDOffset + 2, 2);
      std::memcpy(&dxa[i], ac + i * kABytes, 4);
    }
    for (int i = cnt; i < 8; ++i) v[i] = _mm256_setzero_si256();
    // 128-bit lane 0 of s0123: isum_sc of super-blocks 0..3, lane 1: isum_m of 0..3.
    const __m256i s0123 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    const __m256i s4567 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    const __m256i isc = _mm256_permute2x128_si256(s0123, s4567, 0x20);
    const __m256i ism = _mm256_permute2x128_si256(s0123, s4567, 0x31);
    const __m256 d = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dh)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dmh)));
    const __m256 dx = _mm256_load_ps(dxa);
    const __m256 t_sc = _mm256_mul_ps(d, _mm256_cvtepi32_ps(isc));
    const __m256 t_m = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(ism));
    const __m256 val = _mm256_mul_ps(dx, _mm256_sub_ps(t_sc, t_m));
    __m256& a = acc[c & 3];
    if (cnt == 8) {
      a = _mm256_add_ps(a, val);
    } else {
      const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), lane));
      a = _mm256_blendv_ps(a, _mm256_add_ps(a, val), keep);
    }
  }
  return reduce_partials(acc);
}

}  // namespace

float vec_dot_q2_k_avx2(int64_t n, const void* w, const void* act) {
  return k_quant_dot<84, 80, q2_k_super_block>(n, w, act);
}

float vec_dot_q4_k_avx2(int64_t n, const void* w, const void* act) {
  return k_quant_dot<144, 0, q4_k_super_block>(n, w, act);
}

}  // namespace dsv4::cpu
