// backend/cpu/q8_0_avx512.cpp — AVX-512 (F/BW/VL/DQ/VNNI) Q8_0 x Q8_0Act vec_dot, bit-identical to
// vec_dot_q8_0_scalar (order written at its definition in q8_0.cpp).
//
// Layout of the computation: blocks go in chunks of 16 (chunk c = blocks 16c .. 16c+15, lane j =
// block 16c + j), which feed accumulator c % 2 (partials 0-15 or 16-31, exactly b % 32).
//   integer dot: vpdpbusd needs an unsigned operand, so w is offset to u = w + 128 (xor 0x80):
//     Σ w·x = Σ u·x − 128·Σ x, both exact in int32 (valid for every int8 w and x, -128 included);
//     two blocks share one zmm (block 2i in the low 256 bits), then a transposing reduction turns
//     8 such vectors into one int32 vector with lane j = isum of block j.
//   scale: d_w (f16, gathered) -> f32, times d_x (gathered), times (float)isum; masked add for tails.
//   final: acc0 + acc1 (s = 16), then fold 256/128/64/32-bit halves (s = 8, 4, 2, 1).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/q8_0.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/simd_reduce.h"
#include "backend/cpu/stream_prefetch.h"

namespace dsv4::cpu {
namespace {

constexpr int64_t kWBytes = 34;  // sizeof(BlockQ8_0)
constexpr int64_t kABytes = 36;  // sizeof(BlockQ8_0Act)

// int32 lanes 0-7: partial sums of block (w0, a0); lanes 8-15: of block (w1, a1).
inline __m512i pair_dot(const uint8_t* w0, const uint8_t* a0, const uint8_t* w1, const uint8_t* a1) {
  const __m512i wv = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w0 + 2))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w1 + 2)), 1);
  const __m512i xv = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a0 + 4))),
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a1 + 4)), 1);
  const __m512i c80 = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i uv = _mm512_xor_si512(wv, c80);
  const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), uv, xv);
  const __m512i corr = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c80, xv);
  return _mm512_sub_epi32(dot, corr);
}

// Like pair_dot with only the first block (lanes 8-15 are zero).
inline __m512i single_dot(const uint8_t* w0, const uint8_t* a0) {
  const __m512i wv = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w0 + 2)));
  const __m512i xv = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a0 + 4)));
  const __m512i c80 = _mm512_set1_epi8(static_cast<char>(0x80));  // x is 0 in the high half: adds 0
  const __m512i uv = _mm512_xor_si512(wv, c80);
  const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), uv, xv);
  const __m512i corr = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c80, xv);
  return _mm512_sub_epi32(dot, corr);
}

// Eight vectors, vector i holding blocks 2i (lanes 0-7) and 2i+1 (lanes 8-15) -> lane j = Σ of the
// 8 lanes of block j. Integer adds, so the grouping does not matter.
inline __m512i reduce8x8(const __m512i v[8]) {
  const __m512i l1_lo = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
  const __m512i l1_hi = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  const __m512i l2_lo = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29);
  const __m512i l2_hi = _mm512_setr_epi32(2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  const __m512i l3_lo = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i l3_hi = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  __m512i w[4];
  for (int i = 0; i < 4; ++i)
    w[i] = _mm512_add_epi32(_mm512_permutex2var_epi32(v[2 * i], l1_lo, v[2 * i + 1]),
                            _mm512_permutex2var_epi32(v[2 * i], l1_hi, v[2 * i + 1]));
  __m512i x[2];
  for (int i = 0; i < 2; ++i)
    x[i] = _mm512_add_epi32(_mm512_permutex2var_epi32(w[2 * i], l2_lo, w[2 * i + 1]),
                            _mm512_permutex2var_epi32(w[2 * i], l2_hi, w[2 * i + 1]));
  return _mm512_add_epi32(_mm512_permutex2var_epi32(x[0], l3_lo, x[1]), _mm512_permutex2var_epi32(x[0], l3_hi, x[1]));
}

// The 32 quants of blocks 2i (low half) and 2i + 1 (high half) of a chunk of cnt blocks (blocks of
// `stride` bytes, quants at `off`); a block past cnt is zero and never read.
inline __m512i load_block_pair(const uint8_t* p, int64_t stride, int64_t off, int i, int cnt) {
  const uint8_t* b = p + (2 * i) * stride + off;
  if (2 * i + 1 < cnt)
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b))),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + stride)), 1);
  if (2 * i < cnt) return _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)));
  return _mm512_setzero_si512();
}

// The Partials32 tree on two 16-lane accumulators (partials 0-15, 16-31).
inline float reduce_partials(__m512 acc0, __m512 acc1) {
  return reduce_partials32_avx512(acc0, acc1);
}

}  // namespace

