// backend/cpu/cpu_ops.cpp — scalar reference arithmetic of backend/ops.h on the CPU.
#include "backend/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/accumulate.h"
#include "backend/cpu/det_math.h"

namespace dsv4::cpu {
namespace {

// Σ x[i] over n values: 32 interleaved partials + fixed tree (accumulate.h).
float sum32(const float* x, int64_t n) {
  Partials32 acc;
  for (int64_t i = 0; i < n; ++i) acc.p[i & 31] += x[i];
  return acc.reduce();
}

}  // namespace

CpuOps::CpuOps(ThreadPool* pool, SimdLevel level, bool amx) {
  ctx_.pool = pool;
  ctx_.max_level = level;
  ctx_.use_amx = amx;  // matmul.h uses_amx() also checks the level and the CPU/OS
  const TypeKernels& f32 = *type_kernels(TensorType::kF32);
  dot_f32_ = select_vec_dot(f32, level);
  tile_f32_ = f32.vec_dot_tile[static_cast<int>(effective_simd_level(f32, level))];
  fma_axpy_ = select_fma_axpy(level);
  weighted_rows_ = has_avx512(level) ? weighted_rows_avx512 : nullptr;
  swiglu_clamp_ = select_swiglu_clamp(level);
}

Status CpuOps::matmul(const backend::Weight& w, const float* x, int64_t n_tokens, float* y) {
  return cpu::matmul(ctx_, w.type, w.data, w.ne[1], w.ne[0], x, n_tokens, y);
}

Status CpuOps::matmul_expert(const backend::Weight& w, int64_t e, const float* x, int64_t n_tokens, float* y) {
  if (e < 0 || e >= w.ne[2]) return out_of_range("matmul_expert: expert " + std::to_string(e) + " out of range");
  const uint8_t* base = static_cast<const uint8_t*>(w.data) + e * w.ne[1] * w.row_bytes();
  return cpu::matmul(ctx_, w.type, base, w.ne[1], w.ne[0], x, n_tokens, y);
}

Status CpuOps::matmul_batch(std::span<const backend::MatmulJob> jobs) {
  batch_.clear();
  for (const backend::MatmulJob& j : jobs) {
    if (j.w.n_dims > 2 && j.w.ne[2] != 1) return invalid_argument("matmul_batch: weights must be 2-D views");
    batch_.push_back({j.w.type, j.w.data, j.w.ne[1], j.w.ne[0], j.x, j.n_tokens, j.y, j.x_stride, j.y_stride});
  }
  return cpu::matmul_batch(ctx_, batch_);
}

Status CpuOps::get_rows(const backend::Weight& w, const int32_t* ids, int64_t n, float* out) {
  if (w.type == TensorType::kI32) {
    for (int64_t t = 0; t < n; ++t) {
      const int32_t* src = static_cast<const int32_t*>(w.data) + static_cast<int64_t>(ids[t]) * w.ne[0];
      for (int64_t i = 0; i < w.ne[0]; ++i) out[t * w.ne[0] + i] = static_cast<float>(src[i]);
    }
    return ok_status();
  }
  const TypeKernels* k = type_kernels(w.type);
  if (k == nullptr) return unsupported("get_rows: no kernels for " + std::string(tensor_type_name(w.type)));
  for (int64_t t = 0; t < n; ++t) {
    if (ids[t] < 0 || ids[t] >= w.ne[1]) return out_of_range("get_rows: row id " + std::to_string(ids[t]) + " out of range");
    k->dequantize_row(static_cast<const uint8_t*>(w.data) + ids[t] * w.row_bytes(), out + t * w.ne[0], w.ne[0]);
  }
  return ok_status();
}

Status CpuOps::dequantize(const backend::Weight& w, float* out) {
  const int64_t rows = w.ne[1] * w.ne[2] * w.ne[3];
  if (w.type == TensorType::kI32) {
    for (int64_t i = 0; i < rows * w.ne[0]; ++i) out[i] = static_cast<float>(static_cast<const int32_t*>(w.data)[i]);
    return ok_status();
  }
  const TypeKernels* k = type_kernels(w.type);
  if (k == nullptr) return unsupported("dequantize: no kernels for " + std::string(tensor_type_name(w.type)));
  for (int64_t r = 0; r < rows; ++r)
    k->dequantize_row(static_cast<const uint8_t*>(w.data) + r * w.row_bytes(), out + r * w.ne[0], w.ne[0]);
  return ok_status();
}

void CpuOps::rms_norm(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float ss = dot_f32_(n, xr, xr);
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    if (w != nullptr) {
      for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] * inv) * w[i];
    } else {
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv;
    }
  }
}

