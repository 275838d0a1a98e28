// backend/cuda/attention_decode.cu — the tiled forms of attention (named for decode; any pass of up to
// 65535 queries, d ≤ 512):
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
// Queries per pass: the grid's z. Every CTA serves one query, so the tiles are the same for a decode
// step and a prefill chunk (up to 2026-12-07 prefill kept the general kernels: 16 queries at most here;
// the general ones moved each key H·d times through L2 and took 37 % of a 4096-token prefill's kernel time).
constexpr int64_t kMaxQueries = 65535;
constexpr int kMaxDim = 512;         // d: a head's query in 16 registers per lane
constexpr int kDimPerLane = kMaxDim / 32;
constexpr int kScoreKeys = kWarps;   // keys per score CTA: one staged by each warp
constexpr int kScoreHeads = 2 * kWarps;
constexpr int kOutHeads = kWarps;    // heads per out CTA: two per warp of kOutWarps, one column per lane
constexpr int kOutStage = 128;       // keys per stage of the out kernel

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

// The out kernel: a CTA of kOutWarps warps per (32 columns, kOutHeads heads, query); warp w the heads
// 2w and 2w + 1 (two fma chains per thread: one key load serves both), lane = column. A stage of
// kOutStage keys is staged in shared memory as keys_t[column][key] (rows padded by 4 floats: a lane's
// 16-byte read of 4 consecutive keys, a quarter-warp's 8 columns on 32 distinct banks) and the heads'
// p_j as p_s[head][key] (read 4 keys at a time as broadcasts): per 4 keys and warp three 16-byte shared
// loads and 8 fmas, where a warp per head issued a shuffle and a shared load per key (the MIO pipe's
// ~16 operations per key per CTA held 640 keys at 15.8 µs).
// Prefill passes (≥ kOutWideQueries queries: CTAs enough) run kHpw = 4 heads per warp: per 4 keys and warp
// five 16-byte shared loads and 16 fmas instead of three and 8 (the MIO pipe bounds the kernel), the keys
// staged once for 16 heads; a decode step keeps 2 (8 heads per CTA: CTAs for every SM).
constexpr int kOutWarps = kOutHeads / 2;
constexpr int kOutThreads = 32 * kOutWarps;
constexpr int kOutKeysPerWarp = kOutStage / kOutWarps;  // keys a warp loads per stage (32: one per lane's pointer)
constexpr int kOutRow = kOutStage + 4;                  // padded row of keys_t / p_s
constexpr int64_t kOutWideQueries = 16;
static_assert(kOutKeysPerWarp == 32, "a lane resolves the pointer of one of its warp's keys");

// Stage j0's operands of this thread into registers: kr[g][i] = key (j0 + 32·warp + 4g + i)[c] (0 beyond
// the keys or columns); pr[e][m] = p_(j0 + lane + 32·m) = exp(l − M_e) of the warp's head e (0 beyond or
// without a head).
template <int kHpw>
__device__ __forceinline__ void load_out_stage(const AttnArgs& a, int64_t t, int64_t p, int64_t lo, int64_t nraw,
                                               int64_t nk, int64_t j0, int64_t c, const float* const (&P)[kHpw],
                                               const float (&M)[kHpw], int lane, int warp, float (&kr)[8][4],
                                               float (&pr)[kHpw][kOutStage / 32]) {
  const int64_t nj = std::min<int64_t>(kOutStage, nk - j0);
  const int64_t mine = 32 * warp + lane;  // the key whose pointer this lane resolves
  const unsigned long long ptr =
      mine < nj ? reinterpret_cast<unsigned long long>(attn_key(a, a.t0 + t, p, lo, nraw, j0 + mine)) : 0ull;
#pragma unroll
  for (int e = 0; e < kHpw; ++e)
#pragma unroll
    for (int m = 0; m < kOutStage / 32; ++m) {
      const int64_t jj = lane + 32 * m;
      pr[e][m] = P[e] != nullptr && jj < nj ? det::exp(P[e][j0 + jj] - M[e]) : 0.0f;
    }
#pragma unroll
  for (int g = 0; g < 8; ++g)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const auto* key = reinterpret_cast<const float*>(__shfl_sync(kFullMask, ptr, 4 * g + i));
      kr[g][i] = 32 * warp + 4 * g + i < nj && c < a.d ? key[c] : 0.0f;
    }
}

