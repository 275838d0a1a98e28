// backend/cpu/q8_0_avx2.cpp — AVX2 Q8_0 x Q8_0Act vec_dot, bit-identical to vec_dot_q8_0_scalar
// (order written at its definition in q8_0.cpp).
//
// Blocks go in chunks of 8 (chunk c = blocks 8c .. 8c+7, lane j = block 8c + j) feeding accumulator
// c % 4 (partials 0-7, 8-15, 16-23, 24-31, exactly b % 32).
//   integer dot: both operands sign-extended to int16, vpmaddwd -> 8 int32 per block (exact for every
//     int8 value, -128 included), then a phaddd transpose turns 8 blocks into one vector (lane j =
//     isum of block j).
//   scale: (f16->f32 d_w * d_x) * (float)isum, blended in for tails (lanes past the row unchanged).
//   final: (acc0 + acc2) + (acc1 + acc3)  (s = 16, s = 8), then fold 128/64/32-bit halves.
// The tile form (matmul) computes the same integer dots and f32 steps per (row, column), below.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/q8_0.h"
#include "backend/cpu/quant.h"  // kMaxTileCols
#include "backend/cpu/simd_reduce.h"

namespace dsv4::cpu {
namespace {

constexpr int64_t kWBytes = 34;
constexpr int64_t kABytes = 36;

inline __m256i block_dot(const uint8_t* w, const uint8_t* a) {
  const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)));
  const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 18)));
  const __m256i x0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 4)));
  const __m256i x1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 20)));
  return _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));
}

// Eight 8-lane int32 vectors (one per block) -> lane j = Σ of block j's lanes.
inline __m256i reduce8x8(const __m256i b[8]) {
  const __m256i s01 = _mm256_hadd_epi32(b[0], b[1]);
  const __m256i s23 = _mm256_hadd_epi32(b[2], b[3]);
  const __m256i s45 = _mm256_hadd_epi32(b[4], b[5]);
  const __m256i s67 = _mm256_hadd_epi32(b[6], b[7]);
  const __m256i s0123 = _mm256_hadd_epi32(s01, s23);  // 128-bit lane 0: low-half sums of b0..b3; lane 1: high
  const __m256i s4567 = _mm256_hadd_epi32(s45, s67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(s0123, s4567, 0x20),
                          _mm256_permute2x128_si256(s0123, s4567, 0x31));
}

inline float reduce_partials(const __m256 acc[4]) {
  return reduce_partials32_avx2(acc[0], acc[1], acc[2], acc[3]);
}

// The f32 step of chunk c (vec_dot_q8_0_avx2's): lane j += (d_w · d_x) · (float)isum for the cnt valid
// lanes (the others keep their bits).
inline void add_chunk(__m256 dw, __m256 dx, __m256i isum, int cnt, __m256& a) {
  const __m256 val = _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum));
  add_first_lanes_avx2(a, val, cnt);
}

// ---- tile: nr rows x nc columns per call (matmul) ---------------------------------------------------
//
// The same integer dots as block_dot (int16 operands, vpmaddwd, exact for -128 on either side) and the
// same f32 steps, but each weight block is widened once for C columns and each activation block once
// for R rows: R = 2 rows x C = 4 columns keep 8 int32 sums, 4 weight vectors and a column's 2 in the
// 16 ymm registers. Block j of a chunk leaves 8 lanes in part[r][c][j]; reduce8x8 then gives lane j =
// isum of block j, as in vec_dot.

template <int R, int C>
inline void tile_chunk(const uint8_t* wc, int64_t w_stride, const uint8_t* ac, int64_t act_stride, int cnt, int c0,
                       __m256i (*part)[kMaxTileCols][8]) {
#pragma GCC unroll 1
  for (int j = 0; j < cnt; ++j) {
    __m256i w0[R], w1[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* wb = wc + r * w_stride + j * kWBytes;
      w0[r] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 2)));
      w1[r] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 18)));
    }
    for (int c = 0; c < C; ++c) {
      const uint8_t* xb = ac + (c0 + c) * act_stride + j * kABytes;
      __m256i x0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 4)));
      __m256i x1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 20)));
      __asm__("" : "+x"(x0), "+x"(x1));  // in registers: GCC would otherwise reload them per use
      for (int r = 0; r < R; ++r)
        _mm256_store_si256(&part[r][c0 + c][j],
                           _mm256_add_epi32(_mm256_madd_epi16(w0[r], x0), _mm256_madd_epi16(w1[r], x1)));
    }
  }
}