void CpuOps::rope_tail(float* x, int64_t rows, int64_t row_len, int64_t rows_per_pos, const int64_t* positions,
                       int64_t n_rot, const float* freqs, bool inverse) {
  const int64_t half = n_rot / 2, n0 = row_len - n_rot;
  std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
  int64_t cached_pos = -1;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = positions[r / rows_per_pos];
    if (pos != cached_pos) {
      for (int64_t k = 0; k < half; ++k) {
        const float angle = static_cast<float>(pos) * freqs[k];
        double sd, cd;
        det::sincos(static_cast<double>(angle), &sd, &cd);
        c[static_cast<size_t>(k)] = static_cast<float>(cd);
        s[static_cast<size_t>(k)] = inverse ? -static_cast<float>(sd) : static_cast<float>(sd);
      }
      cached_pos = pos;
    }
    float* t = x + r * row_len + n0;
    for (int64_t k = 0; k < half; ++k) {
      const float x0 = t[2 * k], x1 = t[2 * k + 1];
      const float ck = c[static_cast<size_t>(k)], sk = s[static_cast<size_t>(k)];
      t[2 * k] = x0 * ck - x1 * sk;
      t[2 * k + 1] = x0 * sk + x1 * ck;
    }
  }
}

void CpuOps::hc_pre(const float* mix, const float* scale3, const float* base, int64_t n, int64_t hc, int64_t D,
                    float eps, int64_t iters, const float* X, float* x, float* post, float* comb) {
  const int64_t n_mix = (2 + hc) * hc;
  std::vector<float> pre(static_cast<size_t>(hc));
  for (int64_t t = 0; t < n; ++t) {
    const float* m = mix + t * n_mix;
    float* C = comb + t * hc * hc;
    for (int64_t i = 0; i < hc; ++i) {
      pre[static_cast<size_t>(i)] = det::sigmoid(m[i] * scale3[0] + base[i]) + eps;
      post[t * hc + i] = 2.0f * det::sigmoid(m[hc + i] * scale3[1] + base[hc + i]);
    }
    // Sinkhorn: row softmax (+eps), column norm, then (iters − 1) × (row norm, column norm).
    for (int64_t i = 0; i < hc; ++i) {
      float* row = C + i * hc;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < hc; ++j) {
        row[j] = m[2 * hc + i * hc + j] * scale3[2] + base[2 * hc + i * hc + j];
        mx = std::max(mx, row[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < hc; ++j) {
        row[j] = det::exp(row[j] - mx);
        sum += row[j];
      }
      for (int64_t j = 0; j < hc; ++j) row[j] = row[j] / sum + eps;
    }
    auto col_norm = [&] {
      for (int64_t j = 0; j < hc; ++j) {
        float s = 0.0f;
        for (int64_t i = 0; i < hc; ++i) s += C[i * hc + j];
        const float den = s + eps;
        for (int64_t i = 0; i < hc; ++i) C[i * hc + j] = C[i * hc + j] / den;
      }
    };
    col_norm();
    for (int64_t it = 1; it < iters; ++it) {
      for (int64_t i = 0; i < hc; ++i) {
        float s = 0.0f;
        for (int64_t j = 0; j < hc; ++j) s += C[i * hc + j];
        const float den = s + eps;
        for (int64_t j = 0; j < hc; ++j) C[i * hc + j] = C[i * hc + j] / den;
      }
      col_norm();
    }
    // Collapse: x = Σ_i pre_i · X[i] (i ascending, fma chain).
    const float* Xt = X + t * hc * D;
    float* xt = x + t * D;
    std::fill(xt, xt + D, 0.0f);
    for (int64_t i = 0; i < hc; ++i) fma_axpy_(xt, Xt + i * D, pre[static_cast<size_t>(i)], D);
  }
}

void CpuOps::hc_post(const float* X, const float* y, const float* post, const float* comb, int64_t n, int64_t hc,
                     int64_t D, float* X_out) {
  for (int64_t t = 0; t < n; ++t) {
    const float* Xt = X + t * hc * D;
    const float* C = comb + t * hc * hc;
    for (int64_t j = 0; j < hc; ++j) {
      float* out = X_out + t * hc * D + j * D;
      const float pj = post[t * hc + j];
      for (int64_t c = 0; c < D; ++c) out[c] = pj * y[t * D + c];
      for (int64_t i = 0; i < hc; ++i) fma_axpy_(out, Xt + i * D, C[i * hc + j], D);
    }
  }
}

void CpuOps::hc_head(const float* mix, float scale, const float* base, int64_t n, int64_t hc, int64_t D, float eps,
                     const float* X, float* y) {
  std::vector<float> pre(static_cast<size_t>(hc));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < hc; ++i) pre[static_cast<size_t>(i)] = det::sigmoid(mix[t * hc + i] * scale + base[i]) + eps;
    float* yt = y + t * D;
    std::fill(yt, yt + D, 0.0f);
    for (int64_t i = 0; i < hc; ++i) fma_axpy_(yt, X + t * hc * D + i * D, pre[static_cast<size_t>(i)], D);
  }
}

