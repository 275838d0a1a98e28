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

}  // namespace dsv4::cpu
