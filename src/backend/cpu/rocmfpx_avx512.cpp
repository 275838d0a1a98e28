// backend/cpu/rocmfpx_avx512.cpp — AVX-512 (F/BW/VL/DQ/VNNI) vec_dots of the ROCmFPx family against
// BlockQ8_0Act activations. Bit-identical to the scalar references in rocmfpx.cpp. Types 101, 104 and
// 107 also have *_avx512vbmi kernels (VBMI multi-row), used only at the kAvx512Vbmi level.
//
// ACCUMULATION ORDER (the one of rocmfpx.cpp, reproduced lane-wise):
//   Blocks go in chunks of 16; chunk c = blocks 16c .. 16c+15 feeds float accumulator acc[c & 1],
//   lane j = block 16c + j, i.e. lane j of acc[t] is partial[16t + j] of Partials32.
//   Per chunk, the exact integer sums isum0 / isum1 of each block (per 16-element half) land in
//   int32 vectors (lane j = block 16c + j); the float step is the scalar one, lane-wise:
//     single-scale: v = (s * d_x) * (float)(isum0 + isum1)
//     two-scale:    v = d_x * (s0 * (float)isum0 + s1 * (float)isum1)
//     acc[c & 1] = acc[c & 1] + v
//   A final partial chunk is copied into a zero-padded 16-block buffer (a zero block adds +0.0,
//   which leaves a partial's bits unchanged: partials start at +0 and never become -0).
//   Final: acc0 + acc1 (s = 16), fold 256-bit halves (s = 8), 128 (s = 4), 64 (s = 2), 32 (s = 1).
//
// Integer dot of one block pair (one zmm; 128-bit lane k = block b + (k >> 1), half k & 1, elements in
// natural order): the decoder gives u = level + K as unsigned bytes (K per type: FP4 16, FP6 31,
// FP8 128, FP3 4, FP2 1), and
//   dot = vpdpbusd(vpdpbusd(512K, u, xq), xq ^ 0x80, -K)  = Σ u*xq - K*Σ xq = Σ level * xq
// per dword (exact for every int8 xq: xq ^ 0x80 = xq + 128 as an unsigned byte).
// The four dwords of each lane are summed by an unpack/add transpose; any integer order is exact.
#include <immintrin.h>

#include <array>
#include <cstring>

#include "backend/cpu/quant.h"
#include "backend/cpu/rocmfpx.h"
#include "backend/cpu/rocmfpx_fp4x17_avx512.h"
#include "backend/cpu/simd_reduce.h"
#include "backend/cpu/stream_prefetch.h"

