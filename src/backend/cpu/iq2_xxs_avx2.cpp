// backend/cpu/iq2_xxs_avx2.cpp — IQ2_XXS x Q8_K vec_dot and vec_dot_rows, AVX2.
//
// Accumulation order = iq2_xxs.h, bit-identical to iq2_xxs_vec_dot_scalar: eight consecutive
// super-blocks 8t..8t+7 give one vector of exact int32 dots (lane j = block 8t+j); converted, scaled by
// ((d_w * d_x) * (float)isum) * 0.125f and added into acc[t % 4] (acc[k] = partials 8k..8k+7); a short
// last chunk adds only its valid lanes. Reduction: (acc0 + acc2, acc1 + acc3) (s = 16), their sum
// (s = 8), 128-bit halves (s = 4), then s = 2 and s = 1 — Partials32::reduce's tree.
//
// Integer dot (exact) per 32-group. The activation side of a chunk is prepared once and shared by
// every row of a vec_dot_rows call: xa = |q8| (u8, <= 128) and bm = (q8 < 0 ? 0 : 1 << (i % 8)).
// The weight side, per super-block: the eight groups' sign fields become ksigns bytes in-register
// (7-bit fields spread to bytes, parity in bit 7; no table loads) and the (2·ls + 1) factors words;
// per group one vpshufb spreads its four sign bytes over the 32 positions, t = that & (1 << (i % 8)),
// and cmpeq(t, bm) is 0xff exactly where grid·sign·q8 is negative (weight sign XOR activation sign).
// The grid magnitudes (u8 <= 43) come from four 64-bit loads (broadcasts + blends, no shuffle port)
// and get that sign: b = vpsignb(grid, m | 1). vpmaddubsw(xa, b) = exact int16 pair sums of
// signed_grid · q8 (|.| <= 2·128·43 = 11008, q8 = −128 exact since |q8| is the unsigned operand);
// vpmaddwd with (2·ls + 1) -> int32.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/iq2_xxs.h"
#include "backend/cpu/iq2_xxs_tables.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/simd_reduce.h"
#include "backend/cpu/stream_prefetch.h"

namespace dsv4::cpu {
namespace {

constexpr int kChunk = 8;

// The activation side of one chunk: per super-block and group, |q8| and the sign-compare pattern.
struct alignas(32) ActChunk {
  __m256i xa[kChunk][8];
  __m256i bm[kChunk][8];
  float dx[kChunk];
};

// Constants in memory (GCC otherwise rebuilds 64-bit patterns in registers at every use).
struct alignas(32) Consts {
  uint8_t bits[32];       // 1 << (i % 8)
  uint8_t one[32];        // 1
  uint8_t spread[4][32];  // spread_index(k): low lane bytes 4k, 4k+1 (eight each), high lane 4k+2, 4k+3
};
constexpr Consts make_consts() {
  Consts c{};
  for (int i = 0; i < 32; ++i) {
    c.bits[i] = static_cast<uint8_t>(1u << (i % 8));
    c.one[i] = 1;
    for (int k = 0; k < 4; ++k) c.spread[k][i] = static_cast<uint8_t>(4 * k + i / 8);
  }
  return c;
}
alignas(32) constexpr Consts kConsts = make_consts();

inline __m256i load_const(const uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256i bit_pattern() { return load_const(kConsts.bits); }

inline void prep_act(const BlockQ8_K* x, int count, ActChunk& a) {
  const __m256i bits = bit_pattern();
  for (int k = 0; k < count; ++k) {
    for (int g = 0; g < 8; ++g) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k].qs + 32 * g));
      a.xa[k][g] = _mm256_abs_epi8(q);
      a.bm[k][g] = _mm256_andnot_si256(_mm256_cmpgt_epi8(_mm256_setzero_si256(), q), bits);
    }
    a.dx[k] = x[k].d;
  }
  for (int k = count; k < kChunk; ++k) a.dx[k] = 0.0f;
}

// Group g of a super-block: position k of g inside its half (halves: groups {0,1,4,5} / {2,3,6,7}).
constexpr int kPos[8] = {0, 1, 0, 1, 2, 3, 2, 3};

