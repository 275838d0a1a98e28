// numerics/accumulate.h — the shared accumulation order of every dot kernel (scalar reference),
// host C++ and CUDA device code alike.
//
// 32 interleaved float partials: item k (a block's scaled integer dot, or one fma for float types)
// goes into partial[k % 32], items in increasing k. The final value is a fixed pairwise tree:
//   for s in 16, 8, 4, 2, 1:  p[i] = p[i] + p[i + s]   (i < s)
// which is exactly AVX-512 (two 16-lane registers: add, then fold halves), AVX2 (four 8-lane
// registers) and a CUDA warp (lane = k % 32, __shfl_down_sync with offsets 16..1).
#pragma once

#include "numerics/hd.h"

namespace dsv4 {

struct Partials32 {
  float p[32] = {};
  DSV4_HD void add(long long k, float v) { p[k & 31] += v; }
  // Tree reduction; leaves the partials modified.
  DSV4_HD float reduce() {
    for (int s = 16; s >= 1; s >>= 1)
      for (int i = 0; i < s; ++i) p[i] = p[i] + p[i + s];
    return p[0];
  }
};

}  // namespace dsv4
