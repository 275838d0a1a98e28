// backend/cuda/row_ops.cuh — device pieces shared by norm_rope_hc.cu, hc_pre_norm.cu and attention.cu (the compressor
// norms and ropes its closed entries exactly as rms_norm / rope do): byte-strided row access, the F32
// vec_dot / sum32 on one warp, one row's rms_norm on one warp, one RoPE pair. Included by .cu files
// only (device code, -fmad=false).
//
// Warp reductions: lane l owns items i ≡ l (mod 32) in ascending i, which is exactly partial[l] of
// numerics/dot.h (Partials32); __shfl_down_sync with offsets 16, 8, 4, 2, 1 then computes
// p[i] = p[i] + p[i + s] for i < s, which is Partials32::reduce's tree (lanes ≥ s compute values
// nobody uses). Lane 0 ends with the result; warp_tree broadcasts it to every lane.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "numerics/det_math.h"
#include "numerics/hd.h"

namespace dsv4::cuda::rowops {

constexpr unsigned kFullMask = 0xffffffffu;

// Row r of a tensor whose rows are `nb` bytes apart.
template <typename T>
__device__ __forceinline__ T* row_ptr(void* base, int64_t nb, int64_t r) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + r * nb);
}
template <typename T>
__device__ __forceinline__ const T* row_ptr(const void* base, int64_t nb, int64_t r) {
  return reinterpret_cast<const T*>(static_cast<const char*>(base) + r * nb);
}

// Partials32::reduce over the lanes' partials; every lane returns the result.
__device__ __forceinline__ float warp_tree(float p) {
  for (int s = 16; s >= 1; s >>= 1) p = p + __shfl_down_sync(kFullMask, p, s);
  return __shfl_sync(kFullMask, p, 0);
}

// a(i + 32·k), b(i + 32·k) for k < kChain into av, bv (register arrays once inlined and unrolled).
template <int kChain, typename Index, typename A, typename B>
__device__ __forceinline__ void load_chain_batch(Index i, A&& a, B&& b, float* av, float* bv) {
#pragma unroll
  for (int k = 0; k < kChain; ++k) {
    av[k] = a(i + 32 * k);
    bv[k] = b(i + 32 * k);
  }
}

// Lane l's fma chain p = fma(a(i), b(i), p) over i = l, l + 32, … < n in ascending order from 0 (partial l
// of numerics/dot.h's order), kChain elements of the chain loaded before their fmas: independent loads
// in flight (one warp over a long row is otherwise one memory latency per element); the chain stays in
// order. a and b map an index to a float.
template <int kChain, typename Index, typename A, typename B>
__device__ __forceinline__ float lane_fma_chain(Index n, int lane, A&& a, B&& b) {
  float p = 0.0f;
  Index i = lane;
  for (; i + 32 * (kChain - 1) < n; i += 32 * kChain) {
    float av[kChain], bv[kChain];
    load_chain_batch<kChain>(i, a, b, av, bv);
#pragma unroll
    for (int k = 0; k < kChain; ++k) p = hd::fma(av[k], bv[k], p);
  }
  for (; i < n; i += 32) p = hd::fma(a(i), b(i), p);
  return p;
}

// The same chain for a warp that is alone on its row (hc_pre_norm's 512-long chains: latency, not
// throughput): continuing from p over i = i0 + l, i0 + l + 32, … < n (i0 a multiple of 32, so a row
// may be chained in pieces as its parts land), with batch k + 1's loads issued between batch k's
// dependent fmas, so the in-order issue fills the fma latency with them. (Not the general form: the
// second batch of registers costs the many-warp kernels occupancy; prefill 64 at depth 4096 ran 2.5 %
// slower with it.)
template <int kChain, typename Index, typename A, typename B>
__device__ __forceinline__ float lane_fma_chain_pipelined(float p, Index i0, Index n, int lane, A&& a, B&& b) {
  Index i = i0 + lane;
  if (i + 32 * (kChain - 1) < n) {
    float av[kChain], bv[kChain];
    load_chain_batch<kChain>(i, a, b, av, bv);
    for (i += 32 * kChain; i + 32 * (kChain - 1) < n; i += 32 * kChain) {
      float an[kChain], bn[kChain];
      load_chain_batch<kChain>(i, a, b, an, bn);
#pragma unroll
      for (int k = 0; k < kChain; ++k) {
        p = hd::fma(av[k], bv[k], p);
        av[k] = an[k];
        bv[k] = bn[k];
      }
    }
#pragma unroll
    for (int k = 0; k < kChain; ++k) p = hd::fma(av[k], bv[k], p);
  }
  for (; i < n; i += 32) p = hd::fma(a(i), b(i), p);
  return p;
}

