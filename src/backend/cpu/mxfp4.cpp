// backend/cpu/mxfp4.cpp — MXFP4 (type 39): dequantize, reference quantizer, scalar vec_dot, registration.
//
// Dequantize matches gguf-py's MXFP4.dequantize_blocks: y = e8m0_half(e) * (float)kvalues[nibble].
// Quantize: per 32-block the shared exponent from amax as ggml/gguf-py (e = floor(log2 amax) - 2 + 127),
// also trying e-1 and e+1 and keeping the lowest (importance-)weighted squared error; each element
// takes the nearest kvalue (ties -> lowest index, like numpy argmin). Non-finite inputs count as 0.
#include <cmath>
#include <cstring>

#include "backend/cpu/mxfp4.h"
#include "backend/cpu/quant.h"
#include "numerics/quant_ref_mxfp4.h"

namespace dsv4::cpu {
namespace {

// The arithmetic is numerics/quant_ref_mxfp4.h's (shared with CUDA), one block at a time.
void mxfp4_dequantize_row(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockMxfp4*>(src);
  for (int64_t b = 0; b < n / 32; ++b) qref::dequantize_block_mxfp4(blocks + b, dst + 32 * b);
}

float sanitize(float v) { return std::isfinite(v) ? v : 0.0f; }

// Nearest kvalue index for x at scale d (ties -> lowest index); returns the index.
int nearest_index(float x, float d) {
  int best = 0;
  float best_err = std::fabs(d * static_cast<float>(kMxfp4Values[0]) - x);
  for (int k = 1; k < 16; ++k) {
    const float err = std::fabs(d * static_cast<float>(kMxfp4Values[k]) - x);
    if (err < best_err) { best_err = err; best = k; }
  }
  return best;
}

// Quantizes one 32-block at exponent e into idx; returns the weighted squared error (f64).
double quantize_block_at(const float* x, const float* w, int e, uint8_t* idx) {
  const float d = e8m0_half(static_cast<uint8_t>(e));
  double err = 0.0;
  for (int j = 0; j < 32; ++j) {
    idx[j] = static_cast<uint8_t>(nearest_index(x[j], d));
    const double diff = static_cast<double>(x[j]) - static_cast<double>(d) * kMxfp4Values[idx[j]];
    err += static_cast<double>(w[j]) * diff * diff;
  }
  return err;
}

void mxfp4_quantize_row(const float* src, void* dst, int64_t n, const float* importance) {
  auto* blocks = static_cast<BlockMxfp4*>(dst);
  for (int64_t b = 0; b < n / 32; ++b) {
    float x[32], w[32];
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      x[j] = sanitize(src[32 * b + j]);
      const float imp = importance ? importance[32 * b + j] : 1.0f;
      w[j] = (std::isfinite(imp) && imp > 0.0f) ? imp : 0.0f;
      amax = std::fmax(amax, std::fabs(x[j]));
    }
    int e0 = 0;
    if (amax > 0.0f) {
      int ex = 0;
      std::frexp(amax, &ex);  // amax = m * 2^ex, m in [0.5, 1): floor(log2 amax) = ex - 1
      e0 = ex - 1 - 2 + 127;
      if (e0 < 0) e0 = 0;
      if (e0 > 254) e0 = 254;
    }
    uint8_t best_idx[32], idx[32];
    double best_err = quantize_block_at(x, w, e0, best_idx);
    int best_e = e0;
    for (int e : {e0 - 1, e0 + 1}) {
      if (e < 0 || e > 254 || amax == 0.0f) continue;
      const double err = quantize_block_at(x, w, e, idx);
      if (err < best_err) {
        best_err = err;
        best_e = e;
        std::memcpy(best_idx, idx, 32);
      }
    }
    blocks[b].e = static_cast<uint8_t>(best_e);
    for (int j = 0; j < 16; ++j) blocks[b].qs[j] = static_cast<uint8_t>(best_idx[j] | best_idx[j + 16] << 4);
  }
}

}  // namespace

// Order: see mxfp4.h / numerics/quant_ref_mxfp4.h (exact int32 block dot; v = (e8m0_half(e) * d_x) *
// (float)isum; partial[b % 32]; Partials32 tree). The scalar reference is the shared function.
float mxfp4_vec_dot_scalar(int64_t n, const void* w, const void* act) {
  return qref::vec_dot_mxfp4(n, static_cast<const BlockMxfp4*>(w), static_cast<const BlockQ8_0Act*>(act));
}

// mxfp4_avx2.cpp's prepared row: the blocks, then int32 and float arrays of nb rounded up to 8.
int64_t mxfp4_prepared_act_bytes(int64_t n) {
  const int64_t nb = n / 32, nb8 = (nb + 7) / 8 * 8;
  return (nb * static_cast<int64_t>(sizeof(BlockQ8_0Act)) + 31) / 32 * 32 + 8 * nb8;
}

std::span<const TypeKernels> mxfp4_type_kernels() {
  static const TypeKernels table[] = {{
      .type = TensorType::kMXFP4,
      .act = ActFormat::kQ8_0,
      .dequantize_row = mxfp4_dequantize_row,
      .quantize_row = mxfp4_quantize_row,
      .vec_dot = {mxfp4_vec_dot_scalar, mxfp4_vec_dot_avx2, mxfp4_vec_dot_avx512, mxfp4_vec_dot_avx512vbmi},
      .vec_dot_rows = {nullptr, mxfp4_vec_dot_rows_avx2, mxfp4_vec_dot_rows_avx512, mxfp4_vec_dot_rows_avx512vbmi},
      .prepared_act_bytes = mxfp4_prepared_act_bytes,
      .prepare_act = {nullptr, mxfp4_prepare_act_avx2},
      .vec_dot_rows_prepared = {nullptr, mxfp4_vec_dot_rows_prepared_avx2},
      .vec_dot_tile = {nullptr, mxfp4_vec_dot_tile8_avx2},
      .tile_rows = {0, 8},
      .tile_cols = {0, kMxfp4Avx2TileCols},
  }};
  return table;
}

}  // namespace dsv4::cpu
