// numerics/hd.h — what lets one header be both host C++ and CUDA device code (as ggml's common block
// header does): DSV4_HD marks a function __host__ __device__ under nvcc and plain inline elsewhere,
// and the hd:: helpers name the correctly rounded IEEE operations on both sides:
//   host:   std::fma / std::sqrt / a / b (with -ffp-contract=off, no fast-math: IEEE round to nearest)
//   device: __fmaf_rn / __fma_rn / __fsqrt_rn / __dsqrt_rn / __fdiv_rn / __ddiv_rn (explicitly _rn, so
//           no compiler flag can swap in an approximate version), bit casts via __float_as_uint etc.
// Device code including these headers is compiled with -fmad=false and never --use_fast_math, so plain
// a * b + c stays two rounded operations as on the host. Inside DSV4_HD functions: no <cmath> calls that
// lack a device version and no std::numeric_limits (constants are written as bit patterns).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DSV4_HD __host__ __device__ inline
#else
#define DSV4_HD inline
#endif

namespace dsv4::hd {

#if defined(__CUDA_ARCH__)
DSV4_HD float fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
DSV4_HD double fma(double a, double b, double c) { return __fma_rn(a, b, c); }
DSV4_HD float sqrt(float a) { return __fsqrt_rn(a); }
DSV4_HD double sqrt(double a) { return __dsqrt_rn(a); }
DSV4_HD float div(float a, float b) { return __fdiv_rn(a, b); }
DSV4_HD double div(double a, double b) { return __ddiv_rn(a, b); }
// Round to nearest integer, ties to even (the host's default rounding mode for nearbyint).
DSV4_HD double round_even(double a) { return ::rint(a); }
DSV4_HD uint32_t f32_bits(float f) { return __float_as_uint(f); }
DSV4_HD float f32_from_bits(uint32_t u) { return __uint_as_float(u); }
DSV4_HD uint64_t f64_bits(double d) { return static_cast<uint64_t>(__double_as_longlong(d)); }
DSV4_HD double f64_from_bits(uint64_t u) { return __longlong_as_double(static_cast<long long>(u)); }
#else
DSV4_HD float fma(float a, float b, float c) { return std::fma(a, b, c); }
DSV4_HD double fma(double a, double b, double c) { return std::fma(a, b, c); }
DSV4_HD float sqrt(float a) { return std::sqrt(a); }
DSV4_HD double sqrt(double a) { return std::sqrt(a); }
DSV4_HD float div(float a, float b) { return a / b; }
DSV4_HD double div(double a, double b) { return a / b; }
DSV4_HD double round_even(double a) { return std::nearbyint(a); }
DSV4_HD uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
DSV4_HD float f32_from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
DSV4_HD uint64_t f64_bits(double d) { uint64_t u; std::memcpy(&u, &d, 8); return u; }
DSV4_HD double f64_from_bits(uint64_t u) { double d; std::memcpy(&d, &u, 8); return d; }
#endif

// A copy of the object at p, which may be less aligned than T requires (GGUF data and test buffers
// only guarantee byte alignment for quant blocks): a byte copy, never a misaligned load.
template <typename T>
DSV4_HD T load_unaligned(const T* p) {
  T v;
  std::memcpy(&v, static_cast<const void*>(p), sizeof(T));
  return v;
}

}  // namespace dsv4::hd