// grid (⌈d / 32⌉, ⌈H / (kOutWarps·kHpw)⌉, n), kOutThreads threads; warp w the heads kHpw·w … kHpw·w + kHpw − 1.
template <int kHpw>
__global__ void __launch_bounds__(kOutThreads) attn_out_tile_kernel(AttnArgs a) {
  __shared__ __align__(16) float keys_t[32][kOutRow];
  __shared__ __align__(16) float p_s[kOutWarps * kHpw][kOutRow];
  wait_for_producer();
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int64_t t = blockIdx.z, c = static_cast<int64_t>(blockIdx.x) * 32 + lane;
  const int64_t h0 = static_cast<int64_t>(blockIdx.y) * (kOutWarps * kHpw) + kHpw * warp;
  int64_t hs[kHpw];
  bool active[kHpw];
#pragma unroll
  for (int e = 0; e < kHpw; ++e) {
    hs[e] = h0 + e;
    active[e] = c < a.d && hs[e] < a.H;
  }
  const int64_t nc = a.ncomp[t];
  const int64_t p = a.p0 + a.t0 + t;
  // nc < 0: a comp_index entry beyond capacity (the CPU fails the step): NaN, never a bad read.
  float v[kHpw];
#pragma unroll
  for (int e = 0; e < kHpw; ++e) v[e] = quiet_nan();
  if (nc >= 0) {  // CTA-uniform
    const int64_t lo = raw_first(a, p), nraw = p - lo + 1, nk = nraw + nc;
    const float* P[kHpw];
    float M[kHpw];
#pragma unroll
    for (int e = 0; e < kHpw; ++e) {
      P[e] = hs[e] < a.H ? a.S + (t * a.H + hs[e]) * a.maxk : nullptr;  // the logits
      M[e] = P[e] != nullptr ? rowops::std_max(a.sinks[hs[e]], detail::logits_max(P[e], nk, lane)) : 0.0f;
    }
    float kr[8][4], pr[kHpw][kOutStage / 32];
    float acc[kHpw], part[kHpw];
#pragma unroll
    for (int e = 0; e < kHpw; ++e) acc[e] = part[e] = 0.0f;
    if (nk > 0) load_out_stage<kHpw>(a, t, p, lo, nraw, nk, 0, c, P, M, lane, warp, kr, pr);
    for (int64_t j0 = 0; j0 < nk; j0 += kOutStage) {
      const int nj = static_cast<int>(std::min<int64_t>(kOutStage, nk - j0));
#pragma unroll
      for (int g = 0; g < 8; ++g)
        *reinterpret_cast<float4*>(&keys_t[lane][32 * warp + 4 * g]) = make_float4(kr[g][0], kr[g][1], kr[g][2], kr[g][3]);
#pragma unroll
      for (int e = 0; e < kHpw; ++e)
#pragma unroll
        for (int m = 0; m < kOutStage / 32; ++m) {
          p_s[kHpw * warp + e][lane + 32 * m] = pr[e][m];
          if (32 * m + lane < nj) part[e] = part[e] + pr[e][m];  // den's lane partial: j ≡ lane mod 32, ascending
        }
      __syncthreads();
      if (j0 + kOutStage < nk)
        load_out_stage<kHpw>(a, t, p, lo, nraw, nk, j0 + kOutStage, c, P, M, lane, warp, kr, pr);
      const float* kt = keys_t[lane];
      const float* pw = p_s[kHpw * warp];  // the warp's heads' rows, kOutRow apart
      const int n4 = nj / 4;
      const auto four = [&](int q) {  // keys 4q … 4q + 3 into every chain, in key order
        const float4 k = *reinterpret_cast<const float4*>(kt + 4 * q);
        float4 x[kHpw];
#pragma unroll
        for (int e = 0; e < kHpw; ++e) x[e] = *reinterpret_cast<const float4*>(pw + e * kOutRow + 4 * q);
#pragma unroll
        for (int e = 0; e < kHpw; ++e) acc[e] = hd::fma(x[e].x, k.x, acc[e]);
#pragma unroll
        for (int e = 0; e < kHpw; ++e) acc[e] = hd::fma(x[e].y, k.y, acc[e]);
#pragma unroll
        for (int e = 0; e < kHpw; ++e) acc[e] = hd::fma(x[e].z, k.z, acc[e]);
#pragma unroll
        for (int e = 0; e < kHpw; ++e) acc[e] = hd::fma(x[e].w, k.w, acc[e]);
      };
      if (n4 == kOutStage / 4) {  // a full stage, unrolled: the loads issue ahead of the chains
#pragma unroll
        for (int q = 0; q < kOutStage / 4; ++q) four(q);
      } else {
        for (int q = 0; q < n4; ++q) four(q);
      }
      for (int j = 4 * n4; j < nj; ++j)  // the stage's last keys (none past nj: an fma with 0 could turn −0 into +0)
#pragma unroll
        for (int e = 0; e < kHpw; ++e) acc[e] = hd::fma(pw[e * kOutRow + j], kt[j], acc[e]);
      __syncthreads();
    }
#pragma unroll
    for (int e = 0; e < kHpw; ++e) {
      const float sum = rowops::warp_tree(part[e]);
      if (active[e]) v[e] = hd::div(acc[e], det::exp(a.sinks[hs[e]] - M[e]) + sum);
    }
  }
#pragma unroll
  for (int e = 0; e < kHpw; ++e) {
    if (a.unrope_n_rot > 0) {
      // rope(o, H, p0, n_rot, freqs, inverse) on the head's trailing n_rot columns: pair k = columns
      // (d − n_rot + 2k, +1), lanes (2i, 2i + 1) of this warp (d − n_rot and the tile's start are even);
      // rope_rotate's products and sums in its order.
      const float other = __shfl_xor_sync(kFullMask, v[e], 1);
      const int64_t tail = c - (a.d - a.unrope_n_rot);
      if (active[e] && tail >= 0) {
        float cs, sn;
        rowops::rope_cs(p, a.unrope_freqs[tail / 2], true, cs, sn);
        v[e] = (lane & 1) == 0 ? v[e] * cs - other * sn : other * sn + v[e] * cs;
      }
    }
    if (active[e]) row_ptr<float>(a.o, a.o_nb, a.t0 + t)[hs[e] * a.d + c] = v[e];
  }
}