namespace dsv4::cpu::rocmfpx {
namespace {

constexpr int kChunk = 16;

// ---- constant tables --------------------------------------------------------------------------

struct alignas(64) Bytes64 {
  uint8_t b[64];
};
struct alignas(64) Words32 {
  uint16_t w[32];
};
struct alignas(64) Ints16 {
  int32_t v[16];
};

// pshufb index building 16-bit windows for a bitstream of c-bit codes: word w of lane k takes bytes
// base(k) + B, base(k) + B + 1 with B = (2cw) >> 3.
template <int kC>
constexpr Bytes64 window_index(const int (&base)[4]) {
  Bytes64 t{};
  for (int k = 0; k < 4; ++k)
    for (int w = 0; w < 8; ++w) {
      const int bit = 2 * kC * w;
      const int B = bit >> 3;
      t.b[16 * k + 2 * w] = static_cast<uint8_t>(base[k] + B);
      t.b[16 * k + 2 * w + 1] = kC == 2 ? 0x80 : static_cast<uint8_t>(base[k] + B + 1);
    }
  return t;
}
// Multipliers moving bits o .. o+2c-1 of each window to the top of the word (o = (2cw) & 7).
template <int kC>
constexpr Words32 window_mult() {
  Words32 t{};
  for (int k = 0; k < 4; ++k)
    for (int w = 0; w < 8; ++w) t.w[8 * k + w] = static_cast<uint16_t>(1u << (16 - 2 * kC - ((2 * kC * w) & 7)));
  return t;
}

constexpr int kBaseFp2[4] = {0, 4, 0, 4};  // every lane holds its block's 8 bytes (twice)
constexpr int kBaseFp3[4] = {0, 2, 0, 2};  // even lanes: bytes 0-7, odd lanes: bytes 4-11 (twice)
constexpr int kBaseFp6[4] = {0, 4, 0, 4};   // even lanes hold bytes 0-15, odd lanes bytes 8-23
constexpr Bytes64 kWinFp2 = window_index<2>(kBaseFp2);
constexpr Bytes64 kWinFp3 = window_index<3>(kBaseFp3);
constexpr Bytes64 kWinFp6 = window_index<6>(kBaseFp6);
constexpr Words32 kMulFp2 = window_mult<2>();
constexpr Words32 kMulFp3 = window_mult<3>();
constexpr Words32 kMulFp6 = window_mult<6>();

constexpr Bytes64 level_table(const int8_t* levels, int count, int k) {
  Bytes64 t{};
  for (int i = 0; i < 64; ++i) t.b[i] = static_cast<uint8_t>(levels[(i & 15) % count] + k);
  return t;
}
constexpr Bytes64 kFp4Table = level_table(kFp4Level, 16, 16);
constexpr Bytes64 kFp3Table = level_table(kFp3Level, 8, 4);

// permutex2var indices: lane j of isum_h = block j; source R0 (blocks 0-7) / R1 (blocks 8-15), where
// R element 4k + i = lane k (block 2i + (k >> 1), half k & 1).
constexpr Ints16 isum_index(int h) {
  Ints16 t{};
  for (int j = 0; j < 16; ++j) {
    const int jj = j & 7;
    t.v[j] = 4 * (2 * (jj & 1) + h) + (jj >> 1) + (j >= 8 ? 16 : 0);
  }
  return t;
}
constexpr Ints16 kIsum0 = isum_index(0);
constexpr Ints16 kIsum1 = isum_index(1);

inline __m512i load64(const void* p) { return _mm512_load_si512(p); }

// Splits 16-bit words holding two adjacent c-bit codes in bits 0 .. 2c-1 into one code per byte.
template <int kC>
inline __m512i split_codes(__m512i p) {
  const __m512i s = _mm512_slli_epi16(p, 8 - kC);
  const __m512i r = _mm512_mask_blend_epi8(0xAAAAAAAAAAAAAAAAull, p, s);
  return _mm512_and_si512(r, _mm512_set1_epi8(static_cast<char>((1 << kC) - 1)));
}

// Windows -> words with the two codes in bits 0 .. 2c-1 (garbage above is shifted out).
template <int kC>
inline __m512i window_codes(__m512i bytes, const Bytes64& win, const Words32& mul) {
  const __m512i w = _mm512_shuffle_epi8(bytes, load64(win.b));
  const __m512i t = _mm512_srli_epi16(_mm512_mullo_epi16(w, load64(mul.w)), 16 - 2 * kC);
  return split_codes<kC>(t);
}

inline long long load_u64(const uint8_t* p) {
  long long v;
  std::memcpy(&v, p, 8);
  return v;
}

// ---- per-type decoders: u = level + K for the block pair at p, p + kBytes --------------------

template <int64_t kB, bool kTwoScales>
struct Fp4 {
  static constexpr int64_t kBytes = kB;
  static constexpr bool kTwo = kTwoScales;
  static constexpr int kK = 16;
  static __m512i decode(const uint8_t* p) {
    // [qs_b, qs_b, qs_b+1, qs_b+1] straight from memory (broadcast loads: no shuffle-port work);
    // lanes become [b low nibbles, b high nibbles, b+1 low, b+1 high].
    const __m512i q = _mm512_mask_broadcast_i32x4(
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 0xFF00,
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kBytes)));
    const __m512i nib = _mm512_and_si512(_mm512_srlv_epi64(q, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)),
                                         _mm512_set1_epi8(0x0F));
    return _mm512_shuffle_epi8(load64(kFp4Table.b), nib);
  }
};
using Fp4Two = Fp4<kBytes100, true>;
using Fp4One = Fp4<kBytes101, false>;
struct Fp8 {
  static constexpr int64_t kBytes = kBytes103;
  static constexpr bool kTwo = false;
  static constexpr int kK = 128;
  static __m512i decode(const uint8_t* p) {
    const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + kBytes));
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(y0), y1, 1);
    return _mm512_xor_si512(z, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
};
struct Fp2 {
  static constexpr int64_t kBytes = kBytes107;
  static constexpr bool kTwo = true;
  static constexpr int kK = 1;
  static __m512i decode(const uint8_t* p) {
    // Lanes 0-1: block b's 8 code bytes, lanes 2-3: block b+1's (qword broadcast loads).
    const __m512i q = _mm512_mask_set1_epi64(_mm512_set1_epi64(load_u64(p)), 0xF0, load_u64(p + kBytes));
    return window_codes<2>(q, kWinFp2, kMulFp2);  // code = level + 1
  }
};
struct Fp3 {
  static constexpr int64_t kBytes = kBytes104;
  static constexpr bool kTwo = true;
  static constexpr int kK = 4;
  static __m512i decode(const uint8_t* p) {
    // Lane 2j + h: 8 bytes of block b + j starting at byte 4h (in bounds: bytes 0-11 of the block).
    __m512i q = _mm512_set1_epi64(load_u64(p));
    q = _mm512_mask_set1_epi64(q, 0x0C, load_u64(p + 4));
    q = _mm512_mask_set1_epi64(q, 0x30, load_u64(p + kBytes));
    q = _mm512_mask_set1_epi64(q, 0xC0, load_u64(p + kBytes + 4));
    return _mm512_shuffle_epi8(load64(kFp3Table.b), window_codes<3>(q, kWinFp3, kMulFp3));
  }
};
struct Fp6 {
  static constexpr int64_t kBytes = kBytes102;
  static constexpr bool kTwo = true;
  static constexpr int kK = 31;
  static __m512i decode(const uint8_t* p) {
    const __m256i y0 = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p + 8),
                                           reinterpret_cast<const __m128i*>(p));
    const __m256i y1 = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p + kBytes + 8),
                                           reinterpret_cast<const __m128i*>(p + kBytes));
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(y0), y1, 1);
    const __m512i c = window_codes<6>(q, kWinFp6, kMulFp6);
    // level + 31: c + 31 for a positive code, 63 - c (= 31 - magnitude) for a negative one.
    const __mmask64 neg = _mm512_test_epi8_mask(c, _mm512_set1_epi8(0x20));
    return _mm512_mask_sub_epi8(_mm512_add_epi8(c, _mm512_set1_epi8(31)), neg, _mm512_set1_epi8(63), c);
  }
};

