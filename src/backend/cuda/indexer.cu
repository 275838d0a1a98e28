// backend/cuda/indexer.cu — CudaBackend::indexer_topk (backend.h: the lightning indexer's top-k of the
// compressed entries a query sees). Arithmetic order is backend.h's (the CPU backend's bits):
//   score_w = fma chain over heads h ascending of ((g_h·gscale0)·gscale1)·ReLU(qI_h · key_w), the dot
//   the F32 vec_dot (partial l = fma chain over elements l, l + 32, … ascending; Partials32's tree).
// Kernels:
//   indexer_score_tile_kernel (dI = 32·K, K ∈ {1, 2, 4, 8}, the staging within 48 KiB; --cuda-disable
//     indexer-tile leaves it out): a CTA per (16 entries, query) stages the query's nI·dI floats and its
//     16 keys in shared memory once (rows padded by 4 floats: a quarter-warp's 16-byte loads of 8 heads
//     fall on 32 distinct banks); thread (h, group of 4 entries) computes its 4 dots with one read of
//     q_h per element (tile_dots: the 32 partials and the tree in the tree's own order, a quad of
//     partials at a time, no shuffles); then one thread per entry chains the heads. A warp per
//     (entry, query) re-read the 64 heads' queries (32 KiB) for every entry and paid 64 shuffle trees:
//     50.7 µs for 1024 entries (H100, depth 4096).
//   indexer_score_kernel: the general form, one warp per (query, entry).
//   indexer_select_kernel: one block per query: an exact radix select of the top_k-th key (scores
//     mapped to ordered integers, NaN lowest; ±0 one key; each pass's digit found by one warp's scan
//     over the 256 counts), then the keys above it and the first needed keys equal to it (ties → lower
//     entry), written in ascending entry order: each thread a run of entries, two block scans.
#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_backend.cuh"
#include "backend/cuda/row_ops.cuh"
#include "numerics/hd.h"

namespace dsv4::cuda {

using backend::Tensor;
using rowops::grid_for;
using rowops::kFullMask;
using rowops::row_ptr;

namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr int kTopkThreads = 512;

struct IdxArgs {
  const void* qI;
  int64_t q_nb;
  const void* g;
  int64_t g_nb;
  float gs0, gs1;
  const void* keys;
  int64_t k_nb;
  int64_t p0, ratio, top_k;
  int64_t t0, n;  // this pass: queries t0 … t0 + n − 1 of the call (local index t)
  int64_t nI, dI, max_nv;
  float* score;  // [n][max_nv]
};

// score[t·max_nv + w] (query t0 + t of the call) for the queries with more than top_k visible
// entries, w < visible: one warp each.
__global__ void indexer_score_kernel(IdxArgs a) {
  wait_for_producer();
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t total = a.n * a.max_nv, warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t gw = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); gw < total; gw += warps) {
    const int64_t t = gw / a.max_nv, w = gw % a.max_nv, nv = (a.p0 + a.t0 + t + 1) / a.ratio;
    if (nv <= a.top_k || w >= nv) continue;  // warp-uniform
    const float* qt = row_ptr<float>(a.qI, a.q_nb, a.t0 + t);
    const float* gt = row_ptr<float>(a.g, a.g_nb, a.t0 + t);
    const float* kw = row_ptr<float>(a.keys, a.k_nb, w);
    // The heads' dots kHeads at a time (independent: their loads and shuffle trees overlap), then
    // folded into the chain over heads in order.
    constexpr int kHeads = 8;
    float s = 0.0f;
    for (int64_t h0 = 0; h0 < a.nI; h0 += kHeads) {
      float dots[kHeads];
#pragma unroll
      for (int k = 0; k < kHeads; ++k)
        dots[k] = h0 + k < a.nI ? rowops::warp_dot32(qt + (h0 + k) * a.dI, kw, a.dI, lane) : 0.0f;  // warp-uniform
#pragma unroll
      for (int k = 0; k < kHeads; ++k) {
        if (h0 + k >= a.nI) break;
        const float gsh = (gt[h0 + k] * a.gs0) * a.gs1;
        s = hd::fma(gsh, dots[k] > 0.0f ? dots[k] : 0.0f, s);
      }
    }
    if (lane == 0) a.score[t * a.max_nv + w] = s;
  }
}