// The out form of passes of many queries (prefill chunks): attn_softmax_kernel has put p_j = exp(l_j − M)
// in place of the logits and den (its arithmetic is the out tile's: the same M, exps and den tree), so
// this kernel only runs the fma chains o[t][h·d + c] = (chain over keys j ascending of p_j · key_j[c]) /
// den — the tile kernel's chains, with each (query, head) exp computed once instead of once per 32
// columns, and each key crossing L2 once per 64 heads instead of once per 8. A CTA per (64 columns, 64
// heads, query): warp w the heads 16·(w % 4) + {hg, hg + 4, hg + 8, hg + 12} (hg = lane / 8) and the
// columns 32·(w / 4) + 4·(lane % 8) … + 3, so a thread runs 4 × 4 chains and per key reads its 4 key
// columns (one 16-byte shared load; the warp's 8 column groups are 128 contiguous bytes) and per 4 keys
// its heads' p (four 16-byte loads, rows 36 floats apart: the warp's 4 head rows on distinct banks):
// 8 shared loads per 64 fmas. Stages of kWideKeys keys: the next stage's loads (8 key elements and 8 p
// per thread) in registers while this one is folded.
constexpr int kWideCols = 64;
constexpr int kWideHeads = 64;
constexpr int kWideKeys = 32;
constexpr int kWideThreads = 256;
constexpr int kWidePitch = kWideKeys + 4;  // p_s row: 16-byte aligned, consecutive rows 4 banks apart
constexpr int64_t kWideMinQueries = 16;    // fewer: the tile kernel (its exps beside the chains; no softmax launch)

