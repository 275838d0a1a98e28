// backend/cpu/iq2_xxs_avx2.cpp — IQ2_XXS x Q8_K vec_dot, vec_dot_rows and the matmul tile, AVX2.
//
// Accumulation order = iq2_xxs.h, bit-identical to iq2_xxs_vec_dot_scalar: eight consecutive
// super-blocks 8t..8t+7 give one vector of exact int32 dots (lane j = block 8t+j); converted, scaled by
// ((d_w * d_x) * (float)isum) * 0.125f and added into acc[t % 4] (acc[k] = partials 8k..8k+7); a short
// last chunk adds only its valid lanes. Reduction: (acc0 + acc2, acc1 + acc3) (s = 16), their sum
// (s = 8), 128-bit halves (s = 4), then s = 2 and s = 1 — Partials32::reduce's tree.
//
// Integer dot (exact) per 32-group. The activation side of a chunk is prepared once and shared by
// every row of a vec_dot_rows call: qc = q8 (int8, in [−127, 127]), and for the exact fallback xa =
// |q8| (u8, <= 128) and bm = (q8 < 0 ? 0 : 1 << (i % 8)), plus a mask of the blocks holding a −128.
// The weight side, per super-block: the eight groups' sign fields become ksigns bytes in-register
// (7-bit fields spread to bytes by adding masked copies, parity in bit 7 by a nibble-parity vpshufb;
// no table loads) and the (2·ls + 1) factors words — for all blocks of a chunk's row first (a pass of
// its own, stored, so that their dependency chains overlap the previous blocks' dots) — then per group
// one vpshufb spreads its four sign bytes over the 32 positions and t = that & (1 << (i % 8)).
// Fast path (no −128 in the block): y = t + kadd, kadd = 0x80 − (1 << j) for bit j < 7 and 1 for
// j = 7, is negative exactly where the weight is negative and never 0, so q = vpsignb(qc, y) is
// weight sign · q8 (|q| <= 127), and vpmaddubsw(grid, q) with the grid magnitudes (u8 <= 43; four
// 64-bit loads, broadcasts + blends) = exact int16 pair sums (|.| <= 2·43·127 = 10922).
// Exact path (a block whose activation holds a −128, which −q8 cannot represent; real Q8_K rows never
// do: −128 only for a NaN input): cmpeq(t, bm) is 0xff exactly where grid·sign·q8 is negative (weight
// sign XOR activation sign), b = vpsignb(grid, m | 1) and vpmaddubsw(xa, b) (|.| <= 2·128·43 = 11008,
// q8 = −128 exact since |q8| is the unsigned operand). Either way vpmaddwd with (2·ls + 1) -> int32:
// the same integer sums, so the same bits.
//
// Cost of the fast path per super-block (object code, GCC 12): the grid is 32 index byte loads + 32
// qword broadcasts + 24 vpblendd (11 uops per group), the signs 8 x (vpshufb, vpand, vpaddb, vpsignb),
// the dots 8 activation loads + 8 x (vpmaddubsw, vpshufd, vpmaddwd, vpaddd), the fields pass ~25:
// ~190 fused uops, ~80 loads, ~110 vector-ALU uops. On an Ice Lake-class Xeon (2.8 GHz, 2 vCPUs) the
// 5-wide rename, the two load ports and the three vector ports all bind near 38-40 cycles per
// super-block, so every trade of one for another measured even or slower (below); ~4.2-4.4 GB/s (35 %
// of the read bandwidth) is what this scheme gives there. Ablations (L2-resident 128 x 4096, prepared
// rows): no grid lookup at all 1.47x, no fields pass 1.12-1.16x, no sign step 1.09x — the grid alone
// keeps AVX2 from the 60 % the AVX-512 VBMI kernel (in-register vpermb lookups) reaches.
// Measured slower on that machine and dropped (ratio to the kept code): grid indices by one 32-bit
// load + shifts 0.94-0.97; two indices per 16-bit load 0.99-1.02; vpblendd straight from a padded
// grid (32-byte loads, serial blends) 0.90, its 128-bit form (vpblendd xmm + vinserti128) 0.89-0.91;
// scale words by vpbroadcastd from the stored fields instead of vpshufd 0.93-0.97; block loop unrolled
// x2 no gain; a 1 MiB table of grid-entry pairs (2 loads + vinserti128 per group instead of 8 loads + 3
// blends) 0.70-0.92 (cache misses); vpgatherdq (8.2 ns per gather on that VM vs 1.3 ns for broadcasts
// + blends) not tried in the kernel. Kept: the exact path out of the block loop, spread[2..3] as
// memory operands (no spills), one-vpshufb parity — `bench kernels` one thread 4096 x 4096 4.02-4.13
// -> 4.17-4.21 GB/s, L2 1-thr 4.21-4.23 -> 4.26-4.31 (interleaved, the quiet rounds; 2026-12-07).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/iq2_xxs.h"
#include "backend/cpu/iq2_xxs_tables.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/simd_reduce.h"
#include "backend/cpu/stream_prefetch.h"

