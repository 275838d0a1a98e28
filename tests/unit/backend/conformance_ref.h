// tests/unit/backend/conformance_ref.h — the scalar reference of every op of backend/backend.h,
// written from the header's comments (not from backend/cpu's code). Shared pieces it uses: the
// elementwise functions of det_math.h, the 32-partial sum (accumulate.h), and for the weight types
// the dequantizer, activation quantizer and scalar vec_dot of the CPU type table (quant.h, level
// scalar) — each type's one defined order.
//
// Mutations: DSV4_CONFORMANCE_MUTATION=<name> makes one step of this reference deliberately wrong
// (the alternative a backend might plausibly write); the conformance suite must then fail. Every
// entry of kMutations was checked to fail it (cpu_avx2 target), e.g. rms_mul_inv_n by rms_norm odd_7 /
// alias_no_w_odd and compressor hca_r5_odd; idx_gscale_assoc by indexer gscale_rounding_ties (with a
// power-of-two gscale1, as DS4's 1/sqrt(64), the two associations agree, so a dedicated tie case);
// idx_nan_high / route_nan_high by the NaN cases; route_no_eps by tiny_sum_eps / all_zero_scores;
// swiglu_fminf by moe swiglu_nan_*; moe_first_mul by weights_one_zero_negative (+0 vs −0).
//   for m in <names>; do DSV4_CONFORMANCE_MUTATION=$m unit_backend --gtest_filter='*/cpu_avx2'; done
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "numerics/accumulate.h"
#include "numerics/det_math.h"
#include "backend/cpu/quant.h"
#include "base/tensor_type.h"

namespace dsv4::conformance {

namespace det = dsv4::det;

// --- mutations ------------------------------------------------------------------------------------

inline constexpr std::string_view kMutations[] = {
    "dot_seq",              // F32 vec_dot as one sequential fma chain instead of 32 partials + tree
    "matmul_dequant_dot",   // matmul: dot32 of the dequantized row with the raw f32 x (no activation quantization)
    "rms_div",              // rms_norm: x / sqrt(...) instead of x · (1 / sqrt(...))
    "rms_w_first",          // rms_norm: x · (inv · w) instead of (x · inv) · w
    "rms_mul_inv_n",        // rms_norm: ss · (1/n) instead of ss / n
    "rope_double_angle",    // rope: angle = (double)pos · (double)freq instead of the f32 product
    "rope_fma",             // rope: x0·c − x1·s with an fma
    "sinkhorn_pairwise",    // hc_pre: Sinkhorn sums as a pairwise tree instead of sequential
    "sinkhorn_recip",       // hc_pre: v · (1/den) instead of v / den
    "hc_collapse_muladd",   // hc_pre / hc_head: x = Σ pre_i·X_i with mul + add instead of fma
    "hc_post_transpose",    // hc_post: comb[j][i] instead of comb[i][j]
    "comp_den_seq",         // compressor: den as a sequential sum instead of 32 partials
    "comp_recip",           // compressor: acc · (1/den)
    "comp_rope_last_pos",   // compressor: rope at the window's last position instead of w·r
    "comp_no_overlap",      // compressor: CSA without the previous window's A-half
    "idx_gscale_assoc",     // indexer: g·(gscale0·gscale1) instead of (g·gscale0)·gscale1
    "idx_tie_high",         // indexer: ties → higher w
    "idx_nan_high",         // indexer: NaN scores rank above numbers
    "attn_den_seq",         // attention: Σ p sequential instead of 32 partials
    "attn_sink_in_partials",  // attention: exp(sink − M) as item 0 of the 32 partials instead of added after
    "attn_scale_q",         // attention: the scale applied to q before the dot instead of to the dot
    "attn_recip",           // attention: acc · (1/den)
    "attn_no_sink_max",     // attention: M = max of the logits only (sink not in the max)
    "attn_window_plus1",    // attention: raw keys from p − W instead of p − W + 1
    "kvs_slot_shift",       // kv_store: slot (p + 1) mod W
    "route_no_eps",         // route: s / sum instead of s / (sum + 1e-20f)
    "route_sum_pairwise",   // route: the weight sum as a pairwise tree
    "route_sum_by_expert",  // route: the weight sum over the selected experts in expert-id order
    "route_tie_high",       // route: ties → higher e
    "route_nan_high",       // route: NaN ranks above numbers
    "swiglu_fminf",         // moe: fminf/fmaxf clamps (NaN g/u replaced by the limit)
    "moe_first_mul",        // moe: out = w_0·y_0 (a multiply) instead of fma(w_0, y_0, 0)
    "moe_shared_first",     // moe: the shared expert added before the routed ones
};

inline const std::string& mutation() {
  static const std::string m = [] {
    const char* e = std::getenv("DSV4_CONFORMANCE_MUTATION");
    return std::string(e != nullptr ? e : "");
  }();
  return m;
}
inline bool mutated(std::string_view name) { return mutation() == name; }

// --- shared reductions ----------------------------------------------------------------------------

// The F32 vec_dot: fma(a_i, b_i, partial[i % 32]), i ascending, then the fixed tree (accumulate.h).
inline float dot32(const float* a, const float* b, int64_t n) {
  if (mutated("dot_seq")) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s = std::fma(a[i], b[i], s);
    return s;
  }
  Partials32 acc;
  for (int64_t i = 0; i < n; ++i) acc.p[i & 31] = std::fma(a[i], b[i], acc.p[i & 31]);
  return acc.reduce();
}

