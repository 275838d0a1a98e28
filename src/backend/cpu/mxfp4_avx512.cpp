// backend/cpu/mxfp4_avx512.cpp — MXFP4 x Q8_0 vec_dot, AVX-512 (F/BW/VL/DQ + VNNI) for the kAvx512
// level; the kAvx512Vbmi level's *_avx512vbmi kernels run the VBMI multi-row kernel
// (rocmfpx_fp4x17_avx512.h) instead.
//
// Accumulation order = mxfp4.h, bit-identical to mxfp4_vec_dot_scalar: sixteen consecutive blocks
// 16t..16t+15 give one vector of exact int32 dots (lane j = block 16t+j); it is converted, scaled by
// (e8m0_half(e) * d_x) * (float)isum and added into acc[t % 2] (acc[0] = partials 0-15, acc[1] =
// partials 16-31); a short last chunk adds only its valid lanes. Reduction: acc0 + acc1 (s = 16), then
// 256-bit halves (s = 8), 128 (s = 4), 64 (s = 2), 32 (s = 1) — Partials32::reduce's tree.
//
// Integer dot (exact): nibbles -> int8 kvalues with vpshufb; q8 is made unsigned (q ^ 0x80 = q + 128),
// vpdpbusd(q + 128, kv) then vpdpbusd(128, -kv) cancels the bias, so q = -128 is handled exactly.
#include <immintrin.h>

#include "backend/cpu/mxfp4.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/rocmfpx_fp4x17_avx512.h"
#include "backend/cpu/simd_reduce.h"

namespace dsv4::cpu {
namespace {

struct Consts {
  __m512i tbl, ntbl, shift, low4, bias;
};

inline Consts make_consts() {
  const __m128i t = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m128i nt = _mm_sub_epi8(_mm_setzero_si128(), t);
  Consts c;
  c.tbl = _mm512_broadcast_i32x4(t);
  c.ntbl = _mm512_broadcast_i32x4(nt);
  // 128-bit lanes 0 and 2 keep the low nibbles (shift 0), lanes 1 and 3 the high nibbles (shift 4).
  c.shift = _mm512_setr_epi64(0, 0, 0x0004000400040004LL, 0x0004000400040004LL, 0, 0, 0x0004000400040004LL,
                              0x0004000400040004LL);
  c.low4 = _mm512_set1_epi8(0x0f);
  c.bias = _mm512_set1_epi8(static_cast<char>(0x80));
  return c;
}

// Lanes 0-7: partial int dots of block w[0]; lanes 8-15: of w[1] (zero when !second).
inline __m512i pair_dot(const Consts& c, const BlockMxfp4* w, const BlockQ8_0Act* x, bool second) {
  const __m256i w0 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[0].qs)));
  const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[0].qs));
  __m256i w1 = _mm256_setzero_si256(), q1 = _mm256_setzero_si256();
  if (second) {
    w1 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[1].qs)));
    q1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[1].qs));
  }
  const __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1);
  const __m512i qv = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
  const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(wv, c.shift), c.low4);
  const __m512i kv = _mm512_shuffle_epi8(c.tbl, nib);
  const __m512i nkv = _mm512_shuffle_epi8(c.ntbl, nib);
  const __m512i u = _mm512_xor_si512(qv, c.bias);
  __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, kv);
  return _mm512_dpbusd_epi32(acc, c.bias, nkv);
}

// Per 16-block chunk: lane j = exact int dot of block j (count <= 16 valid blocks, rest 0).
inline __m512i chunk_isums(const Consts& c, const BlockMxfp4* w, const BlockQ8_0Act* x, int count) {
  __m512i p[8];
  for (int k = 0; k < 8; ++k) {
    if (2 * k < count)
      p[k] = pair_dot(c, w + 2 * k, x + 2 * k, 2 * k + 1 < count);
    else
      p[k] = _mm512_setzero_si512();
  }
  __m512i t[4];
  for (int k = 0; k < 4; ++k)
    t[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * k], p[2 * k + 1]), _mm512_unpackhi_epi32(p[2 * k], p[2 * k + 1]));
  // u[k] chunk c (128-bit) = [P(4k) c, P(4k+1) c, P(4k+2) c, P(4k+3) c] sums of that chunk.
  const __m512i u0 = _mm512_add_epi32(_mm512_unpacklo_epi64(t[0], t[1]), _mm512_unpackhi_epi64(t[0], t[1]));
  const __m512i u1 = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2], t[3]), _mm512_unpackhi_epi64(t[2], t[3]));
  const __m512i xs = _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(2, 0, 2, 0));
  const __m512i ys = _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(3, 1, 3, 1));
  // s = [blocks 0,2,4,6 | 1,3,5,7 | 8,10,12,14 | 9,11,13,15]
  const __m512i s = _mm512_add_epi32(xs, ys);
  const __m512i perm = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
  return _mm512_permutexvar_epi32(perm, s);
}

