// backend/cuda/route.cuh — the MoE router's selection (backend.h's route: s_e = sqrt(softplus(logit)),
// the K best by the strict ranking order, the weights) as device code shared by moe.cu's route kernels
// and matmul_decode.cu's router product, whose last CTA routes a one-token step itself (matmul_route).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/backend.h"
#include "base/status.h"
#include "numerics/det_math.h"
#include "numerics/hd.h"

namespace dsv4::cuda {

// Whether (sa, a) ranks before (sb, b): higher first; NaN below every number; ties and NaNs among
// themselves → lower index (cpu_moe.cpp's partial_sort comparator).
__device__ inline bool ranks_before(float sa, int64_t a, float sb, int64_t b) {
  const bool na = sa != sa, nb = sb != sb;
  if (na || nb) return na != nb ? nb : a < b;
  return sa > sb || (sa == sb && a < b);
}

struct RouteK {
  const float* logits = nullptr;
  int64_t l_stride = 0, n = 0, E = 0, K = 0;
  const float* bias = nullptr;     // or null
  const int32_t* tid2eid = nullptr;  // or null (hash layers)
  int64_t h_stride = 0, vocab = 0;
  const int32_t* tokens = nullptr;
  int32_t* ids = nullptr;
  int64_t i_stride = 0;
  float* weights = nullptr;
  int64_t w_stride = 0;
  bool norm = false;
  float scale = 0.0f;
};

// Expert e's score. The logits are read through L2 (__ldcg): in the router product's last CTA they
// were written by the other CTAs of the same kernel, which this SM's L1 never saw.
__device__ inline float route_score(const float* lt, int64_t e) { return hd::sqrt(det::softplus(__ldcg(lt + e))); }

// route_token_cta's bounds: up to 32·kRouteLaneMax experts (8 per lane of warp 0) and K ≤ 32.
constexpr int kRouteLaneMax = 8;
constexpr int kRouteCtaThreads = 32 * kRouteLaneMax;

// Token t's route for E ≤ 32·kRouteLaneMax, K ≤ 32, no hash table, on a CTA of at least E threads (thread
// e's `bias` is bias[e], read by the caller — a weight, before its wait_for_producer()). Thread e computes
// expert e's score (each thread one sqrt(softplus): eight per lane of one warp took 15.7 µs on an H100 for
// ~3 µs of arithmetic, a long cold instruction stream on one SM) and selection value into shared memory
// (s_score, s_sel: E floats each); then warp 0's lane l holds experts l, l + 32, … in registers; each of
// the K rounds takes every lane's best untaken expert and an xor butterfly of ranks_before (a strict
// total order, so every lane ends with the one best, as any tree would); the owner marks it taken. Every
// lane adds the round's score to its sum (the same K values from 0 in slot order: route_kernel's sum) and
// lane k keeps round k's expert and score, so the K slots are written by their lanes at the end:
// route_kernel's bits. Every thread of the CTA calls it (it has a CTA barrier).
__device__ inline void route_token_cta(const RouteK& r, int64_t t, float bias, float* s_score, float* s_sel) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31;
  const float* lt = r.logits + t * r.l_stride;
  if (tid < r.E) {
    const float sc = route_score(lt, tid);
    s_score[tid] = sc;
    s_sel[tid] = r.bias != nullptr ? sc + bias : sc;
  }
  __syncthreads();
  if (tid >= 32) return;
  float score[kRouteLaneMax], sel[kRouteLaneMax];
  unsigned taken = 0;
#pragma unroll
  for (int j = 0; j < kRouteLaneMax; ++j) {
    const int e = lane + 32 * j;
    score[j] = e < r.E ? s_score[e] : 0.0f;
    sel[j] = e < r.E ? s_sel[e] : 0.0f;
    if (e >= r.E) taken |= 1u << j;
  }
  int32_t* id = r.ids + t * r.i_stride;
  float* wt = r.weights + t * r.w_stride;
  float sum = 0.0f, my_score = 0.0f;
  int32_t my_id = -1;
  for (int k = 0; k < static_cast<int>(r.K); ++k) {
    int32_t best = -1;
    float best_sel = 0.0f, best_score = 0.0f;
#pragma unroll
    for (int j = 0; j < kRouteLaneMax; ++j) {
      const int32_t e = lane + 32 * j;
      if (!(taken >> j & 1u) && (best < 0 || ranks_before(sel[j], e, best_sel, best))) {
        best = e;
        best_sel = sel[j];
        best_score = score[j];
      }
    }
    for (int m = 16; m >= 1; m >>= 1) {
      const int32_t o = __shfl_xor_sync(0xffffffffu, best, m);
      const float o_sel = __shfl_xor_sync(0xffffffffu, best_sel, m);
      const float o_score = __shfl_xor_sync(0xffffffffu, best_score, m);
      if (o >= 0 && (best < 0 || ranks_before(o_sel, o, best_sel, best))) {
        best = o;
        best_sel = o_sel;
        best_score = o_score;
      }
    }
    if (best >= 0 && best % 32 == lane) taken |= 1u << (best / 32);
    if (lane == k) {
      my_id = best;
      my_score = best_score;  // = route_score(lt, best), computed by its thread
    }
    sum += best_score;  // route_kernel: sum += s_score[id[i]] for i ascending from 0
  }
  if (lane < r.K) {
    id[lane] = my_id;
    wt[lane] = (r.norm ? hd::div(my_score, sum + 1e-20f) : my_score) * r.scale;
  }
}

// Whether route_token_cta takes r's tokens.
inline bool route_fits_cta(const RouteK& r) {
  return r.tid2eid == nullptr && r.E <= kRouteCtaThreads && r.K <= 32;
}

// route's kernel arguments, or the error naming the shapes that do not fit (moe.cu).
Result<RouteK> route_launch_args(const backend::RouteArgs& r);

}  // namespace dsv4::cuda
