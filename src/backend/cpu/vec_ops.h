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
  return has_avx512(level) ? fma_axpy_avx512 : level == SimdLevel::kAvx2 ? fma_axpy_avx2 : fma_axpy_scalar;
}

// h[i] = silu(min(g[i], limit)) · min(max(u[i], −limit), limit) with std::min / std::max semantics
// (a NaN input passes through) and numerics/det_math.h's silu (its exp step for step, so every level
// gives the scalar bits).
using SwigluClampFn = void (*)(const float* g, const float* u, int64_t n, float limit, float* h);
void swiglu_clamp_scalar(const float* g, const float* u, int64_t n, float limit, float* h);
void swiglu_clamp_avx2(const float* g, const float* u, int64_t n, float limit, float* h);
void swiglu_clamp_avx512(const float* g, const float* u, int64_t n, float limit, float* h);
inline SwigluClampFn select_swiglu_clamp(SimdLevel level) {
  return has_avx512(level) ? swiglu_clamp_avx512 : level == SimdLevel::kAvx2 ? swiglu_clamp_avx2 : swiglu_clamp_scalar;
}

// Weighted sum of rows into several outputs: for h < H, for every c < d, for j = 0, 1, .., nk − 1:
//   y[h·y_stride + c] = fma(w[h·nk + j], rows[j][c], y[h·y_stride + c])
// i.e. exactly fma_axpy(y_h, rows[j], w[h][j], d) for j in order, for every h (attention's value sum,
// all heads of a query sharing its keys). The AVX-512 form keeps 4 heads × 64 columns in registers
// while the rows stream past, the AVX2 form 4 heads × 16 columns.
using WeightedRowsFn = void (*)(float* y, int64_t y_stride, int64_t H, const float* const* rows, int64_t nk,
                                const float* w, int64_t d);
void weighted_rows_avx512(float* y, int64_t y_stride, int64_t H, const float* const* rows, int64_t nk, const float* w,
                          int64_t d);
void weighted_rows_avx2(float* y, int64_t y_stride, int64_t H, const float* const* rows, int64_t nk, const float* w,
                        int64_t d);
// The level's form (null: scalar, the caller loops fma_axpy).
inline WeightedRowsFn select_weighted_rows(SimdLevel level) {
  return has_avx512(level) ? weighted_rows_avx512 : level == SimdLevel::kAvx2 ? weighted_rows_avx2 : nullptr;
}

}  // namespace dsv4::cpu
