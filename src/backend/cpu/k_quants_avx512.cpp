// backend/cpu/k_quants_avx512.cpp — AVX-512 (F/BW/VL/DQ/VNNI) Q2_K / Q4_K x Q8_K vec_dot, bit-identical
// to the scalar references (orders written at their definitions in k_quants.cpp).
//
// Per super-block: vpmaddubsw (unsigned quants x signed q8 -> exact int16 pair sums, |pair| ≤ 3840)
// then vpdpwssd with the sub-block scales (int16, broadcast per 128-bit lane by vpshufb) accumulates
// isum_sc into two independent 16 x int32 chains (vpdpwssd latency), summed at the end; isum_m is
// vpmaddwd(mins, bsums). Both are folded to 8 lanes and packed into one vector [isum_sc | isum_m].
// Super-blocks go in chunks of 16 (chunk c = super-blocks 16c .. 16c+15 -> accumulator c % 2, lane j
// = super-block 16c + j, i.e. partial b % 32); two transposing reductions turn the 16 packed vectors
// into isum_sc and isum_m vectors, then v = d_x·(d·isum_sc − dmin·isum_m) lane-wise (masked tails),
// and the final tree is acc0 + acc1 then halving folds.
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/k_quants.h"
#include "backend/cpu/quant.h"

namespace dsv4::cpu {
namespace {

constexpr int64_t kABytes = 292;  // sizeof(BlockQ8_K): d at 0, qs at 4, bsums at 260

// Eight vectors, vector i holding items 2i (lanes 0-7) and 2i+1 (lanes 8-15) -> lane j = Σ of item j.
inline __m512i reduce8x8(const __m512i v[8]) {
  const __m512i l1_lo = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
  const __m512i l1_hi = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  const __m512i l2_lo = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29);
  const __m512i l2_hi = _mm512_setr_epi32(2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  const __m512i l3_lo = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i l3_hi = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  __m512i w[4];
  for (int i = 0; i < 4; ++i)
    w[i] = _mm512_add_epi32(_mm512_permutex2var_epi32(v[2 * i], l1_lo, v[2 * i + 1]),
                            _mm512_permutex2var_epi32(v[2 * i], l1_hi, v[2 * i + 1]));
  __m512i x[2];
  for (int i = 0; i < 2; ++i)
    x[i] = _mm512_add_epi32(_mm512_permutex2var_epi32(w[2 * i], l2_lo, w[2 * i + 1]),
                            _mm512_permutex2var_epi32(w[2 * i], l2_hi, w[2 * i + 1]));
  return _mm512_add_epi32(_mm512_permutex2var_epi32(x[0], l3_lo, x[1]), _mm512_permutex2var_epi32(x[0], l3_hi, x[1]));
}

inline float reduce_partials(__m512 acc0, __m512 acc1) {
  const __m512 s16 = _mm512_add_ps(acc0, acc1);
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(s16), _mm512_extractf32x8_ps(s16, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
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

inline __m512i q2_k_super_block(const uint8_t* w, const uint8_t* a) {
  const __m128i scb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  const __m512i scs = _mm512_broadcast_i32x4(_mm_and_si128(scb, m4));
  const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(scb, 4), m4));
  const __m512i m3 = _mm512_set1_epi8(3);
  const uint8_t* aq = a + 4;
  __m512i acc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};  // two chains (latency)
  for (int p = 0; p < 4; ++p) {
    // Elements 64p .. 64p+63: qs half h = p / 2, planes j0 = 2·(p % 2) (first 32) and j0 + 1; the
    // 128-bit lane i of the products is sub-block 4p + i.
    const int h = p / 2, j0 = 2 * (p % 2);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * h)));
    const __m512i shift = _mm512_setr_epi64(2 * j0, 2 * j0, 2 * j0, 2 * j0, 2 * j0 + 2, 2 * j0 + 2, 2 * j0 + 2, 2 * j0 + 2);
    const __m512i q = _mm512_and_si512(_mm512_srlv_epi64(qh, shift), m3);
    const __m512i x = _mm512_loadu_si512(aq + 64 * p);
    const __m512i scales = _mm512_shuffle_epi8(scs, bcast16(4 * p, 4 * p + 1, 4 * p + 2, 4 * p + 3));
    acc[p & 1] = _mm512_dpwssd_epi32(acc[p & 1], _mm512_maddubs_epi16(q, x), scales);
  }
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

// kWBytes: weight block size; kDOffset: byte offset of (f16 d, f16 dmin) in the block.
template <int64_t kWBytes, int kDOffset, __m512i (*SuperBlock)(const uint8_t*, const uint8_t*)>
float k_quant_dot(int64_t n, const void* w, const void* act) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(act);
  const int64_t nb = n / 256;
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i idx_w = _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(kWBytes)));
  const __m512i idx_a = _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(kABytes)));
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int64_t c = 0; c * 16 < nb; ++c) {
    const int64_t b0 = c * 16;
    const uint8_t* wc = wp + b0 * kWBytes;
    const uint8_t* ac = ap + b0 * kABytes;
    const int cnt = static_cast<int>(std::min<int64_t>(16, nb - b0));
    __m512i v[16];
    for (int i = 0; i < cnt; ++i) v[i] = SuperBlock(wc + i * kWBytes, ac + i * kABytes);
    for (int i = cnt; i < 16; ++i) v[i] = _mm512_setzero_si512();
    const __m512i ya = reduce8x8(v);      // lane 2j: isum_sc of j, 2j+1: isum_m of j (j < 8)
    const __m512i yb = reduce8x8(v + 8);  // same for super-blocks 8..15
    const __m512i isc = _mm512_permutex2var_epi32(ya, even, yb);
    const __m512i ism = _mm512_permutex2var_epi32(ya, odd, yb);
    const __mmask16 m = static_cast<__mmask16>(cnt == 16 ? 0xffff : (1u << cnt) - 1);
    const __m512i dd = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx_w, wc + kDOffset, 1);
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
    const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
    const __m512 dx = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx_a, ac, 1);
    const __m512 t_sc = _mm512_mul_ps(d, _mm512_cvtepi32_ps(isc));
    const __m512 t_m = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(ism));
    const __m512 val = _mm512_mul_ps(dx, _mm512_sub_ps(t_sc, t_m));
    acc[c & 1] = _mm512_mask_add_ps(acc[c & 1], m, acc[c & 1], val);
  }
  return reduce_partials(acc[0], acc[1]);
}

}  // namespace

float vec_dot_q2_k_avx512(int64_t n, const void* w, const void* act) {
  return k_quant_dot<84, 80, q2_k_super_block>(n, w, act);
}

float vec_dot_q4_k_avx512(int64_t n, const void* w, const void* act) {
  return k_quant_dot<144, 0, q4_k_super_block>(n, w, act);
}

}  // namespace dsv4::cpu
