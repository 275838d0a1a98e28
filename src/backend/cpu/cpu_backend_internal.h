// backend/cpu/cpu_backend_internal.h — small helpers shared by cpu_backend*.cpp / cpu_attention.cpp /
// cpu_moe.cpp (not part of the room's interface).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "numerics/dot.h"

namespace dsv4::cpu::internal {

// Row r of a CPU tensor (any type: nb[1] is the row stride in bytes).
template <typename T = float>
inline T* row(const backend::Tensor& t, int64_t r) {
  return reinterpret_cast<T*>(static_cast<uint8_t*>(t.data) + r * t.nb[1]);
}
inline float* f32(const backend::Tensor& t) { return static_cast<float*>(t.data); }
inline const int32_t* i32(const backend::Tensor& t) { return static_cast<const int32_t*>(t.data); }
// Row stride of an F32 / I32 tensor in elements.
inline int64_t stride(const backend::Tensor& t) { return t.nb[1] / 4; }
// Elements of a contiguous tensor (index vectors given as [n] or [n][1]).
inline int64_t elements(const backend::Tensor& t) { return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]; }

// Grows v to at least n elements (never shrinks, so a warm buffer is never reallocated).
template <typename T>
inline T* grow(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

using dsv4::sum32;  // numerics/dot.h

// "op: what" (only built on errors).
inline std::string shape_error(const char* op, const std::string& what) { return std::string(op) + ": " + what; }

}  // namespace dsv4::cpu::internal
