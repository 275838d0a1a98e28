// backend/cpu/float_types_avx2.cpp — F32/F16/BF16 dots, AVX2+FMA+F16C (order: see float_types.h).
// Four 8-lane accumulators hold partials 0-7, 8-15, 16-23, 24-31. The tail (< 32 elements) is
// copied into a zero-padded buffer and each accumulator is updated only in lanes below n (blend). The
// tile form (matmul, attention scores) gives every (row, column) exactly that dot.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/float_types.h"
#include "backend/cpu/quant.h"  // kMaxTileCols
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

// The elements [i, n) past the last whole 32 (n - i < 32), vec_dot's masked update: copied into
// zero-padded buffers, and each accumulator updated only in lanes below n.
template <typename L>
inline void masked_tail(const uint8_t* w, const float* x, int64_t i, int64_t n, __m256 a[4]) {
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

template <typename L>
float vec_dot(int64_t n, const void* wv, const void* xv) {
  const uint8_t* w = static_cast<const uint8_t*>(wv);
  const float* x = static_cast<const float*>(xv);
  __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k)
      a[k] = _mm256_fmadd_ps(L::load(w + (i + 8 * k) * L::kBytes), _mm256_loadu_ps(x + i + 8 * k), a[k]);
  if (i < n) masked_tail<L>(w, x, i, n, a);
  return reduce_partials32_avx2(a[0], a[1], a[2], a[3]);
}

// ---- tile (matmul): nr rows x nc columns per call -------------------------------------------------
//
// Accumulator k of a dot (partials 8k..8k+7) only ever sees elements i with i % 32 in [8k, 8k + 8), so
// the four are computed one after another: per span of kSpan elements and per k, R x C single
// accumulators (one per row and column) are loaded, fma'd over the span's 32-element steps in
// increasing i, and stored back. Each accumulator sees exactly vec_dot's fma sequence (then the same
// masked tail and tree), while each weight vector is converted once for C columns and each activation
// vector loaded once for R rows. R = 2, C = 4: 8 accumulators + 2 weights + 1 activation in 16 ymm.

// Keeps v in a register: otherwise GCC folds the load into every fma that uses it (one load per use),
// and loads, not fmas, bound these kernels (about one 32-byte load per cycle on the Zen 4 VM).
template <typename V>
inline void in_register(V& v) {
  __asm__("" : "+x"(v));
}

constexpr int64_t kSpan = 512;  // 1-2 KiB per weight row, 2 KiB per column: the span stays in L1

template <typename L, int R, int C>
inline void tile_span(const uint8_t* w, int64_t w_stride, const uint8_t* act, int64_t act_stride, int64_t i0,
                      int64_t i1, int k, int c0, __m256 (*acc)[kMaxTileCols][4]) {
  __m256 a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a[r][c] = acc[r][c0 + c][k];
  for (int64_t i = i0 + 8 * k; i < i1; i += 32) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r) {
      wv[r] = L::load(w + r * w_stride + i * L::kBytes);
      in_register(wv[r]);
    }
    for (int c = 0; c < C; ++c) {
      __m256 xv = _mm256_loadu_ps(reinterpret_cast<const float*>(act + (c0 + c) * act_stride) + i);
      in_register(xv);
      for (int r = 0; r < R; ++r) a[r][c] = _mm256_fmadd_ps(wv[r], xv, a[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c0 + c][k] = a[r][c];
}

template <typename L>
void vec_dot_tile(int64_t n, const void* wv, int64_t w_stride, const void* av, int64_t act_stride, int nr, int nc,
                  float* out, int64_t out_stride) {
  using SpanFn = void (*)(const uint8_t*, int64_t, const uint8_t*, int64_t, int64_t, int64_t, int, int,
                          __m256 (*)[kMaxTileCols][4]);
  static constexpr SpanFn kSpanFn[2][4] = {
      {tile_span<L, 1, 1>, tile_span<L, 1, 2>, tile_span<L, 1, 3>, tile_span<L, 1, 4>},
      {tile_span<L, 2, 1>, tile_span<L, 2, 2>, tile_span<L, 2, 3>, tile_span<L, 2, 4>},
  };
  const auto* w = static_cast<const uint8_t*>(wv);
  const auto* act = static_cast<const uint8_t*>(av);
  __m256 acc[4][kMaxTileCols][4];
  for (auto& row : acc)
    for (auto& col : row)
      for (auto& v : col) v = _mm256_setzero_ps();
  const int64_t whole = n / 32 * 32;
  for (int64_t i0 = 0; i0 < whole; i0 += kSpan) {
    const int64_t i1 = std::min(whole, i0 + kSpan);
    // k innermost: 2 rows and 4 columns at a time. Rows and columns sit a power of two apart for the
    // usual n (same L1 set): all 4 rows and 8 columns at once would be 12 lines per set, over its 8 ways.
    for (int r = 0; r < nr; r += 2)
      for (int c = 0; c < nc; c += 4)
        for (int k = 0; k < 4; ++k)
          kSpanFn[std::min(2, nr - r) - 1][std::min(4, nc - c) - 1](w + r * w_stride, w_stride, act, act_stride, i0, i1,
                                                                     k, c, acc + r);
  }
  for (int r = 0; r < nr; ++r)
    for (int c = 0; c < nc; ++c) {
      __m256* a = acc[r][c];
      if (whole < n)
        masked_tail<L>(w + r * w_stride, reinterpret_cast<const float*>(act + c * act_stride), whole, n, a);
      out[c * out_stride + r] = reduce_partials32_avx2(a[0], a[1], a[2], a[3]);
    }
}

}  // namespace

float vec_dot_f32_avx2(int64_t n, const void* w, const void* x) { return vec_dot<LoadF32>(n, w, x); }
float vec_dot_f16_avx2(int64_t n, const void* w, const void* x) { return vec_dot<LoadF16>(n, w, x); }
float vec_dot_bf16_avx2(int64_t n, const void* w, const void* x) { return vec_dot<LoadBF16>(n, w, x); }

void vec_dot_tile_f32_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                           int nc, float* out, int64_t out_stride) {
  vec_dot_tile<LoadF32>(n, w, w_stride, act, act_stride, nr, nc, out, out_stride);
}
void vec_dot_tile_f16_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                           int nc, float* out, int64_t out_stride) {
  vec_dot_tile<LoadF16>(n, w, w_stride, act, act_stride, nr, nc, out, out_stride);
}
void vec_dot_tile_bf16_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                            int nc, float* out, int64_t out_stride) {
  vec_dot_tile<LoadBF16>(n, w, w_stride, act, act_stride, nr, nc, out, out_stride);
}

}  // namespace dsv4::cpu
