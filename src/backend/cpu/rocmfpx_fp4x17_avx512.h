// backend/cpu/rocmfpx_fp4x17_avx512.h — multi-row AVX-512 VBMI dot kernel shared by the two 17-byte
// single-scale FP4 block formats: Q4_0_ROCMFP4_FAST (type 101: qs[16] e) and MXFP4 (type 39:
// e qs[16]). Include only from *_avx512.cpp files. Functions are compiled for avx512vbmi on top of
// the file's AVX-512 flags; only the kAvx512Vbmi level's kernels (*_avx512vbmi) call them.
//
// ACCUMULATION ORDER — identical to both scalar references (rocmfpx.cpp / mxfp4.h):
//   v_b = (scale(e_b) * d_x) * (float)isum_b,  partial[b % 32] += v_b (blocks increasing), tree reduce.
// Blocks go in chunks of 16; chunk c feeds accumulator acc[c & 1]. Inside a chunk the lanes are
// permuted: dword d = 4l + k holds block j = 4k + l (the 4x4 transpose, self-inverse). Every per-lane
// float operation is the scalar one for that block, so the permutation changes no bits; it is undone
// once (after acc0 + acc1, the s = 16 step, which is lane-wise) before the s = 8 .. 1 steps.
//
// Integer dot (exact). Quad k = blocks 4k .. 4k+3 (128-bit lane l = block 4k + l):
//   Q_k  = the 16 qs bytes of each block (one vpermt2b from two 64-byte loads of the chunk)
//   uA_k = T[Q_k & 15], uB_k = T[Q_k >> 4], T = level + K (unsigned, vpermb with a 64-entry table)
//   XA_k / XB_k = activation bytes 0..15 / 16..31 of the same blocks
//   P_k = vpdpbusd(vpdpbusd(0, uA_k, XA_k), uB_k, XB_k)           (Σ u·x, 4 dwords per block)
//   isum = hsum4(P_0..P_3) + corr,  corr = -K · Σ x  per block   (row-independent, computed once)
// corr comes from vpdpbusd on (x ^ 0x80) = x + 128 as unsigned bytes, so x = -128 is exact.
// The activation-side vectors (XA, XB, corr, d_x) are built once per chunk into a buffer and reused
// for every row of the call.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/quant.h"
#include "backend/cpu/stream_prefetch.h"

#pragma GCC push_options
#pragma GCC target("avx512vbmi")

namespace dsv4::cpu::fp4x17 {

constexpr int64_t kBytes = 17;
constexpr int kChunk = 16;
constexpr int64_t kChunkBytes = kChunk * kBytes;  // 272
constexpr int kSegChunks = 16;                     // chunks of activation prepared at a time

struct alignas(64) Bytes64 {
  uint8_t b[64];
};

// block of dword lane d (d = 4l + k -> block 4k + l).
constexpr int lane_block(int d) { return 4 * (d & 3) + (d >> 2); }

// vpermt2b index for quad k: byte 16l + i = chunk byte 17(4k + l) + kQsOff + i, relative to 64k.
template <int kQsOff>
constexpr Bytes64 quad_index(int k) {
  Bytes64 t{};
  for (int l = 0; l < 4; ++l)
    for (int i = 0; i < 16; ++i) t.b[16 * l + i] = static_cast<uint8_t>(17 * (4 * k + l) + kQsOff + i - 64 * k);
  return t;
}

// Scale-byte gather: source s (0: chunk bytes 0..127, 1: 128..255, 2: 256..319), byte 4d gets the
// scale byte of block lane_block(d) when that byte lies in source s.
template <int kEOff>
constexpr Bytes64 scale_index(int s) {
  Bytes64 t{};
  for (int d = 0; d < 16; ++d) {
    const int pos = 17 * lane_block(d) + kEOff;
    t.b[4 * d] = static_cast<uint8_t>((pos - 128 * s) & 127);
  }
  return t;
}
template <int kEOff>
constexpr uint64_t scale_mask(int s) {
  uint64_t m = 0;
  for (int d = 0; d < 16; ++d) {
    const int pos = 17 * lane_block(d) + kEOff;
    const int src = pos >= 256 ? 2 : pos >= 128 ? 1 : 0;
    if (src == s) m |= 1ull << (4 * d);
  }
  return m;
}

// Activation-side data of one chunk (640 bytes).
struct alignas(64) ActChunk {
  __m512i xa[4];
  __m512i xb[4];
  __m512i corr;
  __m512 dx;
};

inline __m512i hsum4(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
}

inline __m512i load_quad(const int8_t* p0, const int8_t* p1, const int8_t* p2, const int8_t* p3) {
  __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0)));
  v = _mm512_mask_broadcast_i32x4(v, 0x00F0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1)));
  v = _mm512_mask_broadcast_i32x4(v, 0x0F00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p2)));
  return _mm512_mask_broadcast_i32x4(v, 0xF000, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p3)));
}

