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

// det::exp on 16 lanes, operation for operation (numerics/det_math.h): the same range reduction, Horner
// polynomial, two-step 2^k scaling (k / 2 truncating toward zero) and the NaN / overflow / underflow
// cases.
static inline __m512 det_exp16(__m512 x) {
  const __m512 shifter = _mm512_set1_ps(12582912.0f);
  const __m512 kf = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269502f)), shifter), shifter);
  __m512 r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(0.693145752f), x);  // fma(−kf, c, x)
  r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(1.42860677e-06f), r);
  __m512 p = _mm512_set1_ps(1.98412698e-04f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.38888889e-03f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.33333333e-03f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.16666667e-02f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.66666667e-01f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i k = _mm512_cvttps_epi32(kf);
  const __m512i k1 = _mm512_srai_epi32(_mm512_add_epi32(k, _mm512_srli_epi32(k, 31)), 1);  // k / 2 in C
  const __m512i k2 = _mm512_sub_epi32(k, k1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k1, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k2, bias), 23));
  __m512 e = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.7228394f), _CMP_GT_OQ),
                         _mm512_set1_ps(__builtin_inff()));
  e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-103.972084f), _CMP_LT_OQ), _mm512_setzero_ps());
  return _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

void swiglu_clamp_avx512(const float* g, const float* u, int64_t n, float limit, float* h) {
  const __m512 lim = _mm512_set1_ps(limit), neg = _mm512_set1_ps(-limit), one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    // _mm512_min_ps(a, b) = a < b ? a : b, so (limit, g) is std::min(g, limit) (NaN g passes through).
    const __m512 gi = _mm512_min_ps(lim, _mm512_maskz_loadu_ps(m, g + i));
    const __m512 ui = _mm512_min_ps(lim, _mm512_max_ps(neg, _mm512_maskz_loadu_ps(m, u + i)));
    const __m512 sig = _mm512_div_ps(one, _mm512_add_ps(one, det_exp16(_mm512_xor_ps(gi, _mm512_set1_ps(-0.0f)))));
    _mm512_mask_storeu_ps(h + i, m, _mm512_mul_ps(_mm512_mul_ps(gi, sig), ui));
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
