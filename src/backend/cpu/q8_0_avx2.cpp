// backend/cpu/q8_0_avx2.cpp — AVX2 Q8_0 x Q8_0Act vec_dot, bit-identical to vec_dot_q8_0_scalar
// (order written at its definition in q8_0.cpp).
//
// Blocks go in chunks of 8 (chunk c = blocks 8c .. 8c+7, lane j = block 8c + j) feeding accumulator
// c % 4 (partials 0-7, 8-15, 16-23, 24-31, exactly b % 32).
//   integer dot: both operands sign-extended to int16, vpmaddwd -> 8 int32 per block (exact for every
//     int8 value, -128 included), then a phaddd transpose turns 8 blocks into one vector (lane j =
//     isum of block j).
//   scale: (f16->f32 d_w * d_x) * (float)isum, blended in for tails (lanes past the row unchanged).
//   final: (acc0 + acc2) + (acc1 + acc3)  (s = 16, s = 8), then fold 128/64/32-bit halves.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/q8_0.h"
#include "backend/cpu/simd_reduce.h"

namespace dsv4::cpu {
namespace {

constexpr int64_t kWBytes = 34;
constexpr int64_t kABytes = 36;

inline __m256i block_dot(const uint8_t* w, const uint8_t* a) {
  const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)));
  const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 18)));
  const __m256i x0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 4)));
  const __m256i x1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 20)));
  return _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));
}

// Eight 8-lane int32 vectors (one per block) -> lane j = Σ of block j's lanes.
inline __m256i reduce8x8(const __m256i b[8]) {
  const __m256i s01 = _mm256_hadd_epi32(b[0], b[1]);
  const __m256i s23 = _mm256_hadd_epi32(b[2], b[3]);
  const __m256i s45 = _mm256_hadd_epi32(b[4], b[5]);
  const __m256i s67 = _mm256_hadd_epi32(b[6], b[7]);
  const __m256i s0123 = _mm256_hadd_epi32(s01, s23);  // 128-bit lane 0: low-half sums of b0..b3; lane 1: high
  const __m256i s4567 = _mm256_hadd_epi32(s45, s67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(s0123, s4567, 0x20),
                          _mm256_permute2x128_si256(s0123, s4567, 0x31));
}

inline float reduce_partials(const __m256 acc[4]) {
  return reduce_partials32_avx2(acc[0], acc[1], acc[2], acc[3]);
}

}  // namespace

float vec_dot_q8_0_avx2(int64_t n, const void* w, const void* act) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(act);
  const int64_t nb = n / 32;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t c = 0; c * 8 < nb; ++c) {
    const int64_t b0 = c * 8;
    const uint8_t* wc = wp + b0 * kWBytes;
    const uint8_t* ac = ap + b0 * kABytes;
    const int cnt = static_cast<int>(std::min<int64_t>(8, nb - b0));
    __m256i v[8];
    alignas(16) uint16_t dwh[8] = {};
    alignas(32) float dxa[8] = {};
    for (int i = 0; i < cnt; ++i) {
      v[i] = block_dot(wc + i * kWBytes, ac + i * kABytes);
      std::memcpy(&dwh[i], wc + i * kWBytes, 2);
      std::memcpy(&dxa[i], ac + i * kABytes, 4);
    }
    for (int i = cnt; i < 8; ++i) v[i] = _mm256_setzero_si256();
    const __m256i isum = reduce8x8(v);
    const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dwh)));
    const __m256 dx = _mm256_load_ps(dxa);
    const __m256 val = _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum));
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

}  // namespace dsv4::cpu
