// backend/cpu/vec_ops_avx2.cpp — fma_axpy and weighted_rows with 8-lane FMA (elementwise: same bits
// as scalar).
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "backend/cpu/vec_ops.h"

namespace dsv4::cpu {

void fma_axpy_avx2(float* y, const float* x, float a, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

// Columns in blocks of 16 (2 ymm, masked at the end), heads in blocks of 4: 8 accumulators, and per
// row 2 loads and 4 broadcasts for 8 fmas (16 ymm registers leave no room for 4 × 4). Each element's
// fmas stay in row order, starting from y: fma_axpy's sequence.
template <int HB>
static void weighted_block(float* y, int64_t y_stride, const float* const* rows, int64_t nk, const float* w,
                           int64_t c0, const __m256i (&m)[2]) {
  __m256 acc[HB][2];
  for (int h = 0; h < HB; ++h)
    for (int i = 0; i < 2; ++i) acc[h][i] = _mm256_maskload_ps(y + h * y_stride + c0 + 8 * i, m[i]);
  for (int64_t j = 0; j < nk; ++j) {
    __m256 r[2];
    for (int i = 0; i < 2; ++i) r[i] = _mm256_maskload_ps(rows[j] + c0 + 8 * i, m[i]);
    for (int h = 0; h < HB; ++h) {
      const __m256 wh = _mm256_broadcast_ss(w + h * nk + j);
      for (int i = 0; i < 2; ++i) acc[h][i] = _mm256_fmadd_ps(wh, r[i], acc[h][i]);
    }
  }
  for (int h = 0; h < HB; ++h)
    for (int i = 0; i < 2; ++i) _mm256_maskstore_ps(y + h * y_stride + c0 + 8 * i, m[i], acc[h][i]);
}

void weighted_rows_avx2(float* y, int64_t y_stride, int64_t H, const float* const* rows, int64_t nk, const float* w,
                        int64_t d) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t c0 = 0; c0 < d; c0 += 16) {
    __m256i m[2];
    for (int i = 0; i < 2; ++i) {
      const int64_t left = d - c0 - 8 * i;
      const int live = left >= 8 ? 8 : left <= 0 ? 0 : static_cast<int>(left);
      m[i] = _mm256_cmpgt_epi32(_mm256_set1_epi32(live), lane);  // lanes < live: all ones
    }
    int64_t h = 0;
    for (; h + 4 <= H; h += 4) weighted_block<4>(y + h * y_stride, y_stride, rows, nk, w + h * nk, c0, m);
    for (; h < H; ++h) weighted_block<1>(y + h * y_stride, y_stride, rows, nk, w + h * nk, c0, m);
  }
}

}  // namespace dsv4::cpu
