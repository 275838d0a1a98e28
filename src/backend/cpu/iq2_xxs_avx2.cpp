// backend/cpu/iq2_xxs_avx2.cpp — IQ2_XXS x Q8_K vec_dot, AVX2.
//
// Accumulation order = iq2_xxs.h, bit-identical to iq2_xxs_vec_dot_scalar: eight consecutive
// super-blocks 8t..8t+7 give one vector of exact int32 dots (lane j = block 8t+j); converted, scaled by
// ((d_w * d_x) * (float)isum) * 0.125f and added into acc[t % 4] (acc[k] = partials 8k..8k+7); a short
// last chunk adds only its valid lanes. Reduction: (acc0 + acc2, acc1 + acc3) (s = 16), their sum
// (s = 8), 128-bit halves (s = 4), then s = 2 and s = 1 — Partials32::reduce's tree.
//
// Integer dot (exact) per 32-group: grid magnitudes g (u8, <= 43) and byte masks m (0xff = negative,
// from ksigns_mask64); vpmaddubsw(g, q) − 2·vpmaddubsw(g & m, q) = exact int16 pair sums of signed
// grid · q8 (|.| <= 11008, no saturation, q8 = −128 exact); vpmaddwd with (2·ls + 1) -> int32.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/iq2_xxs.h"
#include "backend/cpu/iq2_xxs_tables.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/simd_reduce.h"

namespace dsv4::cpu {
namespace {

// 8 int32 partial sums of one super-block's integer dot.
inline __m256i block_dot(const BlockIq2Xxs& w, const int8_t* q8) {
  const uint64_t* grid = iq2xxs_grid;
  const uint64_t* smask = ksigns_mask64.data();
  __m256i acc = _mm256_setzero_si256();
  for (int g = 0; g < 8; ++g) {
    uint32_t a[2];
    std::memcpy(a, w.qs + 4 * g, 8);
    const __m256i gv = _mm256_set_epi64x(static_cast<long long>(grid[a[0] >> 24]),
                                         static_cast<long long>(grid[(a[0] >> 16) & 0xff]),
                                         static_cast<long long>(grid[(a[0] >> 8) & 0xff]),
                                         static_cast<long long>(grid[a[0] & 0xff]));
    const __m256i m = _mm256_set_epi64x(static_cast<long long>(smask[(a[1] >> 21) & 127]),
                                        static_cast<long long>(smask[(a[1] >> 14) & 127]),
                                        static_cast<long long>(smask[(a[1] >> 7) & 127]),
                                        static_cast<long long>(smask[a[1] & 127]));
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * g));
    const __m256i t1 = _mm256_maddubs_epi16(gv, q);
    const __m256i t2 = _mm256_maddubs_epi16(_mm256_and_si256(gv, m), q);
    const __m256i d = _mm256_sub_epi16(_mm256_sub_epi16(t1, t2), t2);
    const __m256i sc = _mm256_set1_epi16(static_cast<short>(2 * (a[1] >> 28) + 1));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(d, sc));
  }
  return acc;
}

// Lane j = exact int dot of block j for the count (<= 8) valid blocks, 0 elsewhere.
inline __m256i chunk_isums(const BlockIq2Xxs* w, const BlockQ8_K* x, int count) {
  __m256i p[8];
  for (int k = 0; k < 8; ++k) p[k] = k < count ? block_dot(w[k], x[k].qs) : _mm256_setzero_si256();
  const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]);
  const __m256i h23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]);
  const __m256i h67 = _mm256_hadd_epi32(p[6], p[7]);
  const __m256i a = _mm256_hadd_epi32(h01, h23);
  const __m256i b = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

}  // namespace

float iq2_xxs_vec_dot_avx2(int64_t n, const void* w, const void* act) {
  const auto* wb = static_cast<const BlockIq2Xxs*>(w);
  const auto* xb = static_cast<const BlockQ8_K*>(act);
  const int64_t nb = n / 256;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t t = 0;
  for (int64_t b = 0; b < nb; b += 8, ++t) {
    const int count = nb - b >= 8 ? 8 : static_cast<int>(nb - b);
    alignas(16) uint16_t dh[8] = {};
    alignas(32) float dx[8] = {};
    for (int j = 0; j < count; ++j) {
      dh[j] = wb[b + j].d;
      dx[j] = xb[b + j].d;
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dh)));
    const __m256 isum = _mm256_cvtepi32_ps(chunk_isums(wb + b, xb + b, count));
    const __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(dw, _mm256_load_ps(dx)), isum), _mm256_set1_ps(0.125f));
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