namespace dsv4::cpu {
namespace {

constexpr int kChunk = 8;

// The activation side of one chunk: per super-block and group, |q8| and the sign-compare pattern
// (the row kernels), and q8 + 128 as unsigned bytes (the tile kernel's vpmaddubsw operand).
struct alignas(32) ActChunk {
  __m256i qc[kChunk][8];  // q8 (no −128 in a block whose bit of exact is clear)
  __m256i xa[kChunk][8];
  __m256i bm[kChunk][8];
  __m256i xu[kChunk][8];
  float dx[kChunk];
  uint32_t exact;  // bit k: block k holds a −128 (its row dots take the exact path)
};

// Constants in memory (GCC otherwise rebuilds 64-bit patterns in registers at every use).
struct alignas(32) Consts {
  uint8_t bits[32];       // 1 << (i % 8)
  uint8_t one[32];        // 1
  uint8_t spread[4][32];  // spread_index(k): low lane bytes 4k, 4k+1 (eight each), high lane 4k+2, 4k+3
  uint8_t kadd[32];       // 0x80 − (1 << (i % 8)) for i % 8 < 7, else 1 (the row kernels' sign step)
  uint8_t ptab[32];       // nibble parity of i % 16 in bit 7
};
constexpr Consts make_consts() {
  Consts c{};
  for (int i = 0; i < 32; ++i) {
    c.bits[i] = static_cast<uint8_t>(1u << (i % 8));
    c.one[i] = 1;
    for (int k = 0; k < 4; ++k) c.spread[k][i] = static_cast<uint8_t>(4 * k + i / 8);
    c.kadd[i] = static_cast<uint8_t>(i % 8 < 7 ? 0x80 - (1 << (i % 8)) : 1);
    c.ptab[i] = static_cast<uint8_t>(__builtin_popcount(i % 16) & 1 ? 0x80 : 0);
  }
  return c;
}
alignas(32) constexpr Consts kConsts = make_consts();

inline __m256i load_const(const uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256i bit_pattern() { return load_const(kConsts.bits); }

// with_xu: also fill a.xu (the tile kernel's operand; the row kernels never read it).
inline void prep_act(const BlockQ8_K* x, int count, ActChunk& a, bool with_xu) {
  const __m256i bits = bit_pattern(), m128 = _mm256_set1_epi8(static_cast<char>(0x80));
  a.exact = 0;
  for (int k = 0; k < count; ++k) {
    __m256i any = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k].qs + 32 * g));
      a.qc[k][g] = q;
      any = _mm256_or_si256(any, _mm256_cmpeq_epi8(q, m128));
      a.xa[k][g] = _mm256_abs_epi8(q);
      if (with_xu) a.xu[k][g] = _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80)));  // q8 + 128
      a.bm[k][g] = _mm256_andnot_si256(_mm256_cmpgt_epi8(_mm256_setzero_si256(), q), bits);
    }
    if (!_mm256_testz_si256(any, any)) a.exact |= 1u << k;
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

// Dword k of each lane of a half's scale words, in every dword (vpshufd needs an immediate).
__attribute__((always_inline)) inline __m256i group_scale(__m256i ss, int k) {
  switch (k) {
    case 0: return _mm256_shuffle_epi32(ss, 0x00);
    case 1: return _mm256_shuffle_epi32(ss, 0x55);
    case 2: return _mm256_shuffle_epi32(ss, 0xaa);
    default: return _mm256_shuffle_epi32(ss, 0xff);
  }
}

// ---- row kernels: constants pinned once per call, the weight fields of a chunk's row in a pass of their own ----

