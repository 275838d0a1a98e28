// backend/cpu/q8_0.cpp — Q8_0 (ggml type 8): dequantize, reference quantizer, scalar vec_dot, and the
// TypeKernels registration (SIMD dots live in q8_0_avx2.cpp / q8_0_avx512.cpp).
#include "backend/cpu/q8_0.h"

#include <cmath>
#include <cstring>

#include "backend/cpu/quant.h"
#include "numerics/half.h"
#include "numerics/quant_ref.h"

namespace dsv4::cpu {
namespace {

// x = (float)qs[i] * f16_to_f32(d), one f32 multiply (gguf-py: x * d): qref::dequantize_block_q8_0.
void dequantize_row_q8_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_0*>(src);
  for (int64_t b = 0; b < n / 32; ++b) qref::dequantize_block_q8_0(blocks + b, dst + b * 32);
}

// ggml's quantize_row_q8_0_ref: amax = max |x|; d = amax / 127; id = d == 0 ? 0 : 1 / d;
// qs = round_half_away(x * id) using the UNROUNDED f32 d (as ggml); the stored d is f16(d).
// Non-finite inputs count as 0. Deviation from ggml only where ggml would store an infinite d
// (amax / 127 rounds above the f16 maximum): d is then clamped to 65504 and q to [-127, 127].
// The importance vector is ignored (for a single-scale 8-bit block, amax/127 is what everybody uses).
void quantize_row_q8_0(const float* src, void* dst, int64_t n, const float* /*importance*/) {
  auto* blocks = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / 32; ++b) {
    float x[32];
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) {
      x[i] = std::isfinite(src[b * 32 + i]) ? src[b * 32 + i] : 0.0f;
      amax = std::fmax(amax, std::fabs(x[i]));
    }
    float d = amax / 127.0f;
    BlockQ8_0 blk;
    blk.d = f32_to_f16(d);
    if (f16_to_f32(blk.d) > 65504.0f) {
      d = 65504.0f;
      blk.d = f32_to_f16(d);
    }
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < 32; ++i) {
      const float q = std::round(x[i] * id);
      blk.qs[i] = static_cast<int8_t>(std::fmin(127.0f, std::fmax(-127.0f, q)));
    }
    std::memcpy(blocks + b, &blk, sizeof(blk));
  }
}

const TypeKernels kQ8_0Kernels[] = {{
    .type = TensorType::kQ8_0,
    .act = ActFormat::kQ8_0,
    .dequantize_row = dequantize_row_q8_0,
    .quantize_row = quantize_row_q8_0,
    .vec_dot = {vec_dot_q8_0_scalar, vec_dot_q8_0_avx2, vec_dot_q8_0_avx512},
    .vec_dot_rows = {nullptr, nullptr, vec_dot_rows_q8_0_avx512},
    .rows_for_matvec = false,
    .vec_dot_tile = {nullptr, vec_dot_tile8_q8_0_avx2, vec_dot_tile16_q8_0_avx512},
    .tile_rows = {0, 8, 16},
    .tile_cols = {0, kQ8_0Avx2TileCols, 0},
    .amx = {q8_0_amx_group_bytes, q8_0_amx_pack_group, q8_0_amx_matmul},
}};

}  // namespace

// ACCUMULATION ORDER (Q8_0 x Q8_0Act; every SIMD level reproduces it bit for bit):
//   for block b = 0, 1, ..., n/32 - 1 (increasing):
//     isum = Σ_{i<32} w.qs[i] * a.qs[i]              (exact int32, any grouping)
//     v    = (f16_to_f32(w.d) * a.d) * (float)isum    (two f32 multiplies, in that order)
//     partial[b % 32] = partial[b % 32] + v           (partials start at +0)
//   result = Partials32::reduce() (for s = 16, 8, 4, 2, 1: p[i] = p[i] + p[i + s]).
// The arithmetic is numerics/quant_ref.h's qref::vec_dot_q8_0 (shared with CUDA).
float vec_dot_q8_0_scalar(int64_t n, const void* w, const void* act) {
  return qref::vec_dot_q8_0(n, static_cast<const BlockQ8_0*>(w), static_cast<const BlockQ8_0Act*>(act));
}

std::span<const TypeKernels> q8_0_type_kernels() { return kQ8_0Kernels; }

}  // namespace dsv4::cpu
