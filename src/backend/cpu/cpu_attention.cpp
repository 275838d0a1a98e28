// backend/cpu/cpu_attention.cpp — CpuBackend's attention-side ops: compressor_update, indexer_topk,
// attention (ring of raw keys + compressed entries, with sinks) and kv_store. Arithmetic orders are
// backend.h's; comments here say only how the work is laid out.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_backend_internal.h"
#include "numerics/det_math.h"

namespace dsv4::cpu {

using backend::Tensor;
using internal::f32;
using internal::grow;
using internal::row;
using internal::sum32;

// --- compressor -----------------------------------------------------------------------------------

void CpuBackend::pool_window(const backend::CompressorUpdate& u, const backend::CompressorTensors& st, int64_t w,
                             float* out) {
  const int64_t r = u.ratio, d = u.d, span = u.coff * r, n_cand = u.coff * r;
  const float** ca = grow(cand_a_, n_cand);
  const float** cz = grow(cand_z_, n_cand);
  int64_t c = 0;
  if (u.coff == 2) {  // the A-half (columns [0, d)) of the previous window's positions; absent for w = 0
    for (int64_t i = 0; i < r; ++i, ++c) {
      const int64_t slot = ((w - 1) * r + i) % span;
      ca[c] = w >= 1 ? row(st.ring_a, slot) : nullptr;
      cz[c] = w >= 1 ? row(st.ring_z, slot) : nullptr;
    }
  }
  const int64_t col = u.coff == 2 ? d : 0;  // the window's own positions (B-half for CSA)
  for (int64_t i = 0; i < r; ++i, ++c) {
    const int64_t slot = (w * r + i) % span;
    ca[c] = row(st.ring_a, slot) + col;
    cz[c] = row(st.ring_z, slot) + col;
  }
  float* wv = grow(pool_w_, n_cand);
  for (int64_t j = 0; j < d; ++j) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < n_cand; ++k)
      if (cz[k] != nullptr) mx = std::max(mx, cz[k][j]);
    for (int64_t k = 0; k < n_cand; ++k) wv[k] = cz[k] != nullptr ? det::exp(cz[k][j] - mx) : 0.0f;
    const float den = sum32(wv, n_cand);
    float acc = 0.0f;
    for (int64_t k = 0; k < n_cand; ++k)
      if (ca[k] != nullptr) acc = std::fma(wv[k], ca[k][j], acc);
    out[j] = acc / den;
  }
}

void CpuBackend::compressor_update(const backend::CompressorUpdate& u, const backend::CompressorTensors& st) {
  const int64_t r = u.ratio, coff = u.coff, d = u.d, width = coff * d, span = coff * r, n = u.a.ne[1];
  if (Status check = backend::check_compressor_shapes(u, st); !check.ok()) {
    fail(std::move(check));
    return;
  }
  for (int64_t t = 0; t < n; ++t) {
    const int64_t p = u.p0 + t, slot = p % span;
    std::memcpy(row(st.ring_a, slot), row(u.a, t), static_cast<size_t>(width) * sizeof(float));
    const float* z = row(u.z, t);
    const float* b = row(u.ape, p % r);
    float* zr = row(st.ring_z, slot);
    for (int64_t c = 0; c < width; ++c) zr[c] = z[c] + b[c];
    if ((p + 1) % r != 0) continue;
    // Window w = p / r closes: pool, norm, rope (at position w·r).
    const int64_t w = p / r;
    float* e = row(st.entries, w);
    pool_window(u, st, w, e);
    rms_norm_row(e, d, f32(u.norm), u.eps, e);
    rope_rows(e, 1, d, d, w * r, u.n_rot, f32(u.freqs), false);
  }
}

// --- indexer --------------------------------------------------------------------------------------

