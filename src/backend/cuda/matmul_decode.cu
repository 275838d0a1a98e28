// backend/cuda/matmul_decode.cu — the decode forms of the weight × activation product (one activation
// row, or moe's routed pairs), and the host-side choice among them (detail::enqueue_decode_product,
// called by matmul.cu's enqueue_product before it falls back to the general product_kernel).
//
// Decomposition:
//   long row:   one row of float weights with long aligned rows: a CTA of 256 per output row, staged
//               4096 elements at a time with the next stage's loads in flight.
//   whole row:  the same when x and the weight row fit whole in dynamic shared memory (one latency).
//   routed:     K/IQ experts of moe's pairs: the pair's activation row (and the IQ2_XXS tables) in
//               shared memory once per CTA.
//   split:      few output rows of one quantized activation row: several warps per output row.
//   stream:     many output rows of one activation row, one-lane block types: a grid the SMs hold at
//               once, each warp a range of rows with its next loads in flight.
// Every form computes the bits of product_kernel (matmul.cu): the same lane partials in the same
// order, then the same shuffle tree (the comments at each kernel say how).
//
// Own file: the kernels are launched only from here (CudaBackend::launch needs the kernel symbol in
// the launching translation unit, and the cudaFuncSetAttribute for the whole-row form's dynamic shared
// memory stays with its kernel); the per-type table they specialise over is matmul_types.cuh.
#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "backend/cuda/matmul.cuh"
#include "backend/cuda/matmul_types.cuh"
#include "backend/cuda/row_ops.cuh"
#include "numerics/hd.h"

