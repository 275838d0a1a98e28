// backend/cpu/vec_ops.cpp — scalar reference of vec_ops.h.
#include "backend/cpu/vec_ops.h"

#include <cmath>

namespace dsv4::cpu {

void fma_axpy_scalar(float* y, const float* x, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

}  // namespace dsv4::cpu
