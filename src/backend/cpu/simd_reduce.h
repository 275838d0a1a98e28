// backend/cpu/simd_reduce.h — the Partials32 tree (numerics/accumulate.h) in AVX2 and AVX-512 registers,
// and the gather offsets the AVX-512 kernels use to collect per-block scales.
// Include only from *_avx2.cpp / *_avx512.cpp files (needs those ISA flags).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace dsv4::cpu {

// a += val in the first cnt of the 8 lanes (cnt ≤ 8; the other lanes keep their bits): the f32 step of
// a chunk of cnt blocks, one block per lane (the Q8_0 and K-quant AVX2 dots and tiles).
static inline void add_first_lanes_avx2(__m256& a, __m256 val, int cnt) {
  if (cnt == 8) {
    a = _mm256_add_ps(a, val);
  } else {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), lane));
    a = _mm256_blendv_ps(a, _mm256_add_ps(a, val), keep);
  }
}

// Lane j = j * bytes: gather offsets of 8 consecutive blocks of `bytes` bytes.
static inline __m256i lane_offsets_avx2(int bytes) {
  return _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(bytes));
}

// The dwords at base + off[j] (one gather; the per-block scales of 8 blocks of a chunk, which scalar
// copies through a stack array fetched slower: 8 narrow stores then one wide load cannot forward).
static inline __m256i gather_dwords_avx2(const void* base, __m256i off) {
  return _mm256_i32gather_epi32(static_cast<const int*>(base), off, 1);
}

// f16 -> f32 of the low (hi = false) or high 16 bits of each dword of v.
static inline __m256 f16_half_of_dwords_avx2(__m256i v, bool hi) {
  const __m256i pick = hi ? _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6, 7, 10,
                                             11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1)
                          : _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9,
                                             12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, pick), 0x08);
  return _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
}

// Partials 0-7, 8-15, 16-23, 24-31 in a0..a3. Tree: s=16: (a0+a2, a1+a3); s=8: sum of those;
// then s=4, 2, 1 inside the 8 lanes.
static inline float reduce_partials32_avx2(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 s16lo = _mm256_add_ps(a0, a2);  // p[i] + p[i+16], i = 0..7
  const __m256 s16hi = _mm256_add_ps(a1, a3);  // i = 8..15
  const __m256 s8 = _mm256_add_ps(s16lo, s16hi);  // p[i] + p[i+8], i = 0..7
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

#ifdef __AVX512F__
// Partials 0-15 in lo, 16-31 in hi.
static inline float reduce_partials32_avx512(__m512 lo, __m512 hi) {
  const __m512 s16 = _mm512_add_ps(lo, hi);
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(s16),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s16), 1)));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

// Lane j = j * bytes: gather offsets of 16 consecutive blocks of `bytes` bytes.
static inline __m512i lane_offsets(int64_t bytes) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(bytes)));
}
#endif

}  // namespace dsv4::cpu
