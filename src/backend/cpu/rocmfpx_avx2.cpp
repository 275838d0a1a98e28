// backend/cpu/rocmfpx_avx2.cpp — AVX2 vec_dots of the ROCmFPx family against BlockQ8_0Act
// activations. Bit-identical to the scalar references in rocmfpx.cpp.
//
// ACCUMULATION ORDER (the one of rocmfpx.cpp, reproduced lane-wise):
//   Blocks go in chunks of 8; chunk c = blocks 8c .. 8c+7 feeds float accumulator acc[c & 3], lane j =
//   block 8c + j, i.e. lane j of acc[t] is partial[8t + j] of Partials32. Per chunk the exact integer
//   sums isum0 / isum1 (per 16-element half) of each block land in int32 vectors (lane j = block 8c+j)
//   and the float step is the scalar one, lane-wise:
//     single-scale: v = (s * d_x) * (float)(isum0 + isum1)
//     two-scale:    v = d_x * (s0 * (float)isum0 + s1 * (float)isum1)
//     acc[c & 3] = acc[c & 3] + v
//   A final partial chunk is copied into a zero-padded 8-block buffer (+0.0 contributions leave the
//   partials' bits unchanged). Final: (acc0 + acc2, acc1 + acc3) (s = 16), their sum (s = 8), fold
//   128-bit halves (s = 4), 64 (s = 2), 32 (s = 1).
//
// Integer dot of one block (one ymm; lane 0 = elements 0-15, lane 1 = 16-31, natural order): the
// decoder gives u = level + K (unsigned, at most 63), and
//   dot16 = maddubs(u, xq) - maddubs(K, xq)   (no int16 saturation: 2 * 63 * 128 < 2^15)
//   dot32 = madd(dot16, 1)
// FP8 (103, levels up to ±128) instead sign-extends both operands to int16 and uses madd.
//
// Matrix x vector and matrix x matrix run on prepared activations (below): the integer sums of a block
// lose the vpmaddubsw by K (a per-half K·Σq computed once per column), FP2, FP3 and FP6 get cheaper
// decoders, small-level types add their pair sums in int16, scale bytes come by 16-byte windows or
// general-purpose registers instead of dword inserts, and a tile decodes each weight block once for up to
// 8 columns. `bench kernels` on a 2-core AMD EPYC (Zen 3) VM, AVX2, 4096 x 4096, the session's first and
// last binaries interleaved, best of 2 rounds (neighbours busy): one thread on an L2-sized slice, base ->
// now, FP2 3.9 -> 7.4 GB/s, FP3 5.4 -> 7.3, FP4 9.0 -> 10.9, FP4-fast 9.8 -> 13.9, FP6 8.5 -> 9.2, FP8
// 11.3 -> 16.9; 2 threads from DRAM (fraction of the read bandwidth measured beside it) FP2 25-31 % ->
// 45-51 %, FP3 33-37 -> 45-46, FP4 50-63 -> 70-72, FP4-fast 55-65 -> 76-78, FP6 47-51 -> 56-70, FP8 60-67
// -> 83-102; matrix x matrix (64/512 columns, of a 204 GFLOP/s f32 FMA peak) FP2 50 -> 161 GFLOP/s, FP3
// 47 -> 152, FP4 62 -> 161, FP4-fast 69 -> 185, FP6 40 -> 111, FP8 43 -> 105 (vec_dot per element before).
// Where the rest goes (FP2, ~100 instructions per 8 blocks, issue-bound): decode and dots 32, the
// per-block half sums 26 (without them 0.93 instead of 1.29 ns per block), scales 20, float steps 10.

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/quant.h"
#include "backend/cpu/rocmfpx.h"
#include "backend/cpu/simd_reduce.h"
#include "backend/cpu/stream_prefetch.h"

