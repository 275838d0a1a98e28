// backend/cuda/hc_pre_norm.cu — CudaBackend::hc_pre_norm: a block's input (backend.h: rms_norm(X) →
// matmul(fn) → hc_pre → rms_norm(collapsed, norm)) as one kernel per step instead of four (~28 µs of
// four latency-bound kernels per block in a Flash decode step, 86 blocks).
//
// Layout: one cluster of kHcCluster CTAs per token (grid (kHcCluster, n)), the token's streams X[t]
// (hc·D floats) whole in every CTA's shared memory.
//   1. Before wait_for_producer(): CTA `rank` copies its mix rows of fn (rows rank, rank + C, …: the
//      weights, never written by a step) into shared memory by the copy engine (preload::BulkStage), and
//      the small weights (scale, base, its slice of norm), so they overlap the kernel before.
//   2. After it: X[t] into shared memory (kHcXPieces pieces, an mbarrier each: one took 6.5 K cycles with the norm, four 7.2 K); warp 0 runs
//      rms_norm's lane chains over each piece as it lands (every CTA the same chains in the same order:
//      the same inv in each).
//   3. One warp per mix row: the F32-activation product's lane chains, fma(w_i, X_i·inv, p) with
//      X_i·inv rounded first (the streams rms_norm would have stored), then the shuffle tree: the
//      bits of matmul(fn, streams) (matmul_decode.cu's whole-row form).
//   4. The mix values (and the hc pre weights) are gathered from the cluster's CTAs through distributed
//      shared memory.
//   5. The warps of every CTA collapse the whole row into shared memory, run rms_norm's chains over it
//      and write the CTA's slice of x (and its quantized twins); CTA 0 writes mix. post and comb (the
//      Sinkhorn: rowops::hc_mix_warp, hc_pre's warp form, 20 rounds, 9.4 K cycles — longer than
//      everything else after the products) come from a side launch (launch_hc_mix, step_graph.cuh) that
//      runs beside the block's next kernels: only its hc_post reads them, and joins it. With
//      --cuda-disable hc-side CTA 0's last warp runs it here instead, this kernel's critical path.
// The chains of steps 2, 3 and 5 are single warps on 512- and 128-long dependent chains: they use
// rowops::lane_fma_chain_pipelined. Clock stamps per phase on an H100 (12-layer Flash, decode): before
// these changes issue 2.3 K cycles, X wait 2.6 K, norm 3.9 K, products 6.0 K, cluster sync 1.3 K,
// Sinkhorn 17.6 K (CTA 0; the others waited for it), collapse 6.4 K — 34.5 K in all; after the
// gathered-shuffle Sinkhorn, the split warps and the unrolled collapse: Sinkhorn 9.4 K, collapse 3.9 K,
// 27.5 K in all (ncu: 22.4 → 16.1 µs per call).
// So mix, post, comb and x carry the four ops' bits (conformance case HcPreNorm; the model tests
// compare whole forward passes with the CPU). streams and collapsed are not written (backend.h: their
// contents afterwards are unspecified).
//
// Taken for float fn types (F32, F16, BF16) when hc·hc ≤ 32, n ≤ kHcMaxTokens and X[t], the CTA's fn
// rows and the collapsed row fit in shared memory; anything else runs Backend::hc_pre_norm (the four
// ops).
#include <cooperative_groups.h>

#include <string>

#include "backend/cuda/cuda_backend.cuh"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/matmul_types.cuh"
#include "backend/cuda/preload.cuh"
#include "backend/cuda/row_ops.cuh"
#include "numerics/hd.h"