void CpuBackend::indexer_topk(const Tensor& qI, const Tensor& g, float gscale0, float gscale1, const Tensor& keys,
                              int64_t p0, int64_t ratio, const Tensor& out) {
  const int64_t n = qI.ne[1], nI = g.ne[0], dI = keys.ne[0], top_k = out.ne[0];
  if (Status check = backend::check_indexer_shapes(qI, g, keys, p0, ratio, out); !check.ok()) {
    fail(std::move(check));
    return;
  }
  for (int64_t t = 0; t < n; ++t) {
    const int64_t nv = (p0 + t + 1) / ratio;
    int32_t* o = row<int32_t>(out, t);
    if (nv <= top_k) {
      for (int64_t i = 0; i < top_k; ++i) o[i] = i < nv ? static_cast<int32_t>(i) : -1;
      continue;
    }
    float* gs = grow(gsc_, nI);
    const float* gt = row(g, t);
    for (int64_t h = 0; h < nI; ++h) gs[h] = (gt[h] * gscale0) * gscale1;
    float* score = grow(score_, nv);
    const float* qt = row(qI, t);
    // Entries split over the pool in chunks (whichever thread is free): each score is one thread's fma
    // chain over heads.
    pool_.parallel_for_chunks(nv, pool_.chunk_grain(nv, 8, 16), [&](int64_t w0, int64_t w1, int) {
      for (int64_t w = w0; w < w1; ++w) {
        const float* k = row(keys, w);
        float s = 0.0f;
        for (int64_t h = 0; h < nI; ++h) {
          const float dot = dot_f32_(dI, qt + h * dI, k);
          s = std::fma(gs[h], dot > 0.0f ? dot : 0.0f, s);
        }
        score[w] = s;
      }
    });
    int32_t* order = grow(order_, nv);
    for (int64_t w = 0; w < nv; ++w) order[w] = static_cast<int32_t>(w);
    // Highest score first, ties → lower entry; NaN below every number, NaNs by lower entry.
    std::partial_sort(order, order + top_k, order + nv, [score](int32_t x, int32_t y) {
      const float sx = score[x], sy = score[y];
      const bool nx = sx != sx, ny = sy != sy;
      if (nx || ny) return nx != ny ? ny : x < y;
      return sx > sy || (sx == sy && x < y);
    });
    std::sort(order, order + top_k);
    std::copy(order, order + top_k, o);
  }
}

// --- attention ------------------------------------------------------------------------------------

// p[h * nk + j] = dot(q_h, key_j): the F32 tile kernel over runs of consecutive key rows (4 keys × 8
// heads per call) where it exists, else dot_f32_. A run ends wherever the next key is not the next
// row in memory (ring wrap, ring → chunk, raw → compressed): the same bits per element either way.
void CpuBackend::score_keys(const float* q, int64_t H, int64_t d, const float* const* keys, int64_t nk,
                            float* p) const {
  const int64_t row_bytes = d * static_cast<int64_t>(sizeof(float));
  if (tile_f32_ == nullptr) {
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < nk; ++j) p[h * nk + j] = dot_f32_(d, q + h * d, keys[j]);
    return;
  }
  for (int64_t j = 0; j < nk;) {
    int64_t run = 1;  // keys j .. j + run − 1 are consecutive rows (at most 4)
    while (run < 4 && j + run < nk && keys[j + run] == keys[j] + run * d) ++run;
    for (int64_t h = 0; h < H; h += kMaxTileCols)
      tile_f32_(d, keys[j], row_bytes, q + h * d, row_bytes, static_cast<int>(run),
                static_cast<int>(std::min<int64_t>(kMaxTileCols, H - h)), p + h * nk + j, nk);
    j += run;
  }
}

