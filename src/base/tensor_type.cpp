// base/tensor_type.cpp — the type table (ggml block sizes, not ds4's: see docs/spec/gguf.md §1).
#include "base/tensor_type.h"

#include <limits>

namespace dsv4 {
namespace {

using T = TensorType;
constexpr TensorTypeInfo kTypes[] = {
    {T::kF32, "f32", 1, 4, true},
    {T::kF16, "f16", 1, 2, true},
    {T::kQ4_0, "q4_0", 32, 18, false},
    {T::kQ4_1, "q4_1", 32, 20, false},
    {T::kQ5_0, "q5_0", 32, 22, false},
    {T::kQ5_1, "q5_1", 32, 24, false},
    {T::kQ8_0, "q8_0", 32, 34, true},
    {T::kQ8_1, "q8_1", 32, 36, false},
    {T::kQ2_K, "q2_k", 256, 84, true},
    {T::kQ3_K, "q3_k", 256, 110, false},
    {T::kQ4_K, "q4_k", 256, 144, true},
    {T::kQ5_K, "q5_k", 256, 176, false},
    {T::kQ6_K, "q6_k", 256, 210, false},
    {T::kQ8_K, "q8_k", 256, 292, false},
    {T::kIQ2_XXS, "iq2_xxs", 256, 66, true},
    {T::kI8, "i8", 1, 1, false},
    {T::kI16, "i16", 1, 2, false},
    {T::kI32, "i32", 1, 4, true},
    {T::kI64, "i64", 1, 8, false},
    {T::kF64, "f64", 1, 8, false},
    {T::kBF16, "bf16", 1, 2, true},
    {T::kMXFP4, "mxfp4", 32, 17, true},
    {T::kQ4_0_ROCMFP4, "q4_0_rocmfp4", 32, 18, true},
    {T::kQ4_0_ROCMFP4_FAST, "q4_0_rocmfp4_fast", 32, 17, true},
    {T::kQ6_0_ROCMFPX, "q6_0_rocmfpx", 32, 26, true},
    {T::kQ8_0_ROCMFPX, "q8_0_rocmfpx", 32, 33, true},
    {T::kQ3_0_ROCMFPX, "q3_0_rocmfpx", 32, 14, true},
    {T::kQ2_0_ROCMFP2, "q2_0_rocmfp2", 32, 10, true},
};

}  // namespace

std::optional<TensorTypeInfo> tensor_type_info(uint32_t id) {
  for (const auto& t : kTypes)
    if (static_cast<uint32_t>(t.type) == id) return t;
  return std::nullopt;
}

const TensorTypeInfo& tensor_type_info(TensorType type) {
  for (const auto& t : kTypes)
    if (t.type == type) return t;
  return kTypes[0];  // unreachable for enum values listed above
}

std::string_view tensor_type_name(TensorType type) { return tensor_type_info(type).name; }

std::optional<TensorType> tensor_type_from_name(std::string_view name) {
  for (const auto& t : kTypes) {
    if (t.name.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < name.size() && eq; ++i) {
      char c = name[i];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      eq = c == t.name[i];
    }
    if (eq) return t.type;
  }
  return std::nullopt;
}

int64_t tensor_row_bytes(TensorType type, int64_t n) {
  const auto& t = tensor_type_info(type);
  if (n < 0 || n % t.block_elems != 0) return -1;
  const int64_t blocks = n / t.block_elems;
  if (blocks > std::numeric_limits<int64_t>::max() / t.block_bytes) return -1;
  return blocks * t.block_bytes;
}

std::span<const TensorTypeInfo> all_tensor_types() {
  return kTypes;
}

}  // namespace dsv4
