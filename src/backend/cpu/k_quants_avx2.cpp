// backend/cpu/k_quants_avx2.cpp — AVX2 Q2_K / Q4_K x Q8_K vec_dot, bit-identical to the scalar
// references (orders written at their definitions in k_quants.cpp).
//
// Per super-block: vpmaddubsw (unsigned quants x signed q8 -> exact int16 pair sums), vpmaddwd with the
// sub-block scales (int16, broadcast by vpshufb) -> int32 isum_sc lanes; isum_m is vpmaddwd(mins,
// bsums). Unpacks pack both (pack_sc_m); the chunk's transpose finishes the sums (Q2_K: times 4 and 16,
// shifted back there, see Q2kSuperBlock). Super-blocks go in chunks of 8 (chunk c = super-blocks
// 8c .. 8c+7 -> accumulator c % 4, i.e. partial b % 32); the transpose leaves [S0 M0 S1 M1 | S2 M2 S3
// M3] and [S4 .. M7], one multiply by the adjacent (d, dmin) f16 pairs gives t_sc and t_m interleaved,
// and v = d_x·(t_sc − t_m) lands in lane order 0 1 4 5 2 3 6 7 (chunk_lane_ids; blended tails). The
// accumulators keep that order; the final tree (acc0 + acc2) + (acc1 + acc3) is lane-wise, so the order
// is undone once on its result before the halving folds. The Q2_K tile form (matmul) gives every
// (row, column) the same bits.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/k_quants.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/simd_reduce.h"
#include "backend/cpu/stream_prefetch.h"

namespace dsv4::cpu {
namespace {

constexpr int64_t kABytes = 292;

inline float reduce_partials(const __m256 acc[4]) {
  return reduce_partials32_avx2(acc[0], acc[1], acc[2], acc[3]);
}

// Per 128-bit half [sc0+sc2, m0+m2, sc1+sc3, m1+m3] of a super-block's 8 isum_sc and 8 isum_m lanes (exact),
// by unpacks and an add: vphaddd costs 2 cycles per instruction on AMD Zen 4 (4 unpacks cost the same).
inline __m256i pack_sc_m(__m256i sc, __m256i m) {
  return _mm256_add_epi32(_mm256_unpacklo_epi32(sc, m), _mm256_unpackhi_epi32(sc, m));
}

// Per half [S_a, M_a, S_b, M_b] (that half's sums) of two pack_sc_m vectors.
inline __m256i pair_sc_m(__m256i a, __m256i b) {
  return _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
}

// vpshufb control: int16 lanes of the low 128 bits = byte k0 of the source lane, high 128 = byte k1.
inline __m256i bcast16(int k0, int k1) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(0x8000 | k1)), _mm_set1_epi16(static_cast<short>(0x8000 | k0)));
}

// Q2_K super-block (Q2kSuperBlock below), isum_sc times 4 and isum_m times 16 (exact; the chunk shifts
// them back): the 2-bit planes are masked in place instead of shifted down, q·1 (mask 0x03) and q·4 (mask
// 0x0c) for planes 0 and 1 of a 32-byte quant half and the same for planes 2 and 3 after one 4-bit shift,
// with the scales of the q·1 planes pre-multiplied by 4 (sc·4 ≤ 60), so every product is 4·q·sc·x;
// vpmaddubsw pairs stay ≤ 2·12·128 = 3072 (no saturation, x = −128 included). The mins come as 16·m, the
// high nibbles masked in place. Per quant half: 1 shift + 4 masks instead of 3 shifts + 4 masks, no shift
// for the mins. |4·isum_sc| ≤ 4·256·3·15·128 < 2^23, |16·isum_m| ≤ 16·16·15·2^15 < 2^27.
//
// vpshufb controls of plane j of quant half h (row 4h + j): int16 lanes 0-7 = byte k, 8-15 = byte k + 1,
// k = 8h + 2j (sub-blocks k and k + 1). Loaded from memory (folded into vpshufb), not rebuilt per block.
struct alignas(32) Q2kScaleCtrl {
  uint8_t b[8][32];
  constexpr Q2kScaleCtrl() : b{} {
    for (int r = 0; r < 8; ++r)
      for (int i = 0; i < 32; ++i) b[r][i] = static_cast<uint8_t>(i % 2 == 1 ? 0x80 : 2 * r + i / 16);
  }
};
inline constexpr Q2kScaleCtrl kQ2kScaleCtrl;