// ---- shared chunk machinery -------------------------------------------------------------------

// Σ of the four dwords of every 128-bit lane of a, b, c, d: lane k of the result = {Σa_k, Σb_k, Σc_k, Σd_k}.
inline __m512i hsum4(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
}

// UE4M3 decode of 16 scale bytes (one per int32 lane); same values as ue4m3_table().
inline __m512 decode_scales(__m512i e) {
  const __m512 normal = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(e, 20), _mm512_set1_epi32(119 << 23)));
  const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(e), _mm512_set1_ps(1.0f / 1024.0f));
  const __mmask16 is_sub = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(8));
  const __mmask16 valid = _mm512_cmple_epu32_mask(e, _mm512_set1_epi32(0x7E));
  return _mm512_maskz_mov_ps(valid, _mm512_mask_blend_ps(is_sub, normal, sub));
}

// One chunk of 16 blocks: returns acc + the chunk's 16 block values (lane j = block j).
template <class T>
[[gnu::always_inline]] inline __m512 chunk(const uint8_t* w, const BlockQ8_0Act* a, __m512 acc) {
  const __m512i negk = _mm512_set1_epi8(static_cast<char>(-T::kK));
  const __m512i bias = _mm512_set1_epi32(512 * T::kK);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i v[8];
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m) {
    const __m512i u = T::decode(w + 2 * m * T::kBytes);
    // Activations [qs_b | qs_b+1]: a 64-byte load at qs_b (stays inside block b+1), upper half
    // replaced by a masked load ending at the end of qs_b+1.
    const __m512i x = _mm512_mask_loadu_epi64(_mm512_loadu_si512(a[2 * m].qs), 0xF0, a[2 * m + 1].qs - 32);
    // 512K + Σ u·x + Σ (x + 128)·(-K) = Σ u·x - K·Σ x  per dword (4 products each).
    v[m] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(bias, u, x), _mm512_xor_si512(x, flip), negk);
  }
  const __m512i r0 = hsum4(v[0], v[1], v[2], v[3]);
  const __m512i r1 = hsum4(v[4], v[5], v[6], v[7]);
  const __m512i isum0 = _mm512_permutex2var_epi32(r0, load64(kIsum0.v), r1);
  const __m512i isum1 = _mm512_permutex2var_epi32(r0, load64(kIsum1.v), r1);
  // The dword ending at each block's last byte (scale byte(s) in its top byte(s)). Plain loads +
  // inserts: cheaper than vpgatherdd here.
  alignas(64) uint32_t ew[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) std::memcpy(&ew[j], w + j * T::kBytes + T::kBytes - 4, 4);
  const __m512i eb = _mm512_load_si512(ew);
  const __m512 dx = _mm512_set_ps(a[15].d, a[14].d, a[13].d, a[12].d, a[11].d, a[10].d, a[9].d, a[8].d, a[7].d,
                                  a[6].d, a[5].d, a[4].d, a[3].d, a[2].d, a[1].d, a[0].d);
  __m512 val;
  if constexpr (T::kTwo) {
    const __m512 s0 = decode_scales(_mm512_and_si512(_mm512_srli_epi32(eb, 16), _mm512_set1_epi32(0xFF)));
    const __m512 s1 = decode_scales(_mm512_srli_epi32(eb, 24));
    const __m512 t0 = _mm512_mul_ps(s0, _mm512_cvtepi32_ps(isum0));
    const __m512 t1 = _mm512_mul_ps(s1, _mm512_cvtepi32_ps(isum1));
    val = _mm512_mul_ps(dx, _mm512_add_ps(t0, t1));
  } else {
    const __m512 s = decode_scales(_mm512_srli_epi32(eb, 24));
    val = _mm512_mul_ps(_mm512_mul_ps(s, dx), _mm512_cvtepi32_ps(_mm512_add_epi32(isum0, isum1)));
  }
  return _mm512_add_ps(acc, val);
}