namespace dsv4::cuda {

namespace {

using namespace detail;

// One activation row × float weights with long rows (decode: the HC mixes over 16384 inputs, the
// router and the compressor projections over 4096): one CTA of kLongThreads per output row. The row
// streams through shared memory kLongStage elements at a time; every thread loads its share of the next
// stage (x as float4, the weight as 16-byte words widened by Ops::unpack) into registers while warp 0
// runs the 32 lane chains over the current one (lane l: elements l, l+32, … in order, numerics/dot.h's
// order, then the shuffle tree): one memory latency per 4096 elements instead of per 512, and every
// CTA's loads in flight together. Needs 16-byte aligned x and weight rows and in % kLongStage == 0.
constexpr int kLongStage = 4096;
constexpr int kLongThreads = 256;

template <typename Ops>
__global__ void __launch_bounds__(kLongThreads) product_long_row_kernel(ProductArgs a) {
  prefetch_weight_rows(a, blockIdx.x, 1);
  wait_for_producer();
  static_assert(Ops::kLanes == 0, "float weights only");
  constexpr int kXLoads = kLongStage / 4 / kLongThreads;         // float4 per thread per stage
  constexpr int kWLoads = kLongStage / Ops::kVec / kLongThreads;  // 16-byte weight words per thread
  __shared__ __align__(16) float xs[kLongStage];
  __shared__ __align__(16) float ws[kLongStage];
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31;
  const int64_t o = blockIdx.x;
  const auto* x4 = static_cast<const float4*>(a.act);
  const auto* w4 = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(a.w) + o * a.w_row_bytes);
  const int64_t stages = a.in / kLongStage;
  float4 xr[kXLoads];
  uint4 wr[kWLoads];
  auto fetch = [&](int64_t s) {
#pragma unroll
    for (int k = 0; k < kXLoads; ++k) xr[k] = __ldg(x4 + s * (kLongStage / 4) + tid + k * kLongThreads);
#pragma unroll
    for (int k = 0; k < kWLoads; ++k) wr[k] = __ldcs(w4 + s * (kLongStage / Ops::kVec) + tid + k * kLongThreads);
  };
  fetch(0);
  float p = 0.0f;
  for (int64_t s = 0; s < stages; ++s) {
#pragma unroll
    for (int k = 0; k < kXLoads; ++k) *reinterpret_cast<float4*>(&xs[4 * (tid + k * kLongThreads)]) = xr[k];
#pragma unroll
    for (int k = 0; k < kWLoads; ++k) Ops::unpack(wr[k], &ws[Ops::kVec * (tid + k * kLongThreads)]);
    __syncthreads();
    if (s + 1 < stages) fetch(s + 1);  // in flight while warp 0 folds this stage
    if (tid < 32) {
      constexpr int kBatch = 16;
      for (int j = lane; j < kLongStage; j += 32 * kBatch) {
        float wv[kBatch], xv[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          wv[k] = ws[j + 32 * k];
          xv[k] = xs[j + 32 * k];
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k) p = hd::fma(wv[k], xv[k], p);
      }
    }
    __syncthreads();  // the stage is overwritten next
  }
  if (tid < 32) {
    for (int sh = 16; sh >= 1; sh >>= 1) p = p + __shfl_down_sync(0xffffffffu, p, sh);
    if (lane == 0) a.y[o] = p;
  }
}

// The same for rows that fit whole in (dynamic) shared memory (x as floats, the weight rows as their raw
// bytes): a CTA holds R = a.rows_per_cta consecutive output rows (as many as fit beside x in
// kWholeRowCtaBytes, at most kProductWarps), each warp w < R copies row w's weights while the producer
// still runs, then the CTA copies x once for its R rows; warp w then runs row w's lane chains (weights
// widened from shared memory as they are used). A row costs one memory latency; x is read once per R
// rows (one CTA per row had the 2624 rows of a CSA layer's projections read 43 MB of x for 21 MB of
// weights). Same bits as above. One launch serves up to kWholeRowJobs products of the same activation
// row (matmul_batch's projections of one x: the compressors' and indexer's): global row b·R + w is row
// b·R + w − begin[j] of job j.
constexpr int64_t kWholeRowMaxBytes = 112 * 1024;  // x and one row (R = 1)
constexpr int64_t kWholeRowCtaBytes = 48 * 1024;   // x and R rows, R > 1: four CTAs per SM

template <typename Ops>
__global__ void __launch_bounds__(kLongThreads) product_whole_row_kernel(WholeRowJobs a) {
  static_assert(Ops::kLanes == 0, "float weights only");
  extern __shared__ __align__(16) unsigned char whole_smem[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid / 32;
  const int64_t row_bytes = a.in * Ops::kBlockBytes;
  float* xs = reinterpret_cast<float*>(whole_smem);
  uint8_t* ws = whole_smem + a.in * 4 + warp * row_bytes;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * a.rows_per_cta + warp;
  const bool live = warp < a.rows_per_cta && g < a.begin[a.n_jobs];
  int j = 0;
  if (live)
    while (j + 1 < a.n_jobs && g >= a.begin[j + 1]) ++j;
  const int64_t o = g - a.begin[j];
  if (live) {  // the weight row (never written by a step) while the producer still runs (preload.cuh)
    const uint8_t* wrow = static_cast<const uint8_t*>(a.w[j]) + o * a.w_row_bytes[j];
    for (int q = lane; q < static_cast<int>(row_bytes / 16); q += 32) preload::cp_async16(ws + 16 * q, wrow + 16 * q);
  }
  wait_for_producer();
  const auto* x4 = static_cast<const float4*>(a.act);
  const int nx = static_cast<int>(a.in / 4);
  constexpr int kBatch = 8;
  for (int q0 = tid; q0 < nx; q0 += kLongThreads * kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k)
      if (q0 + k * kLongThreads < nx) v[k] = __ldg(x4 + q0 + k * kLongThreads);
#pragma unroll
    for (int k = 0; k < kBatch; ++k)
      if (q0 + k * kLongThreads < nx) reinterpret_cast<float4*>(xs)[q0 + k * kLongThreads] = v[k];
  }
  preload::cp_async_wait_all();
  __syncthreads();
  if (!live) return;
  float p = rowops::lane_fma_chain<16>(
      static_cast<int>(a.in), lane, [ws](int i) { return Ops::load(ws, i); }, [xs](int i) { return xs[i]; });
  for (int sh = 16; sh >= 1; sh >>= 1) p = p + __shfl_down_sync(0xffffffffu, p, sh);
  if (lane == 0) a.y[j][o] = p;
}

// Routed experts of the K/IQ types (moe's pairs: expert ids, kLanes > 1): a CTA's warps are output rows
// of one pair, so the CTA copies that pair's activation row (and the IQ2_XXS tables) into shared memory
// once and every warp reads them there instead of each warp re-reading them through L1. The chunk loop
// is product_rows's (same lanes, same partial order, same bits).
constexpr int64_t kRoutedActMax = 8192;  // activation bytes of one row held in shared memory

// Whether Ops decodes through the IQ2_XXS tables (part_with).
template <typename Ops>
constexpr bool has_tables() {
  if constexpr (requires { Ops::kHasTables; })
    return Ops::kHasTables;
  else
    return false;
}

// Whether Ops has a lane form (lane_act once per block, part_lane per row) and these rows its alignment.
template <typename Ops>
constexpr bool has_lane_act() {
  return requires { typename Ops::LaneAct; };
}
template <typename Ops, bool kOn>
struct LaneActOf {
  struct type {};
};
template <typename Ops>
struct LaneActOf<Ops, true> {
  using type = typename Ops::LaneAct;
};

// Each warp computes kRoutedRows consecutive output rows of its pair, interleaved chunk by chunk (their
// weight loads in flight together; a CTA's set-up — the activation row and the tables — serves
// 8·kRoutedRows rows): a routed product of 2048 rows is then 64 CTAs per pair instead of 256. With
// kLaneAct a lane loads its activation words of a block once for the kRoutedRows rows (ncu: the IQ2_XXS
// form was bound by the shared-memory pipe, 72 % busy at 0.94 TB/s, every row re-reading them).
// (8 rows per warp — one wave of 384 CTAs for DS4's gate+up instead of 1.45 waves of 768 — was measured
// on the full Flash q2, H200, 2026-12-06: decode 125.2 → 122.6 tok/s at depth 0, 110.2 → 108.2 at 4096;
// ncu had the IQ2_XXS launch 26.8 → 25.9 µs alone. Kept at 4.)
constexpr int kRoutedRows = 4;

// The routed forms' block step: the kLanes lanes' integer parts of block b summed (xor shuffles: order-
// free integers), its one float finish, and the value added to partial p by the lane that owns the block
// (`mine`: lane rel of the chunk) — numerics/accumulate.h's order.
template <typename Ops>
__device__ __forceinline__ void fold_block(typename Ops::Isum is, const uint8_t* wb, const uint8_t* ab, bool valid, bool mine,
                                           int rel, float& p) {
  for (int m = 1; m < Ops::kLanes; m <<= 1) is = Ops::add(is, Ops::shfl_xor(is, m));
  const float v = valid ? Ops::finish(wb, ab, is) : 0.0f;
  const float vb = __shfl_sync(0xffffffffu, v, mine ? rel * Ops::kLanes : 0);
  if (mine) p = p + vb;
}

// Partials32::reduce of each row's partials (the shuffle-down tree); lane 0 writes y[i] for i < rows_here.
template <int kRows>
__device__ __forceinline__ void write_routed_rows(const float (&p)[kRows], int rows_here, float* y, int lane) {
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    if (i >= rows_here) break;
    float q = p[i];
    for (int sh = 16; sh >= 1; sh >>= 1) q = q + __shfl_down_sync(0xffffffffu, q, sh);
    if (lane == 0) y[i] = q;
  }
}