// The masks, made opaque once per call (an empty asm) so that GCC keeps them in registers or one spill
// slot instead of rebuilding each from a 64-bit immediate in every block.
struct Q2kSuperBlock {
  __m256i m03 = _mm256_set1_epi8(0x03), m0c = _mm256_set1_epi8(0x0c);
  __m256i lo4 = _mm256_set1_epi8(0x0f), hi4 = _mm256_set1_epi16(0xf0);  // hi4: per int16 lane
  Q2kSuperBlock() { __asm__("" : "+x"(m03), "+x"(m0c), "+x"(lo4), "+x"(hi4)); }

  __m256i operator()(const uint8_t* w, const uint8_t* a) const {
    // The scale bytes by a broadcast load (no shuffle uop), the mins by a widening load.
    const __m128i scb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
    const __m256i sc1 = _mm256_and_si256(_mm256_broadcastsi128_si256(scb), lo4);
    const __m256i sc4 = _mm256_slli_epi16(sc1, 2);  // bytes ≤ 60: no carry
    const __m256i mn16 = _mm256_and_si256(_mm256_cvtepu8_epi16(scb), hi4);
    const uint8_t* aq = a + 4;
    __m256i acc = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * h));
      const __m256i qv4 = _mm256_srli_epi16(qv, 4);  // planes 2, 3 at bits 0-3 (bits from the next byte masked off)
      const __m256i q[4] = {_mm256_and_si256(qv, m03), _mm256_and_si256(qv, m0c), _mm256_and_si256(qv4, m03),
                            _mm256_and_si256(qv4, m0c)};
      const __m256i src[4] = {sc4, sc1, sc4, sc1};
      for (int j = 0; j < 4; ++j) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq + 128 * h + 32 * j));
        const __m256i ctrl = _mm256_load_si256(reinterpret_cast<const __m256i*>(kQ2kScaleCtrl.b[4 * h + j]));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q[j], x), _mm256_shuffle_epi8(src[j], ctrl)));
      }
    }
    const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 260));
    return pack_sc_m(acc, _mm256_madd_epi16(mn16, bs));
  }
};

inline __m256i q4_k_super_block(const uint8_t* w, const uint8_t* a) {
  uint64_t sc8, m8;
  q4_k_unpack_scales(w + 4, &sc8, &m8);
  const __m256i scs = _mm256_set1_epi64x(static_cast<long long>(sc8));
  const __m128i mb = _mm_cvtsi64_si128(static_cast<long long>(m8));
  const __m256i mdup = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mb, mb));  // m0 m0 m1 m1 ... m7 m7
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const uint8_t* aq = a + 4;
  __m256i acc = _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * c));
    const __m256i lo = _mm256_and_si256(v, m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq + 64 * c));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq + 64 * c + 32));
    const __m256i s0 = _mm256_shuffle_epi8(scs, bcast16(2 * c, 2 * c));
    const __m256i s1 = _mm256_shuffle_epi8(scs, bcast16(2 * c + 1, 2 * c + 1));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), s0));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), s1));
  }
  const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 260));
  return pack_sc_m(acc, _mm256_madd_epi16(mdup, bs));
}

// Lane order of a chunk's f32 values: lane l holds super-block kChunkLane[l] of the chunk (the order
// the interleaved (S, M) pairs fall into; the accumulators keep it and are put back in order at the end).
inline __m256i chunk_lane_ids() { return _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7); }

// [d_i, dmin_i] (f16 pairs, the dword at kDOffset) of blocks i0..i0+3 (i < cnt, else 0) as floats.
struct Q4kSuperBlock {
  __m256i operator()(const uint8_t* w, const uint8_t* a) const { return q4_k_super_block(w, a); }
};

template <int64_t kWBytes, int kDOffset>
inline __m256 d_dmin4(const uint8_t* wc, int i0, int cnt) {
  auto at = [&](int i) { return i < cnt ? int_at_stride<int32_t>(wc + kDOffset, kWBytes, i) : 0; };
  __m128i v = _mm_cvtsi32_si128(at(i0));
  v = _mm_insert_epi32(v, at(i0 + 1), 1);
  v = _mm_insert_epi32(v, at(i0 + 2), 2);
  v = _mm_insert_epi32(v, at(i0 + 3), 3);
  return _mm256_cvtph_ps(v);
}

