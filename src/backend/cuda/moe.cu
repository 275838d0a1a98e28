// backend/cuda/moe.cu — CudaBackend::route and moe (backend.h's orders; cpu_moe.cpp is the reference).
//
// route: per token (one warp for up to 256 experts, else one CTA): s_e = sqrt(softplus(logit)), then
//   the K experts by repeated selection (the comparator — higher first, ties → lower e, NaN below
//   every number, NaNs by lower e — is a strict total order, so the k-th pick is the best entry
//   ranking after the (k−1)-th: no sort, no scratch); the weight sum sequentially from 0 in slot order.
// moe: the host never learns the routing (no sync): every (token t, slot k) pair is computed directly
//   from ids[t][k] on the device.
//     1. x quantized once per token to each activation format of the routed and shared gate/up (one
//        launch for all of them);
//     2. G/U [n·K][I]: gate/up rows of expert ids[t][k] against x[t] (the CPU's per-expert batches give
//        the same bits: a product element depends only on its weight row and activation row); the
//        shared expert's Gs/Us per token. Prefill (on average ≥ 4 pairs per expert): the pairs sorted by
//        expert on the device (group_pairs_kernel) and IQ2_XXS / Q2_K experts run as tiles of ≤ 32 pairs
//        of one expert on the tensor cores (moe_mma.cu: each weight block decoded once per tile). (The
//        same tiles of 8 through the general product, which decodes a block again per pair, measured
//        1.86× slower than pair by pair on an H100, 2026-12-07.)
//     3. H = swiglu_clamp(G, U, limit_exp) per pair and Hs = swiglu_clamp(Gs, Us, limit_sh) quantized to the
//        downs' formats in one kernel (the quantizer reads swiglu_clamp of the two floats: the bits of
//        storing H and quantizing it);
//     4. Y [n·K][D]: down rows of expert ids[t][k] against H[pair]; 5. Ys the same for the shared expert;
//     6. combine, one thread per (t, c): out = 0, then k ascending: w == 1 ? out + y : fma(w, y, out),
//        then + ys (plain add).
//   An expert id outside [0, E) makes its pair's rows NaN (the CPU reports out_of_range; here that
//   would need a host sync), so the token's output is NaN.
#include <string>

#include "backend/cuda/matmul.cuh"
#include "backend/cuda/row_ops.cuh"
#include "numerics/det_math.h"
#include "numerics/hd.h"

