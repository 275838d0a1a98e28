// backend/cuda/norm_rope_hc.cu — CudaBackend's rms_norm, rope, norm_rope and HC mixing (hc_pre,
// hc_post, hc_head). Arithmetic orders are backend.h's (the CPU backend's bits); here only the layout:
//   rms_norm: one warp per row (row_ops.cuh: lane partials + shuffle tree = the F32 vec_dot).
//   rope:     one thread per (row, pair), sin/cos in double per thread (det::sincos, as the CPU).
//   norm_rope: one warp per row, up to four jobs per launch: warp_rms_norm_row's bits for the row, the
//             rotated tail kept in the warp's shared memory and rotated from there (rope_pair's bits),
//             one global write each.
//   hc_pre:   one thread per token for pre/post and the hc×hc Sinkhorn (sequential sums, in the comb
//             row itself as the CPU does), one thread per (token, column) for the collapse (pre_i
//             recomputed: the same expression, the same bits; fma chain over i from 0).
//   hc_post:  one thread per (token, stream j, column): post_j·y, then the fma chain over i.
//   hc_head:  one thread per (token, column), as hc_pre's collapse.
#include <string>

#include "backend/cuda/cuda_backend.cuh"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/matmul_types.cuh"
#include "backend/cuda/row_ops.cuh"
#include "numerics/det_math.h"
#include "numerics/hd.h"

namespace dsv4::cuda {

using backend::Tensor;
using rowops::grid_for;
using rowops::kFullMask;
using rowops::row_ptr;

namespace {

std::string dims(const Tensor& t) {
  std::string s = "[";
  for (int i = 0; i < (t.n_dims > 1 ? t.n_dims : 1); ++i) s += (i ? ", " : "") + std::to_string(t.ne[i]);
  return s + "]";
}

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

using rowops::std_max;
using detail::ActOps;
using detail::quantize_block_warp;

// --- rms_norm -------------------------------------------------------------------------------------

__global__ void rms_norm_kernel(const void* x, int64_t x_nb, const float* w, float eps, void* y, int64_t y_nb,
                                int64_t rows, int64_t n) {
  wait_for_producer();
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); r < rows; r += warps)
    rowops::warp_rms_norm_row(row_ptr<float>(x, x_nb, r), n, w, eps, row_ptr<float>(y, y_nb, r), lane);
}

// Rows of n ≤ 32·kRmsRegs floats (decode's c_q norm: 1024), a warp per row, the row in registers: the
// lane's weights are loaded before wait_for_producer() (weights: never written by a step), its kRmsRegs
// elements of x all in flight at once after it and kept for the scale — one memory latency instead of
// rms_norm_kernel's eight (four batches of the chain, four of the scale: 7.6 µs for one 1024-float row on
// an H100). The same chains (lane l: fma over i = l, l + 32, … < n in order), tree and scale as
// warp_rms_norm_row. y may alias x (a lane loads all its elements before it stores). kQuant
// (rms_norm_for): each warp also keeps its normalized row in shared memory, and after a CTA barrier the
// CTA's warps quantize the blocks of its rows into the twins — no quantization kernel before the matmuls.
constexpr int kRmsRegs = 32;

// The lane's weights of a row of n ≤ 32·kRmsRegs (element lane + 32k; 1 past n or without w): weights,
// so the kernels read them before wait_for_producer().
__device__ __forceinline__ void lane_row_weights(const float* w, int64_t n, int lane, float (&wv)[kRmsRegs]) {
#pragma unroll
  for (int k = 0; k < kRmsRegs; ++k) {
    const int64_t i = lane + 32 * k;
    wv[k] = w != nullptr && i < n ? w[i] : 1.0f;
  }
}

// The lane's elements of row xr (0 past n), all loads in flight at once, and the row's rms_norm inverse:
// lane l's fma chain over its elements in order, then the tree (warp_dot32's bits).
__device__ __forceinline__ float lane_row_inverse(const float* xr, int64_t n, float eps, int lane,
                                                  float (&xv)[kRmsRegs]) {
#pragma unroll
  for (int k = 0; k < kRmsRegs; ++k) {
    const int64_t i = lane + 32 * k;
    xv[k] = i < n ? xr[i] : 0.0f;
  }
  float p = 0.0f;
#pragma unroll
  for (int k = 0; k < kRmsRegs; ++k)
    if (lane + 32 * k < n) p = hd::fma(xv[k], xv[k], p);
  return rowops::rms_inverse(rowops::warp_tree(p), n, eps);
}

// rms_norm_for's quantized copies of y (the backend's twins, matmul.cuh plan_quant_twins): row r of twin
// i at dst[i] + r·row_bytes[i] in format[i].
struct NormQuant {
  int n = 0;
  uint8_t* dst[CudaBackend::kMaxTwins] = {};
  int64_t row_bytes[CudaBackend::kMaxTwins] = {};
  ActFormat format[CudaBackend::kMaxTwins] = {};
};

