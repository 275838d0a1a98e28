// backend/cpu/iq2_xxs.cpp — IQ2_XXS (type 16): dequantize, reference quantizer, scalar vec_dot, registration.
//
// Dequantize matches gguf-py's IQ2_XXS.dequantize_blocks operation for operation:
//   db = (d * (0.5f + (float)ls)) * 0.25f;  y = (db * (float)grid_byte) * (±1.0f).
// Quantize (own code, in the spirit of ggml's quantize_row_iq2_xxs_impl), per 32-weight group:
//   1. signs from the data; a sub-group of 8 with an odd number of negatives flips the sign of the
//      element with the smallest weight·|x| (its target becomes −|x|);
//   2. scale search: candidate scales amax/v for v = 30, 32, ..., 52; for each, every sub-group takes
//      its weighted-nearest grid entry (exact: the per-element nearest lattice point when it is on the
//      grid, else an exhaustive search over the 256 entries); then two least-squares refinements
//      s = Σwtg / Σwg² of the best candidate;
//   3. super-block: d = f16(4·max_s / 15.5); ls_g = round(4·s_g/d − 0.5) with ls_g ± 1 tried, the grid
//      entries re-chosen at the exact dequantized scale, lowest weighted error kept.
// Weights: importance[i] when given (non-finite/negative -> 0), else σ² + x² (σ² = mean x² of the
// super-block); a group whose weights are all zero uses weight 1. Non-finite inputs count as 0. Deterministic (no data-dependent randomness).
#include <array>
#include <cmath>
#include <cstring>

#include "backend/cpu/iq2_xxs.h"
#include "backend/cpu/iq2_xxs_tables.h"
#include "backend/cpu/quant.h"
#include "numerics/half.h"
#include "numerics/quant_ref_iq2_xxs.h"