namespace dsv4::cpu::rocmfpx {
namespace {

constexpr int kChunk = 8;

struct alignas(32) Bytes32 {
  uint8_t b[32];
};
struct alignas(32) Words16 {
  uint16_t w[16];
};

// pshufb index for 16-bit windows of a c-bit code stream: word w of lane h takes bytes
// base[h] + B, base[h] + B + 1 with B = (2cw) >> 3.
template <int kC>
constexpr Bytes32 window_index(const int (&base)[2]) {
  Bytes32 t{};
  for (int h = 0; h < 2; ++h)
    for (int w = 0; w < 8; ++w) {
      const int B = (2 * kC * w) >> 3;
      t.b[16 * h + 2 * w] = static_cast<uint8_t>(base[h] + B);
      t.b[16 * h + 2 * w + 1] = kC == 2 ? 0x80 : static_cast<uint8_t>(base[h] + B + 1);
    }
  return t;
}
template <int kC>
constexpr Words16 window_mult() {
  Words16 t{};
  for (int h = 0; h < 2; ++h)
    for (int w = 0; w < 8; ++w) t.w[8 * h + w] = static_cast<uint16_t>(1u << (16 - 2 * kC - ((2 * kC * w) & 7)));
  return t;
}
constexpr int kBaseFp2[2] = {0, 4};
constexpr int kBaseFp3[2] = {0, 6};
constexpr int kBaseFp6[2] = {0, 4};  // lane 0 holds bytes 0-15, lane 1 bytes 8-23
constexpr Bytes32 kWinFp2 = window_index<2>(kBaseFp2);
constexpr Bytes32 kWinFp3 = window_index<3>(kBaseFp3);
constexpr Bytes32 kWinFp6 = window_index<6>(kBaseFp6);
constexpr Words16 kMulFp2 = window_mult<2>();
constexpr Words16 kMulFp3 = window_mult<3>();
constexpr Words16 kMulFp6 = window_mult<6>();

constexpr Bytes32 level_table(const int8_t* levels, int count, int k) {
  Bytes32 t{};
  for (int i = 0; i < 32; ++i) t.b[i] = static_cast<uint8_t>(levels[(i & 15) % count] + k);
  return t;
}
constexpr Bytes32 kFp4Table = level_table(kFp4Level, 16, 16);
constexpr Bytes32 kFp3Table = level_table(kFp3Level, 8, 4);

inline __m256i load32(const void* p) { return _mm256_load_si256(static_cast<const __m256i*>(p)); }

template <int kC>
inline __m256i window_codes(__m256i bytes, const Bytes32& win, const Words16& mul) {
  const __m256i w = _mm256_shuffle_epi8(bytes, load32(win.b));
  const __m256i p = _mm256_srli_epi16(_mm256_mullo_epi16(w, load32(mul.w)), 16 - 2 * kC);
  const __m256i lo = _mm256_and_si256(p, _mm256_set1_epi16((1 << kC) - 1));
  const __m256i hi = _mm256_and_si256(_mm256_slli_epi16(p, 8 - kC), _mm256_set1_epi16(((1 << kC) - 1) << 8));
  return _mm256_or_si256(lo, hi);
}

// ---- per-type decoders: u = level + K of the block at p --------------------------------------

template <int64_t kB, bool kTwoScales>
struct Fp4 {
  static constexpr int64_t kBytes = kB;
  static constexpr bool kTwo = kTwoScales;
  static constexpr int kK = 16;
  static constexpr int kMaxU = 26;  // levels up to 10
  static __m256i decode(const uint8_t* p) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
    return _mm256_shuffle_epi8(load32(kFp4Table.b), nib);
  }
};
struct Fp2 {
  static constexpr int64_t kBytes = kBytes107;
  static constexpr bool kTwo = true;
  static constexpr int kK = 1;
  static constexpr int kMaxU = 3;
  static __m256i decode(const uint8_t* p) {
    const __m256i q = _mm256_broadcastsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return window_codes<2>(q, kWinFp2, kMulFp2);
  }
};
struct Fp3 {
  static constexpr int64_t kBytes = kBytes104;
  static constexpr bool kTwo = true;
  static constexpr int kK = 4;
  static constexpr int kMaxU = 8;
  // u of the 12 code bytes in both 128-bit halves. As window_codes<3>, each word's pair of codes A, B
  // goes to bits 0-5 of p; but vpshufb reads only bits 0-3 of an index byte (bit 7 must be clear) and
  // kFp3Table repeats every 8 entries, so the low byte needs no mask (A in bits 0-2, B in 3-5, bits 6-7
  // zero) and the high byte is p << 5's (B in bits 8-10, 11-15 zero): one vpblendvb instead of two
  // masks and an or.
  static __m256i decode_bytes(__m256i q) {
    const __m256i w = _mm256_shuffle_epi8(q, load32(kWinFp3.b));
    const __m256i p = _mm256_srli_epi16(_mm256_mullo_epi16(w, load32(kMulFp3.w)), 10);
    const __m256i c = _mm256_blendv_epi8(p, _mm256_slli_epi16(p, 5), _mm256_set1_epi16(static_cast<int16_t>(0xFF00)));
    return _mm256_shuffle_epi8(load32(kFp3Table.b), c);
  }
  static __m256i decode(const uint8_t* p) {
    const __m128i q = _mm_maskload_epi32(reinterpret_cast<const int*>(p), _mm_set_epi32(0, -1, -1, -1));
    return decode_bytes(_mm256_broadcastsi128_si256(q));
  }
};
struct Fp6 {
  static constexpr int64_t kBytes = kBytes102;
  static constexpr bool kTwo = true;
  static constexpr int kK = 31;
  static constexpr int kMaxU = 62;
  static __m256i decode(const uint8_t* p) {
    const __m256i q = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p + 8), reinterpret_cast<const __m128i*>(p));
    // As window_codes<6>, each word's pair of codes A, B goes to bits 0-5 / 6-11 of p (zeros above). y
    // takes its low byte from p << 2 (A in bits 2-7, its sign bit at 7) and its high byte from p << 4 (B
    // in bits 10-15, sign at 15; bits 8-9 hold A's bits 4-5, which the magnitude mask drops): then the
    // magnitudes are (y >> 2) & 31 per byte and vpsignb by y gives the level (0 for a zero magnitude
    // either way); u = level + 31. 10 operations where the masks, or and a sign blend took 12.
    const __m256i w = _mm256_shuffle_epi8(q, load32(kWinFp6.b));
    const __m256i p6 = _mm256_srli_epi16(_mm256_mullo_epi16(w, load32(kMulFp6.w)), 4);
    const __m256i y = _mm256_blendv_epi8(_mm256_slli_epi16(p6, 2), _mm256_slli_epi16(p6, 4),
                                         _mm256_set1_epi16(static_cast<int16_t>(0xFF00)));
    const __m256i mag = _mm256_and_si256(_mm256_srli_epi16(y, 2), _mm256_set1_epi8(31));
    return _mm256_add_epi8(_mm256_sign_epi8(mag, y), _mm256_set1_epi8(31));
  }
};