// One chunk of cnt (≤ 8) super-blocks at wc / ac: the values d_x·(d·isum_sc − dmin·isum_m) in
// chunk_lane_ids order (lanes ≥ cnt: 0). SuperBlock's (S, M) are the sums times 2^kShiftS, 2^kShiftM (exact;
// shifted back here). The float steps are the scalar reference's, lane by lane: t_sc = d·(float)S, t_m =
// dmin·(float)M (one multiply of the interleaved pairs), then d_x·(t_sc − t_m).
template <int64_t kWBytes, int kDOffset, int kShiftS, int kShiftM, class SuperBlock>
__attribute__((always_inline)) inline __m256 chunk_values(const SuperBlock& sb, const uint8_t* wc, const uint8_t* ac,
                                                          int cnt) {
  __m256i v[8];
  for (int i = 0; i < 8; ++i) v[i] = i < cnt ? sb(wc + i * kWBytes, ac + i * kABytes) : _mm256_setzero_si256();
  // v[i]: super-block i's pack_sc_m; pair_sc_m(v[i], v[i+1]) per half: [S_i, M_i, S_i+1, M_i+1]; adding
  // the halves gives whole sums: sm0123 = [S0 M0 S1 M1 | S2 M2 S3 M3].
  const __m256i h01 = pair_sc_m(v[0], v[1]), h23 = pair_sc_m(v[2], v[3]);
  const __m256i h45 = pair_sc_m(v[4], v[5]), h67 = pair_sc_m(v[6], v[7]);
  __m256i sm0123 = _mm256_add_epi32(_mm256_permute2x128_si256(h01, h23, 0x20), _mm256_permute2x128_si256(h01, h23, 0x31));
  __m256i sm4567 = _mm256_add_epi32(_mm256_permute2x128_si256(h45, h67, 0x20), _mm256_permute2x128_si256(h45, h67, 0x31));
  if constexpr (kShiftS > 0 || kShiftM > 0) {
    const __m256i shift = _mm256_setr_epi32(kShiftS, kShiftM, kShiftS, kShiftM, kShiftS, kShiftM, kShiftS, kShiftM);
    sm0123 = _mm256_srav_epi32(sm0123, shift);
    sm4567 = _mm256_srav_epi32(sm4567, shift);
  }
  // [t_sc0 t_m0 t_sc1 t_m1 | t_sc2 t_m2 t_sc3 t_m3]: d and dmin are adjacent f16s, so one dword per block.
  const __m256 t0123 = _mm256_mul_ps(d_dmin4<kWBytes, kDOffset>(wc, 0, cnt), _mm256_cvtepi32_ps(sm0123));
  const __m256 t4567 = _mm256_mul_ps(d_dmin4<kWBytes, kDOffset>(wc, 4, cnt), _mm256_cvtepi32_ps(sm4567));
  // Even / odd floats: [x0 x1 x4 x5 | x2 x3 x6 x7], the chunk_lane_ids order.
  const __m256 t_sc = _mm256_shuffle_ps(t0123, t4567, _MM_SHUFFLE(2, 0, 2, 0));
  const __m256 t_m = _mm256_shuffle_ps(t0123, t4567, _MM_SHUFFLE(3, 1, 3, 1));
  const __m256 dx = _mm256_castsi256_ps(ints8_avx2([&](int l) {
    constexpr int kBlock[8] = {0, 1, 4, 5, 2, 3, 6, 7};
    return kBlock[l] < cnt ? int_at_stride<int32_t>(ac, kABytes, kBlock[l]) : 0;
  }));
  return _mm256_mul_ps(dx, _mm256_sub_ps(t_sc, t_m));
}

template <int64_t kWBytes, int kDOffset, int kShiftS, int kShiftM, class SuperBlock>
float k_quant_dot(int64_t n, const void* w, const void* act) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(act);
  const SuperBlock sb;
  const int64_t nb = n / 256;
  // acc[c % 4] lane l = partial 8·(c % 4) + kBlock[l] (chunk_lane_ids order); lane-wise adds commute
  // with that order, so it is undone once, on the s = 8 sums, before the rest of Partials32's tree.
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t c = 0;
  for (; c * 8 + 8 <= nb; ++c) {
    // Q2_K only: the weights one page ahead (stream_prefetch.h): 2 threads from DRAM 25.4-25.8 -> 26.6-26.8
    // GB/s at 4096 x 4096, 1 thread 11.9 -> 12.5-12.6 at 4096 x 2048; from L2 about 1 % slower.
    if constexpr (kShiftS > 0) prefetch_ahead(wp + c * 8 * kWBytes, 8 * kWBytes);
    __m256& a = acc[c & 3];
    a = _mm256_add_ps(a, chunk_values<kWBytes, kDOffset, kShiftS, kShiftM>(sb, wp + c * 8 * kWBytes, ap + c * 8 * kABytes, 8));
  }
  if (c * 8 < nb) {
    const int cnt = static_cast<int>(nb - c * 8);
    const __m256 val = chunk_values<kWBytes, kDOffset, kShiftS, kShiftM>(sb, wp + c * 8 * kWBytes, ap + c * 8 * kABytes, cnt);
    const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), chunk_lane_ids()));
    __m256& a = acc[c & 3];
    a = _mm256_blendv_ps(a, _mm256_add_ps(a, val), keep);
  }
  // Partials32's s = 16 and s = 8 steps (lane-wise), the lanes back in order, then s = 4, 2, 1.
  const __m256 s8 = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
  return reduce_lanes8_avx2(_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(s8), _MM_SHUFFLE(3, 1, 2, 0))));
}