template <class T>
float vec_dot(int64_t n, const void* wv, const void* act) {
  const auto* w = static_cast<const uint8_t*>(wv);
  const auto* a = static_cast<const BlockQ8_0Act*>(act);
  const int64_t nb = n / kBlock;
  const int64_t full = nb / kChunk;
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  __m512 acc0 = _mm512_setzero_ps();
  __m512 acc1 = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 1 < full; c += 2) {
    prefetch_ahead(w + c * kChunk * T::kBytes, 2 * kChunk * T::kBytes);  // stream_prefetch.h
    acc0 = chunk<T>(w + c * kChunk * T::kBytes, a + c * kChunk, acc0);
    acc1 = chunk<T>(w + (c + 1) * kChunk * T::kBytes, a + (c + 1) * kChunk, acc1);
  }
  if (c < full) acc0 = chunk<T>(w + c * kChunk * T::kBytes, a + c * kChunk, acc0);
  acc[0] = acc0;
  acc[1] = acc1;
  const int64_t rest = nb - full * kChunk;
  if (rest > 0) {
    alignas(64) uint8_t wbuf[kChunk * T::kBytes];
    alignas(64) BlockQ8_0Act abuf[kChunk];
    std::memset(wbuf, 0, sizeof(wbuf));
    std::memset(static_cast<void*>(abuf), 0, sizeof(abuf));
    std::memcpy(wbuf, w + full * kChunk * T::kBytes, static_cast<size_t>(rest * T::kBytes));
    std::memcpy(static_cast<void*>(abuf), a + full * kChunk, static_cast<size_t>(rest) * sizeof(BlockQ8_0Act));
    acc[full & 1] = chunk<T>(wbuf, abuf, acc[full & 1]);
  }
  return reduce_partials32_avx512(acc[0], acc[1]);
}