// Σ v_i: partial[i % 32] += v_i, i ascending, then the fixed tree.
inline float sum32(const float* v, int64_t n) {
  Partials32 acc;
  for (int64_t i = 0; i < n; ++i) acc.add(i, v[i]);
  return acc.reduce();
}

// --- embed / matmul -------------------------------------------------------------------------------

inline const cpu::TypeKernels& kernels(TensorType t) { return *cpu::type_kernels(t); }

// out row t (copies·D floats) = `copies` times the dequantized row tokens[t] of table.
inline void embed(TensorType type, const uint8_t* table, int64_t D, const int32_t* tokens, int64_t n, int64_t copies,
                  float* out) {
  const int64_t rb = tensor_row_bytes(type, D);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < copies; ++c)
      kernels(type).dequantize_row(table + tokens[t] * rb, out + (t * copies + c) * D, D);
}

// y[t·y_stride + o] = scalar vec_dot of weight row o with x row t quantized to the type's partner.
inline void matmul(TensorType type, const uint8_t* w, int64_t in, int64_t out, const float* x, int64_t x_stride,
                   int64_t n, float* y, int64_t y_stride) {
  const cpu::TypeKernels& k = kernels(type);
  const int64_t rb = tensor_row_bytes(type, in);
  std::vector<uint8_t> act(static_cast<size_t>(cpu::act_row_bytes(k.act, in)));
  if (mutated("matmul_dequant_dot")) {
    std::vector<float> row(static_cast<size_t>(in));
    for (int64_t o = 0; o < out; ++o) {
      k.dequantize_row(w + o * rb, row.data(), in);
      for (int64_t t = 0; t < n; ++t) y[t * y_stride + o] = dot32(row.data(), x + t * x_stride, in);
    }
    return;
  }
  for (int64_t t = 0; t < n; ++t) {
    cpu::quantize_act_row(k.act, x + t * x_stride, act.data(), in);
    for (int64_t o = 0; o < out; ++o) y[t * y_stride + o] = k.vec_dot[0](in, w + o * rb, act.data());
  }
}

// --- norms and rotations --------------------------------------------------------------------------

// One row: y = (x · inv) · w (or x · inv), inv = 1 / sqrt(ss / n + eps), ss = dot32(x, x).
inline void rms_norm_row(const float* x, int64_t n, const float* w, float eps, float* y) {
  const float ss = dot32(x, x, n);
  const float mean = mutated("rms_mul_inv_n") ? ss * (1.0f / static_cast<float>(n)) : ss / static_cast<float>(n);
  const float root = std::sqrt(mean + eps);
  const float inv = 1.0f / root;
  std::vector<float> tmp(x, x + n);  // y may alias x
  for (int64_t i = 0; i < n; ++i) {
    float v;
    if (mutated("rms_div")) {
      v = tmp[static_cast<size_t>(i)] / root;
      if (w != nullptr) v = v * w[i];
    } else if (mutated("rms_w_first") && w != nullptr) {
      v = tmp[static_cast<size_t>(i)] * (inv * w[i]);
    } else {
      v = tmp[static_cast<size_t>(i)] * inv;
      if (w != nullptr) v = v * w[i];
    }
    y[i] = v;
  }
}