// The row and tile kernels' constants, made opaque once per call (an empty asm) so that GCC keeps them
// in registers (or reads them as memory operands) instead of rebuilding them per block.
struct RowConsts {
  __m256i bits, kadd, one, spread[4];   // per group
  __m256i low28, up7, up15, up23, ptab, lo4;  // per block (fields)
  RowConsts() {
    bits = bit_pattern();
    one = load_const(kConsts.one);
    kadd = load_const(kConsts.kadd);
    for (int k = 0; k < 4; ++k) spread[k] = load_const(kConsts.spread[k]);
    low28 = _mm256_set1_epi32(0x0fffffff);
    up7 = _mm256_set1_epi32(static_cast<int>(0xffffff80u));
    up15 = _mm256_set1_epi32(static_cast<int>(0xffff8000u));
    up23 = _mm256_set1_epi32(static_cast<int>(0xff800000u));
    ptab = load_const(kConsts.ptab);
    lo4 = _mm256_set1_epi8(0x0f);
    __asm__("" : "+x"(bits), "+x"(kadd), "+x"(one), "+x"(spread[0]), "+x"(spread[1]), "+x"(spread[2]), "+x"(spread[3]));
    __asm__("" : "+x"(low28), "+x"(up7), "+x"(up15), "+x"(up23), "+x"(ptab), "+x"(lo4));
  }
};

// One block's sign bytes (ksigns_iq2xs: 7-bit fields spread to bytes, parity in bit 7) and (2·ls + 1)
// words (both 16-bit halves of each dword), dword order [groups 0, 1, 4, 5 | 2, 3, 6, 7] (kPos), stored:
// f[0] = signs, f[1] = scales. x + (x & m) moves the bits under m up by one, so three such steps put
// the fields at bytes 0-3 (ls dropped first); the parity is that of the two nibbles' XOR (a vpshufb).
__attribute__((always_inline)) inline void row_fields(const BlockIq2Xxs& w, const RowConsts& c, __m256i* f) {
  const uint8_t* qs = reinterpret_cast<const uint8_t*>(w.qs);
  const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));       // groups 0-3
  const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32));  // groups 4-7
  const __m256i a1 = _mm256_castps_si256(
      _mm256_shuffle_ps(_mm256_castsi256_ps(v0), _mm256_castsi256_ps(v1), _MM_SHUFFLE(3, 1, 3, 1)));
  __m256i x = _mm256_and_si256(a1, c.low28);
  x = _mm256_add_epi32(x, _mm256_and_si256(x, c.up7));
  x = _mm256_add_epi32(x, _mm256_and_si256(x, c.up15));
  x = _mm256_add_epi32(x, _mm256_and_si256(x, c.up23));
  // parity(byte) = parity(low nibble ^ high nibble): one vpshufb (vpsrlw moves the next byte's bits
  // into bits 4-7 only, which the mask drops).
  const __m256i par = _mm256_shuffle_epi8(c.ptab, _mm256_and_si256(_mm256_xor_si256(x, _mm256_srli_epi16(x, 4)), c.lo4));
  __m256i sc = _mm256_or_si256(_mm256_srli_epi32(a1, 27), _mm256_set1_epi32(1));
  sc = _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16));
  _mm256_store_si256(f, _mm256_or_si256(x, par));
  _mm256_store_si256(f + 1, sc);
}

// 128-bit half h of a stored vector, in both lanes (a broadcast load: no shuffle uop).
inline __m256i lane_bcast(const __m256i* p, int h) {
  return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(p) + h));
}

// 8 int32 partial sums of one super-block's integer dot (row_fields f) against activation block k of
// a chunk; Exact: the −128-safe form (the header's exact path).
template <bool Exact>
__attribute__((always_inline)) inline __m256i row_block_dot(const BlockIq2Xxs& w, const __m256i* f, const ActChunk& a,
                                                            int kb, const RowConsts& c) {
  const uint8_t* qs = reinterpret_cast<const uint8_t*>(w.qs);
  const __m256i sx[2] = {lane_bcast(f, 0), lane_bcast(f, 1)};
  const __m256i ss[2] = {lane_bcast(f + 1, 0), lane_bcast(f + 1, 1)};
  __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) {
    const int half = (g >> 1) & 1, k = kPos[g];
    const __m256i gv = grid4(qs + 8 * g);
    // spread[2], spread[3] as memory operands in the fast path: pinned, they left too few ymm registers
    // and GCC spilled (and re-stored) two of them in every block.
    const __m256i sp = Exact || k < 2 ? c.spread[k] : load_const(kConsts.spread[k]);
    const __m256i t = _mm256_and_si256(_mm256_shuffle_epi8(sx[half], sp), c.bits);
    __m256i d;
    if constexpr (Exact) {
      const __m256i m = _mm256_cmpeq_epi8(t, _mm256_load_si256(&a.bm[kb][g]));
      d = _mm256_maddubs_epi16(_mm256_load_si256(&a.xa[kb][g]), _mm256_sign_epi8(gv, _mm256_or_si256(m, c.one)));
    } else {
      d = _mm256_maddubs_epi16(gv, _mm256_sign_epi8(_mm256_load_si256(&a.qc[kb][g]), _mm256_add_epi8(t, c.kadd)));
    }
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(d, group_scale(ss[half], k)));
  }
  return acc;
}