// Twin i's blocks of the CTA's rows (rows_s: row k of the CTA = y row r_first + k, n floats), one warp
// per block: act_quant_jobs_kernel's quantizers, the bits of quantizing the stored y.
template <ActFormat F>
__device__ void quantize_cta_rows(const float (*rows_s)[32 * kRmsRegs], int rows_here, int64_t n, int64_t r_first,
                                  uint8_t* dst, int64_t row_bytes, int warp, int lane) {
  constexpr int kB = ActOps<F>::kBlock, kBytes = ActOps<F>::kBytes;
  const int per_row = static_cast<int>(n / kB);
  for (int task = warp; task < rows_here * per_row; task += kWarpsPerBlock) {
    const int k = task / per_row, b = task % per_row;
    quantize_block_warp<F>(rows_s[k], nullptr, 0.0f, b, dst + (r_first + k) * row_bytes + b * kBytes, lane);
  }
}

template <bool kQuant>
__global__ void rms_norm_regs_kernel(const void* x, int64_t x_nb, const float* w, float eps, void* y, int64_t y_nb,
                                     int64_t rows, int64_t n, NormQuant q) {
  __shared__ float rows_s[kQuant ? kWarpsPerBlock : 1][32 * kRmsRegs];
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int64_t r_first = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock, r = r_first + warp;
  float wv[kRmsRegs];
  lane_row_weights(w, n, lane, wv);
  wait_for_producer();
  if (r < rows) {
    float xv[kRmsRegs];
    const float inv = lane_row_inverse(row_ptr<float>(x, x_nb, r), n, eps, lane, xv);
    float* yr = row_ptr<float>(y, y_nb, r);
#pragma unroll
    for (int k = 0; k < kRmsRegs; ++k) {
      const int64_t i = lane + 32 * k;
      if (i >= n) continue;
      const float v = w != nullptr ? (xv[k] * inv) * wv[k] : xv[k] * inv;
      yr[i] = v;
      if constexpr (kQuant) rows_s[warp][i] = v;
    }
  }
  if constexpr (kQuant) {
    __syncthreads();
    const int rows_here = static_cast<int>(rows - r_first < kWarpsPerBlock ? rows - r_first : kWarpsPerBlock);
    for (int i = 0; i < q.n; ++i) {
      if (q.format[i] == ActFormat::kQ8_0)
        quantize_cta_rows<ActFormat::kQ8_0>(rows_s, rows_here, n, r_first, q.dst[i], q.row_bytes[i], warp, lane);
      else
        quantize_cta_rows<ActFormat::kQ8_K>(rows_s, rows_here, n, r_first, q.dst[i], q.row_bytes[i], warp, lane);
    }
  }
}

// One CTA per long row (n ≥ kRmsBlockMin). The row streams through two shared-memory stages of
// kRmsStage floats: while warp 0 runs warp_dot32's lane chains over one stage (lane l: elements
// l, l+32, … in order, so the bits of warp_rms_norm_row), the other warps load the next, each thread
// with kRmsBatch loads in flight. Then every thread writes its share of y, again kRmsBatch elements
// at a time. (A loop of one load and one store per iteration waits one memory latency per element:
// 25 µs for a 16384-float row.)
constexpr int kRmsStage = 4096;
constexpr int kRmsBatch = 16;
constexpr int kRmsThreads = 1024;  // a 16384-float row: one batch of loads or stores per thread
constexpr int64_t kRmsBlockMin = 2048;

// dst[0, len) = src[0, len) by threads t of nthreads, kRmsBatch loads in flight per thread.
__device__ __forceinline__ void rms_stage_load(float* dst, const float* src, int len, int t, int nthreads) {
  for (int j0 = t; j0 < len; j0 += nthreads * kRmsBatch) {
    float v[kRmsBatch];
#pragma unroll
    for (int k = 0; k < kRmsBatch; ++k) {
      const int j = j0 + k * nthreads;
      v[k] = j < len ? src[j] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kRmsBatch; ++k) {
      const int j = j0 + k * nthreads;
      if (j < len) dst[j] = v[k];
    }
  }
}

