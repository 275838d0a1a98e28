// backend/cpu/iq2_xxs_avx512.cpp — IQ2_XXS x Q8_K vec_dot and vec_dot_rows, AVX-512.
//
// Accumulation order = iq2_xxs.h, bit-identical to iq2_xxs_vec_dot_scalar: sixteen consecutive
// super-blocks 16t..16t+15 give one vector of exact int32 dots (lane j = block 16t+j); converted,
// scaled by ((d_w * d_x) * (float)isum) * 0.125f and added into acc[t % 2] (acc[0] = partials 0-15,
// acc[1] = partials 16-31); a short last chunk adds only its valid lanes. Reduction: acc0 + acc1
// (s = 16), then 256-bit halves (s = 8), 128 (s = 4), 64 (s = 2), 32 (s = 1) — Partials32's tree.
// Integer sums are exact, so only the order of the float steps above matters.
//
// The integer dot needs VBMI + VBMI2 + BITALG + GFNI (Zen 4, Ice Lake, Sapphire Rapids and later): the
// kAvx512Vbmi level's kernels (*_avx512vbmi): super-blocks in pairs, no scalar table loads, ~46 vector
// uops per 512 weights (layout and op count at the VBMI section). It is compute-bound: on Sapphire
// Rapids (2.4 GHz, where 512-bit ops issue on two ports and vpermt2b costs three uops) it decodes
// 10-11 GB/s of weights per core in cache at best, about what one core's share of DRAM bandwidth
// needs, and half that when a neighbour on the shared physical core is busy.
// The kAvx512 level (F/BW/VL/DQ/VNNI without VBMI) has no IQ2_XXS kernel of its own and runs the AVX2
// ones (iq2_xxs_avx2.cpp): the baseline AVX-512 kernel that was here (eight 64-bit grid loads per 64
// weights, signs by mask) measured 3.3 GB/s in cache on the Zen 4 VM against the AVX2 one's 4.4.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "backend/cpu/iq2_xxs.h"
#include "backend/cpu/iq2_xxs_tables.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/simd_reduce.h"
#include "backend/cpu/stream_prefetch.h"

namespace dsv4::cpu {
namespace {

// The float steps of one lane (a super-block), iq2_xxs.h's order: ((d_w · d_x) · isum) · 0.125f.
inline __m512 block_values(__m512 dw, __m512 dx, __m512 isum) {
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dw, dx), isum), _mm512_set1_ps(0.125f));
}

// Two rows' (or columns') values of a short chunk, the first in lanes 0-7 and the second in 8-15:
// each added to its own accumulator's lanes 0-7 (valid ones only).
inline void add_halves(__m512& first, __m512* second, __mmask16 valid, __m512 val) {
  first = _mm512_mask_add_ps(first, valid, first, val);
  if (second != nullptr) {
    const __m512 hi = _mm512_shuffle_f32x4(val, val, _MM_SHUFFLE(1, 0, 3, 2));
    *second = _mm512_mask_add_ps(*second, valid, *second, hi);
  }
}