template <int kK>
inline void prep_chunk(const BlockQ8_0Act* a, ActChunk* out) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i negk = _mm512_set1_epi8(static_cast<char>(-kK));
  __m512i c[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const BlockQ8_0Act* q = a + 4 * k;
    const __m512i xa = load_quad(q[0].qs, q[1].qs, q[2].qs, q[3].qs);
    const __m512i xb = load_quad(q[0].qs + 16, q[1].qs + 16, q[2].qs + 16, q[3].qs + 16);
    out->xa[k] = xa;
    out->xb[k] = xb;
    // 1024K + Σ_8 (x + 128)(-K) = -K Σ_8 x per dword.
    c[k] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_set1_epi32(1024 * kK), _mm512_xor_si512(xa, flip), negk),
                               _mm512_xor_si512(xb, flip), negk);
  }
  out->corr = hsum4(c[0], c[1], c[2], c[3]);
  // lane d = block lane_block(d)
  out->dx = _mm512_setr_ps(a[0].d, a[4].d, a[8].d, a[12].d, a[1].d, a[5].d, a[9].d, a[13].d, a[2].d, a[6].d,
                           a[10].d, a[14].d, a[3].d, a[7].d, a[11].d, a[15].d);
}

// T: traits with kQsOff, kEOff, kK, table (Bytes64 level + K, period 16) and
// static __m512 scale(__m512i e)  (e: one scale byte per dword, upper bytes zero).
template <class T>
[[gnu::always_inline]] inline __m512 row_chunk(const uint8_t* w, const ActChunk& x, __m512 acc) {
  static constexpr Bytes64 kQ0 = quad_index<T::kQsOff>(0), kQ1 = quad_index<T::kQsOff>(1),
                           kQ2 = quad_index<T::kQsOff>(2), kQ3 = quad_index<T::kQsOff>(3);
  static constexpr Bytes64 kS0 = scale_index<T::kEOff>(0), kS1 = scale_index<T::kEOff>(1),
                           kS2 = scale_index<T::kEOff>(2);
  constexpr uint64_t kM0 = scale_mask<T::kEOff>(0), kM1 = scale_mask<T::kEOff>(1), kM2 = scale_mask<T::kEOff>(2);
  const __m512i z0 = _mm512_loadu_si512(w);
  const __m512i z1 = _mm512_loadu_si512(w + 64);
  const __m512i z2 = _mm512_loadu_si512(w + 128);
  const __m512i z3 = _mm512_loadu_si512(w + 192);
  const __m512i z4 = _mm512_maskz_loadu_epi8(0xFFFF, w + 256);
  const __m512i tbl = _mm512_load_si512(T::kTable.b);
  const __m512i q0 = _mm512_permutex2var_epi8(z0, _mm512_load_si512(kQ0.b), z1);
  const __m512i q1 = _mm512_permutex2var_epi8(z1, _mm512_load_si512(kQ1.b), z2);
  const __m512i q2 = _mm512_permutex2var_epi8(z2, _mm512_load_si512(kQ2.b), z3);
  const __m512i q3 = _mm512_permutex2var_epi8(z3, _mm512_load_si512(kQ3.b), z4);
  __m512i p[4];
  const __m512i q[4] = {q0, q1, q2, q3};
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m512i ua = _mm512_permutexvar_epi8(q[k], tbl);
    const __m512i ub = _mm512_permutexvar_epi8(_mm512_srli_epi16(q[k], 4), tbl);
    p[k] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ua, x.xa[k]), ub, x.xb[k]);
  }
  const __m512i isum = _mm512_add_epi32(hsum4(p[0], p[1], p[2], p[3]), x.corr);
  __m512i e = _mm512_maskz_permutex2var_epi8(kM0, z0, _mm512_load_si512(kS0.b), z1);
  e = _mm512_or_si512(e, _mm512_maskz_permutex2var_epi8(kM1, z2, _mm512_load_si512(kS1.b), z3));
  if constexpr (kM2 != 0) e = _mm512_or_si512(e, _mm512_maskz_permutexvar_epi8(kM2, _mm512_load_si512(kS2.b), z4));
  const __m512 s = T::scale(e);
  return _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(s, x.dx), _mm512_cvtepi32_ps(isum)));
}

