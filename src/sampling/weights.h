// sampling/weights.h — the sampler's one summation of token weights (host).
//
// Owns: sum_token_weights. The weight itself, the block order it sums in and the float keys are in
// numerics/token_weight.h (host and device code, shared with backend/cuda/sample.cu).
//
//   const double z = sum_token_weights(logits, max_logit, temperature);
#pragma once

#include <span>

#include "numerics/token_weight.h"

namespace dsv4::sampling {

// Σ token_weight over all of `logits`, in the sampler's one fixed order: blocks of kWeightBlock ids
// in id order; inside a block, kWeightLanes interleaved double partial sums (ids ≡ j mod 8), added
// lane 0..7, then the block's tail one by one. (Interleaved lanes let the loop vectorise; a single
// running double sum would be bound by add latency.)
double sum_token_weights(std::span<const float> logits, float max_logit, float temperature);

}  // namespace dsv4::sampling