// --- the tiled score form -------------------------------------------------------------------------

constexpr int kTileEntries = 16;    // entries per CTA
constexpr int kEntriesPerThread = 4;  // entries whose dots share a thread's reads of q_h
constexpr int kRowPad = 4;          // floats after each staged row (bank spread of the heads' rows)
constexpr size_t kTileSmemMax = 48 * 1024;

// Shared memory of the tile form (floats): q [nI][dI + pad], keys [16][dI + pad], dots [16][nI + 1], g [nI].
size_t tile_smem_bytes(int64_t nI, int64_t dI) {
  const int64_t stride = dI + kRowPad;
  return static_cast<size_t>((nI + kTileEntries) * stride + kTileEntries * (nI + 1) + nI) * sizeof(float);
}

// E dots of q (one row, 32·K floats) with the rows k + e·stride, each in dsv4::dot_f32's order: partial l
// = fma chain over terms kk of element l + 32·kk from 0, then Partials32's tree (p[i] += p[i + s] for s =
// 16, 8, 4, 2, 1). The partials come a quad at a time (lanes 4j … 4j + 3 from the 16-byte words j + 8·kk)
// in the order the tree consumes them: quads j and j + 4 make level 16's sums r for 4j …; r quads j and
// j + 2 make level 8's s; s quads 0 and 1 make level 4's t, then (t0 + t2) + (t1 + t3).
template <int K, int E>
__device__ __forceinline__ void tile_dots(const float* q, const float* k, int stride, float (&out)[E]) {
  const auto quad = [&](int j, float (&p)[E][4]) {
#pragma unroll
    for (int e = 0; e < E; ++e) p[e][0] = p[e][1] = p[e][2] = p[e][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < K; ++kk) {
      const float4 x = reinterpret_cast<const float4*>(q)[j + 8 * kk];
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float4 y = reinterpret_cast<const float4*>(k + e * stride)[j + 8 * kk];
        p[e][0] = hd::fma(x.x, y.x, p[e][0]);
        p[e][1] = hd::fma(x.y, y.y, p[e][1]);
        p[e][2] = hd::fma(x.z, y.z, p[e][2]);
        p[e][3] = hd::fma(x.w, y.w, p[e][3]);
      }
    }
  };
  const auto level16 = [&](int j, float (&r)[E][4]) {  // r = partials 4j … + partials 4j + 16 …
    float pa[E][4], pb[E][4];
    quad(j, pa);
    quad(j + 4, pb);
#pragma unroll
    for (int e = 0; e < E; ++e)
#pragma unroll
      for (int i = 0; i < 4; ++i) r[e][i] = pa[e][i] + pb[e][i];
  };
  const auto level8 = [&](int j, float (&s)[E][4]) {  // s = r quad j + r quad j + 2
    float ra[E][4], rb[E][4];
    level16(j, ra);
    level16(j + 2, rb);
#pragma unroll
    for (int e = 0; e < E; ++e)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[e][i] = ra[e][i] + rb[e][i];
  };
  float s0[E][4], s1[E][4];
  level8(0, s0);
  level8(1, s1);
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const float t0 = s0[e][0] + s1[e][0], t1 = s0[e][1] + s1[e][1];
    const float t2 = s0[e][2] + s1[e][2], t3 = s0[e][3] + s1[e][3];
    out[e] = (t0 + t2) + (t1 + t3);
  }
}

