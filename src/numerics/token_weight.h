// numerics/token_weight.h — the sampler's numerics, host and device code: the unnormalised token
// weight, the order of weight sums, order-preserving float keys and the logit bound search.
//
// Owns: exp_nonpositive (e^x for x ≤ 0 in plain IEEE float arithmetic), token_weight, the block-sum
// order (kWeightBlock, kWeightLanes; sampling/weights.h sums in it), order_key / from_order_key and
// lowest_logit_reaching. sampling::Sampler, the tests' full-sort reference and backend/cuda/sample.cu
// all use these functions (DSV4_HD), so the three agree bit for bit. They live in numerics, not in
// sampling, because backends may include numerics only. Must not: call libm (its exp differs between
// libraries and versions).
//
//   const float w = token_weight(logit, max_logit, temperature);   // in [0, 1]; the max gets 1
#pragma once

#include <cstdint>

#include "numerics/hd.h"

namespace dsv4::sampling {

// The weight sums' order: blocks of kWeightBlock ids in id order; inside a block, kWeightLanes
// interleaved double partial sums (ids ≡ j mod kWeightLanes), added lane 0..7 to 0.0, then the
// block's tail one by one; the blocks' sums added in block order to 0.0.
constexpr int64_t kWeightBlock = 1024;
constexpr int64_t kWeightLanes = 8;

// e^x for x ≤ 0, within 1.5 ulp of the true value on [−87, 0] and exactly 1 at 0. x ≤ −87 (where
// e^x is near the bottom of the normal range), −inf and NaN give 0. Cephes' expf: Cody–Waite
// reduction by ln 2 and a degree-6 polynomial, written branch-free (selects are bit masks) so the
// compiler vectorises a loop of it; every operation is a single IEEE op and the build never fuses
// them (-ffp-contract=off on the host, -fmad=false on the device), so the bits are the same on
// every machine.
DSV4_HD float exp_nonpositive(float x) {
  const uint32_t keep = x > -87.0f ? 0xffffffffu : 0u;  // false for NaN
  const float xc = hd::f32_from_bits((hd::f32_bits(x) & keep) | (hd::f32_bits(-87.0f) & ~keep));
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln 2)
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;            // x − n·ln 2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // n ∈ [−126, 0], so 2^n is a normal float built from its exponent bits.
  const uint32_t scale = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  const float y = p * hd::f32_from_bits(scale);
  return hd::f32_from_bits(hd::f32_bits(y) & keep);
}

// The unnormalised probability of a token at temperature t > 0: e^((logit − max) / t). NaN and
// −inf logits weigh 0.
DSV4_HD float token_weight(float logit, float max_logit, float temperature) {
  return exp_nonpositive(hd::div(logit - max_logit, temperature));
}

// Floats in increasing order ↔ unsigned keys in increasing order (NaNs fall outside [−inf, +inf]).
DSV4_HD uint32_t order_key(float f) {
  const uint32_t b = hd::f32_bits(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
DSV4_HD float from_order_key(uint32_t k) {
  return hd::f32_from_bits((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// The lowest float l with (l − mx) / t ≥ c, for c ≤ 0 and t > 0. The predicate is monotone in l (a
// float subtraction and a division by t > 0 both are), so bisection over the bit patterns between
// −inf and mx finds the exact boundary in at most 32 steps.
DSV4_HD float lowest_logit_reaching(float mx, float t, float c) {
  const float neg_inf = hd::f32_from_bits(0xff800000u);
  if (hd::div(neg_inf - mx, t) >= c) return neg_inf;
  uint32_t lo = order_key(neg_inf), hi = order_key(mx);  // reaches(lo) false, reaches(hi) true
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (hd::div(from_order_key(mid) - mx, t) >= c) hi = mid;
    else lo = mid;
  }
  return from_order_key(hi);
}

}  // namespace dsv4::sampling
