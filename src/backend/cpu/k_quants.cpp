// backend/cpu/k_quants.cpp — Q2_K and Q4_K (ggml types 10, 12): dequantize (bit-identical to gguf-py),
// the error-minimising reference quantizers, the scalar vec_dot references, and the TypeKernels
// registration (SIMD dots live in k_quants_avx2.cpp / k_quants_avx512.cpp).
#include "backend/cpu/k_quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/quant.h"
#include "numerics/half.h"
#include "numerics/quant_ref_k.h"

namespace dsv4::cpu {
namespace {

constexpr float kF16Max = 65504.0f;

// ---- dequantize (gguf-py order: dl = d * sc, ml = dmin * m, x = dl * q - ml, all f32) ----
// The arithmetic is numerics/quant_ref_k.h's (shared with CUDA), one super-block at a time.

void dequantize_row_q2_k(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ2_K*>(src);
  for (int64_t b = 0; b < n / 256; ++b) qref::dequantize_block_q2_k(blocks + b, dst + b * 256);
}

void dequantize_row_q4_k(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_K*>(src);
  for (int64_t b = 0; b < n / 256; ++b) qref::dequantize_block_q4_k(blocks + b, dst + b * 256);
}

// ---- quantize ----
//
// Both types model a sub-block of S elements (Q2_K: 16, Q4_K: 32) as x ≈ scale·L − min, L ∈ [0, nmax],
// scale ≥ 0, min ≥ 0, and minimise the weighted squared error Σ w·(x − (scale·L − min))²:
//   1. fit_sub_block: for a sweep of trial inverse scales iscale = (nmax + rmin + rdelta·t) / (xmax −
//      xmin) (xmin = min(0, min x)), quantize L = round(iscale·(x − xmin)), solve the 2×2 weighted
//      least-squares for (scale, −min) given those L (min clamped to ≥ 0), keep the best error.
//   2. super-block: d = max scale / scale_max, dmin = max min / scale_max (scale_max = 15 or 63),
//      stored as f16; per sub-block the integer (sc, m) is chosen among round(scale/d) ± 1 and
//      round(min/dmin) ± 1 by the weighted error with the f16-rounded d/dmin and nearest L.
//   3. every L is the nearest level for the final dl = d·sc, ml = dmin·m (what dequantize uses).
// Weights: w = importance[i] · sqrt(σ² + x²) with an importance vector, else sqrt(σ²) + |x|
// (σ² = mean x² of the super-block) — ggml's choice. Non-finite inputs count as 0.

struct Fit {
  float scale = 0.0f;
  float min = 0.0f;
};

inline int clamp_level(float v, int nmax) {
  const float r = std::nearbyint(v);
  if (!(r > 0.0f)) return 0;
  return r > static_cast<float>(nmax) ? nmax : static_cast<int>(r);
}

Fit fit_sub_block(const float* x, const float* w, int size, int nmax, float rmin, float rdelta, int nstep) {
  float xmin = x[0], xmax = x[0];
  for (int i = 1; i < size; ++i) {
    xmin = std::min(xmin, x[i]);
    xmax = std::max(xmax, x[i]);
  }
  xmin = std::min(xmin, 0.0f);
  Fit best;
  if (!(xmax > xmin)) {  // constant block (all <= 0 and equal, or all zero)
    best.min = -xmin;
    return best;
  }
  double sw = 0;
  for (int i = 0; i < size; ++i) sw += w[i];
  const bool unweighted = !(sw > 0);
  double best_err = 0;
  bool have = false;
  for (int t = -1; t <= nstep; ++t) {
    const float iscale = t < 0 ? static_cast<float>(nmax) / (xmax - xmin)
                               : (static_cast<float>(nmax) + rmin + rdelta * static_cast<float>(t)) / (xmax - xmin);
    double s_w = 0, s_l = 0, s_ll = 0, s_x = 0, s_xl = 0;
    int lv[32];
    for (int i = 0; i < size; ++i) {
      const int l = clamp_level(iscale * (x[i] - xmin), nmax);
      lv[i] = l;
      const double wi = unweighted ? 1.0 : w[i];
      s_w += wi;
      s_l += wi * l;
      s_ll += wi * l * l;
      s_x += wi * x[i];
      s_xl += wi * x[i] * l;
    }
    const double det = s_w * s_ll - s_l * s_l;
    if (!(det > 0)) continue;
    double scale = (s_w * s_xl - s_x * s_l) / det;
    double offset = (s_ll * s_x - s_l * s_xl) / det;  // x ≈ scale·L + offset, offset = −min
    if (offset > 0) {
      offset = 0;
      scale = s_xl / s_ll;
    }
    if (!(scale > 0)) continue;
    double err = 0;
    for (int i = 0; i < size; ++i) {
      const double diff = scale * lv[i] + offset - x[i];
      err += (unweighted ? 1.0 : w[i]) * diff * diff;
    }
    if (!have || err < best_err) {
      have = true;
      best_err = err;
      best.scale = static_cast<float>(scale);
      best.min = static_cast<float>(-offset);
    }
  }
  return best;
}

// Weighted error of a sub-block for final (dl, ml) with nearest levels.
double sub_block_error(const float* x, const float* w, int size, int nmax, float dl, float ml) {
  double err = 0;
  for (int i = 0; i < size; ++i) {
    const int l = dl > 0.0f ? clamp_level((x[i] + ml) / dl, nmax) : 0;
    const double diff = static_cast<double>(dl * static_cast<float>(l) - ml) - x[i];
    err += static_cast<double>(w[i]) * diff * diff;
  }
  return err;
}

// One super-block of 256: fills sc[nsub], m[nsub] (integers ≤ scale_max), d/dmin (f16) and L[256].
void quantize_super_block(const float* src, const float* importance, int sub, int nmax, int scale_max, float rmin,
                          float rdelta, int nstep, int* sc, int* m, uint16_t* d16, uint16_t* dmin16, uint8_t* L) {
  float x[256], w[256];
  double sum2 = 0;
  for (int i = 0; i < 256; ++i) {
    x[i] = std::isfinite(src[i]) ? src[i] : 0.0f;
    sum2 += static_cast<double>(x[i]) * x[i];
  }
  const float sigma2 = static_cast<float>(sum2 / 256);
  const float av = std::sqrt(sigma2);
  for (int i = 0; i < 256; ++i) {
    const float imp = importance != nullptr && std::isfinite(importance[i]) ? std::max(importance[i], 0.0f) : 1.0f;
    w[i] = importance != nullptr ? imp * std::sqrt(sigma2 + x[i] * x[i]) : av + std::fabs(x[i]);
    if (!std::isfinite(w[i])) w[i] = 1.0f;
  }
  const int nsub = 256 / sub;
  Fit fits[16];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int k = 0; k < nsub; ++k) {
    fits[k] = fit_sub_block(x + k * sub, w + k * sub, sub, nmax, rmin, rdelta, nstep);
    max_scale = std::max(max_scale, fits[k].scale);
    max_min = std::max(max_min, fits[k].min);
  }
  const float smax = static_cast<float>(scale_max);
  *d16 = f32_to_f16(std::min(max_scale / smax, kF16Max));
  *dmin16 = f32_to_f16(std::min(max_min / smax, kF16Max));
  const float d = f16_to_f32(*d16), dmin = f16_to_f32(*dmin16);
  for (int k = 0; k < nsub; ++k) {
    const int sc0 = d > 0.0f ? clamp_level(fits[k].scale / d, scale_max) : 0;
    const int m0 = dmin > 0.0f ? clamp_level(fits[k].min / dmin, scale_max) : 0;
    int best_sc = sc0, best_m = m0;
    double best_err = -1;
    for (int ds = -1; ds <= 1; ++ds) {
      for (int dm = -1; dm <= 1; ++dm) {
        const int s = sc0 + ds, mm = m0 + dm;
        if (s < 0 || s > scale_max || mm < 0 || mm > scale_max) continue;
        const double err = sub_block_error(x + k * sub, w + k * sub, sub, nmax, d * static_cast<float>(s),
                                           dmin * static_cast<float>(mm));
        if (best_err < 0 || err < best_err) {
          best_err = err;
          best_sc = s;
          best_m = mm;
        }
      }
    }
    sc[k] = best_sc;
    m[k] = best_m;
    const float dl = d * static_cast<float>(best_sc), ml = dmin * static_cast<float>(best_m);
    for (int i = 0; i < sub; ++i)
      L[k * sub + i] = static_cast<uint8_t>(dl > 0.0f ? clamp_level((x[k * sub + i] + ml) / dl, nmax) : 0);
  }
}

void quantize_row_q2_k(const float* src, void* dst, int64_t n, const float* importance) {
  auto* blocks = static_cast<BlockQ2_K*>(dst);
  for (int64_t b = 0; b < n / 256; ++b) {
    int sc[16], m[16];
    uint8_t L[256];
    BlockQ2_K blk;
    quantize_super_block(src + b * 256, importance != nullptr ? importance + b * 256 : nullptr, 16, 3, 15, -0.5f,
                         0.1f, 15, sc, m, &blk.d, &blk.dmin, L);
    for (int k = 0; k < 16; ++k) blk.scales[k] = static_cast<uint8_t>(sc[k] | m[k] << 4);
    std::memset(blk.qs, 0, sizeof(blk.qs));
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, j = (e / 32) % 4, l = e % 32;
      blk.qs[32 * h + l] = static_cast<uint8_t>(blk.qs[32 * h + l] | L[e] << (2 * j));
    }
    std::memcpy(blocks + b, &blk, sizeof(blk));
  }
}