// ---- VBMI path ---------------------------------------------------------------------------------------
//
// Super-blocks go in pairs (A, B) = (2k, 2k+1) of a chunk. In every 64-byte vector of a pair, position
// p = 8g + m (g, m < 8) stands for entry E(p) = entry 4g + m of A (m < 4) or 4g + m − 4 of B (m ≥ 4);
// entry e of a super-block = its weights 8e .. 8e+7 (group e / 4). This is the order in which the qs
// bytes already lie: qword g of A.qs holds A's four grid indices of group g in bytes 0-3 and its sign
// fields / scale in bytes 4-7. Plane j (j < 8) = element j of every entry (64 weights).
//   grid:  IDX (byte p = grid index of E(p)) and FIELDS (dword 2g = A's sign fields / scale of group g,
//          2g + 1 = B's) come from A.qs and B.qs by one vpshrdq and two blends. LO / HI (byte p = 2-bit
//          level codes of elements 0-3 / 4-7 of E(p), element j at bits 2(j%4), 2(j%4)+1) = two 256-entry
//          byte tables, each looked up by two vpermt2b (index bits 0-6) and a blend on bit 7.
//   signs: vpmultishiftqb puts E(p)'s 7-bit sign field in byte p; one gf2p8affineqb adds the parity bit
//          (ksigns) and places the sign of element j at bit kSignPos[j] of S; a second matrix gives S2 =
//          S with its nibbles swapped.
//   value: four index vectors, each a vpermb index (bits 0-5) holding two elements' codes and signs:
//            M01 = LO bits 0-3 | S bits 4-7           (format F0: codes a, b at 0-1, 2-3; signs at 4, 5)
//            M23 = (LO bits 4-7 | S bits 0-3) >> 2    (format F1: signs a, b at 0, 1; codes at 2-3, 4-5)
//            M45 = HI / S2 as M01, M67 = HI / S2 as M23
//          (vpsrlw moves bits of the word's high byte into the low byte's bits 6-7, which vpermb
//          ignores). Plane j's weights = vpermb of a 64-entry table (four tables: F0/F1 × element a/b)
//          holding 128 + (±8 / ±25 / ±43) as unsigned bytes.
//   dot:   vpdpbusd(weights + 128 as u8, q8 as s8) over the eight planes, started from −128·Σq8 of the
//          group (the activation side's correction), gives the exact signed group dot in dword u =
//          positions 4u .. 4u+3 = A's group u/2 (u even) or B's (u odd); one vpmulld by (2·ls + 1) of that
//          group, and a qword transposition turns the chunk's eight pair vectors into lane j = isum of
//          super-block j. Per pair (512 weights), in uops: index/fields 3, lookups 15 (4 vpermt2b of 3
//          uops), signs 3, value indices 6, values 8 (vpermb), dots 8, scale 5: ~46, plus ~7 per pair
//          for the chunk's transposition, d gather and float steps. Replaced (measured on Sapphire
//          Rapids, 8.8 -> 6.2 ns per super-block in cache at best): per-plane magnitudes by
//          gf2p8affineqb and signs by vptestmb + masked subtract (3 ops per 64 weights instead of 1).
// The activation side (q8 per plane, the correction, d_x) is built once per chunk (ActChunk) and reused
// by every row: prepare_act does it once per activation row for a whole matmul. The weight side of a
// pair (eight planes of values and the scales) does not depend on the activation, so the tile kernel
// decodes it once for all its columns.

// Bit of S holding the sign of element j (chosen so that M01 / M23 need S bits 4-5 / 2-3 and, after
// the nibble swap, M45 / M67 find elements 4-5 / 6-7 at the same places of S2).
constexpr int kSignPos[8] = {4, 5, 2, 3, 0, 1, 6, 7};

struct alignas(64) VbmiTables {
  uint8_t code_lo[256];     // grid entry k: level codes (8 -> 0, 25 -> 1, 43 -> 2) of elements 0-3
  uint8_t code_hi[256];     // ... of elements 4-7 (element 4 + j at bits 2j, 2j + 1)
  uint8_t value[4][64];     // [format F0 a, F0 b, F1 a, F1 b]: vpermb index -> 128 ± level (u8)
  uint8_t sign_shift[64];   // vpmultishiftqb: byte 8g + m <- bits 32·(m / 4) + 7·(m % 4) (sign field of E(p))
  uint8_t act_idx[8][64];   // prep, plane j: byte p <- q8 byte (8·e + j) mod 128 of its super-block, e = 4g + m % 4
};

