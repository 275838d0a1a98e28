// backend/cpu/act_quant_avx2.cpp — AVX2 activation quantizers, the same float operations as
// act_quant.cpp element by element (act_quant_avx512.cpp's steps with blends for its masks: max is
// order-free; products, divisions and roundings are the scalar ones). On an AVX2-only CPU the
// baseline-ISA reference (libm round / nearbyint per element) costs ~4 % of a flash-4l prefill.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant.h"

namespace dsv4::cpu {
namespace {

inline __m256 abs_ps(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

// x with NaN / ±inf lanes replaced by +0 (finite_or_zero): |x| < inf is false for both.
inline __m256 finite_or_zero(__m256 x) {
  return _mm256_and_ps(x, _mm256_cmp_ps(abs_ps(x), _mm256_set1_ps(__builtin_inff()), _CMP_LT_OQ));
}

// Largest of the 8 lanes (all ≥ +0 and not NaN here, so the order of the comparisons does not matter).
inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

// std::round (half away from zero) of |v| < 2^23: t = trunc(v) and v − t are exact.
inline __m256 round_half_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 up = _mm256_cmp_ps(abs_ps(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));  // copysign(1, v)
  return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

// fmin(hi, fmax(lo, q)) with std::fmax/fmin's NaN rule (a NaN q gives lo): vmaxps returns its second
// operand when either is NaN, so q goes first.
inline __m256 clamp(__m256 q, __m256 lo, __m256 hi) { return _mm256_min_ps(_mm256_max_ps(q, lo), hi); }

// 32 integral floats in [-128, 127] (4 vectors, in order) -> 32 bytes in order.
inline void store_q32(int8_t* dst, __m256 q0, __m256 q1, __m256 q2, __m256 q3) {
  const __m256i w01 = _mm256_packs_epi32(_mm256_cvtps_epi32(q0), _mm256_cvtps_epi32(q1));  // 128-bit lanes interleave
  const __m256i w23 = _mm256_packs_epi32(_mm256_cvtps_epi32(q2), _mm256_cvtps_epi32(q3));
  const __m256i b = _mm256_packs_epi16(w01, w23);  // dwords: q0a q1a q2a q3a | q0b q1b q2b q3b
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                      _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

}  // namespace

void quantize_act_q8_0_avx2(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_0Act*>(dst);
  for (int64_t b = 0; b < n / 32; ++b) {
    __m256 x[4];
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      x[i] = finite_or_zero(_mm256_loadu_ps(src + 32 * b + 8 * i));
      m = _mm256_max_ps(m, abs_ps(x[i]));
    }
    const float amax = hmax(m);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    __m256 q[4];
    for (int i = 0; i < 4; ++i) q[i] = clamp(round_half_away(_mm256_mul_ps(x[i], vid)), lo, hi);
    BlockQ8_0Act blk;
    blk.d = d;
    store_q32(blk.qs, q[0], q[1], q[2], q[3]);
    std::memcpy(out + b, &blk, sizeof(blk));
  }
}

void quantize_act_q8_k_avx2(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n / 256; ++b) {
    __m256 x[32];
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < 32; ++i) {
      x[i] = finite_or_zero(_mm256_loadu_ps(src + 256 * b + 8 * i));
      m = _mm256_max_ps(m, abs_ps(x[i]));
    }
    const float amax = hmax(m);
    BlockQ8_K blk;
    std::memset(&blk, 0, sizeof(blk));
    if (amax != 0.0f) {
      // max = the first element whose magnitude is amax (the reference's strict '>' scan).
      float max = 0.0f;
      for (int i = 0; i < 32; ++i) {
        const int eq = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(x[i]), _mm256_set1_ps(amax), _CMP_EQ_OQ));
        if (eq != 0) {
          alignas(32) float lane[8];
          _mm256_store_ps(lane, x[i]);
          max = lane[__builtin_ctz(static_cast<unsigned>(eq))];
          break;
        }
      }
      const float iscale = -127.0f / max;
      const __m256 vs = _mm256_set1_ps(iscale), lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f);
      for (int i = 0; i < 32; i += 4) {
        __m256 q[4];
        for (int j = 0; j < 4; ++j)
          q[j] = clamp(_mm256_round_ps(_mm256_mul_ps(vs, x[i + j]), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), lo,
                       hi);
        store_q32(blk.qs + 8 * i, q[0], q[1], q[2], q[3]);
        for (int k = 0; k < 2; ++k) {  // bsums of the 16 values in q[2k], q[2k + 1] (exact int sums)
          const __m256i s = _mm256_add_epi32(_mm256_cvtps_epi32(q[2 * k]), _mm256_cvtps_epi32(q[2 * k + 1]));
          __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
          h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
          h = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
          blk.bsums[i / 2 + k] = static_cast<int16_t>(_mm_cvtsi128_si32(h));
        }
      }
      blk.d = 1.0f / iscale;
    }
    std::memcpy(out + b, &blk, sizeof(blk));
  }
}

}  // namespace dsv4::cpu
