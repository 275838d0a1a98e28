// backend/cpu/float_types_avx2.cpp — F32/F16/BF16 dots, AVX2+FMA+F16C (order: see float_types.h).
// Four 8-lane accumulators hold partials 0-7, 8-15, 16-23, 24-31. The tail (< 32 elements) is
// copied into a zero-padded buffer and each accumulator is updated only in lanes below n (blend).
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/float_types.h"
#include "backend/cpu/simd_reduce.h"

namespace dsv4::cpu {
namespace {

struct LoadF32 {
  static constexpr int kBytes = 4;
  static __m256 load(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
};
struct LoadF16 {
  static constexpr int kBytes = 2;
  static __m256 load(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};
struct LoadBF16 {
  static constexpr int kBytes = 2;
  static __m256 load(const uint8_t* p) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
  }
};

template <typename L>
float vec_dot(int64_t n, const void* wv, const void* xv) {
  const uint8_t* w = static_cast<const uint8_t*>(wv);
  const float* x = static_cast<const float*>(xv);
  __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k)
      a[k] = _mm256_fmadd_ps(L::load(w + (i + 8 * k) * L::kBytes), _mm256_loadu_ps(x + i + 8 * k), a[k]);
  if (i < n) {
    const int64_t r = n - i;
    alignas(32) uint8_t wt[32 * 4] = {};
    alignas(32) float xt[32] = {};
    std::memcpy(wt, w + i * L::kBytes, static_cast<size_t>(r) * L::kBytes);
    std::memcpy(xt, x + i, static_cast<size_t>(r) * sizeof(float));
    for (int k = 0; k < 4; ++k) {
      const __m256i lane = _mm256_add_epi32(_mm256_set1_epi32(8 * k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
      const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(r)), lane));
      const __m256 upd = _mm256_fmadd_ps(L::load(wt + 8 * k * L::kBytes), _mm256_load_ps(xt + 8 * k), a[k]);
      a[k] = _mm256_blendv_ps(a[k], upd, keep);
    }
  }
  return reduce_partials32_avx2(a[0], a[1], a[2], a[3]);
}

}  // namespace

float vec_dot_f32_avx2(int64_t n, const void* w, const void* x) { return vec_dot<LoadF32>(n, w, x); }
float vec_dot_f16_avx2(int64_t n, const void* w, const void* x) { return vec_dot<LoadF16>(n, w, x); }
float vec_dot_bf16_avx2(int64_t n, const void* w, const void* x) { return vec_dot<LoadBF16>(n, w, x); }

}  // namespace dsv4::cpu