template <typename Ops, bool kLaneAct>
__global__ void __launch_bounds__(32 * kProductWarps) product_routed_kernel(ProductArgs a) {
  static_assert(Ops::kLanes > 1, "K/IQ types");
  constexpr int kL = Ops::kLanes, kPerChunk = 32 / kL;
  constexpr int64_t kActBytes = ActOps<Ops::kAct>::kBytes;
  __shared__ __align__(16) uint8_t act_s[kRoutedActMax];
  __shared__ Iq2xxsDeviceTables tab_s;
  constexpr bool kTables = has_tables<Ops>();
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid / 32;
  const int64_t o0 = (blockIdx.x * static_cast<int64_t>(kProductWarps) + warp) * kRoutedRows;
  const int64_t nb = a.in / Ops::kBlock, act_bytes = nb * kActBytes;
  if constexpr (kTables) {
    for (int i = tid; i < 256; i += blockDim.x) tab_s.grid[i] = d_iq2xxs.grid[i];  // (the dots compute the signs)
  }
  const uint8_t* wz = static_cast<const uint8_t*>(blockIdx.z == 0 ? a.w : a.w_z1);
  // The CTA's weight rows of its first pair into L2 while the kernel before still runs. Which expert is
  // not known until the producers are done, so the id is read speculatively (L2, not L1) and only
  // chooses what to prefetch: a stale or wrong id costs bandwidth, never bits. moe launches the shared
  // expert's product between the routing and this one, and a kernel's blocks start only once every
  // block of the one before has passed its wait_for_producer (step_graph.cuh), so the routing kernel
  // has completed and the id read here is final.
  if (a.ids != nullptr && blockIdx.y < a.rows) {
    const int64_t r = blockIdx.y;
    const int32_t e = __ldcg(a.ids + (r / a.id_k) * a.id_stride + r % a.id_k);
    const int64_t c0 = blockIdx.x * static_cast<int64_t>(kProductWarps) * kRoutedRows;
    if (e >= 0 && e < a.n_expert && c0 < a.out) {
      const int64_t rows = a.out - c0 < kProductWarps * kRoutedRows ? a.out - c0 : kProductWarps * kRoutedRows;
      preload::prefetch_l2(wz + e * a.expert_bytes + c0 * a.w_row_bytes, rows * a.w_row_bytes, tid,
                           static_cast<int>(blockDim.x));
    }
  }
  wait_for_producer();  // the tables are constants; the ids and activations come from the producers
  float* yz = blockIdx.z == 0 ? a.y : a.y_z1;
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    const uint8_t* src = static_cast<const uint8_t*>(a.act) + (r / a.act_div) * a.act_stride;
    if (reinterpret_cast<uintptr_t>(src) % 16 == 0 && act_bytes % 16 == 0) {
      for (int64_t q = tid; q < act_bytes / 16; q += blockDim.x)
        reinterpret_cast<uint4*>(act_s)[q] = __ldg(reinterpret_cast<const uint4*>(src) + q);
    } else {
      for (int64_t q = tid; q < act_bytes; q += blockDim.x) act_s[q] = src[q];
    }
    __syncthreads();
    const int32_t e = a.ids[(r / a.id_k) * a.id_stride + r % a.id_k];
    const int rows_here = static_cast<int>(a.out - o0 < kRoutedRows ? a.out - o0 : kRoutedRows);  // warp-uniform
    if (rows_here > 0) {
      if (e < 0 || e >= a.n_expert) {
        if (lane < rows_here) yz[r * a.y_stride + o0 + lane] = nan_f32();
      } else {
        const uint8_t* w = wz + e * a.expert_bytes + o0 * a.w_row_bytes;
        const int sub = lane % kL;
        float p[kRoutedRows];
#pragma unroll
        for (int i = 0; i < kRoutedRows; ++i) p[i] = 0.0f;
        for (int64_t b0 = 0; b0 < nb; b0 += kPerChunk) {
          const int64_t b = b0 + lane / kL;
          const int rel = lane - static_cast<int>(b0 % 32);
          const bool mine = rel >= 0 && rel < kPerChunk && b0 + rel < nb;
          const uint8_t* ab = act_s + b * kActBytes;
          // kLaneAct: the lane's activation words once for the kRoutedRows rows.
          [[maybe_unused]] typename LaneActOf<Ops, kLaneAct>::type la{};
          if constexpr (kLaneAct) {
            if (b < nb) la = Ops::lane_act(ab, sub);
          }
#pragma unroll
          for (int i = 0; i < kRoutedRows; ++i) {
            if (i >= rows_here) break;
            const uint8_t* wb = w + i * a.w_row_bytes + b * Ops::kBlockBytes;
            typename Ops::Isum is{};
            if (b < nb) {
              if constexpr (kLaneAct)
                is = Ops::part_lane(wb, la, sub, tab_s);
              else if constexpr (kTables)
                is = Ops::part_with(wb, ab, sub, tab_s);
              else
                is = Ops::part(wb, ab, sub);
            }
            fold_block<Ops>(is, wb, ab, b < nb, mine, rel, p[i]);
          }
        }
        write_routed_rows<kRoutedRows>(p, rows_here, yz + r * a.y_stride + o0, lane);
      }
    }
    __syncthreads();  // act_s is refilled for the next pair
  }
}