// c, s of one angle: det::sincos of the f32 angle in double, each rounded to f32.
inline void rope_cs(int64_t pos, float freq, bool inverse, float* c, float* s) {
  double sd, cd;
  if (mutated("rope_double_angle")) {
    det::sincos(static_cast<double>(pos) * static_cast<double>(freq), &sd, &cd);
  } else {
    const float angle = static_cast<float>(pos) * freq;
    det::sincos(static_cast<double>(angle), &sd, &cd);
  }
  *c = static_cast<float>(cd);
  *s = static_cast<float>(sd);
  if (inverse) *s = -*s;
}

// In place on the trailing n_rot of a row of row_len floats at position pos.
inline void rope_row(float* row, int64_t row_len, int64_t pos, int64_t n_rot, const float* freqs, bool inverse) {
  float* t = row + (row_len - n_rot);
  for (int64_t k = 0; k < n_rot / 2; ++k) {
    float c, s;
    rope_cs(pos, freqs[k], inverse, &c, &s);
    const float x0 = t[2 * k], x1 = t[2 * k + 1];
    if (mutated("rope_fma")) {
      t[2 * k] = std::fma(x0, c, -(x1 * s));
      t[2 * k + 1] = std::fma(x0, s, x1 * c);
    } else {
      t[2 * k] = x0 * c - x1 * s;
      t[2 * k + 1] = x0 * s + x1 * c;
    }
  }
}

// --- hyper-connections ----------------------------------------------------------------------------

// Σ p as a pairwise tree ((p0 + p1) + (p2 + p3) …): the alternative the mutations use.
inline float pairwise_sum(const float* v, int64_t n, int64_t stride) {
  float p[256];  // n ≤ 256 (hc streams, routed experts)
  if (n <= 0 || n > 256) return 0.0f;
  for (int64_t k = 0; k < n; ++k) p[k] = v[k * stride];
  for (int64_t len = n; len > 1;) {
    const int64_t half = (len + 1) / 2;
    for (int64_t i = 0; i < len / 2; ++i) p[i] = p[2 * i] + p[2 * i + 1];
    if (len & 1) p[half - 1] = p[len - 1];
    len = half;
  }
  return p[0];
}

// Σ v[k·stride], k < n: sequential from 0 (or the pairwise tree under the mutation).
inline float seq_sum(const float* v, int64_t n, int64_t stride) {
  if (mutated("sinkhorn_pairwise")) return pairwise_sum(v, n, stride);
  float s = 0.0f;
  for (int64_t k = 0; k < n; ++k) s = s + v[k * stride];
  return s;
}

inline float sinkhorn_div(float v, float den) { return mutated("sinkhorn_recip") ? v * (1.0f / den) : v / den; }

// x = Σ_i pre_i·X_i, i ascending, one fma per element from 0.
inline void hc_collapse(const float* pre, int64_t hc, const float* X, int64_t D, float* x) {
  for (int64_t c = 0; c < D; ++c) {
    float acc = 0.0f;
    for (int64_t i = 0; i < hc; ++i)
      acc = mutated("hc_collapse_muladd") ? acc + pre[i] * X[i * D + c] : std::fma(pre[i], X[i * D + c], acc);
    x[c] = acc;
  }
}

