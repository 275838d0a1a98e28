// backend/cpu/vec_ops_avx2.cpp — fma_axpy with 8-lane FMA (elementwise: same bits as scalar).
#include <immintrin.h>

#include <cmath>

#include "backend/cpu/vec_ops.h"

namespace dsv4::cpu {

void fma_axpy_avx2(float* y, const float* x, float a, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

}  // namespace dsv4::cpu
