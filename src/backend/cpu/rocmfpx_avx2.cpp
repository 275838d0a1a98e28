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
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/quant.h"
#include "backend/cpu/rocmfpx.h"
#include "backend/cpu/simd_reduce.h"

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
  static __m256i decode(const uint8_t* p) {
    const __m256i q = _mm256_broadcastsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return window_codes<2>(q, kWinFp2, kMulFp2);
  }
};
struct Fp3 {
  static constexpr int64_t kBytes = kBytes104;
  static constexpr bool kTwo = true;
  static constexpr int kK = 4;
  static __m256i decode(const uint8_t* p) {
    const __m128i q = _mm_maskload_epi32(reinterpret_cast<const int*>(p), _mm_set_epi32(0, -1, -1, -1));
    const __m256i c = window_codes<3>(_mm256_broadcastsi128_si256(q), kWinFp3, kMulFp3);
    return _mm256_shuffle_epi8(load32(kFp3Table.b), c);
  }
};
struct Fp6 {
  static constexpr int64_t kBytes = kBytes102;
  static constexpr bool kTwo = true;
  static constexpr int kK = 31;
  static __m256i decode(const uint8_t* p) {
    const __m256i q = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p + 8), reinterpret_cast<const __m128i*>(p));
    const __m256i c = window_codes<6>(q, kWinFp6, kMulFp6);
    // level + 31: c + 31 for a positive code, 63 - c for a negative one.
    const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(c, _mm256_set1_epi8(0x20)), _mm256_set1_epi8(0x20));
    return _mm256_blendv_epi8(_mm256_add_epi8(c, _mm256_set1_epi8(31)), _mm256_sub_epi8(_mm256_set1_epi8(63), c), neg);
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

inline __m256 decode_scales(__m256i e) {
  const __m256 normal = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(e, 20), _mm256_set1_epi32(119 << 23)));
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(e), _mm256_set1_ps(1.0f / 1024.0f));
  const __m256 is_sub = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), e));
  const __m256 valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(0x7F), e));
  return _mm256_and_ps(valid, _mm256_blendv_ps(normal, sub, is_sub));
}

template <class T>
[[gnu::always_inline]] inline __m256 chunk(const uint8_t* w, const BlockQ8_0Act* a, __m256 acc) {
  __m256i v[8];
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m) v[m] = block_dot<T>(w + m * T::kBytes, a[m].qs);
  // lane h of r = {Σ v_0 lane h, Σ v_1 lane h, Σ v_2 lane h, Σ v_3 lane h}
  const __m256i r0 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i r1 = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  const __m256i isum0 = _mm256_permute2x128_si256(r0, r1, 0x20);
  const __m256i isum1 = _mm256_permute2x128_si256(r0, r1, 0x31);
  // The dword ending at each block's last byte (scale byte(s) on top), and the activation scales:
  // plain loads (cheaper than vpgatherdd here).
  alignas(32) uint32_t ew[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) std::memcpy(&ew[j], w + j * T::kBytes + T::kBytes - 4, 4);
  const __m256i eb = load32(ew);
  const __m256 dx = _mm256_set_ps(a[7].d, a[6].d, a[5].d, a[4].d, a[3].d, a[2].d, a[1].d, a[0].d);
  __m256 val;
  if constexpr (T::kTwo) {
    const __m256 s0 = decode_scales(_mm256_and_si256(_mm256_srli_epi32(eb, 16), _mm256_set1_epi32(0xFF)));
    const __m256 s1 = decode_scales(_mm256_srli_epi32(eb, 24));
    const __m256 t0 = _mm256_mul_ps(s0, _mm256_cvtepi32_ps(isum0));
    const __m256 t1 = _mm256_mul_ps(s1, _mm256_cvtepi32_ps(isum1));
    val = _mm256_mul_ps(dx, _mm256_add_ps(t0, t1));
  } else {
    const __m256 s = decode_scales(_mm256_srli_epi32(eb, 24));
    val = _mm256_mul_ps(_mm256_mul_ps(s, dx), _mm256_cvtepi32_ps(_mm256_add_epi32(isum0, isum1)));
  }
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

}  // namespace

float vec_dot_100_avx2(int64_t n, const void* w, const void* act) { return vec_dot<Fp4<kBytes100, true>>(n, w, act); }
float vec_dot_101_avx2(int64_t n, const void* w, const void* act) { return vec_dot<Fp4<kBytes101, false>>(n, w, act); }
float vec_dot_102_avx2(int64_t n, const void* w, const void* act) { return vec_dot<Fp6>(n, w, act); }
float vec_dot_103_avx2(int64_t n, const void* w, const void* act) { return vec_dot<Fp8>(n, w, act); }
float vec_dot_104_avx2(int64_t n, const void* w, const void* act) { return vec_dot<Fp3>(n, w, act); }
float vec_dot_107_avx2(int64_t n, const void* w, const void* act) { return vec_dot<Fp2>(n, w, act); }

}  // namespace dsv4::cpu::rocmfpx