// One token of hc_pre. mix [(2+hc)·hc], scale [3], base [(2+hc)·hc], X [hc·D] → x [D], post [hc], comb [hc·hc].
inline void hc_pre_token(const float* mix, const float* scale, const float* base, int64_t hc, int64_t D, float eps,
                         int64_t iters, const float* X, float* x, float* post, float* comb) {
  std::vector<float> pre(static_cast<size_t>(hc));
  for (int64_t i = 0; i < hc; ++i) {
    pre[static_cast<size_t>(i)] = det::sigmoid(mix[i] * scale[0] + base[i]) + eps;
    post[i] = 2.0f * det::sigmoid(mix[hc + i] * scale[1] + base[hc + i]);
  }
  float* C = comb;
  for (int64_t i = 0; i < hc; ++i) {
    float* row = C + i * hc;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < hc; ++j) {
      row[j] = mix[2 * hc + i * hc + j] * scale[2] + base[2 * hc + i * hc + j];
      mx = std::max(mx, row[j]);
    }
    for (int64_t j = 0; j < hc; ++j) row[j] = det::exp(row[j] - mx);
    const float sum = seq_sum(row, hc, 1);
    for (int64_t j = 0; j < hc; ++j) row[j] = sinkhorn_div(row[j], sum) + eps;
  }
  auto col_norm = [&] {
    for (int64_t j = 0; j < hc; ++j) {
      const float den = seq_sum(C + j, hc, hc) + eps;
      for (int64_t i = 0; i < hc; ++i) C[i * hc + j] = sinkhorn_div(C[i * hc + j], den);
    }
  };
  col_norm();
  for (int64_t it = 1; it < iters; ++it) {
    for (int64_t i = 0; i < hc; ++i) {
      const float den = seq_sum(C + i * hc, hc, 1) + eps;
      for (int64_t j = 0; j < hc; ++j) C[i * hc + j] = sinkhorn_div(C[i * hc + j], den);
    }
    col_norm();
  }
  hc_collapse(pre.data(), hc, X, D, x);
}

// One token of hc_post: X_out[j] = post[j]·y, then + comb[i][j]·X[i] (fma, i ascending).
inline void hc_post_token(const float* X, const float* y, const float* post, const float* comb, int64_t hc, int64_t D,
                          float* X_out) {
  for (int64_t j = 0; j < hc; ++j)
    for (int64_t c = 0; c < D; ++c) {
      float acc = post[j] * y[c];
      for (int64_t i = 0; i < hc; ++i) {
        const float cij = mutated("hc_post_transpose") ? comb[j * hc + i] : comb[i * hc + j];
        acc = std::fma(cij, X[i * D + c], acc);
      }
      X_out[j * D + c] = acc;
    }
}

// One token of hc_head.
inline void hc_head_token(const float* mix, float scale0, const float* base, int64_t hc, int64_t D, float eps,
                          const float* X, float* y) {
  std::vector<float> pre(static_cast<size_t>(hc));
  for (int64_t i = 0; i < hc; ++i) pre[static_cast<size_t>(i)] = det::sigmoid(mix[i] * scale0 + base[i]) + eps;
  hc_collapse(pre.data(), hc, X, D, y);
}

// --- compressor -----------------------------------------------------------------------------------

// Every position's (a, z + ape) row, by absolute position: what the ring holds, kept in full.
struct CompressorHistory {
  int64_t ratio = 0, coff = 1, d = 0;
  std::vector<float> a, zb;  // [pos][coff·d]
  int64_t positions() const { return static_cast<int64_t>(a.size()) / (coff * d); }

  // Appends one token's projections (z without ape) at position positions().
  void push(const float* a_row, const float* z_row, const float* ape) {
    const int64_t width = coff * d, p = positions();
    const float* b = ape + (p % ratio) * width;
    a.insert(a.end(), a_row, a_row + width);
    for (int64_t c = 0; c < width; ++c) zb.push_back(z_row[c] + b[c]);
  }
  const float* a_row(int64_t p) const { return a.data() + p * coff * d; }
  const float* z_row(int64_t p) const { return zb.data() + p * coff * d; }
};

