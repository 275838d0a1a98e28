// backend/cpu/act_quant.cpp — the activation quantizers (scalar reference, deterministic): f32 rows ->
// BlockQ8_0Act (for 32-element weight formats) and BlockQ8_K (for 256-element super-block formats).
//
// Both treat a non-finite input element as 0 (a NaN/inf activation would otherwise poison the whole
// block's scale). Rounding uses the default FP environment (round to nearest even) for Q8_K and
// round-half-away-from-zero (std::round) for Q8_0; neither depends on any SIMD path.
#include <cmath>
#include <cstring>

#include "backend/cpu/quant.h"

namespace dsv4::cpu {
namespace {

inline float finite_or_zero(float x) { return std::isfinite(x) ? x : 0.0f; }

}  // namespace

// Per 32 values: amax = max |x|; d = amax / 127 (f32, stored exactly); id = d == 0 ? 0 : 1 / d;
// q = round_half_away(x * id) clamped to [-127, 127] (x * id, not x / d — ggml's choice). d == 0 gives
// all-zero q.
void quantize_act_q8_0(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_0Act*>(dst);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* x = src + b * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(finite_or_zero(x[i])));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0Act blk;
    blk.d = d;
    for (int i = 0; i < 32; ++i) {
      float q = std::round(finite_or_zero(x[i]) * id);
      q = std::fmin(127.0f, std::fmax(-127.0f, q));
      blk.qs[i] = static_cast<int8_t>(q);
    }
    std::memcpy(out + b, &blk, sizeof(blk));
  }
}

// ggml's Q8_K reference, per 256 values: max = the signed element of largest magnitude (first one
// on ties); max == 0 -> d = 0, q = 0. Else iscale = -127 / max; q = nearest_even(iscale * x), clamped
// to [-128, 127]; d = 1 / iscale; bsums[k] = Σ q[16k .. 16k+15].
void quantize_act_q8_k(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* x = src + b * 256;
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 256; ++i) {
      const float v = finite_or_zero(x[i]);
      const float ax = std::fabs(v);
      if (ax > amax) { amax = ax; max = v; }
    }
    BlockQ8_K blk;
    std::memset(&blk, 0, sizeof(blk));
    if (amax != 0.0f) {
      const float iscale = -127.0f / max;
      for (int i = 0; i < 256; ++i) {
        float q = std::nearbyint(iscale * finite_or_zero(x[i]));
        q = std::fmin(127.0f, std::fmax(-128.0f, q));
        blk.qs[i] = static_cast<int8_t>(q);
      }
      for (int k = 0; k < 16; ++k) {
        int s = 0;
        for (int i = 0; i < 16; ++i) s += blk.qs[16 * k + i];
        blk.bsums[k] = static_cast<int16_t>(s);
      }
      blk.d = 1.0f / iscale;
    }
    std::memcpy(out + b, &blk, sizeof(blk));
  }
}

}  // namespace dsv4::cpu