// Type 101 for the VBMI multi-row kernel (rocmfpx_fp4x17_avx512.h): qs at 0, e at 16, u = level + 16.
struct Fp4FastRows {
  static constexpr int kQsOff = 0;
  static constexpr int kEOff = 16;
  static constexpr int kK = 16;
  static constexpr fp4x17::Bytes64 kTable = [] {
    fp4x17::Bytes64 t{};
    for (int i = 0; i < 64; ++i) t.b[i] = static_cast<uint8_t>(kFp4Level[i & 15] + 16);
    return t;
  }();
  static __m512 scale(__m512i e) { return decode_scales(e); }
};

// ---- FP2 / FP3 (types 107 / 104) multi-row VBMI kernel ---------------------------------------------
//
// Same accumulation order (natural lanes: lane j of a chunk = block 16c + j, acc[c & 1]). Half-chunk h
// (blocks 8h .. 8h+7, 128 bytes loaded from its first block): C_h,o = vpermt2b of qword q = 8 code
// bytes of block 8h + q from byte o (FP2: o = 0; FP3: o = 0 and 4, so every 3-bit code lies inside one
// qword). M_h,r = vpmultishiftqb: dword 2q + e = the codes of elements 8r + 4e .. 8r + 4e + 3 of block
// 8h + q, one per byte (then & 3 for FP2 = level + 1, or a period-8 vpermb table level + 4 for FP3).
// X_h,r = the activation bytes in the same layout (qword q = qs[8r .. 8r+7] of block 8h + q).
// D_h,H = vpdpbusd over r = 2H, 2H + 1: two dwords per block and half; isum_H = even + odd dwords
// (vpermt2d) + corr_H, corr_H = -K Σ x over the half (from vpdpbusd on x ^ 0x80, row-independent).
#pragma GCC push_options
#pragma GCC target("avx512vbmi")

struct alignas(64) CodeAct {
  __m512i x[2][4];
  __m512i corr[2];
  __m512 dx;
};

// X_h,r for h = 0, 1 (8x4 qword transposes of the 16 blocks' qs) and the half-block corrections.
template <int kK>
inline void code_prep(const BlockQ8_0Act* a, CodeAct* out) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i negk = _mm512_set1_epi8(static_cast<char>(-kK));
  const __m512i lo = _mm512_setr_epi64(0, 4, 8, 12, 1, 5, 9, 13);
  const __m512i hi = _mm512_setr_epi64(2, 6, 10, 14, 3, 7, 11, 15);
  __m512i d[2][2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    __m512i z[4];
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      const BlockQ8_0Act* b = a + 8 * h + 2 * p;
      z[p] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[0].qs))),
                                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[1].qs)), 1);
    }
    // A01_lo: qword 0 (r = 0) of blocks 0..3, then qword 1 (r = 1); A01_hi: r = 2, 3.
    const __m512i a01l = _mm512_permutex2var_epi64(z[0], lo, z[1]);
    const __m512i a01h = _mm512_permutex2var_epi64(z[0], hi, z[1]);
    const __m512i a23l = _mm512_permutex2var_epi64(z[2], lo, z[3]);
    const __m512i a23h = _mm512_permutex2var_epi64(z[2], hi, z[3]);
    __m512i* x = out->x[h];
    x[0] = _mm512_shuffle_i64x2(a01l, a23l, 0x44);
    x[1] = _mm512_shuffle_i64x2(a01l, a23l, 0xEE);
    x[2] = _mm512_shuffle_i64x2(a01h, a23h, 0x44);
    x[3] = _mm512_shuffle_i64x2(a01h, a23h, 0xEE);
#pragma GCC unroll 2
    for (int H = 0; H < 2; ++H)
      d[h][H] = _mm512_dpbusd_epi32(
          _mm512_dpbusd_epi32(_mm512_set1_epi32(1024 * kK), _mm512_xor_si512(x[2 * H], flip), negk),
          _mm512_xor_si512(x[2 * H + 1], flip), negk);
  }
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
#pragma GCC unroll 2
  for (int H = 0; H < 2; ++H)
    out->corr[H] = _mm512_add_epi32(_mm512_permutex2var_epi32(d[0][H], even, d[1][H]),
                                    _mm512_permutex2var_epi32(d[0][H], odd, d[1][H]));
  out->dx = _mm512_setr_ps(a[0].d, a[1].d, a[2].d, a[3].d, a[4].d, a[5].d, a[6].d, a[7].d, a[8].d, a[9].d, a[10].d,
                           a[11].d, a[12].d, a[13].d, a[14].d, a[15].d);
}