// entries[w] of a compressor from the history (window w must be complete in it).
inline void compressor_entry(const CompressorHistory& h, int64_t w, const float* norm, const float* freqs,
                             int64_t n_rot, float eps, float* out) {
  const int64_t r = h.ratio, d = h.d;
  struct Cand {
    int64_t pos, col;  // pos < 0: absent
  };
  std::vector<Cand> cands;
  if (h.coff == 2)
    for (int64_t i = 0; i < r; ++i) cands.push_back({w >= 1 && !mutated("comp_no_overlap") ? (w - 1) * r + i : -1, 0});
  for (int64_t i = 0; i < r; ++i) cands.push_back({w * r + i, h.coff == 2 ? d : 0});
  const int64_t nc = static_cast<int64_t>(cands.size());
  std::vector<float> e(static_cast<size_t>(nc)), P(static_cast<size_t>(d));
  for (int64_t j = 0; j < d; ++j) {
    float m = -std::numeric_limits<float>::infinity();
    for (const Cand& c : cands)
      if (c.pos >= 0) m = std::max(m, h.z_row(c.pos)[c.col + j]);
    for (int64_t c = 0; c < nc; ++c) {
      const Cand& cd = cands[static_cast<size_t>(c)];
      e[static_cast<size_t>(c)] = cd.pos >= 0 ? det::exp(h.z_row(cd.pos)[cd.col + j] - m) : 0.0f;
    }
    float den;
    if (mutated("comp_den_seq")) {
      den = 0.0f;
      for (int64_t c = 0; c < nc; ++c) den = den + e[static_cast<size_t>(c)];
    } else {
      den = sum32(e.data(), nc);
    }
    float acc = 0.0f;
    for (int64_t c = 0; c < nc; ++c) {
      const Cand& cd = cands[static_cast<size_t>(c)];
      if (cd.pos >= 0) acc = std::fma(e[static_cast<size_t>(c)], h.a_row(cd.pos)[cd.col + j], acc);
    }
    P[static_cast<size_t>(j)] = mutated("comp_recip") ? acc * (1.0f / den) : acc / den;
  }
  rms_norm_row(P.data(), d, norm, eps, out);
  rope_row(out, d, mutated("comp_rope_last_pos") ? w * r + r - 1 : w * r, n_rot, freqs, false);
}

// --- indexer --------------------------------------------------------------------------------------

// Whether entry a ranks before entry b (higher score first; NaN below every number; ties and NaNs
// among themselves → lower index).
inline bool ranks_before(float sa, int64_t a, float sb, int64_t b, bool tie_high, bool nan_high) {
  const bool na = std::isnan(sa), nb = std::isnan(sb);
  if (na != nb) return nan_high ? na : nb;
  if (!na && sa != sb) return sa > sb;
  return tie_high ? a > b : a < b;
}

// out [top_k] for one query at position p.
inline void indexer_topk_query(const float* qI, const float* g, int64_t nI, int64_t dI, float gscale0, float gscale1,
                               const float* keys, int64_t p, int64_t ratio, int64_t top_k, int32_t* out) {
  const int64_t visible = (p + 1) / ratio;
  if (visible <= top_k) {
    for (int64_t i = 0; i < top_k; ++i) out[i] = i < visible ? static_cast<int32_t>(i) : -1;
    return;
  }
  std::vector<float> score(static_cast<size_t>(visible));
  for (int64_t w = 0; w < visible; ++w) {
    float s = 0.0f;
    for (int64_t h = 0; h < nI; ++h) {
      const float gs = mutated("idx_gscale_assoc") ? g[h] * (gscale0 * gscale1) : (g[h] * gscale0) * gscale1;
      const float dot = dot32(qI + h * dI, keys + w * dI, dI);
      s = std::fma(gs, dot > 0.0f ? dot : 0.0f, s);
    }
    score[static_cast<size_t>(w)] = s;
  }
  std::vector<int64_t> order(static_cast<size_t>(visible));
  for (int64_t w = 0; w < visible; ++w) order[static_cast<size_t>(w)] = w;
  const bool th = mutated("idx_tie_high"), nh = mutated("idx_nan_high");
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return ranks_before(score[static_cast<size_t>(a)], a, score[static_cast<size_t>(b)], b, th, nh);
  });
  std::sort(order.begin(), order.begin() + top_k);
  for (int64_t i = 0; i < top_k; ++i) out[i] = static_cast<int32_t>(order[static_cast<size_t>(i)]);
}

