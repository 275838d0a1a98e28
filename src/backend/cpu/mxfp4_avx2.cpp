// backend/cpu/mxfp4_avx2.cpp — MXFP4 x Q8_0 vec_dot, AVX2.
//
// Accumulation order = mxfp4.h, bit-identical to mxfp4_vec_dot_scalar: eight consecutive blocks
// 8t..8t+7 give one vector of exact int32 dots (lane j = block 8t+j); converted, scaled by
// (e8m0_half(e) * d_x) * (float)isum and added into acc[t % 4] (acc[k] = partials 8k..8k+7); a short
// last chunk adds only its valid lanes. Reduction: (acc0 + acc2, acc1 + acc3) (s = 16), their sum
// (s = 8), 128-bit halves (s = 4), then s = 2 and s = 1 — Partials32::reduce's tree.
//
// Integer dot (exact): nibbles -> kvalue + 12 (unsigned) with vpshufb; vpmaddubsw(kv + 12, q) −
// vpmaddubsw(12, q) gives exact int16 pair sums Σ kv·q (block_dot), then vpmaddwd with ones -> int32.
// (A 4-row vec_dot_rows sharing the activation work measured 14.3 vs 13.0 GB/s per thread from L2 but
// streamed DRAM worse, 2 threads 13 vs 25 GB/s, so matrix x vector stays on one row at a time.)
// Matrix x vector goes through prepared activations (prepare_act, once per call): the blocks, then per
// block 12·Σq and d_x, so the per-block work loses the correction's vpmaddubsw and vpsubw (the same
// exact isum: Σ (kvalue + 12)·q − 12·Σq) and each block's int16 pair sums are added by
// sum_lanes8_i16_avx2; 15.0 -> 18.6 GB/s per thread from L2 on Zen 4. It asks for the weights one page
// ahead (stream_prefetch.h): 1 thread from DRAM 16.1-16.6 -> 16.6-16.7 GB/s at 4096 x 4096, 14.6-15.0 ->
// 15.8 at 4096 x 2048; 2 threads 30.1-30.9 -> 32.2-32.4; no change from L2.
//
// The tile form (matmul, mxfp4_vec_dot_tile8_avx2) puts 8 rows in the lanes instead, with the same
// integers, products and additions per (row, column).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/mxfp4.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/simd_reduce.h"
#include "backend/cpu/stream_prefetch.h"
#include "backend/cpu/tile8_avx2.h"

namespace dsv4::cpu {
namespace {

constexpr int64_t kWBytes = sizeof(BlockMxfp4);    // 17: e, then qs[16]
constexpr int64_t kABytes = sizeof(BlockQ8_0Act);  // 36: d, then qs[32]

// e8m0_half (blocks.h) per dword, e in 0..255: e < 2 gives the subnormal bits 0x00200000 << e, else
// (e − 1) << 23.
inline __m256 e8m0_half_avx2(__m256i e) {
  const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
  const __m256i big_bits = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i small_bits = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(big_bits, small_bits, small));
}

// ---- vec_dot / vec_dot_rows: blocks in vector lanes -----------------------------------------------

// 8 int32 partial dots of one block: the 16 qs bytes broadcast to both 128-bit halves, the high half
// shifted right by 4 (vpsrlvd), masked to nibbles and looked up as u = kvalue + 12 (0..24, unsigned);
// vpmaddubsw(u, q) − corr, corr = vpmaddubsw(12, q) of the activation block, is Σ kvalue·q per int16 pair
// (each term ≤ 2·24·128, the difference ≤ 3072: exact, no saturation, q = −128 included), then vpmaddwd
// with ones -> int32. (sum_lanes8_i16_avx2 on the int16 pairs instead measured slower here, 15.6 -> 14.9
// GB/s from L2; the prepared kernel below gains from it.)
inline __m256i block_dot(const uint8_t* qs, const uint8_t* xq, __m256i corr, __m256i utbl, __m256i shift, __m256i low4) {
  const __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i u = _mm256_shuffle_epi8(utbl, _mm256_and_si256(_mm256_srlv_epi32(raw, shift), low4));
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  return _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(u, q), corr), _mm256_set1_epi16(1));
}

// e8m0_half of the exponent bytes of the cnt (≤ 8) blocks at w (lanes ≥ cnt: e = 0), gathered in a
// general-purpose register (a vpgatherdd or stack copies stall; the integer pipes are idle here).
inline __m256 e8m0_half_blocks8(const uint8_t* w, int cnt) {
  uint64_t e = 0;
  for (int j = 0; j < 8; ++j)
    if (j < cnt) e |= static_cast<uint64_t>(w[j * kWBytes]) << (8 * j);
  return e8m0_half_avx2(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(e))));
}