namespace dsv4::cuda {

namespace {

namespace cg = cooperative_groups;
using namespace detail;
using rowops::row_ptr;

constexpr int kHcCluster = 8;
constexpr int kHcThreads = 256;
constexpr int kHcWarps = kHcThreads / 32;
constexpr int kHcMaxStreams = 5;        // hc·hc ≤ 32
constexpr int kHcMaxMix = 64;           // (2 + hc)·hc for hc ≤ 5
constexpr int kHcXPieces = 1;           // X[t] in pieces the norm chains could start on: 4 measured slower (7.2 K
                                        // cycles for X and the norm against 2.6 K + 3.9 K with one)
constexpr int64_t kHcMaxTokens = 16;    // decode and short chunks; longer prefills run the four ops
constexpr int64_t kHcSmemMax = 200 * 1024;  // dynamic shared memory (sm_90 allows 227 KiB per CTA)

struct HcFusedArgs {
  const float* X = nullptr;
  int64_t X_nb = 0;
  const uint8_t* fn = nullptr;
  int64_t fn_row_bytes = 0;
  const float* scale3 = nullptr;
  const float* base = nullptr;
  float hc_eps = 0;
  int64_t iters = 0;
  const float* norm = nullptr;  // or null: no weight
  float rms_eps = 0;
  float* mix = nullptr;
  int64_t mix_nb = 0;
  float* x = nullptr;
  int64_t x_nb = 0;
  float* post = nullptr;
  int64_t post_nb = 0;
  float* comb = nullptr;
  int64_t comb_nb = 0;
  int hc = 0, n_mix = 0, rows_per_cta = 0;
  int64_t D = 0;
  // CTA 0's last warp runs the Sinkhorn (post, comb); else CTA 0 writes mix and a side launch
  // (launch_hc_mix) computes post and comb beside the chain's next kernels.
  bool sinkhorn = true;
  // x quantized for its matmuls (the backend's twins, MatmulConsumers): twin i's row t at
  // xq[i] + t·xq_row_bytes[i], in format xq_format[i]; each CTA quantizes the blocks of its slice of x
  // (the slice a multiple of every twin's block).
  int n_xq = 0;
  uint8_t* xq[CudaBackend::kMaxTwins] = {};
  int64_t xq_row_bytes[CudaBackend::kMaxTwins] = {};
  ActFormat xq_format[CudaBackend::kMaxTwins] = {};
  // Shared memory: Xs [hc·D floats] at 0, the CTA's fn rows at xs_bytes (ws_row_bytes apart), the
  // collapsed row [D floats] after them, then the CTA's slice of norm [⌈D / kHcCluster⌉ floats].
  int64_t xs_bytes = 0, ws_row_bytes = 0;
};

__host__ __device__ constexpr int64_t round16(int64_t b) { return (b + 15) / 16 * 16; }

// Named barrier 1 over the CTA's first `threads` threads (a multiple of 32): the warps that are not
// running the Sinkhorn.
__device__ __forceinline__ void workers_sync(int threads) { asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory"); }

template <typename Ops>
__global__ void __cluster_dims__(kHcCluster, 1, 1) __launch_bounds__(kHcThreads) hc_pre_norm_kernel(HcFusedArgs a) {
  extern __shared__ __align__(16) unsigned char hc_smem[];
  __shared__ float mix_own[kHcWarps];  // this CTA's rows: slot k is mix row rank + k·kHcCluster
  __shared__ float mix_all[kHcMaxMix];
  __shared__ float inv_s[2];
  __shared__ float pre_s[kHcMaxStreams];
  __shared__ float scale_s[3], base_s[kHcMaxMix];
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int64_t t = blockIdx.y;
  const int HD = a.hc * static_cast<int>(a.D), D = static_cast<int>(a.D);  // both fit in shared memory
  float* Xs = reinterpret_cast<float*>(hc_smem);
  uint8_t* Ws = hc_smem + a.xs_bytes;
  float* coll = reinterpret_cast<float*>(Ws + a.rows_per_cta * a.ws_row_bytes);

  // 1. The CTA's fn rows (weights) while the producer still runs, by the copy engine.
  __shared__ uint64_t bars[1 + kHcXPieces];
  preload::BulkStage w_stage(&bars[0]);
  w_stage.init(tid);
  for (int q = 0; q < kHcXPieces; ++q) preload::BulkStage(&bars[1 + q]).init(tid);
  __syncthreads();
  int64_t w_bulk = 0;
  for (int k = 0; k < a.rows_per_cta; ++k) {
    const int o = rank + k * kHcCluster;
    if (o < a.n_mix && preload::BulkStage::bulk(Ws + k * a.ws_row_bytes, a.fn + o * a.fn_row_bytes, a.fn_row_bytes))
      w_bulk += a.fn_row_bytes;
  }
  w_stage.expect(tid, w_bulk);
  for (int k = 0; k < a.rows_per_cta; ++k) {
    const int o = rank + k * kHcCluster;
    if (o < a.n_mix) w_stage.add(Ws + k * a.ws_row_bytes, a.fn + o * a.fn_row_bytes, a.fn_row_bytes, tid, kHcThreads);
  }
  // The small weights the later steps read (scale, base, this CTA's slice of norm) too: global loads
  // on the critical path otherwise (the Sinkhorn's first line, the pre weights, the x writes).
  const int slice = (D + kHcCluster - 1) / kHcCluster, c0 = rank * slice < D ? rank * slice : D,
            c_end = (rank + 1) * slice < D ? (rank + 1) * slice : D;
  float* norm_s = coll + D;
  if (tid < 3) scale_s[tid] = a.scale3[tid];
  if (tid < a.n_mix) base_s[tid] = a.base[tid];
  if (a.norm != nullptr)
    for (int c = c0 + tid; c < c_end; c += kHcThreads) norm_s[c - c0] = a.norm[c];
  wait_for_producer();

  // 2. X[t] in kHcXPieces pieces (a barrier each), warp 0 running the streams' norm chains over each piece
  // as it lands; then the inverse norm. A piece the engine cannot copy (odd test shapes) is copied by the
  // threads, and then a CTA barrier comes before the chains.
  const float* x_src = row_ptr<float>(a.X, a.X_nb, t);
  const int piece = (HD + 32 * kHcXPieces - 1) / (32 * kHcXPieces) * 32;  // elements, a multiple of 32
  bool x_bulk = true;
  const auto piece_start = [piece, HD](int q) { return q * piece < HD ? q * piece : HD; };
  for (int q = 0; q < kHcXPieces; ++q) {
    const int lo = piece_start(q), hi = piece_start(q + 1);
    preload::BulkStage x_stage(&bars[1 + q]);
    const bool bulk = preload::BulkStage::bulk(Xs + lo, x_src + lo, int64_t{4} * (hi - lo));
    x_bulk = x_bulk && (bulk || hi == lo);
    x_stage.expect(tid, bulk ? int64_t{4} * (hi - lo) : 0);
    x_stage.add(reinterpret_cast<uint8_t*>(Xs + lo), reinterpret_cast<const uint8_t*>(x_src + lo), int64_t{4} * (hi - lo),
                tid, kHcThreads);
  }
  if (!x_bulk) __syncthreads();
  if (warp == 0) {
    const auto x_at = [Xs](int j) { return Xs[j]; };
    float ss = 0.0f;
    for (int q = 0; q < kHcXPieces; ++q) {
      preload::BulkStage(&bars[1 + q]).wait();
      ss = rowops::lane_fma_chain_pipelined<16>(ss, piece_start(q), piece_start(q + 1), lane, x_at, x_at);
    }
    ss = rowops::warp_tree(ss);
    if (lane == 0) inv_s[0] = rowops::rms_inverse(ss, HD, a.rms_eps);
  } else {
    for (int q = 0; q < kHcXPieces; ++q) preload::BulkStage(&bars[1 + q]).wait();
  }
  w_stage.wait();
  __syncthreads();
  const float inv = inv_s[0];

  // 3. This CTA's mix rows, one warp each.
  for (int k = warp; k < a.rows_per_cta; k += kHcWarps) {
    if (rank + k * kHcCluster >= a.n_mix) continue;
    const uint8_t* w = Ws + k * a.ws_row_bytes;
    // The streams rms_norm would store (X_i·inv, rounded) times the weights, in the product's lane order.
    float p = rowops::lane_fma_chain_pipelined<16>(
        0.0f, 0, HD, lane, [w](int j) { return Ops::load(w, j); }, [Xs, inv](int j) { return Xs[j] * inv; });
    for (int sh = 16; sh >= 1; sh >>= 1) p = p + __shfl_down_sync(rowops::kFullMask, p, sh);
    if (lane == 0) mix_own[k] = p;
  }

  // 4. Gather the mix row from the cluster (and the hc pre weights: σ once per CTA, not per thread).
  cluster.sync();
  if (tid < a.n_mix) {
    const float m = cluster.map_shared_rank(mix_own, tid % kHcCluster)[tid / kHcCluster];
    mix_all[tid] = m;
    if (rank == 0 && !a.sinkhorn) row_ptr<float>(a.mix, a.mix_nb, t)[tid] = m;
    if (tid < a.hc) pre_s[tid] = rowops::hc_pre_weight(m, scale_s[0], base_s[tid], a.hc_eps);
  }
  __syncthreads();

  // 5. CTA 0's last warp writes mix, post and comb (the Sinkhorn) while the other warps collapse the row,
  // take its norm and write this CTA's slice of x, synchronising among themselves on named barrier 1.
  constexpr int kSinkWarp = kHcWarps - 1;
  const bool sink_cta = rank == 0 && a.sinkhorn;
  if (sink_cta && warp == kSinkWarp) {
    for (int q = lane; q < a.n_mix; q += 32) row_ptr<float>(a.mix, a.mix_nb, t)[q] = mix_all[q];
    rowops::hc_mix_warp(mix_all, scale_s, base_s, a.hc_eps, a.iters, a.hc, row_ptr<float>(a.post, a.post_nb, t),
                        row_ptr<float>(a.comb, a.comb_nb, t), lane);
  } else {
    const int workers = sink_cta ? kHcThreads - 32 : kHcThreads;
    // (Unrolled over kHcMaxStreams with i < hc predicates: pre and the loads stay in registers.)
    float pre[kHcMaxStreams];
#pragma unroll
    for (int i = 0; i < kHcMaxStreams; ++i) pre[i] = i < a.hc ? pre_s[i] : 0.0f;
#pragma unroll 2
    for (int c = tid; c < D; c += workers) {
      float xv[kHcMaxStreams];
#pragma unroll
      for (int i = 0; i < kHcMaxStreams; ++i) xv[i] = i < a.hc ? Xs[i * D + c] : 0.0f;
      float acc = 0.0f;
#pragma unroll
      for (int i = 0; i < kHcMaxStreams; ++i)
        if (i < a.hc) acc = hd::fma(pre[i], xv[i], acc);
      coll[c] = acc;
    }
    workers_sync(workers);
    if (warp == 0) {
      const auto c_at = [coll](int j) { return coll[j]; };
      const float ss = rowops::warp_tree(rowops::lane_fma_chain_pipelined<16>(0.0f, 0, D, lane, c_at, c_at));
      if (lane == 0) inv_s[1] = rowops::rms_inverse(ss, D, a.rms_eps);
    }
    workers_sync(workers);
    const float inv2 = inv_s[1];
    float* xr = row_ptr<float>(a.x, a.x_nb, t);
    for (int c = c0 + tid; c < c_end; c += workers) {
      const float v = a.norm != nullptr ? (coll[c] * inv2) * norm_s[c - c0] : coll[c] * inv2;
      xr[c] = v;
      coll[c] = v;  // (each thread its own c) the slice again for the quantizers below
    }
    if (a.n_xq > 0) {
      // x's twins: the blocks of this CTA's slice, one warp each, from shared memory (the quantizers of
      // act_quant_jobs_kernel: the same bits as quantizing the stored x).
      workers_sync(workers);
      const int worker_warps = workers / 32;
      for (int i = 0; i < a.n_xq; ++i) {
        uint8_t* row = a.xq[i] + t * a.xq_row_bytes[i];
        if (a.xq_format[i] == ActFormat::kQ8_0) {
          constexpr int kB = ActOps<ActFormat::kQ8_0>::kBlock, kBytes = ActOps<ActFormat::kQ8_0>::kBytes;
          for (int b = warp; b < (c_end - c0) / kB; b += worker_warps)
            quantize_block_warp<ActFormat::kQ8_0>(coll + c0, nullptr, 0.0f, b, row + (c0 / kB + b) * kBytes, lane);
        } else {
          constexpr int kB = ActOps<ActFormat::kQ8_K>::kBlock, kBytes = ActOps<ActFormat::kQ8_K>::kBytes;
          for (int b = warp; b < (c_end - c0) / kB; b += worker_warps)
            quantize_block_warp<ActFormat::kQ8_K>(coll + c0, nullptr, 0.0f, b, row + (c0 / kB + b) * kBytes, lane);
        }
      }
    }
  }

  cluster.sync();  // no CTA leaves while a peer may still read its mix_own
}

}  // namespace

void CudaBackend::hc_pre_norm(const backend::HcPreNormArgs& h) {
  const int64_t n = h.X.ne[1], hc = h.post.ne[0], D = h.x.ne[0], n_mix = (2 + hc) * hc, HD = hc * D;
  const bool shapes = n >= 1 && n <= kHcMaxTokens && hc >= 1 && hc * hc <= 32 && D >= 1 && h.X.ne[0] == HD &&
                      h.X.type == TensorType::kF32 && h.fn.n_dims == 2 && h.fn.ne[0] == HD && h.fn.ne[1] == n_mix &&
                      h.fn.contiguous_rows() && h.mix.ne[0] == n_mix && h.mix.ne[1] == n && h.x.ne[1] == n &&
                      h.post.ne[1] == n && h.comb.ne[0] == hc * hc && h.comb.ne[1] == n &&
                      h.scale.ne[0] * h.scale.ne[1] >= 3 && h.base.ne[0] * h.base.ne[1] >= n_mix &&
                      (!h.norm.valid() || h.norm.ne[0] == D);
  n_twins = 0;  // x is rewritten (twins are planned below for the fused kernel only)
  // A side Sinkhorn still open (an hc_pre_norm with no hc_post since) reads mix and writes post and comb,
  // which either path below writes: its first launch waits for it.
  join_side();
  bool fused = false;
  if (shapes && forms().hc_cluster) {
    dispatch_type(h.fn.type, [&](auto ops) {
      using Ops = decltype(ops);
      if constexpr (Ops::kLanes == 0) {
        HcFusedArgs a;
        a.hc = static_cast<int>(hc);
        a.n_mix = static_cast<int>(n_mix);
        a.rows_per_cta = static_cast<int>((n_mix + kHcCluster - 1) / kHcCluster);
        a.D = D;
        a.xs_bytes = round16(HD * 4);
        a.fn_row_bytes = h.fn.nb[1];
        a.ws_row_bytes = round16(a.fn_row_bytes);
        const int64_t smem = a.xs_bytes + a.rows_per_cta * a.ws_row_bytes + D * 4 + (D + kHcCluster - 1) / kHcCluster * 4;
        if (smem > kHcSmemMax) return;
        static const cudaError_t attr = cudaFuncSetAttribute(
            hc_pre_norm_kernel<Ops>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kHcSmemMax));
        fused = true;
        if (attr != cudaSuccess) return check(attr, "cudaFuncSetAttribute (hc_pre_norm_kernel)");
        a.X = static_cast<const float*>(h.X.data);
        a.X_nb = h.X.nb[1];
        a.fn = static_cast<const uint8_t*>(h.fn.data);
        a.scale3 = static_cast<const float*>(h.scale.data);
        a.base = static_cast<const float*>(h.base.data);
        a.hc_eps = h.hc_eps;
        a.iters = h.iters;
        a.norm = h.norm.valid() ? static_cast<const float*>(h.norm.data) : nullptr;
        a.rms_eps = h.rms_eps;
        a.mix = static_cast<float*>(h.mix.data);
        a.mix_nb = h.mix.nb[1];
        a.x = static_cast<float*>(h.x.data);
        a.x_nb = h.x.nb[1];
        a.post = static_cast<float*>(h.post.data);
        a.post_nb = h.post.nb[1];
        a.comb = static_cast<float*>(h.comb.data);
        a.comb_nb = h.comb.nb[1];
        // The twins: each CTA quantizes whole blocks of its slice of x (slices of equal length).
        const TwinScope twin_scope(*this);
        const int64_t slice = (D + kHcCluster - 1) / kHcCluster;
        a.n_xq = D % kHcCluster == 0 ? plan_quant_twins(*this, h.x, h.x_consumers, slice) : 0;
        for (int i = 0; i < a.n_xq; ++i) {
          a.xq[i] = twins[i].act;
          a.xq_row_bytes[i] = act_row_bytes(twins[i].format, D);
          a.xq_format[i] = twins[i].format;
        }
        a.sinkhorn = !forms().hc_side;
        launch("hc_pre_norm_kernel", hc_pre_norm_kernel<Ops>, dim3(kHcCluster, static_cast<unsigned>(n)), kHcThreads,
               static_cast<size_t>(smem), a);
        if (!a.sinkhorn)
          launch_hc_mix(h.mix, a.scale3, a.base, a.hc_eps, a.iters, h.post, h.comb, true);
      }
    });
  }
  if (!fused) Backend::hc_pre_norm(h);
}

}  // namespace dsv4::cuda