using TileChunkFn = void (*)(const uint8_t*, int64_t, const uint8_t*, int64_t, int, int, __m256i (*)[kMaxTileCols][8]);
constexpr TileChunkFn kTileChunk[2][4] = {
    {tile_chunk<1, 1>, tile_chunk<1, 2>, tile_chunk<1, 3>, tile_chunk<1, 4>},
    {tile_chunk<2, 1>, tile_chunk<2, 2>, tile_chunk<2, 3>, tile_chunk<2, 4>},
};

}  // namespace

void vec_dot_tile_q8_0_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                            int nc, float* out, int64_t out_stride) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(act);
  const int64_t nb = n / 32;
  __m256 acc[4][kMaxTileCols][4];
  for (auto& row : acc)
    for (auto& col : row)
      for (auto& v : col) v = _mm256_setzero_ps();
  alignas(32) __m256i part[4][kMaxTileCols][8];
  for (int64_t c = 0; c * 8 < nb; ++c) {
    const int64_t b0 = c * 8;
    const int cnt = static_cast<int>(std::min<int64_t>(8, nb - b0));
    const uint8_t* wc = wp + b0 * kWBytes;
    const uint8_t* ac = ap + b0 * kABytes;
    for (int r = 0; r < nr; r += 2)
      for (int col = 0; col < nc; col += 4)
        kTileChunk[std::min(2, nr - r) - 1][std::min(4, nc - col) - 1](wc + r * w_stride, w_stride, ac, act_stride, cnt,
                                                                        col, part + r);
    alignas(32) float dxa[kMaxTileCols][8] = {};
    for (int col = 0; col < nc; ++col)
      for (int i = 0; i < cnt; ++i) std::memcpy(&dxa[col][i], ac + col * act_stride + i * kABytes, 4);
    for (int r = 0; r < nr; ++r) {
      alignas(16) uint16_t dwh[8] = {};
      for (int i = 0; i < cnt; ++i) std::memcpy(&dwh[i], wc + r * w_stride + i * kWBytes, 2);
      const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dwh)));
      for (int col = 0; col < nc; ++col) {
        for (int i = cnt; i < 8; ++i) part[r][col][i] = _mm256_setzero_si256();
        add_chunk(dw, _mm256_load_ps(dxa[col]), reduce8x8(part[r][col]), cnt, acc[r][col][c & 3]);
      }
    }
  }
  for (int r = 0; r < nr; ++r)
    for (int col = 0; col < nc; ++col) out[col * out_stride + r] = reduce_partials(acc[r][col]);
}

float vec_dot_q8_0_avx2(int64_t n, const void* w, const void* act) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(act);
  const int64_t nb = n / 32;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  const __m256i woff = lane_offsets_avx2(kWBytes), aoff = lane_offsets_avx2(kABytes);
  for (int64_t c = 0; c * 8 < nb; ++c) {
    const int64_t b0 = c * 8;
    const uint8_t* wc = wp + b0 * kWBytes;
    const uint8_t* ac = ap + b0 * kABytes;
    const int cnt = static_cast<int>(std::min<int64_t>(8, nb - b0));
    __m256i v[8];
    // Written as one loop of 8 (GCC unrolls it fully; the two-loop form measured 15% slower).
    for (int i = 0; i < 8; ++i) v[i] = i < cnt ? block_dot(wc + i * kWBytes, ac + i * kABytes) : _mm256_setzero_si256();
    const __m256i isum = reduce8x8(v);
    __m256 dw, dx;
    if (cnt == 8) {  // d_w: the f16 in the low half of each block's first dword
      dw = f16_half_of_dwords_avx2(gather_dwords_avx2(wc, woff), false);
      dx = _mm256_castsi256_ps(gather_dwords_avx2(ac, aoff));
    } else {
      alignas(16) uint16_t dwh[8] = {};
      alignas(32) float dxa[8] = {};
      for (int i = 0; i < cnt; ++i) {
        std::memcpy(&dwh[i], wc + i * kWBytes, 2);
        std::memcpy(&dxa[i], ac + i * kABytes, 4);
      }
      dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dwh)));
      dx = _mm256_load_ps(dxa);
    }
    const __m256 val = _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum));
    __m256& a = acc[c & 3];
    add_first_lanes_avx2(a, val, cnt);
  }
  return reduce_partials(acc);
}

}  // namespace dsv4::cpu