// Exact int32 partial sums of one block: lanes 0-3 belong to half 0, lanes 4-7 to half 1.
template <class T>
inline __m256i block_dot(const uint8_t* w, const int8_t* xq) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  const __m256i u = T::decode(w);
  const __m256i d16 = _mm256_sub_epi16(_mm256_maddubs_epi16(u, x),
                                       _mm256_maddubs_epi16(_mm256_set1_epi8(static_cast<char>(T::kK)), x));
  return _mm256_madd_epi16(d16, _mm256_set1_epi16(1));
}

struct Fp8 {
  static constexpr int64_t kBytes = kBytes103;
  static constexpr bool kTwo = false;
};
// FP8: lanes mix the halves, which is fine for the single-scale type (only the block total is used).
template <>
inline __m256i block_dot<Fp8>(const uint8_t* w, const int8_t* xq) {
  const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  const __m256i lo = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(wq)),
                                       _mm256_cvtepi8_epi16(_mm256_castsi256_si128(x)));
  const __m256i hi = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(wq, 1)),
                                       _mm256_cvtepi8_epi16(_mm256_extracti128_si256(x, 1)));
  return _mm256_add_epi32(lo, hi);
}

// ue4m3_decode per dword, e in 0..255. v = the f32 with bits (e << 20) + (119 << 23) is (8 + M)·2^(E−11),
// the value for E >= 1; for E = 0 it is 2^-8 + M·2^-11, and 2v − 2^-7 = M·2^-10 (exact) is the value
// and the smaller of the two; for E >= 1, v >= 2^-7 so 2v − 2^-7 >= v: min(v, 2v − 2^-7) is the scale
// either way (6 operations where a blend of both forms takes 8). e >= 0x7F: 0.
inline __m256 decode_scales(__m256i e) {
  const __m256 v = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(e, 20), _mm256_set1_epi32(119 << 23)));
  const __m256 sub = _mm256_sub_ps(_mm256_add_ps(v, v), _mm256_set1_ps(1.0f / 128.0f));
  const __m256 valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(0x7F), e));
  return _mm256_and_ps(valid, _mm256_min_ps(v, sub));
}

