// backend/cpu/vec_ops_avx2.cpp — fma_axpy, swiglu_clamp and weighted_rows with 8-lane FMA (elementwise:
// same bits as scalar).
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "backend/cpu/vec_ops.h"
#include "numerics/det_math.h"

namespace dsv4::cpu {

void fma_axpy_avx2(float* y, const float* x, float a, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

// det::exp on 8 lanes, operation for operation (numerics/det_math.h; vec_ops_avx512.cpp's det_exp16 with
// blends for its masks): the same range reduction, Horner polynomial, two-step 2^k scaling (k / 2
// truncating toward zero) and the NaN / overflow / underflow cases.
static inline __m256 det_exp8(__m256 x) {
  const __m256 shifter = _mm256_set1_ps(12582912.0f);
  const __m256 kf = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269502f)), shifter), shifter);
  __m256 r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(0.693145752f), x);  // fma(−kf, c, x)
  r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(1.42860677e-06f), r);
  __m256 p = _mm256_set1_ps(1.98412698e-04f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.38888889e-03f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.33333333e-03f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.16666667e-02f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.66666667e-01f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i k = _mm256_cvttps_epi32(kf);
  const __m256i k1 = _mm256_srai_epi32(_mm256_add_epi32(k, _mm256_srli_epi32(k, 31)), 1);  // k / 2 in C
  const __m256i k2 = _mm256_sub_epi32(k, k1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
  __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  e = _mm256_blendv_ps(e, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, _mm256_set1_ps(88.7228394f), _CMP_GT_OQ));
  e = _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(-103.972084f), _CMP_LT_OQ));
  return _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

void swiglu_clamp_avx2(const float* g, const float* u, int64_t n, float limit, float* h) {
  const __m256 lim = _mm256_set1_ps(limit), neg = _mm256_set1_ps(-limit), one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    // _mm256_min_ps(a, b) = a < b ? a : b, so (limit, g) is std::min(g, limit) (NaN g passes through).
    const __m256 gi = _mm256_min_ps(lim, _mm256_loadu_ps(g + i));
    const __m256 ui = _mm256_min_ps(lim, _mm256_max_ps(neg, _mm256_loadu_ps(u + i)));
    const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, det_exp8(_mm256_xor_ps(gi, _mm256_set1_ps(-0.0f)))));
    _mm256_storeu_ps(h + i, _mm256_mul_ps(_mm256_mul_ps(gi, sig), ui));
  }
  for (; i < n; ++i) h[i] = det::swiglu_clamp(g[i], u[i], limit);
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