__global__ void __launch_bounds__(kRmsThreads) rms_norm_block_kernel(const void* x, int64_t x_nb, const float* w, float eps,
                                                                  void* y, int64_t y_nb, int64_t rows, int64_t n) {
  wait_for_producer();
  __shared__ float xs[2][kRmsStage];
  __shared__ float inv_s;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, nthreads = static_cast<int>(blockDim.x);
  const int64_t stages = (n + kRmsStage - 1) / kRmsStage;
  auto stage_len = [n](int64_t s) { return static_cast<int>(n - s * kRmsStage < kRmsStage ? n - s * kRmsStage : kRmsStage); };
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = row_ptr<float>(x, x_nb, r);
    float* yr = row_ptr<float>(y, y_nb, r);
    rms_stage_load(xs[0], xr, stage_len(0), tid, nthreads);
    __syncthreads();
    float p = 0.0f;
    for (int64_t s = 0; s < stages; ++s) {
      if (tid < 32) {
        const float* b = xs[s & 1];
        const int len = stage_len(s);
        int j = lane;
        for (; j + 32 * (kRmsBatch - 1) < len; j += 32 * kRmsBatch) {
          float v[kRmsBatch];
#pragma unroll
          for (int k = 0; k < kRmsBatch; ++k) v[k] = b[j + 32 * k];
#pragma unroll
          for (int k = 0; k < kRmsBatch; ++k) p = hd::fma(v[k], v[k], p);
        }
        for (; j < len; j += 32) p = hd::fma(b[j], b[j], p);
      } else if (s + 1 < stages) {
        rms_stage_load(xs[(s + 1) & 1], xr + (s + 1) * kRmsStage, stage_len(s + 1), tid - 32, nthreads - 32);
      }
      __syncthreads();  // the stage read by the chains is the next one the loaders write
    }
    if (tid < 32) {
      const float ss = rowops::warp_tree(p);
      if (lane == 0) inv_s = rowops::rms_inverse(ss, n, eps);
    }
    __syncthreads();
    const float inv = inv_s;
    // y may alias x: each element is read and written by the same thread.
    for (int64_t i0 = tid; i0 < n; i0 += static_cast<int64_t>(nthreads) * kRmsBatch) {
      float xv[kRmsBatch], wv[kRmsBatch];
#pragma unroll
      for (int k = 0; k < kRmsBatch; ++k) {
        const int64_t i = i0 + static_cast<int64_t>(k) * nthreads;
        xv[k] = i < n ? xr[i] : 0.0f;
        wv[k] = i < n && w != nullptr ? w[i] : 1.0f;
      }
#pragma unroll
      for (int k = 0; k < kRmsBatch; ++k) {
        const int64_t i = i0 + static_cast<int64_t>(k) * nthreads;
        if (i < n) yr[i] = w != nullptr ? (xv[k] * inv) * wv[k] : xv[k] * inv;
      }
    }
    __syncthreads();  // inv_s and xs are reused by the next row
  }
}

// A row of up to kRmsWholeMax floats held whole in (dynamic) shared memory by one CTA of kRmsThreads:
// every thread issues all its loads at once (one memory latency for the row), warp 0 runs the lane
// chains from shared memory, then y is written from the shared copy. Bits of warp_rms_norm_row.
constexpr int64_t kRmsWholeMax = 16384;

__global__ void __launch_bounds__(kRmsThreads) rms_norm_whole_kernel(const void* x, int64_t x_nb, const float* w,
                                                                     float eps, void* y, int64_t y_nb, int64_t rows,
                                                                     int64_t n) {
  wait_for_producer();
  extern __shared__ __align__(16) float row[];
  __shared__ float inv_s;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, nthreads = static_cast<int>(blockDim.x);
  const int len = static_cast<int>(n);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = row_ptr<float>(x, x_nb, r);
    float* yr = row_ptr<float>(y, y_nb, r);
    rms_stage_load(row, xr, len, tid, nthreads);
    __syncthreads();
    if (tid < 32) {
      const float ss = rowops::warp_tree(rowops::lane_sum_squares(row, len, lane));
      if (lane == 0) inv_s = rowops::rms_inverse(ss, n, eps);
    }
    __syncthreads();
    const float inv = inv_s;
    for (int i0 = tid; i0 < len; i0 += nthreads * kRmsBatch) {
      float wv[kRmsBatch];
#pragma unroll
      for (int k = 0; k < kRmsBatch; ++k) {
        const int i = i0 + k * nthreads;
        wv[k] = i < len && w != nullptr ? w[i] : 1.0f;
      }
#pragma unroll
      for (int k = 0; k < kRmsBatch; ++k) {
        const int i = i0 + k * nthreads;
        if (i < len) yr[i] = w != nullptr ? (row[i] * inv) * wv[k] : row[i] * inv;
      }
    }
    __syncthreads();  // row and inv_s are reused by the next row
  }
}

// --- rope -----------------------------------------------------------------------------------------

// Row r (of rows) has position pos0 + (r / rows_per_pos) · pos_step; its trailing n_rot floats rotate.
__global__ void rope_kernel(void* x, int64_t x_nb, int64_t rows, int64_t row_len, int64_t rows_per_pos, int64_t pos0,
                            int64_t pos_step, int64_t n_rot, const float* freqs, bool inverse) {
  wait_for_producer();
  const int64_t half = n_rot / 2, total = rows * half;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t r = i / half, k = i % half;
    float* t = row_ptr<float>(x, x_nb, r) + (row_len - n_rot);
    rowops::rope_pair(t, k, pos0 + (r / rows_per_pos) * pos_step, freqs[k], inverse);
  }
}

// --- rms_norm + rope ------------------------------------------------------------------------------

// Rows of fewer than kRmsBlockMin floats whose rotated tail holds at most kNormRopeMaxRot floats take
// the fused kernel (DS4: q heads and the kv row, 512 floats with a 64-float tail); others run the two ops.
constexpr int64_t kNormRopeMaxRot = 256;