inline __m256i grid4(const uint8_t* idx) {
  const uint64_t* grid = iq2xxs_grid;
  const __m256i e0 = _mm256_set1_epi64x(static_cast<long long>(grid[idx[0]]));
  const __m256i e1 = _mm256_set1_epi64x(static_cast<long long>(grid[idx[1]]));
  const __m256i e2 = _mm256_set1_epi64x(static_cast<long long>(grid[idx[2]]));
  const __m256i e3 = _mm256_set1_epi64x(static_cast<long long>(grid[idx[3]]));
  return _mm256_blend_epi32(_mm256_blend_epi32(e0, e1, 0x0c), _mm256_blend_epi32(e2, e3, 0xc0), 0xf0);
}

// 8 int32 partial sums of one super-block's integer dot against the prepared activation block.
__attribute__((always_inline)) inline __m256i block_dot(const BlockIq2Xxs& w, const __m256i* xa, const __m256i* bm) {
  const uint8_t* qs = reinterpret_cast<const uint8_t*>(w.qs);
  const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));       // groups 0-3
  const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32));  // groups 4-7
  // a1 words: lane 0 = groups 0, 1, 4, 5; lane 1 = groups 2, 3, 6, 7.
  const __m256i a1 = _mm256_castps_si256(
      _mm256_shuffle_ps(_mm256_castsi256_ps(v0), _mm256_castsi256_ps(v1), _MM_SHUFFLE(3, 1, 3, 1)));
  // Sign fields (7 bits each) to bytes, then the parity bit 7 (ksigns_iq2xs).
  __m256i x = _mm256_and_si256(a1, _mm256_set1_epi32(0x7f));
  x = _mm256_or_si256(x, _mm256_and_si256(_mm256_slli_epi32(a1, 1), _mm256_set1_epi32(0x7f00)));
  x = _mm256_or_si256(x, _mm256_and_si256(_mm256_slli_epi32(a1, 2), _mm256_set1_epi32(0x7f0000)));
  x = _mm256_or_si256(x, _mm256_and_si256(_mm256_slli_epi32(a1, 3), _mm256_set1_epi32(0x7f000000)));
  __m256i par = _mm256_xor_si256(x, _mm256_srli_epi32(x, 4));
  par = _mm256_xor_si256(par, _mm256_srli_epi32(par, 2));
  par = _mm256_xor_si256(par, _mm256_srli_epi32(par, 1));
  x = _mm256_or_si256(x, _mm256_and_si256(_mm256_slli_epi32(par, 7), _mm256_set1_epi32(static_cast<int>(0x80808080u))));
  // (2·ls + 1) in both words of each dword: bit 27 shifted to bit 0 is overwritten by the 1.
  __m256i sc = _mm256_or_si256(_mm256_srli_epi32(a1, 27), _mm256_set1_epi32(1));
  sc = _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16));
  const __m256i sx[2] = {_mm256_permute2x128_si256(x, x, 0x00), _mm256_permute2x128_si256(x, x, 0x11)};
  const __m256i ss[2] = {_mm256_permute2x128_si256(sc, sc, 0x00), _mm256_permute2x128_si256(sc, sc, 0x11)};
  const __m256i bits = bit_pattern(), one = load_const(kConsts.one);
  __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) {
    const int half = (g >> 1) & 1, k = kPos[g];
    const __m256i gv = grid4(qs + 8 * g);
    const __m256i sb = _mm256_shuffle_epi8(sx[half], load_const(kConsts.spread[k]));
    const __m256i m = _mm256_cmpeq_epi8(_mm256_and_si256(sb, bits), _mm256_load_si256(bm + g));
    const __m256i b = _mm256_sign_epi8(gv, _mm256_or_si256(m, one));
    const __m256i d = _mm256_maddubs_epi16(_mm256_load_si256(xa + g), b);
    __m256i s;
    switch (k) {  // vpshufd needs an immediate
      case 0: s = _mm256_shuffle_epi32(ss[half], 0x00); break;
      case 1: s = _mm256_shuffle_epi32(ss[half], 0x55); break;
      case 2: s = _mm256_shuffle_epi32(ss[half], 0xaa); break;
      default: s = _mm256_shuffle_epi32(ss[half], 0xff); break;
    }
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(d, s));
  }
  return acc;
}