VbmiTables make_vbmi_tables() {
  VbmiTables t{};
  for (int k = 0; k < 256; ++k) {
    unsigned c = 0;
    for (int j = 0; j < 8; ++j) {
      const unsigned v = (iq2xxs_grid[k] >> (8 * j)) & 0xff;
      c |= (v == 8 ? 0u : v == 25 ? 1u : 2u) << (2 * j);
    }
    t.code_lo[k] = static_cast<uint8_t>(c & 0xff);
    t.code_hi[k] = static_cast<uint8_t>(c >> 8);
  }
  constexpr int kLevel[4] = {8, 25, 43, 0};  // code 3 never occurs
  for (int i = 0; i < 64; ++i) {
    // F0: codes at bits 0-1 (a), 2-3 (b); signs at 4 (a), 5 (b). F1: signs at 0 (a), 1 (b); codes at 2-3, 4-5.
    const int f0a = kLevel[i & 3] * ((i >> 4) & 1 ? -1 : 1), f0b = kLevel[(i >> 2) & 3] * ((i >> 5) & 1 ? -1 : 1);
    const int f1a = kLevel[(i >> 2) & 3] * (i & 1 ? -1 : 1), f1b = kLevel[(i >> 4) & 3] * ((i >> 1) & 1 ? -1 : 1);
    t.value[0][i] = static_cast<uint8_t>(128 + f0a);
    t.value[1][i] = static_cast<uint8_t>(128 + f0b);
    t.value[2][i] = static_cast<uint8_t>(128 + f1a);
    t.value[3][i] = static_cast<uint8_t>(128 + f1b);
  }
  for (int p = 0; p < 64; ++p) {
    const int g = p / 8, m = p % 8, e = 4 * g + m % 4;
    t.sign_shift[p] = static_cast<uint8_t>(32 * (m / 4) + 7 * (m % 4));
    for (int j = 0; j < 8; ++j) t.act_idx[j][p] = static_cast<uint8_t>((8 * e + j) & 127);
  }
  return t;
}

// Built on first use (not at static-init time, so no initialization-order dependence).
const VbmiTables& vbmi_tables() {
  static const VbmiTables t = make_vbmi_tables();
  return t;
}

constexpr int kChunk = 16;
constexpr __mmask64 kBBytes = 0xf0f0f0f0f0f0f0f0ull;  // positions of B's entries (m >= 4)

// Activation side of one pair of super-blocks, in the position order above.
struct alignas(64) ActPair {
  __m512i q[8];  // plane j: byte p = q8 of element j of E(p) (signed)
  __m512i corr;  // dword u: −128 · Σ q8 of the group of dword u (A's group u/2 or B's)
};
struct alignas(64) ActChunk {
  ActPair pair[kChunk / 2];
  float dx[kChunk];
};

}  // namespace

#pragma GCC push_options
#pragma GCC target("avx512vbmi,avx512vbmi2,avx512bitalg,gfni")

namespace {

// gf2p8affineqb matrix (row for output bit i = byte 7 − i): input bits 0-6 = a sign field (bit 7
// ignored); output bit kSignPos[j] (plus `rot`, mod 8) = input bit j for j < 7, and for j = 7 the
// parity of bits 0-6 (ksigns_iq2xs). rot = 4 gives S2, S with its nibbles swapped.
constexpr long long ksigns_matrix(int rot) {
  unsigned long long m = 0;
  for (int j = 0; j < 8; ++j) {
    const int out = (kSignPos[j] + rot) % 8;
    const unsigned long long row = j < 7 ? 1ull << j : 0x7full;
    m |= row << (8 * (7 - out));
  }
  return static_cast<long long>(m);
}

struct Consts {
  __m512i lo[4], hi[4], value[4], ksigns, ksigns2, sign_shift;
};

inline Consts load_consts(const VbmiTables& tb) {
  Consts c;
  for (int i = 0; i < 4; ++i) {
    c.lo[i] = _mm512_load_si512(tb.code_lo + 64 * i);
    c.hi[i] = _mm512_load_si512(tb.code_hi + 64 * i);
    c.value[i] = _mm512_load_si512(tb.value[i]);
  }
  c.ksigns = _mm512_set1_epi64(ksigns_matrix(0));
  c.ksigns2 = _mm512_set1_epi64(ksigns_matrix(4));
  c.sign_shift = _mm512_load_si512(tb.sign_shift);
  return c;
}

// A 256-entry byte table (four zmm) looked up at every byte of idx.
inline __m512i lookup256(const __m512i t[4], __m512i idx) {
  const __m512i t01 = _mm512_permutex2var_epi8(t[0], idx, t[1]);
  const __m512i t23 = _mm512_permutex2var_epi8(t[2], idx, t[3]);
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), t01, t23);
}