// rms_norm(x, w, eps, x) then rope(x, rows_per_pos, p0, n_rot, freqs, false) on one warp per row r of
// n floats (position p0 + r / rows_per_pos). The row's sum of squares is warp_dot32's (lane chains +
// tree) and every element is (x·inv)·w or x·inv as in warp_rms_norm_row; the leading n − n_rot go
// straight back to x, the trailing n_rot into the warp's slice of `tails` (dynamic shared memory,
// kWarpsPerBlock × n_rot floats), and after a __syncwarp lane k rotates pairs k, k + 32, … of that
// slice with rope_pair (the normalized floats are the pair's inputs) and writes them to x. Every lane
// has read the whole row (the dot) before any write, and each non-rotated element is read and written
// by one lane, so x is rewritten in place safely.
__global__ void rms_norm_rope_kernel(void* x, int64_t x_nb, const float* w, float eps, int64_t rows, int64_t n,
                                     int64_t rows_per_pos, int64_t p0, int64_t n_rot, const float* freqs) {
  wait_for_producer();
  extern __shared__ float tails[];
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  float* tail = tails + static_cast<int64_t>(warp) * n_rot;
  const int64_t n_keep = n - n_rot, half = n_rot / 2;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp; r < rows; r += warps) {
    float* xr = row_ptr<float>(x, x_nb, r);
    const float inv = rowops::rms_inverse(rowops::warp_dot32(xr, xr, n, lane), n, eps);
    // The normalized row: the kept columns in place, the rotated tail into the warp's slice.
    rowops::warp_rms_scale_row(xr, n, w, inv, lane, [&](int64_t i, float y) {
      if (i < n_keep) {
        xr[i] = y;
      } else {
        tail[i - n_keep] = y;
      }
    });
    __syncwarp();
    const int64_t pos = p0 + r / rows_per_pos;
    for (int64_t k = lane; k < half; k += 32) {
      rowops::rope_pair(tail, k, pos, freqs[k], false);
      xr[n_keep + 2 * k] = tail[2 * k];
      xr[n_keep + 2 * k + 1] = tail[2 * k + 1];
    }
    __syncwarp();  // the slice is the next row's
  }
}

// norm_rope's jobs whose rows fit registers — a norm job's n ≤ 32·kRmsRegs floats, every job's n_rot ≤
// 64·kRopeRegs (DS4: the query heads and the kv row, 512 floats with a 64-float tail; the indexer's query
// heads, 128 floats, rope only) — up to kNormRopeJobs per launch, one warp per row of any job. Launch row
// r is row r − first_row[j] of job j, for the j with first_row[j] ≤ r < first_row[j + 1].
constexpr int kRopeRegs = 2;
constexpr int kNormRopeJobs = 4;

struct NormRopeRegsJob {
  void* x = nullptr;
  int64_t x_nb = 0;
  const float* w = nullptr;  // norm weight or null
  const float* freqs = nullptr;
  float eps = 0.0f;
  bool norm = false;
  int64_t n = 0, rows_per_pos = 1, p0 = 0, n_rot = 0;
};
struct NormRopeRegsLaunch {
  NormRopeRegsJob job[kNormRopeJobs];
  int64_t first_row[kNormRopeJobs + 1] = {};
  int count = 0;
  int64_t tail_floats = 0;  // per warp: the largest n_rot of a norm job
};