// --- attention ------------------------------------------------------------------------------------

// One query's H heads over an explicit key list (pointers to d floats).
inline void attention_query(const float* q, int64_t H, int64_t d, const std::vector<const float*>& keys,
                            const float* sinks, float scale, float* o) {
  const int64_t nk = static_cast<int64_t>(keys.size());
  std::vector<float> l(static_cast<size_t>(nk)), p(static_cast<size_t>(nk));
  for (int64_t h = 0; h < H; ++h) {
    const float* qh = q + h * d;
    float M = mutated("attn_no_sink_max") ? -std::numeric_limits<float>::infinity() : sinks[h];
    for (int64_t j = 0; j < nk; ++j) {
      if (mutated("attn_scale_q")) {
        std::vector<float> qs(qh, qh + d);
        for (auto& v : qs) v = v * scale;
        l[static_cast<size_t>(j)] = dot32(qs.data(), keys[static_cast<size_t>(j)], d);
      } else {
        l[static_cast<size_t>(j)] = dot32(qh, keys[static_cast<size_t>(j)], d) * scale;
      }
      M = std::max(M, l[static_cast<size_t>(j)]);
    }
    if (mutated("attn_no_sink_max") && nk == 0) M = sinks[h];
    for (int64_t j = 0; j < nk; ++j) p[static_cast<size_t>(j)] = det::exp(l[static_cast<size_t>(j)] - M);
    const float es = det::exp(sinks[h] - M);
    float den;
    if (mutated("attn_den_seq")) {
      float sp = 0.0f;
      for (int64_t j = 0; j < nk; ++j) sp = sp + p[static_cast<size_t>(j)];
      den = es + sp;
    } else if (mutated("attn_sink_in_partials")) {
      std::vector<float> all(1, es);
      all.insert(all.end(), p.begin(), p.end());
      den = sum32(all.data(), nk + 1);
    } else {
      den = es + sum32(p.data(), nk);
    }
    for (int64_t c = 0; c < d; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < nk; ++j) acc = std::fma(p[static_cast<size_t>(j)], keys[static_cast<size_t>(j)][c], acc);
      o[h * d + c] = mutated("attn_recip") ? acc * (1.0f / den) : acc / den;
    }
  }
}

// The raw key positions of a query at p: max(0, p − W + 1) … p.
inline int64_t raw_first(int64_t p, int64_t W) {
  return std::max<int64_t>(0, mutated("attn_window_plus1") ? p - W : p - W + 1);
}

// --- router ---------------------------------------------------------------------------------------

// One token. ids/weights [k].
inline void route_token(const float* logits, int64_t E, const float* bias, const int32_t* hash_row, int64_t k,
                        bool norm, float scale, int32_t* ids, float* weights) {
  std::vector<float> s(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) s[static_cast<size_t>(e)] = std::sqrt(det::softplus(logits[e]));
  if (hash_row != nullptr) {
    for (int64_t i = 0; i < k; ++i) ids[i] = hash_row[i];
  } else {
    std::vector<float> sel(static_cast<size_t>(E));
    std::vector<int64_t> order(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      sel[static_cast<size_t>(e)] = bias != nullptr ? s[static_cast<size_t>(e)] + bias[e] : s[static_cast<size_t>(e)];
      order[static_cast<size_t>(e)] = e;
    }
    const bool th = mutated("route_tie_high"), nh = mutated("route_nan_high");
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return ranks_before(sel[static_cast<size_t>(a)], a, sel[static_cast<size_t>(b)], b, th, nh);
    });
    for (int64_t i = 0; i < k; ++i) ids[i] = static_cast<int32_t>(order[static_cast<size_t>(i)]);
  }
  std::vector<float> sk(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) sk[static_cast<size_t>(i)] = s[static_cast<size_t>(ids[i])];
  float sum = 0.0f;
  if (mutated("route_sum_pairwise")) {
    sum = pairwise_sum(sk.data(), k, 1);
  } else if (mutated("route_sum_by_expert")) {
    std::vector<int32_t> by_id(ids, ids + k);
    std::sort(by_id.begin(), by_id.end());
    for (int32_t e : by_id) sum = sum + s[static_cast<size_t>(e)];
  } else {
    for (int64_t i = 0; i < k; ++i) sum = sum + sk[static_cast<size_t>(i)];
  }
  for (int64_t i = 0; i < k; ++i) {
    const float w = sk[static_cast<size_t>(i)];
    const float den = mutated("route_no_eps") ? sum : sum + 1e-20f;
    weights[i] = (norm ? w / den : w) * scale;
  }
}

