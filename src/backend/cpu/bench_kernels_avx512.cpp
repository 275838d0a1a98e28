// backend/cpu/bench_kernels_avx512.cpp — FMA peak probe: 12 independent 16-lane fma chains.
#include <immintrin.h>

#include "backend/cpu/bench_kernels.h"

namespace dsv4::cpu {

double fma_chains_avx512(int64_t iters, float* sink) {
  __m512 a[12];
  for (int k = 0; k < 12; ++k) a[k] = _mm512_set1_ps(1.0f + 0.001f * static_cast<float>(k));
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < 12; ++k) a[k] = _mm512_fmadd_ps(a[k], m, c);
  __m512 s = a[0];
  for (int k = 1; k < 12; ++k) s = _mm512_add_ps(s, a[k]);
  _mm512_storeu_ps(sink, s);
  return static_cast<double>(iters) * 12 * 16 * 2;
}

}  // namespace dsv4::cpu

namespace dsv4::cpu {

uint64_t read_stream_avx512(const uint8_t* p, int64_t bytes) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 256 <= bytes; i += 256) {
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 192));
  }
  const __m512i s = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
  return static_cast<uint64_t>(_mm512_reduce_add_epi64(s));
}

}  // namespace dsv4::cpu