// A norm job's row: the lane's elements and the inverse (lane_row_inverse: rms_norm_regs_kernel's bits),
// each element (x·inv)·w or x·inv, the leading n − n_rot back to x and the trailing n_rot into the warp's
// slice of `tails` (dynamic shared memory), then after a __syncwarp lane k rotates pairs k and k + 32 of
// that slice (rope_rotate with the (c, s) of the row's position: rope_pair's bits, the normalized floats
// its inputs) and writes them to x. Every lane has read the whole row before any write, and each
// non-rotated element is read and written by one lane, so x is rewritten in place safely. A rope-only
// job's row: lane k rotates pairs k and k + 32 of the tail in place (rope_kernel's bits). The lane's
// weights and (c, s) at the warp's first row — what reads nothing a producer writes — come before
// wait_for_producer(); a later row of another job or position reloads them.
__global__ void norm_rope_regs_kernel(const __grid_constant__ NormRopeRegsLaunch L) {
  extern __shared__ float tails[];
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  float* tail = tails + static_cast<int64_t>(warp) * L.tail_floats;
  const int64_t total = L.first_row[L.count], warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  const auto job_of = [&](int64_t r) {
    int j = 0;
    while (j + 1 < L.count && r >= L.first_row[j + 1]) ++j;
    return j;
  };
  float wv[kRmsRegs];
  int w_job = -1;
  float cs_c[kRopeRegs], cs_s[kRopeRegs];
  int cs_job = -1;
  int64_t cs_pos = -1;
  // The lane's weights (norm jobs) and rotations for launch row r.
  const auto prepare = [&](int64_t r) {
    const int j = job_of(r);
    const NormRopeRegsJob& J = L.job[j];
    if (J.norm && j != w_job) {
      lane_row_weights(J.w, J.n, lane, wv);
      w_job = j;
    }
    const int64_t pos = J.p0 + (r - L.first_row[j]) / J.rows_per_pos;
    if (j != cs_job || pos != cs_pos) {
#pragma unroll
      for (int k = 0; k < kRopeRegs; ++k) {
        const int64_t pair = lane + 32 * k;
        if (pair < J.n_rot / 2) rowops::rope_cs(pos, J.freqs[pair], false, cs_c[k], cs_s[k]);
      }
      cs_job = j;
      cs_pos = pos;
    }
    return j;
  };
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (r0 < total) prepare(r0);
  wait_for_producer();
  for (int64_t r = r0; r < total; r += warps) {
    const int j = prepare(r);
    const NormRopeRegsJob& J = L.job[j];
    float* xr = row_ptr<float>(J.x, J.x_nb, r - L.first_row[j]);
    const int64_t n_keep = J.n - J.n_rot, half = J.n_rot / 2;
    if (!J.norm) {
#pragma unroll
      for (int k = 0; k < kRopeRegs; ++k)
        if (lane + 32 * k < half) rowops::rope_rotate(xr + n_keep, lane + 32 * k, cs_c[k], cs_s[k]);
      continue;
    }
    float xv[kRmsRegs];
    const float inv = lane_row_inverse(xr, J.n, J.eps, lane, xv);
#pragma unroll
    for (int k = 0; k < kRmsRegs; ++k) {
      const int64_t i = lane + 32 * k;
      if (i >= J.n) continue;
      const float y = J.w != nullptr ? (xv[k] * inv) * wv[k] : xv[k] * inv;
      if (i < n_keep)
        xr[i] = y;
      else
        tail[i - n_keep] = y;
    }
    __syncwarp();
#pragma unroll
    for (int k = 0; k < kRopeRegs; ++k) {
      const int64_t pair = lane + 32 * k;
      if (pair >= half) continue;
      rowops::rope_rotate(tail, pair, cs_c[k], cs_s[k]);
      xr[n_keep + 2 * pair] = tail[2 * pair];
      xr[n_keep + 2 * pair + 1] = tail[2 * pair + 1];
    }
    __syncwarp();  // the slice is the next row's
  }
}

// --- HC -------------------------------------------------------------------------------------------

// pre/post and the Sinkhorn of token t (one thread each).
__global__ void hc_pre_mix_kernel(const void* mix, int64_t mix_nb, const float* scale3, const float* base, float eps,
                                  int64_t iters, int64_t n, int64_t hc, void* post, int64_t post_nb, void* comb,
                                  int64_t comb_nb) {
  wait_for_producer();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += stride) {
    const float* m = row_ptr<float>(mix, mix_nb, t);
    float* pt = row_ptr<float>(post, post_nb, t);
    float* C = row_ptr<float>(comb, comb_nb, t);
    for (int64_t i = 0; i < hc; ++i) pt[i] = 2.0f * det::sigmoid(m[hc + i] * scale3[1] + base[hc + i]);
    // Row softmax (+eps).
    for (int64_t i = 0; i < hc; ++i) {
      float* r = C + i * hc;
      float mx = -hd::f32_from_bits(0x7f800000u);
      for (int64_t j = 0; j < hc; ++j) {
        r[j] = m[2 * hc + i * hc + j] * scale3[2] + base[2 * hc + i * hc + j];
        mx = std_max(mx, r[j]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < hc; ++j) {
        r[j] = det::exp(r[j] - mx);
        sum = sum + r[j];
      }
      for (int64_t j = 0; j < hc; ++j) r[j] = hd::div(r[j], sum) + eps;
    }
    // Column norm, then (iters − 1) × (row norm, column norm).
    for (int64_t it = 0; it < (iters > 1 ? iters : 1); ++it) {
      if (it > 0) {
        for (int64_t i = 0; i < hc; ++i) {
          float s = 0.0f;
          for (int64_t j = 0; j < hc; ++j) s = s + C[i * hc + j];
          const float den = s + eps;
          for (int64_t j = 0; j < hc; ++j) C[i * hc + j] = hd::div(C[i * hc + j], den);
        }
      }
      for (int64_t j = 0; j < hc; ++j) {
        float s = 0.0f;
        for (int64_t i = 0; i < hc; ++i) s = s + C[i * hc + j];
        const float den = s + eps;
        for (int64_t i = 0; i < hc; ++i) C[i * hc + j] = hd::div(C[i * hc + j], den);
      }
    }
  }
}

// hc_pre_mix_kernel on one warp per token for hc·hc ≤ 32 (rowops::hc_mix_warp).
__global__ void hc_pre_mix_warp_kernel(const void* mix, int64_t mix_nb, const float* scale3, const float* base,
                                       float eps, int64_t iters, int64_t n, int hc, void* post, int64_t post_nb,
                                       void* comb, int64_t comb_nb) {
  wait_for_producer();
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t t = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  if (t >= n) return;
  rowops::hc_mix_warp(row_ptr<float>(mix, mix_nb, t), scale3, base, eps, iters, hc, row_ptr<float>(post, post_nb, t),
                      row_ptr<float>(comb, comb_nb, t), lane);
}

