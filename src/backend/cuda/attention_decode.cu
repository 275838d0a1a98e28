// backend/cuda/attention_decode.cu — the decode forms of attention (a pass of few queries, d ≤ 512):
// CudaBackend::attention (attention.cu) launches them instead of attn_count / attn_score / attn_out
// when decode_attention_fits, with attn_softmax_kernel between them. Every query's heads read the
// same keys (one kv row per position), so the general kernels, a warp per (key, head) and a thread per
// (head, column) reading its keys from global memory, move each key H times through L2 (~84 MB per
// CSA layer at 640 keys and 64 heads of 512); here a CTA stages keys once in shared memory for a group
// of heads. The arithmetic is the general kernels', element for element:
//   scores: S[t][h][j] = warp_tree(lane chain over c = lane, lane + 32, … of fma(q_h[c], key_j[c], ·))
//           · scale (rowops::warp_dot32's order); a CTA per (tile of 8 keys, 16 heads, query), warp w
//           the heads w and w + 8 with q_h's lane elements in registers; the CTA's warp 0 also counts
//           the query's compressed keys (the CTA of tile 0 and head group 0 stores it).
//   out:    attn_softmax_kernel's M = max(sink, max of the logits), p_j = exp(l_j − M) and den =
//           exp(sink − M) + warp_tree(lane l's sum of p_j over j ≡ l mod 32 ascending), and
//           o[t][h·d + c] = (fma chain over keys j ascending of p_j · key_j[c]) / den; a CTA per (32
//           columns, 8 heads, query), one chain per thread (warp = head, lane = column), the keys
//           staged 128 at a time (the next stage's loads in registers while this one is folded), lane
//           l computing p_j of the stage's keys j ≡ l mod 32 (its den partial, in order) and
//           shuffling it to the others. Each of a head's d/32 CTAs recomputes its exps (~20 per lane
//           at 640 keys) instead of a softmax kernel and a round trip through S.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_backend.cuh"
#include "backend/cuda/row_ops.cuh"
#include "backend/cuda/step_graph.cuh"
#include "numerics/det_math.h"
#include "numerics/hd.h"