// One chunk of cnt (≤ 8) blocks at wc / ac: a += (e8m0_half(e) · d_x) · (float)isum in its first cnt lanes.
// Full chunks (the kernel's loop) have cnt = 8 as a constant: no per-block tests.
__attribute__((always_inline)) inline void chunk(__m256& a, const uint8_t* wc, const uint8_t* ac, int cnt) {
  const __m256i utbl = _mm256_broadcastsi128_si256(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  const __m256i shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);  // low half: low nibbles, high half: high
  const __m256i low4 = _mm256_set1_epi8(0x0f), twelve = _mm256_set1_epi8(12);
  __m256i p[8];
  for (int j = 0; j < 8; ++j) {
    if (j < cnt) {
      const __m256i corr =
          _mm256_maddubs_epi16(twelve, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ac + j * kABytes + 4)));
      p[j] = block_dot(wc + j * kWBytes + 1, ac + j * kABytes + 4, corr, utbl, shift, low4);
    } else {
      p[j] = _mm256_setzero_si256();
    }
  }
  __m256 dx;
  if (cnt == 8) {
    dx = f32_at_stride_avx2(ac, kABytes);
  } else {
    alignas(32) float dxa[8] = {};
    for (int j = 0; j < cnt; ++j) std::memcpy(&dxa[j], ac + j * kABytes, 4);
    dx = _mm256_load_ps(dxa);
  }
  const __m256 isum = _mm256_cvtepi32_ps(sum_lanes8_avx2(p));
  const __m256 v = _mm256_mul_ps(_mm256_mul_ps(e8m0_half_blocks8(wc, cnt), dx), isum);
  add_first_lanes_avx2(a, v, cnt);
}

// ---- prepared activations (matrix x vector): the correction and d_x per block computed once -------
//
// A prepared row (mxfp4_prepared_act_bytes) is the nb activation blocks unchanged (the tile reads them),
// then int32 corr[nb8] = 12·Σ q of block b and float dx[nb8] (nb8 = nb rounded up to 8, zero padded).
// Σ (kvalue + 12)·q − 12·Σ q = Σ kvalue·q: the same exact isum as block_dot's int16 correction, so the
// per-block work drops to vpsrlvd, vpand, vpshufb, vpmaddubsw, vpmaddwd (pairs ≤ 2·24·128: exact).
struct PreparedAct {
  const uint8_t* blocks;
  const int32_t* corr;
  const float* dx;
};

inline PreparedAct prepared_view(const void* prepared, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(prepared);
  const int64_t nb = n / 32, nb8 = (nb + 7) / 8 * 8, corr_off = (nb * kABytes + 31) / 32 * 32;
  return {p, reinterpret_cast<const int32_t*>(p + corr_off), reinterpret_cast<const float*>(p + corr_off + 4 * nb8)};
}

// One chunk of cnt (≤ 8) blocks on a prepared row (chunk's order and float steps, bit for bit).
__attribute__((always_inline)) inline void chunk_prepared(__m256& a, const uint8_t* wc, const uint8_t* ac,
                                                          const int32_t* corr, const float* dxp, int cnt) {
  const __m256i utbl = _mm256_broadcastsi128_si256(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  const __m256i shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256i p[8];
  for (int j = 0; j < 8; ++j) {
    if (j < cnt) {
      const __m256i raw = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wc + j * kWBytes + 1)));
      const __m256i u = _mm256_shuffle_epi8(utbl, _mm256_and_si256(_mm256_srlv_epi32(raw, shift), low4));
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ac + j * kABytes + 4));
      p[j] = _mm256_maddubs_epi16(u, q);  // int16 pairs, |pair| ≤ 2·24·128 = 6144
    } else {
      p[j] = _mm256_setzero_si256();
    }
  }
  const __m256i isum = _mm256_sub_epi32(sum_lanes8_i16_avx2(p), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr)));
  const __m256 v = _mm256_mul_ps(_mm256_mul_ps(e8m0_half_blocks8(wc, cnt), _mm256_loadu_ps(dxp)), _mm256_cvtepi32_ps(isum));
  add_first_lanes_avx2(a, v, cnt);
}