// Super-block j < count of x, or zeros.
inline void load_act(const BlockQ8_K* x, int j, int count, __m512i v[4]) {
  for (int i = 0; i < 4; ++i) v[i] = j < count ? _mm512_loadu_si512(x[j].qs + 64 * i) : _mm512_setzero_si512();
}

inline void prep_pair(const VbmiTables& tb, const BlockQ8_K* x, int k, int count, ActPair& a) {
  __m512i qa[4], qb[4];
  load_act(x, 2 * k, count, qa);
  load_act(x, 2 * k + 1, count, qb);
  constexpr __mmask64 kHigh = 0xffffffff00000000ull;  // entries 16-31 (bytes 128-255 of the super-block)
  __m512i sum = _mm512_setzero_si512();
  for (int j = 0; j < 8; ++j) {
    const __m512i ix = _mm512_load_si512(tb.act_idx[j]);
    const __m512i va = _mm512_mask_blend_epi8(kHigh, _mm512_permutex2var_epi8(qa[0], ix, qa[1]),
                                              _mm512_permutex2var_epi8(qa[2], ix, qa[3]));
    const __m512i vb = _mm512_mask_blend_epi8(kHigh, _mm512_permutex2var_epi8(qb[0], ix, qb[1]),
                                              _mm512_permutex2var_epi8(qb[2], ix, qb[3]));
    a.q[j] = _mm512_mask_blend_epi8(kBBytes, va, vb);
    sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(1), a.q[j]);  // dword u: Σ q8 of its group
  }
  a.corr = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7));
}

inline void prep_act(const VbmiTables& tb, const BlockQ8_K* x, int count, ActChunk& a) {
  for (int k = 0; k < kChunk / 2; ++k) {
    if (2 * k < count) {
      prep_pair(tb, x, k, count, a.pair[k]);
    } else {
      for (auto& q : a.pair[k].q) q = _mm512_setzero_si512();
      a.pair[k].corr = _mm512_setzero_si512();
    }
  }
  for (int j = 0; j < kChunk; ++j) a.dx[j] = j < count ? x[j].d : 0.0f;
}

// The weight side of a pair, independent of the activation: the eight planes' values (128 ± level,
// unsigned) and the (2·ls + 1) factors (dword 2g = A's group g, 2g + 1 = B's).
struct PairWeights {
  __m512i val[8], scale;
};

// wb null: B absent (its qs are never read; its activation planes and correction are zero).
inline void decode_pair(const Consts& c, const BlockIq2Xxs& wa, const BlockIq2Xxs* wb, PairWeights& pw) {
  const __m512i qa = _mm512_loadu_si512(wa.qs);
  const __m512i qb = wb != nullptr ? _mm512_loadu_si512(wb->qs) : _mm512_setzero_si512();
  const __m512i mid = _mm512_shrdi_epi64(qa, qb, 32);           // qword: A's fields | B's indices << 32
  const __m512i idx = _mm512_mask_blend_epi32(0xaaaa, qa, mid);  // A's indices | B's indices << 32
  const __m512i fields = _mm512_mask_blend_epi32(0xaaaa, mid, qb);
  const __m512i lo = lookup256(c.lo, idx), hi = lookup256(c.hi, idx);
  const __m512i sf = _mm512_multishift_epi64_epi8(c.sign_shift, fields);
  const __m512i s = _mm512_gf2p8affine_epi64_epi8(sf, c.ksigns, 0);
  const __m512i s2 = _mm512_gf2p8affine_epi64_epi8(sf, c.ksigns2, 0);
  const __m512i low = _mm512_set1_epi8(0x0f);
  // ternlog 0xca: (a & b) | (~a & c) with a = mask.
  const __m512i m01 = _mm512_ternarylogic_epi32(low, lo, s, 0xca);
  const __m512i m23 = _mm512_srli_epi16(_mm512_ternarylogic_epi32(low, s, lo, 0xca), 2);
  const __m512i m45 = _mm512_ternarylogic_epi32(low, hi, s2, 0xca);
  const __m512i m67 = _mm512_srli_epi16(_mm512_ternarylogic_epi32(low, s2, hi, 0xca), 2);
  pw.val[0] = _mm512_permutexvar_epi8(m01, c.value[0]);
  pw.val[1] = _mm512_permutexvar_epi8(m01, c.value[1]);
  pw.val[2] = _mm512_permutexvar_epi8(m23, c.value[2]);
  pw.val[3] = _mm512_permutexvar_epi8(m23, c.value[3]);
  pw.val[4] = _mm512_permutexvar_epi8(m45, c.value[0]);
  pw.val[5] = _mm512_permutexvar_epi8(m45, c.value[1]);
  pw.val[6] = _mm512_permutexvar_epi8(m67, c.value[2]);
  pw.val[7] = _mm512_permutexvar_epi8(m67, c.value[3]);
  // (2·ls + 1): ls = bits 28-31 of each dword of fields; bit 27 shifted to bit 0 is overwritten by the 1.
  pw.scale = _mm512_or_si512(_mm512_srli_epi32(fields, 27), _mm512_set1_epi32(1));
}