// grid (⌈max_nv / kTileEntries⌉, n); dynamic shared memory tile_smem_bytes(nI, 32·K).
template <int K>
__global__ void __launch_bounds__(kThreads) indexer_score_tile_kernel(IdxArgs a) {
  extern __shared__ __align__(16) float tile_smem[];
  constexpr int kWords = 8 * K;  // 16-byte words per row
  const int nI = static_cast<int>(a.nI), stride = 32 * K + kRowPad;
  float* q_s = tile_smem;
  float* k_s = q_s + nI * stride;
  float* dot_s = k_s + kTileEntries * stride;  // [entry][nI + 1]
  float* g_s = dot_s + kTileEntries * (nI + 1);
  wait_for_producer();
  const int64_t t = blockIdx.y, nv = (a.p0 + a.t0 + t + 1) / a.ratio;
  const int64_t e0 = static_cast<int64_t>(blockIdx.x) * kTileEntries;
  if (nv <= a.top_k || e0 >= nv) return;  // CTA-uniform
  const int tid = static_cast<int>(threadIdx.x);
  const float4* qg = reinterpret_cast<const float4*>(row_ptr<float>(a.qI, a.q_nb, a.t0 + t));
  for (int i = tid; i < nI * kWords; i += kThreads)
    reinterpret_cast<float4*>(q_s + (i / kWords) * stride)[i % kWords] = qg[i];
  for (int i = tid; i < kTileEntries * kWords; i += kThreads) {
    const int e = i / kWords;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // entries past the visible ones (their rows may be anything)
    if (e0 + e < nv) v = reinterpret_cast<const float4*>(row_ptr<float>(a.keys, a.k_nb, e0 + e))[i % kWords];
    reinterpret_cast<float4*>(k_s + e * stride)[i % kWords] = v;
  }
  const float* gt = row_ptr<float>(a.g, a.g_nb, a.t0 + t);
  for (int h = tid; h < nI; h += kThreads) g_s[h] = (gt[h] * a.gs0) * a.gs1;
  __syncthreads();
  constexpr int kGroups = kTileEntries / kEntriesPerThread;
  for (int task = tid; task < nI * kGroups; task += kThreads) {  // a warp: consecutive heads, one key group
    const int h = task % nI, e = (task / nI) * kEntriesPerThread;
    float d[kEntriesPerThread];
    tile_dots<K, kEntriesPerThread>(q_s + h * stride, k_s + e * stride, stride, d);
#pragma unroll
    for (int j = 0; j < kEntriesPerThread; ++j) dot_s[(e + j) * (nI + 1) + h] = d[j];
  }
  __syncthreads();
  if (tid < kTileEntries && e0 + tid < nv) {
    const float* dr = dot_s + tid * (nI + 1);
    float s = 0.0f;
    for (int h = 0; h < nI; ++h) s = hd::fma(g_s[h], dr[h] > 0.0f ? dr[h] : 0.0f, s);
    a.score[t * a.max_nv + e0 + tid] = s;
  }
}

// --- selection ------------------------------------------------------------------------------------

// An unsigned key whose order is the ranking: higher score first, NaN below every number (key 0),
// −0 and +0 one key (they compare equal).
__device__ __forceinline__ uint32_t rank_key(float s) {
  if (s != s) return 0u;
  const uint32_t u = hd::f32_bits(s == 0.0f ? 0.0f : s);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exclusive prefix sum of v over the block (blockDim a multiple of 32); *total = the block's sum.
__device__ __forceinline__ int block_excl_scan(int v, int* warp_sums, int* total) {
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int nw = static_cast<int>(blockDim.x >> 5);
  int x = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(kFullMask, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int s = lane < nw ? warp_sums[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(kFullMask, s, o);
      if (lane >= o) s += y;
    }
    if (lane < nw) warp_sums[lane] = s;
  }
  __syncthreads();
  const int before = warp > 0 ? warp_sums[warp - 1] : 0;
  *total = warp_sums[nw - 1];
  __syncthreads();
  return before + x - v;
}

// The digit of one radix pass, by warp 0: scanning digits from 255 down, the first whose count
// brings the keys counted so far (`above`, those of higher digits) to at least rem, or digit 0 when
// none does before it. Lane l takes digits 255 − 8l … 248 − 8l; its `above` starts at the exclusive
// scan of the lanes' counts; the lowest lane with a hit has the answer. Sets *digit and *above.
__device__ __forceinline__ void find_digit(const unsigned* hist, int rem, int lane, int* digit, int* above_out) {
  unsigned c[8];
  int mine = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    c[i] = hist[255 - 8 * lane - i];
    mine += static_cast<int>(c[i]);
  }
  int incl = mine;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(kFullMask, incl, o);
    if (lane >= o) incl += y;
  }
  int above = incl - mine, found = -1, found_above = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int d = 255 - 8 * lane - i;
    if (found < 0 && (d == 0 || above + static_cast<int>(c[i]) >= rem)) {
      found = d;
      found_above = above;
    }
    above += static_cast<int>(c[i]);
  }
  const int first = __ffs(static_cast<int>(__ballot_sync(kFullMask, found >= 0))) - 1;  // lane 31 always hits
  *digit = __shfl_sync(kFullMask, found, first);
  *above_out = __shfl_sync(kFullMask, found_above, first);
}

