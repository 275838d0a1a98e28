// backend/cpu/float_types.cpp — scalar reference for F32, F16, BF16 (order: see float_types.h).
#include "backend/cpu/float_types.h"

#include <cmath>
#include <cstring>

#include "backend/cpu/quant.h"
#include "numerics/half.h"
#include "numerics/quant_ref.h"

namespace dsv4::cpu {
namespace {

// Element loaders and the row dots are numerics/quant_ref.h's (shared with CUDA).
struct F32Elem {
  static float get(const void* p, int64_t i) { return qref::load_f32(p, i); }
  static float dot(int64_t n, const void* w, const void* x) { return qref::vec_dot_f32(n, w, static_cast<const float*>(x)); }
};
struct F16Elem {
  static float get(const void* p, int64_t i) { return qref::load_f16(p, i); }
  static float dot(int64_t n, const void* w, const void* x) { return qref::vec_dot_f16(n, w, static_cast<const float*>(x)); }
};
struct BF16Elem {
  static float get(const void* p, int64_t i) { return qref::load_bf16(p, i); }
  static float dot(int64_t n, const void* w, const void* x) {
    return qref::vec_dot_bf16(n, w, static_cast<const float*>(x));
  }
};

template <typename E>
float vec_dot_scalar(int64_t n, const void* w, const void* x) {
  return E::dot(n, w, x);
}

template <typename E>
void dequantize_row(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = E::get(src, i);
}

void quantize_row_f32(const float* src, void* dst, int64_t n, const float*) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void quantize_row_f16(const float* src, void* dst, int64_t n, const float*) {
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_f16(src[i]);
    std::memcpy(d + 2 * i, &h, 2);
  }
}
void quantize_row_bf16(const float* src, void* dst, int64_t n, const float*) {
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_bf16(src[i]);
    std::memcpy(d + 2 * i, &h, 2);
  }
}

const TypeKernels kFloatKernels[] = {
    {.type = TensorType::kF32,
     .act = ActFormat::kF32,
     .dequantize_row = dequantize_row<F32Elem>,
     .quantize_row = quantize_row_f32,
     .vec_dot = {vec_dot_scalar<F32Elem>, vec_dot_f32_avx2, vec_dot_f32_avx512},
     .vec_dot_tile = {nullptr, vec_dot_tile_f32_avx2, vec_dot_tile_f32_avx512},
     .tile_rows = {0, kFloatAvx2TileRows}},
    {.type = TensorType::kF16,
     .act = ActFormat::kF32,
     .dequantize_row = dequantize_row<F16Elem>,
     .quantize_row = quantize_row_f16,
     .vec_dot = {vec_dot_scalar<F16Elem>, vec_dot_f16_avx2, vec_dot_f16_avx512},
     .vec_dot_tile = {nullptr, vec_dot_tile_f16_avx2, vec_dot_tile_f16_avx512},
     .tile_rows = {0, kFloatAvx2TileRows}},
    {.type = TensorType::kBF16,
     .act = ActFormat::kF32,
     .dequantize_row = dequantize_row<BF16Elem>,
     .quantize_row = quantize_row_bf16,
     .vec_dot = {vec_dot_scalar<BF16Elem>, vec_dot_bf16_avx2, vec_dot_bf16_avx512},
     .vec_dot_tile = {nullptr, vec_dot_tile_bf16_avx2, vec_dot_tile_bf16_avx512},
     .tile_rows = {0, kFloatAvx2TileRows}},
};

}  // namespace

std::span<const TypeKernels> float_type_kernels() { return kFloatKernels; }

}  // namespace dsv4::cpu