void CpuBackend::attention(const backend::AttentionArgs& a) {
  const int64_t n = a.q.ne[1], H = a.n_head, d = a.kv.ne[0], W = a.window, p0 = a.p0;
  const bool has_comp = a.comp.valid(), csa = has_comp && a.comp_index.valid();
  if (H <= 0 || W <= 0 || a.q.ne[0] != H * d || a.o.ne[0] != H * d || a.o.ne[1] != n || a.kv.ne[1] != n ||
      a.sinks.ne[0] < H || (p0 > 0 && (!a.ring.valid() || a.ring.ne[1] != W || a.ring.ne[0] != d)) ||
      (has_comp && (a.comp.ne[0] != d || (!csa && a.ratio <= 0))) || (csa && a.comp_index.ne[1] != n)) {
    fail(invalid_argument("attention: shapes do not fit (q [" + std::to_string(a.q.ne[1]) + "][" +
                          std::to_string(a.q.ne[0]) + "], kv [" + std::to_string(a.kv.ne[1]) + "][" +
                          std::to_string(d) + "], " + std::to_string(H) + " heads, window " + std::to_string(W) + ")"));
    return;
  }
  if (has_comp) {  // every compressed key must exist
    const int64_t cap = a.comp.ne[1];
    if (csa) {
      for (int64_t t = 0; t < n; ++t) {
        const int32_t* ci = row<int32_t>(a.comp_index, t);
        for (int64_t i = 0; i < a.comp_index.ne[0] && ci[i] >= 0; ++i)
          if (ci[i] >= cap) {
            fail(out_of_range("attention: compressed entry " + std::to_string(ci[i]) + " beyond capacity " +
                              std::to_string(cap)));
            return;
          }
      }
    } else if (n > 0 && (p0 + n) / a.ratio > cap) {
      fail(out_of_range("attention: " + std::to_string((p0 + n) / a.ratio) + " compressed entries beyond capacity " +
                        std::to_string(cap)));
      return;
    }
  }
  const float* sinks = f32(a.sinks);
  const float scale = a.scale;
  // Work items are (query token t, group of kHeadGroup heads), so that decode's one token spreads over
  // the pool too. Per item: scores p[h][j] = dot(q_h, key_j) · scale for the group's heads, then per
  // head the softmax with its sink and o_h = Σ_j p[h][j] · key_j / den (weighted_rows: the same fma
  // sequence over j as one fma_axpy per key; only key and query loads are shared between heads). Each
  // head's arithmetic is the same whichever item holds it.
  constexpr int64_t kHeadGroup = kMaxTileCols;
  const int64_t groups = (H + kHeadGroup - 1) / kHeadGroup;
  // Every thread's scratch sized for the most keys any item can see, before the items: chunks go to
  // whichever thread is free, so which thread meets the largest item differs from call to call, and a
  // decode step must not allocate once warm.
  const int64_t max_keys = std::min(W, p0 + n) + (csa ? a.comp_index.ne[0] : has_comp ? (p0 + n) / a.ratio : 0);
  grow_thread_scratch(std::min(kHeadGroup, H), max_keys);
  // Items in chunks taken by whichever thread is free: a prefill chunk's later tokens see more keys (and a
  // static split gave them all to the last thread).
  pool_.parallel_for_chunks(n * groups, pool_.chunk_grain(n * groups, 8), [&](int64_t b, int64_t e, int thread) {
    ThreadScratch& ts = thread_scratch_[static_cast<size_t>(thread)];
    for (int64_t item = b; item < e; ++item) {
      const int64_t t = item / groups, h0 = (item % groups) * kHeadGroup, Hg = std::min(kHeadGroup, H - h0);
      const int64_t p = p0 + t;
      ts.keys.clear();
      for (int64_t pos = std::max<int64_t>(0, p - W + 1); pos <= p; ++pos)
        ts.keys.push_back(pos < p0 ? row(a.ring, pos % W) : row(a.kv, pos - p0));
      if (csa) {
        const int32_t* ci = row<int32_t>(a.comp_index, t);
        for (int64_t i = 0; i < a.comp_index.ne[0] && ci[i] >= 0; ++i) ts.keys.push_back(row(a.comp, ci[i]));
      } else if (has_comp) {
        const int64_t visible = (p + 1) / a.ratio;
        for (int64_t w = 0; w < visible; ++w) ts.keys.push_back(row(a.comp, w));
      }
      const int64_t nk = static_cast<int64_t>(ts.keys.size());
      const float* const* keys = ts.keys.data();
      float* P = grow(ts.p, Hg * nk);
      float* den = grow(ts.den, Hg);
      score_keys(row(a.q, t) + h0 * d, Hg, d, keys, nk, P);
      float* ot = row(a.o, t) + h0 * d;
      std::fill(ot, ot + Hg * d, 0.0f);
      for (int64_t h = 0; h < Hg; ++h) {
        float* ph = P + h * nk;
        float mx = sinks[h0 + h];
        for (int64_t j = 0; j < nk; ++j) {
          ph[j] = ph[j] * scale;
          mx = std::max(mx, ph[j]);
        }
        for (int64_t j = 0; j < nk; ++j) ph[j] = det::exp(ph[j] - mx);
        den[h] = det::exp(sinks[h0 + h] - mx) + sum32(ph, nk);
      }
      if (weighted_rows_ != nullptr) {
        weighted_rows_(ot, d, Hg, keys, nk, P, d);
      } else {
        for (int64_t h = 0; h < Hg; ++h)
          for (int64_t j = 0; j < nk; ++j) fma_axpy_(ot + h * d, keys[j], P[h * nk + j], d);
      }
      for (int64_t h = 0; h < Hg; ++h)
        for (int64_t c = 0; c < d; ++c) ot[h * d + c] = ot[h * d + c] / den[h];
    }
  });
}

void CpuBackend::kv_store(const Tensor& kv, int64_t p0, const Tensor& ring) {
  const int64_t n = kv.ne[1], W = ring.ne[1], d = kv.ne[0];
  if (ring.ne[0] != d || W <= 0) {
    fail(invalid_argument("kv_store: kv [" + std::to_string(n) + "][" + std::to_string(d) + "], ring [" +
                          std::to_string(W) + "][" + std::to_string(ring.ne[0]) + "] do not fit"));
    return;
  }
  for (int64_t p = std::max(p0, p0 + n - W); p < p0 + n; ++p)
    std::memcpy(row(ring, p % W), row(kv, p - p0), static_cast<size_t>(d) * sizeof(float));
}

}  // namespace dsv4::cpu
