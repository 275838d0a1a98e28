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

namespace dsv4::cpu {

uint64_t read_stream_avx2(const uint8_t* p, int64_t bytes) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 128 <= bytes; i += 128) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), s);
  return out[0] ^ out[1] ^ out[2] ^ out[3];
}

}  // namespace dsv4::cpu
