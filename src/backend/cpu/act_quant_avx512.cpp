// backend/cpu/act_quant_avx512.cpp — AVX-512 activation quantizers, the same float operations as
// act_quant.cpp element by element (max is order-free; products, divisions and roundings are the
// scalar ones): 40x faster than the libm round/nearbyint calls of the baseline-ISA reference, which
// dominated matmul on few rows (prefill quantizes every column of every product).
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant.h"

namespace dsv4::cpu {
namespace {

// x with NaN / ±inf lanes replaced by +0 (finite_or_zero).
inline __m512 finite_or_zero(__m512 x) {
  constexpr int kNonFinite = 0x01 | 0x08 | 0x10 | 0x80;  // QNaN, +inf, -inf, SNaN
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~_mm512_fpclass_ps_mask(x, kNonFinite)), x);
}

// std::round (half away from zero) of |v| < 2^23: t = trunc(v) and v − t are exact.
inline __m512 round_half_away(__m512 v) {
  const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(v, t));
  const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_and_ps(v, _mm512_set1_ps(-0.0f)));  // copysign(1, v)
  return _mm512_mask_add_ps(t, up, t, one);
}

// fmin(hi, fmax(lo, q)) with std::fmax/fmin's NaN rule (a NaN q gives lo): vmaxps returns its second
// operand when either is NaN, so q goes first. (q is NaN when a subnormal scale overflows 1/d to inf
// and meets x = 0; the reference then stores lo.)
inline __m512 clamp(__m512 q, __m512 lo, __m512 hi) { return _mm512_min_ps(_mm512_max_ps(q, lo), hi); }

// 16 integral floats in [-128, 127] -> 16 bytes.
inline void store_q(int8_t* dst, __m512 q) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q)));
}

}  // namespace

void quantize_act_q8_0_avx512(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_0Act*>(dst);
  for (int64_t b = 0; b < n / 32; ++b) {
    const __m512 x0 = finite_or_zero(_mm512_loadu_ps(src + 32 * b));
    const __m512 x1 = finite_or_zero(_mm512_loadu_ps(src + 32 * b + 16));
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m512 vid = _mm512_set1_ps(id), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    BlockQ8_0Act blk;
    blk.d = d;
    store_q(blk.qs, clamp(round_half_away(_mm512_mul_ps(x0, vid)), lo, hi));
    store_q(blk.qs + 16, clamp(round_half_away(_mm512_mul_ps(x1, vid)), lo, hi));
    std::memcpy(out + b, &blk, sizeof(blk));
  }
}

void quantize_act_q8_k_avx512(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n / 256; ++b) {
    __m512 x[16];
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < 16; ++i) {
      x[i] = finite_or_zero(_mm512_loadu_ps(src + 256 * b + 16 * i));
      m = _mm512_max_ps(m, _mm512_abs_ps(x[i]));
    }
    const float amax = _mm512_reduce_max_ps(m);
    BlockQ8_K blk;
    std::memset(&blk, 0, sizeof(blk));
    if (amax != 0.0f) {
      // max = the first element whose magnitude is amax (the reference's strict '>' scan).
      float max = 0.0f;
      for (int i = 0; i < 16; ++i) {
        const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_abs_ps(x[i]), _mm512_set1_ps(amax), _CMP_EQ_OQ);
        if (eq != 0) {
          alignas(64) float lane[16];
          _mm512_store_ps(lane, x[i]);
          max = lane[__builtin_ctz(eq)];
          break;
        }
      }
      const float iscale = -127.0f / max;
      const __m512 vs = _mm512_set1_ps(iscale), lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
      for (int i = 0; i < 16; ++i) {
        const __m512 q =
            clamp(_mm512_roundscale_ps(_mm512_mul_ps(vs, x[i]), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), lo, hi);
        store_q(blk.qs + 16 * i, q);
        blk.bsums[i] = static_cast<int16_t>(_mm512_reduce_add_epi32(_mm512_cvtps_epi32(q)));
      }
      blk.d = 1.0f / iscale;
    }
    std::memcpy(out + b, &blk, sizeof(blk));
  }
}

}  // namespace dsv4::cpu