// dsv4::dot_f32(n, a, b) on one warp (every lane calls it; every lane gets the result).
__device__ __forceinline__ float warp_dot32(const float* a, const float* b, int64_t n, int lane) {
  return warp_tree(lane_fma_chain<8>(n, lane, [a](int64_t i) { return a[i]; }, [b](int64_t i) { return b[i]; }));
}

// rms_norm's inverse: 1 / sqrt(ss / n + eps).
__device__ __forceinline__ float rms_inverse(float ss, int64_t n, float eps) {
  return hd::div(1.0f, hd::sqrt(hd::div(ss, static_cast<float>(n)) + eps));
}

// Lane l's chain Σ v_i·v_i over i = l, l + 32, … < n (the F32 vec_dot's partial l) from a row in shared
// memory.
template <typename Index>
__device__ __forceinline__ float lane_sum_squares(const float* v, Index n, int lane) {
  const auto at = [v](Index i) { return v[i]; };
  return lane_fma_chain<16>(n, lane, at, at);
}

// The second half of one row's rms_norm on one warp: store(i, (x[i]·inv)·w[i]) (or x[i]·inv) for the
// lane's elements i = lane, lane + 32, …, eight loaded before their stores (one memory latency per
// batch, not per element). store may write x[i] (each lane reads and writes only its own elements).
template <typename Store>
__device__ __forceinline__ void warp_rms_scale_row(const float* x, int64_t n, const float* w, float inv, int lane,
                                                   Store&& store) {
  constexpr int kBatch = 8;
  for (int64_t i0 = lane; i0 < n; i0 += 32 * kBatch) {
    float xv[kBatch], wv[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int64_t i = i0 + 32 * k;
      xv[k] = i < n ? x[i] : 0.0f;
      wv[k] = i < n && w != nullptr ? w[i] : 1.0f;
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int64_t i = i0 + 32 * k;
      if (i < n) store(i, w != nullptr ? (xv[k] * inv) * wv[k] : xv[k] * inv);
    }
  }
}

// One row of rms_norm on one warp: y[i] = (x[i]·inv)·w[i] (or x[i]·inv), inv = 1 / sqrt(ss / n + eps),
// ss = dot_f32(x, x). y may alias x (each lane reads and writes only its own elements).
__device__ __forceinline__ void warp_rms_norm_row(const float* x, int64_t n, const float* w, float eps, float* y,
                                                  int lane) {
  const float inv = rms_inverse(warp_dot32(x, x, n, lane), n, eps);
  warp_rms_scale_row(x, n, w, inv, lane, [y](int64_t i, float v) { y[i] = v; });
}

// RoPE pair k of the rotated tail t (the row's trailing n_rot floats) at position pos:
// angle = (float)pos · freq (f32), c, s = det::sincos in double rounded to f32, inverse: s = −s.
// rope_cs computes (c, s) alone (it reads nothing a producer writes: callers hoist it before
// wait_for_producer()), rope_rotate applies them.
__device__ __forceinline__ void rope_cs(int64_t pos, float freq, bool inverse, float& c, float& s) {
  const float angle = static_cast<float>(pos) * freq;
  double sd, cd;
  det::sincos(static_cast<double>(angle), &sd, &cd);
  c = static_cast<float>(cd);
  s = inverse ? -static_cast<float>(sd) : static_cast<float>(sd);
}
__device__ __forceinline__ void rope_rotate(float* t, int64_t k, float c, float s) {
  const float x0 = t[2 * k], x1 = t[2 * k + 1];
  t[2 * k] = x0 * c - x1 * s;
  t[2 * k + 1] = x0 * s + x1 * c;
}
__device__ __forceinline__ void rope_pair(float* t, int64_t k, int64_t pos, float freq, bool inverse) {
  float c, s;
  rope_cs(pos, freq, inverse, c, s);
  rope_rotate(t, k, c, s);
}