// Dword 2g = A's group g isum·(2·ls + 1), dword 2g + 1 = B's (exact int32).
inline __m512i apply_pair(const PairWeights& pw, const ActPair& a) {
  // One chain: the pairs of a chunk are independent, so their chains overlap; the add a second
  // chain needs measured ~10% slower on Sapphire Rapids.
  __m512i acc = a.corr;
  for (int j = 0; j < 8; ++j) acc = _mm512_dpbusd_epi32(acc, pw.val[j], a.q[j]);
  return _mm512_mullo_epi32(acc, pw.scale);
}

inline __m512i pair_dot(const Consts& c, const BlockIq2Xxs& wa, const BlockIq2Xxs* wb, const ActPair& a) {
  PairWeights pw;
  decode_pair(c, wa, wb, pw);
  return apply_pair(pw, a);
}

// v[k] (pair k: dword 2g + b = super-block 2k + b's group g) -> lane j = Σ of super-block j's eight
// dwords. Three rounds of qword transposition (adds of qword pairs, so A and B never mix).
inline __m512i reduce_pairs(__m512i v[8]) {
  const __m512i ev = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14), od = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
  for (int n = 8; n > 1; n /= 2)
    for (int i = 0; i < n / 2; ++i)
      v[i] = _mm512_add_epi32(_mm512_permutex2var_epi64(v[2 * i], ev, v[2 * i + 1]),
                              _mm512_permutex2var_epi64(v[2 * i], od, v[2 * i + 1]));
  return v[0];
}

// Lane j = exact int dot of block j for the count (<= 16) valid blocks, 0 elsewhere.
inline __m512i chunk_isums_vbmi(const Consts& c, const BlockIq2Xxs* w, const ActChunk& a, int count) {
  __m512i v[8];
  for (int k = 0; k < 8; ++k)
    v[k] = 2 * k < count ? pair_dot(c, w[2 * k], 2 * k + 1 < count ? &w[2 * k + 1] : nullptr, a.pair[k])
                         : _mm512_setzero_si512();
  return reduce_pairs(v);
}

inline float reduce_acc(__m512 a0, __m512 a1) {
  return reduce_partials32_avx512(a0, a1);
}