// ---- Q2_K tile: nr rows x nc columns per call (matmul) -----------------------------------------------
//
// The same exact integers as q2_k_super_block, grouped differently (integer sums: any grouping gives
// the same isum_sc and isum_m): each weight block is decoded once per tile into bytes q·sc (q <= 3,
// sc <= 15: at most 45, so vpmaddubsw's pairs stay <= 2·45·128 = 11520 and two of them add in int16),
// then per row and column: per two 32-byte steps two vpmaddubsw, one int16 add and one vpmaddwd by
// ones (3 multiplies per 64 products instead of 4), and vpmaddwd(mins, bsums). Block j of a chunk
// leaves 8 lanes in part_sc / part_m; sum_lanes8_avx2 gives lane j = isum of block j, then k_quant_dot's
// f32 steps: bit-identical.

struct alignas(32) Q2kDecoded {
  __m256i qsc[8];  // step 4h + j: bytes of elements 128h + 32j + i times their sub-block's scale
  __m256i mins;    // the 16 sub-block mins as int16
};

inline void q2_k_decode(const uint8_t* w, Q2kDecoded& out) {
  const __m128i scb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  const __m256i scs = _mm256_broadcastsi128_si256(_mm_and_si128(scb, m4));
  out.mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(scb, 4), m4));
  const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), two = _mm256_set1_epi8(2);
  for (int h = 0; h < 2; ++h) {
    const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * h));
    for (int j = 0; j < 4; ++j) {
      const int k = 8 * h + 2 * j;  // bytes 0-15: sub-block k, 16-31: k + 1
      const __m256i q = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * j), m3);
      const __m256i sc = _mm256_shuffle_epi8(
          scs, _mm256_set_m128i(_mm_set1_epi8(static_cast<char>(k + 1)), _mm_set1_epi8(static_cast<char>(k))));
      const __m256i q1 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(q, one), one), sc);
      const __m256i q2 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(q, two), two), _mm256_add_epi8(sc, sc));
      out.qsc[4 * h + j] = _mm256_add_epi8(q1, q2);
    }
  }
}

struct Q2kParts {
  __m256i sc[4][kQ2kAvx2TileCols][8];  // [row][column][block of the chunk]
  __m256i m[4][kQ2kAvx2TileCols][8];
};

// Block j of a chunk: rows r0..r0+R-1 (decoded) x columns c0..c0+C-1 (activation blocks at act + c *
// act_stride) -> parts.sc / parts.m [r][c][j].
template <int R, int C>
inline void q2_k_tile_block(const Q2kDecoded* dec, int r0, const uint8_t* act, int64_t act_stride, int c0, int j,
                            Q2kParts& parts) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i s[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) s[r][c] = _mm256_setzero_si256();
#pragma GCC unroll 1
  for (int step = 0; step < 8; step += 2) {
    __m256i qa[R], qb[R];
    for (int r = 0; r < R; ++r) {
      qa[r] = _mm256_load_si256(dec[r0 + r].qsc + step);
      qb[r] = _mm256_load_si256(dec[r0 + r].qsc + step + 1);
    }
    for (int c = 0; c < C; ++c) {
      const uint8_t* aq = act + (c0 + c) * act_stride + 4;
      __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq + 32 * step));
      __m256i xb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(aq + 32 * step + 32));
      __asm__("" : "+x"(xa), "+x"(xb));  // in registers: GCC would otherwise reload them per use
      for (int r = 0; r < R; ++r) {
        const __m256i d = _mm256_add_epi16(_mm256_maddubs_epi16(qa[r], xa), _mm256_maddubs_epi16(qb[r], xb));
        s[r][c] = _mm256_add_epi32(s[r][c], _mm256_madd_epi16(d, ones));
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act + (c0 + c) * act_stride + 260));
    for (int r = 0; r < R; ++r) {
      _mm256_store_si256(&parts.sc[r0 + r][c0 + c][j], s[r][c]);
      _mm256_store_si256(&parts.m[r0 + r][c0 + c][j], _mm256_madd_epi16(dec[r0 + r].mins, bs));
    }
  }
}