// The routed form with each warp's rows staged whole in shared memory by cp.async (16-byte copies, issued
// before the pair's activation copy): one memory latency per warp and pair, where the chunk loop paid
// one per chunk with 4-5 loads per lane and row (2-byte aligned IQ2_XXS words). Same chunk loop, same
// lanes, same order: product_routed_kernel's bits. For rows of a multiple of 16 bytes (DS4: 1,056 and
// 672) at 16-byte aligned experts, kRoutedRows · row bytes ≤ kRoutedStageBytes. At most 64 registers
// (__launch_bounds__ …, 4): four CTAs per SM as the chunk-loop form (80 without the bound: three).
constexpr int kRoutedStageBytes = 4 * 1088;

template <typename Ops>
__global__ void __launch_bounds__(32 * kProductWarps, 4) product_routed_staged_kernel(ProductArgs a) {
  static_assert(Ops::kLanes > 1 && has_lane_act<Ops>(), "K/IQ types with a lane form");
  constexpr int kL = Ops::kLanes, kPerChunk = 32 / kL, kRows = kRoutedRows;
  constexpr int64_t kActBytes = ActOps<Ops::kAct>::kBytes;
  __shared__ __align__(16) uint8_t act_s[kRoutedActMax];
  __shared__ __align__(16) uint8_t w_s[kProductWarps][kRoutedStageBytes];
  __shared__ Iq2xxsDeviceTables tab_s;
  constexpr bool kTables = has_tables<Ops>();
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid / 32;
  const int64_t o0 = (blockIdx.x * static_cast<int64_t>(kProductWarps) + warp) * kRows;
  const int64_t nb = a.in / Ops::kBlock, act_bytes = nb * kActBytes;
  if constexpr (kTables) {
    for (int i = tid; i < 256; i += blockDim.x) tab_s.grid[i] = d_iq2xxs.grid[i];
  }
  const uint8_t* wz = static_cast<const uint8_t*>(blockIdx.z == 0 ? a.w : a.w_z1);
  if (a.ids != nullptr && blockIdx.y < a.rows) {  // product_routed_kernel's speculative L2 prefetch
    const int64_t r = blockIdx.y;
    const int32_t e = __ldcg(a.ids + (r / a.id_k) * a.id_stride + r % a.id_k);
    const int64_t c0 = blockIdx.x * static_cast<int64_t>(kProductWarps) * kRows;
    if (e >= 0 && e < a.n_expert && c0 < a.out) {
      const int64_t rows = a.out - c0 < kProductWarps * kRows ? a.out - c0 : kProductWarps * kRows;
      preload::prefetch_l2(wz + e * a.expert_bytes + c0 * a.w_row_bytes, rows * a.w_row_bytes, tid,
                           static_cast<int>(blockDim.x));
    }
  }
  wait_for_producer();
  float* yz = blockIdx.z == 0 ? a.y : a.y_z1;
  uint8_t* ws = w_s[warp];
  const int rows_here = static_cast<int>(a.out - o0 < kRows ? (a.out - o0 > 0 ? a.out - o0 : 0) : kRows);  // warp-uniform
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    const int32_t e = a.ids[(r / a.id_k) * a.id_stride + r % a.id_k];
    const bool valid = e >= 0 && e < a.n_expert;
    if (valid && rows_here > 0) {  // the warp's rows, contiguous: rows_here · row bytes, 16 bytes a copy
      const uint8_t* src = wz + e * a.expert_bytes + o0 * a.w_row_bytes;
      const int64_t n16 = rows_here * a.w_row_bytes / 16;
      for (int64_t q = lane; q < n16; q += 32) preload::cp_async16(ws + 16 * q, src + 16 * q);
    }
    preload::cp_async_commit();
    const uint8_t* asrc = static_cast<const uint8_t*>(a.act) + (r / a.act_div) * a.act_stride;
    if (reinterpret_cast<uintptr_t>(asrc) % 16 == 0 && act_bytes % 16 == 0) {
      for (int64_t q = tid; q < act_bytes / 16; q += blockDim.x)
        reinterpret_cast<uint4*>(act_s)[q] = __ldg(reinterpret_cast<const uint4*>(asrc) + q);
    } else {
      for (int64_t q = tid; q < act_bytes; q += blockDim.x) act_s[q] = asrc[q];
    }
    preload::cp_async_wait_all();
    __syncthreads();
    if (rows_here > 0) {
      if (!valid) {
        if (lane < rows_here) yz[r * a.y_stride + o0 + lane] = nan_f32();
      } else {
        const int sub = lane % kL;
        float p[kRows];
#pragma unroll
        for (int i = 0; i < kRows; ++i) p[i] = 0.0f;
        for (int64_t b0 = 0; b0 < nb; b0 += kPerChunk) {
          const int64_t b = b0 + lane / kL;
          const int rel = lane - static_cast<int>(b0 % 32);
          const bool mine = rel >= 0 && rel < kPerChunk && b0 + rel < nb;
          const uint8_t* ab = act_s + b * kActBytes;
          typename Ops::LaneAct la{};
          if (b < nb) la = Ops::lane_act(ab, sub);
#pragma unroll
          for (int i = 0; i < kRows; ++i) {
            if (i >= rows_here) break;
            const uint8_t* wb = ws + i * a.w_row_bytes + b * Ops::kBlockBytes;
            typename Ops::Isum is{};
            if (b < nb) {
              if constexpr (requires { Ops::part_lane_shared(wb, la, sub, tab_s); })
                is = Ops::part_lane_shared(wb, la, sub, tab_s);
              else
                is = Ops::part_lane(wb, la, sub, tab_s);
            }
            fold_block<Ops>(is, wb, ab, b < nb, mine, rel, p[i]);
          }
        }
        write_routed_rows<kRows>(p, rows_here, yz + r * a.y_stride + o0, lane);
      }
    }
    __syncthreads();  // act_s and the stages are refilled for the next pair
  }
}

