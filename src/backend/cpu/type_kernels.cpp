// backend/cpu/type_kernels.cpp — collects every family's TypeKernels into one lookup table.
#include <array>
#include <cstring>
#include <vector>

#include "backend/cpu/act_quant.h"
#include "backend/cpu/quant.h"

namespace dsv4::cpu {
namespace {

const std::vector<const TypeKernels*>& registry() {
  static const std::vector<const TypeKernels*> table = [] {
    std::vector<const TypeKernels*> t;
    for (auto family : {float_type_kernels(), q8_0_type_kernels(), k_quant_type_kernels(), iq2_xxs_type_kernels(),
                        mxfp4_type_kernels(), rocmfpx_type_kernels()})
      for (const auto& k : family) t.push_back(&k);
    return t;
  }();
  return table;
}

}  // namespace

const TypeKernels* type_kernels(TensorType type) {
  for (const TypeKernels* k : registry())
    if (k->type == type) return k;
  return nullptr;
}

std::span<const TypeKernels* const> all_type_kernels() { return registry(); }

VecDotFn select_vec_dot(const TypeKernels& k, SimdLevel max_level) {
  for (int level = static_cast<int>(max_level); level > 0; --level)
    if (k.vec_dot[level] != nullptr) return k.vec_dot[level];
  return k.vec_dot[0];
}

VecDotRowsFn select_vec_dot_rows(const TypeKernels& k, SimdLevel max_level) {
  return k.vec_dot_rows[static_cast<int>(effective_simd_level(k, max_level))];
}

SimdLevel effective_simd_level(const TypeKernels& k, SimdLevel max_level) {
  for (int level = static_cast<int>(max_level); level > 0; --level)
    if (k.vec_dot[level] != nullptr) return static_cast<SimdLevel>(level);
  return SimdLevel::kScalar;
}

int64_t act_row_bytes(ActFormat format, int64_t n) {
  switch (format) {
    case ActFormat::kF32: return n * static_cast<int64_t>(sizeof(float));
    case ActFormat::kQ8_0: return n / 32 * static_cast<int64_t>(sizeof(BlockQ8_0Act));
    case ActFormat::kQ8_K: return n / 256 * static_cast<int64_t>(sizeof(BlockQ8_K));
  }
  return 0;
}

void quantize_act_row(ActFormat format, const float* src, void* dst, int64_t n, SimdLevel max_level) {
  static const SimdLevel cpu_level = detected_simd_level();
  const SimdLevel level = static_cast<int>(max_level) < static_cast<int>(cpu_level) ? max_level : cpu_level;
  const bool avx512 = has_avx512(level), avx2 = level == SimdLevel::kAvx2;
  switch (format) {
    case ActFormat::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case ActFormat::kQ8_0:
      return avx512 ? quantize_act_q8_0_avx512(src, dst, n)
             : avx2 ? quantize_act_q8_0_avx2(src, dst, n)
                    : quantize_act_q8_0(src, dst, n);
    case ActFormat::kQ8_K:
      return avx512 ? quantize_act_q8_k_avx512(src, dst, n)
             : avx2 ? quantize_act_q8_k_avx2(src, dst, n)
                    : quantize_act_q8_k(src, dst, n);
  }
}

void quantize_act_row(ActFormat format, const float* src, void* dst, int64_t n) {
  quantize_act_row(format, src, dst, n, detected_simd_level());
}

}  // namespace dsv4::cpu