// vpermt2b index: qword q = bytes o .. o+7 of block q (relative to the half-chunk start).
constexpr Bytes64 code_index(int bytes, int o) {
  Bytes64 t{};
  for (int q = 0; q < 8; ++q)
    for (int i = 0; i < 8; ++i) t.b[8 * q + i] = static_cast<uint8_t>(bytes * q + o + i);
  return t;
}
// Scale bytes of half h: dword 8h + q = e0 | e1 << 8 of block q (bytes - 2, bytes - 1).
constexpr Bytes64 scale2_index(int bytes, int h) {
  Bytes64 t{};
  for (int q = 0; q < 8; ++q) {
    t.b[4 * (8 * h + q)] = static_cast<uint8_t>(bytes * q + bytes - 2);
    t.b[4 * (8 * h + q) + 1] = static_cast<uint8_t>(bytes * q + bytes - 1);
  }
  return t;
}
// multishift control for M_r: byte i of dword e of each qword = bit offset of element 8r + 4e + i in
// the source qword (bits per code c; FP3 codes of r >= 2 come from the qword at byte 4: -32).
constexpr Bytes64 shift_ctrl(int c, int r) {
  Bytes64 t{};
  for (int q = 0; q < 8; ++q)
    for (int e = 0; e < 2; ++e)
      for (int i = 0; i < 4; ++i) {
        const int el = 8 * r + 4 * e + i;
        t.b[8 * q + 4 * e + i] = static_cast<uint8_t>(c * el - (c == 3 && r >= 2 ? 32 : 0));
      }
  return t;
}

template <int kC>
struct CodeKernel {
  using Act = CodeAct;
  static constexpr int64_t kBlockBytes = kC == 2 ? kBytes107 : kBytes104;
  static constexpr int kK = kC == 2 ? 1 : 4;
  static void prep(const BlockQ8_0Act* a, Act* out) { code_prep<kK>(a, out); }
  static float finish(__m512 a0, __m512 a1) { return fp4x17::reduce_natural(a0, a1); }

  [[gnu::always_inline]] static inline __m512 row(const uint8_t* w, const Act& x, __m512 acc) {
    static constexpr Bytes64 kC0 = code_index(kBlockBytes, 0), kC4 = code_index(kBlockBytes, 4);
    static constexpr Bytes64 kE0 = scale2_index(kBlockBytes, 0), kE1 = scale2_index(kBlockBytes, 1);
    static constexpr Bytes64 kS[4] = {shift_ctrl(kC, 0), shift_ctrl(kC, 1), shift_ctrl(kC, 2), shift_ctrl(kC, 3)};
    static constexpr Bytes64 kT = [] {
      Bytes64 t{};
      for (int i = 0; i < 64; ++i) t.b[i] = static_cast<uint8_t>(kFp3Level[i & 7] + 4);
      return t;
    }();
    constexpr int64_t kHalf = 8 * kBlockBytes;  // 80 / 112 bytes
    constexpr __mmask64 kTailMask = (1ull << (kHalf - 64)) - 1;
    __m512i d[2][2];
    __m512i e = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const uint8_t* p = w + h * kHalf;
      const __m512i ya = _mm512_loadu_si512(p);
      const __m512i yb = _mm512_maskz_loadu_epi8(kTailMask, p + 64);
      const __m512i c0 = _mm512_permutex2var_epi8(ya, load64(kC0.b), yb);
      const __m512i c1 = kC == 3 ? _mm512_permutex2var_epi8(ya, load64(kC4.b), yb) : c0;
      e = _mm512_or_si512(e, _mm512_maskz_permutex2var_epi8(h == 0 ? 0x0000000033333333ull : 0x3333333300000000ull, ya,
                                                            load64(h == 0 ? kE0.b : kE1.b), yb));
      __m512i m[4];
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const __m512i sh = _mm512_multishift_epi64_epi8(load64(kS[r].b), r < 2 ? c0 : c1);
        if constexpr (kC == 2)
          m[r] = _mm512_and_si512(sh, _mm512_set1_epi8(3));
        else
          m[r] = _mm512_permutexvar_epi8(sh, load64(kT.b));
      }
#pragma GCC unroll 2
      for (int H = 0; H < 2; ++H)
        d[h][H] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), m[2 * H], x.x[h][2 * H]),
                                      m[2 * H + 1], x.x[h][2 * H + 1]);
    }
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512i isum0 = _mm512_add_epi32(_mm512_add_epi32(_mm512_permutex2var_epi32(d[0][0], even, d[1][0]),
                                                            _mm512_permutex2var_epi32(d[0][0], odd, d[1][0])),
                                           x.corr[0]);
    const __m512i isum1 = _mm512_add_epi32(_mm512_add_epi32(_mm512_permutex2var_epi32(d[0][1], even, d[1][1]),
                                                            _mm512_permutex2var_epi32(d[0][1], odd, d[1][1])),
                                           x.corr[1]);
    const __m512 s0 = decode_scales(_mm512_and_si512(e, _mm512_set1_epi32(0xFF)));
    const __m512 s1 = decode_scales(_mm512_srli_epi32(e, 8));
    const __m512 t0 = _mm512_mul_ps(s0, _mm512_cvtepi32_ps(isum0));
    const __m512 t1 = _mm512_mul_ps(s1, _mm512_cvtepi32_ps(isum1));
    return _mm512_add_ps(acc, _mm512_mul_ps(x.dx, _mm512_add_ps(t0, t1)));
  }
};

