// backend/cpu/vec_ops.cpp — scalar reference of vec_ops.h.
#include "backend/cpu/vec_ops.h"

#include <algorithm>
#include <cmath>

#include "numerics/det_math.h"

namespace dsv4::cpu {

void fma_axpy_scalar(float* y, const float* x, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

void swiglu_clamp_scalar(const float* g, const float* u, int64_t n, float limit, float* h) {
  for (int64_t i = 0; i < n; ++i) {
    h[i] = det::swiglu_clamp(g[i], u[i], limit);
  }
}

}  // namespace dsv4::cpu