// Scale bytes of the 8 blocks at w, lane j = block j: e0 (elements 0-15) and e1 (16-31; single-scale
// types: e0 = e1 = e). Two-scale blocks of 8..14 bytes (FP2, FP3): one 16-byte window per pair of blocks
// ending at the pair's end (block 2i's scale bytes at window bytes 14 − S, 15 − S, block 2i+1's at 14,
// 15), windows 0, 2 and 1, 3 in the two 128-bit halves, vpshufb to words, vpunpcklqdq: 9 uops where
// dword inserts take 16. Otherwise the scale bytes are collected in general-purpose registers.
template <class T>
inline void scale_bytes(const uint8_t* w, __m256i& e0, __m256i& e1) {
  constexpr int64_t S = T::kBytes;
  if constexpr (T::kTwo && S >= 8 && S <= 14) {
    auto win = [&](int i) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i * S + 2 * S - 16)); };
    const __m256i A = _mm256_inserti128_si256(_mm256_castsi128_si256(win(0)), win(2), 1);
    const __m256i B = _mm256_inserti128_si256(_mm256_castsi128_si256(win(1)), win(3), 1);
    const __m256i idx = _mm256_broadcastsi128_si256(_mm_setr_epi8(
        14 - S, -1, -1, -1, 14, -1, -1, -1, 15 - S, -1, -1, -1, 15, -1, -1, -1));
    const __m256i a = _mm256_shuffle_epi8(A, idx), b = _mm256_shuffle_epi8(B, idx);  // [e0 e0' e1 e1'] per half
    e0 = _mm256_unpacklo_epi64(a, b);
    e1 = _mm256_unpackhi_epi64(a, b);
  } else if constexpr (T::kTwo) {
    // The 8 pairs (e0, e1) gathered in two general-purpose registers (the integer pipes are idle here;
    // dword inserts cost vector shuffles), then e0s and e1s split by one vpshufb.
    uint64_t lo = 0, hi = 0;
    for (int j = 0; j < 4; ++j) {
      lo |= static_cast<uint64_t>(int_at_stride<uint16_t>(w + S - 2, S, j)) << (16 * j);
      hi |= static_cast<uint64_t>(int_at_stride<uint16_t>(w + S - 2, S, j + 4)) << (16 * j);
    }
    const __m128i pairs = _mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo));
    const __m128i split = _mm_shuffle_epi8(pairs, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    e0 = _mm256_cvtepu8_epi32(split);
    e1 = _mm256_cvtepu8_epi32(_mm_srli_si128(split, 8));
  } else {
    uint64_t e = 0;  // the 8 scale bytes in a general-purpose register, as above
    for (int j = 0; j < 8; ++j) e |= static_cast<uint64_t>(w[j * S + S - 1]) << (8 * j);
    e0 = e1 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(e)));
  }
}

// The decoded scales of the 8 blocks at w (single-scale types: s1 = s0).
template <class T>
inline void chunk_scales(const uint8_t* w, __m256& s0, __m256& s1) {
  __m256i e0, e1;
  scale_bytes<T>(w, e0, e1);
  s0 = decode_scales(e0);
  s1 = T::kTwo ? decode_scales(e1) : s0;
}

// A chunk's float step, lane j = block j (the order in the file comment): two scales
// d_x * (s0 * (float)isum0 + s1 * (float)isum1), one (s * d_x) * (float)(isum0 + isum1).
template <class T>
inline __m256 chunk_values(__m256 s0, __m256 s1, __m256 dx, __m256i isum0, __m256i isum1) {
  if constexpr (T::kTwo) {
    const __m256 t0 = _mm256_mul_ps(s0, _mm256_cvtepi32_ps(isum0));
    const __m256 t1 = _mm256_mul_ps(s1, _mm256_cvtepi32_ps(isum1));
    return _mm256_mul_ps(dx, _mm256_add_ps(t0, t1));
  } else {
    return _mm256_mul_ps(_mm256_mul_ps(s0, dx), _mm256_cvtepi32_ps(_mm256_add_epi32(isum0, isum1)));
  }
}

// Eight blocks' int32 partial sums (lanes 0-3 half 0, 4-7 half 1) -> lane j of isum0 / isum1 = block
// j's half-0 / half-1 sum: lane h of r = {Σ v_0 lane h, Σ v_1 lane h, Σ v_2 lane h, Σ v_3 lane h}.
inline void hadd_halves(const __m256i* v, __m256i& isum0, __m256i& isum1) {
  const __m256i r0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i r1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  isum0 = _mm256_permute2x128_si256(r0, r1, 0x20);
  isum1 = _mm256_permute2x128_si256(r0, r1, 0x31);
}

template <class T>
[[gnu::always_inline]] inline __m256 chunk(const uint8_t* w, const BlockQ8_0Act* a, __m256 acc) {
  __m256i v[8];
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m) v[m] = block_dot<T>(w + m * T::kBytes, a[m].qs);
  __m256i isum0, isum1;
  hadd_halves(v, isum0, isum1);
  const __m256 dx = _mm256_set_ps(a[7].d, a[6].d, a[5].d, a[4].d, a[3].d, a[2].d, a[1].d, a[0].d);
  __m256 s0, s1;
  chunk_scales<T>(w, s0, s1);
  const __m256 val = chunk_values<T>(s0, s1, dx, isum0, isum1);
  return _mm256_add_ps(acc, val);
}