namespace dsv4::cuda {

using backend::Tensor;

namespace {

constexpr int kThreads = 128;
// moe-side (moe_then): steps of at most this many tokens run the shared expert as side launches (decode
// and short chunks, whose kernels are latency-bound; prefill chunks fill the GPU with each product).
constexpr int64_t kMoeSideMaxTokens = 16;

unsigned grid_for(int64_t items) { return static_cast<unsigned>((items + kThreads - 1) / kThreads); }

__device__ inline float nan_f32() { return hd::f32_from_bits(0x7fc00000u); }

// Whether (sa, a) ranks before (sb, b): higher first; NaN below every number; ties and NaNs among
// themselves → lower index (cpu_moe.cpp's partial_sort comparator).
__device__ inline bool ranks_before(float sa, int64_t a, float sb, int64_t b) {
  const bool na = sa != sa, nb = sb != sb;
  if (na || nb) return na != nb ? nb : a < b;
  return sa > sb || (sa == sb && a < b);
}

struct RouteK {
  const float* logits;
  int64_t l_stride, n, E, K;
  const float* bias;       // or null
  const int32_t* tid2eid;  // or null (hash layers)
  int64_t h_stride, vocab;
  const int32_t* tokens;
  int32_t* ids;
  int64_t i_stride;
  float* weights;
  int64_t w_stride;
  bool norm;
  float scale;
};

__device__ inline float route_score(const float* lt, int64_t e) { return hd::sqrt(det::softplus(lt[e])); }

// One CTA of kRouteThreads per token: scores s_e and selection values into shared memory (thread e
// for e ≡ threadIdx.x), then K rounds of a CTA arg-best under ranks_before (a strict total order:
// any tree gives the CPU's partial_sort pick), then thread 0 the sequential sum and the weights.
constexpr int kRouteThreads = 256;
constexpr int kRouteMaxE = 1024;

__global__ void __launch_bounds__(kRouteThreads) route_kernel(RouteK r) {
  wait_for_producer();
  __shared__ float s_score[kRouteMaxE], s_sel[kRouteMaxE];
  __shared__ bool s_taken[kRouteMaxE];
  __shared__ float b_sel[kRouteThreads];
  __shared__ int32_t b_id[kRouteThreads];
  const int64_t t = blockIdx.x;
  const float* lt = r.logits + t * r.l_stride;
  int32_t* id = r.ids + t * r.i_stride;
  float* wt = r.weights + t * r.w_stride;
  const int tid = static_cast<int>(threadIdx.x);
  if (r.tid2eid != nullptr) {
    if (tid != 0) return;
    const int32_t tok = r.tokens[t];
    bool bad = tok < 0 || tok >= r.vocab;
    if (!bad) {
      const int32_t* h = r.tid2eid + tok * r.h_stride;
      for (int64_t i = 0; i < r.K; ++i) {
        const int32_t e = h[i];
        bad = bad || e < 0 || e >= r.E;
        id[i] = e;
      }
    }
    if (bad) {  // the CPU reports the bad token / table entry; without a sync the token is poisoned
      for (int64_t i = 0; i < r.K; ++i) {
        id[i] = -1;
        wt[i] = nan_f32();
      }
      return;
    }
    float sum = 0.0f;
    for (int64_t i = 0; i < r.K; ++i) sum += route_score(lt, id[i]);
    for (int64_t i = 0; i < r.K; ++i) {
      const float w = route_score(lt, id[i]);
      wt[i] = (r.norm ? hd::div(w, sum + 1e-20f) : w) * r.scale;
    }
    return;
  }
  for (int64_t e = tid; e < r.E; e += kRouteThreads) {
    const float sc = route_score(lt, e);
    s_score[e] = sc;
    s_sel[e] = r.bias != nullptr ? sc + r.bias[e] : sc;
    s_taken[e] = false;
  }
  __syncthreads();
  for (int64_t k = 0; k < r.K; ++k) {
    int32_t best = -1;
    float best_sel = 0.0f;
    for (int64_t e = tid; e < r.E; e += kRouteThreads)
      if (!s_taken[e] && (best < 0 || ranks_before(s_sel[e], e, best_sel, best))) {
        best = static_cast<int32_t>(e);
        best_sel = s_sel[e];
      }
    b_sel[tid] = best_sel;
    b_id[tid] = best;
    __syncthreads();
    for (int st = kRouteThreads / 2; st >= 1; st >>= 1) {
      if (tid < st) {
        const int32_t o = b_id[tid + st];
        if (o >= 0 && (b_id[tid] < 0 || ranks_before(b_sel[tid + st], o, b_sel[tid], b_id[tid]))) {
          b_id[tid] = o;
          b_sel[tid] = b_sel[tid + st];
        }
      }
      __syncthreads();
    }
    if (tid == 0) {
      id[k] = b_id[0];
      if (b_id[0] >= 0) s_taken[b_id[0]] = true;
    }
    __syncthreads();
  }
  if (tid != 0) return;
  float sum = 0.0f;
  for (int64_t i = 0; i < r.K; ++i) sum += s_score[id[i]];
  for (int64_t i = 0; i < r.K; ++i) {
    const float w = s_score[id[i]];
    wt[i] = (r.norm ? hd::div(w, sum + 1e-20f) : w) * r.scale;
  }
}

// route_kernel's selection on one warp per token for E ≤ 32·kRouteLaneMax (DS4: 256 experts; the CTA
// form's six rounds of a shared-memory tree took ~12 µs per token). One CTA of 32·kRouteLaneMax threads
// per token: thread e computes expert e's score (each thread one sqrt(softplus): the warp form's eight
// per lane, unrolled, took 15.7 µs on an H100 for ~3 µs of arithmetic — a long cold instruction stream
// on one SM) into shared memory; then warp 0's lane l holds experts l, l + 32, … in registers; each of
// the K rounds takes every lane's best untaken expert and an xor butterfly of ranks_before (a strict
// total order, so every lane ends with the one best, as any tree would); the owner marks it taken.
// Every lane adds the round's score to its sum (the same K values from 0 in slot order: route_kernel's
// sum) and lane k keeps round k's expert and score, so the K ≤ 32 slots are written by their lanes at
// the end: route_kernel's bits. The bias (a weight) is read before wait_for_producer().
constexpr int kRouteLaneMax = 8;
constexpr int kRouteWarpThreads = 32 * kRouteLaneMax;

__global__ void __launch_bounds__(kRouteWarpThreads) route_warp_kernel(RouteK r) {
  __shared__ float s_score[kRouteWarpThreads], s_sel[kRouteWarpThreads];
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31;
  const int64_t t = blockIdx.x;
  const float bias = r.bias != nullptr && tid < r.E ? r.bias[tid] : 0.0f;
  wait_for_producer();
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

// h[i] = swiglu_clamp(g[i], u[i], limit) (h may be g).
__global__ void swiglu_kernel(const float* g, const float* u, int64_t count, float limit, float* h) {
  wait_for_producer();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < count) h[i] = det::swiglu_clamp(g[i], u[i], limit);
}

// --- pairs grouped by expert (prefill: many pairs per expert) ----------------------------------------------
//
// One CTA sorts moe's n·K pairs by expert, stably (pair index ascending within an expert; deterministic,
// though the products' bits would not depend on it: each element is one pair's), into GroupedPairs
// (matmul.cuh): bucket b < E holds expert b's pairs, bucket E the pairs whose id is outside [0, E).
//   1. counts per bucket (shared-memory integer atomics: order-free); starts and tile bases by two
//      block scans;
//   2. the pairs in chunks of one per thread: a warp's pairs of one bucket find each other with
//      __match_any_sync (rank = the lower lanes among them); per bucket, the warps' counts are turned
//      into offsets in warp order by one thread, after the chunks before it;
//   3. bucket b's tiles: ⌈count / kGroupTile⌉ runs of its entries.
constexpr int kGroupThreads = 1024;
constexpr int kGroupWarps = kGroupThreads / 32;
constexpr int64_t kGroupMaxBuckets = 320;  // shared memory (kGroupWarps + 3) · buckets ints < 48 KiB

struct GroupK {
  const int32_t* ids;
  int64_t ids_stride, n, K, E;
  int32_t* order;
  PairTile* tiles;
  int32_t* n_tiles;
};

// Exclusive prefix sums of v[0 … count) in place (count ≤ 2 · kGroupThreads); returns the total to every
// thread. `warp_sums` holds kGroupWarps + 1 ints.
__device__ int32_t block_exclusive_scan(int32_t* v, int count, int32_t* warp_sums) {
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int i0 = 2 * tid;
  const int32_t a = i0 < count ? v[i0] : 0, b = i0 + 1 < count ? v[i0 + 1] : 0;
  int32_t incl = a + b;
  for (int s = 1; s < 32; s <<= 1) {
    const int32_t up = __shfl_up_sync(0xffffffffu, incl, s);
    if (lane >= s) incl += up;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int32_t w = warp_sums[lane], wincl = w;
    for (int s = 1; s < 32; s <<= 1) {
      const int32_t up = __shfl_up_sync(0xffffffffu, wincl, s);
      if (lane >= s) wincl += up;
    }
    warp_sums[lane] = wincl - w;  // exclusive
    if (lane == 31) warp_sums[kGroupWarps] = wincl;
  }
  __syncthreads();
  const int32_t excl = warp_sums[warp] + incl - (a + b);
  if (i0 < count) v[i0] = excl;
  if (i0 + 1 < count) v[i0 + 1] = excl + a;
  __syncthreads();
  return warp_sums[kGroupWarps];
}

__global__ void __launch_bounds__(kGroupThreads) group_pairs_kernel(GroupK g) {
  __shared__ int32_t warp_sums[kGroupWarps + 1];
  extern __shared__ int32_t group_smem[];
  wait_for_producer();
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int B = static_cast<int>(g.E) + 1;
  int32_t* start = group_smem;       // [B]: bucket starts in order
  int32_t* tbase = start + B;        // [B]: first tile of each bucket
  int32_t* cursor = tbase + B;       // [B]: entries placed so far
  int32_t* wc = cursor + B;          // [kGroupWarps][B]: a chunk's per-warp counts, then offsets
  const int64_t nk = g.n * g.K;
  const auto bucket = [&](int64_t p) {
    const int32_t e = g.ids[(p / g.K) * g.ids_stride + p % g.K];
    return e >= 0 && e < g.E ? e : static_cast<int32_t>(g.E);
  };
  for (int i = tid; i < B; i += kGroupThreads) start[i] = 0, cursor[i] = 0;
  __syncthreads();
  for (int64_t p = tid; p < nk; p += kGroupThreads) atomicAdd(&start[bucket(p)], 1);
  __syncthreads();
  for (int i = tid; i < B; i += kGroupThreads) tbase[i] = (start[i] + kGroupTile - 1) / kGroupTile;
  __syncthreads();
  block_exclusive_scan(start, B, warp_sums);
  const int32_t n_tiles = block_exclusive_scan(tbase, B, warp_sums);

  const unsigned below = (1u << lane) - 1u;
  for (int64_t p0 = 0; p0 < nk; p0 += kGroupThreads) {
    for (int i = tid; i < kGroupWarps * B; i += kGroupThreads) wc[i] = 0;
    __syncthreads();
    const int64_t p = p0 + tid;
    const int32_t b = p < nk ? bucket(p) : -1;
    const unsigned same = __match_any_sync(0xffffffffu, b);
    if (b >= 0 && (same & below) == 0) wc[warp * B + b] = __popc(same);  // the bucket's lowest lane
    __syncthreads();
    for (int i = tid; i < B; i += kGroupThreads) {
      int32_t at = cursor[i];
      for (int w = 0; w < kGroupWarps; ++w) {
        const int32_t c = wc[w * B + i];
        wc[w * B + i] = at;
        at += c;
      }
      cursor[i] = at;
    }
    __syncthreads();
    if (b >= 0) g.order[start[b] + wc[warp * B + b] + __popc(same & below)] = static_cast<int32_t>(p);
    __syncthreads();
  }
  for (int i = tid; i < B; i += kGroupThreads) {
    const int32_t count = cursor[i];
    for (int32_t k = 0; k * kGroupTile < count; ++k) {
      PairTile t;
      t.expert = i < g.E ? i : -1;
      t.first = start[i] + k * kGroupTile;
      t.count = count - k * kGroupTile < kGroupTile ? count - k * kGroupTile : kGroupTile;
      g.tiles[tbase[i] + k] = t;
    }
  }
  if (tid == 0) *g.n_tiles = n_tiles;
}

struct CombineK {
  const float* y;   // [n·K][D]
  const float* ys;  // [n][D] or null
  const float* weights;
  int64_t w_stride, n, K, D;
  float* out;
  int64_t o_stride;
};

// out[t][col]: the pairs' down rows weighted in k order (a weight of exactly 1: a plain add), then the
// shared expert's row.
__device__ __forceinline__ float combine_at(const CombineK& c, int64_t t, int64_t col) {
  const float* wt = c.weights + t * c.w_stride;
  float o = 0.0f;
  for (int64_t k = 0; k < c.K; ++k) {
    const float w = wt[k];
    const float y = c.y[(t * c.K + k) * c.D + col];
    o = w == 1.0f ? o + y : hd::fma(w, y, o);
  }
  if (c.ys != nullptr) o = o + c.ys[t * c.D + col];
  return o;
}

__global__ void combine_kernel(CombineK c) {
  wait_for_producer();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= c.n * c.D) return;
  const int64_t t = i / c.D, col = i % c.D;
  c.out[t * c.o_stride + col] = combine_at(c, t, col);
}

// moe_hc_post's end: combine, then hc_post (norm_rope_hc.cu's hc_post_kernel) on the combined row, as one
// kernel. Thread (t, j, col) computes out[t][col] as combine_kernel does (each of the hc threads of a
// column computes the same bits; j = 0 stores it) and X_out[t][j·D + col] = post[t][j]·out[t][col], then
// + comb[t][i·hc + j]·X[t][i·D + col] (fma, i ascending), as hc_post_kernel does.
struct CombineHcPostK {
  CombineK c;
  const float* X;
  const float* post;
  const float* comb;
  int64_t X_stride, post_stride, comb_stride, hc;  // floats
  float* X_out;
  int64_t X_out_stride;
};

__global__ void combine_hc_post_kernel(CombineHcPostK k) {
  wait_for_producer();
  const int64_t D = k.c.D, hc = k.hc, total = k.c.n * hc * D;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total; e += stride) {
    const int64_t col = e % D, j = (e / D) % hc, t = e / (D * hc);
    const float y = combine_at(k.c, t, col);
    if (j == 0) k.c.out[t * k.c.o_stride + col] = y;
    k.X_out[t * k.X_out_stride + j * D + col] = rowops::hc_post_value(
        k.post[t * k.post_stride + j], y, k.comb + t * k.comb_stride, k.X + t * k.X_stride + col, D, hc, j);
  }
}

}  // namespace