// y[t][c] = Σ_i pre_i·X[t][i·D + c] (fma chain, i ascending from 0), pre_i = σ(mix[t][i]·s0 + base_i) + eps.
// hc_pre's collapse and hc_head.
__global__ void hc_collapse_kernel(const void* mix, int64_t mix_nb, const float* scale0, const float* base, float eps,
                                   const void* X, int64_t X_nb, int64_t n, int64_t hc, int64_t D, void* y,
                                   int64_t y_nb) {
  wait_for_producer();
  const int64_t total = n * D, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const float s0 = scale0[0];
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t t = e / D, c = e % D;
    const float* m = row_ptr<float>(mix, mix_nb, t);
    const float* Xt = row_ptr<float>(X, X_nb, t);
    float acc = 0.0f;
    for (int64_t i = 0; i < hc; ++i) {
      const float pre = rowops::hc_pre_weight(m[i], s0, base[i], eps);
      acc = hd::fma(pre, Xt[i * D + c], acc);
    }
    row_ptr<float>(y, y_nb, t)[c] = acc;
  }
}

// X_out[t][j·D + c] = post[t][j]·y[t][c], then + comb[t][i·hc + j]·X[t][i·D + c] (fma, i ascending).
__global__ void hc_post_kernel(const void* X, int64_t X_nb, const void* y, int64_t y_nb, const void* post,
                               int64_t post_nb, const void* comb, int64_t comb_nb, int64_t n, int64_t hc, int64_t D,
                               void* out, int64_t out_nb) {
  wait_for_producer();
  const int64_t total = n * hc * D, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t c = e % D, j = (e / D) % hc, t = e / (D * hc);
    row_ptr<float>(out, out_nb, t)[j * D + c] =
        rowops::hc_post_value(row_ptr<float>(post, post_nb, t)[j], row_ptr<float>(y, y_nb, t)[c],
                              row_ptr<float>(comb, comb_nb, t), row_ptr<float>(X, X_nb, t) + c, D, hc, j);
  }
}

}  // namespace

// --- rms_norm, rope, rms_norm_rope ----------------------------------------------------------------

void CudaBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& y) {
  const int64_t rows = x.rows(), n = x.ne[0];
  if (x.type != TensorType::kF32 || y.type != TensorType::kF32 || y.ne[0] != n || y.rows() != rows ||
      (w.valid() && w.ne[0] != n)) {
    fail(invalid_argument("rms_norm: x " + dims(x) + ", y " + dims(y) + ", w " + dims(w) + " do not fit"));
    return;
  }
  if (rows <= 0) return;
  const float* wp = w.valid() ? static_cast<const float*>(w.data) : nullptr;
  if (n >= kRmsBlockMin && n <= kRmsWholeMax) {
    const size_t smem = static_cast<size_t>(n) * sizeof(float);
    static const cudaError_t attr = cudaFuncSetAttribute(rms_norm_whole_kernel,
                                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                         static_cast<int>(kRmsWholeMax * sizeof(float)));
    if (attr != cudaSuccess) return check(attr, "cudaFuncSetAttribute (rms_norm_whole_kernel)");
    launch("rms_norm_whole_kernel", rms_norm_whole_kernel, grid_for(rows, 1), kRmsThreads, smem, x.data, x.nb[1], wp,
           eps, y.data, y.nb[1], rows, n);
    return;
  }
  if (n >= kRmsBlockMin) {
    launch("rms_norm_block_kernel", rms_norm_block_kernel, grid_for(rows, 1), kRmsThreads, 0, x.data, x.nb[1], wp, eps,
           y.data, y.nb[1], rows, n);
    return;
  }
  if (n <= 32 * kRmsRegs) {
    launch("rms_norm_regs_kernel", rms_norm_regs_kernel<false>, grid_for(rows, kWarpsPerBlock), kThreads, 0, x.data,
           x.nb[1], wp, eps, y.data, y.nb[1], rows, n, NormQuant{});
    return;
  }
  launch("rms_norm_kernel", rms_norm_kernel, grid_for(rows, kWarpsPerBlock), kThreads, 0, x.data, x.nb[1], wp, eps,
         y.data, y.nb[1], rows, n);
}

void CudaBackend::rms_norm_for(const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                               const backend::MatmulConsumers& consumers) {
  n_twins = 0;  // y is rewritten
  const int64_t rows = y.rows(), n = y.ne[0];
  const bool shapes = x.type == TensorType::kF32 && y.type == TensorType::kF32 && x.ne[0] == n && x.rows() == rows &&
                      y.ne[1] == rows && (!w.valid() || w.ne[0] == n) && rows > 0 && n <= 32 * kRmsRegs;
  if (shapes) {
    const TwinScope twin_scope(*this);
    NormQuant q;
    q.n = plan_quant_twins(*this, y, consumers, n);
    if (q.n > 0) {
      for (int i = 0; i < q.n; ++i) {
        q.dst[i] = twins[i].act;
        q.row_bytes[i] = act_row_bytes(twins[i].format, n);
        q.format[i] = twins[i].format;
      }
      launch("rms_norm_regs_kernel<quant>", rms_norm_regs_kernel<true>, grid_for(rows, kWarpsPerBlock), kThreads, 0,
             x.data, x.nb[1], w.valid() ? static_cast<const float*>(w.data) : nullptr, eps, y.data, y.nb[1], rows, n,
             q);
      return;
    }
  }
  rms_norm(x, w, eps, y);
}