// (e8m0_half(e_j) * d_x_j) for the count valid blocks of the chunk (other lanes 0).
inline __m512 chunk_scales(const BlockMxfp4* w, const BlockQ8_0Act* x, __mmask16 valid) {
  const __m512i widx = lane_offsets(sizeof(BlockMxfp4)), xidx = lane_offsets(sizeof(BlockQ8_0Act));
  // A 4-byte gather at a block's start (e, qs[0..2]) stays inside the block; keep the low byte.
  const __m512i e = _mm512_and_si512(
      _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, widx, &w[0].e, 1), _mm512_set1_epi32(0xff));
  const __m512i one = _mm512_set1_epi32(1);
  const __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
  const __m512i big_bits = _mm512_slli_epi32(_mm512_sub_epi32(e, one), 23);
  const __m512i small_bits = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  const __m512 dw = _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, big_bits, small_bits));
  const __m512 dx = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, xidx, &x[0].d, 1);
  return _mm512_mul_ps(dw, dx);
}

// MXFP4 for the VBMI multi-row kernel (rocmfpx_fp4x17_avx512.h): e at 0, qs at 1, u = kvalue + 12.
struct Mxfp4Rows {
  static constexpr int kQsOff = 1;
  static constexpr int kEOff = 0;
  static constexpr int kK = 12;
  static constexpr fp4x17::Bytes64 kTable = [] {
    fp4x17::Bytes64 t{};
    for (int i = 0; i < 64; ++i) t.b[i] = static_cast<uint8_t>(kMxfp4Values[i & 15] + 12);
    return t;
  }();
  // e8m0_half per dword (e in the low byte, upper bytes zero).
  static __m512 scale(__m512i e) {
    const __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    const __m512i big_bits = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i small_bits = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, big_bits, small_bits));
  }
};

float vec_dot_old(int64_t n, const void* w, const void* act);

}  // namespace

float mxfp4_vec_dot_avx512vbmi(int64_t n, const void* w, const void* act) {
  float out;
  fp4x17::dot_rows<Mxfp4Rows>(n, w, 0, act, 1, &out);
  return out;
}

void mxfp4_vec_dot_rows_avx512vbmi(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  fp4x17::dot_rows<Mxfp4Rows>(n, w, w_stride, act, nr, out);
}

float mxfp4_vec_dot_avx512(int64_t n, const void* w, const void* act) { return vec_dot_old(n, w, act); }

void mxfp4_vec_dot_rows_avx512(int64_t n, const void* w, int64_t w_stride, const void* act, int nr, float* out) {
  for (int r = 0; r < nr; ++r) out[r] = vec_dot_old(n, static_cast<const uint8_t*>(w) + r * w_stride, act);
}

namespace {

float vec_dot_old(int64_t n, const void* w, const void* act) {
  const auto* wb = static_cast<const BlockMxfp4*>(w);
  const auto* xb = static_cast<const BlockQ8_0Act*>(act);
  const int64_t nb = n / 32;
  const Consts c = make_consts();
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t t = 0;
  for (int64_t b = 0; b < nb; b += 16, ++t) {
    const int count = nb - b >= 16 ? 16 : static_cast<int>(nb - b);
    const __mmask16 valid = static_cast<__mmask16>((1u << count) - 1u);
    const __m512 isum = _mm512_cvtepi32_ps(chunk_isums(c, wb + b, xb + b, count));
    const __m512 v = _mm512_mul_ps(chunk_scales(wb + b, xb + b, valid), isum);
    acc[t & 1] = _mm512_mask_add_ps(acc[t & 1], valid, acc[t & 1], v);
  }
  return reduce_partials32_avx512(acc[0], acc[1]);
}

}  // namespace

}  // namespace dsv4::cpu
