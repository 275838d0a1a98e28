// backend/cpu/float_types_avx512.cpp — F32/F16/BF16 dots, AVX-512 (order: see float_types.h).
// Two 16-lane accumulators hold partials 0-15 and 16-31; each step of 32 elements is one fma per
// register; the tail uses masked loads and mask3 fma so lanes past n keep their value.
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/float_types.h"
#include "backend/cpu/quant.h"  // kMaxTileCols
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

// ---- tile (matmul): nr rows x nc columns per call -------------------------------------------------
//
// Per (row, column) exactly vec_dot's fmas in vec_dot's order: accumulator lo sees the elements i with
// i % 32 < 16 and hi the others, each in increasing i, then the same masked tail and tree. The two
// are computed one after the other (pass h = 0: lo, 1: hi), over spans of kSpan elements whose weight
// rows and columns stay in L1 across both passes, with the accumulators kept in memory between spans.
// A pass holds R × C accumulators (R ≤ 2 rows, C ≤ 8 columns: 16 zmm) with each row's weights
// converted once for C columns (F16's vcvtph2ps shares the fma ports: 2 conversions per 16 fmas) and
// each column loaded once for R rows. Against the form before (whole rows, 2 × 4 accumulator pairs:
// weights and four 16 KiB columns streamed from L2 at n = 4096), `bench kernels` 4096 × 4096 on an Intel
// Xeon VM (2026-12-07, interleaved, 2 rounds): 2 threads F32 57-60 → 74-77 GFLOP/s, F16 88-90 → 110-114
// (64 columns) and 77-84 → 100-103 (512); 1 thread F32 28-30 → 35-39, F16 47 → 58 (64 columns).
constexpr int64_t kSpan = 512;  // 2 KiB per F16 weight row pair, 2 KiB per column: 18 KiB in L1

// Keeps v in a register: otherwise GCC folds the load into every fma that uses it (one load per use).
template <typename V>
inline void in_register(V& v) {
  __asm__("" : "+v"(v));
}

template <typename L, int R, int C>
inline void tile_span(const uint8_t* w, int64_t w_stride, const uint8_t* act, int64_t act_stride, int64_t i0,
                      int64_t i1, int h, __m512 (*acc)[kMaxTileCols][2]) {
  __m512 a[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a[r][c] = acc[r][c][h];
  for (int64_t i = i0 + 16 * h; i < i1; i += 32) {
    __m512 wv[R];
    for (int r = 0; r < R; ++r) {
      wv[r] = L::full(w + r * w_stride, i);
      in_register(wv[r]);
    }
    for (int c = 0; c < C; ++c) {
      __m512 xv = _mm512_loadu_ps(reinterpret_cast<const float*>(act + c * act_stride) + i);
      in_register(xv);
      for (int r = 0; r < R; ++r) a[r][c] = _mm512_fmadd_ps(wv[r], xv, a[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c][h] = a[r][c];
}

template <typename L>
void vec_dot_tile(int64_t n, const void* wv, int64_t w_stride, const void* av, int64_t act_stride, int nr, int nc,
                  float* out, int64_t out_stride) {
  using SpanFn = void (*)(const uint8_t*, int64_t, const uint8_t*, int64_t, int64_t, int64_t, int,
                          __m512 (*)[kMaxTileCols][2]);
  static_assert(kMaxTileCols == 8, "columns of one pass");
  static constexpr SpanFn kSpanFn[2][8] = {
      {tile_span<L, 1, 1>, tile_span<L, 1, 2>, tile_span<L, 1, 3>, tile_span<L, 1, 4>, tile_span<L, 1, 5>,
       tile_span<L, 1, 6>, tile_span<L, 1, 7>, tile_span<L, 1, 8>},
      {tile_span<L, 2, 1>, tile_span<L, 2, 2>, tile_span<L, 2, 3>, tile_span<L, 2, 4>, tile_span<L, 2, 5>,
       tile_span<L, 2, 6>, tile_span<L, 2, 7>, tile_span<L, 2, 8>},
  };
  const auto* w = static_cast<const uint8_t*>(wv);
  const auto* act = static_cast<const uint8_t*>(av);
  __m512 acc[4][kMaxTileCols][2];
  for (auto& row : acc)
    for (auto& col : row)
      for (auto& v : col) v = _mm512_setzero_ps();
  const int64_t whole = n / 32 * 32;
  for (int64_t i0 = 0; i0 < whole; i0 += kSpan) {
    const int64_t i1 = std::min(whole, i0 + kSpan);
    for (int r = 0; r < nr; r += 2)
      for (int h = 0; h < 2; ++h)
        kSpanFn[std::min(2, nr - r) - 1][nc - 1](w + r * w_stride, w_stride, act, act_stride, i0, i1, h, acc + r);
  }
  for (int r = 0; r < nr; ++r)
    for (int c = 0; c < nc; ++c) {
      __m512& lo = acc[r][c][0];
      __m512& hi = acc[r][c][1];
      if (whole < n) {  // vec_dot's masked tail
        const uint8_t* wr = w + r * w_stride;
        const float* x = reinterpret_cast<const float*>(act + c * act_stride);
        const int64_t rem = n - whole;
        const __mmask16 mlo = rem >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << rem) - 1);
        const __mmask16 mhi = rem > 16 ? static_cast<__mmask16>((1u << (rem - 16)) - 1) : static_cast<__mmask16>(0);
        lo = _mm512_mask3_fmadd_ps(L::part(wr, whole, mlo), _mm512_maskz_loadu_ps(mlo, x + whole), lo, mlo);
        if (mhi) hi = _mm512_mask3_fmadd_ps(L::part(wr, whole + 16, mhi), _mm512_maskz_loadu_ps(mhi, x + whole + 16), hi, mhi);
      }
      out[c * out_stride + r] = reduce_partials32_avx512(lo, hi);
    }
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
