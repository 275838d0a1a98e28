// backend/cpu/vec_ops.h — elementwise vector helpers with run-time ISA dispatch.
//
// fma_axpy: y[i] = fma(a, x[i], y[i]) for every i — one fused multiply-add per element, so every
// SIMD width gives the scalar reference's bits exactly (no cross-element arithmetic at all).
// Used by attention's weighted value sum, the HC collapse/post mixes and the MoE accumulation,
// whose per-element orders (ops.h) are sequences of such fmas.
#pragma once

#include <cstdint>

#include "base/cpu_features.h"

namespace dsv4::cpu {

using FmaAxpyFn = void (*)(float* y, const float* x, float a, int64_t n);

void fma_axpy_scalar(float* y, const float* x, float a, int64_t n);
void fma_axpy_avx2(float* y, const float* x, float a, int64_t n);
void fma_axpy_avx512(float* y, const float* x, float a, int64_t n);

inline FmaAxpyFn select_fma_axpy(SimdLevel level) {
  return level == SimdLevel::kAvx512 ? fma_axpy_avx512 : level == SimdLevel::kAvx2 ? fma_axpy_avx2 : fma_axpy_scalar;
}

}  // namespace dsv4::cpu
