// backend/cpu/vec_ops_avx512.cpp — fma_axpy with 16-lane FMA and a masked tail (same bits as scalar).
#include <immintrin.h>

#include "backend/cpu/vec_ops.h"

namespace dsv4::cpu {

void fma_axpy_avx512(float* y, const float* x, float a, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

// Columns in blocks of 64 (4 zmm, masked at the end), heads in blocks of 4: 16 accumulators, and per
// row 4 loads and 4 broadcasts for 16 fmas. Each element's fmas stay in row order.
template <int HB>
static void weighted_block(float* y, int64_t y_stride, const float* const* rows, int64_t nk, const float* w,
                           int64_t c0, const __mmask16 (&m)[4]) {
  __m512 acc[HB][4];
  for (int h = 0; h < HB; ++h)
    for (int i = 0; i < 4; ++i) acc[h][i] = _mm512_maskz_loadu_ps(m[i], y + h * y_stride + c0 + 16 * i);
  for (int64_t j = 0; j < nk; ++j) {
    __m512 r[4];
    for (int i = 0; i < 4; ++i) r[i] = _mm512_maskz_loadu_ps(m[i], rows[j] + c0 + 16 * i);
    for (int h = 0; h < HB; ++h) {
      const __m512 wh = _mm512_set1_ps(w[h * nk + j]);
      for (int i = 0; i < 4; ++i) acc[h][i] = _mm512_fmadd_ps(wh, r[i], acc[h][i]);
    }
  }
  for (int h = 0; h < HB; ++h)
    for (int i = 0; i < 4; ++i) _mm512_mask_storeu_ps(y + h * y_stride + c0 + 16 * i, m[i], acc[h][i]);
}

void weighted_rows_avx512(float* y, int64_t y_stride, int64_t H, const float* const* rows, int64_t nk, const float* w,
                          int64_t d) {
  for (int64_t c0 = 0; c0 < d; c0 += 64) {
    __mmask16 m[4];
    for (int i = 0; i < 4; ++i) {
      const int64_t left = d - c0 - 16 * i;
      m[i] = left >= 16 ? static_cast<__mmask16>(0xffff) : left <= 0 ? static_cast<__mmask16>(0) : static_cast<__mmask16>((1u << left) - 1);
    }
    int64_t h = 0;
    for (; h + 4 <= H; h += 4) weighted_block<4>(y + h * y_stride, y_stride, rows, nk, w + h * nk, c0, m);
    for (; h < H; ++h) weighted_block<1>(y + h * y_stride, y_stride, rows, nk, w + h * nk, c0, m);
  }
}

}  // namespace dsv4::cpu
