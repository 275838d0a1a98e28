// backend/cpu/float_types_avx512.cpp — F32/F16/BF16 dots, AVX-512 (order: see float_types.h).
// Two 16-lane accumulators hold partials 0-15 and 16-31; each step of 32 elements is one fma per
// register; the tail uses masked loads and mask3 fma so lanes past n keep their value.
#include <immintrin.h>

#include "backend/cpu/float_types.h"
#include "backend/cpu/simd_reduce.h"
#include "backend/cpu/stream_prefetch.h"

namespace dsv4::cpu {
namespace {

struct LoadF32 {
  static constexpr int kBytes = 4;
  static __m512 full(const void* p, int64_t i) { return _mm512_loadu_ps(static_cast<const float*>(p) + i); }
  static __m512 part(const void* p, int64_t i, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(p) + i);
  }
};
struct LoadF16 {
  static constexpr int kBytes = 2;
  static __m512 full(const void* p, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i)));
  }
  static __m512 part(const void* p, int64_t i, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i));
  }
};
struct LoadBF16 {
  static constexpr int kBytes = 2;
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 full(const void* p, int64_t i) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i)));
  }
  static __m512 part(const void* p, int64_t i, __mmask16 m) {
    return widen(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i));
  }
};

template <typename L>
float vec_dot(int64_t n, const void* w, const void* xv) {
  const float* x = static_cast<const float*>(xv);
  __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    prefetch_ahead(static_cast<const char*>(w) + L::kBytes * i, 32 * L::kBytes);  // stream_prefetch.h
    lo = _mm512_fmadd_ps(L::full(w, i), _mm512_loadu_ps(x + i), lo);
    hi = _mm512_fmadd_ps(L::full(w, i + 16), _mm512_loadu_ps(x + i + 16), hi);
  }
  if (i < n) {
    const int64_t r = n - i;
    const __mmask16 mlo = r >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << r) - 1);
    const __mmask16 mhi = r > 16 ? static_cast<__mmask16>((1u << (r - 16)) - 1) : static_cast<__mmask16>(0);
    lo = _mm512_mask3_fmadd_ps(L::part(w, i, mlo), _mm512_maskz_loadu_ps(mlo, x + i), lo, mlo);
    if (mhi) hi = _mm512_mask3_fmadd_ps(L::part(w, i + 16, mhi), _mm512_maskz_loadu_ps(mhi, x + i + 16), hi, mhi);
  }
  return reduce_partials32_avx512(lo, hi);
}

}  // namespace

float vec_dot_f32_avx512(int64_t n, const void* w, const void* x) { return vec_dot<LoadF32>(n, w, x); }
float vec_dot_f16_avx512(int64_t n, const void* w, const void* x) { return vec_dot<LoadF16>(n, w, x); }
float vec_dot_bf16_avx512(int64_t n, const void* w, const void* x) { return vec_dot<LoadBF16>(n, w, x); }

}  // namespace dsv4::cpu