// One activation row × quantized weights with few output rows (decode's q_a, kv, W_oa groups, W_ob, the
// shared expert): kSplit warps share an output row so that enough warps stream the weights. Warp `part`
// of a row computes the block values of chunks part, part + kSplit, … (a chunk = the 32 blocks one
// warp-iteration of product_rows covers, or kPerChunk super-blocks for the K/IQ types) into shared
// memory; then the row's first warp adds them lane by lane in block order (lane l: blocks l, l+32, …
// from 0, one plain add each, exactly product_rows's partials) and runs the shuffle tree: the bits of
// product_rows, whose lanes add the same values in the same order.
constexpr int kSplitMaxBlocks = 1024;  // blocks per row this kernel holds in shared memory
constexpr int kSplitRing = 3;          // a warp's ring slots: with vals[][] under 48 KiB of static shared memory

template <typename Ops, int kSplit>
__global__ void __launch_bounds__(32 * kProductWarps) product_split_kernel(ProductArgs a) {
  static_assert(Ops::kLanes > 0 && kProductWarps % kSplit == 0, "quantized weights; warps divide into rows");
  constexpr int kRows = kProductWarps / kSplit;
  prefetch_weight_rows(a, blockIdx.x * static_cast<int64_t>(kRows), kRows);
  __shared__ float vals[kRows][kSplitMaxBlocks];
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x / 32);
  const int slot = warp / kSplit, part = warp % kSplit;
  const int64_t o = blockIdx.x * static_cast<int64_t>(kRows) + slot;
  const int64_t nb = a.in / Ops::kBlock;
  constexpr int64_t kActBytes = ActOps<Ops::kAct>::kBytes;
  const uint8_t* w = static_cast<const uint8_t*>(blockIdx.z == 0 ? a.w : a.w_z1) + (o < a.out ? o : 0) * a.w_row_bytes;
  // Stageable types: this warp's runs of 32 blocks (part, part + kSplit, …) through its ring
  // (matmul_types.cuh ring_fold), the first ones issued before the producer is waited for.
  constexpr int kRunBytes = 32 * Ops::kBlockBytes;
  __shared__ __align__(16) uint8_t ring[kProductWarps][stageable<Ops>() ? ring_bytes<Ops, kSplitRing>() : 16];
  const bool staged = stageable<Ops>() && o < a.out && a.staged_loads && nb % 32 == 0 &&
                      reinterpret_cast<uintptr_t>(w) % 16 == 0;
  const int runs_mine = static_cast<int>((nb / 32 - part + kSplit - 1) / kSplit);  // runs part + i·kSplit < nb / 32
  const uint8_t* next = w + part * kRunBytes;
  auto next_run = [&]() {
    const uint8_t* run = next;
    next += kSplit * kRunBytes;
    return run;
  };
  if constexpr (stageable<Ops>()) {
    if (staged) ring_start<Ops, kSplitRing>(ring[warp], runs_mine, next_run, lane);
  }
  wait_for_producer();
  const uint8_t* act =
      static_cast<const uint8_t*>(a.act) + (a.act_group_rows > 0 ? (o / a.act_group_rows) * a.act_group_bytes : 0);
  if (o < a.out) {
    if constexpr (Ops::kLanes == 1) {
      if constexpr (stageable<Ops>()) {
        if (staged) {
          int64_t b = static_cast<int64_t>(part) * 32 + lane;
          ring_fold<Ops, kSplitRing>(ring[warp], runs_mine, next_run, [&](const uint8_t* run) {
            vals[slot][b] = Ops::block_dot(run + lane * Ops::kBlockBytes, act + b * kActBytes);
            b += 32 * kSplit;
          }, lane);
        }
      }
      if (!staged) {
#pragma unroll 4
        for (int64_t b = 32 * part + lane; b < nb; b += 32 * kSplit)
          vals[slot][b] = Ops::block_dot(w + b * Ops::kBlockBytes, act + b * kActBytes);
        // (blocks past nb in the last chunk: nothing to compute)
      }
    } else {
      constexpr int kL = Ops::kLanes, kPerChunk = 32 / kL;
      const int sub = lane % kL;
      for (int64_t b0 = static_cast<int64_t>(part) * kPerChunk; b0 < nb; b0 += static_cast<int64_t>(kPerChunk) * kSplit) {
        const int64_t b = b0 + lane / kL;
        typename Ops::Isum s{};
        if (b < nb) s = Ops::part(w + b * Ops::kBlockBytes, act + b * kActBytes, sub);
        for (int m = 1; m < kL; m <<= 1) s = Ops::add(s, Ops::shfl_xor(s, m));
        if (b < nb && sub == 0) vals[slot][b] = Ops::finish(w + b * Ops::kBlockBytes, act + b * kActBytes, s);
      }
    }
  }
  __syncthreads();
  if (part != 0 || o >= a.out) return;
  float p = 0.0f;
  for (int64_t b = lane; b < nb; b += 32) p = p + vals[slot][b];
  for (int sh = 16; sh >= 1; sh >>= 1) p = p + __shfl_down_sync(0xffffffffu, p, sh);
  if (lane == 0) (blockIdx.z == 0 ? a.y : a.y_z1)[o] = p;
  if (a.hc_out != nullptr && blockIdx.z == 0 && lane < a.hc) {  // HC post of column o: lane j writes stream j
    const int64_t j = lane;
    a.hc_out[j * a.out + o] = rowops::hc_post_value(a.hc_post[j], __shfl_sync(0xffffffffu >> (32 - a.hc), p, 0),
                                                    a.hc_comb, a.hc_X + o, a.out, a.hc, j);
  }
}