// One block per query t0 + t: out[t0 + t] = the top_k entries (ascending), or 0 … visible−1, −1 … when visible ≤ top_k.
__global__ void indexer_select_kernel(const float* score, int64_t max_nv, int64_t p0, int64_t ratio, int64_t t0,
                                      int64_t n, int64_t top_k, void* out, int64_t out_nb) {
  wait_for_producer();
  __shared__ unsigned hist[256];
  __shared__ int warp_sums[32];
  __shared__ uint32_t s_prefix;
  __shared__ int s_rem;
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    int32_t* o = row_ptr<int32_t>(out, out_nb, t0 + t);
    const int64_t nv = (p0 + t0 + t + 1) / ratio;
    if (nv <= top_k) {
      for (int64_t i = threadIdx.x; i < top_k; i += blockDim.x) o[i] = i < nv ? static_cast<int32_t>(i) : -1;
      continue;
    }
    const float* sc = score + t * max_nv;
    // Radix select (8 bits a pass, most significant first) of the key ranked top_k-th: prefix ends
    // as that key T, rem as how many entries of key T belong to the top_k (top_k < nv < 2^31).
    uint32_t prefix = 0, mask = 0;
    int rem = static_cast<int>(top_k);
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = static_cast<int>(threadIdx.x); i < 256; i += static_cast<int>(blockDim.x)) hist[i] = 0;
      __syncthreads();
      for (int64_t w = threadIdx.x; w < nv; w += blockDim.x) {
        const uint32_t k = rank_key(sc[w]);
        if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 0xffu], 1u);
      }
      __syncthreads();
      if (threadIdx.x < 32) {
        int digit = 0, above = 0;
        find_digit(hist, rem, static_cast<int>(threadIdx.x), &digit, &above);
        if (threadIdx.x == 0) {
          s_prefix = prefix | (static_cast<uint32_t>(digit) << shift);
          s_rem = rem - above;
        }
      }
      __syncthreads();
      prefix = s_prefix;
      rem = s_rem;
      mask |= 0xffu << shift;
    }
    // Entry order: keep keys > T, and keys == T while fewer than rem of them are kept. Thread i takes
    // the run of entries [i·L, (i + 1)·L): it counts its keys > T and == T, one block scan of the == T
    // counts says how many of its own it keeps (the lower entries' first), a second scan where its kept
    // ones go; then it writes them walking its run again (ascending entry order overall).
    const int64_t run = (nv + blockDim.x - 1) / blockDim.x, lo = threadIdx.x * run, hi = std::min(nv, lo + run);
    int n_gt = 0, n_eq = 0;
    for (int64_t w = lo; w < hi; ++w) {
      const uint32_t k = rank_key(sc[w]);
      n_gt += k > prefix ? 1 : 0;
      n_eq += k == prefix ? 1 : 0;
    }
    int eq_total = 0, keep_total = 0;
    const int eq_before = block_excl_scan(n_eq, warp_sums, &eq_total);
    const int eq_kept = std::max(0, std::min(n_eq, rem - eq_before));
    const int out_at = block_excl_scan(n_gt + eq_kept, warp_sums, &keep_total);
    int pos = out_at, eq_seen = 0;
    for (int64_t w = lo; w < hi; ++w) {
      const uint32_t k = rank_key(sc[w]);
      if (k > prefix || (k == prefix && eq_seen++ < eq_kept)) o[pos++] = static_cast<int32_t>(w);
    }
  }
}