void CudaBackend::rope(const Tensor& x, int64_t rows_per_pos, int64_t p0, int64_t n_rot, const Tensor& freqs,
                       bool inverse) {
  if (x.type != TensorType::kF32 || rows_per_pos <= 0 || n_rot < 0 || n_rot % 2 != 0 || n_rot > x.ne[0] ||
      freqs.ne[0] * 2 < n_rot) {
    fail(invalid_argument("rope: x " + dims(x) + ", n_rot " + std::to_string(n_rot) + ", rows per position " +
                          std::to_string(rows_per_pos) + ", freqs " + dims(freqs) + " do not fit"));
    return;
  }
  const int64_t rows = x.rows();
  if (rows <= 0 || n_rot == 0) return;
  launch("rope_kernel", rope_kernel, grid_for(rows * (n_rot / 2), kThreads), kThreads, 0, x.data, x.nb[1], rows,
         x.ne[0], rows_per_pos, p0, 1, n_rot, static_cast<const float*>(freqs.data), inverse);
}

// Whether norm_rope_regs_kernel takes job j (else the job runs alone below).
static bool norm_rope_regs_fit(const backend::NormRopeJob& j) {
  return (!j.norm || j.x.ne[0] <= 32 * kRmsRegs) && j.n_rot <= 64 * kRopeRegs;
}

void CudaBackend::norm_rope(std::span<const backend::NormRopeJob> jobs) {
  for (const backend::NormRopeJob& j : jobs) {
    const int64_t n = j.x.ne[0];
    if (j.x.type != TensorType::kF32 || (j.norm && j.w.valid() && (j.w.type != TensorType::kF32 || j.w.ne[0] != n)) ||
        j.rows_per_pos <= 0 || j.n_rot < 0 || j.n_rot % 2 != 0 || j.n_rot > n ||
        (j.n_rot > 0 && (j.freqs.type != TensorType::kF32 || j.freqs.ne[0] * 2 < j.n_rot))) {
      fail(invalid_argument("norm_rope: x " + dims(j.x) + ", w " + dims(j.w) + ", n_rot " + std::to_string(j.n_rot) +
                            ", rows per position " + std::to_string(j.rows_per_pos) + ", freqs " + dims(j.freqs) +
                            " do not fit"));
      return;
    }
  }
  // The register kernel: its jobs kNormRopeJobs to a launch (one job per launch with --cuda-disable
  // norm-rope-batch).
  const int per_launch = forms().norm_rope_batch ? kNormRopeJobs : 1;
  NormRopeRegsLaunch L;
  const auto flush = [&] {  // every job taken has rows
    if (L.count > 0)
      launch("norm_rope_regs_kernel", norm_rope_regs_kernel, grid_for(L.first_row[L.count], kWarpsPerBlock), kThreads,
             static_cast<size_t>(kWarpsPerBlock * L.tail_floats) * sizeof(float), L);
    L = {};
  };
  for (const backend::NormRopeJob& j : jobs) {
    const int64_t rows = j.x.rows(), n = j.x.ne[0];
    if (rows <= 0 || (!j.norm && j.n_rot == 0)) continue;
    if (!norm_rope_regs_fit(j)) {
      // Long rows (rms_norm's CTA-per-row kernels) and wide tails (shared memory) take the two ops; the
      // rest the shared-memory-tail kernel.
      if (!j.norm) {
        rope(j.x, j.rows_per_pos, j.p0, j.n_rot, j.freqs, false);
      } else if (n >= kRmsBlockMin || j.n_rot > kNormRopeMaxRot) {
        Backend::norm_rope({&j, 1});
      } else {
        const size_t smem = static_cast<size_t>(kWarpsPerBlock * j.n_rot) * sizeof(float);
        launch("rms_norm_rope_kernel", rms_norm_rope_kernel, grid_for(rows, kWarpsPerBlock), kThreads, smem,
               j.x.data, j.x.nb[1], j.w.valid() ? static_cast<const float*>(j.w.data) : nullptr, j.eps, rows, n,
               j.rows_per_pos, j.p0, j.n_rot, static_cast<const float*>(j.freqs.data));
      }
      continue;
    }
    NormRopeRegsJob& k = L.job[L.count];
    k.x = j.x.data;
    k.x_nb = j.x.nb[1];
    k.w = j.norm && j.w.valid() ? static_cast<const float*>(j.w.data) : nullptr;
    k.freqs = static_cast<const float*>(j.freqs.data);
    k.eps = j.eps;
    k.norm = j.norm;
    k.n = n;
    k.rows_per_pos = j.rows_per_pos;
    k.p0 = j.p0;
    k.n_rot = j.n_rot;
    if (j.norm) L.tail_floats = std::max(L.tail_floats, j.n_rot);
    L.first_row[L.count + 1] = L.first_row[L.count] + rows;
    if (++L.count == per_launch) flush();
  }
  flush();
}