// One activation row × a stageable one-lane type with many output rows (decode's q_b and the grouped
// W_oa: 8192-32768 rows of 1-4 runs of 32 blocks; the LM head), which the general product_kernel runs as
// one warp per row — every warp one memory latency, then its compute, then it leaves, and ~1.3 waves of
// CTAs for the 8192-row W_oa (a second, mostly idle wave). Here the grid is what the SMs hold at once and
// each warp streams a contiguous range of rows: their runs, in order across the rows, go through the
// warp's ring (matmul_types.cuh ring_fold: kStreamRing − 1 runs in flight while one is folded), the first
// ones issued before wait_for_producer (weights are never written by a step). Lane l still adds the
// values of blocks l, l + 32, … of each row in ascending order from 0 and the shuffle tree ends it:
// product_rows's bits.
constexpr int kStreamRing = 4;

template <typename Ops>
__global__ void __launch_bounds__(32 * kProductWarps) product_stream_kernel(ProductArgs a, int rows_per_warp) {
  static_assert(stageable<Ops>(), "one-lane block types with whole 16-byte runs");
  constexpr int kRunBytes = 32 * Ops::kBlockBytes;
  constexpr int kActBytes = ActOps<Ops::kAct>::kBytes;
  __shared__ __align__(16) uint8_t ring[kProductWarps][ring_bytes<Ops, kStreamRing>()];
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x / 32);
  uint8_t* st = ring[warp];
  const int64_t first = (blockIdx.x * static_cast<int64_t>(kProductWarps) + warp) * rows_per_warp;
  if (first >= a.out) return wait_for_producer();
  const int n_rows = static_cast<int>(a.out - first < rows_per_warp ? a.out - first : rows_per_warp);
  const int runs_per_row = static_cast<int>(a.in / Ops::kBlock / 32);
  const uint8_t* w = static_cast<const uint8_t*>(a.w) + first * a.w_row_bytes;
  // The next run to issue is run f_g of row first + f_row (counters, not divisions).
  int f_row = 0, f_g = 0;
  auto next_run = [&]() {
    const uint8_t* run = w + f_row * a.w_row_bytes + f_g * kRunBytes;
    if (++f_g == runs_per_row) f_g = 0, ++f_row;
    return run;
  };
  const int n_runs = n_rows * runs_per_row;
  ring_start<Ops, kStreamRing>(st, n_runs, next_run, lane);
  wait_for_producer();
  // Grouped products: row o reads the activation row act_group_bytes · (o / act_group_rows) further.
  const int64_t group_rows = a.act_group_rows > 0 ? a.act_group_rows : INT64_MAX;
  int64_t group = first / group_rows, in_group = first - group * group_rows;
  const uint8_t* act = static_cast<const uint8_t*>(a.act) + (a.act_group_rows > 0 ? group * a.act_group_bytes : 0);
  float p = 0.0f;
  int row = 0, g = 0;  // the run being folded: run g of row first + row
  ring_fold<Ops, kStreamRing>(st, n_runs, next_run, [&](const uint8_t* run) {
    const int b = g * 32 + lane;
    p = p + Ops::block_dot(run + lane * Ops::kBlockBytes, act + b * kActBytes);
    if (++g == runs_per_row) {
      float q = p;
      for (int sh = 16; sh >= 1; sh >>= 1) q = q + __shfl_down_sync(0xffffffffu, q, sh);
      if (lane == 0) a.y[first + row] = q;
      p = 0.0f;
      g = 0;
      ++row;
      if (++in_group == group_rows) in_group = 0, act += a.act_group_bytes;
    }
  }, lane);
}