void CudaBackend::route(const backend::RouteArgs& r) {
  const TwinScope twin_scope(*this);  // writes only ids and weights: x's twins stay
  twins_note_write(r.ids);
  twins_note_write(r.weights);
  const int64_t n = r.logits.ne[1], E = r.logits.ne[0], K = r.k;
  const bool hash = r.tid2eid.valid();
  const int64_t n_tokens = r.tokens.ne[0] * r.tokens.ne[1] * r.tokens.ne[2] * r.tokens.ne[3];
  if (K <= 0 || K > E || r.ids.ne[0] != K || r.ids.ne[1] != n || r.weights.ne[0] != K || r.weights.ne[1] != n ||
      (r.bias.valid() && r.bias.ne[0] != E) || (hash && (r.tid2eid.ne[0] != K || n_tokens != n))) {
    fail(invalid_argument("route: shapes do not fit (" + std::to_string(n) + " tokens, " + std::to_string(E) +
                          " experts, k " + std::to_string(K) + ")"));
    return;
  }
  if (n <= 0) return;
  RouteK k;
  k.logits = static_cast<const float*>(r.logits.data);
  k.l_stride = r.logits.nb[1] / 4;
  k.n = n;
  k.E = E;
  k.K = K;
  k.bias = r.bias.valid() ? static_cast<const float*>(r.bias.data) : nullptr;
  k.tid2eid = hash ? static_cast<const int32_t*>(r.tid2eid.data) : nullptr;
  k.h_stride = hash ? r.tid2eid.nb[1] / 4 : 0;
  k.vocab = hash ? r.tid2eid.ne[1] : 0;
  k.tokens = hash ? static_cast<const int32_t*>(r.tokens.data) : nullptr;
  k.ids = static_cast<int32_t*>(r.ids.data);
  k.i_stride = r.ids.nb[1] / 4;
  k.weights = static_cast<float*>(r.weights.data);
  k.w_stride = r.weights.nb[1] / 4;
  k.norm = r.norm;
  k.scale = r.scale;
  if (!hash && E > kRouteMaxE) {
    fail(invalid_argument("route: " + std::to_string(E) + " experts; the CUDA router handles at most " +
                          std::to_string(kRouteMaxE)));
    return;
  }
  if (!hash && E <= 32 * kRouteLaneMax && K <= 32) {
    launch("route_warp_kernel", route_warp_kernel, static_cast<unsigned>(n), kRouteWarpThreads, 0, k);
    return;
  }
  launch("route_kernel", route_kernel, static_cast<unsigned>(n), kRouteThreads, 0, k);
}