// --- MoE ------------------------------------------------------------------------------------------

inline float swiglu_clamp(float g, float u, float L) {
  if (mutated("swiglu_fminf")) return det::silu(std::fmin(g, L)) * std::fmin(std::fmax(u, -L), L);
  return det::silu(std::min(g, L)) * std::min(std::max(u, -L), L);
}

struct MoeWeights {
  TensorType gate_t, up_t, down_t;
  const uint8_t *gate, *up, *down;  // [D, I, E] / [I, D, E]
  bool has_shared = false;
  TensorType gsh_t = TensorType::kF32, ush_t = TensorType::kF32, dsh_t = TensorType::kF32;
  const uint8_t *gsh = nullptr, *ush = nullptr, *dsh = nullptr;
};

// y [D] = down · swiglu(gate · x, up · x) for one expert's 2-D weights.
inline void expert_ffn(TensorType gt, const uint8_t* gw, TensorType ut, const uint8_t* uw, TensorType dt,
                       const uint8_t* dw, int64_t D, int64_t I, const float* x, float L, float* y) {
  std::vector<float> g(static_cast<size_t>(I)), u(static_cast<size_t>(I)), h(static_cast<size_t>(I));
  matmul(gt, gw, D, I, x, D, 1, g.data(), I);
  matmul(ut, uw, D, I, x, D, 1, u.data(), I);
  for (int64_t i = 0; i < I; ++i)
    h[static_cast<size_t>(i)] = swiglu_clamp(g[static_cast<size_t>(i)], u[static_cast<size_t>(i)], L);
  matmul(dt, dw, I, D, h.data(), I, 1, y, D);
}

inline void moe_token(const MoeWeights& mw, int64_t D, int64_t I, const float* x, const int32_t* ids,
                      const float* weights, int64_t K, float limit_exp, float limit_sh, float* out) {
  const int64_t gsz = tensor_row_bytes(mw.gate_t, D) * I, usz = tensor_row_bytes(mw.up_t, D) * I,
                dsz = tensor_row_bytes(mw.down_t, I) * D;
  std::vector<float> y(static_cast<size_t>(D)), ysh(static_cast<size_t>(D));
  if (mw.has_shared) expert_ffn(mw.gsh_t, mw.gsh, mw.ush_t, mw.ush, mw.dsh_t, mw.dsh, D, I, x, limit_sh, ysh.data());
  for (int64_t c = 0; c < D; ++c) out[c] = 0.0f;
  if (mw.has_shared && mutated("moe_shared_first"))
    for (int64_t c = 0; c < D; ++c) out[c] = out[c] + ysh[static_cast<size_t>(c)];
  for (int64_t k = 0; k < K; ++k) {
    const int64_t e = ids[k];
    expert_ffn(mw.gate_t, mw.gate + e * gsz, mw.up_t, mw.up + e * usz, mw.down_t, mw.down + e * dsz, D, I, x,
               limit_exp, y.data());
    const float wk = weights[k];
    for (int64_t c = 0; c < D; ++c) {
      if (k == 0 && mutated("moe_first_mul")) out[c] = wk * y[static_cast<size_t>(c)];
      else if (wk == 1.0f) out[c] = out[c] + y[static_cast<size_t>(c)];
      else out[c] = std::fma(wk, y[static_cast<size_t>(c)], out[c]);
    }
  }
  if (mw.has_shared && !mutated("moe_shared_first"))
    for (int64_t c = 0; c < D; ++c) out[c] = out[c] + ysh[static_cast<size_t>(c)];
}

}  // namespace dsv4::conformance