// One launch of product_whole_row_kernel for the jobs (whole_row_fits each; same type, act and in).
template <typename Ops>
void launch_whole_rows(CudaBackend& be, std::span<const ProductArgs* const> jobs) {
  static const cudaError_t attr = cudaFuncSetAttribute(product_whole_row_kernel<Ops>,
                                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                       static_cast<int>(kWholeRowMaxBytes));
  if (attr != cudaSuccess) return be.check(attr, "cudaFuncSetAttribute (product_whole_row_kernel)");
  WholeRowJobs w;
  w.act = jobs[0]->act;
  w.in = jobs[0]->in;
  const int64_t row_bytes = w.in * Ops::kBlockBytes, left = kWholeRowCtaBytes - w.in * 4;
  w.rows_per_cta = static_cast<int>(left < row_bytes ? 1 : (left / row_bytes > kProductWarps ? kProductWarps : left / row_bytes));
  w.n_jobs = static_cast<int>(jobs.size());
  w.begin[0] = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    w.w[j] = jobs[j]->w;
    w.w_row_bytes[j] = jobs[j]->w_row_bytes;
    w.y[j] = jobs[j]->y;
    w.begin[j + 1] = w.begin[j] + static_cast<uint32_t>(jobs[j]->out);
  }
  be.launch("product_whole_row_kernel", product_whole_row_kernel<Ops>,
            static_cast<unsigned>(blocks_for(w.begin[jobs.size()], w.rows_per_cta)), kLongThreads,
            static_cast<size_t>(w.in * 4 + w.rows_per_cta * row_bytes), w);
}

// Whether the stream form takes `a` (one activation row, no experts or pair, whole runs of 16-byte
// aligned rows): asked after the split form, which keeps the products with few output rows.
template <typename Ops>
bool stream_fits(const CudaBackend& be, const ProductArgs& a) {
  return be.forms().stream_products && a.staged_loads && a.rows == 1 && a.ids == nullptr && a.w_z1 == nullptr &&
         a.in % (32 * Ops::kBlock) == 0 && a.in / Ops::kBlock <= INT32_MAX && a.out <= INT32_MAX && reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && a.w_row_bytes % 16 == 0;
}

// The stream form's launch: as many warps as the SMs hold at once (or one per row when fewer), each
// a contiguous range of rows_per_warp rows.
template <typename Ops>
void launch_stream(CudaBackend& be, const ProductArgs& a) {
  static const int per_sm = [] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, product_stream_kernel<Ops>, 32 * kProductWarps, 0) !=
        cudaSuccess)
      n = 0;
    return n > 0 ? n : 1;
  }();
  const int64_t max_warps = static_cast<int64_t>(per_sm) * be.sm_count() * kProductWarps;
  const int64_t rows_per_warp = (a.out + max_warps - 1) / max_warps;
  const int64_t warps = (a.out + rows_per_warp - 1) / rows_per_warp;
  be.launch("product_stream_kernel", product_stream_kernel<Ops>, static_cast<unsigned>(blocks_for(warps, kProductWarps)),
            32 * kProductWarps, 0, a, static_cast<int>(rows_per_warp));
}

// The split form's warps per output row for a quantized product (> 1: the split form applies): few
// output rows of one activation row are split over several warps so that at least ~32 warps per SM
// stream the weights, as far as the row's chunks allow.
int split_factor(const CudaBackend& be, const ProductArgs& a) {
  int split = 1;
  dispatch_type(a.type, [&](auto ops) {
    using Ops = decltype(ops);
    if constexpr (Ops::kLanes > 0) {
      const int64_t per_chunk = Ops::kLanes == 1 ? 32 : 32 / Ops::kLanes;
      const int64_t nb = a.in / Ops::kBlock, chunks = (nb + per_chunk - 1) / per_chunk;
      while (split < kProductWarps && split * 2 <= chunks && a.out * split < 32 * be.sm_count()) split *= 2;
      if (a.rows != 1 || a.ids != nullptr || nb > kSplitMaxBlocks) split = 1;
    }
  });
  return split;
}

// One activation row of float weights with aligned rows: the whole-row form (rows of block_bytes-byte
// elements that fit beside x in shared memory), the long-row form (rows of kLongStage multiples).
bool one_aligned_row(const ProductArgs& a) {
  return a.rows == 1 && a.ids == nullptr && a.act_group_rows == 0 && a.w_z1 == nullptr &&
         reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && a.w_row_bytes % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.act) % 16 == 0 && a.out <= INT32_MAX;
}
bool whole_row_fits(const ProductArgs& a, int block_bytes) {
  return one_aligned_row(a) && a.in > 0 && a.in % 4 == 0 && (a.in * block_bytes) % 16 == 0 &&
         a.in * (4 + block_bytes) <= kWholeRowMaxBytes;
}
bool long_row_fits(const ProductArgs& a) { return one_aligned_row(a) && a.in >= kLongStage && a.in % kLongStage == 0; }

}  // namespace

