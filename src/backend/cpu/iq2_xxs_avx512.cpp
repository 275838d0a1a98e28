// backend/cpu/iq2_xxs_avx512.cpp — IQ2_XXS x Q8_K vec_dot, AVX-512 (F/BW/VL/DQ).
//
// Accumulation order = iq2_xxs.h, bit-identical to iq2_xxs_vec_dot_scalar: sixteen consecutive
// super-blocks 16t..16t+15 give one vector of exact int32 dots (lane j = block 16t+j); converted,
// scaled by ((d_w * d_x) * (float)isum) * 0.125f and added into acc[t % 2] (acc[0] = partials 0-15,
// acc[1] = partials 16-31); a short last chunk adds only its valid lanes. Reduction: acc0 + acc1
// (s = 16), then 256-bit halves (s = 8), 128 (s = 4), 64 (s = 2), 32 (s = 1) — Partials32's tree.
//
// Integer dot (exact) per 64 weights (two groups): the eight grid entries are eight 64-bit loads; the sign bytes ksigns[s] are computed in-register from the 7-bit indices (spread to bytes,
// parity folded into bit 7) and used as a byte mask k; vpmaddubsw(g, q) − 2·vpmaddubsw(k ? g : 0, q)
// = exact int16 pair sums (q8 = −128 exact); vpmaddwd with (2·ls + 1) per group -> int32.
#include <immintrin.h>

#include "backend/cpu/iq2_xxs.h"
#include "backend/cpu/iq2_xxs_tables.h"
#include "backend/cpu/quant.h"