float vec_dot_q8_0_avx512(int64_t n, const void* w, const void* act) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(act);
  const int64_t nb = n / 32;
  const bool prefetch = q8_0_stream_prefetch();
  const __m512i idx_w = lane_offsets(kWBytes), idx_a = lane_offsets(kABytes);
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int64_t c = 0; c * 16 < nb; ++c) {
    const int64_t b0 = c * 16;
    const uint8_t* wc = wp + b0 * kWBytes;
    const uint8_t* ac = ap + b0 * kABytes;
    const int cnt = static_cast<int>(std::min<int64_t>(16, nb - b0));
    if (prefetch) prefetch_ahead(wc, 16 * kWBytes);  // stream_prefetch.h: on Intel CPUs
    __m512i v[8];
    if (cnt == 16) {
      for (int i = 0; i < 8; ++i)
        v[i] = pair_dot(wc + (2 * i) * kWBytes, ac + (2 * i) * kABytes, wc + (2 * i + 1) * kWBytes,
                        ac + (2 * i + 1) * kABytes);
    } else {
      for (int i = 0; i < 8; ++i) {
        if (2 * i + 1 < cnt)
          v[i] = pair_dot(wc + (2 * i) * kWBytes, ac + (2 * i) * kABytes, wc + (2 * i + 1) * kWBytes,
                          ac + (2 * i + 1) * kABytes);
        else if (2 * i < cnt)
          v[i] = single_dot(wc + (2 * i) * kWBytes, ac + (2 * i) * kABytes);
        else
          v[i] = _mm512_setzero_si512();
      }
    }
    const __m512i isum = reduce8x8(v);
    const __mmask16 m = static_cast<__mmask16>(cnt == 16 ? 0xffff : (1u << cnt) - 1);
    const __m512i dwi = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx_w, wc, 1);
    const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dwi));
    const __m512 dx = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx_a, ac, 1);
    const __m512 val = _mm512_mul_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum));
    acc[c & 1] = _mm512_mask_add_ps(acc[c & 1], m, acc[c & 1], val);
  }
  return reduce_partials(acc[0], acc[1]);
}

// nr (1..4) rows against one activation row: exactly vec_dot_q8_0_avx512's operations per row
// (same integer dots, gathers, scaling and masked adds), with the activation loads, the 128·Σx
// corrections and the d_x gather done once per chunk for all rows.
void vec_dot_rows_q8_0_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(act);
  const int64_t nb = n / 32;
  const __m512i idx_w = lane_offsets(kWBytes), idx_a = lane_offsets(kABytes);
  const __m512i c80 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[4][2];
  for (int r = 0; r < 4; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t c = 0; c * 16 < nb; ++c) {
    const int64_t b0 = c * 16;
    const uint8_t* ac = ap + b0 * kABytes;
    const int cnt = static_cast<int>(std::min<int64_t>(16, nb - b0));
    __m512i xv[8], corr[8];
    for (int i = 0; i < 8; ++i) {
      xv[i] = load_block_pair(ac, kABytes, 4, i, cnt);
      corr[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c80, xv[i]);
    }
    const __mmask16 m = static_cast<__mmask16>(cnt == 16 ? 0xffff : (1u << cnt) - 1);
    const __m512 dx = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx_a, ac, 1);
    for (int r = 0; r < nr; ++r) {
      const uint8_t* wc = wp + r * w_stride + b0 * kWBytes;
      __m512i v[8];
      for (int i = 0; i < 8; ++i) {
        if (2 * i >= cnt) {
          v[i] = _mm512_setzero_si512();
          continue;
        }
        const __m512i wv = load_block_pair(wc, kWBytes, 2, i, cnt);
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(wv, c80), xv[i]);
        v[i] = _mm512_sub_epi32(dot, corr[i]);
      }
      const __m512i isum = reduce8x8(v);
      const __m512i dwi = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx_w, wc, 1);
      const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dwi));
      const __m512 val = _mm512_mul_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum));
      acc[r][c & 1] = _mm512_mask_add_ps(acc[r][c & 1], m, acc[r][c & 1], val);
    }
  }
  for (int r = 0; r < nr; ++r) out[r] = reduce_partials(acc[r][0], acc[r][1]);
}

