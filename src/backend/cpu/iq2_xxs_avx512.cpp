// backend/cpu/iq2_xxs_avx512.cpp — IQ2_XXS x Q8_K vec_dot and vec_dot_rows, AVX-512.
//
// Accumulation order = iq2_xxs.h, bit-identical to iq2_xxs_vec_dot_scalar: sixteen consecutive
// super-blocks 16t..16t+15 give one vector of exact int32 dots (lane j = block 16t+j); converted,
// scaled by ((d_w * d_x) * (float)isum) * 0.125f and added into acc[t % 2] (acc[0] = partials 0-15,
// acc[1] = partials 16-31); a short last chunk adds only its valid lanes. Reduction: acc0 + acc1
// (s = 16), then 256-bit halves (s = 8), 128 (s = 4), 64 (s = 2), 32 (s = 1) — Partials32's tree.
// Integer sums are exact, so only the order of the float steps above matters.
//
// Two integer-dot paths:
//  * VBMI + BITALG + GFNI (Zen 4, Ice Lake and later), used when the CPU has them. No scalar table
//    loads; per super-block (its 64 qs bytes in one zmm q, qword k = group k):
//      - grid: the 32 grid indices -> words (one vpermb) -> 2-bit level codes (256 x u16 table in 8
//        zmm: four vpermt2w + blends on index bits 6, 7): word e of L = code of entry e (element j
//        at bits 2j, 2j+1). "Plane" t (t < 4) = elements t and t + 4 of every entry: one
//        gf2p8affineqb on L with a per-t matrix maps the code bits of byte 2e + h straight to the
//        magnitude 8 / 25 / 43 (8 = 001000b, 25 = 011001b, 43 = 101011b is GF(2)-affine in the two
//        code bits), ignoring the other bits.
//      - signs: vpmultishiftqb puts entry 4k + m's 7-bit sign field at qword k byte m; a 128-entry
//        vpermi2b table gives ksigns (bit-reversed); XOR with the activation's sign bits in the same
//        layout (z); vpshufbitqmb picks, per plane, the 64-bit "product is negative" mask.
//      - dot: vpdpbusd(|q8|, ±grid): |q8| <= 128 as unsigned bytes, ±grid in [-43, 43] signed, so
//        q8 = −128 is exact. In every plane dword u holds entries 2u, 2u + 1 = group u / 2, so the
//        four planes accumulate into one vector, multiplied once by (2·ls_k + 1) in dwords 2k, 2k+1.
//    The activation side (|q8| permuted into the plane layout by vpermi2b, z from gf2p8affineqb,
//    d_x) is built once per 16-block chunk into a stack buffer and reused for each of the nr rows.
//  * Baseline AVX-512 (F/BW/VL/DQ/VNNI) otherwise: eight 64-bit grid loads per 64 weights; sign
//    bytes computed in-register (parity folded into bit 7) used as a byte mask k;
//    vpmaddubsw(g, q) − 2·vpmaddubsw(k ? g : 0, q) = exact int16 pair sums (q8 = −128 exact);
//    vpmaddwd with (2·ls + 1) per group -> int32.
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