// A running max that a NaN v never replaces (std::max(m, v)).
__device__ __forceinline__ float std_max(float m, float v) { return m < v ? v : m; }

// Lane's fold over one row or column of the hc×hc matrix held one cell per lane: f(… f(init, v_0) …,
// v_{hc−1}) with v_k = value of lane first + k·stride. The hc shuffles are issued together (one shuffle
// latency per fold, not hc: the Sinkhorn's 40 folds are a decode step's critical path in
// hc_pre_norm), then folded in index order. Every lane calls it (hc ≤ kHcMaxLine).
constexpr int kHcMaxLine = 5;
template <typename F>
__device__ __forceinline__ float hc_line_fold(float v, int first, int stride, int hc, float init, F&& f) {
  float g[kHcMaxLine];
#pragma unroll
  for (int k = 0; k < kHcMaxLine; ++k) g[k] = __shfl_sync(kFullMask, v, first + (k < hc ? k : 0) * stride);
  float acc = init;
#pragma unroll
  for (int k = 0; k < kHcMaxLine; ++k)
    if (k < hc) acc = f(acc, g[k]);
  return acc;
}

// hc_pre's post and comb of one token on one warp (hc·hc ≤ 32; every lane calls it): lane (i, j) =
// i·hc + j holds C[i][j]; every sum, max and division is the single-thread reference's, in its order
// (each lane gathers the hc values of its row or column by shuffles and folds them in index order).
// m: the token's (2+hc)·hc mix values; post [hc], comb [hc·hc] out.
__device__ __forceinline__ void hc_mix_warp(const float* m, const float* scale3, const float* base, float eps,
                                            int64_t iters, int hc, float* post, float* comb, int lane) {
  const int cells = hc * hc;
  const bool live = lane < cells;
  const int i = live ? lane / hc : 0, j = live ? lane % hc : 0;
  const auto add = [](float s, float v) { return s + v; };
  if (lane < hc) post[lane] = 2.0f * det::sigmoid(m[hc + lane] * scale3[1] + base[hc + lane]);
  // Row softmax (+eps).
  float r = live ? m[2 * hc + lane] * scale3[2] + base[2 * hc + lane] : 0.0f;
  const float mx = hc_line_fold(r, i * hc, 1, hc, -hd::f32_from_bits(0x7f800000u),
                                [](float acc, float v) { return std_max(acc, v); });
  r = det::exp(r - mx);
  const float sum = hc_line_fold(r, i * hc, 1, hc, 0.0f, add);
  float c = hd::div(r, sum) + eps;
  // Column norm, then (iters − 1) × (row norm, column norm).
  const int n_iters = iters > 1 ? static_cast<int>(iters) : 1;
  for (int it = 0; it < n_iters; ++it) {
    if (it > 0) c = hd::div(c, hc_line_fold(c, i * hc, 1, hc, 0.0f, add) + eps);
    c = hd::div(c, hc_line_fold(c, j, hc, hc, 0.0f, add) + eps);
  }
  if (live) comb[lane] = c;
}

// hc_post's value of stream j at one column: post_j·y, then + comb[i·hc + j]·X_i (fma, i ascending), X_i
// = X[i·stride] (X at the column in stream 0). hc_post_kernel's arithmetic, shared by the kernels that
// fuse HC post (the MoE combine, the decode product's epilogue).
__device__ __forceinline__ float hc_post_value(float post_j, float y, const float* comb, const float* X, int64_t stride,
                                               int64_t hc, int64_t j) {
  float acc = post_j * y;
  for (int64_t i = 0; i < hc; ++i) acc = hd::fma(comb[i * hc + j], X[i * stride], acc);
  return acc;
}

// hc_pre's weight of stream i: σ(mix_i·scale0 + base_i) + eps (the collapse and hc_head recompute it).
__device__ __forceinline__ float hc_pre_weight(float mix_i, float scale0, float base_i, float eps) {
  return det::sigmoid(mix_i * scale0 + base_i) + eps;
}

// A 1-D grid for `items` work items of `per_block` each, capped (kernels loop grid-stride).
inline unsigned grid_for(int64_t items, int64_t per_block) {
  const int64_t b = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(b < 1 ? 1 : (b > (1 << 20) ? (1 << 20) : b));
}

}  // namespace dsv4::cuda::rowops
