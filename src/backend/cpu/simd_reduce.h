// backend/cpu/simd_reduce.h — the Partials32 tree (numerics/accumulate.h) in AVX2 and AVX-512 registers,
// and the per-block scale loads of 8 blocks (AVX2 inserts; the AVX-512 kernels gather with their own offsets).
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

// The T at base + j·stride as an int (unaligned-safe).
template <typename T>
static inline int int_at_stride(const uint8_t* base, int64_t stride, int j) {
  T v;
  __builtin_memcpy(&v, base + j * stride, sizeof v);
  return static_cast<int>(v);
}

// The f16 at base + j·stride for j < 8, as floats: eight 16-bit inserts and one conversion. (A
// vpgatherdd of the 8 dwords was the bottleneck of the Q8_0 matrix×vector on AMD Zen 4, 20.5 → 27.3 GB/s
// per thread without it; scalar copies through a stack array stall instead on store forwarding.)
static inline __m256 f16_at_stride_avx2(const uint8_t* base, int64_t stride) {
  auto at = [&](int j) { return int_at_stride<uint16_t>(base, stride, j); };
  __m128i v = _mm_cvtsi32_si128(at(0));
  v = _mm_insert_epi16(v, at(1), 1);
  v = _mm_insert_epi16(v, at(2), 2);
  v = _mm_insert_epi16(v, at(3), 3);
  v = _mm_insert_epi16(v, at(4), 4);
  v = _mm_insert_epi16(v, at(5), 5);
  v = _mm_insert_epi16(v, at(6), 6);
  v = _mm_insert_epi16(v, at(7), 7);
  return _mm256_cvtph_ps(v);
}

// Lane j = at(j) for j < 8 (at: j -> int), by dword inserts (as above: no gather, no stack round trip).
template <typename At>
static inline __m256i ints8_avx2(At&& at) {
  __m128i lo = _mm_cvtsi32_si128(at(0)), hi = _mm_cvtsi32_si128(at(4));
  lo = _mm_insert_epi32(lo, at(1), 1);
  hi = _mm_insert_epi32(hi, at(5), 1);
  lo = _mm_insert_epi32(lo, at(2), 2);
  hi = _mm_insert_epi32(hi, at(6), 2);
  lo = _mm_insert_epi32(lo, at(3), 3);
  hi = _mm_insert_epi32(hi, at(7), 3);
  return _mm256_set_m128i(hi, lo);
}

// The float at base + j·stride for j < 8.
static inline __m256 f32_at_stride_avx2(const uint8_t* base, int64_t stride) {
  return _mm256_castsi256_ps(ints8_avx2([&](int j) { return int_at_stride<int32_t>(base, stride, j); }));
}

// Eight 8-lane int32 vectors -> lane j = Σ of p[j]'s 8 lanes (exact), by unpack-and-add steps: vphaddd
// costs 2 cycles per instruction on AMD Zen 4 (4 unpacks cost the same), and this tree was the MXFP4
// vec_dot's largest shuffle cost. The per-chunk block sums of the AVX2 Q8_0, K-quant, IQ2_XXS and MXFP4 dots.
static inline __m256i sum_lanes8_avx2(const __m256i* p) {
  __m256i t[4];
  for (int i = 0; i < 4; ++i)  // per half [a0+a2, b0+b2, a1+a3, b1+b3], a = p[2i], b = p[2i+1]
    t[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(p[2 * i], p[2 * i + 1]), _mm256_unpackhi_epi32(p[2 * i], p[2 * i + 1]));
  // per half [Σ p0, Σ p1, Σ p2, Σ p3] (that half's lanes), then the same for p4..p7
  const __m256i a = _mm256_add_epi32(_mm256_unpacklo_epi64(t[0], t[1]), _mm256_unpackhi_epi64(t[0], t[1]));
  const __m256i b = _mm256_add_epi32(_mm256_unpacklo_epi64(t[2], t[3]), _mm256_unpackhi_epi64(t[2], t[3]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// The s = 4, 2, 1 steps of Partials32's tree (below) on its 8 lane sums s8 (lane i: the partials ≡ i
// mod 8), for kernels that do the lane-wise s = 16 and s = 8 steps themselves.
static inline float reduce_lanes8_avx2(__m256 s8) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

// Eight 16-lane int16 vectors -> per 128-bit half: int32 lane j of lo = Σ of p[j]'s 8 lanes in the low
// half, of hi = in the high half (exact when every |lane| ≤ 8191: the first two steps add 4 lanes in
// int16). Dword unpacks and adds (each dword keeps two lanes of one vector), then qword unpacks and adds,
// vpmaddwd by ones, and the 128-bit halves regrouped.
static inline void sum_halves8_i16_avx2(const __m256i* p, __m256i& lo, __m256i& hi) {
  __m256i t[4];
  for (int i = 0; i < 4; ++i)  // dwords per half: [a(d0+d2), b(d0+d2), a(d1+d3), b(d1+d3)], a = p[2i], b = p[2i+1]
    t[i] = _mm256_add_epi16(_mm256_unpacklo_epi32(p[2 * i], p[2 * i + 1]), _mm256_unpackhi_epi32(p[2 * i], p[2 * i + 1]));
  // dwords per half: two int16 partial sums of p0, p1, p2, p3 (then p4..p7), each of 4 lanes
  const __m256i a = _mm256_add_epi16(_mm256_unpacklo_epi64(t[0], t[1]), _mm256_unpackhi_epi64(t[0], t[1]));
  const __m256i b = _mm256_add_epi16(_mm256_unpacklo_epi64(t[2], t[3]), _mm256_unpackhi_epi64(t[2], t[3]));
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i sa = _mm256_madd_epi16(a, ones), sb = _mm256_madd_epi16(b, ones);  // per half [Σp0 .. Σp3]
  lo = _mm256_permute2x128_si256(sa, sb, 0x20);
  hi = _mm256_permute2x128_si256(sa, sb, 0x31);
}

// Eight 16-lane int16 vectors -> int32 lane j = Σ of p[j]'s 16 lanes (the halves above added; same bound):
// 23 ops where vpmaddwd per vector and sum_lanes8_avx2 take 29.
static inline __m256i sum_lanes8_i16_avx2(const __m256i* p) {
  __m256i lo, hi;
  sum_halves8_i16_avx2(p, lo, hi);
  return _mm256_add_epi32(lo, hi);
}

// Partials 0-7, 8-15, 16-23, 24-31 in a0..a3. Tree: s=16: (a0+a2, a1+a3); s=8: sum of those;
// then s=4, 2, 1 inside the 8 lanes.
static inline float reduce_partials32_avx2(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 s16lo = _mm256_add_ps(a0, a2);  // p[i] + p[i+16], i = 0..7
  const __m256 s16hi = _mm256_add_ps(a1, a3);  // i = 8..15
  return reduce_lanes8_avx2(_mm256_add_ps(s16lo, s16hi));  // s8: p[i] + p[i+8], i = 0..7
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