// nr (1..4) rows x nc (1..kMaxTileCols) activation columns: exactly vec_dot_q8_0_avx512's integer
// dots, gathers and float steps for every (row, column). Each weight pair is loaded and offset once
// for all columns, each activation pair once for all rows, and −128·Σx starts the vpdpbusd
// accumulator instead of being subtracted after it (exact int32: the same sums).
void vec_dot_tile_q8_0_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                              int nc, float* out, int64_t out_stride) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(act);
  const int64_t nb = n / 32;
  const __m512i idx_w = lane_offsets(kWBytes), idx_a = lane_offsets(kABytes);
  const __m512i c80 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[4][kMaxTileCols][2];
  for (auto& r : acc)
    for (auto& col : r) col[0] = col[1] = _mm512_setzero_ps();
  for (int64_t c = 0; c * 16 < nb; ++c) {
    const int64_t b0 = c * 16;
    const int cnt = static_cast<int>(std::min<int64_t>(16, nb - b0));
    const int pairs = (cnt + 1) / 2;
    const __mmask16 m = static_cast<__mmask16>(cnt == 16 ? 0xffff : (1u << cnt) - 1);
    __m512i xv[kMaxTileCols][8], ncorr[kMaxTileCols][8];
    __m512 dx[kMaxTileCols];
    for (int col = 0; col < nc; ++col) {
      const uint8_t* ac = ap + col * act_stride + b0 * kABytes;
      for (int i = 0; i < pairs; ++i) {
        xv[col][i] = load_block_pair(ac, kABytes, 4, i, cnt);
        ncorr[col][i] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                         _mm512_dpbusd_epi32(_mm512_setzero_si512(), c80, xv[col][i]));
      }
      dx[col] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx_a, ac, 1);
    }
    for (int r = 0; r < nr; ++r) {
      const uint8_t* wc = wp + r * w_stride + b0 * kWBytes;
      __m512i v[kMaxTileCols][8];
      for (int i = 0; i < 8; ++i) {
        if (i >= pairs) {
          for (int col = 0; col < nc; ++col) v[col][i] = _mm512_setzero_si512();
          continue;
        }
        const __m512i uv = _mm512_xor_si512(load_block_pair(wc, kWBytes, 2, i, cnt), c80);
        for (int col = 0; col < nc; ++col) v[col][i] = _mm512_dpbusd_epi32(ncorr[col][i], uv, xv[col][i]);
      }
      const __m512i dwi = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx_w, wc, 1);
      const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dwi));
      for (int col = 0; col < nc; ++col) {
        const __m512 val = _mm512_mul_ps(_mm512_mul_ps(dw, dx[col]), _mm512_cvtepi32_ps(reduce8x8(v[col])));
        acc[r][col][c & 1] = _mm512_mask_add_ps(acc[r][col][c & 1], m, acc[r][col][c & 1], val);
      }
    }
  }
  for (int r = 0; r < nr; ++r)
    for (int col = 0; col < nc; ++col) out[col * out_stride + r] = reduce_partials(acc[r][col][0], acc[r][col][1]);
}

// A[g] lane j = dword g of the 32 bytes at p + roff[j] (j < 16), by loads and shuffles instead of
// eight 16-lane gathers: z[i] holds two rows (low and high 256 bits); an 8×8 dword transpose inside
// each 256-bit half (unpack 32, unpack 64) and a 128-bit lane shuffle give A[g] as [rows of z 0-3's
// low halves | their high halves | z 4-7's low | high], 4 rows each — so the rows are paired as
// (0-3 with 4-7) and (8-11 with 12-15) to come out in order.
inline void transpose_rows16(const uint8_t* p, const int32_t* roff, __m512i A[8]) {
  constexpr int kLow[8] = {0, 1, 2, 3, 8, 9, 10, 11}, kHigh[8] = {4, 5, 6, 7, 12, 13, 14, 15};
  __m512i z[8];
  for (int i = 0; i < 8; ++i)
    z[i] = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + roff[kLow[i]]))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + roff[kHigh[i]])), 1);
  // Per 128-bit lane (4 dwords of one row in each z): t = unpack of z pairs, u = of t pairs.
  __m512i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]);      // r0d0 r1d0 r0d1 r1d1 | ...
    t[2 * i + 1] = _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]);  // r0d2 r1d2 r0d3 r1d3 | ...
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);      // r0d0 r1d0 r2d0 r3d0
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);      // r0d1 r1d1 r2d1 r3d1
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);  // r0d2 ..
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);  // r0d3 ..
  }
  // u[k] (z 0-3) and u[4 + k] (z 4-7), k < 4: 128-bit lanes [low rows: dword k | dword 4+k | high
  // rows: dword k | dword 4+k]. With kLow/kHigh: u[k] low rows 0-3, high rows 4-7; u[4+k] 8-11, 12-15.
  for (int k = 0; k < 4; ++k) {
    A[k] = _mm512_shuffle_i32x4(u[k], u[4 + k], _MM_SHUFFLE(2, 0, 2, 0));      // [u0.l0 u0.l2 u1.l0 u1.l2]
    A[4 + k] = _mm512_shuffle_i32x4(u[k], u[4 + k], _MM_SHUFFLE(3, 1, 3, 1));  // [u0.l1 u0.l3 u1.l1 u1.l3]
  }
}