// Stage j0's loads of this thread: key (j0 + tid / 8), columns c_tile + 8·(tid % 8) … + 7 (0 beyond the
// keys or columns), and p of head h_tile + tid / 4, keys j0 + 8·(tid % 4) … + 7 (0 beyond).
__device__ __forceinline__ void load_wide_stage(const AttnArgs& a, int64_t t, int64_t p, int64_t lo, int64_t nraw, int64_t nk,
                                                int64_t j0, int64_t c_tile, int64_t h_tile, int tid, float (&kr)[8],
                                                float (&pr)[8]) {
  const int64_t j = j0 + tid / 8, c = c_tile + 8 * (tid % 8);
  const float* key = j < nk ? attn_key(a, a.t0 + t, p, lo, nraw, j) : nullptr;
#pragma unroll
  for (int i = 0; i < 8; ++i) kr[i] = key != nullptr && c + i < a.d ? key[c + i] : 0.0f;
  const int64_t h = h_tile + tid / 4, jp = j0 + 8 * (tid % 4);
  const float* P = a.S + (t * a.H + h) * a.maxk;
#pragma unroll
  for (int i = 0; i < 8; ++i) pr[i] = h < a.H && jp + i < nk ? P[jp + i] : 0.0f;
}

// grid (⌈d / kWideCols⌉, ⌈H / kWideHeads⌉, n), kWideThreads threads; after attn_softmax_kernel.
__global__ void __launch_bounds__(kWideThreads) attn_out_wide_kernel(AttnArgs a) {
  __shared__ __align__(16) float keys_s[kWideKeys][kWideCols];
  __shared__ __align__(16) float p_s[kWideHeads][kWidePitch];
  wait_for_producer();
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int64_t t = blockIdx.z, p = a.p0 + a.t0 + t;
  const int64_t c_tile = static_cast<int64_t>(blockIdx.x) * kWideCols, h_tile = static_cast<int64_t>(blockIdx.y) * kWideHeads;
  const int hg = lane >> 3, cg = lane & 7;
  const int hrow = 16 * (warp & 3) + hg;            // + 4·i: this thread's head i in the tile
  const int ccol = 32 * (warp >> 2) + 4 * cg;       // + i: this thread's column i in the tile
  const int64_t nc = a.ncomp[t];
  float v[4][4];
  if (nc < 0) {  // a comp_index entry beyond capacity (the CPU fails the step): NaN, never a bad read
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int k = 0; k < 4; ++k) v[i][k] = quiet_nan();
  } else {  // CTA-uniform
    const int64_t lo = raw_first(a, p), nraw = p - lo + 1, nk = nraw + nc;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[i][k] = 0.0f;
    float kr[8], pr[8];
    load_wide_stage(a, t, p, lo, nraw, nk, 0, c_tile, h_tile, tid, kr, pr);
    for (int64_t j0 = 0; j0 < nk; j0 += kWideKeys) {
      const int nj = static_cast<int>(std::min<int64_t>(kWideKeys, nk - j0));
      *reinterpret_cast<float4*>(&keys_s[tid / 8][8 * (tid % 8)]) = make_float4(kr[0], kr[1], kr[2], kr[3]);
      *reinterpret_cast<float4*>(&keys_s[tid / 8][8 * (tid % 8) + 4]) = make_float4(kr[4], kr[5], kr[6], kr[7]);
      *reinterpret_cast<float4*>(&p_s[tid / 4][8 * (tid % 4)]) = make_float4(pr[0], pr[1], pr[2], pr[3]);
      *reinterpret_cast<float4*>(&p_s[tid / 4][8 * (tid % 4) + 4]) = make_float4(pr[4], pr[5], pr[6], pr[7]);
      __syncthreads();
      if (j0 + kWideKeys < nk) load_wide_stage(a, t, p, lo, nraw, nk, j0 + kWideKeys, c_tile, h_tile, tid, kr, pr);
      const auto four = [&](int q) {  // keys 4q … 4q + 3 into the 16 chains, in key order
        float4 pv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) pv[i] = *reinterpret_cast<const float4*>(&p_s[hrow + 4 * i][4 * q]);
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          const float4 k4 = *reinterpret_cast<const float4*>(&keys_s[4 * q + jj][ccol]);
          const float kc[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float pj = jj == 0 ? pv[i].x : jj == 1 ? pv[i].y : jj == 2 ? pv[i].z : pv[i].w;
#pragma unroll
            for (int k = 0; k < 4; ++k) acc[i][k] = hd::fma(pj, kc[k], acc[i][k]);
          }
        }
      };
      const int n4 = nj / 4;
      if (n4 == kWideKeys / 4) {  // a full stage, unrolled
#pragma unroll
        for (int q = 0; q < kWideKeys / 4; ++q) four(q);
      } else {
        for (int q = 0; q < n4; ++q) four(q);
      }
      for (int j = 4 * n4; j < nj; ++j) {  // the stage's last keys (none past nj: an fma with 0 could turn −0 into +0)
        const float4 k4 = *reinterpret_cast<const float4*>(&keys_s[j][ccol]);
        const float kc[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float pj = p_s[hrow + 4 * i][j];
#pragma unroll
          for (int k = 0; k < 4; ++k) acc[i][k] = hd::fma(pj, kc[k], acc[i][k]);
        }
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t h = h_tile + hrow + 4 * i;
      const float den = h < a.H ? a.den[t * a.H + h] : 1.0f;
#pragma unroll
      for (int k = 0; k < 4; ++k) v[i][k] = hd::div(acc[i][k], den);
    }
  }
  const int64_t c0 = c_tile + ccol;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t h = h_tile + hrow + 4 * i;
    if (h >= a.H) break;
    if (a.unrope_n_rot > 0) {
      // rope(o, H, p0, n_rot, freqs, inverse) on the head's trailing n_rot columns: pair k = columns
      // (d − n_rot + 2k, +1), columns (c0 + 2m, c0 + 2m + 1) of this thread (d − n_rot and c0 are even):
      // rope_pair, the tile kernel's products and sums in its order.
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const int64_t tail = c0 + 2 * m - (a.d - a.unrope_n_rot);
        if (tail >= 0 && c0 + 2 * m + 1 < a.d) rowops::rope_pair(v[i], m, p, a.unrope_freqs[tail / 2], true);
      }
    }
    float* out = row_ptr<float>(a.o, a.o_nb, a.t0 + t) + h * a.d;
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (c0 + k < a.d) out[c0 + k] = v[i][k];
  }
}