namespace dsv4::cuda {

namespace {

using detail::AttnArgs;
using detail::attn_key;
using detail::quiet_nan;
using detail::raw_first;
using rowops::kFullMask;
using rowops::row_ptr;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int64_t kMaxQueries = 16;  // queries per pass (decode steps; prefill keeps the general kernels)
constexpr int kMaxDim = 512;         // d: a head's query in 16 registers per lane
constexpr int kDimPerLane = kMaxDim / 32;
constexpr int kScoreKeys = kWarps;   // keys per score CTA: one staged by each warp
constexpr int kScoreHeads = 2 * kWarps;
constexpr int kOutHeads = kWarps;    // one head per warp, one column per lane
constexpr int kOutStage = 128;       // keys per stage of the out kernel
constexpr int kOutKeysPerWarp = kOutStage / kWarps;

// The compressed keys local query t sees (attn_count_kernel's count; every lane gets it): HCA
// (p + 1) / ratio; CSA the comp_index row's entries before its first −1, or −1 when one of those is
// beyond capacity. The row is read 512 entries at a time (one memory latency for DS4's top_k).
__device__ __forceinline__ int32_t warp_comp_keys(const AttnArgs& a, int64_t t, int lane) {
  const int64_t p = a.p0 + a.t0 + t;
  if (a.mode == 1) return static_cast<int32_t>((p + 1) / a.ratio);
  if (a.mode != 2) return 0;
  const int32_t* ci = row_ptr<int32_t>(a.ci, a.ci_nb, a.t0 + t);
  constexpr int kBatch = 16;
  for (int64_t base = 0; base < a.ci_len; base += 32 * kBatch) {
    int32_t v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int64_t i = base + 32 * k + lane;
      v[k] = i < a.ci_len ? ci[i] : -1;  // the row's end reads as its −1
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const unsigned neg = __ballot_sync(kFullMask, v[k] < 0);
      const unsigned big = __ballot_sync(kFullMask, v[k] >= a.cap);
      const unsigned before = neg != 0u ? (neg & (0u - neg)) - 1u : kFullMask;  // lanes below the first −1
      if ((big & before) != 0u) return -1;
      if (neg != 0u) return static_cast<int32_t>(base + 32 * k + __ffs(static_cast<int>(neg)) - 1);
    }
  }
  return static_cast<int32_t>(a.ci_len);
}

// Key j of local query t when it exists, else nullptr, without the query's count: raw keys, HCA
// entries below (p + 1)/ratio, CSA entries whose comp_index value is within [0, cap) (whether j lies
// before the row's first −1 is decided by the count; a key staged beyond it is never used).
__device__ __forceinline__ const float* key_if_any(const AttnArgs& a, int64_t t, int64_t p, int64_t lo, int64_t nraw,
                                                   int64_t j) {
  if (j < nraw) return attn_key(a, a.t0 + t, p, lo, nraw, j);
  const int64_t i = j - nraw;
  if (a.mode == 1) return i < (p + 1) / a.ratio ? row_ptr<float>(a.comp, a.comp_nb, i) : nullptr;
  if (a.mode != 2 || i >= a.ci_len) return nullptr;
  const int32_t w = row_ptr<int32_t>(a.ci, a.ci_nb, a.t0 + t)[i];
  return w >= 0 && w < a.cap ? row_ptr<float>(a.comp, a.comp_nb, w) : nullptr;
}

// grid (⌈maxk / kScoreKeys⌉, ⌈H / kScoreHeads⌉, n).
__global__ void __launch_bounds__(kThreads) attn_score_tile_kernel(AttnArgs a) {
  __shared__ float keys[kScoreKeys][kMaxDim];
  __shared__ int32_t s_nc;
  wait_for_producer();
  // The one-query pass's kv_store (store_to): spread over every thread of the grid, loaded here so that
  // the load overlaps the key staging, stored after it (a copy by one CTA before its keys took +3.4 µs).
  static_assert(kMaxDim <= 2 * kThreads, "two kv elements per thread at most");
  const int64_t g_thread = ((static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x) * kThreads +
                           threadIdx.x;
  const int64_t g_threads = static_cast<int64_t>(gridDim.x) * gridDim.y * gridDim.z * kThreads;
  float kv_copy[2] = {0.0f, 0.0f};
  if (a.store_to != nullptr)
    for (int i = 0; i < 2; ++i)
      if (g_thread + i * g_threads < a.d) kv_copy[i] = row_ptr<float>(a.kv, a.kv_nb, 0)[g_thread + i * g_threads];
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int64_t t = blockIdx.z, p = a.p0 + a.t0 + t, lo = raw_first(a, p), nraw = p - lo + 1;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kScoreKeys;
  // Each warp stages its key (before the count: the two latencies overlap).
  if (const float* key = key_if_any(a, t, p, lo, nraw, j0 + warp); key != nullptr) {
#pragma unroll
    for (int i = 0; i < kDimPerLane; ++i) {
      const int64_t c = lane + 32 * i;
      if (c < a.d) keys[warp][c] = key[c];
    }
  }
  if (warp == 0) {
    const int32_t nc = warp_comp_keys(a, t, lane);
    if (lane == 0) {
      s_nc = nc;
      if (blockIdx.x == 0 && blockIdx.y == 0) a.ncomp[t] = nc;
    }
  }
  __syncthreads();
  if (a.store_to != nullptr)
    for (int i = 0; i < 2; ++i)
      if (g_thread + i * g_threads < a.d) a.store_to[g_thread + i * g_threads] = kv_copy[i];
  const int64_t nc = s_nc;
  if (nc < 0 || j0 >= nraw + nc) return;  // CTA-uniform
  const int nj = static_cast<int>(std::min<int64_t>(kScoreKeys, nraw + nc - j0));
  const float* qt = row_ptr<float>(a.q, a.q_nb, a.t0 + t);
  for (int hw = 0; hw < kScoreHeads / kWarps; ++hw) {
    const int64_t h = static_cast<int64_t>(blockIdx.y) * kScoreHeads + warp + hw * kWarps;
    if (h >= a.H) break;  // warp-uniform
    float qv[kDimPerLane];
#pragma unroll
    for (int i = 0; i < kDimPerLane; ++i) {
      const int64_t c = lane + 32 * i;
      qv[i] = c < a.d ? qt[h * a.d + c] : 0.0f;
    }
    float* S = a.S + (t * a.H + h) * a.maxk + j0;
    const auto score_key = [&](int jj) {
      float part = 0.0f;
#pragma unroll
      for (int i = 0; i < kDimPerLane; ++i)
        if (lane + 32 * i < a.d) part = hd::fma(qv[i], keys[jj][lane + 32 * i], part);
      const float l = rowops::warp_tree(part) * a.scale;
      if (lane == 0) S[jj] = l;
    };
    if (nj == kScoreKeys) {  // a full tile: unrolled, so the keys' chains and shuffle trees interleave
#pragma unroll
      for (int jj = 0; jj < kScoreKeys; ++jj) score_key(jj);
    } else {
      for (int jj = 0; jj < nj; ++jj) score_key(jj);
    }
  }
}

// Loads stage j0's operands of this thread into registers: kr[r] = key (j0 + warp + kWarps·r)[c]
// (0 beyond the keys or columns), pr[m] = p_(j0 + lane + 32·m) = exp(l − M) of the warp's head (0
// beyond).
__device__ __forceinline__ void load_out_stage(const AttnArgs& a, int64_t t, int64_t p, int64_t lo, int64_t nraw,
                                               int64_t nk, int64_t j0, int64_t c, const float* P, float M, int lane, int warp,
                                               float (&kr)[kOutKeysPerWarp], float (&pr)[kOutStage / 32]) {
  const int64_t nj = std::min<int64_t>(kOutStage, nk - j0);
  unsigned long long ptr[kOutStage / 32];  // lane l: key j0 + l + 32·m
#pragma unroll
  for (int m = 0; m < kOutStage / 32; ++m) {
    const int64_t jj = lane + 32 * m;
    ptr[m] = jj < nj ? reinterpret_cast<unsigned long long>(attn_key(a, a.t0 + t, p, lo, nraw, j0 + jj)) : 0ull;
    pr[m] = P != nullptr && jj < nj ? det::exp(P[j0 + jj] - M) : 0.0f;
  }
#pragma unroll
  for (int r = 0; r < kOutKeysPerWarp; ++r) {
    // Key jj = warp + kWarps·r is held by lane jj % 32 in ptr[jj / 32] (warp < kWarps: the index is
    // r / 4, known at compile time, so ptr stays in registers).
    static_assert(32 % kWarps == 0 && 32 / kWarps == 4, "four rounds of kWarps keys per 32");
    const int jj = warp + kWarps * r;
    const auto* key = reinterpret_cast<const float*>(__shfl_sync(kFullMask, ptr[r / 4], warp + kWarps * (r % 4)));
    kr[r] = jj < nj && c < a.d ? key[c] : 0.0f;
  }
}

// grid (⌈d / 32⌉, ⌈H / kOutHeads⌉, n).
__global__ void __launch_bounds__(kThreads) attn_out_tile_kernel(AttnArgs a) {
  __shared__ float keys[kOutStage][32];
  wait_for_producer();
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int64_t t = blockIdx.z, c = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  const int64_t h = static_cast<int64_t>(blockIdx.y) * kOutHeads + warp;
  const bool active = c < a.d && h < a.H;
  float* out = active ? row_ptr<float>(a.o, a.o_nb, a.t0 + t) + h * a.d + c : nullptr;
  const int64_t nc = a.ncomp[t];
  const int64_t p = a.p0 + a.t0 + t;
  float v = quiet_nan();  // nc < 0: a comp_index entry beyond capacity (the CPU fails the step): NaN, never a bad read
  if (nc >= 0) {          // CTA-uniform
    const int64_t lo = raw_first(a, p), nraw = p - lo + 1, nk = nraw + nc;
    const float* P = h < a.H ? a.S + (t * a.H + h) * a.maxk : nullptr;  // the logits
    const float M = P != nullptr ? rowops::std_max(a.sinks[h], detail::logits_max(P, nk, lane)) : 0.0f;
    float kr[kOutKeysPerWarp], pr[kOutStage / 32], pcur[kOutStage / 32];
    float acc = 0.0f, part = 0.0f;
    if (nk > 0) load_out_stage(a, t, p, lo, nraw, nk, 0, c, P, M, lane, warp, kr, pr);
    for (int64_t j0 = 0; j0 < nk; j0 += kOutStage) {
#pragma unroll
      for (int r = 0; r < kOutKeysPerWarp; ++r) keys[warp + kWarps * r][lane] = kr[r];
#pragma unroll
      for (int m = 0; m < kOutStage / 32; ++m) pcur[m] = pr[m];
      __syncthreads();
      if (j0 + kOutStage < nk) load_out_stage(a, t, p, lo, nraw, nk, j0 + kOutStage, c, P, M, lane, warp, kr, pr);
      const int nj = static_cast<int>(std::min<int64_t>(kOutStage, nk - j0));
#pragma unroll
      for (int m = 0; m < kOutStage / 32; ++m)
        if (32 * m + lane < nj) part = part + pcur[m];  // den's lane partial: j ≡ lane mod 32, ascending
#pragma unroll
      for (int m = 0; m < kOutStage / 32; ++m) {  // unrolled (no break): pcur stays in registers
        const int nm = std::max(0, std::min(32, nj - 32 * m));
        if (nm == 32) {  // 32 keys unrolled: their shuffles and loads issue ahead of the fma chain
#pragma unroll
          for (int k = 0; k < 32; ++k) acc = hd::fma(__shfl_sync(kFullMask, pcur[m], k), keys[32 * m + k][lane], acc);
        } else {
          for (int k = 0; k < nm; ++k) acc = hd::fma(__shfl_sync(kFullMask, pcur[m], k), keys[32 * m + k][lane], acc);
        }
      }
      __syncthreads();
    }
    const float sum = rowops::warp_tree(part);
    if (active) v = hd::div(acc, det::exp(a.sinks[h] - M) + sum);
  }
  if (a.unrope_n_rot > 0) {
    // rope(o, H, p0, n_rot, freqs, inverse) on the head's trailing n_rot columns: pair k = columns
    // (d − n_rot + 2k, +1), lanes (2i, 2i + 1) of this warp (d − n_rot and the tile's start are even);
    // rope_rotate's products and sums in its order.
    const float other = __shfl_xor_sync(kFullMask, v, 1);
    const int64_t tail = c - (a.d - a.unrope_n_rot);
    if (active && tail >= 0) {
      float cs, sn;
      rowops::rope_cs(p, a.unrope_freqs[tail / 2], true, cs, sn);
      v = (lane & 1) == 0 ? v * cs - other * sn : other * sn + v * cs;
    }
  }
  if (active) *out = v;
}

}  // namespace

namespace detail {

bool decode_attention_fits(const AttnArgs& a) {
  return a.n <= kMaxQueries && a.d <= kMaxDim && a.maxk / kScoreKeys < INT32_MAX && a.H / kOutHeads < 65535;
}

void enqueue_decode_attention_scores(CudaBackend& be, const AttnArgs& a) {
  const dim3 grid(static_cast<unsigned>((a.maxk + kScoreKeys - 1) / kScoreKeys),
                  static_cast<unsigned>((a.H + kScoreHeads - 1) / kScoreHeads), static_cast<unsigned>(a.n));
  be.launch("attn_score_tile_kernel", attn_score_tile_kernel, grid, kThreads, 0, a);
}

void enqueue_decode_attention_out(CudaBackend& be, const AttnArgs& a) {
  const dim3 grid(static_cast<unsigned>((a.d + 31) / 32), static_cast<unsigned>((a.H + kOutHeads - 1) / kOutHeads),
                  static_cast<unsigned>(a.n));
  be.launch("attn_out_tile_kernel", attn_out_tile_kernel, grid, kThreads, 0, a);
}

}  // namespace detail
}  // namespace dsv4::cuda