float vec_dot_prepared(int64_t n, const uint8_t* wp, const PreparedAct& x) {
  const int64_t nb = n / 32;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t b = 0;
  for (; b + 32 <= nb; b += 32) {
    prefetch_ahead(wp + b * kWBytes, 32 * kWBytes);
    chunk_prepared(a0, wp + b * kWBytes, x.blocks + b * kABytes, x.corr + b, x.dx + b, 8);
    chunk_prepared(a1, wp + (b + 8) * kWBytes, x.blocks + (b + 8) * kABytes, x.corr + b + 8, x.dx + b + 8, 8);
    chunk_prepared(a2, wp + (b + 16) * kWBytes, x.blocks + (b + 16) * kABytes, x.corr + b + 16, x.dx + b + 16, 8);
    chunk_prepared(a3, wp + (b + 24) * kWBytes, x.blocks + (b + 24) * kABytes, x.corr + b + 24, x.dx + b + 24, 8);
  }
  __m256* acc[4] = {&a0, &a1, &a2, &a3};
  for (int k = 0; b < nb; b += 8, ++k)
    chunk_prepared(*acc[k], wp + b * kWBytes, x.blocks + b * kABytes, x.corr + b, x.dx + b,
                   static_cast<int>(std::min<int64_t>(8, nb - b)));
  return reduce_partials32_avx2(a0, a1, a2, a3);
}

}  // namespace

// mxfp4.h's order: chunk t = blocks 8t..8t+7 (lane j = block 8t + j) -> accumulator t % 4, four full
// chunks per iteration (the accumulators stay in registers), then the last up to 4 chunks.
float mxfp4_vec_dot_avx2(int64_t n, const void* w, const void* act) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(act);
  const int64_t nb = n / 32;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t b = 0;
  for (; b + 32 <= nb; b += 32) {
    chunk(a0, wp + b * kWBytes, ap + b * kABytes, 8);
    chunk(a1, wp + (b + 8) * kWBytes, ap + (b + 8) * kABytes, 8);
    chunk(a2, wp + (b + 16) * kWBytes, ap + (b + 16) * kABytes, 8);
    chunk(a3, wp + (b + 24) * kWBytes, ap + (b + 24) * kABytes, 8);
  }
  __m256* acc[4] = {&a0, &a1, &a2, &a3};
  for (int k = 0; b < nb; b += 8, ++k)
    chunk(*acc[k], wp + b * kWBytes, ap + b * kABytes, static_cast<int>(std::min<int64_t>(8, nb - b)));
  return reduce_partials32_avx2(a0, a1, a2, a3);
}

void mxfp4_vec_dot_rows_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  for (int r = 0; r < nr; ++r) out[r] = mxfp4_vec_dot_avx2(n, static_cast<const uint8_t*>(w) + r * w_stride, act);
}

void mxfp4_prepare_act_avx2(const void* act, int64_t n, void* out) {
  const int64_t nb = n / 32, nb8 = (nb + 7) / 8 * 8;
  const auto* src = static_cast<const uint8_t*>(act);
  std::memcpy(out, src, static_cast<size_t>(nb * kABytes));
  const PreparedAct x = prepared_view(out, n);
  auto* corr = const_cast<int32_t*>(x.corr);
  auto* dx = const_cast<float*>(x.dx);
  for (int64_t b = 0; b < nb8; ++b) {
    int32_t s = 0;
    float d = 0.0f;
    if (b < nb) {
      const auto* blk = src + b * kABytes;
      for (int i = 0; i < 32; ++i) s += static_cast<int8_t>(blk[4 + i]);
      std::memcpy(&d, blk, 4);
    }
    corr[b] = 12 * s;
    dx[b] = d;
  }
}

// Row by row (one weight stream at a time: interleaved rows streamed DRAM at about half the rate).
void mxfp4_vec_dot_rows_prepared_avx2(int64_t n, const void* w, int64_t w_stride, const void* prepared, int nr,
                                      float* out) {
  const PreparedAct x = prepared_view(prepared, n);
  for (int r = 0; r < nr; ++r) out[r] = vec_dot_prepared(n, static_cast<const uint8_t*>(w) + r * w_stride, x);
}