// The dots of a chunk whose activation holds a −128 somewhere (rare: a NaN input), out of line: with
// both paths in the block loop GCC spilled constants of the fast one and tested the exact mask per block.
__attribute__((noinline)) void rows_chunk_dots_mixed(const BlockIq2Xxs* wb, const __m256i (*fields)[2], const ActChunk& a,
                                                     int count, const RowConsts& c, __m256i* p) {
  for (int k = 0; k < count; ++k)
    p[k] = (a.exact >> k) & 1 ? row_block_dot<true>(wb[k], fields[k], a, k, c)
                              : row_block_dot<false>(wb[k], fields[k], a, k, c);
}

// The f32 step of one chunk (iq2_xxs.h's order): lane j += ((d_w · d_x) · (float)isum) · 0.125f for the
// count valid lanes (the others keep their value bit for bit).
inline void add_chunk(__m256 dw, __m256 dx, __m256i isum, int count, __m256& acc) {
  const __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum)), _mm256_set1_ps(0.125f));
  const __m256 sum = _mm256_add_ps(acc, v);
  if (count == 8) {
    acc = sum;
  } else {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(count), lane));
    acc = _mm256_blendv_ps(acc, sum, valid);
  }
}

// d_w of `count` consecutive blocks as 8 floats (0 past count).
inline __m256 block_scales(const BlockIq2Xxs* wb, int count) {
  if (count == kChunk) return f16_at_stride_avx2(reinterpret_cast<const uint8_t*>(&wb->d), sizeof(BlockIq2Xxs));
  alignas(16) uint16_t dh[8] = {};
  for (int j = 0; j < count; ++j) dh[j] = wb[j].d;
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dh)));
}

// Chunk t (super-blocks b .. b + count − 1) of nr rows against its prepared activation side: per row,
// the fields of its count blocks first, then their dots (lane j of the chunk's sum = block j's isum).
// Inlined into its callers: out of line, GCC reads the pinned constants from memory at every use.
__attribute__((always_inline)) inline void rows_chunk(const void* w, int64_t w_stride, int64_t b, int count, int64_t t,
                                                      const ActChunk& a, int nr, __m256 (*acc)[4], const RowConsts& c) {
  const __m256 dx = _mm256_load_ps(a.dx);
  alignas(32) __m256i fields[kChunk][2];
  alignas(32) __m256i p[kChunk];
  if (count < kChunk)
    for (auto& v : p) v = _mm256_setzero_si256();
  for (int r = 0; r < nr; ++r) {
    const auto* wb = reinterpret_cast<const BlockIq2Xxs*>(static_cast<const uint8_t*>(w) + r * w_stride) + b;
    prefetch_ahead(wb, count * static_cast<int64_t>(sizeof(BlockIq2Xxs)));  // stream_prefetch.h
#pragma GCC unroll 1
    for (int k = 0; k < count; ++k) row_fields(wb[k], c, fields[k]);
    if (a.exact == 0) {
#pragma GCC unroll 1
      for (int k = 0; k < count; ++k) p[k] = row_block_dot<false>(wb[k], fields[k], a, k, c);
    } else {
      rows_chunk_dots_mixed(wb, fields, a, count, c, p);
    }
    add_chunk(block_scales(wb, count), dx, sum_lanes8_avx2(p), count, acc[r][t & 3]);
  }
}