// Whether the tile form takes these shapes: dI = 32·K (K ∈ {1, 2, 4, 8}), 16-byte aligned rows, the
// staging within kTileSmemMax.
int tile_terms(const Tensor& qI, const Tensor& keys, int64_t nI, int64_t dI) {
  const int64_t K = dI / 32;
  const bool aligned = reinterpret_cast<uintptr_t>(qI.data) % 16 == 0 && qI.nb[1] % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(keys.data) % 16 == 0 && keys.nb[1] % 16 == 0;
  if (dI % 32 != 0 || (K != 1 && K != 2 && K != 4 && K != 8) || !aligned || nI <= 0 ||
      tile_smem_bytes(nI, dI) > kTileSmemMax)
    return 0;
  return static_cast<int>(K);
}

}  // namespace

void CudaBackend::indexer_topk(const Tensor& qI, const Tensor& g, float gscale0, float gscale1, const Tensor& keys,
                               int64_t p0, int64_t ratio, const Tensor& out) {
  const int64_t n = qI.ne[1], nI = g.ne[0], dI = keys.ne[0], top_k = out.ne[0];
  if (Status check = backend::check_indexer_shapes(qI, g, keys, p0, ratio, out); !check.ok()) {
    fail(std::move(check));
    return;
  }
  if (n <= 0 || top_k <= 0) return;
  const int64_t max_nv = (p0 + n) / ratio;  // the last query sees the most entries
  if (max_nv <= top_k) {  // every query: 0 … visible−1, then −1
    launch("indexer_select_kernel", indexer_select_kernel, grid_for(n, 1), kTopkThreads, 0, nullptr, 0, p0, ratio, 0, n,
           top_k, out.data, out.nb[1]);
    return;
  }
  // Scores of a group of queries at a time (the scratch stays within the score budget), sized for the
  // session's bounds on first use.
  const backend::StepBounds& b = bounds();
  const int64_t G = detail::score_group_rows(n, max_nv * 4);
  const int64_t kb = std::max(max_nv, b.index_entries);
  const int64_t bound = detail::score_group_rows(std::max(n, b.tokens), kb * 4) * kb * 4;
  float* score = static_cast<float*>(grow(index_scratch, std::max(G * max_nv * 4, bound)));
  if (score == nullptr) return;
  const int K = forms().indexer_tile ? tile_terms(qI, keys, nI, dI) : 0;
  for (int64_t t0 = 0; t0 < n; t0 += G) {
    const int64_t ng = std::min(G, n - t0);
    const IdxArgs a{qI.data, qI.nb[1], g.data,  g.nb[1], gscale0, gscale1, keys.data, keys.nb[1], p0, ratio,
                    top_k,   t0,       ng,     nI,      dI,      max_nv,  score};
    if (K > 0 && ng <= 65535) {
      const dim3 grid(static_cast<unsigned>((max_nv + kTileEntries - 1) / kTileEntries), static_cast<unsigned>(ng));
      const size_t smem = tile_smem_bytes(nI, dI);
      switch (K) {
        case 1: launch("indexer_score_tile_kernel", indexer_score_tile_kernel<1>, grid, kThreads, smem, a); break;
        case 2: launch("indexer_score_tile_kernel", indexer_score_tile_kernel<2>, grid, kThreads, smem, a); break;
        case 4: launch("indexer_score_tile_kernel", indexer_score_tile_kernel<4>, grid, kThreads, smem, a); break;
        default: launch("indexer_score_tile_kernel", indexer_score_tile_kernel<8>, grid, kThreads, smem, a); break;
      }
    } else {
      launch("indexer_score_kernel", indexer_score_kernel, grid_for(ng * max_nv, kWarpsPerBlock), kThreads, 0, a);
    }
    launch("indexer_select_kernel", indexer_select_kernel, grid_for(ng, 1), kTopkThreads, 0, score, max_nv, p0, ratio,
           t0, ng, top_k, out.data, out.nb[1]);
  }
}

}  // namespace dsv4::cuda