// The scores of passes of many queries: S[t][h][j] = warp_tree(lane chain over c = lane, lane + 32, … of
// fma(q_h[c], key_j[c], ·)) · scale, the tile kernel's value, with the work laid out so that a shared
// load feeds four fmas and a dot's tree costs one shuffle: a CTA per (32 heads, query) walks all the
// query's keys, 8 at a time staged in shared memory (warp w stages key w of each 8; the next 8 in registers
// while these are folded);
// warp w holds the queries of heads 4w … 4w + 3 in registers (16 elements per lane each) and runs 32
// dots at once, lane l's 32 partials (dot k = head k / 8, key k % 8). Their trees: a reduce-scatter over
// the lanes — at level s (16, 8, …, 1) lane l keeps the dots whose bit s equals its own, sends the
// others to lane l ^ s and adds what it gets: p[i] + p[i + s] for each i < s, Partials32::reduce's tree
// (warp_tree's) level by level, 31 shuffles for 32 dots instead of 5 per dot. Lane l ends with dot l.
constexpr int kWideScoreHeads = 32;    // per CTA: 4 per warp
constexpr int kWideScoreKeys = 8;      // per stage
constexpr int kWideScoreThreads = 256;

// Stage j0's key of this thread's warp (key j0 + warp; a stage is one key per warp): its columns lane +
// 32·i (0 beyond the keys or columns). One key pointer per thread (attn_key reads comp_index for CSA).
__device__ __forceinline__ void load_score_stage(const AttnArgs& a, int64_t t, int64_t p, int64_t lo, int64_t nraw,
                                                 int64_t nk, int64_t j0, int lane, int warp, float (&kr)[kDimPerLane]) {
  static_assert(kWideScoreKeys * 32 == kWideScoreThreads, "one key per warp and stage");
  const int64_t j = j0 + warp;
  const float* key = j < nk ? attn_key(a, a.t0 + t, p, lo, nraw, j) : nullptr;
#pragma unroll
  for (int i = 0; i < kDimPerLane; ++i) kr[i] = key != nullptr && lane + 32 * i < a.d ? key[lane + 32 * i] : 0.0f;
}