inline __m512i block_dot(const BlockIq2Xxs& w, const int8_t* q8) {
  const __m512i qsv = _mm512_loadu_si512(w.qs);  // qword g = a0_g | a1_g << 32
  // Grid entries: eight 64-bit loads per 64 weights (faster than vpgatherqq on Zen 4).
  const uint8_t* idx = reinterpret_cast<const uint8_t*>(w.qs);  // group g: bytes 8g..8g+3
  const uint64_t* grid = iq2xxs_grid;
  __m512i g[4];
  for (int i = 0; i < 4; ++i) {
    const uint8_t* p = idx + 16 * i;
    const __m256i lo = _mm256_set_epi64x(static_cast<long long>(grid[p[3]]), static_cast<long long>(grid[p[2]]),
                                         static_cast<long long>(grid[p[1]]), static_cast<long long>(grid[p[0]]));
    const __m256i hi = _mm256_set_epi64x(static_cast<long long>(grid[p[11]]), static_cast<long long>(grid[p[10]]),
                                         static_cast<long long>(grid[p[9]]), static_cast<long long>(grid[p[8]]));
    g[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
  // Sign bytes: a1 in the low dword of each qword (high dword 0).
  const __m512i a1 = _mm512_srli_epi64(qsv, 32);
  __m512i x = _mm512_and_si512(a1, _mm512_set1_epi32(0x7f));
  x = _mm512_ternarylogic_epi32(x, _mm512_slli_epi32(a1, 1), _mm512_set1_epi32(0x7f00), 0xf8);  // x | (b & c)
  x = _mm512_ternarylogic_epi32(x, _mm512_slli_epi32(a1, 2), _mm512_set1_epi32(0x7f0000), 0xf8);
  x = _mm512_ternarylogic_epi32(x, _mm512_slli_epi32(a1, 3), _mm512_set1_epi32(0x7f000000), 0xf8);
  __m512i par = _mm512_xor_si512(x, _mm512_srli_epi32(x, 4));
  par = _mm512_xor_si512(par, _mm512_srli_epi32(par, 2));
  par = _mm512_xor_si512(par, _mm512_srli_epi32(par, 1));
  const __m512i sb = _mm512_ternarylogic_epi32(x, _mm512_slli_epi32(par, 7), _mm512_set1_epi32(0x80808080), 0xf8);
  const __m256i signs = _mm512_cvtepi64_epi32(sb);  // dword g = ksigns bytes of group g
  // Scales (2·ls + 1) in both words of the low dword of each qword.
  const __m512i ls = _mm512_or_si512(_mm512_slli_epi64(_mm512_srli_epi64(qsv, 60), 1), _mm512_set1_epi64(1));
  const __m512i sw = _mm512_or_si512(ls, _mm512_slli_epi64(ls, 16));
  __m512i acc = _mm512_setzero_si512();
  for (int i = 0; i < 4; ++i) {
    const __mmask64 k = _cvtu64_mask64(static_cast<unsigned long long>(
        i == 0 ? _mm256_extract_epi64(signs, 0)
               : i == 1 ? _mm256_extract_epi64(signs, 1) : i == 2 ? _mm256_extract_epi64(signs, 2)
                                                                  : _mm256_extract_epi64(signs, 3)));
    const __m512i sidx = _mm512_inserti64x4(_mm512_set1_epi32(4 * i), _mm256_set1_epi32(4 * i + 2), 1);
    const __m512i sc = _mm512_permutexvar_epi32(sidx, sw);
    const __m512i q = _mm512_loadu_si512(q8 + 64 * i);
    const __m512i t1 = _mm512_maddubs_epi16(g[i], q);
    const __m512i t2 = _mm512_maddubs_epi16(_mm512_maskz_mov_epi8(k, g[i]), q);
    const __m512i d = _mm512_sub_epi16(_mm512_sub_epi16(t1, t2), t2);
    acc = _mm512_add_epi32(acc, _mm512_madd_epi16(d, sc));
  }
  return acc;
}

// Lane j = exact int dot of block j for the count (<= 16) valid blocks, 0 elsewhere.
inline __m512i chunk_isums(const BlockIq2Xxs* w, const BlockQ8_K* x, int count) {
  __m512i t[8];
  for (int k = 0; k < 8; ++k) {
    const __m512i p0 = 2 * k < count ? block_dot(w[2 * k], x[2 * k].qs) : _mm512_setzero_si512();
    const __m512i p1 = 2 * k + 1 < count ? block_dot(w[2 * k + 1], x[2 * k + 1].qs) : _mm512_setzero_si512();
    t[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(p0, p1), _mm512_unpackhi_epi32(p0, p1));
  }
  __m512i u[4];  // u[k] 128-bit chunk c = chunk-c sums of blocks 4k..4k+3
  for (int k = 0; k < 4; ++k)
    u[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * k], t[2 * k + 1]), _mm512_unpackhi_epi64(t[2 * k], t[2 * k + 1]));
  const __m512i w01 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i w23 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(w01, w23, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(w01, w23, _MM_SHUFFLE(3, 1, 3, 1)));
}