namespace {

// ---- tile8: rows in vector lanes (matmul at AVX2) -------------------------------------------------
//
// R[k] lane r = dword k of row r's qs (bytes 4k .. 4k+3), by 16-byte loads (rows i and i + 4 in one
// vector) and a 4x4 dword transpose per 128-bit half. Its low nibbles are elements 4k .. 4k+3 (activation
// dword k), its high nibbles elements 16 + 4k .. (activation dword 4 + k). Rows ≥ nr read row 0 (valid
// memory) and are dropped.
inline void transpose_qs8(const uint8_t* qs, int64_t stride, int nr, __m256i R[4]) {
  __m256i z[4];
  for (int i = 0; i < 4; ++i) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + (i < nr ? i : 0) * stride));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + (i + 4 < nr ? i + 4 : 0) * stride));
    z[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);  // row i | row i + 4
  }
  const __m256i t0 = _mm256_unpacklo_epi32(z[0], z[1]);  // r0d0 r1d0 r0d1 r1d1 | r4d0 r5d0 r4d1 r5d1
  const __m256i t1 = _mm256_unpackhi_epi32(z[0], z[1]);  // r0d2 r1d2 r0d3 r1d3 | ..
  const __m256i t2 = _mm256_unpacklo_epi32(z[2], z[3]);  // r2d0 r3d0 r2d1 r3d1 | ..
  const __m256i t3 = _mm256_unpackhi_epi32(z[2], z[3]);
  R[0] = _mm256_unpacklo_epi64(t0, t2);  // d0 of rows 0-3 | rows 4-7
  R[1] = _mm256_unpackhi_epi64(t0, t2);
  R[2] = _mm256_unpacklo_epi64(t1, t3);
  R[3] = _mm256_unpackhi_epi64(t1, t3);
}

// e8m0_half of the exponent bytes at base + r·stride, r < 8 (rows ≥ nr read row 0).
inline __m256 e8m0_half_rows8(const uint8_t* base, int64_t stride, int nr) {
  return e8m0_half_avx2(ints8_avx2([&](int r) { return static_cast<int>(base[(r < nr ? r : 0) * stride]); }));
}

}  // namespace

// nr (1..8) rows × nc (1..kMxfp4Avx2TileCols) columns with the rows in the 8 lanes of a vector (no
// per-block horizontal reduction): per block b, the rows' nibbles transposed (transpose_qs8) and
// looked up as kvalues A_g and |kvalues| |A_g| (g = activation dword); per column, lane r = the block's
// exact int dot of row r (tile8_avx2.h); v = (e8m0_half(e) · d_x) · (float)isum for the 8 rows is
// added into partial[b % 32] of the column (kept in memory, lanes = rows), and the 32 partials fold
// with Partials32's tree, elementwise over the rows: mxfp4_vec_dot_scalar's integers, products and
// additions in its order for every (row, column). Needs activation quants in [−127, 127] (what
// quantize_act writes); vec_dot also takes −128. A block's decode serves every column of the call.
void mxfp4_vec_dot_tile8_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                              int nc, float* out, int64_t out_stride) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(act);
  const int64_t nb = n / 32;
  const __m256i tbl = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
  const __m256i abs_tbl = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12));
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  static_assert(kMxfp4Avx2TileCols % 8 == 0 && kMxfp4Avx2TileCols <= kMaxTileColsAny, "passes of 8 columns");
  alignas(32) float part[kMxfp4Avx2TileCols][32][8];
  tile8::zero_partials(part, nc);
  alignas(32) __m256i A[8], Aabs[8];
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = wp + b * kWBytes;
    __m256i R[4];
    transpose_qs8(wb + 1, w_stride, nr, R);
    for (int k = 0; k < 4; ++k) {
      const __m256i lo = _mm256_and_si256(R[k], low4), hi = _mm256_and_si256(_mm256_srli_epi16(R[k], 4), low4);
      A[k] = _mm256_shuffle_epi8(tbl, lo);
      Aabs[k] = _mm256_shuffle_epi8(abs_tbl, lo);
      A[4 + k] = _mm256_shuffle_epi8(tbl, hi);
      Aabs[4 + k] = _mm256_shuffle_epi8(abs_tbl, hi);
    }
    __asm__("" : : "r"(A), "r"(Aabs) : "memory");  // stored: tile8::block_cols reads them through pointers
    const __m256 dw = e8m0_half_rows8(wb, w_stride, nr);
    const uint8_t* xq[kMxfp4Avx2TileCols];
    for (int c = 0; c < nc; ++c) xq[c] = ap + c * act_stride + b * kABytes + 4;
    __m256i isum[kMxfp4Avx2TileCols];
    // |kvalue| ≤ 12: the 8 groups' pair sums add up in int16 (≤ 8·2·12·127 < 2^15) before one vpmaddwd.
    tile8::columns<true>(A, Aabs, xq, nc, isum);
    tile8::add_block(dw, xq, isum, nc, b, part);
  }
  tile8::fold(part, nc, nr, out, out_stride);
}

}  // namespace dsv4::cpu
