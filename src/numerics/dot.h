// numerics/dot.h — the F32 dot product every reduction over floats uses (rms_norm's sum of squares,
// attention scores, indexer scores, the F32 weight type's vec_dot), host and device alike:
// partial[i % 32] = fma(a_i, b_i, partial[i % 32]) for i ascending, then Partials32's fixed tree.
// A warp computes it with lane = i % 32 (each lane's fma chain in i order) and shuffle-down 16..1.
#pragma once

#include <cstdint>

#include "numerics/accumulate.h"
#include "numerics/hd.h"

namespace dsv4 {

DSV4_HD float dot_f32(int64_t n, const float* a, const float* b) {
  Partials32 acc;
  for (int64_t i = 0; i < n; ++i) acc.p[i & 31] = hd::fma(a[i], b[i], acc.p[i & 31]);
  return acc.reduce();
}

// Σ x_i over 32 interleaved partials (plain adds) and the fixed tree: the softmax denominators.
DSV4_HD float sum32(const float* x, int64_t n) {
  Partials32 acc;
  for (int64_t i = 0; i < n; ++i) acc.p[i & 31] = acc.p[i & 31] + x[i];
  return acc.reduce();
}

}  // namespace dsv4