namespace dsv4::cpu {
namespace {

// The arithmetic is numerics/quant_ref_iq2_xxs.h's (shared with CUDA), one super-block at a time.
void iq2_xxs_dequantize_row(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockIq2Xxs*>(src);
  for (int64_t b = 0; b < n / 256; ++b)
    qref::dequantize_block_iq2_xxs(blocks + b, dst + 256 * b, qref::kIq2xxsHostTables);
}

// ---- quantizer -------------------------------------------------------------------------------------

constexpr float kLevel[3] = {8.0f, 25.0f, 43.0f};

struct GridIndex {
  uint8_t level[256][8];   // level (0, 1, 2) of element j of entry k
  int16_t map[6561];       // base-3 code Σ level_j·3^j -> entry, or -1
};

const GridIndex& grid_index() {
  static const GridIndex gi = [] {
    GridIndex t{};
    for (auto& m : t.map) m = -1;
    for (int k = 0; k < 256; ++k) {
      int code = 0, p3 = 1;
      for (int j = 0; j < 8; ++j) {
        const unsigned v = (iq2xxs_grid[k] >> (8 * j)) & 0xff;
        const uint8_t lv = v == 8 ? 0 : v == 25 ? 1 : 2;
        t.level[k][j] = lv;
        code += lv * p3;
        p3 *= 3;
      }
      t.map[code] = static_cast<int16_t>(k);
    }
    return t;
  }();
  return gi;
}

// Best grid entry for targets t (magnitudes, possibly negative after a parity flip) at scale s.
// Writes the weighted squared error to *err.
int best_grid(const GridIndex& gi, const float* t, const float* w, float s, double* err) {
  double cost[8][3];
  int code = 0, p3 = 1;
  for (int j = 0; j < 8; ++j) {
    int nearest = 0;
    for (int L = 0; L < 3; ++L) {
      const double diff = static_cast<double>(s) * kLevel[L] - t[j];
      cost[j][L] = static_cast<double>(w[j]) * diff * diff;
      const double dn = static_cast<double>(s) * kLevel[nearest] - t[j];
      if (std::fabs(diff) < std::fabs(dn)) nearest = L;
    }
    code += nearest * p3;
    p3 *= 3;
  }
  const int hit = gi.map[code];
  if (hit >= 0) {
    double e = 0.0;
    for (int j = 0; j < 8; ++j) e += cost[j][gi.level[hit][j]];
    *err = e;
    return hit;
  }
  int best = 0;
  double best_err = INFINITY;
  for (int k = 0; k < 256; ++k) {
    double e = 0.0;
    for (int j = 0; j < 8; ++j) e += cost[j][gi.level[k][j]];
    if (e < best_err) { best_err = e; best = k; }
  }
  *err = best_err;
  return best;
}

// Grid entries for the 4 sub-groups of a 32-group at scale s; returns the total error.
double assign_group(const GridIndex& gi, const float* t, const float* w, float s, int* idx) {
  double total = 0.0;
  for (int l = 0; l < 4; ++l) {
    double e = 0.0;
    idx[l] = best_grid(gi, t + 8 * l, w + 8 * l, s, &e);
    total += e;
  }
  return total;
}

struct GroupPlan {
  float t[32];      // signed magnitude targets
  float w[32];      // weights
  uint8_t neg[4];   // sign masks (even popcount)
  float scale = 0;  // continuous scale (grid units)
  bool zero = true;
};

void plan_group(const GridIndex& gi, const float* x, const float* w_in, GroupPlan& p) {
  float wsum = 0.0f, amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    p.w[j] = w_in[j];
    wsum += p.w[j];
    p.t[j] = std::fabs(x[j]);
    amax = std::fmax(amax, p.t[j]);
  }
  p.zero = amax == 0.0f;
  if (p.zero) {
    for (auto& m : p.neg) m = 0;
    p.scale = 0.0f;
    return;
  }
  if (!(wsum > 0.0f))
    for (float& v : p.w) v = 1.0f;
  for (int l = 0; l < 4; ++l) {
    uint8_t m = 0;
    for (int j = 0; j < 8; ++j)
      if (x[8 * l + j] < 0.0f) m = static_cast<uint8_t>(m | 1u << j);
    if (__builtin_popcount(m) & 1) {
      int jmin = 0;
      float cmin = INFINITY;
      for (int j = 0; j < 8; ++j) {
        const float c = p.w[8 * l + j] * p.t[8 * l + j];
        if (c < cmin) { cmin = c; jmin = j; }
      }
      m = static_cast<uint8_t>(m ^ 1u << jmin);
      p.t[8 * l + jmin] = -p.t[8 * l + jmin];
    }
    p.neg[l] = m;
  }
  int idx[4];
  double best_err = INFINITY;
  float best_s = amax / 43.0f;
  for (int v = 30; v <= 52; v += 2) {
    const float s = amax / static_cast<float>(v);
    const double e = assign_group(gi, p.t, p.w, s, idx);
    if (e < best_err) { best_err = e; best_s = s; }
  }
  for (int it = 0; it < 2; ++it) {
    assign_group(gi, p.t, p.w, best_s, idx);
    double num = 0.0, den = 0.0;
    for (int l = 0; l < 4; ++l)
      for (int j = 0; j < 8; ++j) {
        const double g = kLevel[gi.level[idx[l]][j]];
        num += static_cast<double>(p.w[8 * l + j]) * p.t[8 * l + j] * g;
        den += static_cast<double>(p.w[8 * l + j]) * g * g;
      }
    if (!(den > 0.0) || !(num > 0.0)) break;
    const float s = static_cast<float>(num / den);
    const double e = assign_group(gi, p.t, p.w, s, idx);
    if (!(e < best_err)) break;
    best_err = e;
    best_s = s;
  }
  p.scale = best_s;
}

void quantize_superblock(const GridIndex& gi, const float* src, const float* importance, BlockIq2Xxs& out) {
  float x[256], w[256];
  float sigma2 = 0.0f;
  for (int i = 0; i < 256; ++i) {
    x[i] = std::isfinite(src[i]) ? src[i] : 0.0f;
    sigma2 += x[i] * x[i];
  }
  sigma2 = sigma2 / 256.0f;
  for (int i = 0; i < 256; ++i) {
    if (importance) {
      const float v = importance[i];
      w[i] = (std::isfinite(v) && v > 0.0f) ? v : 0.0f;
    } else {
      w[i] = sigma2 + x[i] * x[i];
    }
  }
  GroupPlan plan[8];
  float smax = 0.0f;
  for (int g = 0; g < 8; ++g) {
    plan_group(gi, x + 32 * g, w + 32 * g, plan[g]);
    smax = std::fmax(smax, plan[g].scale);
  }
  std::memset(&out, 0, sizeof(out));
  const uint16_t dh = f32_to_f16(4.0f * smax / 15.5f);
  const float d = f16_to_f32(dh);
  if (!(d > 0.0f) || !std::isfinite(d)) return;  // all-zero (or underflowing) block: d = 0
  out.d = dh;
  for (int g = 0; g < 8; ++g) {
    const GroupPlan& p = plan[g];
    uint32_t a0 = 0, a1 = 0;
    if (!p.zero) {
      const int l0 = static_cast<int>(std::lround(4.0f * p.scale / d - 0.5f));
      double best_err = INFINITY;
      int best_ls = 0, best_idx[4] = {0, 0, 0, 0}, idx[4];
      for (int ls = l0 - 1; ls <= l0 + 1; ++ls) {
        if (ls < 0 || ls > 15) continue;
        const float s = (d * (0.5f + static_cast<float>(ls))) * 0.25f;
        const double e = assign_group(gi, p.t, p.w, s, idx);
        if (e < best_err) {
          best_err = e;
          best_ls = ls;
          std::memcpy(best_idx, idx, sizeof(idx));
        }
      }
      if (!(best_err < INFINITY)) {  // l0 far outside [0, 15] cannot happen, but stay safe
        best_ls = l0 < 0 ? 0 : 15;
        assign_group(gi, p.t, p.w, (d * (0.5f + static_cast<float>(best_ls))) * 0.25f, best_idx);
      }
      for (int l = 0; l < 4; ++l) {
        a0 |= static_cast<uint32_t>(best_idx[l]) << (8 * l);
        a1 |= static_cast<uint32_t>(p.neg[l] & 127) << (7 * l);
      }
      a1 |= static_cast<uint32_t>(best_ls) << 28;
    }
    const uint32_t a[2] = {a0, a1};
    std::memcpy(out.qs + 4 * g, a, 8);
  }
}

void iq2_xxs_quantize_row(const float* src, void* dst, int64_t n, const float* importance) {
  const GridIndex& gi = grid_index();
  auto* blocks = static_cast<BlockIq2Xxs*>(dst);
  for (int64_t b = 0; b < n / 256; ++b)
    quantize_superblock(gi, src + 256 * b, importance ? importance + 256 * b : nullptr, blocks[b]);
}

}  // namespace