void CudaBackend::moe(const backend::MoeArgs& m) { moe_then(m, nullptr); }

void CudaBackend::moe_hc_post(const backend::MoeArgs& m, const Tensor& X, const Tensor& post, const Tensor& comb,
                              const Tensor& X_out) {
  // hc_post's shapes (y = m.out), F32 rows with contiguous elements: the fused end; otherwise the two ops
  // (hc_post says what does not fit).
  const int64_t n = m.out.ne[1], D = m.out.ne[0], hc = post.ne[0];
  const bool fits = hc > 0 && X.ne[0] == hc * D && X.ne[1] == n && X_out.ne[0] == hc * D && X_out.ne[1] == n &&
                    post.ne[1] == n && comb.ne[0] == hc * hc && comb.ne[1] == n &&
                    (X.nb[1] | post.nb[1] | comb.nb[1] | X_out.nb[1]) % 4 == 0;
  if (!fits) return Backend::moe_hc_post(m, X, post, comb, X_out);
  const HcPostTail tail{&X, &post, &comb, &X_out};
  moe_then(m, &tail);
}

void CudaBackend::moe_then(const backend::MoeArgs& m, const HcPostTail* tail) {
  const TwinScope twin_scope(*this);  // a twin of x (its producer's quantization) stays usable here
  twins_note_write(m.out);
  if (tail != nullptr) twins_note_write(*tail->X_out);
  const Tensor& x = m.x;
  const int64_t n = x.ne[1], D = x.ne[0], K = m.ids.ne[0], E = m.gate_exps.ne[2], I = m.gate_exps.ne[1];
  const bool shared = m.gate_sh.valid();
  if (Status st = backend::check_moe_shapes(m); !st.ok()) {
    fail(std::move(st));
    return;
  }
  const int64_t Is = shared ? m.gate_sh.ne[1] : 0;
  // The products' checks (type with kernels, row lengths fit the blocks), as the CPU's matmul_batch.
  const struct {
    TensorType type;
    int64_t in;
  } products[] = {{m.gate_exps.type, D}, {m.up_exps.type, D}, {m.down_exps.type, I},
                  {shared ? m.gate_sh.type : TensorType::kF32, D}, {shared ? m.up_sh.type : TensorType::kF32, D},
                  {shared ? m.down_sh.type : TensorType::kF32, Is}};
  for (int i = 0; i < (shared ? 6 : 3); ++i) {
    Status s = check_product(products[i].type, products[i].in);
    if (!s.ok()) return fail(std::move(s));
  }
  if (shared && !m.gate_sh.contiguous_rows()) {
    return fail(invalid_argument("moe: shared gate weight without contiguous rows"));
  }
  if (n <= 0 || D <= 0) return;
  const int64_t nk = n * K;
  const float* xd = static_cast<const float*>(x.data);
  const int64_t xs = x.nb[1] / 4;
  const auto* ids = static_cast<const int32_t*>(m.ids.data);
  const int64_t ids_stride = m.ids.nb[1] / 4;

  // --- scratch: floats in moe_scratch, quantized activations in act_scratch (one grow each) ---------
  // Sized for max(n, the reserved step's tokens) so that later (larger) steps do not grow them; the
  // regions are laid out for that size.
  const int64_t ns = n > bounds().tokens ? n : bounds().tokens, nks = ns * K;
  const int64_t f4 = static_cast<int64_t>(sizeof(float));
  const int64_t g_bytes = align256(nks * I * f4), y_bytes = align256(nks * D * f4);
  const int64_t gs_bytes = align256(ns * Is * f4), ys_bytes = shared ? align256(ns * D * f4) : 0;
  // The pairs grouped by expert (prefill: on average 4 or more pairs per expert, experts of a type the
  // tensor-core form takes): order [nks] ints, the tiles, their count.
  const bool grouped = forms().grouped_experts && nk >= 4 * E && E + 1 <= kGroupMaxBuckets &&
                       (grouped_product_supported(m.gate_exps.type, D) || grouped_product_supported(m.up_exps.type, D) ||
                        grouped_product_supported(m.down_exps.type, I));
  const int64_t max_tiles = (nks + kGroupTile - 1) / kGroupTile + E + 1;
  const int64_t order_bytes = grouped ? align256(nks * 4) : 0,
                tiles_bytes = grouped ? align256(max_tiles * static_cast<int64_t>(sizeof(PairTile))) + 256 : 0;
  const int64_t moe_bytes = 2 * g_bytes + y_bytes + 2 * gs_bytes + ys_bytes + order_bytes + tiles_bytes;
  const ActFormat fg = act_format(m.gate_exps.type), fu = act_format(m.up_exps.type),
                  fd = act_format(m.down_exps.type);
  const ActFormat fgs = shared ? act_format(m.gate_sh.type) : ActFormat::kF32,
                  fus = shared ? act_format(m.up_sh.type) : ActFormat::kF32,
                  fds = shared ? act_format(m.down_sh.type) : ActFormat::kF32;
  // x regions, one per distinct quantized format among the four x consumers.
  ActFormat x_formats[4];
  int n_xf = 0;
  for (ActFormat f : {fg, fu, fgs, fus}) {
    if (f == ActFormat::kF32) continue;
    bool have = false;
    for (int i = 0; i < n_xf; ++i) have = have || x_formats[i] == f;
    if (!have) x_formats[n_xf++] = f;
  }
  int64_t x_off[4] = {0, 0, 0, 0}, act_bytes = 0;
  for (int i = 0; i < n_xf; ++i) {
    x_off[i] = act_bytes;
    act_bytes += align256(act_row_bytes(x_formats[i], D) * ns);
  }
  const int64_t h_off = act_bytes;
  if (fd != ActFormat::kF32) act_bytes += align256(act_row_bytes(fd, I) * nks);
  const int64_t hs_off = act_bytes;
  if (shared && fds != ActFormat::kF32) act_bytes += align256(act_row_bytes(fds, Is) * ns);

  auto* fs = static_cast<uint8_t*>(grow(moe_scratch, moe_bytes > 0 ? moe_bytes : 256));
  if (fs == nullptr) return;
  uint8_t* as = nullptr;
  if (act_bytes > 0) {
    as = static_cast<uint8_t*>(grow(act_scratch, act_bytes));
    if (as == nullptr) return;
  }
  float* G = reinterpret_cast<float*>(fs);
  float* U = reinterpret_cast<float*>(fs + g_bytes);
  float* Y = reinterpret_cast<float*>(fs + 2 * g_bytes);
  float* Gs = reinterpret_cast<float*>(fs + 2 * g_bytes + y_bytes);
  float* Us = reinterpret_cast<float*>(fs + 2 * g_bytes + y_bytes + gs_bytes);
  float* Ys = shared ? reinterpret_cast<float*>(fs + 2 * g_bytes + y_bytes + 2 * gs_bytes) : nullptr;
  GroupedPairs pairs;
  if (grouped) {
    uint8_t* gb = fs + 2 * g_bytes + y_bytes + 2 * gs_bytes + ys_bytes;
    GroupK k{ids, ids_stride, n, K, E, reinterpret_cast<int32_t*>(gb), reinterpret_cast<PairTile*>(gb + order_bytes),
             reinterpret_cast<int32_t*>(gb + order_bytes + tiles_bytes - 256)};
    pairs = GroupedPairs{k.order, k.tiles, k.n_tiles, max_tiles};
    const int64_t smem = (kGroupWarps + 3) * (E + 1) * static_cast<int64_t>(sizeof(int32_t));
    launch("group_pairs_kernel", group_pairs_kernel, 1u, kGroupThreads, static_cast<size_t>(smem), k);
  }

  // 1. x quantized once per token and format that a product needs (all of them in one launch).
  // A format x's producer quantized already (a twin: cuda_backend.cuh) is not quantized again.
  ActQuantJob x_jobs[4];
  const uint8_t* x_rows[4] = {};
  int n_xj = 0;
  for (int i = 0; i < n_xf; ++i) {
    if (const QuantTwin* twin = find_quant_twin(*this, x, x_formats[i]); twin != nullptr) {
      x_rows[i] = twin->act;
      continue;
    }
    x_rows[i] = as + x_off[i];
    x_jobs[n_xj++] = ActQuantJob{x_formats[i], xd, nullptr, 0.0f, xs, n, D, as + x_off[i]};
  }
  enqueue_act_quant_jobs(*this, std::span<const ActQuantJob>(x_jobs, static_cast<size_t>(n_xj)));
  // The activation rows of x for a consumer of format f.
  auto x_act = [&](ActFormat f, const void** act, int64_t* stride) {
    *act = xd;
    *stride = x.nb[1];
    for (int i = 0; i < n_xf; ++i)
      if (x_formats[i] == f) {
        *act = x_rows[i];
        *stride = act_row_bytes(f, D);
      }
  };
  // (Products that quantized their own row — one copy per CTA — measured 0.73x the decode speed of one
  // quantization kernel before them on an H100, so every product reads a quantized row.)
  auto submit = [&](ProductArgs a, const void* act, int64_t act_stride) {
    a.act = act;
    a.act_stride = act_stride;
    enqueue_product(*this, a);
  };
  auto submit_x = [&](ProductArgs a, ActFormat f) {
    x_act(f, &a.act, &a.act_stride);
    enqueue_product(*this, a);
  };
  // A routed product: over the grouped pairs when they are, else pair by pair.
  auto submit_routed = [&](ProductArgs a, const void* act, int64_t act_stride) {
    a.act = act;
    a.act_stride = act_stride;
    if (grouped && enqueue_grouped_product(*this, a, pairs)) return;
    enqueue_product(*this, a);
  };
  auto submit_routed_x = [&](ProductArgs a, ActFormat f) {
    x_act(f, &a.act, &a.act_stride);
    submit_routed(a, a.act, a.act_stride);
  };

  // A routed product over the n·K pairs: weight rows of expert ids[t][k] (activation row pair / act_div).
  // Gate and up share one launch when they are the same kind of weight (type, row and expert strides).
  auto pair_ok = [](const Tensor& g, const Tensor& u) {
    return g.type == u.type && g.nb[1] == u.nb[1] && g.nb[2] == u.nb[2] && g.ne[0] == u.ne[0] && g.ne[1] == u.ne[1];
  };
  auto routed = [&](const Tensor& w, int64_t in, int64_t out, int64_t act_div, float* y, const Tensor* w2 = nullptr,
                    float* y2 = nullptr) {
    ProductArgs a;
    a.type = w.type;
    a.w = w.data;
    a.w_row_bytes = w.nb[1];
    a.in = in;
    a.out = out;
    a.ids = ids;
    a.id_k = K;
    a.id_stride = ids_stride;
    a.n_expert = E;
    a.expert_bytes = w.nb[2];
    a.act_div = act_div;
    a.rows = nk;
    a.y = y;
    a.y_stride = out;
    if (w2 != nullptr) {
      a.w_z1 = w2->data;
      a.y_z1 = y2;
    }
    return a;
  };
  auto dense = [&](const Tensor& w, int64_t in, int64_t out, float* y, const Tensor* w2 = nullptr,
                   float* y2 = nullptr) {
    ProductArgs a;
    a.type = w.type;
    a.w = w.data;
    a.w_row_bytes = w.nb[1];
    a.in = in;
    a.out = out;
    a.rows = n;
    a.y = y;
    a.y_stride = out;
    if (w2 != nullptr) {
      a.w_z1 = w2->data;
      a.y_z1 = y2;
    }
    return a;
  };

  // 2. The shared expert's gate / up per token, then gate / up per pair (activation row t = pair / K). In
  // this order the shared product (fixed weights, loaded before its wait) overlaps the routing kernel,
  // and the routed one runs two launches after the routing: its blocks start once the routing is done,
  // so they prefetch their experts' rows while the shared product runs (matmul_decode.cu).
  // With moe-side (decode-sized steps) the shared expert's three kernels (gate / up, h, down) are side
  // launches instead: they run beside the routed experts' chain (all of them latency-bound at a few
  // tokens) and the combine joins them. Same kernels, same arguments: the same bits.
  const bool side = shared && forms().moe_side && n <= kMoeSideMaxTokens;
  const auto shared_gate_up = [&] {
    if (pair_ok(m.gate_sh, m.up_sh)) {
      submit_x(dense(m.gate_sh, D, Is, Gs, &m.up_sh, Us), fgs);
    } else {
      submit_x(dense(m.gate_sh, D, Is, Gs), fgs);
      submit_x(dense(m.up_sh, D, Is, Us), fus);
    }
  };
  // h = swiglu_clamp(g, u, limit) for the pairs ([nk][I]) and the shared expert ([n][Is]), quantized for
  // their down products in one launch without storing h (the bits of storing h and quantizing it); for
  // float down weights stored in place of g.
  ActQuantJob h_jobs[2];
  int n_hj = 0;
  const auto h_rows = [&](ActFormat f, float* g, const float* u, float limit, int64_t rows, int64_t width, int64_t h_at,
                          const void** act, int64_t* stride) {
    if (f != ActFormat::kF32) {
      h_jobs[n_hj++] = ActQuantJob{f, g, u, limit, width, rows, width, as + h_at};
      *act = as + h_at;
      *stride = act_row_bytes(f, width);
    } else {
      if (rows * width > 0)
        launch("swiglu_kernel", swiglu_kernel, grid_for(rows * width), kThreads, 0, g, u, rows * width, limit, g);
      *act = g;
      *stride = width * 4;
    }
  };
  const void* h_act = nullptr;
  const void* hs_act = nullptr;
  int64_t h_stride = 0, hs_stride = 0;
  if (side) {  // the shared expert whole, as side launches (each waits for the one before it)
    const SideScope side_scope(*this);
    shared_gate_up();
    h_rows(fds, Gs, Us, m.limit_sh, n, Is, hs_off, &hs_act, &hs_stride);
    enqueue_act_quant_jobs(*this, std::span<const ActQuantJob>(h_jobs, static_cast<size_t>(n_hj)));
    submit(dense(m.down_sh, Is, D, Ys), hs_act, hs_stride);
    n_hj = 0;
  }
  if (shared && !side) shared_gate_up();
  if (nk > 0) {
    if (pair_ok(m.gate_exps, m.up_exps)) {  // gate and up in one launch
      submit_routed_x(routed(m.gate_exps, D, I, K, G, &m.up_exps, U), fg);
    } else {
      submit_routed_x(routed(m.gate_exps, D, I, K, G), fg);
      submit_routed_x(routed(m.up_exps, D, I, K, U), fu);
    }
  }

  // 3. h for the pairs (and the shared expert without moe-side), quantized in one launch.
  if (nk > 0) h_rows(fd, G, U, m.limit_exp, nk, I, h_off, &h_act, &h_stride);
  if (shared && !side) h_rows(fds, Gs, Us, m.limit_sh, n, Is, hs_off, &hs_act, &hs_stride);
  enqueue_act_quant_jobs(*this, std::span<const ActQuantJob>(h_jobs, static_cast<size_t>(n_hj)));

  // 4-5. down per pair and for the shared expert.
  if (nk > 0) submit_routed(routed(m.down_exps, I, D, 1, Y), h_act, h_stride);
  if (shared && !side) submit(dense(m.down_sh, Is, D, Ys), hs_act, hs_stride);
  // 6. combine.
  CombineK c;
  c.y = Y;
  c.ys = Ys;
  c.weights = static_cast<const float*>(m.weights.data);
  c.w_stride = m.weights.nb[1] / 4;
  c.n = n;
  c.K = K;
  c.D = D;
  c.out = static_cast<float*>(m.out.data);
  c.o_stride = m.out.nb[1] / 4;
  if (tail == nullptr) {
    if (side) join_side();  // Ys comes from the side launches
    launch("combine_kernel", combine_kernel, grid_for(n * D), kThreads, 0, c);
    return;
  }
  CombineHcPostK k;
  k.c = c;
  k.X = static_cast<const float*>(tail->X->data);
  k.post = static_cast<const float*>(tail->post->data);
  k.comb = static_cast<const float*>(tail->comb->data);
  k.X_stride = tail->X->nb[1] / 4;
  k.post_stride = tail->post->nb[1] / 4;
  k.comb_stride = tail->comb->nb[1] / 4;
  k.hc = tail->post->ne[0];
  k.X_out = static_cast<float*>(tail->X_out->data);
  k.X_out_stride = tail->X_out->nb[1] / 4;
  join_side();  // post and comb may come from a side Sinkhorn (hc_pre_norm)
  launch("combine_hc_post_kernel", combine_hc_post_kernel, grid_for(n * k.hc * D), kThreads, 0, k);
}

}  // namespace dsv4::cuda
