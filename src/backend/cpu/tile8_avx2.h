// backend/cpu/tile8_avx2.h — the column side of the AVX2 "rows in lanes" matmul tiles (Q8_0 and MXFP4:
// 8 weight rows in the 8 lanes of a vector, up to 16 activation columns per call). A tile decodes a
// block of its 8 rows into A_g (lane r = dword g of row r's 32 signed weights, g < 8) and |A_g|; this
// header turns them into each column's exact int dots (tile8_columns), adds (d_w·d_x)·(float)isum
// into the column's partial b % 32 (tile8_add_block; partials kept in memory, lanes = rows) and folds
// the 32 partials with Partials32's tree elementwise over the rows (tile8_fold): the scalar vec_dot's
// integers, products and additions in its order for every (row, column).
// Include only from *_avx2.cpp files.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/quant.h"  // kMaxTileCols

namespace dsv4::cpu::tile8 {

// Columns xq[0 .. C-1] of one block (xq[c] = the column's 32 Q8_0 quants; lane r of isum[c] = the exact
// int dot of row r and column c): maddubs(|a|, sign(x, a)) = a·x per byte (|a| ≤ 128 unsigned;
// sign(x, a) = ±x or 0 with x ∈ [−127, 127], so negating never wraps). kInt16Sums: the weights are
// small enough (|a| ≤ 12, MXFP4) that the 8 groups' pair sums add up in int16 (≤ 8·2·12·127 < 2^15)
// before one vpmaddwd; otherwise (|a| ≤ 128, Q8_0: pair sums < 2^15 only one at a time) each group
// goes to int32 by vpmaddwd with ones. Named sums and an empty asm per step keep GCC from
// reassociating the products into a tree (which spills them); A and |A| come through opaque
// pointers. C ≤ 8 columns in one pass (8 sums + A_g, |A_g|, ones and temporaries fit the 16 ymm): each
// A_g and |A_g| is loaded once per pass.
static_assert(kMaxTileCols == 8, "block_cols takes up to 8 columns in one pass");
template <int C, bool kInt16Sums>
__attribute__((always_inline)) inline void block_cols(const __m256i* A, const __m256i* Aabs, const uint8_t* const* xq,
                                                      __m256i* isum) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  const auto step = [&](__m256i& s, __m256i a, __m256i aa, const uint8_t* x) {
    int32_t xd;
    std::memcpy(&xd, x, 4);
    const __m256i pairs = _mm256_maddubs_epi16(aa, _mm256_sign_epi8(_mm256_set1_epi32(xd), a));
    s = kInt16Sums ? _mm256_add_epi16(s, pairs) : _mm256_add_epi32(s, _mm256_madd_epi16(pairs, ones));
    __asm__("" : "+x"(s));
  };
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) {
    const __m256i* ap = A + g;
    const __m256i* aap = Aabs + g;
    __asm__("" : "+r"(ap), "+r"(aap));
    const __m256i a = _mm256_load_si256(ap), aa = _mm256_load_si256(aap);
    step(s0, a, aa, xq[0] + 4 * g);
    if (C > 1) step(s1, a, aa, xq[1] + 4 * g);
    if (C > 2) step(s2, a, aa, xq[2] + 4 * g);
    if (C > 3) step(s3, a, aa, xq[3] + 4 * g);
    if (C > 4) step(s4, a, aa, xq[4] + 4 * g);
    if (C > 5) step(s5, a, aa, xq[5] + 4 * g);
    if (C > 6) step(s6, a, aa, xq[6] + 4 * g);
    if (C > 7) step(s7, a, aa, xq[7] + 4 * g);
  }
  const __m256i s[8] = {s0, s1, s2, s3, s4, s5, s6, s7};
  for (int c = 0; c < C; ++c) isum[c] = kInt16Sums ? _mm256_madd_epi16(s[c], ones) : s[c];
}

// All nc columns of one block, in passes of up to 8 (block_cols).
template <bool kInt16Sums>
inline void columns(const __m256i* A, const __m256i* Aabs, const uint8_t* const* xq, int nc, __m256i* isum) {
  for (int c0 = 0; c0 < nc; c0 += 8) {
    switch (std::min(nc - c0, 8)) {
      case 1: block_cols<1, kInt16Sums>(A, Aabs, xq + c0, isum + c0); break;
      case 2: block_cols<2, kInt16Sums>(A, Aabs, xq + c0, isum + c0); break;
      case 3: block_cols<3, kInt16Sums>(A, Aabs, xq + c0, isum + c0); break;
      case 4: block_cols<4, kInt16Sums>(A, Aabs, xq + c0, isum + c0); break;
      case 5: block_cols<5, kInt16Sums>(A, Aabs, xq + c0, isum + c0); break;
      case 6: block_cols<6, kInt16Sums>(A, Aabs, xq + c0, isum + c0); break;
      case 7: block_cols<7, kInt16Sums>(A, Aabs, xq + c0, isum + c0); break;
      default: block_cols<8, kInt16Sums>(A, Aabs, xq + c0, isum + c0); break;
    }
  }
}

// Block b's values of every column into its partial b % 32: part[c][b % 32] += (dw · d_x[c]) ·
// (float)isum[c], with d_x[c] the f32 just before the column's quants (BlockQ8_0Act: d, then qs).
inline void add_block(__m256 dw, const uint8_t* const* xq, const __m256i* isum, int nc, int64_t b, float (*part)[32][8]) {
  for (int c = 0; c < nc; ++c) {
    float dx;
    std::memcpy(&dx, xq[c] - 4, sizeof dx);
    const __m256 v = _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(isum[c]));
    float* p = part[c][b % 32];
    _mm256_store_ps(p, _mm256_add_ps(_mm256_load_ps(p), v));
  }
}

inline void zero_partials(float (*part)[32][8], int nc) {
  for (int c = 0; c < nc; ++c)
    for (int i = 0; i < 32; ++i) _mm256_store_ps(part[c][i], _mm256_setzero_ps());
}

// Partials32's tree over each column's 32 partials (s = 16, 8, …, 1), elementwise over the rows; row r
// of column c to out[c · out_stride + r] for r < nr.
inline void fold(float (*part)[32][8], int nc, int nr, float* out, int64_t out_stride) {
  for (int c = 0; c < nc; ++c) {
    for (int s = 16; s >= 1; s >>= 1)
      for (int i = 0; i < s; ++i)
        _mm256_store_ps(part[c][i], _mm256_add_ps(_mm256_load_ps(part[c][i]), _mm256_load_ps(part[c][i + s])));
    for (int r = 0; r < nr; ++r) out[c * out_stride + r] = part[c][0][r];
  }
}

}  // namespace dsv4::cpu::tile8