float vec_dot_old(int64_t n, const void* w, const void* act) {
  const auto* wb = static_cast<const BlockIq2Xxs*>(w);
  const auto* xb = static_cast<const BlockQ8_K*>(act);
  const int64_t nb = n / 256;
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i widx = _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(sizeof(BlockIq2Xxs))));
  const __m512i xidx = _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(sizeof(BlockQ8_K))));
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t t = 0;
  for (int64_t b = 0; b < nb; b += 16, ++t) {
    const int count = nb - b >= 16 ? 16 : static_cast<int>(nb - b);
    const __mmask16 valid = static_cast<__mmask16>((1u << count) - 1u);
    // A 4-byte gather at a block's start (d, qs[0]) stays inside the block; keep the low 16 bits.
    const __m512i dbits = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, widx, &wb[b].d, 1);
    const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dbits));
    const __m512 dx = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, xidx, &xb[b].d, 1);
    const __m512 isum = _mm512_cvtepi32_ps(chunk_isums(wb + b, xb + b, count));
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dw, dx), isum), _mm512_set1_ps(0.125f));
    acc[t & 1] = _mm512_mask_add_ps(acc[t & 1], valid, acc[t & 1], v);
  }
  return reduce_partials32_avx512(acc[0], acc[1]);
}

bool has_vbmi_bitalg_gfni() {
  static const bool v = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bitalg") &&
                        __builtin_cpu_supports("gfni");
  return v;
}

// ---- VBMI path ---------------------------------------------------------------------------------------

struct alignas(64) VbmiTables {
  uint16_t code[256];       // entry k: level code (0, 1, 2) of element j at bits 2j..2j+1
  uint8_t ksigns_rev[128];  // ksigns_iq2xs[s] with bit order reversed (bit 7 - j = element j)
  uint8_t idx_words[64];    // vpermb: word e <- grid index byte of entry e (qs byte 8(e/4) + e%4)
  uint8_t sign_shift[64];   // vpmultishiftqb on qs: qword k byte m <- bits 32 + 7m (entry 4k + m's field)
  uint8_t bit_idx[4][64];   // vpshufbitqmb for plane t: byte 2e + h <- bit 8(e%4) + 7 - (t + 4h)
  uint8_t act_idx[4][64];   // vpermi2b for plane t: byte 2e + h <- q8[8e + t + 4h] (mod 128)
  uint8_t z_idx[64];        // vpermi2b: byte 8k + m <- any byte of R's qword for entry 4k + m (mod 16)
};

VbmiTables make_vbmi_tables() {
  VbmiTables t{};
  for (int k = 0; k < 256; ++k) {
    uint16_t c = 0;
    for (int j = 0; j < 8; ++j) {
      const unsigned v = (iq2xxs_grid[k] >> (8 * j)) & 0xff;
      c = static_cast<uint16_t>(c | (v == 8 ? 0u : v == 25 ? 1u : 2u) << (2 * j));
    }
    t.code[k] = c;
  }
  for (int s = 0; s < 128; ++s) {
    uint8_t r = 0;
    for (int j = 0; j < 8; ++j)
      if ((ksigns_iq2xs[s] >> j) & 1) r = static_cast<uint8_t>(r | 1u << (7 - j));
    t.ksigns_rev[s] = r;
  }
  for (int e = 0; e < 32; ++e) {
    t.idx_words[2 * e] = static_cast<uint8_t>(8 * (e >> 2) + (e & 3));
    t.idx_words[2 * e + 1] = 0;  // zeroed by the mask
    for (int h = 0; h < 2; ++h)
      for (int p = 0; p < 4; ++p) {
        t.bit_idx[p][2 * e + h] = static_cast<uint8_t>(8 * (e & 3) + 7 - (p + 4 * h));
        t.act_idx[p][2 * e + h] = static_cast<uint8_t>((8 * e + p + 4 * h) & 127);
      }
  }
  for (int k = 0; k < 8; ++k)
    for (int m = 0; m < 8; ++m) {
      t.sign_shift[8 * k + m] = static_cast<uint8_t>(m < 4 ? 32 + 7 * m : 0);
      t.z_idx[8 * k + m] = static_cast<uint8_t>(m < 4 ? 8 * ((4 * k + m) & 15) : 0);
    }
  return t;
}

