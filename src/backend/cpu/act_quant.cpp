// backend/cpu/act_quant.cpp — the activation quantizers (scalar reference, deterministic): f32 rows ->
// BlockQ8_0Act (for 32-element weight formats) and BlockQ8_K (for 256-element super-block formats).
//
// Both treat a non-finite input element as 0 (a NaN/inf activation would otherwise poison the whole
// block's scale). Rounding is to nearest even for Q8_K and half away from zero (std::round) for Q8_0;
// neither depends on any SIMD path. The per-block definitions (exact formulas, NaN/inf/tie rules) are
// in numerics/quant_ref.h, the one source the CPU and CUDA backends share.
#include <cstring>

#include "backend/cpu/quant.h"
#include "numerics/quant_ref.h"

namespace dsv4::cpu {

// The arithmetic is numerics/quant_ref.h's (shared with CUDA): quantize_act_q8_0_block /
// quantize_act_q8_k_block, one block at a time.
void quantize_act_q8_0(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / 32; ++b) {
    BlockQ8_0Act blk;
    qref::quantize_act_q8_0_block(src + b * 32, &blk);
    std::memcpy(out + b * sizeof(blk), &blk, sizeof(blk));
  }
}

void quantize_act_q8_k(const float* src, void* dst, int64_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / 256; ++b) {
    BlockQ8_K blk;
    qref::quantize_act_q8_k_block(src + b * 256, &blk);
    std::memcpy(out + b * sizeof(blk), &blk, sizeof(blk));
  }
}

}  // namespace dsv4::cpu
