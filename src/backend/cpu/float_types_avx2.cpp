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
// the four are computed one after another: per span of kSpan elements, per block of R rows x C columns
// and per k, R x C single accumulators are loaded, fma'd over the span's 32-element steps in increasing
// i, and stored back. Each accumulator sees exactly vec_dot's fma sequence (then the same masked tail and
// tree), while each weight vector is converted once for C columns and each activation vector loaded once
// for R rows. Blocks are at most 3 x 4: 12 accumulators + 3 weights + 1 activation in 16 ymm.
//
// Loads from L2, not the fmas, bound this at n = 4096: rows (and columns) sit a power of two apart, in the
// same L1 sets, so only about 8 of them stay in L1 at once. Hence kFloatAvx2TileRows = 12 rows per call (a
// column read from L2 serves 12 rows, not 4), column blocks outermost with the row blocks in a snake (the
// next block keeps the last one's rows or columns in L1), and the four k inside one block call (the block's
// 7 streams stay in L1 across them). Against the form before (2 x 4 blocks on 4 rows, k outermost, kSpan
// 512), `bench kernels` 4096 x 4096, 64 / 512 columns, AMD EPYC Zen 3, 2 threads (2026-12-07, interleaved,
// best of 3 rounds, a second process sharing the cores): F32 73 / 73 -> 100 / 110 GFLOP/s, BF16 76 / 74 ->
// 111 / 112, F16 79 / 74 -> 122 / 121 (of a 204 peak). 15 or 16 rows in 3 x 4 blocks measured the same as
// 12 (which keeps the accumulators at 12 KiB of stack), 16 rows in 2 x 4 blocks a little slower,
// kSpan 512 and 8 rows x 16 columns no faster (noisier runs); BF16 widened by vbroadcasti128 + vpshufb
// was slower than vpmovzxwd + vpslld in a one-thread microbenchmark.

// Keeps v in a register: otherwise GCC folds the load into every fma that uses it (one load per use),
// and loads, not fmas, bound these kernels (about one 32-byte load per cycle on the Zen 4 VM).
template <typename V>
inline void in_register(V& v) {
  __asm__("" : "+x"(v));
}

// 4 KiB per F32 row and per column, 2 KiB per F16/BF16 row: fewer calls and accumulator round trips than
// 512, and at power-of-two strides a stream takes one way of its sets at either length.
constexpr int64_t kSpan = 1024;
constexpr int kRows = kFloatAvx2TileRows;
using Acc = __m256[kMaxTileCols][4];  // per row: per column, the 4 accumulators

// Rows [0, R) of w and columns [0, C) of act (accumulators acc[r][c0 + c]) over the span [i0, i1).
template <typename L, int R, int C>
void tile_block(const uint8_t* w, int64_t w_stride, const uint8_t* act, int64_t act_stride, int64_t i0, int64_t i1,
                int c0, Acc* acc) {
  for (int k = 0; k < 4; ++k) {
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
        __m256 xv = _mm256_loadu_ps(reinterpret_cast<const float*>(act + c * act_stride) + i);
        in_register(xv);
        for (int r = 0; r < R; ++r) a[r][c] = _mm256_fmadd_ps(wv[r], xv, a[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c0 + c][k] = a[r][c];
  }
}

// Block heights for nr rows (3s; a remainder of 1 makes the last 3 + 1 into 2 + 2) and widths for nc
// columns (4s; 5 and 6 as 3 + 2 and 3 + 3): fewer than 6 accumulators only where nr or nc is that small.
inline int block_rows(int left) { return left == 4 ? 2 : std::min(3, left); }
inline int block_cols(int left) { return left == 5 || left == 6 ? 3 : std::min(4, left); }

template <typename L>
void vec_dot_tile(int64_t n, const void* wv, int64_t w_stride, const void* av, int64_t act_stride, int nr, int nc,
                  float* out, int64_t out_stride) {
  using BlockFn = void (*)(const uint8_t*, int64_t, const uint8_t*, int64_t, int64_t, int64_t, int, Acc*);
  static constexpr BlockFn kBlockFn[3][4] = {
      {tile_block<L, 1, 1>, tile_block<L, 1, 2>, tile_block<L, 1, 3>, tile_block<L, 1, 4>},
      {tile_block<L, 2, 1>, tile_block<L, 2, 2>, tile_block<L, 2, 3>, tile_block<L, 2, 4>},
      {tile_block<L, 3, 1>, tile_block<L, 3, 2>, tile_block<L, 3, 3>, tile_block<L, 3, 4>},
  };
  const auto* w = static_cast<const uint8_t*>(wv);
  const auto* act = static_cast<const uint8_t*>(av);
  Acc acc[kRows];
  for (int r = 0; r < nr; ++r)
    for (int c = 0; c < nc; ++c)
      for (auto& v : acc[r][c]) v = _mm256_setzero_ps();
  int row0[kRows], rows[kRows], nrb = 0;  // the row blocks
  for (int r = 0; r < nr; r += rows[nrb++]) {
    row0[nrb] = r;
    rows[nrb] = block_rows(nr - r);
  }
  const int64_t whole = n / 32 * 32;
  for (int64_t i0 = 0; i0 < whole; i0 += kSpan) {
    const int64_t i1 = std::min(whole, i0 + kSpan);
    bool down = true;
    for (int c = 0, cols = 0; c < nc; c += cols, down = !down) {
      cols = block_cols(nc - c);
      for (int j = 0; j < nrb; ++j) {
        const int b = down ? j : nrb - 1 - j;  // snake: the first block reuses the last one's rows
        kBlockFn[rows[b] - 1][cols - 1](w + row0[b] * w_stride, w_stride, act + c * act_stride, act_stride, i0, i1, c,
                                        acc + row0[b]);
      }
    }
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
