// backend/cpu/q8_0_avx2.cpp — AVX2 Q8_0 x Q8_0Act vec_dot, bit-identical to vec_dot_q8_0_scalar
// (order written at its definition in q8_0.cpp).
//
// Blocks go in chunks of 8 (chunk c = blocks 8c .. 8c+7, lane j = block 8c + j) feeding accumulator
// c % 4 (partials 0-7, 8-15, 16-23, 24-31, exactly b % 32).
//   integer dot: both operands sign-extended to int16, vpmaddwd -> 8 int32 per block (exact for every
//     int8 value, -128 included), then an unpack transpose (sum_lanes8_avx2) turns 8 blocks into one vector (lane j =
//     isum of block j).
//   scale: (f16->f32 d_w * d_x) * (float)isum, blended in for tails (lanes past the row unchanged).
//   final: (acc0 + acc2) + (acc1 + acc3)  (s = 16, s = 8), then fold 128/64/32-bit halves.
// The tile form (matmul) puts 8 rows in the lanes instead (vec_dot_tile8_q8_0_avx2) with the same
// integers, products and additions per (row, column).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/q8_0.h"
#include "backend/cpu/quant.h"  // kMaxTileCols
#include "backend/cpu/simd_reduce.h"
#include "backend/cpu/stream_prefetch.h"
#include "backend/cpu/tile8_avx2.h"

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

inline float reduce_partials(const __m256 acc[4]) {
  return reduce_partials32_avx2(acc[0], acc[1], acc[2], acc[3]);
}

// ---- tile8: rows in vector lanes (matmul at AVX2) -------------------------------------------------
//
// A[g] lane r = dword g of row r's 32 quants (positions 4g .. 4g+3) of one block, by loads and an 8×8
// dword transpose (unpack 32, unpack 64, 128-bit lane swap) instead of gathers. Rows ≥ nr read row 0
// (valid memory) and are dropped.
inline void transpose_rows8(const uint8_t* p, int64_t stride, int nr, __m256i A[8]) {
  __m256i z[8];
  for (int i = 0; i < 8; ++i)
    z[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + (i < nr ? i : 0) * stride));
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(z[2 * i], z[2 * i + 1]);      // r0d0 r1d0 r0d1 r1d1 | r0d4 r1d4 r0d5 r1d5
    t[2 * i + 1] = _mm256_unpackhi_epi32(z[2 * i], z[2 * i + 1]);  // r0d2 r1d2 r0d3 r1d3 | r0d6 ..
  }
  for (int i = 0; i < 2; ++i) {  // rows 4i .. 4i+3
    u[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);      // d0 of 4 rows | d4
    u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);      // d1 | d5
    u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);  // d2 | d6
    u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);  // d3 | d7
  }
  for (int k = 0; k < 4; ++k) {
    A[k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20);      // rows 0-3 | rows 4-7, dword k
    A[4 + k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);  // dword 4 + k
  }
}

}  // namespace

// nr (1..8) rows × nc (1..kQ8_0Avx2TileCols) columns with the rows in the 8 lanes of a vector, so no
// per-block horizontal reduction (the AVX-512 16-row tile's scheme with AVX2's multiplies): per block
// b, A_g (transpose_rows8) and |A_g|; per column, lane r = the block's exact int dot of row r
// (tile8_avx2.h); v = (d_w·d_x)·(float)isum for the 8 rows is added into partial[b % 32] of the
// column (kept in memory, lanes = rows), and the 32 partials fold with Partials32's tree, elementwise
// over the rows: vec_dot_q8_0_scalar's integers, products and additions in its order for every (row,
// column). Needs activation quants in [−127, 127] — what quantize_act writes (numerics/quant_ref.h
// clamps); vec_dot also takes −128. A block's transpose and |A| serve every column of the call (in
// passes of 8: the eight accumulators, A, |A| and the broadcast fill AVX2's 16 registers), so 16
// columns per call halve that per-column overhead (the columns' values are the same either way).
void vec_dot_tile8_q8_0_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                             int nc, float* out, int64_t out_stride) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(act);
  const int64_t nb = n / 32;
  static_assert(kQ8_0Avx2TileCols % 8 == 0 && kQ8_0Avx2TileCols <= kMaxTileColsAny, "passes of 8 columns");
  alignas(32) float part[kQ8_0Avx2TileCols][32][8];
  tile8::zero_partials(part, nc);
  alignas(32) __m256i A[8], Aabs[8];
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = wp + b * kWBytes;
    transpose_rows8(wb + 2, w_stride, nr, A);
    for (int g = 0; g < 8; ++g) Aabs[g] = _mm256_abs_epi8(A[g]);
    __asm__("" : : "r"(A), "r"(Aabs) : "memory");  // stored: tile8::block_cols reads them through pointers
    alignas(16) uint16_t dh[8];  // d_w of the 8 rows
    for (int r = 0; r < 8; ++r) std::memcpy(&dh[r], wb + (r < nr ? r : 0) * w_stride, 2);
    const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dh)));
    const uint8_t* xq[kQ8_0Avx2TileCols];
    for (int c = 0; c < nc; ++c) xq[c] = ap + c * act_stride + b * kABytes + 4;
    __m256i isum[kQ8_0Avx2TileCols];
    tile8::columns<false>(A, Aabs, xq, nc, isum);
    tile8::add_block(dw, xq, isum, nc, b, part);
  }
  tile8::fold(part, nc, nr, out, out_stride);
}

float vec_dot_q8_0_avx2(int64_t n, const void* w, const void* act) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(act);
  const int64_t nb = n / 32;
  const bool prefetch = q8_0_stream_prefetch();
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t c = 0; c * 8 < nb; ++c) {
    const int64_t b0 = c * 8;
    const uint8_t* wc = wp + b0 * kWBytes;
    const uint8_t* ac = ap + b0 * kABytes;
    const int cnt = static_cast<int>(std::min<int64_t>(8, nb - b0));
    if (prefetch) prefetch_ahead(wc, 8 * kWBytes);  // stream_prefetch.h: on Intel CPUs
    __m256i v[8];
    // Written as one loop of 8 (GCC unrolls it fully; the two-loop form measured 15% slower).
    for (int i = 0; i < 8; ++i) v[i] = i < cnt ? block_dot(wc + i * kWBytes, ac + i * kABytes) : _mm256_setzero_si256();
    const __m256i isum = sum_lanes8_avx2(v);
    __m256 dw, dx;
    if (cnt == 8) {  // d_w: the f16 at each block's start; d_x: the float at each activation block's start
      dw = f16_at_stride_avx2(wc, kWBytes);
      dx = f32_at_stride_avx2(ac, kABytes);
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