void quantize_row_q4_k(const float* src, void* dst, int64_t n, const float* importance) {
  auto* blocks = static_cast<BlockQ4_K*>(dst);
  for (int64_t b = 0; b < n / 256; ++b) {
    int sc[16], m[16];
    uint8_t L[256];
    BlockQ4_K blk;
    quantize_super_block(src + b * 256, importance != nullptr ? importance + b * 256 : nullptr, 32, 15, 63, -1.0f,
                         0.1f, 20, sc, m, &blk.d, &blk.dmin, L);
    for (int j = 0; j < 4; ++j) {
      blk.scales[j] = static_cast<uint8_t>(sc[j] | (sc[j + 4] >> 4) << 6);
      blk.scales[j + 4] = static_cast<uint8_t>(m[j] | (m[j + 4] >> 4) << 6);
      blk.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) blk.qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | L[64 * c + 32 + l] << 4);
    std::memcpy(blocks + b, &blk, sizeof(blk));
  }
}

const TypeKernels kKQuantKernels[] = {
    {
        .type = TensorType::kQ2_K,
        .act = ActFormat::kQ8_K,
        .dequantize_row = dequantize_row_q2_k,
        .quantize_row = quantize_row_q2_k,
        .vec_dot = {vec_dot_q2_k_scalar, vec_dot_q2_k_avx2, vec_dot_q2_k_avx512},
        .vec_dot_rows = {nullptr, nullptr, vec_dot_rows_q2_k_avx512},
        .vec_dot_tile = {nullptr, vec_dot_tile_q2_k_avx2},
        .tile_cols = {0, kQ2kAvx2TileCols},
        .amx = {q2_k_amx_group_bytes, q2_k_amx_pack_group, q2_k_amx_matmul},
    },
    {
        .type = TensorType::kQ4_K,
        .act = ActFormat::kQ8_K,
        .dequantize_row = dequantize_row_q4_k,
        .quantize_row = quantize_row_q4_k,
        .vec_dot = {vec_dot_q4_k_scalar, vec_dot_q4_k_avx2, vec_dot_q4_k_avx512},
        .vec_dot_rows = {nullptr, nullptr, vec_dot_rows_q4_k_avx512},
    },
};

}  // namespace

// ACCUMULATION ORDERS: numerics/quant_ref_k.h (dot_block_q2_k / dot_block_q4_k per super-block,
// partial[b % 32], Partials32 tree); every SIMD level reproduces them bit for bit. The scalar
// references are those shared functions.
float vec_dot_q2_k_scalar(int64_t n, const void* w, const void* act) {
  return qref::vec_dot_q2_k(n, static_cast<const BlockQ2_K*>(w), static_cast<const BlockQ8_K*>(act));
}

float vec_dot_q4_k_scalar(int64_t n, const void* w, const void* act) {
  return qref::vec_dot_q4_k(n, static_cast<const BlockQ4_K*>(w), static_cast<const BlockQ8_K*>(act));
}

std::span<const TypeKernels> k_quant_type_kernels() { return kKQuantKernels; }

}  // namespace dsv4::cpu
