// sampling/weights.h — the sampler's unnormalised token weights and their one summation order.
//
// Owns: exp_nonpositive (e^x for x ≤ 0 in plain IEEE float arithmetic), token_weight, and
// sum_token_weights. Sampler::sample uses nothing else to turn logits into probabilities, and the
// tests' full-sort reference uses the same three, so the two agree bit for bit. Must not: call libm
// (its exp differs between libraries and versions) or depend on the thread count.
//
//   const float w = token_weight(logit, max_logit, temperature);   // in [0, 1]; the max gets 1
//   const double z = sum_token_weights(logits, max_logit, temperature);
#pragma once

#include <bit>
#include <cstdint>
#include <span>

namespace dsv4::sampling {

// e^x for x ≤ 0, within 1.5 ulp of the true value on [−87, 0] and exactly 1 at 0. x ≤ −87 (where
// e^x is near the bottom of the normal range), −inf and NaN give 0. Cephes' expf: Cody–Waite
// reduction by ln 2 and a degree-6 polynomial, written branch-free (selects are bit masks) so the
// compiler vectorises a loop of it; every operation is a single IEEE op and the build never fuses
// them (-ffp-contract=off), so the bits are the same on every machine.
inline float exp_nonpositive(float x) {
  const uint32_t keep = x > -87.0f ? 0xffffffffu : 0u;  // false for NaN
  const float xc = std::bit_cast<float>((std::bit_cast<uint32_t>(x) & keep) |
                                        (std::bit_cast<uint32_t>(-87.0f) & ~keep));
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
  const float y = p * std::bit_cast<float>(scale);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(y) & keep);
}

// The unnormalised probability of a token at temperature t > 0: e^((logit − max) / t). NaN and
// −inf logits weigh 0.
inline float token_weight(float logit, float max_logit, float temperature) {
  return exp_nonpositive((logit - max_logit) / temperature);
}

// Σ token_weight over all of `logits`, in the sampler's one fixed order: blocks of 1024 ids in id
// order; inside a block, 8 interleaved double partial sums (ids ≡ j mod 8), added lane 0..7, then
// the block's tail one by one. (Interleaved lanes let the loop vectorise; a single running double
// sum would be bound by add latency.)
double sum_token_weights(std::span<const float> logits, float max_logit, float temperature);

}  // namespace dsv4::sampling