// Order: see iq2_xxs.h / numerics/quant_ref_iq2_xxs.h (exact int32 super-block dot with the (2·ls+1)
// group factors; v = ((d_w * d_x) * (float)isum) * 0.125f; partial[b % 32]; Partials32 tree). The
// scalar reference is the shared function.
float iq2_xxs_vec_dot_scalar(int64_t n, const void* w, const void* act) {
  return qref::vec_dot_iq2_xxs(n, static_cast<const BlockIq2Xxs*>(w), static_cast<const BlockQ8_K*>(act),
                               qref::kIq2xxsHostTables);
}

std::span<const TypeKernels> iq2_xxs_type_kernels() {
  static const TypeKernels table[] = {{
      .type = TensorType::kIQ2_XXS,
      .act = ActFormat::kQ8_K,
      .dequantize_row = iq2_xxs_dequantize_row,
      .quantize_row = iq2_xxs_quantize_row,
      .vec_dot = {iq2_xxs_vec_dot_scalar, iq2_xxs_vec_dot_avx2, nullptr, iq2_xxs_vec_dot_avx512vbmi},
      .vec_dot_rows = {nullptr, iq2_xxs_vec_dot_rows_avx2, nullptr, iq2_xxs_vec_dot_rows_avx512vbmi},
      .prepared_act_bytes = iq2_xxs_prepared_act_bytes,
      .prepare_act = {nullptr, iq2_xxs_prepare_act_avx2, nullptr, iq2_xxs_prepare_act_avx512vbmi},
      .vec_dot_rows_prepared = {nullptr, iq2_xxs_vec_dot_rows_prepared_avx2, nullptr, iq2_xxs_vec_dot_rows_prepared_avx512vbmi},
      .vec_dot_tile = {nullptr, iq2_xxs_vec_dot_tile_prepared_avx2, nullptr, iq2_xxs_vec_dot_tile_prepared_avx512vbmi},
      .tile_cols = {0, kIq2XxsAvx2TileCols, 0, 0},
  }};
  return table;
}

}  // namespace dsv4::cpu