namespace detail {

int enqueue_whole_row_products(CudaBackend& be, std::span<const ProductArgs> jobs) {
  if (jobs.size() < 2 || jobs.size() > static_cast<size_t>(kWholeRowJobs)) return 0;
  const ProductArgs& j0 = jobs[0];
  int64_t total = 0;
  for (const ProductArgs& j : jobs) {
    if (j.type != j0.type || j.act != j0.act || j.in != j0.in) return 0;
    total += j.out;
  }
  if (total > INT32_MAX) return 0;
  bool launched = false;
  dispatch_type(j0.type, [&](auto ops) {
    using Ops = decltype(ops);
    if constexpr (Ops::kLanes == 0) {
      for (const ProductArgs& j : jobs)
        if (!whole_row_fits(j, Ops::kBlockBytes)) return;
      const ProductArgs* ptrs[kWholeRowJobs];
      for (size_t j = 0; j < jobs.size(); ++j) ptrs[j] = &jobs[j];
      launch_whole_rows<Ops>(be, std::span<const ProductArgs* const>(ptrs, jobs.size()));
      launched = true;
    }
  });
  return launched ? static_cast<int>(jobs.size()) : 0;
}

bool enqueue_decode_product(CudaBackend& be, const ProductArgs& a, dim3 grid) {
  const bool pair = a.w_z1 != nullptr;
  // One activation row of float weights with aligned rows: the whole-row form, else the long-row form.
  const bool long_row = long_row_fits(a);
  bool handled = false;
  dispatch_type(a.type, [&](auto ops) {
    if constexpr (decltype(ops)::kLanes == 0) {
      using Ops = decltype(ops);
      if (whole_row_fits(a, Ops::kBlockBytes)) {
        handled = true;
        const ProductArgs* one = &a;
        launch_whole_rows<Ops>(be, std::span<const ProductArgs* const>(&one, 1));
        return;
      }
      if (long_row) {
        handled = true;
        be.launch("product_long_row_kernel", product_long_row_kernel<decltype(ops)>, static_cast<unsigned>(a.out),
                  kLongThreads, 0, a);
        return;
      }
    }
    if constexpr (decltype(ops)::kLanes > 1) {
      using Ops = decltype(ops);
      if (a.ids != nullptr && a.in / Ops::kBlock * ActOps<Ops::kAct>::kBytes <= kRoutedActMax) {
        handled = true;
        const dim3 g(static_cast<unsigned>(blocks_for(a.out, kProductWarps * kRoutedRows)), grid.y, grid.z);
        if constexpr (has_lane_act<Ops>()) {
          const auto fits = [](int64_t v) { return v % Ops::kLaneAlign == 0; };
          if (fits(static_cast<int64_t>(reinterpret_cast<uintptr_t>(a.w))) &&
              fits(static_cast<int64_t>(reinterpret_cast<uintptr_t>(a.w_z1))) && fits(a.w_row_bytes) &&
              fits(a.expert_bytes)) {
            const auto fits16 = [](int64_t v) { return v % 16 == 0; };
            if (be.forms().routed_staged && fits16(static_cast<int64_t>(reinterpret_cast<uintptr_t>(a.w))) &&
                fits16(static_cast<int64_t>(reinterpret_cast<uintptr_t>(a.w_z1))) && fits16(a.w_row_bytes) &&
                fits16(a.expert_bytes) && kRoutedRows * a.w_row_bytes <= kRoutedStageBytes) {
              be.launch("product_routed_staged_kernel", product_routed_staged_kernel<Ops>, g, 32 * kProductWarps, 0, a);
              return;
            }
            be.launch("product_routed_kernel", product_routed_kernel<Ops, true>, g, 32 * kProductWarps, 0, a);
            return;
          }
        }
        be.launch("product_routed_kernel", product_routed_kernel<Ops, false>, g, 32 * kProductWarps, 0, a);
        return;
      }
    }
    if constexpr (decltype(ops)::kLanes > 0) {
      const int split = split_factor(be, a);
      if (split > 1) {
        handled = true;
        const dim3 g(static_cast<unsigned>(blocks_for(a.out, kProductWarps / split)), 1u, pair ? 2u : 1u);
        ProductArgs b = a;
        if (CudaBackend::HcEpilogue* e = be.hc_epilogue;
            e != nullptr && !e->taken && e->D == a.out && e->hc >= 1 && e->hc <= 32) {
          b.hc_X = e->X, b.hc_post = e->post, b.hc_comb = e->comb, b.hc_out = e->X_out, b.hc = e->hc;
          e->taken = true;
          be.join_side();  // post and comb may come from a side Sinkhorn (hc_pre_norm)
        }
        if (split == 2) be.launch("product_split_kernel<2>", product_split_kernel<decltype(ops), 2>, g, 32 * kProductWarps, 0, b);
        else if (split == 4) be.launch("product_split_kernel<4>", product_split_kernel<decltype(ops), 4>, g, 32 * kProductWarps, 0, b);
        else be.launch("product_split_kernel<8>", product_split_kernel<decltype(ops), 8>, g, 32 * kProductWarps, 0, b);
        return;
      }
    }
    if constexpr (stageable<decltype(ops)>()) {
      if (stream_fits<decltype(ops)>(be, a)) {
        handled = true;
        launch_stream<decltype(ops)>(be, a);
        return;
      }
    }
  });
  return handled;
}

}  // namespace detail

}  // namespace dsv4::cuda
