// numerics/blocks.h — the quantized block layouts every backend reads (host C++ and CUDA device code
// alike, as ggml's common block header), with static_asserts on their sizes, and the MXFP4 E8M0
// scale decode. Half floats in the blocks are raw bits (numerics/half.h converts them). Layouts and
// element orders: docs/gguf.md §5; the per-type accumulation orders are written at each kernel.
// (The ROCmFPx family, types 100-107, is byte-addressed: backend/cpu/rocmfpx.h gives its layouts.)
#pragma once

#include <cstdint>

#include "numerics/hd.h"

namespace dsv4 {

// Activation block for 32-element weight formats: f32 scale (not f16 as in ggml's block_q8_0 — the
// activation scale stays exact), int8 values. x ≈ d * qs[i].
struct BlockQ8_0Act {
  float d;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0Act) == 36);

// Activation block for 256-element super-block formats (ggml's block_q8_K). bsums[k] = Σ qs[16k..16k+15].
struct BlockQ8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// ggml's block_q8_0: x[i] = f16(d) * qs[i].
struct BlockQ8_0 {
  uint16_t d;  // f16 bits
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0) == 34);

// ggml's block_q2_K (gguf.md §5.3).
struct BlockQ2_K {
  uint8_t scales[16];  // low nibble: scale, high nibble: min, per 16 weights
  uint8_t qs[64];      // 2-bit quants; element 128h + 32j + l = (qs[32h + l] >> 2j) & 3
  uint16_t d;          // f16
  uint16_t dmin;       // f16
};
static_assert(sizeof(BlockQ2_K) == 84);

// ggml's block_q4_K (gguf.md §5.4).
struct BlockQ4_K {
  uint16_t d;           // f16
  uint16_t dmin;        // f16
  uint8_t scales[12];   // eight 6-bit scales and mins, packed
  uint8_t qs[128];      // element 64c + l = qs[32c + l] & 15, element 64c + 32 + l = qs[32c + l] >> 4
};
static_assert(sizeof(BlockQ4_K) == 144);

// IQ2_XXS (gguf.md §5.5): { f16 d; u16 qs[32]; } per 256 weights, eight groups of 32. Group g reads
// a0 = u32 at qs+4g (four grid indices, one byte each, one per 8 weights) and a1 = u32 at qs+4g+2
// (bits 7l..7l+6: sign index of sub-group l; bits 28..31: group scale ls).
struct BlockIq2Xxs {
  uint16_t d;
  uint16_t qs[32];
};
static_assert(sizeof(BlockIq2Xxs) == 66);

// MXFP4 (gguf.md §5.6): element j < 16 is the low nibble of qs[j], element j + 16 the high nibble;
// x = kvalues[nibble] · e8m0_half(e).
struct BlockMxfp4 {
  uint8_t e;
  uint8_t qs[16];
};
static_assert(sizeof(BlockMxfp4) == 17);

// ggml_e8m0_to_fp32_half: 2^(e-128) as a float (e = 0 -> 2^-128, e = 1 -> 2^-127, subnormal bits).
DSV4_HD float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  return hd::f32_from_bits(bits);
}

}  // namespace dsv4
