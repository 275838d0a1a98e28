// base/tensor_type.h — the tensor element types dsv4 knows, with ggml's numbering.
//
// Ids equal ggml's GGML_TYPE_* values (and lucebox's ROCmFPx ids 100-107), so GGUF files from any
// converter read the same. Both the GGUF room (validation, sizes) and the kernels use this table; it
// lives in base because neither may depend on the other.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace dsv4 {

enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,  // known for sizes only (no kernels)
  kQ4_1 = 3,  // known for sizes only
  kQ5_0 = 6,  // known for sizes only
  kQ5_1 = 7,  // known for sizes only
  kQ8_0 = 8,
  kQ8_1 = 9,  // known for sizes only
  kQ2_K = 10,
  kQ3_K = 11,  // known for sizes only
  kQ4_K = 12,
  kQ5_K = 13,  // known for sizes only
  kQ6_K = 14,  // known for sizes only
  kQ8_K = 15,  // activation-side block
  kIQ2_XXS = 16,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
  kMXFP4 = 39,
  kQ4_0_ROCMFP4 = 100,
  kQ4_0_ROCMFP4_FAST = 101,
  kQ6_0_ROCMFPX = 102,
  kQ8_0_ROCMFPX = 103,
  kQ3_0_ROCMFPX = 104,
  kQ2_0_ROCMFP2 = 107,
};

struct TensorTypeInfo {
  TensorType type;
  std::string_view name;   // ggml spelling: "f32", "q8_0", "iq2_xxs", "q4_0_rocmfp4_fast"
  int64_t block_elems;     // elements per block (1 for plain types)
  int64_t block_bytes;     // bytes per block
  bool has_kernels;        // dsv4 can dequantize / dot it (false: size known, data unsupported)
};

// Info for a type id as stored in a file; nullopt for ids dsv4 does not know (callers report them).
std::optional<TensorTypeInfo> tensor_type_info(uint32_t id);
const TensorTypeInfo& tensor_type_info(TensorType type);
std::string_view tensor_type_name(TensorType type);
std::optional<TensorType> tensor_type_from_name(std::string_view name);

// Bytes of one row of n elements, or -1 when n is not a multiple of the block size (or overflows).
int64_t tensor_row_bytes(TensorType type, int64_t n);

// Every known type, in id order (for tests, inspect and bench).
std::span<const TensorTypeInfo> all_tensor_types();

}  // namespace dsv4