template <class T>
float vec_dot(int64_t n, const void* wv, const void* act) {
  const auto* w = static_cast<const uint8_t*>(wv);
  const auto* a = static_cast<const BlockQ8_0Act*>(act);
  const int64_t nb = n / kBlock;
  const int64_t full = nb / kChunk;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t c = 0; c < full; ++c)
    acc[c & 3] = chunk<T>(w + c * kChunk * T::kBytes, a + c * kChunk, acc[c & 3]);
  const int64_t rest = nb - full * kChunk;
  if (rest > 0) {
    alignas(32) uint8_t wbuf[kChunk * T::kBytes];
    alignas(32) BlockQ8_0Act abuf[kChunk];
    std::memset(wbuf, 0, sizeof(wbuf));
    std::memset(static_cast<void*>(abuf), 0, sizeof(abuf));
    std::memcpy(wbuf, w + full * kChunk * T::kBytes, static_cast<size_t>(rest * T::kBytes));
    std::memcpy(static_cast<void*>(abuf), a + full * kChunk, static_cast<size_t>(rest) * sizeof(BlockQ8_0Act));
    acc[full & 3] = chunk<T>(wbuf, abuf, acc[full & 3]);
  }
  return reduce_partials32_avx2(acc[0], acc[1], acc[2], acc[3]);
}

// ---- prepared activations: matrix x vector (rows_prepared) and matrix x matrix (tile) ---------------
//
// A prepared column (prepare<T>, once per activation column and call) is T::Chunk per 8 blocks (the
// last one zero-padded): the block's 32 quants in the order of the type's prepared decoder (position p
// holds element T::perm(p); FP8: widened to int16), its d, and corr_h = K·Σ (quants of half h). Then
// per block the exact integer sums are isum_h = Σ u·x over half h − corr_h with u = level + K (the same
// integers as block_dot's, without its second vpmaddubsw), and the float steps, chunks and accumulators
// are vec_dot's above. The weight side of a block (decode, scale bytes) is done once per call for every
// column of a tile.
template <typename X>
struct alignas(32) PrepChunkOf {
  X x[kChunk][32];
  float d[kChunk];
  int32_t corr0[kChunk];
  int32_t corr1[kChunk];
};
using PrepChunk = PrepChunkOf<int8_t>;
using PrepChunk16 = PrepChunkOf<int16_t>;
static_assert(sizeof(PrepChunk) == 352 && sizeof(PrepChunk16) == 608);

// What a prepared decoder type declares (each may hide some): its chunk layout, the decoded block's
// form, bytes read past a block's end by decode_p (> 0: every row's last chunk runs from a padded copy),
// whether half 0 / 1 alternate by dword rather than by 128-bit half, and the element at position p.
struct PreparedDefaults {
  using Chunk = PrepChunk;
  using Decoded = __m256i;
  static constexpr int kOverread = 0;
  static constexpr bool kParityHalves = false;
  static constexpr int perm(int p) { return p; }
};

// FP2 in the prepared order: the 8 code bytes broadcast to the 4 qwords, qword k shifted right by 2k:
// byte j of qword k holds, in its low 2 bits, the code of element 4j + k (bytes 0-3: half 0, 4-7: half
// 1, so a block's int16 pair sums alternate halves by dword: kParityHalves). vpsrlvq and vpand: 2
// operations for 32 codes, where window_codes takes 7.
struct Fp2Prepared : Fp2, PreparedDefaults {
  static constexpr bool kParityHalves = true;
  static constexpr int perm(int p) { return 4 * (p % 8) + p / 8; }
  static __m256i decode_p(const uint8_t* p) {
    int64_t q;
    std::memcpy(&q, p, 8);
    return _mm256_and_si256(_mm256_srlv_epi64(_mm256_set1_epi64x(q), _mm256_setr_epi64x(0, 2, 4, 6)),
                            _mm256_set1_epi8(3));
  }
};
// FP4: the 16 code bytes in both halves, the high half shifted right by 4 (natural order).
template <int64_t kB, bool kTwoScales>
struct Fp4Prepared : Fp4<kB, kTwoScales>, PreparedDefaults {
  static __m256i decode_p(const uint8_t* p) {
    const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i nib = _mm256_and_si256(_mm256_srlv_epi32(q, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                                         _mm256_set1_epi8(0x0F));
    return _mm256_shuffle_epi8(load32(kFp4Table.b), nib);
  }
};
// FP6: its natural-order decoder above.
template <class T>
struct NaturalPrepared : T, PreparedDefaults {
  static __m256i decode_p(const uint8_t* p) { return T::decode(p); }
};
// FP3: a plain 16-byte broadcast load (2 bytes past a chunk's last block: rows_cols runs every row's last
// chunk from a padded copy) instead of the masked load and insert.
struct Fp3Prepared : Fp3, PreparedDefaults {
  static constexpr int kOverread = 16 - static_cast<int>(kBytes104);
  static __m256i decode_p(const uint8_t* p) {
    return decode_bytes(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
};
// FP8: the int8 levels themselves (K = 0), dotted by sign extension (levels reach −128: vpmaddubsw
// could saturate).
struct Fp8Prepared : Fp8, PreparedDefaults {
  using Chunk = PrepChunk16;
  struct Decoded {
    __m256i lo, hi;  // int16 levels of elements 0-15, 16-31
  };
  static constexpr int kMaxU = 0;  // unused: no vpmaddubsw
  static constexpr int kK = 0;
  static Decoded decode_p(const uint8_t* p) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return {_mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)), _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1))};
  }
};