// Built on first use (not at static-init time, so no initialization-order dependence).
const VbmiTables& vbmi_tables() {
  static const VbmiTables t = make_vbmi_tables();
  return t;
}

constexpr int kChunk = 16;

// Activation side of one super-block, in the "plane" layout of the weights: plane t holds, for each
// entry e (8 weights), its elements t and t + 4 at bytes 2e, 2e + 1.
struct alignas(64) ActChunk {
  __m512i qa[kChunk][4];  // plane t: |q8| (unsigned bytes); byte 2e + h = |q8[8e + t + 4h]|
  __m512i z[kChunk];      // qword k byte m: sign bits of q8[32k + 8m ..], bit 7 - j = element j
  float dx[kChunk];
};

}  // namespace

#pragma GCC push_options
#pragma GCC target("avx512vbmi,avx512bitalg,gfni")

namespace {

// gf2p8affineqb matrix taking the 2-bit level code at bits 2t, 2t+1 of a byte (other bits ignored)
// to its magnitude with constant 0x08: 8 = 001000b, 25 = 011001b, 43 = 101011b, i.e.
// out = 0x08 ^ x0·0x11 ^ x1·0x23 (GF(2)-affine in the code bits x0, x1).
constexpr long long level_matrix(int t) {
  const unsigned long long x0 = 1ull << (2 * t), x1 = 2ull << (2 * t);
  // row for output bit i is byte 7 - i
  return static_cast<long long>((x0 | x1) << 56 | x1 << 48 | x0 << 24 | x1 << 16);
}

struct Consts {
  __m512i code[8], ks0, ks1, idx_words, sign_shift, bit_idx[4], lvl[4];
};

inline Consts load_consts(const VbmiTables& tb) {
  Consts c;
  const auto* code = reinterpret_cast<const __m512i*>(tb.code);
  for (int i = 0; i < 8; ++i) c.code[i] = _mm512_load_si512(code + i);
  c.ks0 = _mm512_load_si512(tb.ksigns_rev);
  c.ks1 = _mm512_load_si512(tb.ksigns_rev + 64);
  c.idx_words = _mm512_load_si512(tb.idx_words);
  c.sign_shift = _mm512_load_si512(tb.sign_shift);
  for (int t = 0; t < 4; ++t) {
    c.bit_idx[t] = _mm512_load_si512(tb.bit_idx[t]);
    c.lvl[t] = _mm512_set1_epi64(level_matrix(t));
  }
  return c;
}

inline void prep_act(const VbmiTables& tb, const BlockQ8_K* x, int count, ActChunk& a) {
  const __m512i hi = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i zi = _mm512_load_si512(tb.z_idx);
  constexpr __mmask64 kUpper = 0xffffffff00000000ull;
  for (int j = 0; j < count; ++j) {
    const __m512i z0 = _mm512_loadu_si512(x[j].qs), z1 = _mm512_loadu_si512(x[j].qs + 64);
    const __m512i z2 = _mm512_loadu_si512(x[j].qs + 128), z3 = _mm512_loadu_si512(x[j].qs + 192);
    for (int t = 0; t < 4; ++t) {
      const __m512i ix = _mm512_load_si512(tb.act_idx[t]);
      const __m512i q = _mm512_mask_blend_epi8(kUpper, _mm512_permutex2var_epi8(z0, ix, z1), _mm512_permutex2var_epi8(z2, ix, z3));
      a.qa[j][t] = _mm512_abs_epi8(q);
    }
    // every byte of qword k of r_i: bit b = sign of byte 7 - b of activation qword 8i + k
    const __m512i r0 = _mm512_gf2p8affine_epi64_epi8(hi, z0, 0), r1 = _mm512_gf2p8affine_epi64_epi8(hi, z1, 0);
    const __m512i r2 = _mm512_gf2p8affine_epi64_epi8(hi, z2, 0), r3 = _mm512_gf2p8affine_epi64_epi8(hi, z3, 0);
    a.z[j] = _mm512_mask_blend_epi8(kUpper, _mm512_permutex2var_epi8(r0, zi, r1), _mm512_permutex2var_epi8(r2, zi, r3));
    a.dx[j] = x[j].d;
  }
}

inline __m512i block_dot_vbmi(const Consts& c, const BlockIq2Xxs& w, const __m512i* qa, __m512i z) {
  const __m512i q = _mm512_loadu_si512(w.qs);  // qword k = a0_k | a1_k << 32 (group k)
  // Level codes: word e of L = code of entry e (qword k = the four entries of group k).
  const __m512i iw = _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, c.idx_words, q);
  const __mmask32 k6 = _mm512_test_epi16_mask(iw, _mm512_set1_epi16(0x40));
  const __mmask32 k7 = _mm512_test_epi16_mask(iw, _mm512_set1_epi16(0x80));
  const __m512i r01 = _mm512_permutex2var_epi16(c.code[0], iw, c.code[1]);
  const __m512i r23 = _mm512_permutex2var_epi16(c.code[2], iw, c.code[3]);
  const __m512i r45 = _mm512_permutex2var_epi16(c.code[4], iw, c.code[5]);
  const __m512i r67 = _mm512_permutex2var_epi16(c.code[6], iw, c.code[7]);
  const __m512i L = _mm512_mask_blend_epi16(k7, _mm512_mask_blend_epi16(k6, r01, r23), _mm512_mask_blend_epi16(k6, r45, r67));
  // Signs: qword k byte m = ksigns_rev of entry 4k + m, XOR the activation signs.
  const __m512i si = _mm512_multishift_epi64_epi8(c.sign_shift, q);
  const __m512i s = _mm512_xor_si512(_mm512_permutex2var_epi8(c.ks0, si, c.ks1), z);
  // Plane t: byte 2e + h = magnitude of element t + 4h of entry e (code byte h, bits 2t, 2t+1).
  // Dword u = entries 2u, 2u+1 = group u/2 in every plane, so the planes share one accumulator.
  __m512i acc = _mm512_setzero_si512();
  for (int t = 0; t < 4; ++t) {
    const __m512i g = _mm512_gf2p8affine_epi64_epi8(L, c.lvl[t], 0x08);
    const __mmask64 neg = _mm512_bitshuffle_epi64_mask(s, c.bit_idx[t]);
    const __m512i v = _mm512_mask_sub_epi8(g, neg, _mm512_setzero_si512(), g);
    acc = _mm512_dpbusd_epi32(acc, qa[t], v);
  }
  // (2·ls + 1) of group k in both dwords of qword k (bits 59..63 >> 59 = 2 ls + bit 59; bit 0 forced).
  const __m512i sh = _mm512_srli_epi64(q, 59);
  const __m512i sc = _mm512_ternarylogic_epi64(sh, _mm512_slli_epi64(sh, 32), _mm512_set1_epi64(0x0000000100000001ll), 0xfe);
  return _mm512_mullo_epi32(acc, sc);
}

