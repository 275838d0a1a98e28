// model/quant_policy.cpp
#include "model/quant_policy.h"

namespace dsv4::model {

std::optional<QuantMix> quant_mix_from_name(std::string_view name) {
  if (name == "q2") return QuantMix::kQ2;
  if (name == "q4") return QuantMix::kQ4;
  if (name == "q8_0") return QuantMix::kQ8_0;
  if (name == "f16") return QuantMix::kF16;
  if (name == "bf16") return QuantMix::kBF16;
  if (name == "f32") return QuantMix::kF32;
  return std::nullopt;
}

const char* quant_mix_name(QuantMix mix) {
  switch (mix) {
    case QuantMix::kQ2: return "q2";
    case QuantMix::kQ4: return "q4";
    case QuantMix::kQ8_0: return "q8_0";
    case QuantMix::kF16: return "f16";
    case QuantMix::kBF16: return "bf16";
    case QuantMix::kF32: return "f32";
  }
  return "?";
}

namespace {

TensorType wanted_type(QuantMix mix, const TensorSpec& t) {
  using R = TensorRole;
  using T = TensorType;
  if (t.role == R::kHashTable) return T::kI32;
  if (t.n_dims == 1) return T::kF32;  // norms, sinks, biases, hc scale/base
  switch (mix) {
    case QuantMix::kF32: return T::kF32;
    case QuantMix::kF16: return T::kF16;
    case QuantMix::kBF16: return T::kBF16;
    default: break;
  }
  switch (t.role) {
    case R::kOutput:
    case R::kAttnProj:
    case R::kSharedExpert: return T::kQ8_0;
    case R::kExpertGateUp: return mix == QuantMix::kQ2 ? T::kIQ2_XXS : mix == QuantMix::kQ4 ? T::kQ4_K : T::kQ8_0;
    case R::kExpertDown: return mix == QuantMix::kQ2 ? T::kQ2_K : mix == QuantMix::kQ4 ? T::kQ4_K : T::kQ8_0;
    default: return T::kF16;  // embedding, hc fns, compressor, indexer, router
  }
}

}  // namespace

TypeChoice choose_tensor_type(QuantMix mix, const TensorSpec& t) {
  const TensorType want = wanted_type(mix, t);
  TensorType type = want;
  // Fallback chain for row lengths the block size does not divide.
  const TensorType chain[] = {want, TensorType::kQ8_0, TensorType::kF16, TensorType::kF32};
  for (TensorType c : chain) {
    if (c == TensorType::kQ8_0 && (want == TensorType::kF16 || want == TensorType::kF32 || want == TensorType::kI32 ||
                                    want == TensorType::kBF16))
      continue;
    if (tensor_row_bytes(c, t.ne[0]) >= 0) {
      type = c;
      break;
    }
  }
  return {type, type != want, want};
}

}  // namespace dsv4::model