// Whether a block's vpmaddubsw pair sums (≤ 2·u·128) stay ≤ 8191, so that sum_halves8_i16_avx2 can add
// four of them in int16: u ≤ 31 (FP2 3, FP3 8, FP4 26; not FP6's 62 or FP8).
template <class T>
constexpr bool kSmallLevels = T::kK > 0 && T::kMaxU <= 31;

// Exact Σ u·x of one block: int16 pair sums (kSmallLevels) or int32 partial sums (lanes 0-3 half 0, 4-7
// half 1; FP8: mixed, single scale).
template <class T, typename X>
inline __m256i prepared_dot(const typename T::Decoded& u, const X* x) {
  if constexpr (T::kK == 0) {  // FP8: int16 levels and quants, lanes mix the halves (single scale)
    return _mm256_add_epi32(_mm256_madd_epi16(u.lo, load32(x)), _mm256_madd_epi16(u.hi, load32(x + 16)));
  } else if constexpr (kSmallLevels<T>) {
    return _mm256_maddubs_epi16(u, load32(x));
  } else {
    // u ≤ 62 (FP6): pair sums ≤ 2·62·128 < 2^15, exact.
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, load32(x)), _mm256_set1_epi16(1));
  }
}

// The 8 blocks' half sums (lane j = block j): int16 sums by sum_halves8_i16_avx2, or the hadd tree.
template <class T>
inline void half_sums(const __m256i* p, __m256i& isum0, __m256i& isum1) {
  if constexpr (T::kParityHalves) {
    // Even dwords half 0, odd half 1 (every int16 lane ≤ 2·3·128): per pair of blocks, dword unpacks
    // and adds keep the parity ([a.h0, b.h0, a.h1, b.h1] per 128-bit half), qword unpacks split it, then
    // vpmaddwd by ones and the two 128-bit halves added.
    __m256i t[4];
    for (int i = 0; i < 4; ++i)
      t[i] = _mm256_add_epi16(_mm256_unpacklo_epi32(p[2 * i], p[2 * i + 1]),
                              _mm256_unpackhi_epi32(p[2 * i], p[2 * i + 1]));
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i a0 = _mm256_madd_epi16(_mm256_unpacklo_epi64(t[0], t[1]), ones);  // half 0 of blocks 0-3
    const __m256i a1 = _mm256_madd_epi16(_mm256_unpackhi_epi64(t[0], t[1]), ones);  // half 1 of blocks 0-3
    const __m256i b0 = _mm256_madd_epi16(_mm256_unpacklo_epi64(t[2], t[3]), ones);  // blocks 4-7
    const __m256i b1 = _mm256_madd_epi16(_mm256_unpackhi_epi64(t[2], t[3]), ones);
    isum0 = _mm256_add_epi32(_mm256_permute2x128_si256(a0, b0, 0x20), _mm256_permute2x128_si256(a0, b0, 0x31));
    isum1 = _mm256_add_epi32(_mm256_permute2x128_si256(a1, b1, 0x20), _mm256_permute2x128_si256(a1, b1, 0x31));
  } else if constexpr (kSmallLevels<T>) {
    sum_halves8_i16_avx2(p, isum0, isum1);
  } else {
    hadd_halves(p, isum0, isum1);
  }
}

// vpshufb indexes putting element T::perm(p) at position p: own[p] picks from p's own 128-bit half,
// other[p] from the other one (0x80: zero).
template <class T, bool kOwn>
constexpr Bytes32 perm_index() {
  Bytes32 t{};
  for (int p = 0; p < 32; ++p) {
    const bool own = T::perm(p) / 16 == p / 16;
    t.b[p] = own == kOwn ? static_cast<uint8_t>(T::perm(p) % 16) : 0x80;
  }
  return t;
}

template <class T>
int64_t prepared_bytes(int64_t n) {
  return (n / kBlock + kChunk - 1) / kChunk * static_cast<int64_t>(sizeof(typename T::Chunk));
}