// Lane j = exact int dot of block j for the count (<= 16) valid blocks, 0 elsewhere.
inline __m512i chunk_isums_vbmi(const Consts& c, const BlockIq2Xxs* w, const ActChunk& a, int count) {
  __m512i t[8];
  for (int k = 0; k < 8; ++k) {
    const __m512i p0 = 2 * k < count ? block_dot_vbmi(c, w[2 * k], a.qa[2 * k], a.z[2 * k]) : _mm512_setzero_si512();
    const __m512i p1 =
        2 * k + 1 < count ? block_dot_vbmi(c, w[2 * k + 1], a.qa[2 * k + 1], a.z[2 * k + 1]) : _mm512_setzero_si512();
    t[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(p0, p1), _mm512_unpackhi_epi32(p0, p1));
  }
  __m512i u[4];
  for (int k = 0; k < 4; ++k)
    u[k] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * k], t[2 * k + 1]), _mm512_unpackhi_epi64(t[2 * k], t[2 * k + 1]));
  const __m512i w01 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i w23 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(u[2], u[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(w01, w23, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(w01, w23, _MM_SHUFFLE(3, 1, 3, 1)));
}

inline float reduce_acc(__m512 a0, __m512 a1) {
  return reduce_partials32_avx512(a0, a1);
}

// Chunk t (blocks b .. b + count − 1) of nr rows against its prepared activation side `a`.
inline void rows_chunk(const Consts& c, const void* w, int64_t w_stride, int64_t b, int count, int64_t t,
                       const ActChunk& a, int nr, __m512 (*acc)[2]) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i widx = _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(sizeof(BlockIq2Xxs))));
  const __mmask16 valid = static_cast<__mmask16>((1u << count) - 1u);
  const __m512 dx = _mm512_maskz_loadu_ps(valid, a.dx);
  for (int r = 0; r < nr; ++r) {
    const auto* wb = reinterpret_cast<const BlockIq2Xxs*>(static_cast<const uint8_t*>(w) + r * w_stride) + b;
    prefetch_ahead(wb, count * static_cast<int64_t>(sizeof(BlockIq2Xxs)));  // stream_prefetch.h
    // A 4-byte gather at a block's start (d, qs[0]) stays inside the block; keep the low 16 bits.
    const __m512i dbits = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, widx, &wb->d, 1);
    const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dbits));
    const __m512 isum = _mm512_cvtepi32_ps(chunk_isums_vbmi(c, wb, a, count));
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dw, dx), isum), _mm512_set1_ps(0.125f));
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

}  // namespace