inline float finish(__m512 acc0, __m512 acc1) {
  const __m512 s16p = _mm512_add_ps(acc0, acc1);
  // natural lane i <- permuted lane 4(i & 3) + (i >> 2) (the transpose is its own inverse)
  const __m512 s16 = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), s16p);
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(s16), _mm512_extractf32x8_ps(s16, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

// The unpermuted Partials32 tree of two 16-lane accumulators (lane i = partial i / 16 + i).
inline float reduce_natural(__m512 acc0, __m512 acc1) {
  const __m512 s16 = _mm512_add_ps(acc0, acc1);
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(s16), _mm512_extractf32x8_ps(s16, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

// Generic multi-row driver over 16-block chunks. K provides: Act (activation-side chunk data),
// kBlockBytes, static prep(const BlockQ8_0Act*, Act*), static __m512 row(const uint8_t* w, const Act&,
// __m512 acc) (reads exactly 16 * kBlockBytes bytes of w), static float finish(__m512, __m512).
// Chunk c of every row feeds that row's acc[c & 1]; a partial last chunk runs on zero-padded copies.
template <class K>
void rows_driver(int64_t n, const void* wv, int64_t w_stride, const void* act, int nr, float* out) {
  constexpr int64_t kCB = kChunk * K::kBlockBytes;
  const auto* w = static_cast<const uint8_t*>(wv);
  const auto* a = static_cast<const BlockQ8_0Act*>(act);
  const int64_t nb = n / 32;
  const int64_t nchunks = (nb + kChunk - 1) / kChunk;
  const int64_t full = nb / kChunk;
  const int64_t rest = nb - full * kChunk;
  __m512 acc[4][2];
  for (int r = 0; r < 4; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  typename K::Act buf[kSegChunks];
  for (int64_t c0 = 0; c0 < nchunks; c0 += kSegChunks) {
    const int64_t c1 = std::min<int64_t>(nchunks, c0 + kSegChunks);
    const int64_t cf = std::min<int64_t>(c1, full);  // full chunks of this segment end here
    for (int64_t c = c0; c < cf; ++c) K::prep(a + c * kChunk, &buf[c - c0]);
    if (c1 > cf) {  // the partial last chunk: zero-padded activations (zero blocks add +0.0)
      alignas(64) BlockQ8_0Act abuf[kChunk];
      std::memset(static_cast<void*>(abuf), 0, sizeof(abuf));
      std::memcpy(static_cast<void*>(abuf), a + full * kChunk, static_cast<size_t>(rest) * sizeof(BlockQ8_0Act));
      K::prep(abuf, &buf[cf - c0]);
    }
    for (int r = 0; r < nr; ++r) {
      const uint8_t* wr = w + r * w_stride;
      __m512 a0 = acc[r][0], a1 = acc[r][1];
      int64_t c = c0;  // c0 is even (kSegChunks is)
      for (; c + 1 < cf; c += 2) {
        prefetch_ahead(wr + c * kCB, 2 * kCB);  // stream_prefetch.h
        a0 = K::row(wr + c * kCB, buf[c - c0], a0);
        a1 = K::row(wr + (c + 1) * kCB, buf[c + 1 - c0], a1);
      }
      if (c < cf) a0 = K::row(wr + c * kCB, buf[c - c0], a0);
      if (c1 > cf) {
        alignas(64) uint8_t wbuf[kCB];
        std::memset(wbuf, 0, sizeof(wbuf));
        std::memcpy(wbuf, wr + full * kCB, static_cast<size_t>(rest * K::kBlockBytes));
        if ((full & 1) == 0)
          a0 = K::row(wbuf, buf[cf - c0], a0);
        else
          a1 = K::row(wbuf, buf[cf - c0], a1);
      }
      acc[r][0] = a0;
      acc[r][1] = a1;
    }
  }
  for (int r = 0; r < nr; ++r) out[r] = K::finish(acc[r][0], acc[r][1]);
}

template <class T>
struct Fp4x17Kernel {
  using Act = ActChunk;
  static constexpr int64_t kBlockBytes = kBytes;
  static void prep(const BlockQ8_0Act* a, Act* out) { prep_chunk<T::kK>(a, out); }
  static __m512 row(const uint8_t* w, const Act& x, __m512 acc) { return row_chunk<T>(w, x, acc); }
  static float finish(__m512 a0, __m512 a1) { return fp4x17::finish(a0, a1); }
};

template <class T>
void dot_rows(int64_t n, const void* wv, int64_t w_stride, const void* act, int nr, float* out) {
  rows_driver<Fp4x17Kernel<T>>(n, wv, w_stride, act, nr, out);
}

}  // namespace dsv4::cpu::fp4x17

#pragma GCC pop_options