using Q2kTileBlockFn = void (*)(const Q2kDecoded*, int, const uint8_t*, int64_t, int, int, Q2kParts&);
constexpr Q2kTileBlockFn kQ2kTileBlock[2][4] = {
    {q2_k_tile_block<1, 1>, q2_k_tile_block<1, 2>, q2_k_tile_block<1, 3>, q2_k_tile_block<1, 4>},
    {q2_k_tile_block<2, 1>, q2_k_tile_block<2, 2>, q2_k_tile_block<2, 3>, q2_k_tile_block<2, 4>},
};

}  // namespace

float vec_dot_q2_k_avx2(int64_t n, const void* w, const void* act) {
  return k_quant_dot<84, 80, 2, 4, Q2kSuperBlock>(n, w, act);
}

float vec_dot_q4_k_avx2(int64_t n, const void* w, const void* act) {
  return k_quant_dot<144, 0, 0, 0, Q4kSuperBlock>(n, w, act);
}

}  // namespace dsv4::cpu

namespace dsv4::cpu {

void vec_dot_tile_q2_k_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int64_t act_stride, int nr,
                            int nc, float* out, int64_t out_stride) {
  constexpr int64_t kWBytes = 84;
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* ap = static_cast<const uint8_t*>(act);
  const int64_t nb = n / 256;
  __m256 acc[4][kQ2kAvx2TileCols][4];
  for (auto& row : acc)
    for (auto& col : row)
      for (auto& v : col) v = _mm256_setzero_ps();
  Q2kDecoded dec[4];
  Q2kParts parts;
  for (int64_t c = 0; c * 8 < nb; ++c) {
    const int64_t b0 = c * 8;
    const int cnt = static_cast<int>(std::min<int64_t>(8, nb - b0));
    for (int j = 0; j < cnt; ++j) {
      for (int r = 0; r < nr; ++r) q2_k_decode(wp + r * w_stride + (b0 + j) * kWBytes, dec[r]);
      const uint8_t* aj = ap + (b0 + j) * kABytes;
      for (int r = 0; r < nr; r += 2)
        for (int col = 0; col < nc; col += 4)
          kQ2kTileBlock[std::min(2, nr - r) - 1][std::min(4, nc - col) - 1](dec, r, aj, act_stride, col, j, parts);
    }
    alignas(32) float dxa[kQ2kAvx2TileCols][8] = {};
    for (int col = 0; col < nc; ++col)
      for (int i = 0; i < cnt; ++i) std::memcpy(&dxa[col][i], ap + col * act_stride + (b0 + i) * kABytes, 4);
    for (int r = 0; r < nr; ++r) {
      alignas(16) uint16_t dh[8] = {}, dmh[8] = {};
      for (int i = 0; i < cnt; ++i) {
        std::memcpy(&dh[i], wp + r * w_stride + (b0 + i) * kWBytes + 80, 2);
        std::memcpy(&dmh[i], wp + r * w_stride + (b0 + i) * kWBytes + 82, 2);
      }
      const __m256 d = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dh)));
      const __m256 dmin = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dmh)));
      for (int col = 0; col < nc; ++col) {
        for (int i = cnt; i < 8; ++i) parts.sc[r][col][i] = parts.m[r][col][i] = _mm256_setzero_si256();
        const __m256i isc = sum_lanes8_avx2(parts.sc[r][col]), ism = sum_lanes8_avx2(parts.m[r][col]);
        // k_quant_dot's f32 steps, lane for lane.
        const __m256 t_sc = _mm256_mul_ps(d, _mm256_cvtepi32_ps(isc));
        const __m256 t_m = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(ism));
        const __m256 val = _mm256_mul_ps(_mm256_load_ps(dxa[col]), _mm256_sub_ps(t_sc, t_m));
        __m256& a = acc[r][col][c & 3];
        add_first_lanes_avx2(a, val, cnt);
      }
    }
  }
  for (int r = 0; r < nr; ++r)
    for (int col = 0; col < nc; ++col) out[col * out_stride + r] = reduce_partials(acc[r][col]);
}

}  // namespace dsv4::cpu