void dot_rows(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  const auto* xb = static_cast<const BlockQ8_K*>(act);
  const int64_t nb = n / 256;
  __m256 acc[4][4];
  for (auto& r : acc)
    for (auto& v : r) v = _mm256_setzero_ps();
  const RowConsts c;
  ActChunk a;
  int64_t t = 0;
  for (int64_t b = 0; b < nb; b += kChunk, ++t) {
    const int count = nb - b >= kChunk ? kChunk : static_cast<int>(nb - b);
    prep_act(xb + b, count, a, false);
    rows_chunk(w, w_stride, b, count, t, a, nr, acc, c);
  }
  for (int r = 0; r < nr; ++r) out[r] = reduce_partials32_avx2(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
}

void dot_rows_prepared(int64_t n, const void* w, int64_t w_stride, const void* prepared, int nr, float* out) {
  const auto* chunks = static_cast<const ActChunk*>(prepared);
  const int64_t nb = n / 256;
  __m256 acc[4][4];
  for (auto& r : acc)
    for (auto& v : r) v = _mm256_setzero_ps();
  const RowConsts c;
  int64_t t = 0;
  for (int64_t b = 0; b < nb; b += kChunk, ++t)
    rows_chunk(w, w_stride, b, nb - b >= kChunk ? kChunk : static_cast<int>(nb - b), t, chunks[t], nr, acc, c);
  for (int r = 0; r < nr; ++r) out[r] = reduce_partials32_avx2(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
}

// ---- tile: nr rows x nc prepared columns, each weight block decoded once for all nc columns ----------
//
// Per super-block, each row's weight side is decoded once (DecodedBlock): per group the signed grid
// bytes (grid · weight sign, |.| <= 43) and the (2·ls + 1) words, and the block's offset correction.
// The column side is q8 + 128 as unsigned bytes (ActChunk::xu), so per row, column and group one
// vpmaddubsw(xu, w) gives exact int16 pair sums (|.| <= 2 · 255 · 43 = 21930, no saturation) and one
// vpmaddwd with (2·ls + 1) gives int32 — two multiplies per 32 products, as the row kernels', with
// one load per operand. Σ w·(q8 + 128) = Σ w·q8 + 128·Σ w, so each lane then loses the row's
// correction lane 128·Σ_g (2·ls_g + 1)·Σ w of the same positions (computed once per row and block;
// every step exact int32: a block's isum stays below 2^26). The eight lanes of super-block j of a
// chunk are stored and summed per chunk (sum_lanes8_avx2: lane j = isum of block j), then the f32 step is
// add_chunk's, the same as the row kernels': bit-identical.

struct alignas(32) DecodedBlock {
  __m256i w8[8];     // group g: grid · sign (int8)
  __m256i scale[8];  // group g: (2·ls_g + 1) in every word
  __m256i corr;      // 8 int32 lanes: 128 · Σ_g (2·ls_g + 1) · Σ w over the lane's positions
};

inline void decode_block(const BlockIq2Xxs& w, DecodedBlock& out, const RowConsts& c) {
  const uint8_t* qs = reinterpret_cast<const uint8_t*>(w.qs);
  alignas(32) __m256i f[2];
  row_fields(w, c, f);
  const __m256i sx[2] = {lane_bcast(f, 0), lane_bcast(f, 1)};
  const __m256i ss[2] = {lane_bcast(f + 1, 0), lane_bcast(f + 1, 1)};
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(0x80));  // 128 as the unsigned operand
  __m256i corr = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) {
    const int half = (g >> 1) & 1, k = kPos[g];
    const __m256i sb = _mm256_shuffle_epi8(sx[half], c.spread[k]);
    const __m256i negative = _mm256_cmpeq_epi8(_mm256_and_si256(sb, c.bits), c.bits);
    const __m256i sgv = _mm256_sign_epi8(grid4(qs + 8 * g), _mm256_or_si256(negative, c.one));
    const __m256i scale = group_scale(ss[half], k);
    _mm256_store_si256(&out.w8[g], sgv);
    _mm256_store_si256(&out.scale[g], scale);
    corr = _mm256_add_epi32(corr, _mm256_madd_epi16(_mm256_maddubs_epi16(offset, sgv), scale));
  }
  _mm256_store_si256(&out.corr, corr);
}