// --- HC mixing ------------------------------------------------------------------------------------

void CudaBackend::launch_hc_mix(const Tensor& mix_t, const float* scale3, const float* base, float eps, int64_t iters,
                                const Tensor& post, const Tensor& comb, bool side) {
  const int64_t n = post.ne[1], hc = post.ne[0];
  if (hc * hc <= 32)
    launch_as(side, "hc_pre_mix_warp_kernel", hc_pre_mix_warp_kernel, grid_for(n, kWarpsPerBlock), kThreads, 0,
              mix_t.data, mix_t.nb[1], scale3, base, eps, iters, n, static_cast<int>(hc), post.data, post.nb[1],
              comb.data, comb.nb[1]);
  else
    launch_as(side, "hc_pre_mix_kernel", hc_pre_mix_kernel, grid_for(n, 64), 64, 0, mix_t.data, mix_t.nb[1], scale3,
              base, eps, iters, n, hc, post.data, post.nb[1], comb.data, comb.nb[1]);
}

void CudaBackend::hc_pre(const Tensor& mix_t, const Tensor& scale_t, const Tensor& base_t, float eps, int64_t iters,
                         const Tensor& X, const Tensor& x, const Tensor& post, const Tensor& comb) {
  const int64_t n = x.ne[1], D = x.ne[0], hc = post.ne[0], n_mix = (2 + hc) * hc;
  if (X.ne[0] != hc * D || X.ne[1] != n || mix_t.ne[0] != n_mix || mix_t.ne[1] != n || post.ne[1] != n ||
      comb.ne[0] != hc * hc || comb.ne[1] != n || base_t.ne[0] * base_t.ne[1] < n_mix ||
      scale_t.ne[0] * scale_t.ne[1] < 3) {
    fail(invalid_argument("hc_pre: mix " + dims(mix_t) + ", X " + dims(X) + ", x " + dims(x) + ", post " + dims(post) +
                          ", comb " + dims(comb) + " do not fit"));
    return;
  }
  if (n <= 0) return;
  const float* scale3 = static_cast<const float*>(scale_t.data);
  const float* base = static_cast<const float*>(base_t.data);
  join_side();  // a side Sinkhorn still open writes post and comb too
  launch_hc_mix(mix_t, scale3, base, eps, iters, post, comb, false);
  if (D <= 0) return;
  launch("hc_collapse_kernel (hc_pre)", hc_collapse_kernel, grid_for(n * D, kThreads), kThreads, 0, mix_t.data,
         mix_t.nb[1], scale3, base, eps, X.data, X.nb[1], n, hc, D, x.data, x.nb[1]);
}

void CudaBackend::hc_post(const Tensor& X, const Tensor& y, const Tensor& post, const Tensor& comb,
                          const Tensor& X_out) {
  const int64_t n = y.ne[1], D = y.ne[0], hc = post.ne[0];
  if (X.ne[0] != hc * D || X.ne[1] != n || X_out.ne[0] != hc * D || X_out.ne[1] != n || post.ne[1] != n ||
      comb.ne[0] != hc * hc || comb.ne[1] != n) {
    fail(invalid_argument("hc_post: X " + dims(X) + ", y " + dims(y) + ", post " + dims(post) + ", comb " +
                          dims(comb) + ", X_out " + dims(X_out) + " do not fit"));
    return;
  }
  if (n <= 0 || hc <= 0 || D <= 0) return;
  join_side();  // post and comb may come from a side Sinkhorn (hc_pre_norm)
  launch("hc_post_kernel", hc_post_kernel, grid_for(n * hc * D, kThreads), kThreads, 0, X.data, X.nb[1], y.data,
         y.nb[1], post.data, post.nb[1], comb.data, comb.nb[1], n, hc, D, X_out.data, X_out.nb[1]);
}

void CudaBackend::hc_head(const Tensor& mix, const Tensor& scale, const Tensor& base, float eps, const Tensor& X,
                          const Tensor& y) {
  const int64_t n = y.ne[1], D = y.ne[0], hc = D > 0 ? X.ne[0] / D : 0;
  if (X.ne[0] != hc * D || X.ne[1] != n || mix.ne[0] < hc || mix.ne[1] != n || base.ne[0] * base.ne[1] < hc) {
    fail(invalid_argument("hc_head: mix " + dims(mix) + ", X " + dims(X) + ", y " + dims(y) + " do not fit"));
    return;
  }
  if (n <= 0 || D <= 0) return;
  launch("hc_collapse_kernel (hc_head)", hc_collapse_kernel, grid_for(n * D, kThreads), kThreads, 0, mix.data,
         mix.nb[1], static_cast<const float*>(scale.data), static_cast<const float*>(base.data), eps, X.data, X.nb[1],
         n, hc, D, y.data, y.nb[1]);
}

}  // namespace dsv4::cuda
