// backend/cpu/cpu_moe.cpp — CpuBackend's MoE ops: route (biased top-k or hash table) and moe (routed
// experts grouped per expert, shared expert, combine). Arithmetic orders are backend.h's.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_backend_internal.h"
#include "numerics/det_math.h"

namespace dsv4::cpu {

using backend::Tensor;
using internal::f32;
using internal::grow;
using internal::row;
using internal::stride;

void CpuBackend::route(const backend::RouteArgs& r) {
  const int64_t n = r.logits.ne[1], E = r.logits.ne[0], K = r.k;
  const bool hash = r.tid2eid.valid();
  if (K <= 0 || K > E || r.ids.ne[0] != K || r.ids.ne[1] != n || r.weights.ne[0] != K || r.weights.ne[1] != n ||
      (r.bias.valid() && r.bias.ne[0] != E) || (hash && (r.tid2eid.ne[0] != K || internal::elements(r.tokens) != n))) {
    fail(invalid_argument("route: shapes do not fit (" + std::to_string(n) + " tokens, " + std::to_string(E) +
                          " experts, k " + std::to_string(K) + ")"));
    return;
  }
  const float* bias = r.bias.valid() ? f32(r.bias) : nullptr;
  float* s = grow(route_s_, E);
  float* sel = grow(route_sel_, E);
  int32_t* order = grow(order_, E);
  for (int64_t t = 0; t < n; ++t) {
    const float* lt = row(r.logits, t);
    for (int64_t e = 0; e < E; ++e) s[e] = std::sqrt(det::softplus(lt[e]));
    int32_t* id = row<int32_t>(r.ids, t);
    if (hash) {
      const int32_t tok = internal::i32(r.tokens)[t];
      if (tok < 0 || tok >= r.tid2eid.ne[1]) {
        fail(out_of_range("route: token id " + std::to_string(tok) + " out of range of the hash table (" +
                          std::to_string(r.tid2eid.ne[1]) + " rows)"));
        return;
      }
      const int32_t* h = row<int32_t>(r.tid2eid, tok);
      for (int64_t i = 0; i < K; ++i) {
        if (h[i] < 0 || h[i] >= E) {
          fail(corrupt("route: hash table entry " + std::to_string(h[i]) + " of token " + std::to_string(tok) +
                       " is not an expert id (< " + std::to_string(E) + ")"));
          return;
        }
        id[i] = h[i];
      }
    } else {
      for (int64_t e = 0; e < E; ++e) {
        sel[e] = bias != nullptr ? s[e] + bias[e] : s[e];
        order[e] = static_cast<int32_t>(e);
      }
      // Highest first, ties → lower e; NaN below every number, NaNs by lower e.
      std::partial_sort(order, order + K, order + E, [sel](int32_t x, int32_t y) {
        const float sx = sel[x], sy = sel[y];
        const bool nx = sx != sx, ny = sy != sy;
        if (nx || ny) return nx != ny ? ny : x < y;
        return sx > sy || (sx == sy && x < y);
      });
      std::copy(order, order + K, id);
    }
    float sum = 0.0f;
    for (int64_t i = 0; i < K; ++i) sum += s[id[i]];
    float* wt = row(r.weights, t);
    for (int64_t i = 0; i < K; ++i) {
      const float w = s[id[i]];
      wt[i] = (r.norm ? w / (sum + 1e-20f) : w) * r.scale;
    }
  }
}

void CpuBackend::moe(const backend::MoeArgs& m) {
  const Tensor& x = m.x;
  const int64_t n = x.ne[1], D = x.ne[0], K = m.ids.ne[0], E = m.gate_exps.ne[2], I = m.gate_exps.ne[1];
  const bool shared = m.gate_sh.valid();
  if (Status st = backend::check_moe_shapes(m); !st.ok()) {
    fail(std::move(st));
    return;
  }
  // Routed experts: each expert runs once over the (token, slot) pairs that chose it (experts
  // ascending, pairs in order); every row of the result depends only on its own token, so the
  // grouping changes no bits. All gate and up products (and the shared expert's) run as one batch,
  // then all down products as another.
  const int64_t nk = n * K;
  int64_t* first = grow(moe_first_, E + 1);
  int64_t* fill = grow(moe_fill_, E);
  int64_t* slots = grow(moe_slots_, nk);
  int64_t* row_of_pair = grow(moe_row_of_pair_, nk);
  std::fill(first, first + E + 1, 0);
  for (int64_t t = 0; t < n; ++t) {
    const int32_t* id = row<int32_t>(m.ids, t);
    for (int64_t k = 0; k < K; ++k) {
      if (id[k] < 0 || id[k] >= E) {
        fail(out_of_range("moe: expert id " + std::to_string(id[k]) + " out of range (" + std::to_string(E) +
                          " experts)"));
        return;
      }
      ++first[id[k] + 1];
    }
  }
  for (int64_t e = 0; e < E; ++e) first[e + 1] += first[e];
  std::copy(first, first + E, fill);
  for (int64_t t = 0; t < n; ++t) {
    const int32_t* id = row<int32_t>(m.ids, t);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t j = fill[id[k]]++;
      slots[j] = t * K + k;
      row_of_pair[t * K + k] = j;
    }
  }
  // xe rows are written for experts with several pairs (and only those are read), ge/ue/ye by the
  // matmuls, he by swiglu.
  float* xe = grow(xe_, nk * D);
  float* ge = grow(ge_, nk * I);
  float* ue = grow(ue_, nk * I);
  float* he = grow(he_, nk * I);
  float* ye = grow(ye_, nk * D);
  const int64_t Is = shared ? m.gate_sh.ne[1] : 0;
  float* gs = grow(gs_, n * Is);
  float* us = grow(us_, n * Is);
  float* hs = grow(hs_, n * Is);
  float* ys = grow(ys_, shared ? n * D : 0);
  const float* xd = f32(x);
  const int64_t xs = stride(x);
  auto expert = [](const Tensor& w, int64_t e) { return static_cast<const uint8_t*>(w.data) + e * w.nb[2]; };
  batch_.clear();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = first[e], cnt = first[e + 1] - b;
    if (cnt == 0) continue;
    // One pair: read the token's row of x in place (pairs of one token then share a quantization).
    const float* xin = xd + (slots[b] / K) * xs;
    int64_t in_stride = xs;
    if (cnt > 1) {
      for (int64_t j = 0; j < cnt; ++j)
        std::memcpy(xe + (b + j) * D, xd + (slots[b + j] / K) * xs, static_cast<size_t>(D) * sizeof(float));
      xin = xe + b * D;
      in_stride = D;
    }
    batch_.push_back({m.gate_exps.type, expert(m.gate_exps, e), I, D, xin, cnt, ge + b * I, in_stride, I});
    batch_.push_back({m.up_exps.type, expert(m.up_exps, e), I, D, xin, cnt, ue + b * I, in_stride, I});
  }
  if (shared) {
    batch_.push_back({m.gate_sh.type, m.gate_sh.data, Is, D, xd, n, gs, xs, Is});
    batch_.push_back({m.up_sh.type, m.up_sh.data, Is, D, xd, n, us, xs, Is});
  }
  Status st = cpu::matmul_batch(ctx_, batch_);
  if (!st.ok()) return fail(std::move(st));
  swiglu_clamp_(ge, ue, nk * I, m.limit_exp, he);
  if (shared) swiglu_clamp_(gs, us, n * Is, m.limit_sh, hs);
  batch_.clear();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = first[e], cnt = first[e + 1] - b;
    if (cnt > 0) batch_.push_back({m.down_exps.type, expert(m.down_exps, e), D, I, he + b * I, cnt, ye + b * D, I, D});
  }
  if (shared) batch_.push_back({m.down_sh.type, m.down_sh.data, D, Is, hs, n, ys, Is, D});
  st = cpu::matmul_batch(ctx_, batch_);
  if (!st.ok()) return fail(std::move(st));
  // out[t] = 0, + weight·y for k ascending (fma; a weight of exactly 1 is a plain add), + shared.
  for (int64_t t = 0; t < n; ++t) {
    float* ot = row(m.out, t);
    std::fill(ot, ot + D, 0.0f);
    const float* wt = row(m.weights, t);
    for (int64_t k = 0; k < K; ++k) {
      const float* y = ye + row_of_pair[t * K + k] * D;
      if (wt[k] == 1.0f) {
        for (int64_t i = 0; i < D; ++i) ot[i] = ot[i] + y[i];
      } else {
        fma_axpy_(ot, y, wt[k], D);
      }
    }
    if (shared) {
      const float* y = ys + t * D;
      for (int64_t i = 0; i < D; ++i) ot[i] = ot[i] + y[i];
    }
  }
}

}  // namespace dsv4::cpu