template <int kC>
void code_rows(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  fp4x17::rows_driver<CodeKernel<kC>>(n, w, w_stride, act, nr, out);
}

#pragma GCC pop_options

template <class T>
void rows_fallback(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  for (int r = 0; r < nr; ++r) out[r] = vec_dot<T>(n, static_cast<const uint8_t*>(w) + r * w_stride, act);
}

}  // namespace

float vec_dot_104_avx512(int64_t n, const void* w, const void* act) { return vec_dot<Fp3>(n, w, act); }
float vec_dot_107_avx512(int64_t n, const void* w, const void* act) { return vec_dot<Fp2>(n, w, act); }
void vec_dot_rows_104_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  rows_fallback<Fp3>(n, w, w_stride, act, nr, out);
}
void vec_dot_rows_107_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  rows_fallback<Fp2>(n, w, w_stride, act, nr, out);
}
float vec_dot_101_avx512(int64_t n, const void* w, const void* act) { return vec_dot<Fp4One>(n, w, act); }
void vec_dot_rows_101_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  rows_fallback<Fp4One>(n, w, w_stride, act, nr, out);
}

// kAvx512Vbmi level: the VBMI multi-row kernels.
float vec_dot_104_avx512vbmi(int64_t n, const void* w, const void* act) {
  float out;
  code_rows<3>(n, w, 0, act, 1, &out);
  return out;
}
float vec_dot_107_avx512vbmi(int64_t n, const void* w, const void* act) {
  float out;
  code_rows<2>(n, w, 0, act, 1, &out);
  return out;
}
void vec_dot_rows_104_avx512vbmi(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  code_rows<3>(n, w, w_stride, act, nr, out);
}
void vec_dot_rows_107_avx512vbmi(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  code_rows<2>(n, w, w_stride, act, nr, out);
}
float vec_dot_101_avx512vbmi(int64_t n, const void* w, const void* act) {
  float out;
  fp4x17::dot_rows<Fp4FastRows>(n, w, 0, act, 1, &out);
  return out;
}
void vec_dot_rows_101_avx512vbmi(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  fp4x17::dot_rows<Fp4FastRows>(n, w, w_stride, act, nr, out);
}

float vec_dot_100_avx512(int64_t n, const void* w, const void* act) { return vec_dot<Fp4Two>(n, w, act); }
float vec_dot_102_avx512(int64_t n, const void* w, const void* act) { return vec_dot<Fp6>(n, w, act); }
float vec_dot_103_avx512(int64_t n, const void* w, const void* act) { return vec_dot<Fp8>(n, w, act); }

}  // namespace dsv4::cpu::rocmfpx