void CpuOps::add_position_bias(float* z, int64_t n, int64_t width, const float* ape, int64_t ratio,
                               const int64_t* positions) {
  for (int64_t t = 0; t < n; ++t) {
    const float* b = ape + (positions[t] % ratio) * width;
    for (int64_t c = 0; c < width; ++c) z[t * width + c] += b[c];
  }
}

void CpuOps::compress_pool(const float* a, const float* z, int64_t row_stride, int64_t n_entries, int64_t n_cand,
                           const int64_t* cand_row, const int64_t* cand_col, int64_t d, float* out) {
  std::vector<float> w(static_cast<size_t>(n_cand));
  for (int64_t e = 0; e < n_entries; ++e) {
    const int64_t* rows = cand_row + e * n_cand;
    const int64_t* cols = cand_col + e * n_cand;
    for (int64_t j = 0; j < d; ++j) {
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t c = 0; c < n_cand; ++c)
        if (rows[c] >= 0) mx = std::max(mx, z[rows[c] * row_stride + cols[c] + j]);
      for (int64_t c = 0; c < n_cand; ++c)
        w[static_cast<size_t>(c)] = rows[c] >= 0 ? det::exp(z[rows[c] * row_stride + cols[c] + j] - mx) : 0.0f;
      const float den = sum32(w.data(), n_cand);
      float acc = 0.0f;
      for (int64_t c = 0; c < n_cand; ++c)
        if (rows[c] >= 0) acc = std::fma(w[static_cast<size_t>(c)], a[rows[c] * row_stride + cols[c] + j], acc);
      out[e * d + j] = acc / den;
    }
  }
}

void CpuOps::indexer_select(const float* qI, const float* g, int64_t n, int64_t n_heads, int64_t head_dim,
                            const float* keys, const int64_t* visible, int64_t top_k, backend::KeySets& sets) {
  if (sets.comp_offset.empty()) sets.comp_offset.push_back(0);
  std::vector<float> score;
  std::vector<int64_t> order;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t nv = visible[t];
    if (nv <= top_k) {
      for (int64_t w = 0; w < nv; ++w) sets.comp_index.push_back(w);
    } else {
      score.assign(static_cast<size_t>(nv), 0.0f);
      for (int64_t w = 0; w < nv; ++w) {
        float s = 0.0f;
        for (int64_t h = 0; h < n_heads; ++h) {
          const float dot = dot_f32_(head_dim, qI + (t * n_heads + h) * head_dim, keys + w * head_dim);
          s = std::fma(g[t * n_heads + h], dot > 0.0f ? dot : 0.0f, s);
        }
        score[static_cast<size_t>(w)] = s;
      }
      order.resize(static_cast<size_t>(nv));
      for (int64_t w = 0; w < nv; ++w) order[static_cast<size_t>(w)] = w;
      std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int64_t x, int64_t y) {
        const float sx = score[static_cast<size_t>(x)], sy = score[static_cast<size_t>(y)];
        return sx > sy || (sx == sy && x < y);
      });
      std::sort(order.begin(), order.begin() + top_k);
      for (int64_t i = 0; i < top_k; ++i) sets.comp_index.push_back(order[static_cast<size_t>(i)]);
    }
    sets.comp_offset.push_back(static_cast<int64_t>(sets.comp_index.size()));
  }
}

void CpuOps::attention(const float* q, int64_t n, int64_t H, int64_t d, const float* raw, const float* comp,
                       const backend::KeySets& sets, const float* sinks, float scale, float* o) {
  // Per query token t (all H heads share its keys): scores p[h][j] = dot(q_h, key_j) · scale, then per
  // head the softmax with its sink and o_h = Σ_j p[h][j] · key_j / den. Each score is the F32 vec_dot
  // (dot_f32_ or the tile form, the same bits) and each o_h element the same fma sequence over j as one
  // fma_axpy per key (vec_ops.h weighted_rows): only key and query loads are shared between heads.
  ctx_.pool->parallel_for(n, [&](int64_t b, int64_t e, int) {
    std::vector<float> p, den(static_cast<size_t>(H));
    std::vector<const float*> keys;
    for (int64_t t = b; t < e; ++t) {
      keys.clear();
      for (int64_t r = sets.raw_begin[static_cast<size_t>(t)]; r < sets.raw_end[static_cast<size_t>(t)]; ++r)
        keys.push_back(raw + r * d);
      for (int64_t i = sets.comp_offset[static_cast<size_t>(t)]; i < sets.comp_offset[static_cast<size_t>(t) + 1]; ++i)
        keys.push_back(comp + sets.comp_index[static_cast<size_t>(i)] * d);
      const int64_t nk = static_cast<int64_t>(keys.size());
      const float* qt = q + t * H * d;
      p.resize(static_cast<size_t>(H * nk));
      score_keys(qt, H, d, keys, p.data());
      float* ot = o + t * H * d;
      std::fill(ot, ot + H * d, 0.0f);
      for (int64_t h = 0; h < H; ++h) {
        float* ph = p.data() + h * nk;
        float mx = sinks[h];
        for (int64_t j = 0; j < nk; ++j) {
          ph[j] = ph[j] * scale;
          mx = std::max(mx, ph[j]);
        }
        for (int64_t j = 0; j < nk; ++j) ph[j] = det::exp(ph[j] - mx);
        den[static_cast<size_t>(h)] = det::exp(sinks[h] - mx) + sum32(ph, nk);
      }
      if (weighted_rows_ != nullptr) {
        weighted_rows_(ot, d, H, keys.data(), nk, p.data(), d);
      } else {
        for (int64_t h = 0; h < H; ++h)
          for (int64_t j = 0; j < nk; ++j) fma_axpy_(ot + h * d, keys[static_cast<size_t>(j)], p[static_cast<size_t>(h * nk + j)], d);
      }
      for (int64_t h = 0; h < H; ++h)
        for (int64_t c = 0; c < d; ++c) ot[h * d + c] = ot[h * d + c] / den[static_cast<size_t>(h)];
    }
  });
}