// Chunk t (blocks b .. b + count − 1) of nr rows against its prepared activation side `a`. Inlined:
// with the tables in the caller's registers it measured 4-7% faster than the out-of-line clone GCC makes.
__attribute__((always_inline)) inline void rows_chunk(const Consts& c, const void* w, int64_t w_stride, int64_t b, int count, int64_t t,
                       const ActChunk& a, int nr, __m512 (*acc)[2]) {
  const __m512i widx = lane_offsets(sizeof(BlockIq2Xxs));
  const __mmask16 valid = static_cast<__mmask16>((1u << count) - 1u);
  constexpr int64_t kBlock = sizeof(BlockIq2Xxs);
  if (count <= kChunk / 2 && w_stride <= (int64_t{1} << 30)) {
    // Short chunk (a row of <= 8 super-blocks, e.g. n = 2048): two rows share one transposition,
    // row r in lanes 0-7 and row r + 1 in lanes 8-15; each lane's float steps are those of the
    // one-row path, and row r + 1's lanes move down before they are added.
    const __m512i widx2 = _mm512_mask_add_epi32(widx, 0xff00, _mm512_set1_epi32(static_cast<int>(w_stride - 8 * kBlock)), widx);
    const __m512 dx = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_maskz_loadu_ps(static_cast<__mmask8>(valid), a.dx)),
                                         _mm256_maskz_loadu_ps(static_cast<__mmask8>(valid), a.dx), 1);
    for (int r = 0; r < nr; r += 2) {
      const auto* wb = reinterpret_cast<const BlockIq2Xxs*>(static_cast<const uint8_t*>(w) + r * w_stride) + b;
      const bool second = r + 1 < nr;
      const auto* wb2 = reinterpret_cast<const BlockIq2Xxs*>(reinterpret_cast<const uint8_t*>(wb) + w_stride);
      prefetch_ahead(wb, count * kBlock);
      if (second) prefetch_ahead(wb2, count * kBlock);
      const __mmask16 both = static_cast<__mmask16>(valid | (second ? valid << 8 : 0));
      const __m512i dbits = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), both, widx2, &wb->d, 1);
      const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dbits));
      __m512i v[8];
      for (int k = 0; k < 4; ++k) {
        v[k] = 2 * k < count ? pair_dot(c, wb[2 * k], 2 * k + 1 < count ? &wb[2 * k + 1] : nullptr, a.pair[k])
                             : _mm512_setzero_si512();
        v[4 + k] = second && 2 * k < count
                       ? pair_dot(c, wb2[2 * k], 2 * k + 1 < count ? &wb2[2 * k + 1] : nullptr, a.pair[k])
                       : _mm512_setzero_si512();
      }
      const __m512 isum = _mm512_cvtepi32_ps(reduce_pairs(v));
      add_halves(acc[r][t & 1], second ? &acc[r + 1][t & 1] : nullptr, valid, block_values(dw, dx, isum));
    }
    return;
  }
  const __m512 dx = _mm512_maskz_loadu_ps(valid, a.dx);
  for (int r = 0; r < nr; ++r) {
    const auto* wb = reinterpret_cast<const BlockIq2Xxs*>(static_cast<const uint8_t*>(w) + r * w_stride) + b;
    prefetch_ahead(wb, count * kBlock);  // stream_prefetch.h
    // The 16 block scales d_w: by 16-bit inserts for a full chunk (vpgatherdd is slow on Zen 4: 12.5 ->
    // 12.7-12.8 GB/s per thread from L2, 4096-wide rows); a short chunk keeps the gather. A 4-byte
    // gather at a block's start (d, qs[0]) stays inside the block; keep the low 16 bits. Same values.
    __m512 dw;
    if (count == kChunk) {
      const uint8_t* db = reinterpret_cast<const uint8_t*>(&wb->d);
      dw = _mm512_insertf32x8(_mm512_castps256_ps512(f16_at_stride_avx2(db, kBlock)),
                              f16_at_stride_avx2(db + 8 * kBlock, kBlock), 1);
    } else {
      const __m512i dbits = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, widx, &wb->d, 1);
      dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dbits));
    }
    const __m512 isum = _mm512_cvtepi32_ps(chunk_isums_vbmi(c, wb, a, count));
    const __m512 v = block_values(dw, dx, isum);
    acc[r][t & 1] = _mm512_mask_add_ps(acc[r][t & 1], valid, acc[r][t & 1], v);
  }
}