// Lane j = exact int dot of block j for the count (<= 8) valid blocks, 0 elsewhere.
inline __m256i chunk_isums(const BlockIq2Xxs* w, const ActChunk& act, int count) {
  __m256i p[8];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) p[k] = k < count ? block_dot(w[k], act.xa[k], act.bm[k]) : _mm256_setzero_si256();
  const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]);
  const __m256i h23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]);
  const __m256i h67 = _mm256_hadd_epi32(p[6], p[7]);
  const __m256i a = _mm256_hadd_epi32(h01, h23);
  const __m256i b = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// Chunk t (super-blocks b .. b + count − 1) of nr rows against its prepared activation side.
inline void rows_chunk(const void* w, int64_t w_stride, int64_t b, int count, int64_t t, const ActChunk& a, int nr,
                       __m256 (*acc)[4]) {
  const __m256 dx = _mm256_load_ps(a.dx);
  for (int r = 0; r < nr; ++r) {
    const auto* wb = reinterpret_cast<const BlockIq2Xxs*>(static_cast<const uint8_t*>(w) + r * w_stride) + b;
    prefetch_ahead(wb, count * static_cast<int64_t>(sizeof(BlockIq2Xxs)));  // stream_prefetch.h
    alignas(16) uint16_t dh[8] = {};
    for (int j = 0; j < count; ++j) dh[j] = wb[j].d;
    const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dh)));
    const __m256 isum = _mm256_cvtepi32_ps(chunk_isums(wb, a, count));
    const __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(dw, dx), isum), _mm256_set1_ps(0.125f));
    __m256& ac = acc[r][t & 3];
    const __m256 sum = _mm256_add_ps(ac, v);
    if (count == 8) {
      ac = sum;
    } else {
      const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      const __m256 valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(count), lane));
      ac = _mm256_blendv_ps(ac, sum, valid);
    }
  }
}

void dot_rows(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  const auto* xb = static_cast<const BlockQ8_K*>(act);
  const int64_t nb = n / 256;
  __m256 acc[4][4];
  for (auto& r : acc)
    for (auto& v : r) v = _mm256_setzero_ps();
  ActChunk a;
  int64_t t = 0;
  for (int64_t b = 0; b < nb; b += kChunk, ++t) {
    const int count = nb - b >= kChunk ? kChunk : static_cast<int>(nb - b);
    prep_act(xb + b, count, a);
    rows_chunk(w, w_stride, b, count, t, a, nr, acc);
  }
  for (int r = 0; r < nr; ++r) out[r] = reduce_partials32_avx2(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
}

void dot_rows_prepared(int64_t n, const void* w, int64_t w_stride, const void* prepared, int nr, float* out) {
  const auto* chunks = static_cast<const ActChunk*>(prepared);
  const int64_t nb = n / 256;
  __m256 acc[4][4];
  for (auto& r : acc)
    for (auto& v : r) v = _mm256_setzero_ps();
  int64_t t = 0;
  for (int64_t b = 0; b < nb; b += kChunk, ++t)
    rows_chunk(w, w_stride, b, nb - b >= kChunk ? kChunk : static_cast<int>(nb - b), t, chunks[t], nr, acc);
  for (int r = 0; r < nr; ++r) out[r] = reduce_partials32_avx2(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
}

}  // namespace

float iq2_xxs_vec_dot_avx2(int64_t n, const void* w, const void* act) {
  float out;
  dot_rows(n, w, 0, act, 1, &out);
  return out;
}

void iq2_xxs_vec_dot_rows_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  dot_rows(n, w, w_stride, act, nr, out);
}

}  // namespace dsv4::cpu

namespace dsv4::cpu {

int64_t iq2_xxs_prepared_act_bytes_avx2(int64_t n) {
  return (n / 256 + kChunk - 1) / kChunk * static_cast<int64_t>(sizeof(ActChunk));
}

void iq2_xxs_prepare_act_avx2(const void* act, int64_t n, void* out) {
  const auto* xb = static_cast<const BlockQ8_K*>(act);
  auto* chunks = static_cast<ActChunk*>(out);
  const int64_t nb = n / 256;
  for (int64_t b = 0, t = 0; b < nb; b += kChunk, ++t)
    prep_act(xb + b, nb - b >= kChunk ? kChunk : static_cast<int>(nb - b), chunks[t]);
}

void iq2_xxs_vec_dot_rows_prepared_avx2(int64_t n, const void* w, int64_t w_stride, const void* prepared, int nr,
                                        float* out) {
  dot_rows_prepared(n, w, w_stride, prepared, nr, out);
}

}  // namespace dsv4::cpu
