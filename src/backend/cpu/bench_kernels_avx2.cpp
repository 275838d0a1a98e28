// backend/cpu/bench_kernels_avx2.cpp — FMA peak probe: 12 independent 8-lane fma chains.
#include <immintrin.h>

#include "backend/cpu/bench_kernels.h"

namespace dsv4::cpu {

double fma_chains_avx2(int64_t iters, float* sink) {
  __m256 a[12];
  for (int k = 0; k < 12; ++k) a[k] = _mm256_set1_ps(1.0f + 0.001f * static_cast<float>(k));
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < 12; ++k) a[k] = _mm256_fmadd_ps(a[k], m, c);
  __m256 s = a[0];
  for (int k = 1; k < 12; ++k) s = _mm256_add_ps(s, a[k]);
  _mm256_storeu_ps(sink, s);
  return static_cast<double>(iters) * 12 * 8 * 2;
}

}  // namespace dsv4::cpu