template <class T>
void prepare(const void* act, int64_t n, void* out) {
  static constexpr Bytes32 kOwn = perm_index<T, true>(), kOther = perm_index<T, false>();
  const auto* a = static_cast<const BlockQ8_0Act*>(act);
  using Chunk = typename T::Chunk;
  auto* pc = static_cast<Chunk*>(out);
  const int64_t nb = n / kBlock;
  if (nb % kChunk != 0) std::memset(static_cast<void*>(&pc[nb / kChunk]), 0, sizeof(Chunk));
  for (int64_t b = 0; b < nb; ++b) {
    Chunk& c = pc[b / kChunk];
    const int j = static_cast<int>(b % kChunk);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b].qs));
    auto* xj = reinterpret_cast<__m256i*>(c.x[j]);
    if constexpr (sizeof(c.x[0][0]) == 2) {
      _mm256_store_si256(xj, _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)));
      _mm256_store_si256(xj + 1, _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1)));
    } else {
      const __m256i swapped = _mm256_permute2x128_si256(q, q, 0x01);
      _mm256_store_si256(xj, _mm256_or_si256(_mm256_shuffle_epi8(q, load32(kOwn.b)),
                                             _mm256_shuffle_epi8(swapped, load32(kOther.b))));
    }
    // Σ q per half: int16 pairs, then dwords (lanes 0-3 half 0, 4-7 half 1), then within each half.
    const __m256i d = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
    __m128i h = _mm_hadd_epi32(_mm256_castsi256_si128(d), _mm256_extracti128_si256(d, 1));
    h = _mm_hadd_epi32(h, h);  // [Σ half 0, Σ half 1, ...]
    c.d[j] = a[b].d;
    c.corr0[j] = T::kK * _mm_cvtsi128_si32(h);
    c.corr1[j] = T::kK * _mm_extract_epi32(h, 1);
  }
}

// nr (1..4) rows x C columns of prepared activations (column c at xp + c * x_stride): out[c * out_stride
// + r] = vec_dot<T>(row r, column c) bit for bit. Per chunk and row the 8 blocks are decoded once, then
// each column does its integer dots, the chunk's half sums (half_sums) and float step into acc[r][c][chunk % 4].
template <class T, int C>
void rows_cols(int64_t n, const uint8_t* w, int64_t w_stride, const uint8_t* xp, int64_t x_stride, int nr, float* out,
               int64_t out_stride) {
  const int64_t nb = n / kBlock;
  const int64_t chunks = (nb + kChunk - 1) / kChunk;
  __m256 acc[4][C][4];
  for (auto& row : acc)
    for (auto& col : row)
      for (auto& v : col) v = _mm256_setzero_ps();
  alignas(32) uint8_t wbuf[kChunk * T::kBytes + T::kOverread];
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t rest = nb - ch * kChunk;
    for (int r = 0; r < nr; ++r) {
      const uint8_t* wc = w + r * w_stride + ch * kChunk * T::kBytes;
      // The row's last chunk when partial (or when the decoder reads kOverread bytes past a block):
      // from a zero-padded copy (never read past the row).
      if (rest < kChunk || (T::kOverread > 0 && ch == chunks - 1)) {
        std::memset(wbuf, 0, sizeof(wbuf));
        std::memcpy(wbuf, wc, static_cast<size_t>(std::min<int64_t>(rest, kChunk) * T::kBytes));
        wc = wbuf;
      } else if (C == 1) {
        prefetch_ahead(wc, kChunk * T::kBytes);
      }
      typename T::Decoded u[kChunk];
#pragma GCC unroll 8
      for (int m = 0; m < kChunk; ++m) u[m] = T::decode_p(wc + m * T::kBytes);
      __m256 s0, s1;
      chunk_scales<T>(wc, s0, s1);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const auto& x = reinterpret_cast<const typename T::Chunk*>(xp + c * x_stride)[ch];
        __m256i p[kChunk];
#pragma GCC unroll 8
        for (int m = 0; m < kChunk; ++m) p[m] = prepared_dot<T>(u[m], x.x[m]);
        __m256i h0, h1;
        half_sums<T>(p, h0, h1);
        const __m256i isum0 = _mm256_sub_epi32(h0, load32(x.corr0));
        const __m256i isum1 = _mm256_sub_epi32(h1, load32(x.corr1));
        const __m256 val = chunk_values<T>(s0, s1, _mm256_load_ps(x.d), isum0, isum1);
        acc[r][c][ch & 3] = _mm256_add_ps(acc[r][c][ch & 3], val);
      }
    }
  }
  for (int r = 0; r < nr; ++r)
    for (int c = 0; c < C; ++c)
      out[c * out_stride + r] = reduce_partials32_avx2(acc[r][c][0], acc[r][c][1], acc[r][c][2], acc[r][c][3]);
}

