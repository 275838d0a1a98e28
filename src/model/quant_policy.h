// model/quant_policy.h — which tensor type each DS4 tensor gets under a named quantization mix.
//
//   q2    antirez's published mix: routed gate/up IQ2_XXS, routed down Q2_K, attention projections,
//         shared experts and output Q8_0, embedding / hc fns / compressor / indexer / router F16,
//         1-D tensors F32, tid2eid I32 (docs/spec/gguf.md §3.5: 80.76 GiB for Flash)
//   q4    the same with Q4_K routed experts (153.32 GiB)
//   q8_0  every 2-D/3-D weight Q8_0 except the F16 ones of q2; 1-D F32
//   f16, bf16, f32   every weight in that type; 1-D tensors F32; tid2eid I32
// A tensor whose row length the chosen type cannot hold falls back (K/IQ → Q8_0 → F16 → F32); the
// fallback is reported so tools can log it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/tensor_type.h"
#include "model/tensor_manifest.h"

namespace dsv4::model {

enum class QuantMix { kQ2, kQ4, kQ8_0, kF16, kBF16, kF32 };

std::optional<QuantMix> quant_mix_from_name(std::string_view name);
const char* quant_mix_name(QuantMix mix);

struct TypeChoice {
  TensorType type;
  bool fell_back = false;  // the mix's type could not hold the row length
  TensorType wanted;       // the mix's type before any fallback
};

TypeChoice choose_tensor_type(QuantMix mix, const TensorSpec& t);

}  // namespace dsv4::model
