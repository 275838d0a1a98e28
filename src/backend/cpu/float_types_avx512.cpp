// backend/cpu/float_types_avx512.cpp — F32/F16/BF16 dots, AVX-512 (order: see float_types.h).
// Two 16-lane accumulators hold partials 0-15 and 16-31; each step of 32 elements is one fma per
// register; the tail uses masked loads and mask3 fma so lanes past n keep their value.
#include <immintrin.h>

#include "backend/cpu/float_types.h"
#include "backend/cpu/simd_reduce.h"

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

// R rows × C columns: per (row, column) exactly vec_dot's fmas in vec_dot's order (two 16-lane
// accumulators, the same masked tail and reduction), but each weight vector is loaded and widened once
// for C columns and each activation vector once for R rows (matmul: the widening and the loads, not the
// fmas, were the limit of one dot at a time).
template <typename L, int R, int C>
void tile_block(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* xb, int64_t x_stride, float* out,
                int64_t out_stride) {
  __m512 lo[R][C], hi[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) lo[r][c] = hi[r][c] = _mm512_setzero_ps();
  auto x = [&](int c) { return reinterpret_cast<const float*>(xb + c * x_stride); };
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 wl[R], wh[R];
    for (int r = 0; r < R; ++r) wl[r] = L::full(w + r * w_stride, i), wh[r] = L::full(w + r * w_stride, i + 16);
    for (int c = 0; c < C; ++c) {
      const __m512 xl = _mm512_loadu_ps(x(c) + i), xh = _mm512_loadu_ps(x(c) + i + 16);
      for (int r = 0; r < R; ++r) {
        lo[r][c] = _mm512_fmadd_ps(wl[r], xl, lo[r][c]);
        hi[r][c] = _mm512_fmadd_ps(wh[r], xh, hi[r][c]);
      }
    }
  }
  if (i < n) {
    const int64_t rem = n - i;
    const __mmask16 mlo = rem >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << rem) - 1);
    const __mmask16 mhi = rem > 16 ? static_cast<__mmask16>((1u << (rem - 16)) - 1) : static_cast<__mmask16>(0);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        lo[r][c] = _mm512_mask3_fmadd_ps(L::part(w + r * w_stride, i, mlo), _mm512_maskz_loadu_ps(mlo, x(c) + i), lo[r][c], mlo);
        if (mhi)
          hi[r][c] = _mm512_mask3_fmadd_ps(L::part(w + r * w_stride, i + 16, mhi), _mm512_maskz_loadu_ps(mhi, x(c) + i + 16),
                                           hi[r][c], mhi);
      }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) out[c * out_stride + r] = reduce_partials32_avx512(lo[r][c], hi[r][c]);
}

// Rows in pairs (a last single row alone), columns in fours (the last 1-3 as one block).
template <typename L, int R>
void tile_rows(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* x, int64_t x_stride, int nc, float* out,
               int64_t out_stride) {
  int c = 0;
  for (; c + 4 <= nc; c += 4) tile_block<L, R, 4>(n, w, w_stride, x + c * x_stride, x_stride, out + c * out_stride, out_stride);
  switch (nc - c) {
    case 3: tile_block<L, R, 3>(n, w, w_stride, x + c * x_stride, x_stride, out + c * out_stride, out_stride); break;
    case 2: tile_block<L, R, 2>(n, w, w_stride, x + c * x_stride, x_stride, out + c * out_stride, out_stride); break;
    case 1: tile_block<L, R, 1>(n, w, w_stride, x + c * x_stride, x_stride, out + c * out_stride, out_stride); break;
    default: break;
  }
}

template <typename L>
void vec_dot_tile(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr, int nc,
                  float* out, int64_t out_stride) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* xp = static_cast<const uint8_t*>(act);
  int r = 0;
  for (; r + 2 <= nr; r += 2) tile_rows<L, 2>(n, wp + r * w_stride, w_stride, xp, act_stride, nc, out + r, out_stride);
  if (r < nr) tile_rows<L, 1>(n, wp + r * w_stride, w_stride, xp, act_stride, nc, out + r, out_stride);
}

}  // namespace

void vec_dot_tile_f32_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                             int nc, float* out, int64_t out_stride) {
  vec_dot_tile<LoadF32>(n, w, w_stride, act, act_stride, nr, nc, out, out_stride);
}
void vec_dot_tile_f16_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                             int nc, float* out, int64_t out_stride) {
  vec_dot_tile<LoadF16>(n, w, w_stride, act, act_stride, nr, nc, out, out_stride);
}
void vec_dot_tile_bf16_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                              int nc, float* out, int64_t out_stride) {
  vec_dot_tile<LoadBF16>(n, w, w_stride, act, act_stride, nr, nc, out, out_stride);
}

float vec_dot_f32_avx512(int64_t n, const void* w, const void* x) { return vec_dot<LoadF32>(n, w, x); }
float vec_dot_f16_avx512(int64_t n, const void* w, const void* x) { return vec_dot<LoadF16>(n, w, x); }
float vec_dot_bf16_avx512(int64_t n, const void* w, const void* x) { return vec_dot<LoadBF16>(n, w, x); }

}  // namespace dsv4::cpu
