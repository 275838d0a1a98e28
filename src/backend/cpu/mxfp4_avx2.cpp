// backend/cpu/mxfp4_avx2.cpp — MXFP4 x Q8_0 vec_dot, AVX2.
//
// Accumulation order = mxfp4.h, bit-identical to mxfp4_vec_dot_scalar: eight consecutive blocks
// 8t..8t+7 give one vector of exact int32 dots (lane j = block 8t+j); converted, scaled by
// (e8m0_half(e) * d_x) * (float)isum and added into acc[t % 4] (acc[k] = partials 8k..8k+7); a short
// last chunk adds only its valid lanes. Reduction: (acc0 + acc2, acc1 + acc3) (s = 16), their sum
// (s = 8), 128-bit halves (s = 4), then s = 2 and s = 1 — Partials32::reduce's tree.
//
// Integer dot (exact): nibbles -> int8 kvalues with vpshufb; vpmaddubsw(q ^ 0x80, kv) − vpmaddubsw(0x80,
// kv) gives exact int16 pair sums Σ q·kv (|.| <= 6120 before the subtraction, no saturation), then
// vpmaddwd with ones -> int32.
#include <immintrin.h>

#include "backend/cpu/mxfp4.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/simd_reduce.h"

namespace dsv4::cpu {
namespace {

struct Consts {
  __m256i tbl, low4, bias, ones16;
};

// 8 int32 partial dots of one block.
inline __m256i block_dot(const Consts& c, const BlockMxfp4& w, const BlockQ8_0Act& x) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.qs));
  const __m128i lo = _mm_and_si128(raw, _mm256_castsi256_si128(c.low4));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm256_castsi256_si128(c.low4));
  const __m256i nib = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
  const __m256i kv = _mm256_shuffle_epi8(c.tbl, nib);
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));
  const __m256i p1 = _mm256_maddubs_epi16(_mm256_xor_si256(q, c.bias), kv);
  const __m256i p2 = _mm256_maddubs_epi16(c.bias, kv);
  return _mm256_madd_epi16(_mm256_sub_epi16(p1, p2), c.ones16);
}

// Lane j = exact int dot of block j for the count (<= 8) valid blocks, 0 elsewhere.
inline __m256i chunk_isums(const Consts& c, const BlockMxfp4* w, const BlockQ8_0Act* x, int count) {
  __m256i p[8];
  for (int k = 0; k < 8; ++k) p[k] = k < count ? block_dot(c, w[k], x[k]) : _mm256_setzero_si256();
  const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]);
  const __m256i h23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]);
  const __m256i h67 = _mm256_hadd_epi32(p[6], p[7]);
  const __m256i a = _mm256_hadd_epi32(h01, h23);  // [0,1,2,3 low-half sums | 0,1,2,3 high-half sums]
  const __m256i b = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

}  // namespace

float mxfp4_vec_dot_avx2(int64_t n, const void* w, const void* act) {
  const auto* wb = static_cast<const BlockMxfp4*>(w);
  const auto* xb = static_cast<const BlockQ8_0Act*>(act);
  const int64_t nb = n / 32;
  Consts c;
  c.tbl = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
  c.low4 = _mm256_set1_epi8(0x0f);
  c.bias = _mm256_set1_epi8(static_cast<char>(0x80));
  c.ones16 = _mm256_set1_epi16(1);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t t = 0;
  for (int64_t b = 0; b < nb; b += 8, ++t) {
    const int count = nb - b >= 8 ? 8 : static_cast<int>(nb - b);
    alignas(32) float sc[8] = {};
    for (int j = 0; j < count; ++j) sc[j] = e8m0_half(wb[b + j].e) * xb[b + j].d;
    const __m256 isum = _mm256_cvtepi32_ps(chunk_isums(c, wb + b, xb + b, count));
    const __m256 v = _mm256_mul_ps(_mm256_load_ps(sc), isum);
    const __m256 sum = _mm256_add_ps(acc[t & 3], v);
    if (count == 8) {
      acc[t & 3] = sum;
    } else {
      const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      const __m256 valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(count), lane));
      acc[t & 3] = _mm256_blendv_ps(acc[t & 3], sum, valid);
    }
  }
  return reduce_partials32_avx2(acc[0], acc[1], acc[2], acc[3]);
}

}  // namespace dsv4::cpu