__attribute__((noinline)) void dot_rows_vbmi(int64_t n, const void* w, int64_t w_stride, const void* act, int nr,
                                             float* out) {
  const auto* xb = static_cast<const BlockQ8_K*>(act);
  const int64_t nb = n / 256;
  const VbmiTables& tables = vbmi_tables();
  const Consts c = load_consts(tables);
  __m512 acc[4][2];
  for (auto& r : acc) r[0] = r[1] = _mm512_setzero_ps();
  ActChunk a;
  int64_t t = 0;
  for (int64_t b = 0; b < nb; b += kChunk, ++t) {
    const int count = nb - b >= kChunk ? kChunk : static_cast<int>(nb - b);
    prep_act(tables, xb + b, count, a);
    rows_chunk(c, w, w_stride, b, count, t, a, nr, acc);
  }
  for (int r = 0; r < nr; ++r) out[r] = reduce_acc(acc[r][0], acc[r][1]);
}

// Every chunk's activation side, built once per activation row (ActChunk t for blocks 16t ..).
__attribute__((noinline)) void prepare_vbmi(const void* act, int64_t n, void* out) {
  const auto* xb = static_cast<const BlockQ8_K*>(act);
  const int64_t nb = n / 256;
  const VbmiTables& tables = vbmi_tables();
  auto* chunks = static_cast<ActChunk*>(out);
  for (int64_t b = 0, t = 0; b < nb; b += kChunk, ++t)
    prep_act(tables, xb + b, nb - b >= kChunk ? kChunk : static_cast<int>(nb - b), chunks[t]);
}

__attribute__((noinline)) void dot_rows_vbmi_prepared(int64_t n, const void* w, int64_t w_stride,
                                                      const void* prepared, int nr, float* out) {
  const int64_t nb = n / 256;
  const Consts c = load_consts(vbmi_tables());
  const auto* chunks = static_cast<const ActChunk*>(prepared);
  __m512 acc[4][2];
  for (auto& r : acc) r[0] = r[1] = _mm512_setzero_ps();
  int64_t t = 0;
  for (int64_t b = 0; b < nb; b += kChunk, ++t)
    rows_chunk(c, w, w_stride, b, nb - b >= kChunk ? kChunk : static_cast<int>(nb - b), t, chunks[t], nr, acc);
  for (int r = 0; r < nr; ++r) out[r] = reduce_acc(acc[r][0], acc[r][1]);
}