// p[h * nk + j] = dot(q_h, key_j) for the H query rows at q (d floats each): the F32 tile kernel over
// runs of consecutive key rows (4 keys × 8 heads per call) where it exists, else dot_f32_.
void CpuOps::score_keys(const float* q, int64_t H, int64_t d, const std::vector<const float*>& keys, float* p) const {
  const int64_t nk = static_cast<int64_t>(keys.size());
  const int64_t row_bytes = d * static_cast<int64_t>(sizeof(float));
  if (tile_f32_ == nullptr) {
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < nk; ++j) p[h * nk + j] = dot_f32_(d, q + h * d, keys[static_cast<size_t>(j)]);
    return;
  }
  for (int64_t j = 0; j < nk;) {
    int64_t run = 1;  // keys j .. j + run − 1 are consecutive rows (at most 4)
    while (run < 4 && j + run < nk && keys[static_cast<size_t>(j + run)] == keys[static_cast<size_t>(j)] + run * d) ++run;
    for (int64_t h = 0; h < H; h += kMaxTileCols)
      tile_f32_(d, keys[static_cast<size_t>(j)], row_bytes, q + h * d, row_bytes, static_cast<int>(run),
                static_cast<int>(std::min<int64_t>(kMaxTileCols, H - h)), p + h * nk + j, nk);
    j += run;
  }
}

void CpuOps::route(const float* logits, int64_t n, int64_t n_expert, int64_t k, const float* bias,
                   const int32_t* hash_ids, bool norm, float scale, int32_t* ids, float* weights) {
  std::vector<float> s(static_cast<size_t>(n_expert)), sel(static_cast<size_t>(n_expert));
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t e = 0; e < n_expert; ++e) s[static_cast<size_t>(e)] = std::sqrt(det::softplus(logits[t * n_expert + e]));
    int32_t* id = ids + t * k;
    if (hash_ids != nullptr) {
      for (int64_t i = 0; i < k; ++i) id[i] = hash_ids[t * k + i];
    } else {
      for (int64_t e = 0; e < n_expert; ++e) {
        sel[static_cast<size_t>(e)] = bias != nullptr ? s[static_cast<size_t>(e)] + bias[e] : s[static_cast<size_t>(e)];
        order[static_cast<size_t>(e)] = static_cast<int32_t>(e);
      }
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t x, int32_t y) {
        const float sx = sel[static_cast<size_t>(x)], sy = sel[static_cast<size_t>(y)];
        return sx > sy || (sx == sy && x < y);
      });
      for (int64_t i = 0; i < k; ++i) id[i] = order[static_cast<size_t>(i)];
    }
    float sum = 0.0f;
    for (int64_t i = 0; i < k; ++i) sum += s[static_cast<size_t>(id[i])];
    for (int64_t i = 0; i < k; ++i) {
      const float w = s[static_cast<size_t>(id[i])];
      weights[t * k + i] = (norm ? w / (sum + 1e-20f) : w) * scale;
    }
  }
}

void CpuOps::swiglu_clamp(const float* g, const float* u, int64_t n, float limit, float* h) {
  swiglu_clamp_(g, u, n, limit, h);  // vec_ops.h
}

void CpuOps::axpy(float* y, const float* x, int64_t n, float a) {
  if (a == 1.0f) {
    for (int64_t i = 0; i < n; ++i) y[i] = y[i] + x[i];
  } else {
    fma_axpy_(y, x, a, n);
  }
}

}  // namespace dsv4::cpu