namespace dsv4::cpu {
namespace {

inline __m512i block_dot(const BlockIq2Xxs& w, const int8_t* q8) {
  const __m512i qsv = _mm512_loadu_si512(w.qs);  // qword g = a0_g | a1_g << 32
  // Grid entries: eight 64-bit loads per 64 weights (faster than vpgatherqq on Zen 4).
  const uint8_t* idx = reinterpret_cast<const uint8_t*>(w.qs);  // group g: bytes 8g..8g+3
  const uint64_t* grid = iq2xxs_grid;
  __m512i g[4];
  for (int i = 0; i < 4; ++i) {
    const uint8_t* p = idx + 16 * i;
    const __m256i lo = _mm256_set_epi64x(static_cast<long long>(grid[p[3]]), static_cast<long long>(grid[p[2]]),
                                         static_cast<long long>(grid[p[1]]), static_cast<long long>(grid[p[0]]));
    const __m256i hi = _mm256_set_epi64x(static_cast<long long>(grid[p[11]]), static_cast<long long>(grid[p[10]]),
                                         static_cast<long long>(grid[p[9]]), static_cast<long long>(grid[p[8]]));
    g[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
  // Sign bytes: a1 in the low dword of each qword (high dword 0).
  const __m512i a1 = _mm512_srli_epi64(qsv, 32);
  __m512i x = _mm512_and_si512(a1, _mm512_set1_epi32(0x7f));
  x = _mm512_ternarylogic_epi32(x, _mm512_slli_epi32(a1, 1), _mm512_set1_epi32(0x7f00), 0xf8);  // x | (b & c)
  x = _mm512_ternarylogic_epi32(x, _mm512_slli_epi32(a1, 2), _mm512_set1_epi32(0x7f0000), 0xf8);
  x = _mm512_ternarylogic_epi32(x, _mm512_slli_epi32(a1, 3), _mm512_set1_epi32(0x7f000000), 0xf8);
  __m512i par = _mm512_xor_si512(x, _mm512_srli_epi32(x, 4));
  par = _mm512_xor_si512(par, _mm512_srli_epi32(par, 2));
  par = _mm512_xor_si512(par, _mm512_srli_epi32(par, 1));
  const __m512i sb = _mm512_ternarylogic_epi32(x, _mm512_slli_epi32(par, 7), _mm512_set1_epi32(0x80808080), 0xf8);
  const __m256i signs = _mm512_cvtepi64_epi32(sb);  // dword g = ksigns bytes of group g
  // Scales (2·ls + 1) in both words of the low dword of each qword.
  const __m512i ls = _mm512_or_si512(_mm512_slli_epi64(_mm512_srli_epi64(qsv, 60), 1), _mm512_set1_epi64(1));
  const __m512i sw = _mm512_or_si512(ls, _mm512_slli_epi64(ls, 16));
  __m512i acc = _mm512_setzero_si512();
  for (int i = 0; i < 4; ++i) {
    const __mmask64 k = _cvtu64_mask64(static_cast<unsigned long long>(
        i == 0 ? _mm256_extract_epi64(signs, 0)
               : i == 1 ? _mm256_extract_epi64(signs, 1) : i == 2 ? _mm256_extract_epi64(signs, 2)
                                                                  : _mm256_extract_epi64(signs, 3)));
    const __m512i sidx = _mm512_inserti64x4(_mm512_set1_epi32(4 * i), _mm256_set1_epi32(4 * i + 2), 1);
    const __m512i sc = _mm512_permutexvar_epi32(sidx, sw);
    const __m512i q = _mm512_loadu_si512(q8 + 64 * i);
    const __m512i t1 = _mm512_maddubs_epi16(g[i], q);
    const __m512i t2 = _mm512_maddubs_epi16(_mm512_maskz_mov_epi8(k, g[i]), q);
    const __m512i d = _mm512_sub_epi16(_mm512_sub_epi16(t1, t2), t2);
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(d, sc));
  }
  return acc;
}

// Lane j = exact int dot of block j for the count (<= 16) valid blocks, 0 elsewhere.
inline __m512i chunk_isums(const BlockIq2Xxs* w, const BlockQ8_K* x, int count) {
  __m512i t[8];
  for (int k = 0; k < 8; ++k) {
    const __m512i p0 = 2 * k < count ? block_dot(w[2 * k], x[2 * k].qs) : _mm512_setzero_si512();
    const __m512i p1 = 2 * k + 1 < count ? block_dot(w[2 * k + 1], x[2 * k + 1].qs) : _mm512_setzero_si512();
    t[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(p0, p1), _mm512_unpackhi_epi32(p0, p1));
  }
  __m512i u[4];  // u[k] 128-bit chunk c = chunk-c sums of blocks 4k..4k+3
  for (int k = 0; k < 4; ++k)
    u[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * k], t[2 * k + 1]), _mm512_unpackhi_epi64(t[2 * k], t[2 * k + 1]));
  const __m512i w01 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i w23 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(w01, w23, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(w01, w23, _MM_SHUFFLE(3, 1, 3, 1)));
}

}  // namespace

float iq2_xxs_vec_dot_avx512(int64_t n, const void* w, const void* act) {
  const auto* wb = static_cast<const BlockIq2Xxs*>(w);
  const auto* xb = static_cast<const BlockQ8_K*>(act);
  const int64_t nb = n / 256;
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i widx = _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(sizeof(BlockIq2Xxs))));
  const __m512i xidx = _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(sizeof(BlockQ8_K))));
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t t = 0;
  for (int64_t b = 0; b < nb; b += 16, ++t) {
    const int count = nb - b >= 16 ? 16 : static_cast<int>(nb - b);
    const __mmask16 valid = static_cast<__mmask16>((1u << count) - 1u);
    // A 4-byte gather at a block's start (d, qs[0]) stays inside the block; keep the low 16 bits.
    const __m512i dbits = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, widx, &wb[b].d, 1);
    const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dbits));
    const __m512 dx = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, xidx, &xb[b].d, 1);
    const __m512 isum = _mm512_cvtepi32_ps(chunk_isums(wb + b, xb + b, count));
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dw, dx), isum), _mm512_set1_ps(0.125f));
    acc[t & 1] = _mm512_mask_add_ps(acc[t & 1], valid, acc[t & 1], v);
  }
  const __m512 s16 = _mm512_add_ps(acc[0], acc[1]);
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(s16), _mm512_extractf32x8_ps(s16, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

}  // namespace dsv4::cpu