// nr rows x nc prepared columns (column c at prepared + c * prep_stride bytes): each pair of weight
// super-blocks is decoded once for all nc columns; per (row, column) exactly rows_chunk's operations.
__attribute__((noinline)) void dot_tile_vbmi_prepared(int64_t n, const void* w, int64_t w_stride,
                                                      const void* prepared, int64_t prep_stride, int nr, int nc,
                                                      float* out, int64_t out_stride) {
  const int64_t nb = n / 256;
  const Consts c = load_consts(vbmi_tables());
  const auto* prep = static_cast<const uint8_t*>(prepared);
  const __m512i widx = lane_offsets(sizeof(BlockIq2Xxs));
  __m512 acc[4][kMaxTileCols][2];
  for (auto& r : acc)
    for (auto& col : r) col[0] = col[1] = _mm512_setzero_ps();
  int64_t t = 0;
  for (int64_t b = 0; b < nb; b += kChunk, ++t) {
    const int count = nb - b >= kChunk ? kChunk : static_cast<int>(nb - b);
    const __mmask16 valid = static_cast<__mmask16>((1u << count) - 1u);
    for (int r = 0; r < nr; ++r) {
      const auto* wb = reinterpret_cast<const BlockIq2Xxs*>(static_cast<const uint8_t*>(w) + r * w_stride) + b;
      __m512i v[kMaxTileCols][8];
      for (int k = 0; k < 8; ++k) {
        if (2 * k >= count) {
          for (int col = 0; col < nc; ++col) v[col][k] = _mm512_setzero_si512();
          continue;
        }
        PairWeights pw;
        decode_pair(c, wb[2 * k], 2 * k + 1 < count ? &wb[2 * k + 1] : nullptr, pw);
        for (int col = 0; col < nc; ++col)
          v[col][k] = apply_pair(pw, reinterpret_cast<const ActChunk*>(prep + col * prep_stride)[t].pair[k]);
      }
      const __m512i dbits = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, widx, &wb->d, 1);
      const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dbits));
      int col = 0;
      if (count <= kChunk / 2) {
        // Short chunk: two columns share one transposition (column col in lanes 0-7, col + 1 in
        // 8-15); per-lane float steps as below, the second column's lanes moved down before adding.
        const __m512 dw2 = _mm512_shuffle_f32x4(dw, dw, _MM_SHUFFLE(1, 0, 1, 0));
        for (; col + 1 < nc; col += 2) {
          const ActChunk& a0 = reinterpret_cast<const ActChunk*>(prep + col * prep_stride)[t];
          const ActChunk& a1 = reinterpret_cast<const ActChunk*>(prep + (col + 1) * prep_stride)[t];
          const __m512 dx = _mm512_insertf32x8(
              _mm512_castps256_ps512(_mm256_maskz_loadu_ps(static_cast<__mmask8>(valid), a0.dx)),
              _mm256_maskz_loadu_ps(static_cast<__mmask8>(valid), a1.dx), 1);
          __m512i vv[8];
          for (int k = 0; k < 4; ++k) vv[k] = v[col][k], vv[4 + k] = v[col + 1][k];
          const __m512 isum = _mm512_cvtepi32_ps(reduce_pairs(vv));
          const __m512 val = block_values(dw2, dx, isum);
          add_halves(acc[r][col][t & 1], &acc[r][col + 1][t & 1], valid, val);
        }
      }
      for (; col < nc; ++col) {
        const ActChunk& a = reinterpret_cast<const ActChunk*>(prep + col * prep_stride)[t];
        const __m512 dx = _mm512_maskz_loadu_ps(valid, a.dx);
        const __m512 isum = _mm512_cvtepi32_ps(reduce_pairs(v[col]));
        const __m512 val = block_values(dw, dx, isum);
        acc[r][col][t & 1] = _mm512_mask_add_ps(acc[r][col][t & 1], valid, acc[r][col][t & 1], val);
      }
    }
  }
  for (int r = 0; r < nr; ++r)
    for (int col = 0; col < nc; ++col) out[col * out_stride + r] = reduce_acc(acc[r][col][0], acc[r][col][1]);
}

}  // namespace

#pragma GCC pop_options

// ---- kAvx512Vbmi level (the caller's level guarantees VBMI, VBMI2, BITALG and GFNI) ----------------

float iq2_xxs_vec_dot_avx512vbmi(int64_t n, const void* w, const void* act) {
  float out;
  dot_rows_vbmi(n, w, 0, act, 1, &out);
  return out;
}

void iq2_xxs_vec_dot_rows_avx512vbmi(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  dot_rows_vbmi(n, w, w_stride, act, nr, out);
}

int64_t iq2_xxs_prepared_act_bytes(int64_t n) {
  const int64_t chunks = (n / 256 + kChunk - 1) / kChunk;
  return std::max(chunks * static_cast<int64_t>(sizeof(ActChunk)), iq2_xxs_prepared_act_bytes_avx2(n));
}

void iq2_xxs_prepare_act_avx512vbmi(const void* act, int64_t n, void* out) { prepare_vbmi(act, n, out); }

void iq2_xxs_vec_dot_rows_prepared_avx512vbmi(int64_t n, const void* w, int64_t w_stride, const void* prepared, int nr,
                                              float* out) {
  dot_rows_vbmi_prepared(n, w, w_stride, prepared, nr, out);
}

void iq2_xxs_vec_dot_tile_prepared_avx512vbmi(int64_t n, const void* w, int64_t w_stride, const void* prepared,
                                              int64_t prep_stride, int nr, int nc, float* out, int64_t out_stride) {
  dot_tile_vbmi_prepared(n, w, w_stride, prepared, prep_stride, nr, nc, out, out_stride);
}

}  // namespace dsv4::cpu