// One level of the reduce-scatter: lane l keeps v[k] (bit kS of l clear) or v[k + kS] (set) for k < kS and
// adds the value lane l ^ kS sends: p[i] + p[i + kS] of each of those dots (an add is commutative).
template <int kS>
__device__ __forceinline__ void scatter_tree_level(float (&v)[32], int lane) {
  const bool upper = (lane & kS) != 0;
#pragma unroll
  for (int k = 0; k < kS; ++k) {
    const float keep = upper ? v[k + kS] : v[k];
    const float send = upper ? v[k] : v[k + kS];
    v[k] = keep + __shfl_xor_sync(kFullMask, send, kS);
  }
}

// grid (⌈H / kWideScoreHeads⌉, n), kWideScoreThreads threads. Writes a.ncomp (CTA 0 of each query) and S.
// kFullDim: d == kMaxDim (DS4's 512), so every lane's chain has kDimPerLane elements and the per-element
// predicates go (SASS: ~200 of the loop's ~1100 instructions per 8 keys were those compares and selects).
template <bool kFullDim>
__global__ void __launch_bounds__(kWideScoreThreads) attn_score_wide_kernel(AttnArgs a) {
  __shared__ float keys[kWideScoreKeys][kMaxDim];
  __shared__ int32_t s_nc;
  wait_for_producer();
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int64_t t = blockIdx.y, p = a.p0 + a.t0 + t, lo = raw_first(a, p), nraw = p - lo + 1;
  const int64_t h0 = static_cast<int64_t>(blockIdx.x) * kWideScoreHeads + 4 * warp;
  // This warp's heads' query elements (0 for heads beyond H: their dots are computed, never written).
  const float* qt = row_ptr<float>(a.q, a.q_nb, a.t0 + t);
  float qv[4][kDimPerLane];
#pragma unroll
  for (int hh = 0; hh < 4; ++hh)
#pragma unroll
    for (int i = 0; i < kDimPerLane; ++i) {
      const int64_t c = lane + 32 * i;
      qv[hh][i] = h0 + hh < a.H && (kFullDim || c < a.d) ? qt[(h0 + hh) * a.d + c] : 0.0f;
    }
  if (warp == 0) {
    const int32_t nc = warp_comp_keys(a, t, lane);
    if (lane == 0) {
      s_nc = nc;
      if (blockIdx.x == 0) a.ncomp[t] = nc;
    }
  }
  __syncthreads();
  const int64_t nc = s_nc;
  if (nc < 0) return;  // CTA-uniform: the out kernels write NaN
  const int64_t nk = nraw + nc;
  const int steps = kFullDim ? kDimPerLane : static_cast<int>((a.d + 31) / 32);  // chain elements per lane (the last may be partial)
  float kr[kDimPerLane];
  load_score_stage(a, t, p, lo, nraw, nk, 0, lane, warp, kr);
  for (int64_t j0 = 0; j0 < nk; j0 += kWideScoreKeys) {
#pragma unroll
    for (int i = 0; i < kDimPerLane; ++i) keys[warp][lane + 32 * i] = kr[i];
    __syncthreads();
    if (j0 + kWideScoreKeys < nk) load_score_stage(a, t, p, lo, nraw, nk, j0 + kWideScoreKeys, lane, warp, kr);
    float v[32];
#pragma unroll
    for (int k = 0; k < 32; ++k) v[k] = 0.0f;
#pragma unroll
    for (int i = 0; i < kDimPerLane; ++i) {
      if (!kFullDim && i >= steps) break;                  // CTA-uniform
      if (kFullDim || lane + 32 * i < a.d) {              // the chain's elements only (an fma with 0 could turn −0 into +0)
        float kv[kWideScoreKeys];
#pragma unroll
        for (int jj = 0; jj < kWideScoreKeys; ++jj) kv[jj] = keys[jj][lane + 32 * i];
#pragma unroll
        for (int hh = 0; hh < 4; ++hh)
#pragma unroll
          for (int jj = 0; jj < kWideScoreKeys; ++jj) v[8 * hh + jj] = hd::fma(qv[hh][i], kv[jj], v[8 * hh + jj]);
      }
    }
    // The 32 trees as one reduce-scatter (see the banner): afterwards v[0] is dot `lane`.
    scatter_tree_level<16>(v, lane);
    scatter_tree_level<8>(v, lane);
    scatter_tree_level<4>(v, lane);
    scatter_tree_level<2>(v, lane);
    scatter_tree_level<1>(v, lane);
    const int64_t h = h0 + lane / 8, j = j0 + lane % 8;
    if (h < a.H && j < nk) a.S[(t * a.H + h) * a.maxk + j] = v[0] * a.scale;
    __syncthreads();  // the stage is overwritten next
  }
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

bool wide_attention_fits(const CudaBackend& be, const AttnArgs& a) {
  return be.forms().attn_wide && a.n >= kWideMinQueries && a.H / kWideScoreHeads < 65535;
}

void enqueue_wide_attention_scores(CudaBackend& be, const AttnArgs& a) {
  const dim3 grid(static_cast<unsigned>((a.H + kWideScoreHeads - 1) / kWideScoreHeads), static_cast<unsigned>(a.n));
  if (a.d == kMaxDim)
    be.launch("attn_score_wide_kernel", attn_score_wide_kernel<true>, grid, kWideScoreThreads, 0, a);
  else
    be.launch("attn_score_wide_kernel", attn_score_wide_kernel<false>, grid, kWideScoreThreads, 0, a);
}

void enqueue_wide_attention_out(CudaBackend& be, const AttnArgs& a) {
  const dim3 grid(static_cast<unsigned>((a.d + kWideCols - 1) / kWideCols),
                  static_cast<unsigned>((a.H + kWideHeads - 1) / kWideHeads), static_cast<unsigned>(a.n));
  be.launch("attn_out_wide_kernel", attn_out_wide_kernel, grid, kWideThreads, 0, a);
}

void enqueue_decode_attention_out(CudaBackend& be, const AttnArgs& a) {
  const auto grid = [&](int heads) {
    return dim3(static_cast<unsigned>((a.d + 31) / 32), static_cast<unsigned>((a.H + heads - 1) / heads),
                static_cast<unsigned>(a.n));
  };
  if (a.n >= kOutWideQueries)
    be.launch("attn_out_tile_kernel<4>", attn_out_tile_kernel<4>, grid(kOutWarps * 4), kOutThreads, 0, a);
  else
    be.launch("attn_out_tile_kernel<2>", attn_out_tile_kernel<2>, grid(kOutWarps * 2), kOutThreads, 0, a);
}

}  // namespace detail
}  // namespace dsv4::cuda