// Block k of a chunk: R decoded rows x C columns (from column c0) -> part[r][c0 + c][k] (8 int32 lanes
// summing to the isum). R = 2, C = 4: 8 sums, 2 rows' weights and scales, a column and a product in 14 ymm.
template <int R, int C>
inline void tile_block(const DecodedBlock* dec, const ActChunk* const* cols, int c0, int k,
                       __m256i (*part)[kIq2XxsAvx2TileCols][kChunk]) {
  __m256i s[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) s[r][c] = _mm256_setzero_si256();
  // Not unrolled: unrolled, GCC reassociates the integer sums over groups and spills the products.
#pragma GCC unroll 1
  for (int g = 0; g < 8; ++g) {
    __m256i wr[R], sc[R];
    for (int r = 0; r < R; ++r) {
      wr[r] = _mm256_load_si256(&dec[r].w8[g]);
      sc[r] = _mm256_load_si256(&dec[r].scale[g]);
      // In registers: otherwise GCC folds each load into every use (a load per column).
      __asm__("" : "+x"(wr[r]), "+x"(sc[r]));
    }
    for (int c = 0; c < C; ++c) {
      __m256i xu = _mm256_load_si256(&cols[c0 + c]->xu[k][g]);
      __asm__("" : "+x"(xu));
      for (int r = 0; r < R; ++r)
        s[r][c] = _mm256_add_epi32(s[r][c], _mm256_madd_epi16(_mm256_maddubs_epi16(xu, wr[r]), sc[r]));
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) _mm256_store_si256(&part[r][c0 + c][k], _mm256_sub_epi32(s[r][c], dec[r].corr));
}

using TileBlockFn = void (*)(const DecodedBlock*, const ActChunk* const*, int, int,
                             __m256i (*)[kIq2XxsAvx2TileCols][kChunk]);
constexpr TileBlockFn kTileBlock[2][4] = {
    {tile_block<1, 1>, tile_block<1, 2>, tile_block<1, 3>, tile_block<1, 4>},
    {tile_block<2, 1>, tile_block<2, 2>, tile_block<2, 3>, tile_block<2, 4>},
};

void dot_tile_prepared(int64_t n, const void* w, int64_t w_stride, const void* prepared, int64_t prep_stride, int nr,
                       int nc, float* out, int64_t out_stride) {
  const int64_t nb = n / 256;
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* prep = static_cast<const uint8_t*>(prepared);
  __m256 acc[4][kIq2XxsAvx2TileCols][4];
  for (auto& row : acc)
    for (auto& col : row)
      for (auto& v : col) v = _mm256_setzero_ps();
  DecodedBlock dec[4];
  alignas(32) __m256i part[4][kIq2XxsAvx2TileCols][kChunk];
  const RowConsts rc;
  int64_t t = 0;
  for (int64_t b = 0; b < nb; b += kChunk, ++t) {
    const int count = nb - b >= kChunk ? kChunk : static_cast<int>(nb - b);
    const ActChunk* cols[kIq2XxsAvx2TileCols];
    for (int c = 0; c < nc; ++c) cols[c] = reinterpret_cast<const ActChunk*>(prep + c * prep_stride) + t;
    for (int k = 0; k < count; ++k) {
      for (int r = 0; r < nr; ++r) decode_block(reinterpret_cast<const BlockIq2Xxs*>(wp + r * w_stride)[b + k], dec[r], rc);
      for (int r = 0; r < nr; r += 2)
        for (int c = 0; c < nc; c += 4)
          kTileBlock[std::min(2, nr - r) - 1][std::min(4, nc - c) - 1](dec + r, cols, c, k, part + r);
    }
    for (int r = 0; r < nr; ++r) {
      const __m256 dw = block_scales(reinterpret_cast<const BlockIq2Xxs*>(wp + r * w_stride) + b, count);
      for (int c = 0; c < nc; ++c) {
        for (int k = count; k < kChunk; ++k) part[r][c][k] = _mm256_setzero_si256();
        add_chunk(dw, _mm256_load_ps(cols[c]->dx), sum_lanes8_avx2(part[r][c]), count, acc[r][c][t & 3]);
      }
    }
  }
  for (int r = 0; r < nr; ++r)
    for (int c = 0; c < nc; ++c)
      out[c * out_stride + r] = reduce_partials32_avx2(acc[r][c][0], acc[r][c][1], acc[r][c][2], acc[r][c][3]);
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
    prep_act(xb + b, nb - b >= kChunk ? kChunk : static_cast<int>(nb - b), chunks[t], true);
}

void iq2_xxs_vec_dot_rows_prepared_avx2(int64_t n, const void* w, int64_t w_stride, const void* prepared, int nr,
                                        float* out) {
  dot_rows_prepared(n, w, w_stride, prepared, nr, out);
}

void iq2_xxs_vec_dot_tile_prepared_avx2(int64_t n, const void* w, int64_t w_stride, const void* prepared,
                                        int64_t prep_stride, int nr, int nc, float* out, int64_t out_stride) {
  dot_tile_prepared(n, w, w_stride, prepared, prep_stride, nr, nc, out, out_stride);
}

}  // namespace dsv4::cpu