#pragma GCC pop_options

float iq2_xxs_vec_dot_avx512(int64_t n, const void* w, const void* act) {
  if (has_vbmi_bitalg_gfni()) {
    float out;
    dot_rows_vbmi(n, w, 0, act, 1, &out);
    return out;
  }
  return vec_dot_old(n, w, act);
}

// Without VBMI the "prepared" activation is the Q8_K row itself.
int64_t iq2_xxs_prepared_act_bytes(int64_t n) {
  const int64_t chunks = (n / 256 + kChunk - 1) / kChunk;
  return std::max<int64_t>(chunks * static_cast<int64_t>(sizeof(ActChunk)),
                           n / 256 * static_cast<int64_t>(sizeof(BlockQ8_K)));
}

void iq2_xxs_prepare_act_avx512(const void* act, int64_t n, void* out) {
  if (has_vbmi_bitalg_gfni()) return prepare_vbmi(act, n, out);
  std::memcpy(out, act, static_cast<size_t>(n / 256) * sizeof(BlockQ8_K));
}

void iq2_xxs_vec_dot_rows_prepared_avx512(int64_t n, const void* w, int64_t w_stride, const void* prepared, int nr,
                                          float* out) {
  if (has_vbmi_bitalg_gfni()) return dot_rows_vbmi_prepared(n, w, w_stride, prepared, nr, out);
  for (int r = 0; r < nr; ++r) out[r] = vec_dot_old(n, static_cast<const uint8_t*>(w) + r * w_stride, prepared);
}

float iq2_xxs_vec_dot_avx512_base(int64_t n, const void* w, const void* act) { return vec_dot_old(n, w, act); }

void iq2_xxs_vec_dot_rows_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  if (has_vbmi_bitalg_gfni()) return dot_rows_vbmi(n, w, w_stride, act, nr, out);
  for (int r = 0; r < nr; ++r) out[r] = vec_dot_old(n, static_cast<const uint8_t*>(w) + r * w_stride, act);
}

}  // namespace dsv4::cpu