// nr (1..16) rows × nc (1..kMaxTileCols) columns with the rows in the 16 lanes of a vector, so no
// per-block horizontal reduction: per block b, A_g (g < 8) holds dword g of each row's 32 quants
// (transpose_rows16), offset to unsigned (xor 0x80); per column, 8 vpdpbusd with the column's dword g
// broadcast give all 16 rows' isums at once, from an accumulator that starts at −128·Σx (the
// offset's correction, per column and block, computed for 64 blocks at a time as the 4-row tile
// does). Then v = (d_w·d_x)·(float)isum for the 16 rows is added into partial[b % 32] of the column
// (kept in memory, lanes = rows), and the 32 partials fold with Partials32's tree, elementwise over
// the rows. Every (row, column) gets vec_dot_q8_0_scalar's integers, products and additions in its
// order. Rows ≥ nr read row 0 (valid memory) and are dropped.
void vec_dot_tile16_q8_0_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride,
                                int nr, int nc, float* out, int64_t out_stride) {
  if (15 * w_stride > INT32_MAX - 64) {  // gather offsets are int32: the 4-row tile instead
    for (int r = 0; r < nr; r += 4)
      vec_dot_tile_q8_0_avx512(n, static_cast<const uint8_t*>(w) + r * w_stride, w_stride, act, act_stride,
                               std::min(4, nr - r), nc, out + r, out_stride);
    return;
  }
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(act);
  const int64_t nb = n / 32;
  alignas(64) int32_t roff[16];
  for (int r = 0; r < 16; ++r) roff[r] = static_cast<int32_t>((r < nr ? r : 0) * w_stride);
  const __m512i vroff = _mm512_load_si512(roff);
  const __m512i c80 = _mm512_set1_epi8(static_cast<char>(0x80));
  alignas(64) float part[kMaxTileCols][32][16];
  for (int c = 0; c < nc; ++c)
    for (int i = 0; i < 32; ++i) _mm512_store_ps(part[c][i], _mm512_setzero_ps());
  constexpr int64_t kChunk = 64;  // blocks whose corrections are computed together
  alignas(64) int32_t ncorr[kMaxTileCols][kChunk];
  for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
    const int64_t b1 = std::min(nb, b0 + kChunk);
    for (int c = 0; c < nc; ++c) {
      const uint8_t* ac = ap + c * act_stride;
      for (int64_t s = b0; s < b1; s += 16) {  // lane j = −128·Σx of block s + j
        const int cnt = static_cast<int>(std::min<int64_t>(16, b1 - s));
        __m512i v[8];
        for (int i = 0; i < 8; ++i) {
          if (2 * i >= cnt) {
            v[i] = _mm512_setzero_si512();
            continue;
          }
          v[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c80, load_block_pair(ac + s * kABytes, kABytes, 4, i, cnt));
        }
        _mm512_store_si512(&ncorr[c][s - b0], _mm512_sub_epi32(_mm512_setzero_si512(), reduce8x8(v)));
      }
    }
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t* wb = wp + b * kWBytes;
      __m512i A[8];
      transpose_rows16(wb + 2, roff, A);
      for (int g = 0; g < 8; ++g) A[g] = _mm512_xor_si512(A[g], c80);
      const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(vroff, wb, 1)));
      for (int c = 0; c < nc; ++c) {
        const uint8_t* xb = ap + c * act_stride + b * kABytes;
        int32_t xw[8];
        std::memcpy(xw, xb + 4, sizeof xw);
        __m512i acc = _mm512_set1_epi32(ncorr[c][b - b0]);
        for (int g = 0; g < 8; ++g) acc = _mm512_dpbusd_epi32(acc, A[g], _mm512_set1_epi32(xw[g]));
        float dx;
        std::memcpy(&dx, xb, sizeof dx);
        const __m512 v = _mm512_mul_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(acc));
        float* p = part[c][b % 32];
        _mm512_store_ps(p, _mm512_add_ps(_mm512_load_ps(p), v));
      }
    }
  }
  for (int c = 0; c < nc; ++c) {
    for (int s = 16; s >= 1; s >>= 1)
      for (int i = 0; i < s; ++i)
        _mm512_store_ps(part[c][i], _mm512_add_ps(_mm512_load_ps(part[c][i]), _mm512_load_ps(part[c][i + s])));
    for (int r = 0; r < nr; ++r) out[c * out_stride + r] = part[c][0][r];
  }
}

}  // namespace dsv4::cpu