template <class T>
void rows_prepared(int64_t n, const void* w, int64_t w_stride, const void* prepared, int nr, float* out) {
  // One row at a time: one weight stream (interleaved rows streamed DRAM slower; mxfp4_avx2.cpp).
  for (int r = 0; r < nr; ++r)
    rows_cols<T, 1>(n, static_cast<const uint8_t*>(w) + r * w_stride, w_stride, static_cast<const uint8_t*>(prepared),
                    0, 1, out + r, 1);
}

template <class T>
void tile(int64_t n, const void* w, int64_t w_stride, const void* prepared, int64_t x_stride, int nr, int nc,
          float* out, int64_t out_stride) {
  using Fn = void (*)(int64_t, const uint8_t*, int64_t, const uint8_t*, int64_t, int, float*, int64_t);
  static constexpr Fn kFn[kMaxTileCols] = {rows_cols<T, 1>, rows_cols<T, 2>, rows_cols<T, 3>, rows_cols<T, 4>,
                                          rows_cols<T, 5>, rows_cols<T, 6>, rows_cols<T, 7>, rows_cols<T, 8>};
  kFn[nc - 1](n, static_cast<const uint8_t*>(w), w_stride, static_cast<const uint8_t*>(prepared), x_stride, nr, out,
              out_stride);
}

using Fp4Two = Fp4<kBytes100, true>;
using Fp4One = Fp4<kBytes101, false>;
using Fp4TwoPrepared = Fp4Prepared<kBytes100, true>;
using Fp4OnePrepared = Fp4Prepared<kBytes101, false>;

template <class T>
void rows_unprepared(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  for (int r = 0; r < nr; ++r) out[r] = vec_dot<T>(n, static_cast<const uint8_t*>(w) + r * w_stride, act);
}

}  // namespace

#define DSV4_ROCMFPX_AVX2_PREPARED(ID, PREP, PLAIN)                                                                 \
  int64_t prepared_act_bytes_##ID##_avx2(int64_t n) { return prepared_bytes<PREP>(n); }                           \
  void prepare_act_##ID##_avx2(const void* act, int64_t n, void* out) { prepare<PREP>(act, n, out); }             \
  void vec_dot_rows_##ID##_avx2(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) { \
    rows_unprepared<PLAIN>(n, w, w_stride, act, nr, out);                                                         \
  }                                                                                                               \
  void vec_dot_rows_prepared_##ID##_avx2(int64_t n, const void* w, int64_t w_stride, const void* prepared, int nr, \
                                         float* out) {                                                            \
    rows_prepared<PREP>(n, w, w_stride, prepared, nr, out);                                                       \
  }                                                                                                               \
  void vec_dot_tile_##ID##_avx2(int64_t n, const void* w, int64_t w_stride, const void* prepared, int64_t x_stride, \
                                int nr, int nc, float* out, int64_t out_stride) {                                 \
    tile<PREP>(n, w, w_stride, prepared, x_stride, nr, nc, out, out_stride);                                      \
  }
DSV4_ROCMFPX_AVX2_PREPARED(100, Fp4TwoPrepared, Fp4Two)
DSV4_ROCMFPX_AVX2_PREPARED(101, Fp4OnePrepared, Fp4One)
DSV4_ROCMFPX_AVX2_PREPARED(102, NaturalPrepared<Fp6>, Fp6)
DSV4_ROCMFPX_AVX2_PREPARED(103, Fp8Prepared, Fp8)
DSV4_ROCMFPX_AVX2_PREPARED(104, Fp3Prepared, Fp3)
DSV4_ROCMFPX_AVX2_PREPARED(107, Fp2Prepared, Fp2)
#undef DSV4_ROCMFPX_AVX2_PREPARED

float vec_dot_100_avx2(int64_t n, const void* w, const void* act) { return vec_dot<Fp4<kBytes100, true>>(n, w, act); }
float vec_dot_101_avx2(int64_t n, const void* w, const void* act) { return vec_dot<Fp4<kBytes101, false>>(n, w, act); }
float vec_dot_102_avx2(int64_t n, const void* w, const void* act) { return vec_dot<Fp6>(n, w, act); }
float vec_dot_103_avx2(int64_t n, const void* w, const void* act) { return vec_dot<Fp8>(n, w, act); }
float vec_dot_104_avx2(int64_t n, const void* w, const void* act) { return vec_dot<Fp3>(n, w, act); }
float vec_dot_107_avx2(int64_t n, const void* w, const void* act) { return vec_dot<Fp2>(n, w, act); }

}  // namespace dsv4::cpu::rocmfpx
